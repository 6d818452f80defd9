"""NCCL debug-log and nvidia-smi topo readers against the real logs of ../shared/corpus/nccl,
each checked with the facts its MANIFEST.md counted by grep (skipped when ../shared is absent),
plus the project's own capture in tests/data/nccl when present."""

from __future__ import annotations

import warnings
from pathlib import Path

import pandas as pd
import pytest

import analysis
from analysis import readers
from analysis.errors import ReadError, RecoveryWarning
from analysis.readers import nccl, nvsmi_topo

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "corpus" / "nccl"

# file stem -> facts from corpus/nccl/MANIFEST.md: version, nranks, n_nodes (printed), hosts,
# connection lines per printed `via` text, Using network, channel-header MM, trees, WARN count.
FACTS = {
    "gnosia93__training-on-eks__p4d-1pod-4proc-p2p-cumem": dict(
        version=None, nranks=4, n_nodes=1, hosts={"llama-3-8b-node-0-0"}, via={"P2P/CUMEM/read": 192},
        network={"Libfabric"}, mm=24, trees=True, warn=0),
    "gnosia93__training-on-eks__g6e-1pod-4proc-shm": dict(
        version="2.27.3+cuda12.9", nranks=4, n_nodes=1, hosts={"llama-3-8b-node-0-0"},
        via={"SHM/direct/direct": 28}, network={"Libfabric"}, mm=2, trees=True, warn=0),
    "gnosia93__training-on-eks__p4d-ofi-init-warn-socket-fallback": dict(
        version="2.27.7+cuda13.0", nranks=4, n_nodes=1, hosts={"ip-172-31-3-153"}, via={"P2P/CUMEM/read": 192},
        network={"Socket"}, mm=24, trees=True, warn=12),
    "youkaichao__my-portable-aiml-environment__2node-socket-p2p-ipc": dict(
        version=None, nranks=16, n_nodes=None, hosts={"lsp-ws1"}, via={"NET/Socket/0": 6, "P2P/IPC/read": 4},
        network={"Socket"}, mm=2, trees=True, warn=0),
    "argonne-lcf__alcf-nccl-tests__polaris-2node-ofi-cxi-gdrdma": dict(
        version="2.20.5+cuda12.4", nranks=8, n_nodes=2, hosts={"x3207c0s25b0n0", "x3207c0s25b1n0"},
        via={"NET/AWS Libfabric/1/GDRDMA": 10, "NET/AWS Libfabric/3/GDRDMA": 12, "P2P/CUMEM/read": 56},
        network={"AWS Libfabric"}, mm=4, trees=True, warn=0),
    "aws-samples__eks-efa-examples__nccl264-2node-efa-ring-format": dict(
        version="2.6.4+cuda10.2", nranks=16, n_nodes=None, hosts={"nccl-test-worker-0", "nccl-test-worker-1"},
        via={"P2P/IPC": 248, **{f"NET/AWS Libfabric/{d}": 16 for d in range(4)}},
        network={"AWS Libfabric"}, mm=8, trees=True, warn=0),
    "aws-samples__aws-efa-eks__p4d-2node-efa-gdrdma-mpirun-tagged": dict(
        version="2.9.9+cuda11.2", nranks=16, n_nodes=None,
        hosts={"nccl-tests-efa-16-worker-0", "nccl-tests-efa-16-worker-1"},
        via={"P2P/IPC/read": 256, **{f"NET/AWS Libfabric/{d}/GDRDMA": 16 for d in range(4)}},
        network={"AWS Libfabric"}, mm=8, trees=True, warn=0),
    "B5paper__documents__allreduce-1proc-4gpu-p2p-direct": dict(
        version="2.20.5+cuda12.4", nranks=4, n_nodes=1, hosts={"3767c65d25c4"},
        via={"P2P/direct pointer/read": 168}, network={"Socket"}, mm=24, trees=True, warn=0),
    "devopsrustem__slurmv4__sglang-bootstrap-connrefused-warn": dict(
        version=None, nranks=None, n_nodes=None, hosts={"tpgds-aihub0006"}, via={}, network=set(), mm=None,
        trees=False, warn=7),
}
#: transport class each printed `via` text maps to
CLASSES = {"P2P/CUMEM/read": "P2P/CUMEM", "SHM/direct/direct": "SHM", "NET/Socket/0": "NET/Socket",
           "P2P/IPC/read": "P2P/IPC", "P2P/IPC": "P2P/IPC", "P2P/direct pointer/read": "P2P/direct"}


