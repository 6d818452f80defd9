"""comm_path summaries and warnings from real NCCL logs (../shared/corpus/nccl, skipped when
absent) and the project's own H100 capture; Gloo/MPI paths from manifests."""

from __future__ import annotations

import warnings
from pathlib import Path

import pandas as pd
import pytest

import analysis
from analysis.errors import RecoveryWarning
from analysis.metrics import commpath as C
from analysis.runtable import run_comm_path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "corpus" / "nccl"

PATHS = {  # corpus log -> (comm_path, whether a warning is expected)
    "argonne-lcf__alcf-nccl-tests__polaris-2node-ofi-cxi-gdrdma": (
        "intra-node P2P/CUMEM, inter-node NET/OFI GDRDMA", False),
    "aws-samples__aws-efa-eks__p4d-2node-efa-gdrdma-mpirun-tagged": (
        "intra-node P2P/IPC, inter-node NET/OFI GDRDMA", False),
    "aws-samples__eks-efa-examples__nccl264-2node-efa-ring-format": ("intra-node P2P/IPC, inter-node NET/OFI", False),
    "youkaichao__my-portable-aiml-environment__2node-socket-p2p-ipc": (
        "intra-node P2P/IPC, inter-node NET/Socket", False),
    "B5paper__documents__allreduce-1proc-4gpu-p2p-direct": ("intra-node P2P/direct", False),
    "gnosia93__training-on-eks__g6e-1pod-4proc-shm": ("intra-node SHM", False),
    "gnosia93__training-on-eks__p4d-1pod-4proc-p2p-cumem": ("intra-node P2P/CUMEM", False),
    "gnosia93__training-on-eks__p4d-ofi-init-warn-socket-fallback": ("intra-node P2P/CUMEM", True),
    "devopsrustem__slurmv4__sglang-bootstrap-connrefused-warn": ("NCCL (no connection line in the logs)", True),
}


def _read(path: Path) -> pd.DataFrame:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecoveryWarning)
        return analysis.read(path, format="nccl")


@pytest.mark.parametrize("stem", sorted(PATHS))
def test_comm_path_of_corpus_logs(stem):
    if not CORPUS.is_dir():
        pytest.skip(f"NCCL corpus not present at {CORPUS}")
    path, warned = PATHS[stem]
    s = C.summarize_nccl(_read(CORPUS / f"{stem}.log"))
    assert s["comm_path"] == path
    assert bool(s["comm_warnings"]) == warned


def test_communicators_of_a_two_node_log():
    if not CORPUS.is_dir():
        pytest.skip(f"NCCL corpus not present at {CORPUS}")
    c = C.communicators(_read(CORPUS / "argonne-lcf__alcf-nccl-tests__polaris-2node-ofi-cxi-gdrdma.log"))
    assert len(c) == 1
    row = c.iloc[0]
    assert (row["comm_key"], row["n_ranks"], row["n_nodes"], row["local_ranks"]) == ("0x985f886fa6ca5276", 8, 2, 4)
    assert row["hosts"] == "x3207c0s25b0n0,x3207c0s25b1n0" and row["gdrdma"] and row["n_channels"] == 4
    # no commId before NCCL 2.16: keyed by nranks; nodes from the hosts of all 16 ranks
    old = C.communicators(_read(CORPUS / "aws-samples__eks-efa-examples__nccl264-2node-efa-ring-format.log"))
    assert old[["comm_key", "n_ranks", "n_nodes"]].values.tolist() == [["nranks=16", 16, 2]]


def test_sockets_despite_ib_devices_is_warned():
    if not CORPUS.is_dir():
        pytest.skip(f"NCCL corpus not present at {CORPUS}")
    df = _read(CORPUS / "youkaichao__my-portable-aiml-environment__2node-socket-p2p-ipc.log")
    assert C.summarize_nccl(df)["comm_warnings"] == []  # NCCL found no IB device: sockets were the only way
    warned = C.summarize_nccl(df, rdma_devices=["mlx5_0"])["comm_warnings"]
    assert len(warned) == 1 and "used sockets (NET/Socket) although IB/RDMA devices were present (mlx5_0)" in warned[0]


def test_own_single_rank_capture():
    s = C.summarize_nccl(_read(ROOT / "tests" / "data" / "nccl" / "h100_ddp_nccl_np1.log"))
    assert s == {"comm_path": "NCCL, 1 rank (no peer connection)", "nccl_version": "2.28.9+cuda13.0",
                 "comm_warnings": []}
    assert C.ib_devices(_read(ROOT / "tests" / "data" / "nccl" / "h100_ddp_nccl_np1.log")) == []


@pytest.mark.parametrize(("manifest", "path"), [
    ({"framework": "ddp", "backend": "gloo", "n_nodes": 1}, "intra-node Gloo TCP"),
    ({"framework": "horovod", "backend": "mpi", "n_nodes": 2,
      "comm_capture": {"node": {"mpi": {"implementation": "Open MPI", "version": "4.1.4"}}}},
     "inter-node MPI (Open MPI 4.1.4)"),
    ({"framework": "none", "backend": None}, "none (1 process)"),
    ({"framework": "ddp", "backend": "nccl", "n_nodes": 1}, "intra-node NCCL (no NCCL log captured)"),
])
def test_comm_path_from_the_manifest(tmp_path, manifest, path):
    assert C.comm_path(manifest)["comm_path"] == path
    assert run_comm_path(tmp_path, manifest)["comm_path"] == path


def test_nccl_logs_in_the_run_directory_win(tmp_path):
    if not CORPUS.is_dir():
        pytest.skip(f"NCCL corpus not present at {CORPUS}")
    src = CORPUS / "gnosia93__training-on-eks__g6e-1pod-4proc-shm.log"
    (tmp_path / "nccl.llama.232.log").write_bytes(src.read_bytes())
    got = run_comm_path(tmp_path, {"framework": "ddp", "backend": "nccl", "n_nodes": 1})
    assert got["comm_path"] == "intra-node SHM" and got["nccl_version"] == "2.27.3+cuda12.9"


def test_transport_per_channel():
    if not CORPUS.is_dir():
        pytest.skip(f"NCCL corpus not present at {CORPUS}")
    b5 = C.channel_transports(_read(CORPUS / "B5paper__documents__allreduce-1proc-4gpu-p2p-direct.log"))
    assert b5["channel"].tolist() == list(range(24)) and set(b5["transports"]) == {"P2P/direct"}
    assert b5["n_connections"].sum() == 168
    alcf = C.channel_transports(_read(CORPUS / "argonne-lcf__alcf-nccl-tests__polaris-2node-ofi-cxi-gdrdma.log"))
    assert set(alcf["transports"]) <= {"P2P/CUMEM", "NET/OFI GDRDMA", "NET/OFI GDRDMA;P2P/CUMEM"}
    assert alcf["n_connections"].sum() == 78  # 56 P2P + 22 NET (the 2 spliced fragments are not counted)


def test_nvls_channels_count_as_a_transport(tmp_path):
    f = tmp_path / "nvls.log"
    f.write_text(
        "h:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 1000 commId 0xabc - Init START\n"
        "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n"
        "h:1:1 [0] NCCL INFO 32 coll channels, 32 collnet channels, 16 nvls channels, 32 p2p channels, "
        "32 p2p channels per peer\n")
    df = analysis.read(f, format="nccl")
    assert C.communicators(df)["intra_transports"].tolist() == ["NVLS;P2P/CUMEM"]
    assert C.summarize_nccl(df)["comm_path"] == "intra-node NVLS+P2P/CUMEM"
