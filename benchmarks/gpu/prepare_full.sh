#!/bin/bash
# Pack the full TVM wheel (compiler included) for the GPU box into .gpu/full/, with the GPU
# kernels of the networks to tune: what tune_on_box.sh reads (about 10 minutes here, most of it
# xz). Needs pip's registry; run from the repository's root.
set -eu
NETS=${*:-resnet18 bert-encoder gpt2-4x256 wide-deep siamese-lstm mobilenet-v3-small}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 -d "$work/whl" \
    apache-tvm==0.27.0.post1 apache-tvm-ffi==0.1.14.post0
mkdir -p "$work/site" .gpu/full
for w in "$work"/whl/*.whl; do (cd "$work/site" && unzip -q -o "$w"); done
site="$work/site"
xz -9 -T2 -c "$site/tvm/lib/libtvm_compiler.so" > .gpu/full/compiler.xz
xz -9 -c "$site/tvm_ffi/lib/libtvm_ffi_testing.so" > .gpu/full/libtvm_ffi_testing.so.xz
rm -rf "$site/tvm/lib/libtvm_compiler.so" "$site/tvm_ffi/lib/libtvm_ffi_testing.so" \
    "$site/tvm/3rdparty" "$site/tvm/src"
find "$site" -name __pycache__ -prune -exec rm -rf {} +
tar -C "$work" -cf - site | xz -9 -T2 > .gpu/full/rest.tar.xz
rm -rf .gpu/tasks
# shellcheck disable=SC2086
.venv/bin/python benchmarks/gpu/versus_torch.py --tasks .gpu/tasks --only $NETS
xz -9 -c .gpu/tasks/tasks.json > .gpu/full/tasks.json.xz
du -cb .gpu/full/* | tail -n 1
