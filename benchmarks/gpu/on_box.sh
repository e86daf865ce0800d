#!/usr/bin/env bash
# On the lent GPU box (the device tool's command, in the project root, $OUT set):
#   bash benchmarks/gpu/on_box.sh a    # .gpu/box.tar.xz from prepare.sh: latency of .gpu/a's
#                                      # artifacts, then the exported workloads (EOP, DUET)
#   bash benchmarks/gpu/on_box.sh t    # .gpu/t from prepare.sh: TVM and torch (eager, CUDA
#                                      # graph) on the same networks, weights and inputs
#   bash benchmarks/gpu/on_box.sh b    # .gpu/b from eop_plans.py: EOP and baselines timed
#                                      # (ROUNDS=N interleaved rounds of 200 runs, default 5)
#   bash benchmarks/gpu/on_box.sh m    # .gpu/m/* (folders, or .tar.xz of them): what a later
#                                      # plan --offline round exported (DUET's correction)
set -uo pipefail
step=${1:?a, t, b or m}
root=/tmp/tvm-hetero-box
# the bundle with .gpu/a's artifacts, or the runtime alone (.gpu/rt, for t and b on a fresh box)
bundle=.gpu/box.tar.xz; [ -f "$bundle" ] || bundle=.gpu/rt/box.tar.xz
if [ ! -d "$root/box" ]; then mkdir -p "$root" && tar -xJf "$bundle" -C "$root"; fi
box=$root/box
# the device tool brings back at most 8 files from $OUT: everything goes into one archive
final=$OUT; OUT=$(mktemp -d); trap 'tar -czf "$final/$step.tgz" -C "$OUT" . && ls -la "$OUT"' EXIT
export PYTHONPATH="$box/site" TVM_USE_RUNTIME_LIB=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
"${PYTHON:-python3}" -c "import tvm, sys; print(tvm.__file__, sys.version)" > "$OUT/python.txt" 2>&1
lscpu > "$OUT/lscpu.txt" 2>&1
if [ "$step" = a ]; then
  art=$box/artifacts/${ART:-a}  # the folder prepare.sh bundled (ART: another's name)
  "${PYTHON:-python3}" benchmarks/gpu/crossing_parts.py --out "$OUT/crossing_parts.json" \
    2> "$OUT/crossing_parts.err"
  "${PYTHON:-python3}" benchmarks/gpu/latency.py "$art"/*.tar --out "$OUT/latency_a.jsonl" \
    --outputs-dir "$OUT/outputs_a" --hand-over-too 2> "$OUT/latency_a.err"
  # results are written as they come: a folder cut at the deadline keeps what it measured
  deadline=$((SECONDS + ${MEASURE_S:-330}))
  for d in "$art"/*/; do  # eop_M, duet_M: folders of exported workloads
    m=$(basename "$d")
    left=$((deadline - SECONDS)); [ "$left" -gt 1 ] || left=1  # timeout 0 would never stop
    timeout "$left" "$box/tvm-hetero" measure "$d" > "$OUT/$m.log" 2>&1
    cp "$d/results.jsonl" "$OUT/$m.results.jsonl"
    echo "$m: $(wc -l < "$d/results.jsonl") records, $((deadline - SECONDS)) s left"
  done
elif [ "$step" = t ]; then
  "${PYTHON:-python3}" benchmarks/gpu/latency.py .gpu/t/*.tar --inputs-dir .gpu/t \
    --out "$OUT/latency_t.jsonl" --outputs-dir "$OUT/outputs_t" 2> "$OUT/latency_t.err"
  # torch from the box's own Python environment (not the bundle's TVM path)
  env -u PYTHONPATH -u TVM_USE_RUNTIME_LIB "${PYTHON:-python3}" benchmarks/gpu/torch_ref.py \
    --time .gpu/t --out "$OUT/torch.jsonl" > "$OUT/torch.log" 2>&1
  cp .gpu/t/*.torch_out.npz "$OUT/" 2>/dev/null
  cat "$OUT/torch.jsonl"
elif [ "$step" = m ]; then  # a later round of offline workloads (plan --offline asked for more)
  for x in .gpu/m/*.tar.xz; do [ -f "$x" ] && tar -xJf "$x" -C .gpu/m; done  # large: packed
  for d in .gpu/m/*/; do
    "$box/tvm-hetero" measure "$d" > "$OUT/$(basename "$d").log" 2>&1
    cp "$d/results.jsonl" "$OUT/$(basename "$d").results.jsonl"
    tail -1 "$OUT/$(basename "$d").log"
  done
else
  "${PYTHON:-python3}" benchmarks/gpu/latency.py ${BDIR:-.gpu/b}/*.tar --out "$OUT/latency_b.jsonl" \
    --outputs-dir "$OUT/outputs_b" --rounds "${ROUNDS:-5}" --hand-over-too 2> "$OUT/latency_b.err"
fi
