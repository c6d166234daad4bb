#!/usr/bin/env bash
# Installs fabkit's MPI-DHT library for C, C++ and Fortran programs: the
# shared and static library, <LUCX/MPI/DHT.h>, pkg-config files and a CMake
# package, under a prefix of your choice (no root needed):
#
#   capi/install.sh --prefix "$HOME/.local"
#   export PKG_CONFIG_PATH=$HOME/.local/lib/pkgconfig:$PKG_CONFIG_PATH
#   mpicc prog.c $(pkg-config --cflags --libs fabkit-dht)         # shared
#   mpicc prog.c $(pkg-config --cflags --libs fabkit-dht-static)  # static
#
# With CMake (cmake -DCMAKE_PREFIX_PATH=$HOME/.local), in place of the
# MPI-DHT's add_subdirectory:
#
#   find_package(fabkit-dht CONFIG REQUIRED)
#   target_link_libraries(prog PRIVATE MPIDHT::fine)  # or nolock, coarse, accumulate
#
# fabkit-dht::fabkit-dht and fabkit-dht::static are the libraries alone
# (the variant from FABKIT_DHT_VARIANT, else lock-free).
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
# The CMake package: the libraries as imported targets with MPI as an
# interface dependency, and the MPI-DHT's four target names, each defining
# LUCX_MPI_IMPL and the variant its build of the MPI-DHT chooses (the
# header's DHT_create takes it; FABKIT_DHT_VARIANT still overrides).
# The shared library has no soname: it is linked by -L and -l, with the
# folder in the build tree's rpath, so a program runs from where it was
# built without LD_LIBRARY_PATH.
cmakedir="$prefix/lib/cmake/fabkit-dht"
mkdir -p "$cmakedir"
static_libs=""
for l in $needed-lpthread -ldl -lm -lrt -lutil -lgcc_s; do static_libs="$static_libs;${l#-l}"; done
cat >"$cmakedir/fabkit-dht-config.cmake" <<CMAKE
# fabkit's distributed hash table with the MPI-DHT's API (<LUCX/MPI/DHT.h>),
# written by capi/install.sh. Targets:
#   fabkit-dht::fabkit-dht  the shared library (MPI::MPI_C comes with it)
#   fabkit-dht::static      the static library
#   MPIDHT::nolock          lock-free with checksums (fabkit's lockfree)
#   MPIDHT::coarse          a window lock per access (coarse)
#   MPIDHT::fine            a lock per bucket (fine)
#   MPIDHT::accumulate      fine: the variant that serves DHT_write_accumulate
# The MPIDHT:: targets link the shared library and define LUCX_MPI_IMPL and
# FABKIT_DHT_LINK_VARIANT, which <LUCX/MPI/DHT.h> turns into DHT_create's
# variant unless FABKIT_DHT_VARIANT is set when the program runs; one per
# program. MPI comes with the libraries, for C or, in a C++-only project,
# C++; the shared library's folder is in the rpath, so a program runs
# where it was built and where it was installed.
include(CMakeFindDependencyMacro)
# MPI for the project's language: C, else C++ (Open MPI's and MPICH's C++
# bindings are kept out: the library is C's). No policy is set here, so
# find_dependency may return() from this file when MPI is missing.
get_property(_fabkit_dht_languages GLOBAL PROPERTY ENABLED_LANGUAGES)
list(FIND _fabkit_dht_languages C _fabkit_dht_c)
list(FIND _fabkit_dht_languages CXX _fabkit_dht_cxx)
if(NOT _fabkit_dht_c EQUAL -1)
  find_dependency(MPI COMPONENTS C)
  set(_fabkit_dht_mpi MPI::MPI_C)
elseif(NOT _fabkit_dht_cxx EQUAL -1)
  find_dependency(MPI COMPONENTS CXX)
  set(_fabkit_dht_mpi MPI::MPI_CXX)
else()
  set(\${CMAKE_FIND_PACKAGE_NAME}_NOT_FOUND_MESSAGE
      "fabkit-dht needs C or CXX enabled (project(... C) or CXX) before find_package")
  set(\${CMAKE_FIND_PACKAGE_NAME}_FOUND FALSE)
  return()