@pytest.fixture(scope="module")
def corpus() -> Path:
    if not CORPUS.is_dir():
        pytest.skip(f"NCCL corpus not present at {CORPUS}")
    return CORPUS


def _read(path: Path) -> pd.DataFrame:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecoveryWarning)
        return analysis.read(path)


def test_every_corpus_log_has_facts(corpus):
    assert {p.stem for p in corpus.glob("*.log")} == set(FACTS)


@pytest.mark.parametrize("stem", sorted(FACTS))
def test_corpus_log_matches_manifest(corpus, stem):
    path = corpus / f"{stem}.log"
    f = FACTS[stem]
    assert readers.sniff(path) == "nccl"
    df = _read(path)
    nccl.validate(df)
    assert set(df["nccl_version"].dropna().unique()) == ({f["version"]} if f["version"] else set())
    assert set(df["nranks"].dropna().unique()) == ({f["nranks"]} if f["nranks"] else set())
    assert set(df["n_nodes"].dropna().unique()) == ({f["n_nodes"]} if f["n_nodes"] else set())
    assert set(df["host"].dropna().unique()) == f["hosts"]
    conn = df[df["record"] == "connection"]
    assert conn["via"].value_counts().to_dict() == f["via"]
    for via, cls in CLASSES.items():
        assert (conn.loc[conn["via"] == via, "transport"] == cls).all()
    net_rows = conn["via"].astype(str).str.startswith("NET/")
    assert (conn.loc[net_rows, "gdrdma"] == conn.loc[net_rows, "via"].astype(str).str.endswith("GDRDMA")).all()
    assert conn["rank"].notna().all() and conn["peer"].notna().all() and conn["nranks"].notna().all()
    assert set(df.loc[df["record"] == "network", "net"].unique()) == f["network"]
    mm = df.loc[df["record"] == "ring", "n_channels"].dropna().unique()
    assert set(mm) == ({f["mm"]} if f["mm"] else set())
    assert (df["record"] == "tree").any() == f["trees"]
    assert int((df["record"] == "warn").sum()) == f["warn"]


def test_warn_texts_and_socket_fallback(corpus):
    df = _read(corpus / "gnosia93__training-on-eks__p4d-ofi-init-warn-socket-fallback.log")
    warns = df.loc[df["record"] == "warn", "text"].value_counts().to_dict()
    assert warns == {"NET/OFI Failed to initialize sendrecv protocol": 4,
                     "NET/OFI aws-ofi-nccl initialization failed": 4, "NET/OFI Initializing plugin failed": 4}
    assert "NCCL_IB_DISABLE=1" in set(df.loc[df["record"] == "env", "text"])
    assert df.loc[df["record"] == "comm", "comm_id"].nunique() == 2  # two communicators in one log
    sgl = _read(corpus / "devopsrustem__slurmv4__sglang-bootstrap-connrefused-warn.log")
    assert sgl["text"].str.startswith("socketPollConnect: connect to 10.82.101.249<54709> returned").all()


def test_old_ring_format_receive_lines_are_printed_by_the_receiver(corpus):
    df = _read(corpus / "aws-samples__eks-efa-examples__nccl264-2node-efa-ring-format.log")
    recv = df[(df["record"] == "connection") & (df["direction"] == "recv")]
    assert len(recv) == 32 and (recv["transport"] == "NET/OFI").all()
    # `Ring 00 : 12[1a0] -> 0[160] [receive] via NET/AWS Libfabric/0` is rank 0 receiving from 12
    assert ((recv["rank"] == 0) & (recv["peer"] == 12) & (recv["channel"] == 0)).any()
    trees = df[df["record"] == "tree"]
    assert len(trees) == 16 * 8 and trees["text"].str.contains(r"\|").all()


