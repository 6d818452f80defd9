"""The ``scalescope`` command.

Subcommands load their modules lazily, so ``scalescope --help`` is quick and ``scalescope
sweep`` works on a cluster login node without the analysis stack being imported.
A user-facing command never ends in a raw traceback: scalescope's own errors print one
clear line; anything unexpected prints a short message and the traceback goes to a log
file (or to the terminal with ``--debug``).

Ctrl-C at any moment prints one line and exits 130: the handler is installed when this
module is imported as the command (the console script, ``python -m analysis.cli``), before
anything else is imported; only the interpreter's own start-up comes before it.
"""

# Only what the interpreter has loaded already at this point: the Ctrl-C handler goes in
# before any import that takes time (argparse, tempfile, the subcommands' pandas/plotly).
from __future__ import annotations

import os
import signal
import sys
import threading
from typing import TYPE_CHECKING

from analysis import __version__

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence

EXIT_USAGE = 2
EXIT_ERROR = 1
EXIT_INTERRUPTED = 130

# ---------------------------------------------------------------- Ctrl-C

#: The process that installed the handler; a pool worker forked from it inherits the handler
#: (and the terminal's Ctrl-C reaches the whole process group) but leaves the message to it.
_MAIN_PID: int | None = None
_ANNOUNCED = False
#: A Ctrl-C reached our handler. Python can lose the KeyboardInterrupt the handler raises:
#: where it lands in a weakref callback or ``__del__`` it is only printed ("Exception ignored
#: in"), and 3.11 turns one raised while a class is created into a RuntimeError that an import
#: guard's ``except Exception`` swallows. The command then ends as interrupted all the same.
_REQUESTED = False


