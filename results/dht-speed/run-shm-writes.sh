#!/usr/bin/env bash
# The shm-writes lever (issue 24): the DHT over libfabric `shm` (no --shm)
# against the bound `fabkit perf` measures for its record size and operation
# count with delivery completion, before and after, in alternating rounds
# (this machine's speed drifts 2x within an hour: only ratios within a round
# mean anything).
#
#   BEFORE=/tmp/fabkit-main BEFORE_PERF=/tmp/fabkit-perfflag AFTER=target/release/fabkit \
#     bash results/dht-speed/run-shm-writes.sh
#
# BEFORE is main at the branch point; it has no `perf --completion`, so the
# bound on its side is measured by BEFORE_PERF: main plus only the commit that
# adds the flag (same fabric code as BEFORE). Both built by hand (a git
# worktree and `cargo build --release`); every JSON names its binary's commit.
#
# Per round, per launch (2 in-process ranks; 2 processes under mpirun), per
# side (before, after), back to back:
#   perf -s 184 -n KEYS -w W --completion delivery, W = 1 and 64, one way and
#        both ways (-b: both ranks initiate, as both ranks of the DHT do);
#   dht -v all -w load-a -k KEYS -b B, B = 1 and 64 (window = batch).
# The bound of a variant is the both-ways perf rate at W = B divided by the
# remote operations the variant issued per key (its remote_ops_per_op).
# Writes results/dht-speed/shm-writes/*.json and shm-writes-rounds.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=results/dht-speed/shm-writes
mkdir -p "$out"
rounds=${ROUNDS:-3}
keys=${KEYS:-20000}
before=${BEFORE:?BEFORE is fabkit built from main at the branch point}
before_perf=${BEFORE_PERF:?BEFORE_PERF is BEFORE plus the perf --completion flag}
after=${AFTER:?AFTER is fabkit built from this branch}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_osc=sm,pt2pt

# Waits (at most 10 minutes) while someone else's benchmark, build or
# emulated guest runs.
quiet() {
  for _ in $(seq 1 20); do
    ps aux | grep -E 'mpirun|osu_|fabkit dht|ceiling|rustc|qemu-system' | grep -v grep > /dev/null || return 0
    sleep 30
  done
}

run() { # launch, binary, args...
  local launch=$1 bin=$2
  shift 2
  quiet
  if [ "$launch" = mpirun ]; then
    timeout 900 mpirun -n 2 "$bin" "$@" > /dev/null
  else
    timeout 900 "$bin" "$@" > /dev/null
  fi
}

for r in $(seq 1 "$rounds"); do
  for launch in inproc mpirun; do
    n=()
    [ "$launch" = inproc ] && n=(-n 2)
    for w in 1 64; do
      for dir in one both; do
        b=()
        [ "$dir" = both ] && b=(-b)
        for side in before after; do
          bin=$after
          [ "$side" = before ] && bin=$before_perf
          run "$launch" "$bin" perf -p shm -s 184 -n "$keys" -w "$w" --completion delivery \
            "${b[@]}" --json "$out/perf-$launch-$side-w$w-$dir-r$r.json"
        done
      done
    done
    for batch in 1 64; do
      for side in before after; do
        bin=$after
        [ "$side" = before ] && bin=$before
        run "$launch" "$bin" dht "${n[@]}" -p shm -v all -w load-a --distribution uniform \
          -k "$keys" --buckets 65536 -b "$batch" --latency-ops 0 --no-redis --hot-rounds 0 \
          --json "$out/dht-$launch-$side-b$batch-r$r.json"
      done
    done
  done
done

rate() { jq -r '.points[0].rates.mxfers_per_sec' "$1"; }
{
  f=$out/dht-inproc-after-b1-r1.json
  echo "# shm-writes: rounds"
  echo
  echo "before: commit $(jq -r .meta.commit "$out/dht-inproc-before-b1-r1.json")" \
    "(bound: $(jq -r .meta.commit "$out/perf-inproc-before-w1-one-r1.json")), after: commit" \
    "$(jq -r .meta.commit "$f"); $(jq -r .meta.machine "$f")"
  echo
  echo "## fabkit perf -p shm -s 184 -n $keys --completion delivery (M writes/s)"
  echo
  echo "| round | launch | -w | one way before | one way after | after / before | both ways before | both ways after | after / before |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
  for r in $(seq 1 "$rounds"); do
    for launch in inproc mpirun; do
      for w in 1 64; do
        p() { rate "$out/perf-$launch-$1-w$w-$2-r$r.json"; }
        ob=$(p before one) oa=$(p after one) bb=$(p before both) ba=$(p after both)
        jq -rn --arg r "$r" --arg l "$launch" --arg w "$w" \
          --argjson ob "$ob" --argjson oa "$oa" --argjson bb "$bb" --argjson ba "$ba" \
          'def f: (. * 1000 | round) / 1000; def q: (. * 100 | round) / 100;
           "| \($r) | \($l) | \($w) | \($ob | f) | \($oa | f) | \($oa / $ob | q) | \($bb | f) | \($ba | f) | \($ba / $bb | q) |"'
      done
    done
  done
  echo
  echo "## fabkit dht -p shm -v all -w load-a -k $keys -b B, against the bound"
  echo
  echo "ops/key: remote operations per key (the DHT's remote_ops_per_op); bound:" \
    "perf both ways at -w B, divided by ops/key; M ops/s."
  echo
  echo "| round | launch | variant | -b | before | after | after / before | ops/key before, after | bound before | bound after | DHT / bound before | DHT / bound after |"
  echo "|---|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|"
  for r in $(seq 1 "$rounds"); do
    for launch in inproc mpirun; do
      for batch in 1 64; do
        pb=$(rate "$out/perf-$launch-before-w$batch-both-r$r.json")
        pa=$(rate "$out/perf-$launch-after-w$batch-both-r$r.json")
        jq -rn --arg r "$r" --arg l "$launch" --arg b "$batch" --argjson pb "$pb" --argjson pa "$pa" \
          --slurpfile B "$out/dht-$launch-before-b$batch-r$r.json" \
          --slurpfile A "$out/dht-$launch-after-b$batch-r$r.json" '
          def f: (. * 1000 | round) / 1000; def q: (. * 100 | round) / 100;
          [$B[0].runs, $A[0].runs] | transpose[] | . as [$x, $y] |
          ($x.ops_per_sec / 1e6) as $db | ($y.ops_per_sec / 1e6) as $da |
          ($x.counters.remote_ops_per_op) as $kb | ($y.counters.remote_ops_per_op) as $ka |
          ($pb / $kb) as $bb | ($pa / $ka) as $ba |
          "| \($r) | \($l) | \($x.variant) | \($b) | \($db | f) | \($da | f) | \($da / $db | q) | \($kb | q), \($ka | q) | \($bb | f) | \($ba | f) | \($db / $bb | q) | \($da / $ba | q) |"'
      done
    done
  done
} > results/dht-speed/shm-writes-rounds.md
cat results/dht-speed/shm-writes-rounds.md
