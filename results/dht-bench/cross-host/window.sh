#!/usr/bin/env bash
# What fewer operations in flight cost the hosts per transfer: `fabkit
# perf` 192 B reads, both directions, at windows of 64, 32 and 16, across
# the testbed's two hosts over tcp;ofi_rxm, ROUNDS rounds (the windows in
# turn within each), each point's rate and busy CPU per transfer in its
# JSON. Writes OUT_DIR/w{64,32,16}-rN.json and OUT_DIR/window.md.
#
#   bash results/dht-bench/cross-host/window.sh [OUT_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/lanes/window}
rounds=${ROUNDS:-3}
export PATH=$here/../../../target/release:$PATH
mkdir -p "$out"
ipoib-eval testbed up >/dev/null
trap 'ipoib-eval testbed down >/dev/null 2>&1 || true' EXIT
for r in $(seq "$rounds"); do
  for w in 64 32 16; do
    fabkit launch --netns ipoib-a,ipoib-b -- fabkit perf -p 'tcp;ofi_rxm' -d 10.77.1.0/24 -b -t 2 \
      --sizes 192 -o read -w "$w" --json "$out/w$w-r$r.json" >/dev/null
  done
done
{
  echo "# 192 B reads, both directions, by window: M reads/s and busy CPU per read (ns)"
  echo
  echo "$(jq -r .meta.command "$out/w64-r1.json"), and -w 32, -w 16; commit $(jq -r .meta.commit "$out/w64-r1.json")"
  echo
  echo "| round | window 64 | window 32 | window 16 |"
  echo "|---|---|---|---|"
  for r in $(seq "$rounds"); do
    row="| $r |"
    for w in 64 32 16; do
      row+="$(jq -r '.points[0] | " \(.rates.mxfers_per_sec * 1000 | round / 1000) M/s, \(.cpu_ns_per_xfer | round) ns |"' "$out/w$w-r$r.json")"
    done
    echo "$row"
  done
} >"$out/window.md"
cat "$out/window.md"
