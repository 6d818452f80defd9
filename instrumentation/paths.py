"""What a path read from an experiment may name: the one rule every command that opens a
(possibly shared) experiment applies, on the launcher side and the analysis side alike.

* A run id taken from a file (``experiment.json``'s ``runs[i].run_id``, a ``run.json``) names
  a directory *of the experiment*: one path component, never ``..``, ``.``, an absolute path,
  a separator or a NUL (:func:`is_run_id`, :func:`run_dir`). Anything else is refused, so no
  command follows it out of the experiment or writes there.
* A file or directory reached inside an experiment (or a run directory read on its own) must
  stay inside it once symbolic links are followed (:func:`leaves`): a link pointing out of a
  shared experiment (to a credentials file, to another user's run) is not followed, and is
  named without anything of its target.

This module imports only the standard library (it runs on cluster login nodes and at the end
of batch jobs); :mod:`analysis._io` applies :func:`leaves` to every input file it opens.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["LEAVES", "experiment_root", "is_run_id", "leaves", "name_text", "outside", "run_dir"]

#: What a refused link is called (never followed by its target's name or content).
LEAVES = "a symbolic link leaving the experiment (not followed)"
#: The manifests that mark an experiment and a run directory (``analysis.rundir`` has the same
#: names; ``tests/test_rundir_layout.py`` checks that they agree).
EXPERIMENT_MANIFEST, RUN_MANIFEST = "experiment.json", "run.json"


def is_run_id(run_id: object) -> bool:
    """Whether ``run_id`` can name a directory of the experiment: a non-empty string that is
    one path component (no ``/`` or ``\\``, not ``.`` or ``..``, no NUL)."""
    return (isinstance(run_id, str) and run_id not in ("", ".", "..")
            and not any(c in run_id for c in ("/", "\\", "\0")) and Path(run_id).name == run_id)


def run_dir(out: str | os.PathLike[str], run_id: object) -> Path:
    """``out / run_id``; ValueError naming the experiment when ``run_id`` is not a run id
    (:func:`is_run_id`) or the directory it names leaves the experiment (a link)."""
    if not is_run_id(run_id):
        raise ValueError(f"{Path(out) / 'experiment.json'}: run id {str(run_id)[:80]!r} is not a directory "
                         "name inside the experiment; not followed")
    path = Path(out) / str(run_id)
    if outside(path, Path(out)):
        raise ValueError(f"{path}: {LEAVES}")
    return path


def outside(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> bool:
    """Whether ``path``, once symbolic links are followed, lies outside ``root`` (also
    followed); a path that cannot be resolved counts as outside."""
    try:
        real, top = os.path.realpath(path), os.path.realpath(root)
    except (OSError, ValueError):
        return True
    return real != top and not real.startswith(top.rstrip(os.sep) + os.sep)


def experiment_root(path: str | os.PathLike[str]) -> Path | None:
    """The experiment (nearest directory above ``path`` holding ``experiment.json``) or else
    the run directory (nearest holding ``run.json``) that ``path`` lies in, as written (links
    not followed); None for a path in neither."""
    p = Path(os.path.abspath(path))
    runs = None
    for d in p.parents:
        try:
            if os.path.lexists(d / EXPERIMENT_MANIFEST):
                return d
            if runs is None and os.path.lexists(d / RUN_MANIFEST):
                runs = d
        except (OSError, ValueError):
            return None
    return runs


def leaves(path: str | os.PathLike[str]) -> bool:
    """Whether ``path``, once symbolic links are followed, lies outside the experiment (or
    run directory) it is reached through (:func:`experiment_root`). A path in neither never
    leaves: a file given on its own is the user's choice."""
    root = experiment_root(path)
    return root is not None and outside(path, root)


def name_text(name: str) -> str:
    """A name from the file system (a directory name, a run id read back from JSON) as text
    that every string column and every UTF-8 file can hold: the bytes of a name that is not
    UTF-8 (Python's lone surrogates) shown as ``\\xff``; a UTF-8 name is unchanged. Names
    that differ stay different. The path itself is kept as it is where a file is opened."""
    if not isinstance(name, str):
        return name
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        raw = name.encode("utf-8", "surrogateescape") if all(
            not 0xD800 <= ord(c) < 0xDC80 and not 0xDD00 <= ord(c) < 0xE000 for c in name) else None
        if raw is None:  # surrogates no file name decodes to (JSON "\\ud800"): their code points
            return name.encode("utf-8", "backslashreplace").decode("utf-8")
        return raw.decode("utf-8", "backslashreplace")
