#!/usr/bin/env bash
# The relink benchmark: one C program (results/dht-speed/mpidht-driver.c,
# fabkit's own code on the MPI-DHT's API) built twice, against the public
# MPI-DHT (by hand, outside this repository: see the driver's header) and
# against fabkit's capi/ (installed with capi/install.sh), then run
# alternately, back to back, in rounds, with the same mpirun command. The
# variant and transport of fabkit's build are chosen by FABKIT_DHT_*
# alone, as a relinked program's would be; the batch64 rows use fabkit's
# batch calls (the driver's --batch, in fabkit's build only).
#
#   MPIDHT=/tmp/anchors/mpidht FABKIT=/tmp/anchors/relink/bench-fabkit \
#     bash results/capi/run-relink.sh > results/capi/relink.txt
set -euo pipefail
: "${MPIDHT:?set MPIDHT to the directory with mpidht-bench-{lockfree,coarse,fine}}"
: "${FABKIT:?set FABKIT to the driver linked against fabkit (bench-fabkit)}"
rounds=${ROUNDS:-3}
# A failed run leaves no row here; what it said is in $LOG (relink.err).
keys=${KEYS:-100000}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset OMPI_MCA_osc
run() { # label, osc ("" for Open MPI's choice), env, binary, its arguments
  local label=$1 osc=$2 env=$3 bin=$4 mca=()
  shift 4
  [ -n "$osc" ] && mca=(--mca osc "$osc")
  env $env mpirun -n 2 "${mca[@]}" ${env:+-x ${env%%=*}} "$bin" -k "$keys" "$@" 2>>"${LOG:-relink.err}" |
    awk -v r="$round" -v l="$label" -v o="${osc:-default}" '/Mops/ { print "round", r, l, "osc", o, $5, $7 }'
}
echo "# $(date -u +%FT%TZ) host $(hostname) $(nproc) cores; fabkit $(git -C "$(dirname "$0")" rev-parse --short HEAD); keys $keys per rank, 2 ranks"
echo "# columns: round, build, osc component asked, phase, M ops/s"
for round in $(seq "$rounds"); do
  run mpidht-lockfree "" "" "$MPIDHT/mpidht-bench-lockfree"
  run fabkit-lockfree "" "" "$FABKIT"
  run fabkit-lockfree-shm "" "FABKIT_DHT_TRANSPORT=shm" "$FABKIT"
  run fabkit-lockfree-batch64 "" "" "$FABKIT" --batch 64
  run fabkit-lockfree-shm-batch64 "" "FABKIT_DHT_TRANSPORT=shm" "$FABKIT" --batch 64
  run mpidht-lockfree rdma "" "$MPIDHT/mpidht-bench-lockfree"
  run fabkit-lockfree rdma "" "$FABKIT"
  run mpidht-coarse rdma "" "$MPIDHT/mpidht-bench-coarse"
  run fabkit-coarse rdma "FABKIT_DHT_VARIANT=coarse" "$FABKIT"
  run mpidht-fine pt2pt "" "$MPIDHT/mpidht-bench-fine"
  run fabkit-fine pt2pt "FABKIT_DHT_VARIANT=fine" "$FABKIT"
done
