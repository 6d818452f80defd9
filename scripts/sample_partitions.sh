#!/usr/bin/env bash
# Make data/sample_partitions: the issue-13 studies (partitions, strong/weak scaling, input
# size and its memory limit, batch size and learning rate) on this machine's CPU, a few
# minutes on 2 cores. "Partitions" alpha and beta are the same machine with 1 and 2 torch
# threads per rank: labelled so (--label threads=...), never GPU partitions. See data/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-data/sample_partitions}
SS=${SCALESCOPE:-.venv/bin/scalescope}
EX=(python examples/strain_stress.py --samples 1000)
rm -rf "$OUT"
mkdir -p "$OUT"
for p in alpha:1 beta:2; do
  name=${p%%:*}; threads=${p##*:}
  "$SS" sweep --np 1,2 --backend ddp-gloo --baseline --repeats 2 --label cluster=vm \
      --label partition="$name" --label threads="$threads" --out "$OUT/$name" \
      -- "${EX[@]}" --epochs 3 --threads "$threads"
done
"$SS" sweep --np 1,2 --backend ddp-gloo --baseline --repeats 2 --scaling weak --label cluster=vm \
    --label partition=alpha --label threads=1 --out "$OUT/weak" -- "${EX[@]}" --epochs 3
"$SS" sweep --np 1 --backend "" --baseline --find-max curve-length=200 --label cluster=vm \
    --label partition=alpha --out "$OUT/input_size" \
    -- python examples/strain_stress.py --samples 500 --epochs 2 --mem-limit-mb 600
# the same global batch two ways (1 rank x 150, 2 ranks x 75) and batch 75 at one rank, per LR rule,
# each run stopped after 1 s of training (--time-budget); two sweeps into one experiment
LR=(--vary lr-scaling=none,linear,sqrt --repeats 2 --label cluster=vm --label partition=alpha --out "$OUT/batch_lr")
"$SS" sweep --np 2 --backend ddp-gloo --baseline --batch-size 75 "${LR[@]}" \
    -- python examples/strain_stress.py --samples 600 --epochs 30 --time-budget 1
"$SS" sweep --np 1 --backend "" --baseline --batch-size 150 "${LR[@]}" \
    -- python examples/strain_stress.py --samples 600 --epochs 30 --time-budget 1
du -sh "$OUT"
