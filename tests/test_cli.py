"""The `scalescope` command: help, clean errors instead of tracebacks."""

from __future__ import annotations

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
