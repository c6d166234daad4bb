#!/usr/bin/env bash
# One lever of the DHT's speed work, measured as A/B rounds: two fabkit
# binaries (BEFORE and AFTER the change) run the same command back to back,
# alternating, ROUNDS times, the one that goes first swapped every round
# (this machine's speed drifts by 2x within an hour, so only ratios within
# a round mean anything). Writes each run's
# JSON (with its binary's commit in meta) and NAME.md, the table of
# per-round ratios.
#
#   BEFORE=/tmp/fabkit-before AFTER=target/release/fabkit NAME=shm-eagain \
#     bash results/dht-speed/run-ab.sh dht -p shm -n 2 -v lockfree -w paper -k 20000 --no-redis
#
# The BEFORE binary is built by hand from the parent commit (a git worktree
# and `cargo build --release`); the table names both commits.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=results/dht-speed
name=${NAME:?NAME names the lever}
rounds=${ROUNDS:-3}
before=${BEFORE:?BEFORE is the fabkit binary without the change}
after=${AFTER:?AFTER is the fabkit binary with it}
[ $# -gt 0 ] || { echo "usage: BEFORE=.. AFTER=.. NAME=.. $0 FABKIT-ARGS..." >&2; exit 2; }
for r in $(seq 1 "$rounds"); do
  order="before after"
  [ $((r % 2)) -eq 0 ] && order="after before"
  for side in $order; do
    bin=$before
    [ "$side" = after ] && bin=$after
    "$bin" "$@" --json "$out/$name-$side-r$r.json" > /dev/null
  done
done
{
  echo "# $name: fabkit $*"
  echo
  echo "before: commit $(jq -r .meta.commit "$out/$name-before-r1.json"), after: commit $(jq -r .meta.commit "$out/$name-after-r1.json"); $(jq -r .meta.machine "$out/$name-after-r1.json"); $(jq -r .meta.launch "$out/$name-after-r1.json")"
  echo
  echo "| round | system | variant | workload | phase | before ops/s | after ops/s | after / before |"
  echo "|---|---|---|---|---|---:|---:|---:|"
  for r in $(seq 1 "$rounds"); do
    jq -r --arg r "$r" --slurpfile a "$out/$name-after-r$r.json" '
      [.runs, $a[0].runs] | transpose[] |
      "| \($r) | \(.[0].system) | \(.[0].variant // "-") | \(.[0].workload) | \(.[0].phase) | \(.[0].ops_per_sec | round) | \(.[1].ops_per_sec | round) | \((.[1].ops_per_sec / .[0].ops_per_sec * 100 | round) / 100) |"' \
      "$out/$name-before-r$r.json"
  done
} > "$out/$name.md"
cat "$out/$name.md"
