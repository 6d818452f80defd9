"""Study 6: the backend comparison."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis import metrics as M
from analysis import plots as P
from analysis.errors import ScalescopeError
from analysis.studies._base import (
    Context,
    Section,
    Skip,
    comm_paths,
    level,
    need_distinct,
    sync_cost,
    usable_runs,
)


def _with_comm_path(table: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    paths = comm_paths(runs)
    if paths.empty:
        return table
    keys = [k for k in ("config_backend", "n_ranks", "n_nodes") if k in table.columns]
    paths = paths.astype({k: table[k].dtype for k in keys if k != "config_backend"}, errors="ignore")
    return table.merge(paths[[*keys, "comm_path"]].drop_duplicates(keys), on=keys, how="left")


def _topology(ctx: Context, sec: Section) -> bool:
    """The interconnect matrix of each host the runs recorded (``<experiment>/nodes/<host>.topo.txt``,
    ``nvidia-smi topo -m``), beside the comparison: it says which pairs of GPUs talk over
    NVLink, a PCIe switch or across sockets (the DGX-1 evaluation explains its P2P result so)."""
    from analysis.readers import nvsmi_topo

    paths = ctx.rs.runs["path"].dropna() if "path" in ctx.rs.runs else []
    files = sorted({f for p in paths for f in (Path(p).parent / "nodes").glob("*.topo.txt")})
    shown = False
    for f in files:
        try:
            t = nvsmi_topo.read(f, host=f.name.removesuffix(".topo.txt"))
        except ScalescopeError as exc:
            sec.notes.append(f"Topology {f}: {exc}")
            continue
        host = f.name.removesuffix(".topo.txt")
        if t.empty:
            sec.notes.append(f"Topology of {host}: one GPU, no link between GPUs.")
            continue
        sec.figures.append((f"topology_{host}", P.plot_topology(t, title=f"Interconnect topology of {host} "
                                                                         "(nvidia-smi topo -m)")))
        sec.tables.append((f"topology_{host}", t, "Link between each pair of devices, as nvidia-smi topo -m "
                                                  "prints it; link_class from fastest (nvlink) to slowest "
                                                  "(cross-socket)."))
        shown = True
    return shown


def study_backends(ctx: Context) -> Section:
    sec = Section(intro="The same configurations with different communication backends / frameworks, within a node and "
                  "across nodes.")
    pr = ctx.per_run
    fw = pr[pr["framework"] != "none"]
    topo = _topology(ctx, sec)
    if topo and fw["config_backend"].nunique() < 2:
        sec.notes.append("Only one backend was run: no backend comparison; the topology is shown for the paths "
                         "its communication could take.")
        return sec
    need_distinct(fw["config_backend"], 2, "two or more backends")
    try:
        sync = sync_cost(ctx)
    except Skip:
        sync = None
    t = _with_comm_path(M.backend_comparison(fw, sync=sync, confidence=ctx.confidence), usable_runs(ctx))
    shared = t.groupby(["batch_size", "n_ranks", "n_nodes"], dropna=False)["config_backend"].transform("nunique")
    if (shared < 2).all():
        raise Skip("no configuration (batch size, ranks, nodes) was run with two backends")
    sec.figures.append(("backends", P.plot_backends(t)))
    sec.tables.append(("backends", t, "relative_time = time per sample / the fastest backend's on the same "
                                      f"configuration, with its {level(ctx)} interval; relative_time_verdict: is the "
                                      "difference from the fastest distinguishable from noise; comm_path = "
                                      "what the backend's communication used (NCCL logs, or the manifest)."))
    return sec
