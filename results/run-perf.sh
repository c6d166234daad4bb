#!/usr/bin/env bash
# Regenerates results/perf/: fabric and MPI one-sided microbenchmarks on this
# machine, their plots and a summary table. Every file it writes says the
# command, commit and host it came from (see each JSON's "meta").
#
#   bash results/run-perf.sh            # about 5 minutes on 2 cores
#   SECS=1 bash results/run-perf.sh     # longer, steadier points
#
# Every run is two processes under mpirun, as fabtests and OSU run, so native
# libfabric and MPI are measured the same way.
set -euo pipefail
cd "$(dirname "$0")/.."
. results/machine.sh
out=results/perf
secs=${SECS:-0.2}
# Build first: deleting the old (tracked) results would make the tree,
# and so the commit the results record, look dirty.
cargo build --release --quiet --bin fabkit
commit=$(git describe --always --dirty --abbrev=12)
mkdir -p "$out"
rm -f "$out"/*.json "$out"/*.csv "$out"/*.svg

fk=target/release/fabkit
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi() { mpirun --oversubscribe -n 2 "$@"; }

{
  machine_lines
  echo "libfabric: $(fi_info --version | sed -n 2p)"
  echo "mpi: $(mpirun --version | head -1)"
  echo "fabkit: $($fk --version) at $commit"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
} > "$out/machine.txt"
cat "$out/machine.txt"

name() { echo "$1" | tr ';=, ' '--__'; }

for prov in shm 'tcp;ofi_rxm' sockets; do
  p=$(name "$prov")
  for op in write read; do
    echo "== $prov $op"
    mpi $fk perf -p "$prov" -o $op -a -t "$secs" --json "$out/native-$p-$op-bw.json" --csv "$out/native-$p-$op-bw.csv"
    mpi $fk perf -p "$prov" -o $op --pattern lat --sizes 8,64,184,512,4096,65536 -t "$secs" \
      --json "$out/native-$p-$op-lat.json" --csv "$out/native-$p-$op-lat.csv"
    mpi $fk perf -p "$prov" -o $op --sizes 184,189 -w 64 -t 1 --json "$out/native-$p-$op-records.json"
  done
  for op in cas fadd; do
    mpi $fk perf -p "$prov" -o $op -t 1 --json "$out/native-$p-$op-bw.json"
    mpi $fk perf -p "$prov" -o $op --pattern lat -t 1 --json "$out/native-$p-$op-lat.json"
  done
  mpi $fk perf -p "$prov" -o send --pattern lat --sizes 8,64,184,512,4096,65536 -t "$secs" \
    --json "$out/native-$p-send-lat.json"
done

# What busy-polling (as fabtests does) changes.
mpi $fk perf -p shm -o cas --pattern lat -t 1 --busy-poll --json "$out/busypoll-shm-cas-lat.json"
mpi $fk perf -p shm -o write --sizes 184,189 -t 1 --busy-poll --json "$out/busypoll-shm-write-records.json"
$fk perf -p shm -o write --sizes 184,189 -t 1 --busy-poll --json "$out/busypoll-threads-shm-write-records.json"

# The embedded default: two ranks as threads of one process.
for prov in shm 'tcp;ofi_rxm' sockets; do
  for op in write read; do
    $fk perf -p "$prov" -o $op --sizes 184,189 -w 64 -t 1 --json "$out/threads-$(name "$prov")-$op-records.json"
  done
done

for cfg in "sm allocate" "pt2pt allocate" "pt2pt create"; do
  set -- $cfg
  m="mpi-$1-$2"
  for op in write read; do
    echo "== MPI osc $1, $2 window, $op"
    mpi --mca osc "$1" $fk mpi-perf --win "$2" -o $op -a -t "$secs" --json "$out/$m-$op-bw.json" --csv "$out/$m-$op-bw.csv"
    mpi --mca osc "$1" $fk mpi-perf --win "$2" -o $op --pattern lat --sizes 8,64,184,512,4096,65536 -t "$secs" \
      --json "$out/$m-$op-lat.json" --csv "$out/$m-$op-lat.csv"
    mpi --mca osc "$1" $fk mpi-perf --win "$2" -o $op --sizes 184,189 -t 1 --json "$out/$m-$op-records.json"
  done
  for op in cas fadd; do
    mpi --mca osc "$1" $fk mpi-perf --win "$2" -o $op -t 1 --json "$out/$m-$op-bw.json"
  done
done

# Seed 003's question: how synchronisation changes the MPI message rate.
for sync in lock-all lock lock-exclusive fence pscw; do
  mpi --mca osc pt2pt $fk mpi-perf -o write --sync $sync --sizes 8,184,4096 -t 1 --json "$out/mpi-pt2pt-sync-$sync.json"
done

bash results/plot-perf.sh
