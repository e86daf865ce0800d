#!/usr/bin/env bash
# A round of DUET's offline planning for the GPU box, here (benchmarks/gpu/README.md, step 3).
#   bash benchmarks/gpu/duet_round.sh [BOX.tgz] NAME=MODEL:CLUSTER...
# NAME is the offline folder .gpu/a/NAME, MODEL a zoo model, CLUSTER a file of benchmarks/gpu/
# (box.json: cpu + cuda:0; box_cores1.json: cpu@0 + cpu@1 + cuda:0; box_cores.json: cpu@0-6 +
# cpu@7-13 + cuda:0). BOX.tgz is what the box's last `on_box.sh a` or `m` brought back: each
# NAME.results.jsonl in it becomes the folder's results (the box appends: every round's). Then
# `plan --strategy duet --offline` runs on each folder (the first time it makes the folder):
# it either exports the next round, copied to .gpu/m/ (packed when large) for `on_box.sh m`
# with carry [".gpu/rt", ".gpu/m"], or writes the plan to .gpu/NAME.json. Logs: .gpu/NAME.log.
# Rounds of other names may run side by side: each call replaces only its names in .gpu/m.
set -euo pipefail
cd "$(dirname "$0")/../.."
box=""
if [ $# -gt 0 ] && [[ "$1" == *.tgz ]]; then box=$1; shift; fi
[ $# -gt 0 ] || { echo "duet_round.sh: name at least one NAME=MODEL:CLUSTER" >&2; exit 2; }
for spec in "$@"; do  # every name checked before any long work
  rest=${spec#*=}
  [[ "$spec" == *=*:* ]] && [ -f "benchmarks/gpu/${rest#*:}" ] || {
    echo "duet_round.sh: $spec: write NAME=MODEL:CLUSTER, CLUSTER a file of benchmarks/gpu/" >&2
    exit 2
  }
done
if [ -n "$box" ]; then
  got=$(mktemp -d) && tar -xzf "$box" -C "$got"
fi
mkdir -p .gpu/m
for spec in "$@"; do
  name=${spec%%=*}; rest=${spec#*=}; model=${rest%%:*}; cluster=benchmarks/gpu/${rest#*:}
  folder=.gpu/a/$name
  if [ -n "$box" ] && [ -f "$got/$name.results.jsonl" ]; then
    cp "$got/$name.results.jsonl" "$folder/results.jsonl"  # the box appends: every round
  fi
  rm -rf ".gpu/$name.json" ".gpu/m/$name" ".gpu/m/$name.tar.xz"  # this name's alone
  .venv/bin/tvm-hetero plan "$model" --strategy duet --cluster "$cluster" --budget 8 \
    --offline "$folder" --db ".gpu/$name.profiles.jsonl" -o ".gpu/$name.json" \
    > ".gpu/$name.log" 2>&1 || { echo "$name: plan failed (.gpu/$name.log)"; continue; }
  if [ -f ".gpu/$name.json" ]; then
    echo "$name: planned (.gpu/$name.json; .gpu/$name.log)"
    continue
  fi
  round=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['round'])" "$folder/manifest.json")
  cp -r "$folder" .gpu/m/
  if [ "$(du -sm ".gpu/m/$name" | cut -f1)" -gt 16 ]; then  # zero weights: xz packs them
    tar -cJf ".gpu/m/$name.tar.xz" -C .gpu/m "$name" && rm -rf ".gpu/m/$name"
  fi
  echo "$name: round $round exported to .gpu/m"
done
du -sh .gpu/m
