"""Marks phases with scalescope's instrumentation for a few steps (no torch model needed)."""

import sys
import time

import instrumentation as ssi

ssi.init(run_dir=sys.argv[1], framework="none", config={"batch_size": 1})
for epoch in range(2):
    for _step in range(5):
        with ssi.phase("data"):
            time.sleep(0.002)
        with ssi.phase("forward"):
            time.sleep(0.004)
        with ssi.phase("backward"):
            time.sleep(0.006)
        with ssi.phase("optimizer"):
            time.sleep(0.001)
        ssi.step_end()
    ssi.epoch_end(epoch, samples=5)
ssi.finish()
