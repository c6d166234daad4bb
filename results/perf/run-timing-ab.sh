#!/usr/bin/env bash
# A/B of fabkit perf and mpi-perf before and after a change to their timing
# loop, alternating the two builds back to back in every round (this
# machine's speed drifts by 2x within an hour), and writing one table with
# the ratio per round. OLD and NEW are fabkit binaries (release builds).
#   OLD=/path/old/fabkit NEW=/path/new/fabkit [ROUNDS=3] results/perf/run-timing-ab.sh OUT.md
set -euo pipefail
out=${1:?usage: OLD=... NEW=... $0 OUT.md}
: "${OLD:?OLD=fabkit binary before}" "${NEW:?NEW=fabkit binary after}"
rounds=${ROUNDS:-3}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=sm,pt2pt
cases=("perf-bw:perf -p shm -o write -s 8 -n 400000"
       "perf-lat:perf -p shm -o write -s 8 --pattern lat -n 100000"
       "mpi-perf-bw:mpi-perf -o write -s 8 -n 400000")
run() { # bin case-cmd json
  case $2 in mpi-perf*) timeout 300 mpirun -np 2 "$1" $2 --json "$3" >/dev/null ;;
             *) timeout 300 "$1" $2 --json "$3" >/dev/null ;; esac
}
for r in $(seq 1 "$rounds"); do
  for c in "${cases[@]}"; do
    name=${c%%:*} cmd=${c#*:}
    run "$OLD" "$cmd" "$tmp/$name-old-$r.json"
    run "$NEW" "$cmd" "$tmp/$name-new-$r.json"
  done
done
{
  echo "# fabkit perf and mpi-perf timing loop: before and after, alternated"
  echo
  echo "- machine: $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo), $(nproc) cores, Linux $(uname -r)"
  echo "- date: $(date -u +%Y-%m-%dT%H:%MZ); old commit: $(jq -r .meta.commit "$tmp/perf-bw-old-1.json"); new commit: $(jq -r .meta.commit "$tmp/perf-bw-new-1.json")"
  echo "- command: \`OLD=$OLD NEW=$NEW ROUNDS=$rounds results/perf/run-timing-ab.sh $out\`"
  echo "- cases: ${cases[*]}"
  echo
  echo "| case | round | old Mxfers/s | new Mxfers/s | new/old |"
  echo "|---|---|---|---|---|"
  for c in "${cases[@]}"; do
    name=${c%%:*}
    for r in $(seq 1 "$rounds"); do
      o=$(jq '.points[0].rates.mxfers_per_sec' "$tmp/$name-old-$r.json")
      n=$(jq '.points[0].rates.mxfers_per_sec' "$tmp/$name-new-$r.json")
      echo "| $name | $r | $(printf %.3f "$o") | $(printf %.3f "$n") | $(awk -v o="$o" -v n="$n" 'BEGIN{printf "%.3f", n/o}') |"
    done
  done
} >"$out"
echo "wrote $out"
