#!/usr/bin/env bash
# An hour of load, and nothing may grow: fabkit dht --duration on the
# lock-free table, each cycle on fresh tables (create, the phases, free),
# every rank's resources sampled as it goes (resident memory, file
# descriptors, threads, registered regions, /dev/shm segments, busy CPU
# per operation). Two runs, one after the other:
#
#   memory   one node, two ranks as processes (fabkit launch -n 2),
#            --path memory (shared segments, CPU atomics), -w paper.
#   tcp      two hosts (the netns testbed: ipoib-a, ipoib-b) over
#            tcp;ofi_rxm, auto path (message: the owners' service threads),
#            -w paper,a,b,c.
#
#   SECS=1800 bash results/soak/soak.sh [memory] [tcp]
#
# Refuses to run on uncommitted changes; runs a copy of the binaries made
# at the start (a rebuild meanwhile does not change what runs); needs root
# (the testbed) and leaves it down however it ends. Writes SECTION.json
# (the report, soak included), SECTION.txt (command and output) and
# machine.txt, and SECTION.svg (fabkit plot: each rank's resident memory
# per minute, the counts in the legend).
set -uo pipefail
cd "$(dirname "$0")/../.."
. results/machine.sh
out=${OUT:-results/soak}
secs=${SECS:-1800}
sections=("$@")
[ ${#sections[@]} -gt 0 ] || sections=(memory tcp)
git diff --quiet HEAD -- ||
  { echo "soak.sh: the tree has uncommitted changes; commit them so the results name the commit that ran" >&2; exit 1; }
cargo build --release --quiet -p fabkit-bench -p ipoib-eval || exit 1
bin=$(mktemp -d /tmp/fabkit-soak-bin.XXXXXX)
cp target/release/fabkit target/release/ipoib-eval "$bin"/
trap 'rm -rf "$bin"' EXIT
fk=$bin/fabkit
mkdir -p "$out"
{
  machine_lines
  echo "libfabric: $(fi_info --version | sed -n 's/^libfabric: //p')"
  echo "fabkit: $($fk --version) at $(git rev-parse HEAD)"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "sections: ${sections[*]}; $secs s each"
} >> "$out/machine.txt"

run() { # SECTION LAUNCH... -- DHT-ARGS...
  local s=$1 launch=()
  shift
  while [ "$1" != -- ]; do launch+=("$1"); shift; done
  shift
  echo "\$ ${launch[*]} -- fabkit dht $* --duration $secs --json $out/$s.json" > "$out/$s.txt"
  "${launch[@]}" -- "$fk" dht "$@" --duration "$secs" --json "$out/$s.json" >> "$out/$s.txt" 2>&1
  echo "exit $?" >> "$out/$s.txt"
  "$fk" plot "$out/$s.json" --title "$title" -o "$out/$s.svg"
}

for s in "${sections[@]}"; do
  case $s in
  memory)
    title="soak: lock-free, 2 ranks on one node, --path memory, $secs s"
    run memory "$fk" launch -n 2 -- -v lockfree --path memory -k 100000 -w paper \
      --no-redis --hot-rounds 0 --latency-ops 0 ;;
  tcp)
    ip netns list | grep -qw ipoib-a || "$bin/ipoib-eval" testbed up --mgmt >/dev/null || exit 1
    trap '"$bin/ipoib-eval" testbed down >/dev/null 2>&1; rm -rf "$bin"' EXIT
    title="soak: lock-free, 2 hosts (namespaces), tcp;ofi_rxm, message path, $secs s"
    run tcp "$fk" launch --netns ipoib-a,ipoib-b -- -v lockfree -p 'tcp;ofi_rxm' \
      -d 10.77.1.0/24 -k 20000 -w paper,a,b,c --no-redis --hot-rounds 0 --latency-ops 0 ;;
  *) echo "soak.sh: no section $s (memory, tcp)" >&2; exit 2 ;;
  esac
done
