"""What the instrumentation records for any script, in one process: threads, the model's size,
samples without ``samples=``, an implicit epoch for scripts without epochs, a resumed run."""

from __future__ import annotations

import json

import pytest

import instrumentation as ssi
from instrumentation import phases
from instrumentation.threads import THREAD_KEYS, thread_info

torch = pytest.importorskip("torch")


def _manifest(run) -> dict:
    return json.loads((run.run_dir / "run.json").read_text())


def _epochs(run) -> list[dict]:
    return [json.loads(line) for line in (run.run_dir / "rank-00000.epochs.jsonl").read_text().splitlines()]


@pytest.fixture
def torch_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_threads_are_set_from_the_sweep_and_recorded(tmp_path, fresh_state, torch_threads, monkeypatch):
    torch.set_num_threads(2)  # as torch would start without OMP_NUM_THREADS on 2 cores
    monkeypatch.setenv("SCALESCOPE_THREADS", "1")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # torch did not start with the sweep's number
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    run = ssi.init(run_dir=tmp_path / "r", framework="none", sample_interval_s=0)
    assert torch.get_num_threads() == 1
    m = _manifest(run)
    t = m["ranks"][0]["threads"]
    assert set(t) == set(THREAD_KEYS)
    assert (t["torch_intra_op"], t["omp_num_threads"], t["mkl_num_threads"]) == (1, None, None)
    assert t["torch_inter_op"] >= 1 and 1 <= t["cpus_available"] <= t["host_cpus"]
    assert m["threads_per_rank"] == 1
    # a run outside a sweep, without a framework: the baseline kind says so
    assert (m["baseline_kind"], m["framework_initialised"]) == ("no_framework", None)
    assert m["working_dir"]["mode"] is None and m["working_dir"]["path"]


def test_a_script_that_set_its_own_threads_keeps_them(tmp_path, fresh_state, torch_threads, monkeypatch):
    monkeypatch.setenv("SCALESCOPE_THREADS", "2")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # torch started with 2: the script chose 1 itself
    torch.set_num_threads(1)
    run = ssi.init(run_dir=tmp_path / "r", framework="none", sample_interval_s=0)
    assert torch.get_num_threads() == 1
    m = _manifest(run)
    assert m["ranks"][0]["threads"]["torch_intra_op"] == 1 and m["threads_per_rank"] == 1


def test_a_bad_thread_request_changes_nothing(tmp_path, fresh_state, torch_threads, monkeypatch):
    torch.set_num_threads(2)
    monkeypatch.setenv("SCALESCOPE_THREADS", "many")
    with pytest.warns(ssi.InstrumentationWarning, match="SCALESCOPE_THREADS='many'"):
        run = ssi.init(run_dir=tmp_path / "r", framework="none", sample_interval_s=0)
    assert torch.get_num_threads() == 2 and _manifest(run)["threads_per_rank"] == 2


def test_thread_info_without_torch_in_the_process(monkeypatch):
    import sys

    monkeypatch.delitem(sys.modules, "torch")
    info = thread_info()
    assert info["torch_intra_op"] is None and info["torch_inter_op"] is None and info["host_cpus"] >= 1


