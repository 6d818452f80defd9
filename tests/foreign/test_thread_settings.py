"""The runs table's thread columns and the thread-mismatch warning, from manifests alone."""

from __future__ import annotations

import pandas as pd

from analysis.runtable import thread_mismatches, thread_settings


def _rank(intra, cpus=2):
    return {"threads": {"torch_intra_op": intra, "torch_inter_op": 2, "omp_num_threads": str(intra),
                        "mkl_num_threads": None, "cpus_available": cpus, "host_cpus": cpus}}


def test_thread_columns_from_the_ranks_else_the_manifest():
    assert thread_settings({"ranks": [_rank(1), _rank(1)]}) == {"threads_per_rank": 1, "host_cpus": 2, "threads_mixed": False}
    assert thread_settings({"ranks": [_rank(1), _rank(3, cpus=8)]})["threads_mixed"] is True
    assert thread_settings({"ranks": [_rank(1), _rank(3, cpus=8)]})["threads_per_rank"] == 3
    # a manifest written before ranks recorded threads: the script's own number
    assert thread_settings({"ranks": [{"rank": 0}], "threads_per_rank": 4}) == {
        "threads_per_rank": 4, "host_cpus": None, "threads_mixed": None}


def _runs(rows):
    df = pd.DataFrame(rows, columns=["run_id", "experiment", "batch_size", "n_ranks", "n_nodes", "threads_per_rank",
                                     "host_cpus", "threads_mixed"])
    for col in ("batch_size", "n_ranks", "n_nodes", "threads_per_rank", "host_cpus"):
        df[col] = df[col].astype("Int64")
    df["threads_mixed"] = df["threads_mixed"].astype("boolean")
    return df


def test_cores_per_rank_or_equal_threads_are_consistent():
    cores = _runs([("base", "E", 8, 1, 1, 4, 4, False), ("ddp2", "E", 8, 2, 1, 2, 4, False),
                   ("ddp4", "E", 8, 4, 1, 1, 4, False), ("ddp8", "E", 8, 8, 2, 1, 4, False)])
    assert thread_mismatches(cores) == []
    one = _runs([("base", "E", 8, 1, 1, 1, 4, False), ("ddp2", "E", 8, 2, 1, 1, 4, False)])
    assert thread_mismatches(one) == []
    unknown = _runs([("base", "E", 8, 1, 1, None, None, None), ("ddp2", "E", 8, 2, 1, 1, 4, False)])
    assert thread_mismatches(unknown) == []


def test_different_settings_in_one_comparison_are_named():
    # torchrun's OMP_NUM_THREADS=1 against horovodrun keeping one thread per core
    mixed = _runs([("base", "E", 8, 1, 1, 2, 2, False), ("ddp2", "E", 8, 2, 1, 1, 2, False),
                   ("hvd2", "E", 8, 2, 1, 2, 2, False), ("bs16", "E", 16, 2, 1, 2, 2, False)])
    (msg,) = thread_mismatches(mixed)
    assert "experiment=E, batch_size=8" in msg and "base: 2, ddp2: 1, hvd2: 2" in msg and "bs16" not in msg
    ranks = _runs([("a", "E", 8, 2, 1, 2, 2, True)])
    assert thread_mismatches(ranks) == ["a: its ranks ran with different torch thread counts (run.json ranks[i].threads)"]
