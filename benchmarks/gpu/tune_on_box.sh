#!/bin/bash
# MetaSchedule samples of the exported GPU kernels, built and timed on the box itself with the
# full TVM wheel carried there (it has no compiler of its own); then the networks built there
# with dlight's kernels and with the tuned ones, timed beside torch. Usage, on the box:
#   bash benchmarks/gpu/tune_on_box.sh FULL COUNT SECONDS "NETWORKS"
# FULL holds compiler.xz (the wheel's libtvm_compiler.so, xz -9), rest.tar.xz (site/: the rest
# of the apache-tvm and apache-tvm-ffi wheels for Python 3.12), libtvm_ffi_testing.so.xz and
# tasks.json.xz (versus_torch.py --tasks). The first COUNT tasks are tuned, none started after
# SECONDS; the database, the log and the timings come back in $OUT.
set -u
FULL=$1; COUNT=${2:-26}; SECONDS_TUNE=${3:-120}; NETS=${4:-"resnet18 bert-encoder"}
start=$(date +%s)
mkdir -p /tmp/full /tmp/tasks /tmp/db
tar -xJf "$FULL/rest.tar.xz" -C /tmp/full
xz -dc "$FULL/libtvm_ffi_testing.so.xz" > /tmp/full/site/tvm_ffi/lib/libtvm_ffi_testing.so
xz -dc "$FULL/compiler.xz" > /tmp/full/site/tvm/lib/libtvm_compiler.so
xz -dc "$FULL/tasks.json.xz" > /tmp/tasks/tasks.json
unset TVM_USE_RUNTIME_LIB
export PYTHONPATH=/tmp/full/site:$(pwd) PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
lscpu | grep -E "Model name|^CPU\(s\)|Model:|CPU family" | tee -a "$OUT/gpu.txt"
python3 -c "import tvm, tvm.relax; print('tvm', tvm.__version__, 'cuda', tvm.cuda(0).exist)" || exit 3
quiet="Unknown schedule rule|Checked ffi|meta_schedule\.(cuda|gpu)\.meta_schedule"
timeout $((SECONDS_TUNE + 90)) python3 -m tvm_hetero.build.gpu_tuning /tmp/tasks \
    --work-dir /tmp/db --trials 13 --builders 14 --count "$COUNT" --seconds "$SECONDS_TUNE" 2>&1 \
    | grep -v -E "$quiet" | tee "$OUT/tune.log" | tail -n 40
echo "tuned: after $(( $(date +%s) - start )) s"
for f in /tmp/db/database_*.json; do xz -9 -c "$f" > "$OUT/$(basename "$f").xz"; done
timeout 200 python3 benchmarks/gpu/versus_torch.py --export /tmp/v --only $NETS \
    --tuning-db /tmp/db --builds graph tuned 2>&1 | grep -E "^exported|Error|error" | tail -n 8
echo "built: after $(( $(date +%s) - start )) s"
timeout 120 python3 benchmarks/gpu/versus_torch.py --time /tmp/v --only $NETS \
    --out "$OUT/versus_torch.jsonl" --rounds 5 --repeat 100 2>&1 | tail -n 4 | cut -c1-400
echo "timed: after $(( $(date +%s) - start )) s"
