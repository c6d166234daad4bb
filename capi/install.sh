#!/usr/bin/env bash
# Installs fabkit's MPI-DHT library for C, C++ and Fortran programs: the
# shared and static library, <LUCX/MPI/DHT.h> and a pkg-config file, under
# a prefix of your choice (no root needed):
#
#   capi/install.sh --prefix "$HOME/.local"
#   export PKG_CONFIG_PATH=$HOME/.local/lib/pkgconfig:$PKG_CONFIG_PATH
#   mpicc prog.c $(pkg-config --cflags --libs fabkit-dht)         # shared
#   mpicc prog.c $(pkg-config --cflags --libs fabkit-dht-static)  # static
#
# Builds with cargo (release) unless --lib-dir names a directory that holds
# libfabkit_mpi_dht.so and .a already (the tests install what cargo test
# built).
set -euo pipefail
usage() {
  echo "usage: capi/install.sh --prefix DIR [--lib-dir DIR]" >&2
  exit 2
}
prefix="" libdir_in=""
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) [ $# -ge 2 ] || usage; prefix=$2; shift 2 ;;
    --lib-dir) [ $# -ge 2 ] || usage; libdir_in=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "capi/install.sh: unknown argument '$1'; give --prefix DIR" >&2; exit 2 ;;
  esac
done
[ -n "$prefix" ] || { echo "capi/install.sh: no --prefix: give the directory to install under (e.g. --prefix \$HOME/.local)" >&2; exit 2; }
case "$prefix" in *[[:space:]]*) echo "capi/install.sh: --prefix '$prefix' has a space, which pkg-config files cannot hold: give a prefix without one" >&2; exit 2 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
if [ -z "$libdir_in" ]; then
  (cd "$here/.." && cargo build --release -p fabkit-capi)
  libdir_in=$(cd "$here/.." && cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')/release
fi
for f in libfabkit_mpi_dht.so libfabkit_mpi_dht.a; do
  [ -f "$libdir_in/$f" ] || { echo "capi/install.sh: no $libdir_in/$f: build it (cargo build --release -p fabkit-capi) or fix --lib-dir" >&2; exit 1; }
done
command -v nm >/dev/null || { echo "capi/install.sh: nm not found: install binutils" >&2; exit 1; }
mkdir -p "$prefix/lib/pkgconfig" "$prefix/include/LUCX/MPI"
prefix=$(cd "$prefix" && pwd)
install -m 0755 "$libdir_in/libfabkit_mpi_dht.so" "$prefix/lib/"
install -m 0644 "$libdir_in/libfabkit_mpi_dht.a" "$prefix/lib/"
install -m 0644 "$here/include/LUCX/MPI/DHT.h" "$prefix/include/LUCX/MPI/"
install -m 0644 "$here/include/LUCX/DHT.h" "$prefix/include/LUCX/"
# What the static library needs besides MPI (mpicc adds it): the C
# libraries whose functions it calls (libfabric; libibverbs and librdmacm
# where fabkit was built with them), and what Rust's standard library uses.
undefined=$(nm -u "$prefix/lib/libfabkit_mpi_dht.a" 2>/dev/null | awk '{print $NF}' | sort -u)
needed=""
for pair in fi_:fabric ibv_:ibverbs rdma_:rdmacm; do
  if grep -q "^${pair%%:*}" <<<"$undefined"; then needed="$needed-l${pair#*:} "; fi
done
pc() { # name, description, libs
  cat >"$prefix/lib/pkgconfig/$1.pc" <<PC
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: $1
Description: $2
Version: 0.1.0
Cflags: -I\${includedir}
Libs: $3
PC
}
pc fabkit-dht "fabkit's distributed hash table with the MPI-DHT's API (<LUCX/MPI/DHT.h>)" \
  "-L\${libdir} -Wl,-rpath,\${libdir} -lfabkit_mpi_dht"
pc fabkit-dht-static "fabkit-dht, linked statically" \
  "\${libdir}/libfabkit_mpi_dht.a ${needed}-lpthread -ldl -lm -lrt -lutil -lgcc_s"
echo "installed under $prefix: lib/libfabkit_mpi_dht.{so,a}, include/LUCX/MPI/DHT.h, lib/pkgconfig/fabkit-dht{,-static}.pc"
echo "use: PKG_CONFIG_PATH=$prefix/lib/pkgconfig mpicc prog.c \$(pkg-config --cflags --libs fabkit-dht)"
