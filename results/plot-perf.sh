#!/usr/bin/env bash
# Draws results/perf/*.svg and SUMMARY.md from the JSON that run-perf.sh
# measured (no new measurements).
set -euo pipefail
cd "$(dirname "$0")/.."
out=results/perf
cargo build --release --quiet --bin fabkit
fk=target/release/fabkit
for op in write read; do
  $fk plot -m rate --title "$op message rate, window 64, 2 processes" -o "$out/rate-$op.svg" \
    "$out"/native-*-$op-bw.json "$out"/mpi-*-$op-bw.json
  $fk plot -m bandwidth --title "$op bandwidth, window 64, 2 processes" -o "$out/bandwidth-$op.svg" \
    "$out"/native-*-$op-bw.json "$out"/mpi-*-$op-bw.json
  $fk plot -m latency --title "$op latency (one in flight), 2 processes" -o "$out/latency-$op.svg" \
    "$out"/native-*-$op-lat.json "$out"/mpi-*-$op-lat.json
done
$fk plot -m rate --markdown "$out/SUMMARY.md" "$out"/*-records.json "$out"/*-cas-bw.json \
  "$out"/*-fadd-bw.json "$out"/mpi-pt2pt-sync-*.json
echo "plots and SUMMARY.md in $out"
