"""A tiny Horovod program for the set-up tests: every rank contributes rank+1 and checks the
allreduced sum and average, then writes its result to `<out_dir>/rank<N>.json` (argv[1]).

A file per rank, not a line on stdout: mpirun forwards each rank's output in chunks, and two
ranks' lines can arrive joined on one line (`RESULT {...}[1,1]<stdout>:RESULT {...}`)."""

import json
import sys
from pathlib import Path

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
out = Path(sys.argv[1]) / f"rank{rank}.json"
out.write_text(json.dumps({"rank": rank, "size": size, "ok": all(results.values()),
                           "sum": float(s[0]), "expected": expected_sum}))
hvd.shutdown()
sys.exit(0 if all(results.values()) else 3)
