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
  jq -r --arg p "$2" '.runs[] | select(.system == "fabkit" and .phase == $p) |
    if .bound then "\(.ops_per_sec / 1e6 * 1000 | round / 1000) / \(.bound.ops_per_sec / 1e6 * 1000 | round / 1000) = **\(.bound.fraction * 100 | round / 100)**"
    else "\(.ops_per_sec / 1e6 * 1000 | round / 1000) / - " end' "$1"
}
rate() { jq -r '[.points[] | "\(.rates.mxfers_per_sec * 1000 | round / 1000) (\(.bytes) B)"] | join(", ")' "$1"; }
# ops/s of the row of system $3 (default fabkit) and phase $2 in file $1.
ops() {
  jq -r --arg p "$2" --arg s "${3:-fabkit}" '.runs[] | select(.system == $s and .phase == $p) | .ops_per_sec' "$1"
}
# The head of a per-round table whose first columns are "$@".
head_rounds() {
  local cols="" bar=""
  for c in "$@"; do cols+="| $c "; bar+="|---"; done
  echo "$cols| $(for r in $(seq "$rounds"); do printf 'round %s | ' "$r"; done)"
  echo "$bar|$(for r in $(seq "$rounds"); do printf -- '---|'; done)"
}
echo "Fabric rates (bidirectional, at each size measured), M ops/s per round:"
echo
head_rounds op
for op in write read cas; do
  echo "| $op | $(for r in $(seq "$rounds"); do printf '%s | ' "$(rate "$dir/perf-$op-r$r.json")"; done)"
done
echo
for path in dht shm; do
  [ "$path" = dht ] && echo "libfabric to every rank (own region too): M ops/s / bound = fraction" \
                    || echo "same-node path (--shm: own region by loads and stores): M ops/s / bound = fraction"
  echo
  head_rounds variant phase
  for v in lockfree fine chunked; do
    for p in write read mixed; do
      echo "| $v | $p | $(for r in $(seq "$rounds"); do printf '%s | ' "$(cell "$dir/$path-$v-r$r.json" "$p")"; done)"
    done
  done
  echo
done
echo "MPI (osc pt2pt, btl tcp; MPI_Win_create), lock-free: M ops/s, and native (libfabric) / MPI in the same round:"
echo
head_rounds phase
for p in write read mixed; do
  row=""
  for r in $(seq "$rounds"); do
    m="$dir/mpi-lockfree-r$r.json"
    if [ -f "$m" ]; then
      mp=$(ops "$m" "$p")
      nat=$(ops "$dir/dht-lockfree-r$r.json" "$p")
      row+="$(jq -nr --argjson m "$mp" --argjson n "$nat" '"\($m / 1e6 * 1000 | round / 1000) (native \($n / $m * 10 | round / 10)×)"') | "
    else
      row+="failed | "
    fi
  done
  echo "| $p | $row"
done
if ls "$dir"/d1-*-r*.json >/dev/null 2>&1; then
  echo
  echo "Batches in flight: the default depth (lanes of at least 32 keys: 2 at batch 64) against one batch at a time (--depth 1), same round, M ops/s and default / depth 1:"
  echo
  head_rounds variant phase
  for v in lockfree fine chunked; do
    for p in write read mixed; do
      row=""
      for r in $(seq "$rounds"); do
        a=$(ops "$dir/dht-$v-r$r.json" "$p")
        b=$(ops "$dir/d1-$v-r$r.json" "$p")
        row+="$(jq -nr --argjson a "$a" --argjson b "$b" '"\($a / 1e6 * 1000 | round / 1000) vs \($b / 1e6 * 1000 | round / 1000) = **\($a / $b * 100 | round / 100)**"') | "
      done
      echo "| $v | $p | $row"
    done
  done
fi
if jq -e '.runs[] | select(.system == "redis")' "$dir/dht-lockfree-r1.json" >/dev/null 2>&1; then
  echo
  echo "Redis across the same hosts (one server per host on its veth address, MGET/MSET per server per batch) beside the lock-free DHT, M ops/s and DHT / Redis:"
  echo
  head_rounds phase
  for p in write read mixed; do
    row=""
    for r in $(seq "$rounds"); do
      f="$dir/dht-lockfree-r$r.json"
      d=$(ops "$f" "$p")
      x=$(ops "$f" "$p" redis)
      row+="$(jq -nr --argjson d "$d" --argjson x "$x" '"\($d / 1e6 * 1000 | round / 1000) vs \($x / 1e6 * 1000 | round / 1000) = \($d / $x * 100 | round / 100)"') | "
    done
    echo "| $p | $row"
  done
fi
if ls "$dir"/model-lockfree-r*.json >/dev/null 2>&1; then
  for kind in "" shm-; do
    echo
    if [ -z "$kind" ]; then
      echo "fabkit model (from the round's perf files and one-node run) over measured, libfabric to every rank; prediction M ops/s (which limit binds) / measured = ratio:"
    else
      echo "fabkit model --itself memory over measured, same-node path (--shm):"
    fi
    echo
    head_rounds variant phase
    for v in lockfree fine chunked; do
      for p in write read mixed; do
        row=""
        for r in $(seq "$rounds"); do
          row+="$(jq -r --arg v "$v" --arg p "$p" '.rows[] | select(.variant == $v and .phase == $p) |
            "\(.ops_per_sec / 1e6 * 1000 | round / 1000) (\(.binds)) / \(.measured / 1e6 * 1000 | round / 1000) = **\(.ratio * 100 | round / 100)**"' \
            "$dir/model-$kind$v-r$r.json") | "
        done
        echo "| $v | $p | $row"
      done
    done
  done
fi
if [ -f "$dir/model-roce-15mpps.json" ]; then
  echo
  echo "fabkit model on the RoCE NIC of RED-SEA's D2.3 report (15 M packets/s, 2 per operation; the hosts' own work from round 1's one-node run; no CPU counted for posting and completing), M ops/s of the job:"
  echo
  echo "| variant | phase | fabric limit | cores' limit | prediction |"
  echo "|---|---|---|---|---|"
  jq -r '.rows[] | "| \(.variant) | \(.phase) | \(.fabric_limit / 1e6 * 100 | round / 100) | \(.cpu_limit / 1e6 * 100 | round / 100) | **\(.ops_per_sec / 1e6 * 100 | round / 100)** (\(.binds)) |"' "$dir/model-roce-15mpps.json"
fi
