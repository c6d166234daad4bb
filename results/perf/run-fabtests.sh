#!/usr/bin/env bash
# fabkit perf against fabtests' fi_rma_bw in the same run: 184 B RMA
# writes and reads, a window of 64, two processes on this host, on shm and
# tcp;ofi_rxm, ROUNDS rounds, the order of fabtests and fabkit swapped
# every round (this machine's speed drifts by 2x within an hour: only
# ratios within a round mean anything). fabkit runs twice a point: with
# its default waits (spin briefly, then block) and with --busy-poll, which
# is how fi_rma_bw waits.
#
#   FI_RMA_BW=/path/to/fi_rma_bw bash results/perf/run-fabtests.sh [OUT_DIR]
#
# FI_RMA_BW is fabtests' fi_rma_bw, built by hand outside this repository
# from the fabtests/ directory of ofiwg/libfabric's tag v1.17.0 against the
# system libfabric (autogen.sh, configure, make; it needs libtool). Writes
# OUT_DIR (default results/perf/fabtests/): every raw output, fabkit's
# JSON (command, commit, machine in its meta) and fabtests.md, the table.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/fabtests}
rounds=${ROUNDS:-3}
bw=${FI_RMA_BW:?FI_RMA_BW names fabtests fi_rma_bw (v1.17.0), built outside this repository}
[ -x "$bw" ] || { echo "run-fabtests: $bw is not an executable" >&2; exit 2; }
export PATH=$here/../../target/release:$PATH
mkdir -p "$out"
port=9231
srv=
# Only this script's own server is stopped (other fi_rma_bw runs stay);
# fabkit's ranks end with their launch.
trap '[ -n "$srv" ] && kill "$srv" 2>/dev/null; true' EXIT
args=(-S 184 -W 64 -I 200000 -E="$port")

fabtests() { # provider op file
  timeout 150 "$bw" -p "$1" -o "$2" "${args[@]}" >"$3.server" 2>&1 &
  srv=$!
  for _ in $(seq 100); do ss -ltn | grep -q ":$port " && break; sleep 0.05; done
  # shm names an endpoint after its port: the client takes another.
  timeout 120 "$bw" -p "$1" -o "$2" "${args[@]}" -B $((port + 70)) 127.0.0.1 >"$3"
  wait "$srv"
  srv=
}

fabkit_perf() { # provider op file [extra]
  local p=$1 o=$2 f=$3
  shift 3
  fabkit launch -n 2 -- fabkit perf -p "$p" -o "$o" --sizes 184 -w 64 -t 2 "$@" --json "$f" >/dev/null
}

for r in $(seq "$rounds"); do
  for p in shm 'tcp;ofi_rxm'; do
    tag=${p%%;*}
    for o in write read; do
      base="$out/$tag-$o-r$r"
      if [ $((r % 2)) -eq 1 ]; then
        fabtests "$p" "$o" "$base.fabtests.txt"
        fabkit_perf "$p" "$o" "$base.fabkit.json"
        fabkit_perf "$p" "$o" "$base.fabkit-busy.json" --busy-poll
      else
        fabkit_perf "$p" "$o" "$base.fabkit-busy.json" --busy-poll
        fabkit_perf "$p" "$o" "$base.fabkit.json"
        fabtests "$p" "$o" "$base.fabtests.txt"
      fi
    done
  done
done

{
  echo "# fabkit perf against fabtests fi_rma_bw, 184 B, window 64, 2 processes"
  echo
  echo "fabtests: server \`$(basename "$bw") -p P -o OP ${args[*]}\`, client the same with \`-B $((port + 70)) 127.0.0.1\` (v1.17.0, built by hand); its rate is 1 / usec/xfer (its Mxfers/sec column has two decimals). fabkit: $(jq -r .meta.command "$out/shm-write-r1.fabkit.json") and --busy-poll, commit $(jq -r .meta.commit "$out/shm-write-r1.fabkit.json"); $(jq -r .meta.machine "$out/shm-write-r1.fabkit.json")"
  echo
  echo "| round | provider | op | fabtests M/s | fabkit M/s (default waits) | fabkit M/s (busy-poll) | fabkit / fabtests | busy-poll / fabtests |"
  echo "|---|---|---|---:|---:|---:|---:|---:|"
  for r in $(seq "$rounds"); do
    for p in shm 'tcp;ofi_rxm'; do
      tag=${p%%;*}
      for o in write read; do
        base="$out/$tag-$o-r$r"
        ft=$(awk '$1 == 184 {printf "%.4f", 1 / $(NF - 1)}' "$base.fabtests.txt")
        fk=$(jq -r '.points[0].rates.mxfers_per_sec' "$base.fabkit.json")
        fb=$(jq -r '.points[0].rates.mxfers_per_sec' "$base.fabkit-busy.json")
        jq -nr --arg r "$r" --arg t "$p" --arg o "$o" --argjson ft "$ft" --argjson fk "$fk" --argjson fb "$fb" \
          '"| \($r) | \($t) | \($o) | \($ft) | \($fk * 1000 | round / 1000) | \($fb * 1000 | round / 1000) | \($fk / $ft * 100 | round / 100) | \($fb / $ft * 100 | round / 100) |"'
      done
    done
  done
} >"$out/fabtests.md"
cat "$out/fabtests.md"
