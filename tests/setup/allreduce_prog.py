"""A tiny Horovod program for the set-up tests: every rank contributes rank+1 and checks the
allreduced sum and average, then prints one line the test parses."""

import json
import sys

import horovod.torch as hvd
import torch

hvd.init()
rank, size = hvd.rank(), hvd.size()
expected_sum = size * (size + 1) / 2
results = {}
for i in range(5):  # several steps so the timeline has repeated ALLREDUCE activity
    t = torch.full((1000,), float(rank + 1))
    s = hvd.allreduce(t, op=hvd.Sum, name=f"grad_{i}")
    a = hvd.allreduce(t, op=hvd.Average, name=f"avg_{i}")
    ok = bool(torch.all(s == expected_sum)) and bool(torch.allclose(a, torch.full_like(a, expected_sum / size)))
    results[i] = ok
print("RESULT " + json.dumps({"rank": rank, "size": size, "ok": all(results.values()),
                              "sum": float(s[0]), "expected": expected_sum}), flush=True)
hvd.shutdown()
sys.exit(0 if all(results.values()) else 3)
