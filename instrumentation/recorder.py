"""The per-rank trace writer: an in-memory list of tuples, serialised by a background thread.

Hot path: :meth:`TraceRecorder.add` appends one tuple to a list (``list.append`` is atomic
under the GIL, so no lock). A daemon thread wakes every ``flush_interval_s`` (default
0.5 s), serialises the records present at that moment into Chrome trace-event JSON, writes
them with one ``write`` and flushes the file, then deletes exactly those records from the
front of the list (``del buf[:n]``), so records appended meanwhile are kept.

File layout (``docs/run-directory.md``): ``[`` then one record per line, each followed by
``,``. A clean :meth:`close` writes a last ``scalescope_end`` metadata record without the
comma and ``]``, so a cleanly closed file is strict JSON; a killed process leaves an
unterminated array that Perfetto, ``chrome://tracing`` and scalescope's reader accept.

Any ``OSError`` (read-only directory, disk full) disables the recorder with one warning;
training is never interrupted.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from instrumentation._env import warn_once, warn_write_error
from instrumentation.clock import Anchor, fmt_us

__all__ = ["FORMAT_VERSION", "TraceRecorder", "closed_status", "trace_path"]

FORMAT_VERSION = 1
#: Name of the metadata record a clean close writes last, before the closing ``]``.
END_RECORD = "scalescope_end"


def trace_path(run_dir: str | os.PathLike[str], rank: int) -> Path:
    """The trace file of ``rank`` in a run directory: ``rank-NNNNN.trace.json``."""
    return Path(run_dir) / f"rank-{rank:05d}.trace.json"


def closed_status(path: str | os.PathLike[str]) -> str | None:
    """The ``status`` a trace was closed with (``"ok"``, ``"killed"``, ...), read from its
    last record; ``None`` when the file is missing, unreadable or not closed (the rank died)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - 4096))
            lines = fh.read().rstrip().splitlines()
        if len(lines) < 2 or lines[-1].strip() != b"]":
            return None
        end = json.loads(lines[-2])
        if end.get("name") != END_RECORD:
            return None
        status = end.get("args", {}).get("status")
        return status if isinstance(status, str) else None
    except (OSError, ValueError, AttributeError):
        return None

# Record tuple layout (kept flat for a cheap append):
# (cat, name, t0_mono_ns, t1_mono_ns or None for an instant, tid, step, epoch, extra dict | None)
# cat "meta" writes a thread_name metadata record naming track ``tid`` ``name``.


