"""Study 7: batch size and learning rate."""

from __future__ import annotations

import pandas as pd

from analysis import metrics as M
from analysis import plots as P
from analysis.studies._base import (
    Context,
    Section,
    Skip,
    usable_runs,
)


def study_batch(ctx: Context) -> Section:
    sec = Section(intro="Epoch time against the batch size on one device, and the validation metric against epochs and "
                  "against training time.")
    pr = ctx.per_run
    t = M.batch_size_epoch_time(pr, n_ranks=1)
    got = False
    if t["batch_size"].nunique() >= 2:
        sec.figures.append(("batch_size", P.plot_batch_size(t)))
        sec.tables.append(("batch_size", t, "One rank."))
        one = pr[pr["n_ranks"] == 1]
        cmp = M.compare_groups(one, axis="batch_size", keys=("config_backend", "n_ranks"))
        if len(cmp):
            sec.tables.append(("batch_size_compare", cmp, "Time per sample of each batch size against the "
                                                          "smallest, one rank: ratio, 95 % interval, verdict."))
        got = True
    else:
        sec.notes.append("Only one batch size was run on one rank: no epoch-time curve.")
    epochs = ctx.rs.epochs
    if len(epochs) and epochs["val_metric"].notna().any():
        curves = M.validation_curves(epochs, usable_runs(ctx))
        curves = curves[curves["val_metric"].notna()]
        sec.figures.append(("validation_epochs", P.plot_validation(curves, x="epoch")))
        sec.figures.append(("validation_time", P.plot_validation(curves, x="wall_s")))
        got = True
    if not got:
        raise Skip("needs two batch sizes at one rank or validation metrics")
    lr = usable_runs(ctx)[["run_id", "batch_size", "global_batch_size", "learning_rate", "lr_scaling"]]
    if lr["learning_rate"].notna().any():
        sec.tables.append(("learning_rates", lr, "Learning rate used by each run and its scaling rule."))
    _batch_reference(ctx, sec)
    return sec


def _batch_reference(ctx: Context, sec: Section) -> None:
    """The reference study's batch figures: speedup over batch 75 at one rank, the same global
    batch on 1 and on N ranks, and validation MSE per learning-rate rule with repeats combined."""
    pr = ctx.per_run
    sp = M.batch_speedup(pr, reference_batch=REFERENCE_BATCH)
    if sp["speedup"].notna().any() and sp["batch_size"].nunique() >= 2:
        sec.figures.append(("batch_speedup", P.plot_batch_speedup(sp)))
        sec.tables.append(("batch_speedup", sp, f"Speedup = time per sample at batch {REFERENCE_BATCH} / at the "
                                                "batch (means over repeats), one rank; epoch times as recorded."))
    epochs = ctx.rs.epochs
    if not (len(epochs) and epochs["val_loss"].notna().any()):
        sec.notes.append("No validation loss recorded: no learning-rate curves.")
        return
    curves = M.validation_curves(epochs, usable_runs(ctx))
    curves = curves[curves["val_loss"].notna()]
    eq = M.equal_batch_comparison(pr, final=M.final_losses(curves))
    if len(eq):
        sec.figures.append(("equal_batch", P.plot_equal_batch(eq)))
        sec.tables.append(("equal_batch", eq, "The same global batch reached with different rank counts "
                                              "(e.g. 1 rank × 150 against 2 ranks × 75)."))
    lr = M.lr_rule_curves(curves)
    sec.figures.append(("lr_loss_epochs", P.plot_lr_curves(lr, x="epoch")))
    budget = _time_budget(usable_runs(ctx))
    sec.figures.append(("lr_loss_time", P.plot_lr_curves(lr, x="wall_s", budget_s=budget)))
    target = float(curves.groupby("run_id")["val_loss"].min().max())
    ttt = M.time_to_target(curves, target=target)
    sec.tables.append(("time_to_target", ttt, f"Training time until the validation MSE first reaches {target:.4g} "
                                              "(the worst run's best value, so every run reaches it)."))
    if budget is not None:
        sec.notes.append(f"The runs had a fixed time budget of {budget:g} s of training (--time-budget).")


#: The reference study's single-GPU batch size (speedups over batch size are relative to it).
REFERENCE_BATCH = 75


def _time_budget(runs: pd.DataFrame) -> float | None:
    vals = runs["time_budget_s"].dropna() if "time_budget_s" in runs.columns else pd.Series(dtype=float)
    return float(vals.max()) if len(vals) else None
