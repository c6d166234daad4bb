#!/usr/bin/env bash
# Regenerates results/dht-bench/: `fabkit dht` as the benchmark, with Redis
# in the same runs (one redis-server per rank on loopback).
#
# - The fastest same-node path (2 processes under mpirun on an
#   MPI_Win_allocate window, osc sm): every workload (paper, load-a, a, b,
#   c, d, f) x every variant, uniform and zipf, POET's 80,104 B records at
#   1 to 4 ranks (past 2, oversubscribed on this 2-core machine), the S, M
#   and L classes at 2 ranks, and the workloads' own distributions (d:
#   latest) at 2 ranks.
# - Every other transport, paper and a at 2 ranks: libfabric shm and
#   tcp;ofi_rxm in-process and under mpirun, the same-node shortcut
#   (--shm) in-process and as processes, MPI_Win_create (osc pt2pt).
# - Charts of throughput against ranks (fabkit plot) and a markdown table
#   of every run, with the commit and command in each JSON file.
#
#   bash results/run-dht-bench.sh         # about 40 minutes on 2 cores
#   KEYS=2000 REPS=1 bash results/run-dht-bench.sh   # a quick look
set -euo pipefail
cd "$(dirname "$0")/.."
out=results/dht-bench
keys=${KEYS:-20000}
reps=${REPS:-3}
# Build first: deleting the old (tracked) results would make the tree,
# and so the commit the results record, look dirty.
cargo build --release --quiet --bin fabkit
fk=target/release/fabkit
mkdir -p "$out"
rm -f "$out"/*.json "$out"/*.csv "$out"/*.svg "$out"/*.md "$out"/*.txt
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
common=(--keys "$keys" --reps "$reps" --latency-ops 5000)
all=(-w paper,load-a,a,b,c,d,f)

# One run: its name, then the launcher and fabkit's arguments. The table
# goes to tables.txt after the command that made it.
run() {
  local name=$1
  shift
  echo "\$ $*" | tee -a "$out/tables.txt"
  "$@" --json "$out/$name.json" --csv "$out/$name.csv" | tee -a "$out/tables.txt"
}
mpi() { mpirun --oversubscribe -n "$1" "$fk" dht "${@:2}"; }

for dist in uniform zipf; do
  for n in 1 2 3 4; do
    run "fastest-$dist-r$n" mpi "$n" --mpi allocate --path rma "${all[@]}" --distribution "$dist" "${common[@]}"
  done
  for rec in S M L; do
    run "fastest-$dist-$rec-r2" mpi 2 --mpi allocate --path rma "${all[@]}" --distribution "$dist" --record "$rec" "${common[@]}"
  done
done
run "fastest-default-r2" mpi 2 --mpi allocate --path rma "${all[@]}" "${common[@]}"

two=(-w paper,a "${common[@]}")
run "threads-shm-r2" "$fk" dht -n 2 -p shm "${two[@]}"
run "threads-shmshortcut-r2" "$fk" dht -n 2 -p shm --shm "${two[@]}"
run "threads-tcp-r2" "$fk" dht -n 2 -p 'tcp;ofi_rxm' "${two[@]}"
run "launch-shmshortcut-r2" "$fk" launch -n 2 -- "$fk" dht -p shm --shm "${two[@]}"
run "mpirun-shm-r2" mpi 2 -p shm "${two[@]}"
run "mpirun-tcp-r2" mpi 2 -p 'tcp;ofi_rxm' "${two[@]}"
run "mpirun-create-pt2pt-r2" mpi 2 --mpi create --path rma "${two[@]}"

# Charts of throughput against ranks, and runs.md.
bash results/plot-dht-bench.sh "$fk" "$out"
echo "wrote $out"