def test_model_size_and_samples_without_samples_argument(tmp_path, fresh_state):
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Linear(5, 2))
    model[1].bias.requires_grad_(False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [(torch.randn(4, 6), torch.randn(4, 2)) for _ in range(3)] + [(torch.randn(1, 6), torch.randn(1, 2))]
    loader = ssi.instrument(model, opt, batches)  # before init: noted when init comes
    run = ssi.init(run_dir=tmp_path / "r", framework="none", sample_interval_s=0)
    m = _manifest(run)
    assert m["n_params"] == 6 * 5 + 5 + 5 * 2 + 2
    assert (m["grad_bytes"], m["grad_bytes_source"], m["grad_tensors"]) == (4 * (6 * 5 + 5 + 5 * 2), "model", None)

    def train(data):
        for x, y in data:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()  # closes the step

    train(loader)  # batches seen by the wrapped loader (the last one smaller)
    line = ssi.epoch_end(0)
    assert (line["samples"], line["samples_source"], line["steps"]) == (13, "counted", 4)
    train(batches[:2])  # no loader: the model's training forward sees them
    with torch.no_grad():
        model(torch.randn(50, 6))  # an evaluation forward is not a training sample
    line = ssi.epoch_end(1)
    assert (line["samples"], line["samples_source"], line["steps"]) == (8, "counted", 2)
    line = ssi.epoch_end(2, samples=7)
    assert (line["samples"], line["samples_source"]) == (7, "given")
    with ssi.phase("forward"):  # hand-placed phases, no batch seen, no batch size known
        pass
    ssi.step_end()
    line = ssi.epoch_end(3)
    assert (line["samples"], line["samples_source"], line["steps"]) == (None, None, 1)
    ssi.finish()
    import analysis

    ev = analysis.read(run.trace_path, format="scalescope_trace")
    fwd = ev[ev["name"] == "forward"]
    # the no_grad forward is recorded without a step; the 4 + 2 training forwards and the
    # hand-placed one each have theirs
    assert fwd["step"].isna().sum() == 1 and fwd["step"].notna().sum() == 7


def test_batch_size_times_steps_when_no_batch_is_seen(tmp_path, fresh_state):
    ssi.init(run_dir=tmp_path / "r", framework="none", sample_interval_s=0, config={"batch_size": 5})
    for _ in range(3):
        with ssi.phase("forward"):
            pass
        ssi.step_end()
    line = ssi.epoch_end(0)
    assert (line["samples"], line["samples_source"]) == (15, "batch_size_x_steps")


def test_a_script_without_epochs_gets_one_implicit_epoch(tmp_path, fresh_state):
    run = ssi.init(run_dir=tmp_path / "r", framework="none", sample_interval_s=0)
    for _ in range(5):
        with ssi.phase("forward"):
            phases.note_batch(torch.zeros(8, 3), source="forward")
        ssi.step_end()
    ssi.finish()
    (line,) = _epochs(run)
    assert line["implicit"] is True and (line["epoch"], line["steps"], line["samples"]) == (0, 5, 40)
    assert line["epoch_time_s"] > 0
    assert _manifest(run)["resumed_from_epoch"] is None


def test_steps_after_the_last_epoch_end_become_the_next_epoch(tmp_path, fresh_state):
    run = ssi.init(run_dir=tmp_path / "r", framework="none", sample_interval_s=0, config={"batch_size": 2})
    for n in (2, 3):  # warm-up, then the timed iterations of a benchmark
        for _ in range(n):
            with ssi.phase("forward"):
                pass
            ssi.step_end()
        if n == 2:
            ssi.epoch_end(0)
    ssi.finish()
    first, second = _epochs(run)
    assert "implicit" not in first and second["implicit"] is True
    assert (second["epoch"], second["steps"], second["samples"]) == (1, 3, 6)


def test_a_failed_run_gets_no_implicit_epoch(tmp_path, fresh_state):
    run = ssi.init(run_dir=tmp_path / "r", framework="none", sample_interval_s=0)
    with ssi.phase("forward"):
        pass
    ssi.step_end()
    ssi.finish(status="failed")
    assert not (run.run_dir / "rank-00000.epochs.jsonl").exists()


def test_a_run_that_starts_at_a_later_epoch_is_flagged(tmp_path, fresh_state):
    run = ssi.init(run_dir=tmp_path / "r", framework="none", sample_interval_s=0)
    for epoch in (50, 51):
        with ssi.phase("forward"):
            pass
        with pytest.warns(ssi.InstrumentationWarning, match="labelled 50, not 0 or 1") if epoch == 50 else _nothing():
            ssi.epoch_end(epoch)
        # written at the epoch's end: a run killed later still says so
        assert _manifest(run)["resumed_from_epoch"] == 50


@pytest.mark.parametrize("first", [0, 1], ids=["from-0", "from-1"])
def test_a_run_that_starts_at_epoch_0_or_1_is_not_flagged(tmp_path, fresh_state, first):
    run = ssi.init(run_dir=tmp_path / "r", framework="none", sample_interval_s=0)
    ssi.epoch_start(first)
    with ssi.phase("forward"):
        pass
    ssi.epoch_end(first)
    ssi.epoch_end(5)  # later labels are the script's business
    assert _manifest(run)["resumed_from_epoch"] is None


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_threads_set_after_init_are_recorded_at_the_first_epoch(tmp_path, fresh_state, torch_threads, monkeypatch):
    from instrumentation.experiment import RunSpec, finalize_run
    from instrumentation.threads import threads_path

    monkeypatch.delenv("SCALESCOPE_THREADS", raising=False)
    torch.set_num_threads(2)
    run = ssi.init(run_dir=tmp_path / "r", framework="none", sample_interval_s=0)
    assert _manifest(run)["threads_per_rank_source"] == "ranks"
    torch.set_num_threads(1)  # the script's own choice, after init
    with ssi.phase("forward"):
        pass
    ssi.epoch_end(0)
    saved = json.loads(threads_path(run.run_dir, 0).read_text())
    assert saved["threads"]["torch_intra_op"] == 1
    m = _manifest(run)
    assert m["ranks"][0]["threads"]["torch_intra_op"] == 1 and m["ranks"][0]["threads_changed_after_init"]
    assert m["threads_per_rank"] == 1
    ssi.finish()
    # the launcher merges every rank's file (here: another rank's, written by hand)
    other = {**saved["threads"], "torch_intra_op": 3}
    m["ranks"].append({"rank": 1, "threads": dict(saved["threads"])})
    (run.run_dir / "run.json").write_text(json.dumps(m))
    threads_path(run.run_dir, 1).write_text(json.dumps({"rank": 1, "threads": other}))
    finalize_run(run.run_dir, RunSpec("baseline", 1, None, 1), exit_code=0, experiment="E", command=[])
    m = _manifest(run)
    assert m["ranks"][1]["threads"]["torch_intra_op"] == 3 and m["threads_per_rank"] == 3


def test_ddp_at_one_process_without_a_process_group_is_recorded(tmp_path, fresh_state, monkeypatch):
    """torchrun --nproc-per-node 1 and a script that makes a process group only for more
    ranks (``if world_size > 1: init_process_group()``): recorded as one process."""
    monkeypatch.setenv("WORLD_SIZE", "1")
    with pytest.warns(ssi.InstrumentationWarning, match="at one process without a process group"):
        run = ssi.init(run_dir=tmp_path / "r", framework="ddp", sample_interval_s=0, config={"epochs": 1})
    with ssi.phase("forward"):
        phases.note_batch(torch.zeros(4, 2), source="forward")
    ssi.step_end()
    ssi.epoch_end(0)
    ssi.finish()
    m = _manifest(run)
    assert (m["framework"], m["world_size"], m["status"]) == ("ddp", 1, "ok")
    assert m["end"] == {"by": "script", "steps": 1, "epoch_ends": 1, "epochs_planned": 1, "last_epoch_reached": True}
    monkeypatch.setenv("WORLD_SIZE", "2")  # more ranks without a process group: recording is off
    with pytest.warns(ssi.InstrumentationWarning, match="torch.distributed is not initialised"):
        assert ssi.init(run_dir=tmp_path / "r2", framework="ddp", sample_interval_s=0).trace_path is None


def test_a_wrapped_loader_records_its_dataset_size(tmp_path, fresh_state):
    import torch

    data = torch.utils.data.TensorDataset(torch.zeros(30, 2))
    run = ssi.init(run_dir=tmp_path / "r", framework="none", sample_interval_s=0)
    for _ in ssi.wrap_loader(torch.utils.data.DataLoader(data, batch_size=10)):
        ssi.step_end()
    ssi.finish()
    m = json.loads((run.run_dir / "run.json").read_text())
    assert m["loader_dataset_size"] == 30 and m["dataset_size"] == 30
