#!/usr/bin/env bash
# `fabkit mpi-perf` against OSU micro-benchmarks 7.x, point by point: the
# same window kind (MPI_Win_allocate, MPI_Win_create), size, synchronisation
# (one passive epoch, MPI_Win_flush per window: OSU's `-s flush`, fabkit's
# `--sync lock-all`) and transfer count (OSU's iterations x its window of 64
# for bandwidth). Each point runs OSU and fabkit back to back, in an order
# that swaps every round; this machine's speed drifts by 2x within an hour,
# so only the ratio within a round means anything. Before each point it waits
# (up to IDLE_WAIT seconds, default 120) for a second in which the machine is
# 90 % idle, since a build beside the two ranks on 2 cores swings either
# tool by 2x; a point that started busy says so. Writes the raw output of
# every run with its command (NAME.log) and the table of per-round ratios
# (NAME.md).
#
#   OSU=/tmp/anchors/osu/c/mpi/one-sided FABKIT=target/release/fabkit \
#     NAME=mpi-perf-osu-after bash results/dht-speed/run-mpi-perf-osu.sh
#
# OSU is built by hand outside this repository (nothing of it is kept here):
# OSU names the directory holding its one-sided binaries (osu_put_bw, ...).
# Needs mpirun (Open MPI 4.1) and jq; as root, OMPI_ALLOW_RUN_AS_ROOT=1 and
# OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1, and on 2 cores
# OMPI_MCA_rmaps_base_oversubscribe=1.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=results/dht-speed
osu=${OSU:?OSU is the directory of OSU micro-benchmarks 7.x c/mpi/one-sided binaries}
fabkit=${FABKIT:?FABKIT is the fabkit binary to measure}
name=${NAME:?NAME names the output files}
rounds=${ROUNDS:-3}
# Open MPI 4.1's osc rdma crashes in MPI_Compare_and_swap on one node.
mpirun=(mpirun -n 2 --mca osc sm,pt2pt)
log=$out/$name.log
rows=$(mktemp)
json=$(mktemp)
trap 'rm -f "$rows" "$json"' EXIT
: > "$log"

# test name, OSU binary (and its extra flags), fabkit flags, bw or lat.
tests=(
  "put-bw|osu_put_bw|-o write --pattern bw|bw"
  "get-bw|osu_get_bw|-o read --pattern bw|bw"
  "put-lat|osu_put_latency|-o write --pattern lat|lat"
  "get-lat|osu_get_latency|-o read --pattern lat|lat"
  # OSU 7.1 has no 64-bit type for its atomics: MPI_INT is the nearest to
  # fabkit's u64.
  "cas-lat|osu_cas_latency -T mpi_int|-o cas --pattern lat|lat"
)
# OSU iterations per window kind and size: runs of roughly 0.1-1 s here
# (osc pt2pt, which serves MPI_Win_create windows, is 10-100 times slower
# than osc sm's shared memory).
iters() { # win kind bytes
  case "$1:$2:$3" in
    allocate:bw:8 | allocate:bw:184) echo 100000 ;;
    allocate:bw:4096) echo 10000 ;;
    allocate:bw:*) echo 500 ;;
    allocate:lat:8 | allocate:lat:184) echo 1000000 ;;
    allocate:lat:4096) echo 500000 ;;
    allocate:lat:*) echo 50000 ;;
    create:bw:8 | create:bw:184) echo 5000 ;;
    create:bw:4096) echo 1000 ;;
    create:bw:*) echo 100 ;;
    create:lat:65536) echo 3000 ;;
    create:lat:4096) echo 10000 ;;
    create:lat:*) echo 30000 ;;
  esac
}

idle() { # -> yes, or busy when IDLE_WAIT passed without an idle second
  local end=$((SECONDS + ${IDLE_WAIT:-120}))
  while [ "$(vmstat 1 2 | tail -1 | awk '{print $15}')" -lt 90 ]; do
    [ $SECONDS -ge $end ] && { echo busy; return; }
  done
  echo yes
}

run_osu() { # binary+flags win bytes iters warmup -> figure (MB/s or us)
  local cmd="${mpirun[*]} $osu/$1 -w $2 -s flush -m $3:$3 -i $4 -x $5"
  echo "\$ $cmd" >> "$log"
  # shellcheck disable=SC2086
  $cmd 2>&1 | tee -a "$log" | awk '!/^#/ && NF == 2 { v = $2 } END { print v }'
}

