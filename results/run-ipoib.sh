#!/usr/bin/env bash
# Regenerates results/ipoib/: ipoib-eval side by side with iperf3 on the
# namespace testbed (two namespaces, a veth pair with 4 queues, MTU 1500),
# in one run: TCP with 1 and 4 streams, UDP 1472 B and 64 B at -b 0 with
# every send path. The tools alternate within each repetition, and the
# table compares medians. Needs root, iperf3 and jq.
#
#   bash results/run-ipoib.sh              # about 4 minutes
#   REPS=5 SECS=5 bash results/run-ipoib.sh
#
# UDP runs give both tools the same 32 MiB socket buffers (-w 32M); so that
# iperf3 gets them too, net.core.[rw]mem_max are raised for the run and
# restored afterwards. Everything the script starts or builds (testbed,
# servers, sysctls) is undone on exit, also on Ctrl-C or failure.
set -euo pipefail
cd "$(dirname "$0")/.."
. results/machine.sh
out=results/ipoib
reps=${REPS:-3}
secs=${SECS:-3}
name=ipoib-res

for t in iperf3 jq; do
  command -v $t >/dev/null || { echo "run-ipoib.sh: $t is missing (apt-get install $t)" >&2; exit 1; }
done
[ "$(id -u)" -eq 0 ] || { echo "run-ipoib.sh: run as root (network namespaces)" >&2; exit 1; }

cargo build --release --quiet -p ipoib-eval
commit=$(git describe --always --dirty --abbrev=12)
ie=target/release/ipoib-eval
mkdir -p "$out"
# Only what this script writes; the seed004 sweep in the same directory stays.
rm -f "$out"/iperf3-*.json "$out"/ipoib-*.json "$out"/ipoib.csv "$out"/SIDEBYSIDE.md "$out"/machine.txt