def _announce_interrupt(command: str | None) -> None:
    global _ANNOUNCED
    if not _ANNOUNCED:
        _ANNOUNCED = True
        what = f"scalescope {command}" if command else "scalescope"
        try:
            print(f"{what}: interrupted", file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass


def _on_sigint(signum, frame) -> None:
    global _REQUESTED
    if os.getpid() != _MAIN_PID:  # a forked pool worker: the main process reports and exits
        os._exit(EXIT_INTERRUPTED)
    _REQUESTED = True
    # the first Ctrl-C unwinds (temporary files are removed on the way); a second one while
    # that runs, or one after the command finished, ends the process at once
    signal.signal(signal.SIGINT, _on_late_sigint)
    raise KeyboardInterrupt


def _on_late_sigint(signum, frame) -> None:
    if os.getpid() == _MAIN_PID:
        _announce_interrupt(None)
    os._exit(EXIT_INTERRUPTED)


def _install_sigint() -> object | None:
    """Our Ctrl-C handler; returns the previous one (``None`` where signals cannot be set:
    not the main thread, or where nothing was set).

    A command started with Ctrl-C ignored (``cmd &`` in a script, whose shell ignores SIGINT
    for it so that a Ctrl-C meant for the script leaves it running) keeps ignoring it, as
    Python itself and every shell tool do."""
    global _MAIN_PID, _ANNOUNCED, _REQUESTED
    if threading.current_thread() is not threading.main_thread():
        return None
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return None
    _MAIN_PID, _ANNOUNCED, _REQUESTED = os.getpid(), False, False
    return signal.signal(signal.SIGINT, _on_sigint)


def _started_as_command() -> bool:
    argv0 = os.path.basename(sys.argv[0]) if getattr(sys, "argv", None) else ""
    return __name__ == "__main__" or argv0 == "scalescope" or argv0.startswith("scalescope.")


if _started_as_command():
    _install_sigint()


# ---------------------------------------------------------------- subcommands


def _add_doctor(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "doctor",
        help="show what is installed and usable (torch, CUDA, Horovod, MPI, NVML, NVTX, nsys, kaleido)",
        description="Report which parts of scalescope are usable on this machine and what each missing piece disables.",
    )
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    p.add_argument("--gpu-check", action="store_true",
                   help="run every GPU path (NVML, CUDA training, DDP/Horovod over NCCL, CUDA Kineto trace, nsys, "
                        "NCCL log capture, NCCL allreduce benchmark) through scripts/gpu_check.py; docs/gpu-check.md")
    p.add_argument("--out", default="runs/gpu-check", help="output directory of --gpu-check (default runs/gpu-check)")

    def run(args: argparse.Namespace) -> int:
        from analysis import doctor

        if args.gpu_check:
            return doctor.gpu_check(out=args.out)
        return doctor.main(as_json=args.json)

    p.set_defaults(func=run)


def _add_sweep(sub: argparse._SubParsersAction) -> None:
    import argparse

    try:
        from instrumentation import sweep
    except ImportError as exc:  # the launcher is optional on an analysis-only install
        p = sub.add_parser("sweep", help=f"(unavailable: {exc})")
        p.set_defaults(func=lambda args, err=exc: _unavailable("sweep", err))
        return
    p = sub.add_parser(
        "sweep",
        help="run a training script at several rank counts / batch sizes / backends into one experiment directory",
        description=(sweep.__doc__ or "").strip().splitlines()[0] if sweep.__doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sweep.add_arguments(p)
    p.set_defaults(func=sweep.run)


def _add_status(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "status",
        help="show each run of an experiment: queued, running, ok, failed, oom, timeout, killed "
             "(from the manifests, and from SLURM for submitted jobs)",
    )
    p.add_argument("experiment", help="experiment directory (the sweep's --out)")

    def run(args: argparse.Namespace) -> int:
        try:
            from instrumentation import slurm_jobs
        except ImportError as exc:
            return _unavailable("status", exc)
        return slurm_jobs.status_main(args.experiment)

    p.set_defaults(func=run)


def _add_report(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="build the HTML report and export/ figures and tables for an experiment directory",
    )
    try:
        from analysis import report
    except ImportError as exc:
        p.set_defaults(func=lambda args, err=exc: _unavailable("report", err))
        return
    report.add_arguments(p)
    p.set_defaults(func=report.run)


def _add_convert(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "convert",
        help="read any supported input and write the tidy tables (Parquet or CSV)",
        description="Read trace/profile/sample files or run directories and write the tidy tables.",
    )
    p.add_argument("paths", nargs="+", help="files, run directories or experiment directories")
    p.add_argument("--to", choices=("parquet", "csv"), default="parquet", help="output format")
    p.add_argument("-o", "--out", default=None, help="output directory (default: next to each input)")
    p.add_argument("--format", default=None, help="force a reader (see `scalescope formats`)")

    def run(args: argparse.Namespace) -> int:
        from analysis import convert

        return convert.main(args.paths, to=args.to, out=args.out, format=args.format)

    p.set_defaults(func=run)


def _add_formats(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("formats", help="list the input formats scalescope reads")

    def run(args: argparse.Namespace) -> int:
        from analysis.readers import formats

        for name, r in sorted(formats().items()):
            suffixes = " ".join(r.suffixes)
            print(f"{name:<20} {r.kind:<8} {suffixes:<28} {r.description}")
        return 0

    p.set_defaults(func=run)


def _add_demo(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="the main job: a real sweep of the thesis workload (1 and 2 ranks, Gloo and MPI, baseline) and its report",
    )
    p.add_argument("--out", default="runs/demo", help="experiment directory (default: runs/demo)")
    p.add_argument("--quick", action="store_true", help="a smaller, faster sweep")
    p.add_argument("--no-report", action="store_true", help="run the sweep only")

    def run(args: argparse.Namespace) -> int:
        from analysis import demo

        return demo.main(out=args.out, quick=args.quick, report=not args.no_report)

    p.set_defaults(func=run)


def _add_notebooks(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "notebooks",
        help="open JupyterLab on the notebooks, every one pointed at the experiments given",
        description="Open JupyterLab on the project's notebooks. Every notebook shows the experiments "
                    "given ($SCALESCOPE_EXPERIMENTS), unless EXPERIMENTS is set in its parameters cell; "
                    "with none given, the bundled samples in data/. Exports go to notebooks-export/ "
                    "next to the first experiment.",
    )
    p.add_argument("experiment", nargs="*", metavar="EXP", help="experiment directory (one or more)")
    p.add_argument("--port", type=int, default=None, help="JupyterLab's port (default: its own, 8888 or the next free)")
    p.add_argument("--no-browser", action="store_true", help="do not open a browser (print the URL only)")

    def run(args: argparse.Namespace) -> int:
        from analysis import notebooks

        return notebooks.main(args.experiment, port=args.port, no_browser=args.no_browser)

    p.set_defaults(func=run)


def _add_bench_allreduce(sub: argparse._SubParsersAction) -> None:
    try:
        from instrumentation import bench_allreduce
    except ImportError as exc:  # the launcher side is optional on an analysis-only install
        p = sub.add_parser("bench-allreduce", help=f"(unavailable: {exc})")
        p.set_defaults(func=lambda args, err=exc: _unavailable("bench-allreduce", err))
        return
    p = sub.add_parser(
        "bench-allreduce",
        help="allreduce micro-benchmark over message sizes (Gloo, MPI, NCCL) with alpha-beta fits per link class",
        description=(bench_allreduce.__doc__ or "").strip().splitlines()[0],
    )
    bench_allreduce.add_arguments(p)
    p.add_argument("--experiment", default=None, metavar="EXP",
                   help="a sweep's experiment directory: report the ring and two-level models' error against "
                        "its measured sync per step (held-out rank counts marked)")

    def run(args: argparse.Namespace) -> int:
        from analysis import bench

        rc = bench_allreduce.run(args)
        if rc == 2:
            return rc
        tables = bench.summarize(args.out, experiment=args.experiment)
        bench.print_tables(tables)
        return rc

    p.set_defaults(func=run)


def _unavailable(what: str, exc: BaseException) -> int:
    print(f"scalescope {what}: not available in this installation ({exc})", file=sys.stderr)
    return EXIT_ERROR


SUBCOMMANDS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (
    _add_sweep,
    _add_status,
    _add_report,
    _add_convert,
    _add_formats,
    _add_doctor,
    _add_demo,
    _add_notebooks,
    _add_bench_allreduce,
)


def build_parser() -> argparse.ArgumentParser:
    import argparse

    parser = argparse.ArgumentParser(
        prog="scalescope",
        description="Why doesn't my distributed training scale, and where does the time go?",
    )
    parser.add_argument("--version", action="version", version=f"scalescope {__version__}")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(sub)
    return parser


def _log_traceback() -> str:
    import tempfile
    import traceback

    fd, path = tempfile.mkstemp(prefix="scalescope-error-", suffix=".log")
    with os.fdopen(fd, "w") as fh:
        traceback.print_exc(file=fh)
    return path


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """``warnings.showwarning`` for the command line: a warning often quotes file content."""
    import warnings

    from instrumentation.progress import printable

    stream = file if file is not None else sys.stderr
    try:
        stream.write(printable(warnings.formatwarning(message, category, filename, lineno, line)))
    except (OSError, ValueError):
        pass


def _os_error_line(exc: OSError) -> str | None:
    """One line for an ``OSError`` that is about the machine, not a bug: it names a path (a
    location that cannot be written or read) or says the disk is full."""
    import errno

    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}no space left on the device"
    if exc.filename is None:
        return None
    from pathlib import Path

    from analysis.atomic import why_not_written

    names = str(exc.filename) + (f" -> {exc.filename2}" if exc.filename2 else "")
    return f"{names}: {why_not_written(exc, Path(os.fsdecode(exc.filename)))}"


def main(argv: Sequence[str] | None = None) -> int:
    """The ``scalescope`` command. Ctrl-C at any moment prints one line and returns 130;
    scalescope's own errors and a machine's refusals (an unwritable location, a full disk)
    print one line naming the path and return 1."""
    # first of all, before the parser imports the subcommands (pandas, plotly): from here
    # on a Ctrl-C is one line and exit status 130, whatever is running
    previous = _install_sigint()
    command = None
    import warnings

    shown = warnings.showwarning
    try:
        warnings.showwarning = _show_warning
        parser = build_parser()
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
        command = args.command
        if not getattr(args, "func", None):
            parser.print_help()
            return EXIT_USAGE
        sys.unraisablehook, unraisable = _quiet_lost_interrupt(sys.unraisablehook), sys.unraisablehook
        try:
            rc = _call(args)
        finally:
            if argv is not None:
                sys.unraisablehook = unraisable
        # the KeyboardInterrupt was lost on its way (see _REQUESTED); a command that returned
        # 130 caught it itself and has said so (a sweep: "interrupted; run ... again to resume")
        if _REQUESTED and rc != EXIT_INTERRUPTED:
            raise KeyboardInterrupt
        return rc
    except KeyboardInterrupt:
        _announce_interrupt(command)
        return EXIT_INTERRUPTED
    finally:
        # called in-process (tests, a notebook): the caller's handler back. As the command
        # itself, ours stays for the interpreter's exit, so a late Ctrl-C is one line too
        if previous is not None:
            signal.signal(signal.SIGINT, previous if argv is not None else _on_late_sigint)
            if argv is None:
                import atexit

                atexit.register(_ignore_sigint_at_exit)
        if argv is not None:
            warnings.showwarning = shown


def _quiet_lost_interrupt(hook: Callable) -> Callable:
    """``sys.unraisablehook`` that keeps quiet about our KeyboardInterrupt where Python could
    not raise it (a weakref callback, ``__del__``): the command ends as interrupted instead
    (:data:`_REQUESTED`); anything else goes to ``hook``."""

    def unraisable(info) -> None:
        if isinstance(info.exc_value, KeyboardInterrupt) and _REQUESTED:
            return
        hook(info)

    return unraisable


def _ignore_sigint_at_exit() -> None:
    """The work is done and the interpreter is tearing down: its finalisation puts the
    default SIGINT action back in place of a Python handler (a Ctrl-C there would kill the
    process silently, status -2). An ignored signal stays ignored, so a Ctrl-C from here on
    changes nothing: the command ends with its own status."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _call(args: argparse.Namespace) -> int:
    from analysis.errors import ScalescopeError
    from instrumentation.progress import printable

    def say(line: str) -> None:
        print(printable(f"scalescope {args.command}: {line}"), file=sys.stderr)

    try:
        rc = args.func(args)
    except ScalescopeError as exc:
        if args.debug:
            raise
        say(f"error: {exc}")
        return EXIT_ERROR
    except BrokenPipeError:  # `scalescope status EXP | head`: the reader left, nothing to say
        import contextlib

        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR
    except OSError as exc:
        if args.debug:
            raise
        line = _os_error_line(exc)
        if line is None:
            return _bug(args, exc, say)
        say(f"error: {line}")
        return EXIT_ERROR
    except Exception as exc:
        if args.debug:
            raise
        return _bug(args, exc, say)
    return int(rc or 0)


def _bug(args: argparse.Namespace, exc: BaseException, say: Callable[[str], None]) -> int:
    log = _log_traceback()
    say(f"unexpected {type(exc).__name__}: {exc}\n"
        f"  This is a bug in scalescope; the traceback is in {log} (or rerun with --debug).")
    return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
