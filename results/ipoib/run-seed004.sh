#!/usr/bin/env bash
# Regenerates results/ipoib/seed004.csv, its charts (seed004/) and
# seed004-machine.txt from scratch: the whole sweep of seed004.toml (288
# runs, 22 minutes on 2 cores), with the release binary of this
# commit. Nothing in the CSV is edited afterwards; to redo a run, rerun
# this script. Keep the machine otherwise idle while it runs: a compile
# beside it moves the figures.
#
#   bash results/ipoib/run-seed004.sh
#
# Needs root (namespaces) and iperf3. The sweep sets up and removes its own
# testbeds, also on Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/../.."
. results/machine.sh
out=results/ipoib
command -v iperf3 >/dev/null || { echo "run-seed004.sh: iperf3 is missing (apt-get install iperf3)" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "run-seed004.sh: run as root (network namespaces)" >&2; exit 1; }
[ -z "$(git status --porcelain -- ipoib-eval netns Cargo.lock)" ] \
  || { echo "run-seed004.sh: ipoib-eval has uncommitted changes; commit them so the CSV's commit column names the code that ran" >&2; exit 1; }

cargo build --release --quiet -p ipoib-eval
ie=target/release/ipoib-eval
commit=$(git rev-parse HEAD)
{
  machine_lines
  echo "iperf3: $(iperf3 --version | head -1)"
  echo "ipoib-eval: $($ie --version) at $commit"
  echo "command: ipoib-eval sweep $out/seed004.toml -o $out/seed004.csv"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
} > "$out/seed004-machine.txt"
cat "$out/seed004-machine.txt"

rm -rf "$out/seed004.csv" "$out/seed004"
"$ie" sweep "$out/seed004.toml" -o "$out/seed004.csv"
echo "finished: $(date -u +%Y-%m-%dT%H:%M:%SZ)" >> "$out/seed004-machine.txt"