rmem=$(sysctl -n net.core.rmem_max); wmem=$(sysctl -n net.core.wmem_max)
pids=()
tmp=$(mktemp -d)
cleanup() {
  # Subshells inherit this trap; only the script itself cleans up, and
  # every step runs even if one fails.
  [ "$BASHPID" = "$$" ] || return 0
  set +e
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  sysctl -qw net.core.rmem_max="$rmem" net.core.wmem_max="$wmem"
  $ie testbed down --name $name
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
sysctl -qw net.core.rmem_max=$((64 << 20)) net.core.wmem_max=$((64 << 20))

$ie testbed up --name $name --queues 4 --mtu 1500
A=$name-a; B=$name-b; server=10.77.1.2
ip netns exec $B iperf3 -s -p 5201 > "$tmp/iperf3.log" 2>&1 & pids+=($!)
# Wait for the servers by their own word, not a sleep: ipoib-eval says it
# listens; iperf3 answers a short test.
mkfifo "$tmp/srv"
$ie server --netns $B -q -p 5301 > "$tmp/srv" & pids+=($!)
read -r line < "$tmp/srv" && echo "$line"
ready=no
for _ in $(seq 50); do
  if ip netns exec $A iperf3 -c $server -p 5201 -n 1K -J > /dev/null 2>&1; then ready=yes; break; fi
  sleep 0.1   # polling iperf3's readiness: it says nothing when it listens
done
[ $ready = yes ] || { echo "run-ipoib.sh: iperf3 server did not answer: $(cat "$tmp/iperf3.log")" >&2; exit 1; }

{
  machine_lines
  echo "iperf3: $(iperf3 --version | head -1)"
  echo "ipoib-eval: $($ie --version) at $commit"
  echo "testbed: 2 namespaces, veth va<->vb, 4 TX/RX queues, MTU 1500, IPv6 off, qdisc default"
  echo "reps: $reps x ${secs}s, tools alternating; UDP with -w 32M on both tools"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
} > "$out/machine.txt"
cat "$out/machine.txt"

# case name | iperf3 args | ipoib-eval args (one per send path, ';'-separated)
cases=(
  "tcp-P1|-P 1|-P 1"
  "tcp-P4|-P 4|-P 4"
  "udp1472|-u -b 0 -l 1472 -w 32M|-u -b 0 -l 1472 -w 32M --send send --recv recv;-u -b 0 -l 1472 -w 32M --send mmsg:64 --recv mmsg:64;-u -b 0 -l 1472 -w 32M --send send --recv gro;-u -b 0 -l 1472 -w 32M --send gso:44 --recv recv;-u -b 0 -l 1472 -w 32M --send gso:44 --recv gro;-u -b 0 -l 1472 -w 32M --send gso:44:8 --recv gro;-u -b 24G -l 1472 -w 32M --send gso:44:8 --recv gro;-u -b 0 -l 1472 -w 32M --send zerocopy --recv recv"
  "udp64|-u -b 0 -l 64 -w 32M|-u -b 0 -l 64 -w 32M --send send --recv recv;-u -b 0 -l 64 -w 32M --send mmsg:64 --recv mmsg:64;-u -b 0 -l 64 -w 32M -P 2 --send mmsg:64 --recv mmsg:64;-u -b 0 -l 64 -w 32M --send gso:64:8 --recv gro"
)

slug() { echo "$1" | sed 's/--send //; s/--recv //; s/-w 32M//; s/-u -b 0 //; s/-u -b \([0-9A-Z]*\) /paced_\1 /; s/-l [0-9]* //; s/  */ /g; s/^ //; s/ $//; s/[ :]/_/g'; }

for r in $(seq "$reps"); do
  for c in "${cases[@]}"; do
    IFS='|' read -r cname iargs oargs <<< "$c"
    echo "== rep $r $cname: iperf3 $iargs"
    # shellcheck disable=SC2086
    ip netns exec $A iperf3 -c $server -p 5201 -t "$secs" $iargs -J > "$out/iperf3-$cname-r$r.json"
    IFS=';' read -ra paths <<< "$oargs"
    for p in "${paths[@]}"; do
      s=$(slug "$p")
      echo "== rep $r $cname: ipoib-eval $p"
      # shellcheck disable=SC2086
      $ie client $server --netns $A -t "$secs" -i 0 $p --json-file "$out/ipoib-$cname-$s-r$r.json" \
        --csv "$out/ipoib.csv" > /dev/null
    done
  done
done

# The table: medians over repetitions; ratios against iperf3 in the same run.
med='sort | if length == 0 then null elif length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end'
{
  echo "# ipoib-eval against $(iperf3 --version | head -1 | cut -d' ' -f1-2), same testbed, same run"
  echo
  echo "Commit $commit; $(uname -r); $(nproc) CPUs. Command: \`bash results/run-ipoib.sh\` (REPS=$reps, SECS=$secs)."
  echo "Medians of $reps runs of ${secs} s each, tools alternating. Received messages/s as defined in docs/ipoib-eval.md"
  echo "(iperf3: (packets - lost) / seconds; TCP: received Gbit/s). Loss = 1 - received/sent, medians."
  echo
  echo "| case | tool and path | received | ratio to iperf3 | loss % | cycles/msg | msgs per wire packet |"
  echo "|---|---|---:|---:|---:|---:|---:|"
  for c in "${cases[@]}"; do
    IFS='|' read -r cname iargs oargs <<< "$c"
    if [[ $cname == tcp* ]]; then
      base=$(jq -s "[.[].end.sum_received.bits_per_second / 1e9] | $med" "$out"/iperf3-$cname-r*.json)
      unit="Gbit/s"
      printf '| %s | iperf3 %s | %.2f %s | 1.00 | - | - | - |\n' "$cname" "$iargs" "$base" "$unit"
    else
      base=$(jq -s "[.[].end.sum | (.packets - .lost_packets) / .seconds] | $med" "$out"/iperf3-$cname-r*.json)
      iloss=$(jq -s "[.[].end.sum.lost_percent] | $med" "$out"/iperf3-$cname-r*.json)
      unit="msgs/s"
      printf '| %s | iperf3 %s | %.0f %s | 1.00 | %.3f | - | - |\n' "$cname" "$iargs" "$base" "$unit" "$iloss"
    fi
    IFS=';' read -ra paths <<< "$oargs"
    for p in "${paths[@]}"; do
      s=$(slug "$p")
      files=("$out"/ipoib-$cname-$s-r*.json)
      if [[ $cname == tcp* ]]; then
        v=$(jq -s "[.[].totals[0].gbit_s] | $med" "${files[@]}")
      else
        v=$(jq -s "[.[].totals[0].msgs_per_s] | $med" "${files[@]}")
      fi
      loss=$(jq -s "[.[].totals[0].loss * 100] | $med" "${files[@]}")
      cyc=$(jq -s "[.[].cycles.per_msg] | $med" "${files[@]}")
      mpw=$(jq -s "[.[].msgs_per_wire_packet] | $med" "${files[@]}")
      printf '| %s | ipoib-eval %s | %s %s | %.2f | %.3f | %.0f | %.2f |\n' "$cname" "$s" \
        "$(if [[ $cname == tcp* ]]; then printf '%.2f' "$v"; else printf '%.0f' "$v"; fi)" "$unit" \
        "$(jq -n "$v / $base")" "$loss" "$cyc" "$mpw"
    done
  done
} > "$out/SIDEBYSIDE.md"
cat "$out/SIDEBYSIDE.md"
