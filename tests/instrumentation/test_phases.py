"""Phase API, step/epoch bookkeeping and the automatic instrumentation, in one process."""

from __future__ import annotations

import json

import pytest

import analysis
import instrumentation as ssi
from instrumentation import phases


def _events(run):
    ssi.finish()
    return analysis.read(run.trace_path, format="scalescope_trace")


def test_everything_is_a_noop_before_init(tmp_path):
    phases.S.reset()
    with ssi.phase("forward"):
        pass
    ssi.step_end()
    assert ssi.epoch_end(0) is None
    assert list(ssi.wrap_loader([1, 2])) == [1, 2]
    assert phases.S.rec is None


def test_steps_epochs_eval_and_data(tmp_path, fresh_state):
    run = ssi.init(run_dir=tmp_path / "r", framework="none", sample_interval_s=0)
    for epoch in range(2):
        for _x in ssi.wrap_loader(range(3)):
            with ssi.phase("forward"):
                pass
            with ssi.phase("backward"):
                pass
            ssi.step_end()
        with ssi.phase("eval"), ssi.phase("forward"):
            pass
        line = ssi.epoch_end(epoch, samples=3, train_loss=0.5)
        assert line["epoch"] == epoch and line["peak_mem_kind"] == "rss"
        assert line["peak_mem_mib"] > 0
    df = _events(run)
    counts = df["name"].value_counts()
    assert counts["step"] == 6 and counts["backward"] == 6 and counts["epoch"] == 2
    assert counts["eval"] == 2 and counts["forward"] == 8  # 6 training + 2 in eval
    assert counts["data"] == 8  # 6 batches + the final next() of each epoch
    steps = df[df["name"] == "step"]
    assert list(steps["step"]) == [0, 1, 2, 3, 4, 5]
    assert list(steps["epoch"]) == [0, 0, 0, 1, 1, 1]
    # phases inside eval and the end-of-data next() carry no step and open none
    in_eval = df[(df["name"] == "forward") & df["step"].isna()]
    assert len(in_eval) == 2
    assert df[(df["name"] == "data")]["step"].isna().sum() == 2
    # every step phase lies within its step
    for s, group in df[df["step"].notna()].groupby("step"):
        step = group[group["name"] == "step"].iloc[0]
        inner = group[group["name"] != "step"]
        assert (inner["start_ns"] >= step["start_ns"]).all()
        assert ((inner["start_ns"] + inner["dur_ns"]) <= step["start_ns"] + step["dur_ns"]).all(), s
    lines = [json.loads(x) for x in (run.run_dir / "rank-00000.epochs.jsonl").read_text().splitlines()]
    assert [x["epoch"] for x in lines] == [0, 1] and lines[0]["samples"] == 3
    manifest = json.loads((run.run_dir / "run.json").read_text())
    assert manifest["status"] == "ok" and manifest["end_time"]


def test_decorator_and_marker(tmp_path, fresh_state):
    run = ssi.init(run_dir=tmp_path / "r", framework="none", sample_interval_s=0)

    @ssi.phase("eval")
    def evaluate(x):
        return x * 2

    assert evaluate(4) == 8 and evaluate(5) == 10
    assert evaluate.__name__ == "evaluate"
    ssi.mark("checkpoint", path="ckpt.pt")
    df = _events(run)
    assert (df["name"] == "eval").sum() == 2
    m = df[df["kind"] == "marker"]
    assert list(m["name"]) == ["checkpoint"] and list(m["dur_ns"]) == [0]


def test_init_config_tags_and_sweep_config(tmp_path, fresh_state, monkeypatch):
    monkeypatch.setenv("SCALESCOPE_CONFIG", json.dumps({"backend": "none", "np": 1, "repeat": 2}))
    monkeypatch.setenv("SCALESCOPE_RUN_ID", "none_np1_r2")
    run = ssi.init(run_dir=tmp_path / "r", framework="none", sample_interval_s=0,
                   config={"batch_size": 32, "learning_rate": 0.1, "status": "hacked"},
                   tags={"who": "test"})
    assert ssi.sweep_config()["repeat"] == 2
    m = json.loads((run.run_dir / "run.json").read_text())
    assert m["run_id"] == "none_np1_r2" and m["status"] == "running"
    assert m["batch_size"] == 32 and m["global_batch_size"] == 32 and m["learning_rate"] == 0.1
    assert m["config_rejected_keys"] == ["status"]
    assert m["config"] == {"backend": "none", "np": 1, "repeat": 2}
    assert m["tags"] == {"who": "test"} and m["world_size"] == 1
    assert m["ranks"][0]["pid"] > 0 and m["nvtx"]["mode"].startswith("off")
    for key in ("exit_code", "end_time", "horovod", "gpu", "slurm", "profilers", "epochs"):
        assert key in m  # documented keys are present (null), never absent
    ssi.finish()
    assert json.loads((run.run_dir / "run.json").read_text())["status"] == "ok"


torch = pytest.importorskip("torch")


def test_instrument_records_forward_backward_optimizer(tmp_path, fresh_state):
    run = ssi.init(run_dir=tmp_path / "r", framework="none", sample_interval_s=0)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = [(torch.randn(5, 4), torch.randint(0, 2, (5,))) for _ in range(3)]
    loader = ssi.instrument(model, opt, data)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)  # wraps opt.step after us
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1 * 0.1**3)
    df = _events(run)
    counts = df["name"].value_counts()
    for name in ("data", "forward", "backward", "optimizer", "step"):
        assert counts[name] == 3 + (name == "data"), name
    for s in range(3):
        g = df[df["step"] == s].set_index("name")
        assert g.loc["forward", "start_ns"] < g.loc["backward", "start_ns"] < g.loc["optimizer", "start_ns"]
        assert g.loc["backward", "start_ns"] + g.loc["backward", "dur_ns"] <= g.loc["optimizer", "start_ns"]
