#!/usr/bin/env bash
# fabkit model over a run of run.sh, from that run's own inputs: for each
# round, the round's perf files and one-node run (ops-rN.json) predict each
# variant, plain (beside dht-V-rN.json) and on the same-node path (--itself
# memory, beside shm-V-rN.json); then the RoCE NIC of RED-SEA's D2.3 report (15 M packets/s,
# two packets per operation) from round 1's one-node run, with no CPU
# counted for posting and completing (no such NIC here to measure it).
# Only predictions are written (model-*.json, model-*.txt): nothing is
# measured, so a corrected model can be rerun over a kept run.
#
#   bash results/dht-bench/cross-host/model.sh results/dht-bench/cross-host/lanes
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: model.sh DIR (written by run.sh)}
export PATH=$here/../../../target/release:$PATH
rounds=$(ls "$out"/ops-r*.json | wc -l)
for r in $(seq "$rounds"); do
  model=(fabkit model --ops "$out/ops-r$r.json" --perf "$out/perf-write-r$r.json"
         --perf "$out/perf-read-r$r.json" --perf "$out/perf-cas-r$r.json")
  for v in lockfree fine chunked; do
    "${model[@]}" --measured "$out/dht-$v-r$r.json" --json "$out/model-$v-r$r.json" >"$out/model-$v-r$r.txt"
    "${model[@]}" --itself memory --measured "$out/shm-$v-r$r.json" --json "$out/model-shm-$v-r$r.json" \
      >"$out/model-shm-$v-r$r.txt"
  done
done
fabkit model --ops "$out/ops-r1.json" --pps 15e6 --packets 2 --json "$out/model-roce-15mpps.json" \
  >"$out/model-roce-15mpps.txt"
