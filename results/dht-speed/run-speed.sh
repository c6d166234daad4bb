#!/usr/bin/env bash
# The DHT's speed against its anchors, in rounds: every fabkit path of the
# speed work (`fabkit dht -w paper`, uniform, 80 B keys / 104 B values,
# KEYS keys and BUCKETS buckets per rank) run back to back with the anchor
# it is judged against, ROUNDS times, the order of anchor and fabkit
# swapped every round (this machine's speed drifts by 2x within an hour:
# only ratios within a round mean anything).
#
# Anchors:
# - the ceiling loop, ceiling.c beside this script: a plain C loop doing
#   what a lock-free operation must (its `read-all` phase has the mix of
#   fabkit's read phase); CEILING names its binary, or it is built from
#   ceiling.c with `gcc -O2 -msse4.2`;
# - the public MPI-DHT, built by hand outside this repository and driven by
#   mpidht-driver.c (its header says how): MPIDHT names the directory of
#   mpidht-bench-{lockfree,coarse,fine}. Without it those rows say so.
#
#   MPIDHT=/tmp/anchors/mpidht CEILING=/tmp/anchors/ceiling \
#     bash results/dht-speed/run-speed.sh
#
# Writes results/dht-speed/speed/: every run's output (raw/, fabkit's JSON
# with its command, commit and machine), records.jsonl (one line per phase
# of every run; a run that failed is one line with phase "failed", and the
# table lists it) and speed.md (the per-round table and the scaling table).
# It is written beside the old one and moved into place at the end.
set -uo pipefail
cd "$(dirname "$0")/../.."
final=results/dht-speed/speed
out=$final.new
rounds=${ROUNDS:-3}
keys=${KEYS:-100000}
buckets=${BUCKETS:-262144}
mpidht=${MPIDHT:-}
ceiling=${CEILING:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ -z "$ceiling" ]; then
  src=results/dht-speed/ceiling.c
  [ -f "$src" ] || { echo "run-speed: no ceiling loop: $src is missing (or set CEILING)" >&2; exit 2; }
  gcc -O2 -msse4.2 -o "$tmp/ceiling" "$src" || exit 1
  ceiling=$tmp/ceiling
fi
if [ -n "$mpidht" ]; then
  for v in lockfree coarse fine; do
    [ -x "$mpidht/mpidht-bench-$v" ] || {
      echo "run-speed: MPIDHT=$mpidht has no mpidht-bench-$v (see mpidht-driver.c)" >&2
      exit 2
    }
  done
fi
cargo build --release --quiet --bin fabkit || exit 1
fk=target/release/fabkit
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
rm -rf "$out"
mkdir -p "$out/raw"
common=(-w paper -k "$keys" --buckets "$buckets" --latency-ops 0 --no-redis --hot-rounds 0)

# rec ROUND ROW SIDE VARIANT PHASE MOPS: one line of records.jsonl.
rec() {
  jq -cn --argjson round "$1" --arg row "$2" --arg side "$3" --arg variant "$4" \
    --arg phase "$5" --argjson mops "$6" \
    '{round: $round, row: $row, side: $side, variant: $variant, phase: $phase, mops: $mops}' \
    >> "$out/records.jsonl"
}

# failed ROUND ROW SIDE LOG: says so, and records it.
failed() {
  echo "run-speed: round $1, $2 ($3) failed; see ${4#"$out/"}" >&2
  jq -cn --argjson round "$1" --arg row "$2" --arg side "$3" \
    '{round: $round, row: $row, side: $side, variant: "-", phase: "failed", mops: null}' \
    >> "$out/records.jsonl"
}

# ceiling ROUND ROW RANKS: the ceiling loop's write and read-all phases.
ceiling() {
  local log=$out/raw/r$1-$2.txt
  echo "\$ $ceiling $3 $keys $buckets" > "$log"
  "$ceiling" "$3" "$keys" "$buckets" >> "$log" || { failed "$1" "$2" anchor "$log"; return; }
  local line
  line=$(tail -1 "$log")
  rec "$1" "$2" anchor lockfree write "$(sed -E 's/.* write ([0-9.]+) Mops.*/\1/' <<< "$line")"
  rec "$1" "$2" anchor lockfree read "$(sed -E 's/.* read-all ([0-9.]+) Mops.*/\1/' <<< "$line")"
}

# mpidht ROUND ROW VARIANT OSC: the MPI-DHT's write, read and mixed phases.
mpidht() {
  local bin=$mpidht/mpidht-bench-$3 log=$out/raw/r$1-$2.txt
  [ -n "$mpidht" ] && [ -x "$bin" ] || return 0
  echo "\$ mpirun -n 2 --mca osc $4 $bin -k $keys -b $buckets" > "$log"
  mpirun -n 2 --mca osc "$4" "$bin" -k "$keys" -b "$buckets" >> "$log" 2>&1 ||
    { failed "$1" "$2" anchor "$log"; return; }
  grep '^mpidht ' "$log" | while read -r _ v _ _ phase _ mops _; do
    rec "$1" "$2" anchor "$v" "$phase" "$mops"
  done
}

