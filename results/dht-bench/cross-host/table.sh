#!/usr/bin/env bash
# The tables of run.sh from its JSON: per variant and phase, each round's
# fabkit M ops/s, its bound (from the fabric rates of the same round) and
# the fraction reached, plain fabric and same-node path; and MPI with the
# native/MPI ratio (lock-free), round by round.
#
#   bash results/dht-bench/cross-host/table.sh results/dht-bench/cross-host/baseline
set -euo pipefail
dir=${1:?usage: table.sh DIR (written by run.sh)}
ls "$dir"/dht-*-r*.json >/dev/null 2>&1 || { echo "table.sh: no dht-*-rN.json under $dir" >&2; exit 1; }
rounds=$(ls "$dir"/dht-lockfree-r*.json | wc -l)
cell() { # file phase -> "Mops / bound = fraction"
  jq -r --arg p "$2" '.runs[] | select(.phase == $p) |
    if .bound then "\(.ops_per_sec / 1e6 * 1000 | round / 1000) / \(.bound.ops_per_sec / 1e6 * 1000 | round / 1000) = **\(.bound.fraction * 100 | round / 100)**"
    else "\(.ops_per_sec / 1e6 * 1000 | round / 1000) / - " end' "$1"
}
rate() { jq -r '[.points[] | "\(.rates.mxfers_per_sec * 1000 | round / 1000) (\(.bytes) B)"] | join(", ")' "$1"; }
echo "Fabric rates (bidirectional, at each size measured), M ops/s per round:"
echo
echo "| op | $(for r in $(seq "$rounds"); do printf 'round %s | ' "$r"; done)"
echo "|---|$(for r in $(seq "$rounds"); do printf -- '---|'; done)"
for op in write read cas; do
  echo "| $op | $(for r in $(seq "$rounds"); do printf '%s | ' "$(rate "$dir/perf-$op-r$r.json")"; done)"
done
echo
for path in dht shm; do
  [ "$path" = dht ] && echo "libfabric to every rank (own region too): M ops/s / bound = fraction" \
                    || echo "same-node path (--shm: own region by loads and stores): M ops/s / bound = fraction"
  echo
  echo "| variant | phase | $(for r in $(seq "$rounds"); do printf 'round %s | ' "$r"; done)"
  echo "|---|---|$(for r in $(seq "$rounds"); do printf -- '---|'; done)"
  for v in lockfree fine chunked; do
    for p in write read mixed; do
      echo "| $v | $p | $(for r in $(seq "$rounds"); do printf '%s | ' "$(cell "$dir/$path-$v-r$r.json" "$p")"; done)"
    done
  done
  echo
done
echo "MPI (osc pt2pt, btl tcp; MPI_Win_create), lock-free: M ops/s, and native (libfabric) / MPI in the same round:"
echo
echo "| phase | $(for r in $(seq "$rounds"); do printf 'round %s | ' "$r"; done)"
echo "|---|$(for r in $(seq "$rounds"); do printf -- '---|'; done)"
for p in write read mixed; do
  row=""
  for r in $(seq "$rounds"); do
    m="$dir/mpi-lockfree-r$r.json"
    if [ -f "$m" ]; then
      mp=$(jq -r --arg p "$p" '.runs[] | select(.phase == $p) | .ops_per_sec' "$m")
      nat=$(jq -r --arg p "$p" '.runs[] | select(.phase == $p) | .ops_per_sec' "$dir/dht-lockfree-r$r.json")
      row+="$(jq -nr --argjson m "$mp" --argjson n "$nat" '"\($m / 1e6 * 1000 | round / 1000) (native \($n / $m * 10 | round / 10)×)"') | "
    else
      row+="failed | "
    fi
  done
  echo "| $p | $row"
done
