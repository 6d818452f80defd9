"""The training command as a sweep runs it: this interpreter for ``python``, and what is
certainly a path made absolute (``docs/sweep.md``, "Where a run executes")."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["resolve_script", "with_user_path"]

_PYTHON_NAME = re.compile(r"^python(\d+(\.\d+)?)?$")


def resolve_script(script: Sequence[str], *, python: str | None = None,
                   user_cwd: str | os.PathLike[str] | None = None,
                   kept: list[str] | None = None) -> list[str]:
    """The script command with ``python`` replaced by this interpreter (so the venv is used).

    A command starting with a ``.py`` file gets the interpreter prepended. With ``user_cwd``
    (the directory the sweep was started in), what is certainly a path is made absolute, so
    it resolves as typed although the run executes in a working directory of its own: the
    script Python runs, and an argument (or the value of ``--opt=path`` or of a ``key=path``
    override) written with a
    ``/`` (``data/``, ``./conf.yaml``, ``../x``) that names an existing file or directory. A
    bare word (``--split test``) is never rewritten, even where a file or folder of that name
    exists: it may be a plain value. Such words are appended to ``kept`` (for a warning).
    The module of ``-m`` and the code of ``-c`` are left alone.
    """
    if not script:
        raise ValueError("no training command given (put it after `--`)")
    python = python or sys.executable
    cmd = list(script)
    if _PYTHON_NAME.match(cmd[0]):
        cmd[0] = python
    elif cmd[0].endswith(".py"):
        cmd.insert(0, python)
    if user_cwd is not None:
        cmd = _absolute_paths(cmd, Path(user_cwd), kept if kept is not None else [])
    return cmd


def _absolute_paths(cmd: list[str], user_cwd: Path, kept: list[str]) -> list[str]:
    def absolute(arg: str, *, script: bool = False) -> str:
        if not arg or arg.startswith("-") or os.path.isabs(arg):
            return arg
        path = user_cwd / arg
        if not path.exists():
            return arg
        if script or "/" in arg:  # certainly a path
            return str(path.absolute())
        kept.append(arg)  # a bare word that happens to name a file here: maybe a plain value
        return arg

    out = [cmd[0] if os.path.isabs(cmd[0]) or "/" not in cmd[0] else absolute(cmd[0])]
    is_python = cmd[0] == sys.executable or bool(_PYTHON_NAME.match(Path(cmd[0]).name))
    keep_next, script_seen = False, not is_python
    for arg in cmd[1:]:
        if keep_next:
            out.append(arg)
            keep_next = False
        elif arg in ("-m", "-c") and not script_seen:
            out.append(arg)
            keep_next, script_seen = True, True
        elif (arg.startswith("--") and "=" in arg) or (_OVERRIDE.match(arg) and not (user_cwd / arg).exists()):
            name, _, value = arg.partition("=")
            out.append(f"{name}={absolute(value)}")
        elif not script_seen and not arg.startswith("-"):
            out.append(absolute(arg, script=True))  # the file Python runs
            script_seen = True
        else:
            out.append(absolute(arg))
    return out


#: A ``key=value`` override (hydra's ``data.path=x``, ``+key=x``, ``++key=x``, ``~key``): its value
#: is a path argument like any other.
_OVERRIDE = re.compile(r"^[+~]{0,2}[A-Za-z_][\w.\-/@]*=.")


def with_user_path(env: dict[str, str], cmd: Sequence[str], user_cwd: str | os.PathLike[str]) -> dict[str, str]:
    """``env`` with the sweep's directory first on ``PYTHONPATH`` when ``cmd`` runs a module
    (``python -m pkg.train``): Python would find it in the current directory, which is now the
    run's own."""
    if "-m" in list(cmd)[1:3]:
        old = env.get("PYTHONPATH")
        env["PYTHONPATH"] = str(Path(user_cwd).absolute()) + (os.pathsep + old if old else "")
    return env
