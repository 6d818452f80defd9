"""The communication path of a run, from its NCCL logs and manifest: per communicator facts,
a one-line ``comm_path`` for the runs table and the warnings the report shows.

``comm_path`` examples: ``"intra-node P2P/CUMEM, inter-node NET/IB GDRDMA"``,
``"inter-node NET/Socket"``, ``"intra-node Gloo TCP"``, ``"NCCL, 1 rank (no peer
connection)"``.
"""

from __future__ import annotations

import re

import pandas as pd

#: An IB device in ``NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE ; OOB ...``.
_IB_DEVICE = re.compile(r"\[\d+\]\S+?:\d+/(?:IB|RoCE|UNSPECIFIED)")
_INTRA = ("P2P/", "SHM")


def communicators(nccl: pd.DataFrame) -> pd.DataFrame:
    """One row per communicator of an NCCL log frame (``analysis.read(log)``).

    Returns
    -------
    pandas.DataFrame
        ``comm_key`` (``commId``, else ``nranks=N`` when the log predates commIds),
        ``nccl_version``, ``n_ranks``, ``n_nodes`` (printed, else the hosts seen when every
        rank's host is known), ``hosts`` (comma-joined), ``local_ranks`` (printed),
        ``intra_transports`` / ``inter_transports`` (``;``-joined classes), ``gdrdma`` (any
        NET connection with GPUDirect RDMA), ``network``, ``n_channels``, ``has_trees``.

    Notes
    -----
    A connection is inter-node when its two ranks' hosts differ (hosts from the
    communicator lines); when a host is unknown, NET transports count as inter-node and
    P2P/SHM as intra-node. ``NVLS`` is listed when the log reports NVLS channels (``N nvls
    channels`` with N > 0), since NVLink SHARP prints no connection lines.
    """
    cols = ["comm_key", "nccl_version", "n_ranks", "n_nodes", "hosts", "local_ranks", "intra_transports",
            "inter_transports", "gdrdma", "network", "n_channels", "has_trees"]
    if nccl.empty:
        return pd.DataFrame(columns=cols)
    df = nccl.copy()
    key = df["comm_id"].astype(object)
    fallback = "nranks=" + df["nranks"].astype("Int64").astype(str)
    df["comm_key"] = key.where(key.notna(), fallback.where(df["nranks"].notna(), None))
    # rows of one process without a commId take the process's commId when it has just one
    per_proc = df.dropna(subset=["comm_id"]).groupby(["host", "pid"], observed=True)["comm_id"].unique()
    single = {k: v[0] for k, v in per_proc.items() if len(v) == 1}
    miss = df["comm_id"].isna() & (df["rank"].notna() | df["comm_key"].isna())
    df.loc[miss, "comm_key"] = [single.get((h, p), ck) for h, p, ck in
                                zip(df.loc[miss, "host"], df.loc[miss, "pid"], df.loc[miss, "comm_key"], strict=True)]
    rank_host = df.dropna(subset=["rank", "host"]).drop_duplicates(["comm_key", "rank"]).set_index(
        ["comm_key", "rank"])["host"].astype(object).to_dict()
    rows = []
    for ck, g in df.dropna(subset=["comm_key"]).groupby("comm_key", sort=False):
        conn = g[g["record"] == "connection"]
        intra, inter = set(), set()
        for r in conn.itertuples(index=False):
            a, b = rank_host.get((ck, r.rank)), rank_host.get((ck, r.peer))
            cross = (a != b) if a is not None and b is not None else not str(r.transport).startswith(_INTRA)
            label = str(r.transport) + (" GDRDMA" if not pd.isna(r.gdrdma) and bool(r.gdrdma) else "")
            (inter if cross else intra).add(label)
        if (g.loc[g["record"] == "channels", "n_nvls_channels"].fillna(0) > 0).any():
            intra.add("NVLS")  # NVLink SHARP has no per-peer `via` line, only its channel count
        n_ranks = g["nranks"].dropna()
        hosts = sorted(set(g["host"].dropna().astype(str)))
        n_nodes = g["n_nodes"].dropna()
        ranks_with_host = {r for (k, r) in rank_host if k == ck}
        if len(n_nodes):
            nodes = int(n_nodes.iloc[0])
        elif len(n_ranks) and len(ranks_with_host) == int(n_ranks.iloc[0]):
            nodes = len(hosts)
        else:
            nodes = None
        net = df.loc[(df["record"] == "network") & df["host"].isin(hosts), "net"].dropna().astype(str)
        mm = g.loc[g["record"] == "ring", "n_channels"].dropna()
        ch = g.loc[g["record"] == "channels", "n_channels"].dropna()
        rows.append({
            "comm_key": ck, "nccl_version": next(iter(g["nccl_version"].dropna()), None),
            "n_ranks": int(n_ranks.iloc[0]) if len(n_ranks) else None, "n_nodes": nodes, "hosts": ",".join(hosts),
            "local_ranks": int(g["local_ranks"].dropna().iloc[0]) if g["local_ranks"].notna().any() else None,
            "intra_transports": ";".join(sorted(intra)), "inter_transports": ";".join(sorted(inter)),
            "gdrdma": bool(conn["gdrdma"].fillna(False).any()), "network": ";".join(sorted(set(net))),
            "n_channels": int(mm.iloc[0]) if len(mm) else (int(ch.iloc[0]) if len(ch) else None),
            "has_trees": bool((g["record"] == "tree").any()),
        })
    return pd.DataFrame(rows, columns=cols)