def test_interleaved_log_is_repaired_with_warnings(corpus):
    path = corpus / "argonne-lcf__alcf-nccl-tests__polaris-2node-ofi-cxi-gdrdma.log"
    with pytest.warns(RecoveryWarning) as rec:
        df = analysis.read(path)
    text = " ".join(str(w.message) for w in rec)
    assert "skipped 2 line fragment(s)" in text and "repaired the host" in text
    comm = df[df["record"] == "comm"]
    # 8 ranks on 2 nodes, 4 local ranks each
    per_host = comm.dropna(subset=["local_rank"]).groupby("host", observed=True)["rank"].nunique().to_dict()
    assert per_host == {"x3207c0s25b0n0": 4, "x3207c0s25b1n0": 4}
    assert set(comm["local_ranks"].dropna()) == {4}


def test_one_process_driving_four_ranks(corpus):
    df = _read(corpus / "B5paper__documents__allreduce-1proc-4gpu-p2p-direct.log")
    conn = df[df["record"] == "connection"]
    assert set(conn["pid"]) == {855} and set(conn["rank"]) == {0, 1, 2, 3}
    assert conn["comm"].nunique() == 4  # one communicator object per rank, same commId
    assert df.loc[df["record"] == "comm", "comm_id"].nunique() == 1
    assert set(df.loc[df["record"] == "ib", "text"]) == {"No device found."}


