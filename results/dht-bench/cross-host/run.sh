#!/usr/bin/env bash
# The DHT across two hosts (the netns testbed: ipoib-a and ipoib-b joined
# by a veth pair, 10.77.1.0/24) over tcp;ofi_rxm, with its bound measured
# in the same run: each round runs `fabkit perf` (the anchor: the
# fabric's own bidirectional rates and host CPU per transfer for
# delivery-complete writes, reads and compare-and-swap at the bucket's
# and the chunk's sizes) and then `fabkit dht` on every variant with those
# rates as --bound, back to back: with its batches in flight on the
# lanes the transport keeps (the default), then one batch at a time
# (--depth 1), then on the same-node path (--shm: a rank's own region by
# loads and stores, the other's through the fabric); Redis beside the
# lock-free run (one server per host on its veth address); MPI across the
# same hosts (osc pt2pt over btl tcp); and the one-node run the model
# reads (fabkit dht -p shm --shm, every rank mapped, no fabric). Then
# model.sh predicts each variant, plain and --shm, beside what was measured.
#
#   bash results/dht-bench/cross-host/run.sh [OUT_DIR]
#
# Needs root (the testbed), a built fabkit and ipoib-eval in PATH (or
# target/release), and leaves the testbed down however it ends.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/run}
rounds=${ROUNDS:-3}
keys=${KEYS:-20000}
batch=${BATCH:-64}
net=10.77.1.0/24
export PATH=$here/../../../target/release:$PATH
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=pt2pt
mkdir -p "$out"
ipoib-eval testbed up --mgmt >/dev/null
trap 'ipoib-eval testbed down >/dev/null 2>&1 || true' EXIT
two=(fabkit launch --netns ipoib-a,ipoib-b --)
perf=(fabkit perf -p 'tcp;ofi_rxm' -d "$net" -b -t 2)
dht=(fabkit dht -p 'tcp;ofi_rxm' -d "$net" -k "$keys" -b "$batch" --hot-rounds 0 --latency-ops 2000)
{
  echo "# $(date -u +%FT%TZ) $(hostname) $(nproc) cores, fabkit $(git -C "$here" describe --always --dirty)"
  echo "# keys $keys per rank, batch $batch, $rounds rounds; commands in each JSON's meta"
} >"$out/README.txt"
for r in $(seq "$rounds"); do
  # The sizes the variants move: a bucket (192 B), a chunk (chunked reads).
  "${two[@]}" "${perf[@]}" --sizes 192 -o write --completion delivery --json "$out/perf-write-r$r.json" >/dev/null
  "${two[@]}" "${perf[@]}" --sizes 192,1600 -o read --json "$out/perf-read-r$r.json" >/dev/null
  "${two[@]}" "${perf[@]}" --sizes 8 -o cas --json "$out/perf-cas-r$r.json" >/dev/null
  bound=(--bound "$out/perf-write-r$r.json" --bound "$out/perf-read-r$r.json" --bound "$out/perf-cas-r$r.json")
  # The op mix and the DHT's own CPU per operation, on one node, for the
  # model (never the runs it is compared with).
  fabkit dht -p shm --shm -n 2 -k "$keys" -b "$batch" --no-redis --hot-rounds 0 --latency-ops 0 \
    --json "$out/ops-r$r.json" >"$out/ops-r$r.txt"
  for v in lockfree fine chunked; do
    redis=(--no-redis)
    [ "$v" = lockfree ] && redis=()
    "${two[@]}" "${dht[@]}" -v "$v" "${redis[@]}" "${bound[@]}" --json "$out/dht-$v-r$r.json" >"$out/dht-$v-r$r.txt"
    "${two[@]}" "${dht[@]}" -v "$v" --no-redis --depth 1 "${bound[@]}" --json "$out/d1-$v-r$r.json" >"$out/d1-$v-r$r.txt"
    "${two[@]}" "${dht[@]}" -v "$v" --no-redis --shm "${bound[@]}" --json "$out/shm-$v-r$r.json" >"$out/shm-$v-r$r.txt"
  done
  fabkit launch --mpi -n 2 --netns ipoib-a,ipoib-b -- fabkit dht --mpi create --path rma -k "$keys" -b "$batch" \
    -v lockfree --no-redis --hot-rounds 0 --json "$out/mpi-lockfree-r$r.json" >"$out/mpi-lockfree-r$r.txt" 2>&1 ||
    echo "round $r: MPI run failed (see mpi-lockfree-r$r.txt)"
done
# The model's predictions from this run's own inputs (see model.sh).
bash "$here/model.sh" "$out"
