#!/usr/bin/env bash
# Draws results/dht-bench/ranks-*.svg (throughput against ranks on the
# fastest path, one chart per workload phase that a user compares by) and
# runs.md (every run) from the JSON that run-dht-bench.sh measured; no new
# measurements.
#
#   bash results/plot-dht-bench.sh [FABKIT [DIR]]   # default: a release build, results/dht-bench
set -euo pipefail
cd "$(dirname "$0")/.."
fk=${1:-}
out=${2:-results/dht-bench}
if [ -z "$fk" ]; then
  cargo build --release --quiet --bin fabkit
  fk=target/release/fabkit
fi
for dist in uniform zipf; do
  files=("$out"/fastest-"$dist"-r[1-4].json)
  for wp in paper:write paper:read paper:mixed load-a:load a:run b:run c:run d:run f:run; do
    w=${wp%%:*} p=${wp##*:}
    "$fk" plot "${files[@]}" --workload "$w" --phase "$p" \
      --title "fabkit dht vs Redis: $w $p, $dist, 80 B keys / 104 B values, MPI_Win_allocate (osc sm)" \
      -o "$out/ranks-$dist-$w-$p.svg"
  done
done
"$fk" plot "$out"/*.json --markdown "$out/runs.md"
