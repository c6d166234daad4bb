#!/usr/bin/env bash
# Regenerates results/surrogate/: `fabkit surrogate` (the DHT as the
# surrogate cache of a POET-like simulation) on this machine, 2 in-process
# ranks, every variant, keys rounded from exact to 2 significant digits, at
# three solver costs; once over the same-node shortcut (--shm) and once
# over libfabric shm to every rank. Each run alternates the uncached and the
# cached runs in rounds; the JSON, the table and the charts are written by
# fabkit itself.
#
#   bash results/surrogate/run.sh            # about 10 minutes on 2 cores
#   ROUNDS=5 bash results/surrogate/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
. results/machine.sh
out=results/surrogate
rounds=${ROUNDS:-3}
[ -z "$(git status --porcelain -- . ':!results/surrogate')" ] \
  || { echo "run.sh: the tree has uncommitted changes; commit them so the results name the commit that ran" >&2; exit 1; }
cargo build --release --quiet -p fabkit-bench
fk=target/release/fabkit
commit=$(git rev-parse HEAD)
{
  machine_lines
  echo "libfabric: $(fi_info --version | sed -n 's/^libfabric: //p')"
  echo "fabkit: $($fk --version) at $commit"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
} > "$out/machine.txt"
cat "$out/machine.txt"

common=(surrogate -n 2 --grid 48x24 --steps 60 --digits exact,10,8,6,5,4,3,2
        --substeps 25,100,400 --rounds "$rounds")
for path in shm-shortcut shm; do
  extra=()
  [ "$path" = shm-shortcut ] && extra=(--shm)
  rm -rf "$out/$path"
  mkdir -p "$out/$path"
  echo "+ fabkit ${common[*]} ${extra[*]} --json $out/$path/report.json --charts $out/$path"
  "$fk" "${common[@]}" "${extra[@]}" --json "$out/$path/report.json" --charts "$out/$path" \
    | tee "$out/$path/table.txt"
done
