#!/usr/bin/env bash
# DUET's variation sweeps (paper Fig. 14-15) on cpu@0 + cpu@1, Siamese LSTM at sequence 16 (the
# paper preset's 64 steps take 5 minutes to plan per point): RNN layers 1-8 at batch 1, batch
# 2-32 at 2 layers. One benchmarks/duet/bench.py run per point into benchmarks/results/duet_sweep/.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=benchmarks/results/duet_sweep
mkdir -p "$out"
run() {  # run NAME SETTING
  .venv/bin/python benchmarks/duet/bench.py --models siamese-lstm --budget 4 --runs 100 \
    --set siamese-lstm:seq_len=16 --set "siamese-lstm:$2" --out "$out/$1.json"
}
for layers in 1 2 4 8; do run "siamese_layers$layers" "num_layers=$layers"; done
for batch in 2 8 32; do run "siamese_batch$batch" "batch=$batch"; done
