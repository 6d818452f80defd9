"""The ``scalescope`` command.

Subcommands load their modules lazily, so ``scalescope --help`` is quick and ``scalescope
sweep`` works on a cluster login node without the analysis stack being imported.
A user-facing command never ends in a raw traceback: scalescope's own errors print one
clear line; anything unexpected prints a short message and the traceback goes to a log
file (or to the terminal with ``--debug``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import traceback
from collections.abc import Callable, Sequence

from analysis import __version__

EXIT_USAGE = 2
EXIT_ERROR = 1


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
    fd, path = tempfile.mkstemp(prefix="scalescope-error-", suffix=".log")
    with os.fdopen(fd, "w") as fh:
        traceback.print_exc(file=fh)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    from analysis.errors import ScalescopeError

    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        rc = args.func(args)
    except KeyboardInterrupt:
        print("scalescope: interrupted", file=sys.stderr)
        return 130
    except ScalescopeError as exc:
        if args.debug:
            raise
        print(f"scalescope {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as exc:
        if args.debug:
            raise
        log = _log_traceback()
        print(
            f"scalescope {args.command}: unexpected {type(exc).__name__}: {exc}\n"
            f"  This is a bug in scalescope; the traceback is in {log} (or rerun with --debug).",
            file=sys.stderr,
        )
        return EXIT_ERROR
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
