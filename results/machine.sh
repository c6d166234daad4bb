# Sourced by the scripts under results/: `machine_lines` prints what every
# results file says of the machine it was measured on (host, kernel, CPUs,
# memory), one `name: value` line each.
machine_lines() {
  echo "host: $(hostname)"
  echo "kernel: $(uname -srm)"
  echo "cpus: $(nproc) x $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
  echo "memory: $(free -g | awk '/Mem:/ {print $2}') GiB"
}
