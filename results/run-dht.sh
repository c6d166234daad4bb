#!/usr/bin/env bash
# Regenerates results/dht/: the DHT as an application cache (fabkit dht),
# every variant, on shm and tcp;ofi_rxm, one blocking operation at a time
# (batch 1, as the MPI-DHT does) and batched (64 keys per round trip), as
# 4 ranks in-process and as 2 processes under mpirun.
#
#   bash results/run-dht.sh      # about 2 minutes on 2 cores
set -euo pipefail
cd "$(dirname "$0")/.."
out=results/dht
# Build first: deleting the old (tracked) results would make the tree,
# and so the commit the results record, look dirty.
cargo build --release --quiet --bin fabkit
commit=$(git describe --always --dirty --abbrev=12)
mkdir -p "$out"
rm -f "$out"/*.json "$out"/*.txt
fk=target/release/fabkit
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cp results/perf/machine.txt "$out/machine.txt" 2>/dev/null || true
echo "fabkit: $($fk --version) at $commit" >> "$out/machine.txt"
for prov in shm 'tcp;ofi_rxm'; do
  p=$(echo "$prov" | tr ';' '-')
  for batch in 1 64; do
    cmd=("$fk" dht -p "$prov" -n 4 --keys 2000 --batch $batch --json "$out/threads-$p-batch$batch.json")
    echo "\$ ${cmd[*]}" | tee -a "$out/tables.txt"
    "${cmd[@]}" | tee -a "$out/tables.txt"
    cmd=(mpirun --oversubscribe -n 2 "$fk" dht -p "$prov" --keys 4000 --batch $batch --json "$out/mpirun2-$p-batch$batch.json")
    echo "\$ ${cmd[*]}" | tee -a "$out/tables.txt"
    "${cmd[@]}" | tee -a "$out/tables.txt"
  done
done
# Same-node shortcut: shared memory between the 2 processes, libfabric
# shm registered underneath.
for batch in 1 64; do
  cmd=(mpirun --oversubscribe -n 2 "$fk" dht -p shm --shm --keys 4000 --batch $batch --json "$out/mpirun2-shmshortcut-batch$batch.json")
  echo "\$ ${cmd[*]}" | tee -a "$out/tables.txt"
  "${cmd[@]}" | tee -a "$out/tables.txt"
done

# The same algorithms over MPI one-sided RMA (osc sm on MPI_Win_allocate,
# osc pt2pt on MPI_Win_create), 2 processes.
for cfg in "sm allocate" "pt2pt create"; do
  set -- $cfg
  for batch in 1 64; do
    cmd=(mpirun --oversubscribe -n 2 --mca osc "$1" "$fk" dht --mpi "$2" --keys 4000 --batch $batch --json "$out/mpirun2-mpi-$1-$2-batch$batch.json")
    echo "\$ ${cmd[*]}" | tee -a "$out/tables.txt"
    "${cmd[@]}" | tee -a "$out/tables.txt"
  done
done
echo "wrote $out"
