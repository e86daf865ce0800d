#!/usr/bin/env bash
# Compile here everything the lent GPU box runs (benchmarks/gpu/README.md), into .gpu/ (ignored):
#   .gpu/a/     single-GPU, CPU-only and CPU+GPU artifacts of the small models, EOP's
#               exported workloads (plan --offline) for lstm, gru and bert-small at batch 16,
#               and DUET's first round for siamese-lstm and wide-deep (batch 1; duet_round.sh)
#   .gpu/box.tar.xz   the bundle: those, the runtime-only TVM for Python 3.12, tvm-hetero
#   .gpu/rt/box.tar.xz   the same bundle without artifacts
#   .gpu/t/     the BERT encoder and ResNet-18 for the GPU, beside torch (torch_ref.py)
# Then, with the device tool: carry .gpu/box.tar.xz and run benchmarks/gpu/on_box.sh a, etc.
set -euo pipefail
cd "$(dirname "$0")/../.."
th=.venv/bin/tvm-hetero
box=benchmarks/gpu/box.json
a=.gpu/a
mkdir -p "$a"
for m in lstm gru mlp; do
  args=("$m" --model-arg batch=16 --cluster "$box")
  $th compile "${args[@]}" --device cuda:0 -o "$a/$m.gpu.tar"
  $th compile "${args[@]}" --device cpu -o "$a/$m.cpu.tar"
  $th compile "${args[@]}" --device cpu --device cuda:0 --place matmul=cuda:0 -o "$a/$m.split.tar"
done
$th compile bert-small --cluster "$box" --device cuda:0 -o "$a/bert-small.gpu.tar"
for m in lstm gru bert-small; do
  $th plan "$m" --model-arg batch=16 --strategy eop --cluster "$box" --device cpu \
    --device cuda:0 --offline "$a/eop_$m" --db .gpu/profiles.jsonl
done
# DUET (issue 16): its first round, the subgraphs and links, on the CPU and the GPU and on two
# CPU core sets beside the GPU (later rounds: README, step 3); round 1 travels in the bundle
bash benchmarks/gpu/duet_round.sh duet_siamese-lstm=siamese-lstm:box.json \
  duet_wide-deep=wide-deep:box.json duet1_siamese-lstm=siamese-lstm:box_cores1.json \
  duet3_siamese-lstm=siamese-lstm:box_cores.json duet3_wide-deep=wide-deep:box_cores.json
rm -rf .gpu/m
rm -rf .gpu/t && .venv/bin/python benchmarks/gpu/torch_ref.py --export .gpu/t  # 58 MB: own carry
rm -f .gpu/box.tar.xz
$th bundle "$a" -o .gpu/box.tar.xz --python 3.12
# the runtime alone (6-8 MB), for calls to a fresh box that carry other artifacts (t, b, m)
rm -rf .gpu/rt && mkdir -p .gpu/rt && $th bundle -o .gpu/rt/box.tar.xz --python 3.12
cp benchmarks/gpu/latency.py .gpu/
ls -la .gpu
