#!/usr/bin/env bash
# On the lent GPU box (the device tool's command, in the project root, $OUT set):
#   bash benchmarks/gpu/on_box.sh a    # .gpu/box.tar.xz from prepare.sh: latency of .gpu/a's
#                                      # artifacts, then EOP's exported workloads measured
#   bash benchmarks/gpu/on_box.sh t    # .gpu/t from prepare.sh: TVM and torch (eager, CUDA
#                                      # graph) on the same networks, weights and inputs
#   bash benchmarks/gpu/on_box.sh b    # .gpu/b from eop_plans.py: EOP and baselines timed
set -uo pipefail
step=${1:?a, t or b}
root=/tmp/tvm-hetero-box
if [ ! -d "$root/box" ]; then mkdir -p "$root" && tar -xJf .gpu/box.tar.xz -C "$root"; fi
box=$root/box
export PYTHONPATH="$box/site" TVM_USE_RUNTIME_LIB=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
"${PYTHON:-python3}" -c "import tvm, sys; print(tvm.__file__, sys.version)" > "$OUT/python.txt" 2>&1
lscpu > "$OUT/lscpu.txt" 2>&1
if [ "$step" = a ]; then
  "${PYTHON:-python3}" benchmarks/gpu/latency.py "$box"/artifacts/a/*.tar --out "$OUT/latency_a.jsonl" \
    --outputs-dir "$OUT/outputs_a" 2> "$OUT/latency_a.err"
  for d in "$box"/artifacts/a/eop_*; do
    "$box/tvm-hetero" measure "$d" > "$OUT/$(basename "$d").log" 2>&1
    cp "$d/results.jsonl" "$OUT/$(basename "$d").results.jsonl"
  done
elif [ "$step" = t ]; then
  "${PYTHON:-python3}" benchmarks/gpu/latency.py .gpu/t/*.tar --inputs-dir .gpu/t \
    --out "$OUT/latency_t.jsonl" --outputs-dir "$OUT/outputs_t" 2> "$OUT/latency_t.err"
  # torch from the box's own Python environment (not the bundle's TVM path)
  env -u PYTHONPATH -u TVM_USE_RUNTIME_LIB "${PYTHON:-python3}" benchmarks/gpu/torch_ref.py \
    --time .gpu/t --out "$OUT/torch.jsonl" > "$OUT/torch.log" 2>&1
  cp .gpu/t/*.torch_out.npz "$OUT/" 2>/dev/null
else
  "${PYTHON:-python3}" benchmarks/gpu/latency.py .gpu/b/*.tar --out "$OUT/latency_b.jsonl" \
    --outputs-dir "$OUT/outputs_b" 2> "$OUT/latency_b.err"
fi
ls -la "$OUT"