def channel_transports(nccl: pd.DataFrame) -> pd.DataFrame:
    """Per communicator and channel, the transports of its connections.

    Returns
    -------
    pandas.DataFrame
        ``comm_key`` (as in :func:`communicators`), ``channel``, ``transports``
        (``;``-joined classes, `` GDRDMA`` marked), ``n_connections``.
    """
    conn = nccl[nccl["record"] == "connection"]
    cols = ["comm_key", "channel", "transports", "n_connections"]
    if conn.empty:
        return pd.DataFrame(columns=cols)
    key = conn["comm_id"].astype(object)
    key = key.where(key.notna(), "nranks=" + conn["nranks"].astype("Int64").astype(str))
    label = conn["transport"].astype(str) + conn["gdrdma"].fillna(False).map({True: " GDRDMA", False: ""})
    t = pd.DataFrame({"comm_key": key, "channel": conn["channel"].astype("Int64"), "label": label})
    out = t.groupby(["comm_key", "channel"], sort=True).agg(
        transports=("label", lambda s: ";".join(sorted(set(s)))), n_connections=("label", "size")).reset_index()
    return out[cols]


def ib_devices(nccl: pd.DataFrame) -> list[str]:
    """IB/RoCE devices NCCL listed (``NET/IB : Using [0]mlx5_0:1/IB ...``); empty when none."""
    texts = nccl.loc[nccl["record"] == "ib", "text"].dropna().astype(str)
    return sorted({m.group(0) for t in texts for m in _IB_DEVICE.finditer(t)})


def summarize_nccl(nccl: pd.DataFrame, *, rdma_devices: list[str] | None = None) -> dict:
    """``comm_path``, ``nccl_version`` and ``comm_warnings`` of one run's NCCL frame.

    ``rdma_devices`` are the node's InfiniBand/RoCE devices from the manifest (the sweep's
    ``/sys/class/infiniband`` listing); NCCL's own device list is used too.
    """
    comms = communicators(nccl)
    multi = comms[comms["n_ranks"].fillna(0) > 1]
    intra = sorted({t for s in multi["intra_transports"] for t in s.split(";") if t})
    inter = sorted({t for s in multi["inter_transports"] for t in s.split(";") if t})
    parts = []
    if intra:
        parts.append("intra-node " + "+".join(intra))
    if inter:
        parts.append("inter-node " + "+".join(inter))
    if parts:
        path = ", ".join(parts)
    elif len(comms) and multi.empty:
        path = "NCCL, 1 rank (no peer connection)"
    else:
        path = "NCCL (no connection line in the logs)"
    warns = []
    texts = nccl.loc[nccl["record"] == "warn", "text"].dropna().astype(str)
    if len(texts):
        warns.append(f"NCCL printed {len(texts)} WARN line(s), e.g. {texts.iloc[0]!r}")
    devices = sorted(set(ib_devices(nccl)) | set(rdma_devices or []))
    multi_node = bool((multi["n_nodes"].fillna(0) > 1).any()) or bool(inter)
    if multi_node and any(t.startswith("NET/Socket") for t in inter) and devices:
        warns.append(f"multi-node run used sockets (NET/Socket) although IB/RDMA devices were present "
                     f"({', '.join(devices)}): check NCCL_IB_DISABLE, NCCL_NET and the IB plugin")
    versions = sorted(set(nccl["nccl_version"].dropna().astype(str)))
    return {"comm_path": path, "nccl_version": ";".join(versions) or None, "comm_warnings": warns}


def comm_path(manifest: dict | None, nccl: pd.DataFrame | None = None) -> dict:
    """``comm_path``, ``nccl_version`` and ``comm_warnings`` of one run: from its NCCL log
    frame when it has one (``nccl``, every log of the run read with ``format="nccl"``),
    else from its manifest (``run.json``): Gloo and MPI runs as ``intra-node Gloo TCP``,
    ``inter-node MPI (Open MPI 4.1.4)``; the baseline is ``none (1 process)``. Reading the
    logs of a run directory is :func:`analysis.runtable.run_comm_path`'s job."""
    m = manifest or {}
    framework, backend = m.get("framework"), m.get("backend")
    n_nodes = m.get("n_nodes") or (len(m["ranks_per_host"]) if m.get("ranks_per_host") else 1)
    scope = "intra-node" if int(n_nodes or 1) <= 1 else "inter-node"
    capture = m.get("comm_capture") or {}
    out: dict = {"comm_path": None, "nccl_version": None, "comm_warnings": []}
    if nccl is not None:
        rdma = [d["name"] for d in ((capture.get("node") or {}).get("nics") or {}).get("rdma") or []]
        return summarize_nccl(nccl, rdma_devices=rdma)
    if framework in (None, "none") or not backend:
        out["comm_path"] = "none (1 process)" if framework == "none" else None
        return out
    names = {"gloo": "Gloo", "mpi": "MPI", "nccl": "NCCL"}
    if m.get("world_size") == 1:
        out["comm_path"] = f"{names.get(backend, backend)}, 1 rank (no peer connection)"
        return out
    if backend == "gloo":
        iface = capture.get("gloo_socket_ifname")
        out["comm_path"] = f"{scope} Gloo TCP" + (f" ({iface})" if iface else "")
    elif backend == "mpi":
        mpi = (capture.get("node") or {}).get("mpi") or {}
        impl = " ".join(str(x) for x in (mpi.get("implementation"), mpi.get("version")) if x)
        out["comm_path"] = f"{scope} MPI" + (f" ({impl})" if impl else "")
    elif backend == "nccl":
        out["comm_path"] = f"{scope} NCCL (no NCCL log captured)"
    else:
        out["comm_path"] = f"{scope} {backend}"
    return out


__all__ = ["channel_transports", "comm_path", "communicators", "ib_devices", "summarize_nccl"]
