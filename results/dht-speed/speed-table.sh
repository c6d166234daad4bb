#!/usr/bin/env bash
# The tables of run-speed.sh from its records.jsonl: for each fabkit row and
# the anchor it is judged against, per phase, every round's fabkit and
# anchor M ops/s and their ratio (the ratio is only taken within a round).
#
#   bash results/dht-speed/speed-table.sh results/dht-speed/speed
set -euo pipefail
dir=${1:?usage: speed-table.sh DIR (holding records.jsonl and raw/)}
# The machine and commit from any fabkit run's JSON.
meta=$(ls "$dir"/raw/*.json 2>/dev/null | head -1)
[ -n "$meta" ] || { echo "speed-table: no fabkit JSON under $dir/raw" >&2; exit 1; }
echo "# The DHT's speed against its anchors, round by round"
echo
echo "Written by \`results/dht-speed/run-speed.sh\` (rerun it; nothing here is edited by hand)."
echo "fabkit commit $(jq -r .meta.commit "$meta"); $(jq -r .meta.machine "$meta")."
echo "Every run: \`fabkit dht -w paper\` (uniform), $(jq -r '.runs[0].record | "\(.key) B keys / \(.value) B values"' "$meta"), $(jq -r '.meta.command' "$meta" | grep -oE -- '-k [0-9]+|--buckets [0-9]+' | tr '\n' ' ')per rank; each run's command is in its JSON under raw/."
echo "The runs were written under speed.new/ (as their commands say) and moved here when all had ended."
echo "Cells: fabkit M ops/s / anchor M ops/s = ratio, in that round. The ceiling has no mixed phase;"
echo "its \`read-all\` phase (every rank's keys and as many absent ones) is the anchor of the read phase."
echo
jq -rs '
  def cell($f; $a):
    if $f == null then "-"
    elif $a == null or $a == 0 then "\($f * 1000 | round / 1000) / -"
    else "\($f * 1000 | round / 1000) / \($a * 1000 | round / 1000) = **\($f / $a * 100 | round / 100)**"
    end;
  . as $all
  | ($all | map(.round) | max) as $rounds
  | [
      ["lockfree-threads-shm", "ceiling", "at least 0.5 of the ceiling"],
      ["lockfree-processes-shm", "ceiling", "at least 0.5 of the ceiling"],
      ["lockfree-mpi-allocate", "ceiling", "-"],
      ["lockfree-threads-shm", "mpidht-lockfree", "at least 5x"],
      ["lockfree-processes-shm", "mpidht-lockfree", "at least 5x"],
      ["lockfree-mpi-allocate", "mpidht-lockfree", "-"],
      ["lockfree-mpi-create-b1", "mpidht-lockfree", "at least 1x (osc rdma, its own setting)"],
      ["lockfree-mpi-create-b64", "mpidht-lockfree", "at least 2x (osc rdma)"],
      ["chunked-threads-shm", "mpidht-lockfree", "at least 2x"],
      ["coarse-threads-shm", "mpidht-coarse", "at least 2x"],
      ["coarse-mpi-create-b1", "mpidht-coarse", "at least 1x (osc rdma)"],
      ["coarse-mpi-create-b64", "mpidht-coarse", "at least 2x (osc rdma)"],
      ["fine-threads-shm", "mpidht-fine", "at least 2x"],
      ["fine-mpi-create-b1", "mpidht-fine", "at least 1x (osc pt2pt)"],
      ["chunked-mpi-create-b1", "mpidht-fine", "at least 1x (osc pt2pt)"],
      ["lockfree-threads-shm-n1", "ceiling-n1", "scaling, 1 rank"],
      ["lockfree-threads-shm-n2", "ceiling-n2", "scaling, 2 ranks"],
      ["lockfree-threads-shm-n3", "ceiling-n3", "scaling, 3 ranks (2 cores)"],
      ["lockfree-threads-shm-n4", "ceiling-n4", "scaling, 4 ranks (2 cores)"]
    ] as $pairs
  | "| fabkit | anchor | target | phase | " + ([range(1; $rounds + 1) | "round \(.)"] | join(" | ")) + " |",
    "|---|---|---|---|" + ([range(1; $rounds + 1) | "---"] | join("|")) + "|",
    ($pairs[] as [$f, $a, $target]
      | ["write", "read", "mixed"][] as $ph
      | [range(1; $rounds + 1) as $r
          | ($all | map(select(.round == $r and .row == $f and .side == "fabkit" and .phase == $ph)) | .[0].mops) as $fm
          | ($all | map(select(.round == $r and .row == $a and .side == "anchor" and .phase == $ph)) | .[0].mops) as $am
          | cell($fm; $am)] as $cells
      | select($cells | any(. != "-"))
      | "| \($f) | \($a) | \($target) | \($ph) | " + ($cells | join(" | ")) + " |")
' "$dir/records.jsonl"
failed=$(jq -rs 'map(select(.phase == "failed") | "round \(.round) \(.row) (\(.side))") | join(", ")' "$dir/records.jsonl")
if [ -n "$failed" ]; then
  echo
  echo "Runs that failed (their output is under raw/): $failed."
fi
for f in uniform-paper-a zipf-paper ycsb; do
  [ -f "$dir/raw/$f.json" ] || continue
  echo
  echo "Beside them, once, Redis in the same run (\`$(jq -r .meta.command "$dir/raw/$f.json")\`):"
  echo
  echo "| workload | distribution | phase | fabkit M ops/s (min-max of reps) | Redis M ops/s | fabkit / Redis | fabkit p50 us (batch) | fabkit p99 us |"
  echo "|---|---|---|---:|---:|---:|---:|---:|"
  jq -r '
    def m: . / 1e6 * 1000 | round / 1000;
    (.runs | map(select(.system == "redis"))) as $redis
    | .runs[] | select(.system == "fabkit") | . as $f
    | ($redis | map(select(.workload == $f.workload and .phase == $f.phase)) | .[0]) as $r
    | "| \(.workload) | \(.distribution) | \(.phase) | \(.ops_per_sec | m) (\(.ops_per_sec_min | m)-\(.ops_per_sec_max | m)) | \(if $r then ($r.ops_per_sec | m) else "-" end) | \(if .vs_redis then (.vs_redis * 100 | round / 100) else "-" end) | \(.latency_us.p50 // "-") | \(.latency_us.p99 // "-") |"' \
    "$dir/raw/$f.json"
done