def test_truncated_log_is_read_up_to_the_cut_with_a_warning(corpus, tmp_path):
    raw = (corpus / "B5paper__documents__allreduce-1proc-4gpu-p2p-direct.log").read_bytes()
    cut = raw[: raw.index(b"via P2P/direct pointer/read", len(raw) // 2) - 7]
    f = tmp_path / "cut.log"
    f.write_bytes(cut)
    with pytest.warns(RecoveryWarning, match=r"cut\.log: the last line has no newline"):
        df = analysis.read(f)
    full = _read(corpus / "B5paper__documents__allreduce-1proc-4gpu-p2p-direct.log")
    n_conn = int((df["record"] == "connection").sum())
    assert 0 < n_conn < int((full["record"] == "connection").sum())
    assert n_conn == cut.count(b"via P2P/direct pointer/read")


def test_not_an_nccl_log_is_a_clear_error(tmp_path):
    f = tmp_path / "train.log"
    f.write_text("epoch 1 loss 0.5\nepoch 2 loss 0.4\n")
    assert not nccl.sniff(f)
    with pytest.raises(ReadError, match=r"train\.log: no NCCL debug line"):
        analysis.read(f, format="nccl")


def test_transport_classes():
    assert nccl.transport_class("P2P/CUMEM/read") == "P2P/CUMEM"
    assert nccl.transport_class("NET/IB/0/GDRDMA") == "NET/IB"
    assert nccl.transport_class("NET/IB/1(3)/GDRDMA(PCI)") == "NET/IB"
    assert nccl.transport_class("NET/Socket/0") == "NET/Socket"
    assert nccl.transport_class("NET/AWS Libfabric/2") == "NET/OFI"
    assert nccl.transport_class("direct shared memory") == "SHM"
    assert nccl.transport_class("COLLNET/SHARP/0") == "CollNet"


# -- nvidia-smi topo -m ---------------------------------------------------------------------

TOPO = {  # file stem -> (GPUs, NIC names, GPU<->GPU cell counts, all cell counts); MANIFEST.md
    "gnosia93__training-on-eks__topo-p4d": (8, [], {"NV12": 56}, {"NV12": 56}),
    "gnosia93__training-on-eks__topo-g6e": (4, [], {"NODE": 12}, {"NODE": 12}),
    "argonne-lcf__GettingStarted__topo": (4, ["mlx5_0", "mlx5_1"], {"NV4": 12}, {"SYS": 14, "NV4": 12, "PHB": 4}),
    "ikarishinjieva__tachikoma.notebook.notes__topo": (
        8, ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"], {"NV12": 56}, {"NV12": 56, "PXB": 18, "SYS": 56, "PIX": 2}),
}


@pytest.mark.parametrize("stem", sorted(TOPO))
def test_topo_matrix_matches_manifest(corpus, stem):
    path = corpus / f"{stem}.txt"
    assert readers.sniff(path) == "nvsmi_topo"
    assert not nccl.sniff(path)
    df = analysis.read(path)
    nvsmi_topo.validate(df)
    gpus, nics, gg, cells = TOPO[stem]
    assert df.loc[df["device_kind"] == "gpu", "device"].nunique() == gpus
    assert sorted(df["nic_name"].dropna().unique()) == nics
    both_gpu = (df["device_kind"] == "gpu") & (df["peer_kind"] == "gpu")
    assert df.loc[both_gpu, "link"].value_counts().loc[lambda s: s > 0].to_dict() == gg
    assert df["link"].value_counts().loc[lambda s: s > 0].to_dict() == cells
    pairs = set(zip(df["device"], df["peer"], df["link"], strict=True))  # symmetric, as every corpus matrix is
    assert all((p, d, lk) in pairs for d, p, lk in pairs)


def test_topo_affinity_and_classes(corpus):
    df = analysis.read(corpus / "argonne-lcf__GettingStarted__topo.txt")
    g0 = df[df["device"] == "GPU0"]
    assert set(g0["cpu_affinity"]) == {"24-31,56-63"} and set(g0["numa_affinity"]) == {"3"}
    assert df.loc[df["link"] == "NV4", "n_nvlinks"].eq(4).all()
    assert set(df.loc[df["link"] == "PHB", "link_class"]) == {"pcie-host-bridge"}
    assert df.loc[df["device_kind"] == "nic", "cpu_affinity"].isna().all()


def test_truncated_topo_matrix_names_file_and_line(corpus, tmp_path):
    lines = (corpus / "gnosia93__training-on-eks__topo-p4d.txt").read_text().splitlines()
    f = tmp_path / "topo.txt"
    f.write_text("\n".join(lines[:4]) + "\n" + lines[4][:20])
    with pytest.raises(ReadError, match=r"topo\.txt: line 5: .*cells for 8 devices"):
        analysis.read(f, format="nvsmi_topo")


# -- the project's own captures (tests/data, made on the lent H100; see the READMEs) ----------

DATA = ROOT / "tests" / "data"


def test_own_h100_capture():
    path = DATA / "nccl" / "h100_ddp_nccl_np1.log"
    assert readers.sniff(path) == "nccl"
    with pytest.warns(RecoveryWarning, match=r"1 Trees item\(s\) cut off where NCCL's 1024-byte line buffer ended"):
        df = analysis.read(path)
    assert set(df["nccl_version"]) == {"2.28.9+cuda13.0"} and set(df["host"]) == {"vm"} and set(df["pid"]) == {617}
    comm = df[df["record"] == "comm"]
    assert comm["text"].tolist() == ["Init START", "topology", "Init COMPLETE", "timings", "Destroy COMPLETE"]
    assert set(comm["nranks"]) == {1} and set(comm["n_nodes"].dropna()) == {1}
    assert set(comm["comm_id"].dropna()) == {"0xba78fc8a9b50abf3"}
    rings = df[df["record"] == "ring"]
    assert len(rings) == 64 and set(rings["n_channels"]) == {64} and set(rings["text"]) == {"0"}
    # the Trees line is 1023 characters: NCCL's buffer cut it inside item [47]
    assert max(len(x) for x in path.read_text().splitlines()) == 1023
    assert df.loc[df["record"] == "tree", "channel"].tolist() == list(range(47))
    assert not (df["record"] == "connection").any() and not (df["record"] == "warn").any()
    assert df.loc[df["record"] == "channels", "n_nvls_channels"].tolist() == [0]
    assert df.loc[df["record"] == "network", "net"].tolist() == ["Socket"]
    assert df.loc[df["record"] == "ib", "text"].tolist() == ["No device found.", "Using [RO]; OOB eth0:192.0.2.2<0>"]


def test_own_single_gpu_topo_with_ansi_header():
    path = DATA / "topo" / "h100_single_gpu.topo.txt"
    assert b"\x1b[4m" in path.read_bytes()
    assert readers.sniff(path) == "nvsmi_topo"
    df = analysis.read(path)
    nvsmi_topo.validate(df)
    assert len(df) == 0  # one GPU: no pair


@pytest.mark.parametrize("name", ["nccl/h100_ddp_nccl_np1.log", "topo/h100_single_gpu.topo.txt"])
def test_cut_anywhere_is_a_frame_or_a_clear_error(tmp_path, name):
    """A log or matrix cut at any of 60 offsets gives a frame (with RecoveryWarnings) or a
    ReadError naming the file, never another exception."""
    raw = (DATA / name).read_bytes()
    fmt = "nccl" if name.startswith("nccl") else "nvsmi_topo"
    outcomes = set()
    for i, cut in enumerate(range(1, len(raw), max(1, len(raw) // 60))):
        f = tmp_path / f"cut{i}{Path(name).suffix}"
        f.write_bytes(raw[:cut])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RecoveryWarning)
            try:
                df = analysis.read(f, format=fmt)
            except ReadError as exc:
                assert str(f) in str(exc)
                outcomes.add("error")
                continue
        (nccl if fmt == "nccl" else nvsmi_topo).validate(df)
        outcomes.add("frame")
    assert outcomes == {"error", "frame"}  # early cuts hold no NCCL line / no matrix row; later ones do


def test_line_forms_the_corpus_lacks(tmp_path):
    """NCCL 2.3/2.4 ring and connection lines, v2.4 trees, CollNet, IB with GDRDMA and PXN,
    v2.30 WARN with (func): one line each, typed from the format strings FORMATS.md quotes
    from NCCL's source (no corpus file has them)."""
    f = tmp_path / "old.log"
    f.write_text("\n".join([
        "NCCL version 2.4.8+cuda10.1",
        "h1:10:10 [0] NCCL INFO Ring 00 :    0   1",
        "h1:10:10 [0] NCCL INFO Ring 00 : 0[0] -> 1[1] via P2P/IPC",
        "h1:10:10 [0] NCCL INFO Ring 01 : 0[0] -> 1[1] via direct shared memory",
        "h1:10:10 [0] NCCL INFO Ring 02 : 0 -> 1 [send] via NET/IB/0/GDRDMA",
        "h1:10:10 [0] NCCL INFO Trees [0] -1->0->1/-1/-1 [1] 1->0->-1/-1/-1",
        "h1:10:10 [0] NCCL INFO comm 0x55aa rank 0 nranks 2 cudaDev 0 nvmlDev 0 - Init COMPLETE",
        "h1:10:10 [0] NCCL INFO CollNet 00/0 : 0 [send] via COLLNET/SHARP/0/GDRDMA",
        "h1:10:10 [0] NCCL INFO Channel 03/0 : 1[1] -> 0[0] [receive] via NET/IB/1(3)/GDRDMA(PCI)",
        "h1:10:10 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB ib0:10.0.0.1<0>",
        "",
        "[2030-01-01 00:00:00] h1:10:11 [0] transport/net.cc:123 (ncclNetConnect) NCCL WARN NET/IB : Got completion "
        "with error 12",
    ]) + "\n")
    df = analysis.read(f, format="nccl")
    conn = df[df["record"] == "connection"]
    assert conn["transport"].tolist() == ["P2P/IPC", "SHM", "NET/IB", "CollNet", "NET/IB"]
    assert conn["rank"].tolist() == [0, 0, 0, 0, 0] and conn["peer"].tolist()[2] == 1 and conn["direction"].tolist()[-1] == "recv"
    assert conn["gdrdma"].tolist()[2] and conn["net_dev"].tolist()[-1] == 1
    assert set(conn["nranks"]) == {2} and set(df["nccl_version"]) == {"2.4.8+cuda10.1"}
    assert df.loc[df["record"] == "ring", "text"].tolist() == ["0 1"]
    assert df.loc[df["record"] == "tree", "rank"].tolist() == [0, 0]
    assert df.loc[df["record"] == "warn", "text"].tolist() == ["NET/IB : Got completion with error 12"]
    from analysis.metrics.commpath import ib_devices

    assert ib_devices(df) == ["[0]mlx5_0:1/IB", "[1]mlx5_1:1/RoCE"]