endif()
get_filename_component(_fabkit_dht_prefix "\${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET fabkit-dht::fabkit-dht)
  add_library(fabkit-dht::fabkit-dht SHARED IMPORTED)
  set_target_properties(fabkit-dht::fabkit-dht PROPERTIES
    IMPORTED_LOCATION "\${_fabkit_dht_prefix}/lib/libfabkit_mpi_dht.so"
    IMPORTED_NO_SONAME TRUE
    INTERFACE_INCLUDE_DIRECTORIES "\${_fabkit_dht_prefix}/include"
    INTERFACE_COMPILE_DEFINITIONS "OMPI_SKIP_MPICXX;MPICH_SKIP_MPICXX"
    INTERFACE_LINK_LIBRARIES "\${_fabkit_dht_mpi}"
    INTERFACE_LINK_OPTIONS "LINKER:-rpath,\${_fabkit_dht_prefix}/lib")
  add_library(fabkit-dht::static STATIC IMPORTED)
  set_target_properties(fabkit-dht::static PROPERTIES
    IMPORTED_LOCATION "\${_fabkit_dht_prefix}/lib/libfabkit_mpi_dht.a"
    INTERFACE_INCLUDE_DIRECTORIES "\${_fabkit_dht_prefix}/include"
    INTERFACE_COMPILE_DEFINITIONS "OMPI_SKIP_MPICXX;MPICH_SKIP_MPICXX"
    INTERFACE_LINK_LIBRARIES "\${_fabkit_dht_mpi}${static_libs}")
  foreach(_fabkit_dht_pair nolock:lockfree coarse:coarse fine:fine accumulate:fine)
    string(REPLACE ":" ";" _fabkit_dht_pair "\${_fabkit_dht_pair}")
    list(GET _fabkit_dht_pair 0 _fabkit_dht_name)
    list(GET _fabkit_dht_pair 1 _fabkit_dht_variant)
    add_library(MPIDHT::\${_fabkit_dht_name} INTERFACE IMPORTED)
    # Two of different variants in one program: CMake stops.
    set_target_properties(MPIDHT::\${_fabkit_dht_name} PROPERTIES
      INTERFACE_LINK_LIBRARIES fabkit-dht::fabkit-dht
      INTERFACE_COMPILE_DEFINITIONS "LUCX_MPI_IMPL;FABKIT_DHT_LINK_VARIANT=\"\${_fabkit_dht_variant}\""
      INTERFACE_FABKIT_DHT_VARIANT "\${_fabkit_dht_variant}"
      COMPATIBLE_INTERFACE_STRING FABKIT_DHT_VARIANT)
  endforeach()
endif()
unset(_fabkit_dht_prefix)
unset(_fabkit_dht_mpi)
unset(_fabkit_dht_languages)
unset(_fabkit_dht_c)
unset(_fabkit_dht_cxx)
CMAKE
cat >"$cmakedir/fabkit-dht-config-version.cmake" <<'CMAKE'
# fabkit-dht 0.1.0 meets a request for 0.1 or 0.1.0 (or none): before 1.0,
# minors make no promise to each other.
set(PACKAGE_VERSION 0.1.0)
set(PACKAGE_VERSION_COMPATIBLE FALSE)
if(NOT PACKAGE_FIND_VERSION OR (PACKAGE_FIND_VERSION_MAJOR EQUAL 0
   AND PACKAGE_FIND_VERSION_MINOR EQUAL 1
   AND PACKAGE_FIND_VERSION VERSION_LESS_EQUAL PACKAGE_VERSION))
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
endif()
if(PACKAGE_FIND_VERSION VERSION_EQUAL PACKAGE_VERSION)
  set(PACKAGE_VERSION_EXACT TRUE)
endif()
CMAKE
echo "installed under $prefix: lib/libfabkit_mpi_dht.{so,a}, include/LUCX/MPI/DHT.h, lib/pkgconfig/fabkit-dht{,-static}.pc, lib/cmake/fabkit-dht/"
echo "use: PKG_CONFIG_PATH=$prefix/lib/pkgconfig mpicc prog.c \$(pkg-config --cflags --libs fabkit-dht)"
echo "  or: cmake -DCMAKE_PREFIX_PATH=$prefix, with find_package(fabkit-dht CONFIG REQUIRED) and MPIDHT::fine (nolock, coarse, accumulate)"