# fabkit ROUND ROW LAUNCHER... -- FABKIT-ARGS...: one fabkit run's phases.
fabkit() {
  local round=$1 row=$2
  shift 2
  local launch=()
  while [ "$1" != -- ]; do launch+=("$1"); shift; done
  shift
  local json=$out/raw/r$round-$row.json
  "${launch[@]}" "$fk" dht "$@" "${common[@]}" --json "$json" > "$out/raw/r$round-$row.txt" 2>&1 ||
    { failed "$round" "$row" fabkit "$out/raw/r$round-$row.txt"; return; }
  jq -r '.runs[] | select(.system == "fabkit") | "\(.variant) \(.phase) \(.ops_per_sec / 1e6)"' \
    "$json" | while read -r v phase mops; do
    rec "$round" "$row" fabkit "$v" "$phase" "$mops"
  done
}

mpi2=(mpirun -n 2)
# The rows: an anchor and the fabkit runs judged against it, back to back.
round() {
  local r=$1 flip=$(( $1 % 2 == 0 ))
  pair() { # pair ANCHOR-FUNCTION -- FABKIT-FUNCTION: in this round's order
    if [ "$flip" = 1 ]; then "${@:3}"; "$1"; else "$1"; "${@:3}"; fi
  }
  a_ceiling() { ceiling "$r" ceiling 2; }
  f_lockfree() {
    fabkit "$r" lockfree-threads-shm -- -n 2 --shm -v lockfree
    fabkit "$r" lockfree-processes-shm "${mpi2[@]}" -- --shm -v lockfree
    fabkit "$r" lockfree-mpi-allocate "${mpi2[@]}" --mca osc sm,pt2pt -- --mpi allocate --path rma -v lockfree
  }
  pair a_ceiling -- f_lockfree
  a_lockfree() { mpidht "$r" mpidht-lockfree lockfree rdma; }
  f_create() {
    fabkit "$r" lockfree-mpi-create-b1 "${mpi2[@]}" --mca osc rdma -- --mpi create --path rma -v lockfree -b 1
    fabkit "$r" lockfree-mpi-create-b64 "${mpi2[@]}" --mca osc rdma -- --mpi create --path rma -v lockfree
    fabkit "$r" chunked-threads-shm -- -n 2 --shm -v chunked
  }
  pair a_lockfree -- f_create
  a_coarse() { mpidht "$r" mpidht-coarse coarse rdma; }
  f_coarse() {
    fabkit "$r" coarse-threads-shm -- -n 2 --shm -v coarse
    fabkit "$r" coarse-mpi-create-b1 "${mpi2[@]}" --mca osc rdma -- --mpi create --path rma -v coarse -b 1
    fabkit "$r" coarse-mpi-create-b64 "${mpi2[@]}" --mca osc rdma -- --mpi create --path rma -v coarse
  }
  pair a_coarse -- f_coarse
  a_fine() { mpidht "$r" mpidht-fine fine pt2pt; }
  f_fine() {
    fabkit "$r" fine-threads-shm -- -n 2 --shm -v fine
    fabkit "$r" fine-mpi-create-b1 "${mpi2[@]}" --mca osc pt2pt -- --mpi create --path rma -v fine -b 1
    fabkit "$r" chunked-mpi-create-b1 "${mpi2[@]}" --mca osc pt2pt -- --mpi create --path rma -v chunked -b 1
  }
  pair a_fine -- f_fine
  # Scaling: the ceiling and the fastest path at 1 to 4 ranks.
  for n in 1 2 3 4; do
    a_n() { ceiling "$r" "ceiling-n$n" "$n"; }
    f_n() { fabkit "$r" "lockfree-threads-shm-n$n" -- -n "$n" --shm -v lockfree; }
    pair a_n -- f_n
  done
}
for r in $(seq 1 "$rounds"); do
  echo "run-speed: round $r of $rounds" >&2
  round "$r"
done
# Beside them, once, with Redis in the same run (one server per rank on
# loopback): the paper's uniform and zipf phases and YCSB on the fastest
# path.
beside() {
  local name=$1
  shift
  "$fk" dht -n 2 --shm -v lockfree -k "$keys" --buckets "$buckets" "$@" \
    --json "$out/raw/$name.json" > "$out/raw/$name.txt" 2>&1 ||
    echo "run-speed: $name failed; see raw/$name.txt" >&2
}
beside uniform-paper-a -w paper,a --reps 3
beside zipf-paper -w paper --distribution zipf --reps 3
beside ycsb -w load-a,b,c,d,f --reps 3

bash results/dht-speed/speed-table.sh "$out" > "$out/speed.md" || exit 1
rm -rf "$final"
mv "$out" "$final"
cat "$final/speed.md"