run_fabkit() { # fabkit-flags win bytes transfers warmup kind -> figure
  local cmd="${mpirun[*]} $fabkit mpi-perf $1 --win $2 --sync lock-all -s $3 -n $4 --warmup $5"
  echo "\$ $cmd --json FILE" >> "$log"
  # shellcheck disable=SC2086
  $cmd --json "$json" >> "$log" 2>&1
  if [ "$6" = bw ]; then
    jq -r '.points[0].rates.mb_per_sec' "$json"
  else
    jq -r '.points[0].rates.usec_per_xfer' "$json"
  fi
}

for r in $(seq 1 "$rounds"); do
  for win in allocate create; do
    for t in "${tests[@]}"; do
      IFS='|' read -r test bin flags kind <<< "$t"
      sizes="8 184 4096 65536"
      [ "$test" = cas-lat ] && sizes=8
      for b in $sizes; do
        i=$(iters "$win" "$kind" "$b")
        x=$((i / 10))
        n=$i w=$x
        # OSU counts bandwidth iterations of a window of 64 transfers.
        [ "$kind" = bw ] && n=$((i * 64)) w=$((x * 64))
        quiet=$(idle)
        echo "# round $r: idle before the point: $quiet" >> "$log"
        if [ $((r % 2)) = 1 ]; then
          o=$(run_osu "$bin" "$win" "$b" "$i" "$x")
          f=$(run_fabkit "$flags" "$win" "$b" "$n" "$w" "$kind")
        else
          f=$(run_fabkit "$flags" "$win" "$b" "$n" "$w" "$kind")
          o=$(run_osu "$bin" "$win" "$b" "$i" "$x")
        fi
        echo "$r $win $test $b $n $kind $o $f $quiet" >> "$rows"
      done
    done
  done
done

{
  echo "# $name: fabkit mpi-perf against OSU micro-benchmarks"
  echo
  echo "fabkit commit $(jq -r .meta.commit "$json" 2>/dev/null || echo unknown);" \
    "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //');" \
    "Linux $(uname -r); $(mpirun --version | head -1);" \
    "anchor $(grep -m1 '^# OSU' "$log" | sed 's/^# //');" \
    "$(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "OSU: \`${mpirun[*]} \$OSU/BINARY -w WIN -s flush -m B:B -i I -x I/10\`;" \
    "fabkit: \`${mpirun[*]} fabkit mpi-perf -o OP --pattern bw|lat --win WIN" \
    "--sync lock-all -s B -n N --warmup N/10\` with N = 64 I for bandwidth, I for latency." \
    "Ratio: fabkit / OSU for MB/s, OSU / fabkit for µs (above 1: fabkit faster)."
  echo
  echo "| round | window | test | bytes | transfers | OSU | fabkit | unit | ratio | idle before |"
  echo "|---|---|---|---:|---:|---:|---:|---|---:|---|"
  awk '{
    unit = ($6 == "bw") ? "MB/s" : "us"
    ratio = ($6 == "bw") ? $8 / $7 : $7 / $8
    printf "| %s | %s | %s | %s | %s | %.2f | %.2f | %s | %.2f | %s |\n", $1, $2, $3, $4, $5, $7, $8, unit, ratio, $9
  }' "$rows"
  echo
  echo "Per point, the ratio over all rounds (median and range) and over the rounds"
  echo "that started on an idle machine:"
  echo
  echo "| window | test | bytes | median | min | max | idle rounds | their median | their min |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
  awk '
    # Sorts v[k, 0..m-1] into s[] and sets med, lo, hi.
    function stats(v, k, m,    a, b, t) {
      for (a = 0; a < m; a++) s[a] = v[k, a]
      for (a = 1; a < m; a++) for (b = a; b > 0 && s[b - 1] > s[b]; b--) { t = s[b]; s[b] = s[b - 1]; s[b - 1] = t }
      med = (m % 2) ? s[int(m / 2)] : (s[m / 2 - 1] + s[m / 2]) / 2
      lo = s[0]; hi = s[m - 1]
    }
    {
      k = $2 " | " $3 " | " $4
      ratio = ($6 == "bw") ? $8 / $7 : $7 / $8
      if (!(k in all)) order[n++] = k
      v[k, all[k]++] = ratio
      if (!(k in idle)) idle[k] = 0
      if ($9 == "yes") w[k, idle[k]++] = ratio
    }
    END {
      for (i = 0; i < n; i++) {
        k = order[i]
        stats(v, k, all[k]); line = sprintf("| %s | %.2f | %.2f | %.2f | %d", k, med, lo, hi, idle[k])
        if (idle[k] > 0) { stats(w, k, idle[k]); line = line sprintf(" | %.2f | %.2f |", med, lo) }
        else line = line " | - | - |"
        print line
      }
    }' "$rows"
} > "$out/$name.md"
cat "$out/$name.md"
