"""The `scalescope` command: help, clean errors instead of tracebacks."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from analysis import cli

SCALESCOPE = Path(sys.executable).parent / "scalescope"


def test_help_lists_subcommands(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for sub in ("sweep", "report", "convert", "doctor", "demo", "formats"):
        assert sub in out


def test_no_command_prints_help(capsys):
    assert cli.main([]) == cli.EXIT_USAGE
    assert "usage" in capsys.readouterr().out


def test_convert_missing_file_is_a_clean_error(tmp_path, capsys):
    rc = cli.main(["convert", str(tmp_path / "nope.json")])
    err = capsys.readouterr().err
    assert rc == 1
    assert "nope.json" in err and "not found" in err
    assert "Traceback" not in err


def test_convert_unknown_format_names_known_formats(tmp_path, capsys):
    bad = tmp_path / "notes.txt"
    bad.write_text("hello, this is not a trace\n")
    rc = cli.main(["convert", str(bad)])
    err = capsys.readouterr().err
    assert rc == 1
    assert "notes.txt" in err and "Known formats" in err


def test_console_script_never_shows_a_traceback(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    p = subprocess.run([str(SCALESCOPE), "convert", str(empty)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1
    assert "empty" in p.stderr
    assert "Traceback" not in p.stderr


# ---------------------------------------------------------------- terminal output

HOSTILE = "boom\r\x08\x9b6n\u202eevil\x1b]0;pwned title\x07\x1b[2J\x1b[31mred\tend"


def _experiment_with_failed_run(root: Path, *, run_id: str = "ddp-gloo_np2_bs8_r1") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    manifest = {
        "format": "scalescope.experiment", "format_version": 1, "name": root.name,
        "runs": [{"run_id": run_id, "status": "failed", "exit_code": 1, "wall_s": 1.5,
                  "config": {"backend": "ddp-gloo", "np": 2, "batch_size": 8, "repeat": 1},
                  "log_tail": f"Traceback (most recent call last):\nRuntimeError: {HOSTILE}"}],
    }
    (root / "experiment.json").write_text(json.dumps(manifest), encoding="utf-8")
    return root


def test_printable_escapes_every_control_character_but_newline_and_tab():
    from instrumentation.progress import printable

    text = "".join(map(chr, range(0x00, 0xA0))) + "\u202e\u2066ok"
    shown = printable(text)
    assert "\n" in shown and "\t" in shown
    assert not any((ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) < 0xA0 for c in shown)
    assert "\\x1b" in shown and "\\x9b" in shown and "\\u202e" in shown and "\\x0d" in shown
    assert printable("plain text, ünïcode, 日本\n") == "plain text, ünïcode, 日本\n"


def test_status_escapes_the_log_tail(tmp_path, capsys):
    exp = _experiment_with_failed_run(tmp_path / "exp")
    assert cli.main(["status", str(exp)]) == 0
    out = capsys.readouterr().out
    assert "ddp-gloo_np2_bs8_r1" in out and "failed" in out
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out and "\x9b" not in out
    assert "\\x1b]0;pwned title\\x07" in out  # shown, escaped


def test_status_console_script_escapes_a_hostile_run_id(tmp_path):
    exp = _experiment_with_failed_run(tmp_path / "exp", run_id="run\x1b[2J\x1b]0;x\x07")
    p = subprocess.run([str(SCALESCOPE), "status", str(exp)], capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert b"\x1b" not in p.stdout + p.stderr and b"\x07" not in p.stdout + p.stderr
    assert b"run\\x1b[2J" in p.stdout


def test_errors_quoting_file_content_are_escaped(tmp_path, capsys):
    bad = tmp_path / "exp"
    bad.mkdir()
    (bad / "experiment.json").write_text("\x1b]0;title\x07 not json", encoding="utf-8")
    assert cli.main(["status", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err and "experiment.json" in err


# ---------------------------------------------------------------- unwritable locations, full disks

EXPERIMENT = Path(__file__).parent / "data" / "experiment_small"


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCALESCOPE), *args], capture_output=True, text=True, timeout=timeout)


def _one_clean_line(p: subprocess.CompletedProcess, *names: str) -> str:
    err = p.stderr.strip()
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err and "This is a bug" not in err and "unexpected" not in err
    for name in names:
        assert name in err, (name, err)
    return err


@contextlib.contextmanager
def _read_only(path: Path):
    """``path`` made read-only for real: a read-only bind mount as root (root ignores the
    permission bits), the permission bits otherwise."""
    if os.geteuid() == 0:
        mnt = path.with_name(path.name + "-ro")
        mnt.mkdir()
        if subprocess.run(["mount", "--bind", str(path), str(mnt)], capture_output=True).returncode:
            pytest.skip("cannot bind-mount here (no mount privilege in this container)")
        try:
            if subprocess.run(["mount", "-o", "remount,ro,bind", str(mnt)], capture_output=True).returncode:
                pytest.skip("cannot remount read-only here")
            yield mnt
        finally:
            subprocess.run(["umount", str(mnt)], capture_output=True)
    else:
        modes = {p: p.stat().st_mode for p in [path, *path.rglob("*")] if p.is_dir()}
        for p in modes:
            p.chmod(0o555)
        try:
            yield path
        finally:
            for p, m in modes.items():
                p.chmod(m)


@pytest.fixture
def read_only_experiment(tmp_path):
    exp = tmp_path / "exp"
    shutil.copytree(EXPERIMENT, exp, ignore=shutil.ignore_patterns("build.py", "README.md"))
    with _read_only(exp) as ro:
        yield ro


def test_report_into_a_read_only_experiment_is_one_line(read_only_experiment):
    p = _run("report", str(read_only_experiment), "--no-static")
    _one_clean_line(p, str(read_only_experiment / "report"))


def test_convert_into_a_read_only_directory_is_one_line(read_only_experiment, tmp_path):
    run = read_only_experiment / "none_np1_bs10_r1"
    p = _run("convert", str(run), "--to", "csv")
    _one_clean_line(p, str(run))
    assert not list(run.glob("*.events.csv")) and not list(run.glob("*.samples.csv"))


@pytest.mark.parametrize("command", [
    ["sweep", "--np", "1", "--out", "{out}", "--", "python", "-c", "pass"],
    ["bench-allreduce", "--np", "1", "--backend", "gloo", "--max-bytes", "4K", "--out", "{out}"],
    ["demo", "--quick", "--out", "{out}"],
], ids=lambda c: c[0])
def test_commands_into_a_read_only_out_are_one_line(read_only_experiment, command):
    out = read_only_experiment / "new"
    p = _run(*(str(out) if a == "{out}" else a for a in command))
    _one_clean_line(p, str(out))
    assert not out.exists()


@pytest.mark.parametrize("command", [
    ["convert", str(EXPERIMENT / "none_np1_bs10_r1"), "--to", "csv", "--out", "{out}"],
    ["report", str(EXPERIMENT), "--no-static", "--out", "{out}"],
    ["sweep", "--np", "1", "--out", "{out}", "--", "python", "-c", "pass"],
], ids=lambda c: c[0])
def test_an_out_that_is_a_file_is_named_in_one_line(tmp_path, command):
    """``--out`` naming a file (or a folder below one): the line says which path is a file."""
    blocker = tmp_path / "a-file"
    blocker.write_text("keep me\n")
    for out in (blocker, blocker / "below"):
        p = _run(*(str(out) if a == "{out}" else a for a in command))
        err = _one_clean_line(p, str(blocker))
        assert "is a file" in err or "not a directory" in err.lower() or "not a folder" in err, err
        assert blocker.read_text() == "keep me\n"


@contextlib.contextmanager
def _small_filesystem(where: Path, size: str):
    """A tmpfs of ``size`` mounted at ``where`` (root only): a disk that fills for real."""
    if os.geteuid() != 0:
        pytest.skip("a small file system needs root (mount -t tmpfs)")
    where.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                      capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], capture_output=True)


def test_report_on_a_full_disk_keeps_the_previous_page(tmp_path):
    first = _run("report", str(EXPERIMENT), "--out", str(tmp_path / "rep"), "--no-static")
    assert first.returncode == 0, first.stderr
    previous = (tmp_path / "rep" / "index.html").read_bytes()
    # room for the previous page and the tables, not for a second page beside it
    with _small_filesystem(tmp_path / "disk", f"{len(previous) + 600_000}") as disk:
        shutil.copytree(tmp_path / "rep", disk / "rep")
        p = _run("report", str(EXPERIMENT), "--out", str(disk / "rep"), "--no-static")
        err = _one_clean_line(p, str(disk / "rep"))
        assert "no space left" in err
        assert (disk / "rep" / "index.html").read_bytes() == previous
        assert not [f.name for f in (disk / "rep").iterdir() if f.name.endswith(".tmp")]



def test_warnings_on_the_command_line_are_escaped():
    import io
    import warnings

    from analysis.errors import RecoveryWarning

    buf = io.StringIO()
    cli._show_warning(RecoveryWarning(f"trace.json: dropped a record: {HOSTILE}"),
                      RecoveryWarning, "x.py", 1, file=buf)
    assert "\x1b" not in buf.getvalue() and "\\x1b]0;pwned title" in buf.getvalue()
    shown = warnings.showwarning
    assert cli.main(["formats"]) == 0
    assert warnings.showwarning is shown  # called in-process: the caller's hook is back


def test_any_text_is_printable_and_nothing_else_changes():
    hypothesis = pytest.importorskip("hypothesis")
    from hypothesis import strategies as st

    from instrumentation.progress import printable

    control = {*range(0x00, 0x20), *range(0x7F, 0xA0), 0x200E, 0x200F, *range(0x202A, 0x202F),
               *range(0x2066, 0x206A)} - {0x0A, 0x09}

    @hypothesis.settings(max_examples=300, deadline=None, derandomize=True, database=None)
    @hypothesis.given(st.text(alphabet=st.characters(codec="utf-8"), max_size=60))
    def check(text):
        shown = printable(text)
        assert not any(ord(c) in control for c in shown)
        # every other character is kept, in order; each control one becomes its escape
        def escaped(c: str) -> str:
            if ord(c) not in control:
                return c
            return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"

        expected = "".join(map(escaped, text))
        assert shown == expected

    check()


def test_status_never_passes_control_characters_from_a_log_tail(tmp_path, capsys):
    hypothesis = pytest.importorskip("hypothesis")
    from hypothesis import strategies as st

    @hypothesis.settings(max_examples=40, deadline=None, derandomize=True, database=None)
    @hypothesis.given(st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=80))
    def check(tail):
        exp = tmp_path / "exp"
        shutil.rmtree(exp, ignore_errors=True)
        _experiment_with_failed_run(exp)
        data = json.loads((exp / "experiment.json").read_text(encoding="utf-8"))
        data["runs"][0]["log_tail"] = tail
        data["runs"][0]["exit_note"] = None
        (exp / "experiment.json").write_text(json.dumps(data), encoding="utf-8")
        capsys.readouterr()
        assert cli.main(["status", str(exp)]) == 0
        out, err = capsys.readouterr()
        assert not any((ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) < 0xA0 for c in out + err), out

    check()


def _fill(disk: Path) -> None:
    """Leave no room on ``disk`` (a tmpfs): write until it refuses."""
    with open(disk / "filler", "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError:
            pass


def test_convert_onto_a_full_disk_is_one_line_and_leaves_no_partial_file(tmp_path):
    run = EXPERIMENT / "none_np1_bs10_r1"
    with _small_filesystem(tmp_path / "disk", "1m") as disk:
        _fill(disk)
        p = _run("convert", str(run), "--to", "csv", "-o", str(disk / "out"))
        err = _one_clean_line(p)
        assert "no space left" in err
        left = [f.name for f in (disk / "out").rglob("*")] if (disk / "out").exists() else []
        assert not left, f"a partial output was left: {left}"


def test_sweep_onto_a_full_disk_is_one_line(tmp_path):
    with _small_filesystem(tmp_path / "disk", "1m") as disk:
        _fill(disk)
        out = disk / "EXP"
        p = _run("sweep", "--backend", "", "--baseline", "--out", str(out), "--", "python", "-c", "pass")
        err = _one_clean_line(p)
        assert "no space left" in err and str(out) in err


def test_a_ctrl_c_while_the_interpreter_tears_down_changes_nothing():
    """After the command's work, the interpreter's finalisation would put the default SIGINT
    action back (a Ctrl-C there killed the process silently, status -2): from the exit
    handlers on it is ignored and the command ends with its own status. The SIGINT here
    comes from an exit handler that runs after scalescope's (they run last-registered first)."""
    code = ("import atexit, os, signal, sys\n"
            "atexit.register(lambda: os.kill(os.getpid(), signal.SIGINT))\n"
            "sys.argv = ['scalescope', 'formats']\n"
            "from analysis import cli\n"
            "sys.exit(cli.main())\n")
    root = Path(__file__).resolve().parents[1]
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root,
                       env={**os.environ, "PYTHONPATH": str(root)})
    assert p.returncode == 0, (p.returncode, p.stderr)
    assert "interrupted" not in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_a_command_started_with_ctrl_c_ignored_keeps_ignoring_it():
    """``scalescope sweep ... &`` in a script: the shell starts it with SIGINT ignored so that a
    Ctrl-C meant for the script leaves it running. scalescope keeps it so (as Python and every
    shell tool do): the command runs to its own end."""
    code = ("import os, signal, sys\n"
            "from analysis import cli\n"
            "cli._install_sigint()\n"
            "assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN, signal.getsignal(signal.SIGINT)\n"
            "os.kill(os.getpid(), signal.SIGINT)\n"
            "sys.argv = ['scalescope', 'formats']\n"
            "sys.exit(cli.main())\n")
    root = Path(__file__).resolve().parents[1]
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root,
                       env={**os.environ, "PYTHONPATH": str(root)},
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert p.returncode == 0, (p.returncode, p.stderr)
    assert "interrupted" not in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_a_ctrl_c_python_could_not_raise_still_ends_the_command_as_interrupted():
    """A Ctrl-C that lands in a weakref callback (or ``__del__``) is only printed by Python
    ("Exception ignored in ...") and the command ran on to its end (the report Ctrl-C test
    under load). The command now ends as interrupted: one line, 130, nothing else."""
    code = ("import os, signal, sys, weakref\n"
            "from analysis import cli\n"
            "class Thing: pass\n"
            "def work(args):\n"
            "    thing = Thing()\n"
            "    ref = weakref.ref(thing, lambda r: os.kill(os.getpid(), signal.SIGINT))\n"
            "    del thing\n"
            "    print('ran to its end', flush=True)\n"
            "    return 0\n"
            "cli._call = work\n"
            "sys.argv = ['scalescope', 'formats']\n"
            "sys.exit(cli.main())\n")
    root = Path(__file__).resolve().parents[1]
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root,
                       env={**os.environ, "PYTHONPATH": str(root)})
    assert "ran to its end" in p.stdout  # the interrupt was lost where it landed, as Python loses it
    assert p.returncode == cli.EXIT_INTERRUPTED, (p.returncode, p.stderr)
    assert p.stderr.strip() == "scalescope formats: interrupted", p.stderr
