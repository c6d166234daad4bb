#!/usr/bin/env bash
# The message path (owner-executed batches) measured against its anchors,
# each in the same round, back to back, the order flipped every other
# round. Sections (default: all, in this order):
#
#   cross     two hosts (the netns testbed: ipoib-a, ipoib-b, a veth pair,
#             10.77.1.0/24) over tcp;ofi_rxm, 2 ranks (one per host) and
#             4 ranks (two per host), lock-free and chunked, -w paper,a,b,c:
#             fabkit dht with Redis beside it in the same run (one
#             redis-server per rank on its host's address).
#   mpi       the same hosts under mpirun (btl tcp): the message path over
#             MPI point-to-point against MPI windows (osc pt2pt), lock-free.
#   one-node  libfabric shm with --path message, batch 64 and batch 1,
#             against the public MPI-DHT (MPIDHT=DIR of mpidht-bench-*,
#             built by hand: results/dht-speed/mpidht-driver.c).
#   surrogate fabkit surrogate --path message over shm (in-process) and
#             across the two hosts, lock-free, exact keys, 400 substeps.
#   service   dht/examples/service over shm, tcp;ofi_rxm, sockets and MPI
#             (vader, one node): an owner that computes, idles and serves.
#   model     fabkit perf -o send (and the RMA points) across the hosts and
#             fabkit model beside the cross run's 2-rank rows.
#   slower    the memory and RMA paths against OLD=PATH, the fabkit built
#             from the commit before this work.
#
#   MPIDHT=/tmp/anchors/mpidht OLD=/work/old/target/release/fabkit \
#     bash results/dht-bench/cross-host/message.sh [SECTION...]
#
# Refuses to run on uncommitted changes; needs root (the testbed), and
# leaves the testbed down however it ends. Writes raw/ (every run's JSON
# and output) and records.jsonl; message-table.sh turns them into tables.
set -uo pipefail
cd "$(dirname "$0")/../../.."
. results/machine.sh
out=${OUT:-results/dht-bench/cross-host/message}
rounds=${ROUNDS:-3}
keys=${KEYS:-20000}
sections=("$@")
[ ${#sections[@]} -gt 0 ] || sections=(cross mpi one-node surrogate service model slower)
git diff --quiet HEAD -- ||
  { echo "message.sh: the tree has uncommitted changes; commit them so the results name the commit that ran" >&2; exit 1; }
cargo build --release --quiet -p fabkit-bench -p ipoib-eval || exit 1
cargo build --release --quiet -p fabkit-dht --features fabric,mpi --example service || exit 1
fk=$PWD/target/release/fabkit
export PATH=$PWD/target/release:$PATH
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
net=10.77.1.0/24
mkdir -p "$out/raw"
{
  machine_lines
  echo "libfabric: $(fi_info --version | sed -n 's/^libfabric: //p')"
  echo "fabkit: $($fk --version) at $(git rev-parse HEAD)"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "sections: ${sections[*]}; rounds $rounds; keys $keys per rank"
} >> "$out/machine.txt"

# rec SECTION ROUND ROW SYSTEM VARIANT PHASE MOPS [EXTRA-JSON]
rec() {
  jq -cn --arg s "$1" --argjson round "$2" --arg row "$3" --arg sys "$4" --arg v "$5" \
    --arg phase "$6" --argjson mops "$7" --argjson x "${8:-{\}}" \
    '{section: $s, round: $round, row: $row, system: $sys, variant: $v, phase: $phase, mops: $mops} + $x' \
    >> "$out/records.jsonl"
}
failed() { # SECTION ROUND ROW LOG
  echo "message.sh: $1 round $2 $3 failed; see $4" >&2
  rec "$1" "$2" "$3" - - failed null
}
# dhtrec SECTION ROUND ROW JSON: every row of a fabkit dht report.
dhtrec() {
  jq -c '.runs[] | {system, variant: (.variant // "-"), phase: "\(.workload)/\(.phase)",
      mops: (.ops_per_sec / 1e6), path: (.path // "-"), own: .own_share, cpu_ns: .cpu_ns_per_op,
      srv_ns: .service_ns_per_key, vs_redis: .vs_redis, ranks}' "$4" |
    while read -r line; do
      rec "$1" "$2" "$3" "$(jq -r .system <<< "$line")" "$(jq -r .variant <<< "$line")" \
        "$(jq -r .phase <<< "$line")" "$(jq -r .mops <<< "$line")" \
        "$(jq -c 'del(.system, .variant, .phase, .mops)' <<< "$line")"
    done
}
# dht SECTION ROUND ROW LAUNCH... -- ARGS...: one fabkit dht run, recorded.
dht() {
  local s=$1 r=$2 row=$3 launch=()
  shift 3
  while [ "$1" != -- ]; do launch+=("$1"); shift; done
  shift
  local base=$out/raw/$s-$row-r$r cmd=("$fk")
  [ ${#launch[@]} -eq 0 ] || cmd=("${launch[@]}" -- "$fk")
  echo "\$ ${launch[*]}${launch:+ -- }fabkit dht $* --json $base.json" > "$base.txt"
  "${cmd[@]}" dht "$@" --json "$base.json" >> "$base.txt" 2>&1 || { failed "$s" "$r" "$row" "$base.txt"; return; }
  dhtrec "$s" "$r" "$row" "$base.json"
}
testbed() {
  ip netns list | grep -qw ipoib-a || ipoib-eval testbed up --mgmt >/dev/null || exit 1
  trap 'ipoib-eval testbed down >/dev/null 2>&1 || true' EXIT
}
flip() { (( $1 % 2 == 0 )); }

cross() {
  testbed
  local two=(fabkit launch --netns ipoib-a,ipoib-b) four=(fabkit launch --netns ipoib-a,ipoib-a,ipoib-b,ipoib-b)
  local args=(-p 'tcp;ofi_rxm' -d "$net" -k "$keys" -b 64 -w paper,a,b,c --hot-rounds 0 --latency-ops 2000)
  for r in $(seq "$rounds"); do
    for v in lockfree chunked; do
      # Redis runs in the same fabkit dht invocation, after the DHT.
      dht cross "$r" "n2-$v" "${two[@]}" -- "${args[@]}" -v "$v"
      dht cross "$r" "n4-$v" "${four[@]}" -- "${args[@]}" -v "$v"
    done
  done
}

mpi() {
  testbed
  local m=(fabkit launch --mpi -n 2 --netns ipoib-a,ipoib-b)
  for r in $(seq "$rounds"); do
    msg() { OMPI_MCA_osc=sm,pt2pt dht mpi "$r" message "${m[@]}" -- --mpi create --path message -v lockfree -w paper -k "$keys" --no-redis --hot-rounds 0 --latency-ops 0; }
    win() { OMPI_MCA_osc=pt2pt dht mpi "$r" rma-pt2pt "${m[@]}" -- --mpi create --path rma -v lockfree -w paper -k 1000 --no-redis --hot-rounds 0 --latency-ops 0; }
    if flip "$r"; then win; msg; else msg; win; fi
  done
}

one_node() {
  local mpidht=${MPIDHT:?one-node needs MPIDHT=DIR with mpidht-bench-lockfree (results/dht-speed/mpidht-driver.c)}
  local k=100000 buckets=262144
  anchor() {
    local base=$out/raw/one-node-mpidht-r$1
    echo "\$ mpirun -n 2 --mca osc rdma $mpidht/mpidht-bench-lockfree -k $k -b $buckets" > "$base.txt"
    mpirun -n 2 --mca osc rdma "$mpidht/mpidht-bench-lockfree" -k "$k" -b "$buckets" >> "$base.txt" 2>&1 ||
      { failed one-node "$1" mpidht "$base.txt"; return; }
    grep '^mpidht ' "$base.txt" | while read -r _ v _ _ phase _ mops _; do
      rec one-node "$1" mpidht mpidht "$v" "paper/$phase" "$mops"
    done
  }
  mine() {
    for b in 64 1; do
      dht one-node "$1" "shm-message-b$b" -- -p shm --path message -n 2 -b "$b" -v lockfree -w paper -k "$k" \
        --buckets "$buckets" --no-redis --hot-rounds 0 --latency-ops 0
    done
  }
  for r in $(seq "$rounds"); do
    if flip "$r"; then mine "$r"; anchor "$r"; else anchor "$r"; mine "$r"; fi
  done
}

surrogate() {
  local args=(surrogate -v lockfree --path message --digits exact --substeps 400 --grid 48x24 --steps 60 --rounds "$rounds")
  local base=$out/raw/surrogate-shm
  echo "\$ fabkit ${args[*]} -n 2 -p shm --json $base.json" > "$base.txt"
  "$fk" "${args[@]}" -n 2 -p shm --json "$base.json" >> "$base.txt" 2>&1 || failed surrogate 1 shm "$base.txt"
  testbed
  base=$out/raw/surrogate-cross
  echo "\$ fabkit launch --netns ipoib-a,ipoib-b -- fabkit ${args[*]} -p tcp;ofi_rxm -d $net --json $base.json" > "$base.txt"
  fabkit launch --netns ipoib-a,ipoib-b -- "$fk" "${args[@]}" -p 'tcp;ofi_rxm' -d "$net" --json "$base.json" \
    >> "$base.txt" 2>&1 || failed surrogate 1 cross "$base.txt"
}

service() {
  for r in $(seq "$rounds"); do
    for p in shm 'tcp;ofi_rxm' sockets; do
      target/release/examples/service "$p" 1 >> "$out/service.jsonl" 2>> "$out/raw/service.err" ||
        echo "message.sh: service $p round $r failed (raw/service.err)" >&2
    done
    OMPI_MCA_osc=sm,pt2pt mpirun -n 2 target/release/examples/service mpi 1 >> "$out/service.jsonl" \
      2>> "$out/raw/service.err" || echo "message.sh: service mpi round $r failed (raw/service.err)" >&2
  done
}

model() {
  testbed
  local two=(fabkit launch --netns ipoib-a,ipoib-b --) d=$out/raw
  local perf=(fabkit perf -p 'tcp;ofi_rxm' -d "$net" -b -t 2)
  # The message path's sizes: replies to writes (72 B), requests of reads
  # (2600 B), replies of reads (3400 B), requests of writes (5928 B), at
  # 2 ranks and batch 64; 4 ranks send half as many keys per message.
  local sizes=72,1300,1700,2600,2964,3400,5928
  "${two[@]}" "${perf[@]}" --sizes "$sizes" -o send --json "$d/model-perf-send.json" > "$d/model-perf-send.txt" 2>&1
  "${two[@]}" fabkit perf -p 'tcp;ofi_rxm' -d "$net" -t 2 --pattern lat --sizes "$sizes" -o send \
    --json "$d/model-perf-sendlat.json" > "$d/model-perf-sendlat.txt" 2>&1
  "${two[@]}" "${perf[@]}" --sizes 192,1600 -o read --json "$d/model-perf-read.json" > "$d/model-perf-read.txt" 2>&1
  "${two[@]}" "${perf[@]}" --sizes 192 -o write --completion delivery --json "$d/model-perf-write.json" > "$d/model-perf-write.txt" 2>&1
  "${two[@]}" "${perf[@]}" --sizes 8 -o cas --json "$d/model-perf-cas.json" > "$d/model-perf-cas.txt" 2>&1
  "$fk" dht -p shm --shm -n 2 -k "$keys" -b 64 -w paper,a,b,c --no-redis --hot-rounds 0 --latency-ops 0 \
    -v lockfree --json "$d/model-ops-lockfree.json" > "$d/model-ops-lockfree.txt" 2>&1
  "$fk" dht -p shm --shm -n 2 -k "$keys" -b 64 -w paper,a,b,c --no-redis --hot-rounds 0 --latency-ops 0 \
    -v chunked --json "$d/model-ops-chunked.json" > "$d/model-ops-chunked.txt" 2>&1
  for v in lockfree chunked; do
    "$fk" model --ops "$d/model-ops-$v.json" --perf "$d/model-perf-send.json" \
      --perf "$d/model-perf-sendlat.json" --perf "$d/model-perf-read.json" \
      --perf "$d/model-perf-write.json" --perf "$d/model-perf-cas.json" --measured "$d/cross-n2-$v-r1.json" \
      --json "$d/model-$v.json" > "$out/model-$v.txt" 2>&1
  done
}

slower() {
  local old=${OLD:?slower needs OLD=PATH of the fabkit built from the commit before this work}
  local k=100000
  both() { # ROUND ROW NEW-ARGS -- OLD-ARGS
    local r=$1 row=$2 new=() olda=()
    shift 2
    while [ "$1" != -- ]; do new+=("$1"); shift; done
    shift
    olda=("$@")
    n() { dht slower "$r" "$row-new" -- "${new[@]}"; }
    o() {
      local base=$out/raw/slower-$row-old-r$r
      echo "\$ $old dht ${olda[*]} --json $base.json" > "$base.txt"
      "$old" dht "${olda[@]}" --json "$base.json" >> "$base.txt" 2>&1 || { failed slower "$r" "$row-old" "$base.txt"; return; }
      dhtrec slower "$r" "$row-old" "$base.json"
    }
    if flip "$r"; then n; o; else o; n; fi
  }
  local c=(-n 2 -w paper -k "$k" --no-redis --hot-rounds 0 --latency-ops 0)
  for r in $(seq "$rounds"); do
    for v in lockfree chunked; do
      both "$r" "memory-$v" "${c[@]}" -v "$v" --path memory -- "${c[@]}" -v "$v" --shm
      both "$r" "rma-shm-$v" "${c[@]}" -v "$v" -p shm --path rma -- "${c[@]}" -v "$v" -p shm
    done
  done
}

for s in "${sections[@]}"; do
  echo "message.sh: $s ($(date -u +%H:%M:%S))" >&2
  case $s in
    cross) cross ;;
    mpi) mpi ;;
    one-node) one_node ;;
    surrogate) surrogate ;;
    service) service ;;
    model) model ;;
    slower) slower ;;
    *) echo "message.sh: no section $s (cross mpi one-node surrogate service model slower)" >&2; exit 2 ;;
  esac
done