class TraceRecorder:
    """Write one rank's trace file incrementally.

    Parameters
    ----------
    path
        The ``rank-NNNNN.trace.json`` file (created or truncated).
    rank, local_rank, host
        This process' identity, written into the ``scalescope_clock`` metadata record.
    anchor
        The wall/monotonic clock pair used to put events on the Unix epoch.
    flush_interval_s
        Period of the background flusher (keep it below 1 s: the crash-safety promise is
        that a killed rank loses at most about one second of events).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        rank: int,
        local_rank: int,
        host: str,
        anchor: Anchor,
        flush_interval_s: float = 0.5,
        start_thread: bool = True,
    ):
        self.path = Path(path)
        self.rank = int(rank)
        self.anchor = anchor
        self.flush_interval_s = float(flush_interval_s)
        self.buffer: list[tuple] = []
        self.enabled = True
        self.closed = False
        self.n_written = 0
        self.last_flush_mono_ns = time.perf_counter_ns()
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._names: dict[str, str] = {}
        self._fh = None
        header = [
            {"name": "process_name", "ph": "M", "pid": self.rank, "tid": 0,
             "args": {"name": f"rank {self.rank} @ {host}"}},
            {"name": "process_sort_index", "ph": "M", "pid": self.rank, "tid": 0,
             "args": {"sort_index": self.rank}},
            {"name": "thread_name", "ph": "M", "pid": self.rank, "tid": threading.get_native_id(),
             "args": {"name": "main"}},
            {"name": "scalescope_clock", "ph": "M", "pid": self.rank, "tid": 0,
             "args": {"rank": self.rank, "local_rank": int(local_rank), "host": host,
                      "os_pid": os.getpid(), "wall_ns": anchor.wall_ns,
                      "mono_ns": anchor.mono_ns, "format_version": FORMAT_VERSION}},
        ]
        try:
            self._fh = open(self.path, "w", encoding="utf-8")  # noqa: SIM115 - kept open
            self._fh.write("[\n" + "".join(json.dumps(h, separators=(",", ":")) + ",\n"
                                           for h in header))
            self._fh.flush()
        except OSError as exc:
            self._fail(exc)
        self._thread = None
        if start_thread and self.enabled:
            self._thread = threading.Thread(
                target=self._run, name="scalescope-trace-flusher", daemon=True
            )
            self._thread.start()

    # -- hot path -----------------------------------------------------------------------
    def add(self, rec: tuple) -> None:
        """Append one record tuple (see the module's layout comment)."""
        self.buffer.append(rec)

    # -- serialisation ------------------------------------------------------------------
    def _name(self, name: str) -> str:
        s = self._names.get(name)
        if s is None:
            s = self._names[name] = json.dumps(str(name))
        return s

    def _serialise(self, recs: list[tuple]) -> str:
        wall, mono, pid = self.anchor.wall_ns, self.anchor.mono_ns, self.rank
        out = []
        for cat, name, t0, t1, tid, step, epoch, extra in recs:
            if cat == "meta":  # name a synthetic track (DDP buckets)
                out.append(f'{{"name":"thread_name","ph":"M","pid":{pid},"tid":{tid},'
                           f'"args":{{"name":{self._name(name)}}}}},\n')
                continue
            args = {} if extra is None else dict(extra)
            if step is not None:
                args["step"] = step
            if epoch is not None:
                args["epoch"] = epoch
            ts = fmt_us(wall + (t0 - mono))
            if t1 is None:
                out.append(
                    f'{{"name":{self._name(name)},"cat":"{cat}","ph":"i","s":"t","ts":{ts},'
                    f'"pid":{pid},"tid":{tid},"args":{_args_json(args)}}},\n'
                )
            else:
                out.append(
                    f'{{"name":{self._name(name)},"cat":"{cat}","ph":"X","ts":{ts},'
                    f'"dur":{fmt_us(max(t1 - t0, 0))},"pid":{pid},"tid":{tid},'
                    f'"args":{_args_json(args)}}},\n'
                )
        return "".join(out)

    def flush(self) -> None:
        """Write and flush every record buffered so far (thread-safe)."""
        with self._lock:
            buf = self.buffer
            n = len(buf)
            self.last_flush_mono_ns = time.perf_counter_ns()
            if not n:
                return
            if not self.enabled or self._fh is None:
                del buf[:n]  # bound memory once writing has failed
                return
            try:
                text = self._serialise(buf[:n])
            except Exception as exc:  # a bad record must not stop the flusher
                del buf[:n]
                warn_once(f"trace-serialise:{self.path}",
                          f"could not serialise {n} trace record(s) for {self.path}: {exc!r}; "
                          "they were dropped")
                return
            try:
                self._fh.write(text)
                self._fh.flush()
                self.n_written += n
            except OSError as exc:
                self._fail(exc)
            del buf[:n]

    def _fail(self, exc: OSError) -> None:
        self.enabled = False
        warn_write_error(
            f"trace-io:{self.path}",
            f"cannot write the trace {self.path} ({exc.strerror or exc}); this rank's trace is "
            "off from now on, training goes on",
            exc,
        )
        if self._fh is not None:
            try:
                self._fh.close()
            except OSError:
                pass
            self._fh = None

    def _run(self) -> None:
        while not self._stop.wait(self.flush_interval_s):
            try:
                self.flush()
            except Exception as exc:  # pragma: no cover - defensive
                warn_once("trace-flusher", f"trace flusher failed: {exc!r}")
                return

    def close(self, *, status: str | None = None, extra: dict | None = None) -> None:
        """Stop the flusher, write the remaining records and terminate the JSON array;
        ``extra`` joins the end record's ``args`` (the device timer's summary)."""
        if self.closed:
            return
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        with self._lock:
            if self.closed:
                return
            self.flush()
            self.closed = True
            if self._fh is None:
                return
            end = {"name": END_RECORD, "ph": "M", "pid": self.rank, "tid": 0,
                   "args": {"wall_ns": time.time_ns(), "status": status,
                            "n_events": self.n_written, **(extra or {})}}
            try:
                self._fh.write(json.dumps(end, separators=(",", ":")) + "\n]\n")
                self._fh.flush()
                self._fh.close()
            except OSError as exc:
                self._fail(exc)
            self._fh = None


def _jsonable(value: object) -> object:
    """A value JSON cannot encode, as a number or text (``json.dumps(default=...)``): a NumPy
    or one-element torch scalar as its number, a small array or tensor as a list, a path as
    its text, anything else as ``str``."""
    try:
        size = getattr(value, "size", None)
        n = value.numel() if callable(getattr(value, "numel", None)) else size if isinstance(size, int) else None
        if n == 1 and callable(getattr(value, "item", None)):
            return value.item()
        if n is not None and n <= 64 and callable(getattr(value, "tolist", None)):
            return value.tolist()
    except Exception:  # a tensor on a device that cannot be read now: text below
        pass
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return _text(value)


def _text(value: object) -> str:
    try:
        return str(value)
    except Exception:  # a __str__ that fails: its type still says something
        return f"<{type(value).__name__}>"


def _args_json(args: dict) -> str:
    """The ``args`` of one record as JSON. Values JSON cannot encode become numbers or text
    (:func:`_jsonable`); args that still fail (a key that is not a string, a cycle) become
    text, so one odd ``mark()`` argument costs that record's detail, never the trace."""
    try:
        return json.dumps(args, separators=(",", ":"), default=_jsonable)
    except Exception:  # a key that is not a string, a cycle, a failing __str__
        return json.dumps({_text(k): _one(v) for k, v in args.items()}, separators=(",", ":"), default=_jsonable)


def _one(value: object) -> object:
    """One argument as it encodes, else as text (a dict with a tuple key, a cycle)."""
    try:
        json.dumps(value, default=_jsonable)
        return value
    except Exception:  # anything an argument's own methods raise costs only it
        return _text(value)
