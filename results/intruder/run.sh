#!/usr/bin/env bash
# Someone outside the job, on the same network: `fabkit intrude` from the
# testbed's outsider namespace (behind the gateway, on a link of its own:
# it reaches both hosts and sees none of their traffic) against a
# two-host job in the testbed's hosts (a: 10.77.1.1, b: 10.77.2.2).
#
# 1. throughput: per provider (sockets, tcp;ofi_rxm) and path (rma,
#    message), ROUNDS rounds of an undisturbed job and the same job while
#    the intruder scans and attacks it for as long as it runs, back to
#    back; the chunked table, 2000 keys, paper write, read back, then
#    reads only. Each job's JSON, the intruder's, and throughput.md with
#    the attacked/undisturbed ratio per round.
# 2. keys: the job holds its written table (`fabkit dht --hold`) while the
#    intruder tries every key of a range and random ones at each endpoint
#    (sockets, RMA path: 0..65535 and 4096 random; tcp;ofi_rxm closes the
#    connection on each bad key, so each try costs a new endpoint:
#    0..TCP_KEYS and 64 random), then the job reads every key back.
#
#   bash results/intruder/run.sh        (ROUNDS=3 TCP_KEYS=1024 by default)
#
# Refuses uncommitted changes; runs copies of the release binaries made at
# the start; needs root (the testbed), and leaves it down however it ends.
set -uo pipefail
cd "$(dirname "$0")/../.."
. results/machine.sh
out=${OUT:-results/intruder}
rounds=${ROUNDS:-3}
tcp_keys=${TCP_KEYS:-1024}
git diff --quiet HEAD -- ||
  { echo "run.sh: the tree has uncommitted changes; commit them so the results name the commit that ran" >&2; exit 1; }
cargo build --release --quiet -p fabkit-bench -p ipoib-eval || exit 1
bin=$(mktemp -d /tmp/fabkit-intruder-bin.XXXXXX)
cp target/release/fabkit target/release/ipoib-eval "$bin"/
fk=$bin/fabkit
tb=intr
trap '"$bin/ipoib-eval" testbed down --name $tb >/dev/null 2>&1; rm -rf "$bin"' EXIT
"$bin/ipoib-eval" testbed up --name $tb --gateway --outsider >/dev/null || exit 1
mkdir -p "$out"
{
  machine_lines
  echo "libfabric: $(fi_info --version | sed -n 's/^libfabric: //p')"
  echo "fabkit: $($fk --version) at $(git rev-parse HEAD)"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "rounds: $rounds; tcp keys 0..$tcp_keys"
} > "$out/machine.txt"

hosts=$tb-a,$tb-b
job() { # PROVIDER PATH JSON [DHT-ARGS...]
  local p=$1 path=$2 json=$3
  shift 3
  "$fk" launch --netns $hosts --timeout 600 -- "$fk" dht -v chunked -p "$p" -d 10.77.0.0/16 \
    --path "$path" -k 2000 -w paper --read-pct 100 --no-redis --hot-rounds 0 \
    --latency-ops 0 --json "$json" "$@"
}
intrude() { # PROVIDER WANT JSON [INTRUDE-ARGS...]
  local p=$1 want=$2 json=$3
  shift 3
  ip netns exec $tb-x "$fk" intrude -p "$p" -d 10.77.3.0/24 --scan 10.77.1.1,10.77.2.2 \
    --ports 32768-60999 --want "$want" --json "$json" "$@"
}

echo "# Throughput under attack ($(git rev-parse --short HEAD))" > "$out/throughput.md"
echo >> "$out/throughput.md"
echo "| provider | path | round | undisturbed reads/s | attacked reads/s | ratio | intruder tries | refused by the job's services |" >> "$out/throughput.md"
echo "|---|---|---:|---:|---:|---:|---:|---:|" >> "$out/throughput.md"
for p in sockets 'tcp;ofi_rxm'; do
  for path in rma message; do
    s=$(echo "$p" | tr -c 'a-z\n' '-')$path
    want=2; [ $path = message ] && want=4
    # About 25 s of reads each, on this machine.
    case "$p $path" in
    "sockets rma") ops=300000 ;;
    "sockets message") ops=2500000 ;;
    "tcp;ofi_rxm rma") ops=1000000 ;;
    *) ops=25000000 ;;
    esac
    for r in $(seq 1 "$rounds"); do
      calm=$out/$s-calm-$r.json hit=$out/$s-attacked-$r.json att=$out/$s-intruder-$r.json
      job "$p" $path "$calm" --ops $ops > "$out/$s-calm-$r.txt" 2>&1
      job "$p" $path "$hit" --ops $ops > "$out/$s-attacked-$r.txt" 2>&1 &
      jp=$!
      # Attack until the job ends: rounds of scan and attack, at least one.
      intrude "$p" $want "$att" --keys 256 --random-keys 64 --duration 1 > "$out/$s-intruder-$r.txt" 2>&1
      while kill -0 $jp 2>/dev/null; do
        intrude "$p" $want "$att.more" --keys 256 --random-keys 64 --wait 5 >> "$out/$s-intruder-$r.txt" 2>&1 || break
      done
      wait $jp
      python3 - "$calm" "$hit" "$att" "$p" $path $r >> "$out/throughput.md" <<'EOF'
import json, sys
calm, hit, att, p, path, r = sys.argv[1:]
rate = lambda f: next(x["ops_per_sec"] for x in json.load(open(f))["runs"] if x["phase"] == "mixed")
refused = sum(x["counters"].get("refused", 0) for x in json.load(open(hit))["runs"])
a = json.load(open(att))
tries = sum(v["tried"] for t in a["targets"] for v in t["rma"].values())
c, h = rate(calm), rate(hit)
print(f"| {p} | {path} | {r} | {c:,.0f} | {h:,.0f} | {h / c:.2f} | {tries} | {refused} |")
EOF
    done
  done
done

# Every key of a range, at a held table.
for spec in "sockets rma 65536 4096" "tcp;ofi_rxm rma $tcp_keys 64" "sockets message 4096 256" \
  "tcp;ofi_rxm message 64 16"; do
  set -- $spec
  p=$1 path=$2 keys=$3 random=$4
  s=$(echo "$p" | tr -c 'a-z\n' '-')$path-keys
  want=2; [ $path = message ] && want=4
  go=$(mktemp -u /tmp/fabkit-intruder-go.XXXXXX)
  job "$p" $path "$out/$s-job.json" --ops 200000 --hold "$go" > "$out/$s-job.txt" 2>&1 &
  jp=$!
  start=$(date +%s)
  intrude "$p" $want "$out/$s-intruder.json" --keys "$keys" --random-keys "$random" > "$out/$s-intruder.txt" 2>&1
  echo "exit $? after $(( $(date +%s) - start )) s" >> "$out/$s-intruder.txt"
  touch "$go"
  wait $jp
  rm -f "$go"
done
