//! `capi/install.sh` puts the library, the header, pkg-config files and a
//! CMake package under a prefix, and programs build against it with
//! nothing but pkg-config (the MPI-DHT program shared and static, and the
//! Fortran one, ISO_C_BINDING, shared) or CMake (`capi/examples/cmake`,
//! through the MPI-DHT's target names); each then runs under mpirun. The libraries
//! installed are the ones `cargo test` built (`--lib-dir`): a cargo build
//! inside a cargo test would wait for the build directory's lock.

mod common;

use std::path::Path;
use std::process::Command;

use common::{compile, every_rank_says, here, lib_dir, run};

/// `pkg-config --cflags --libs pc` against the prefix's pkg-config files.
fn flags(prefix: &Path, pc: &str) -> Vec<String> {
    let o = Command::new("pkg-config")
        .args(["--cflags", "--libs", pc])
        .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
        .output()
        .expect("running pkg-config (installed by .ci/install-deps)");
    assert!(
        o.status.success(),
        "pkg-config {pc}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout)
        .unwrap()
        .split_whitespace()
        .map(String::from)
        .collect()
}

/// Installs into `dir/prefix` what cargo test built; the prefix.
fn install(dir: &Path) -> std::path::PathBuf {
    let prefix = dir.join("prefix");
    let o = Command::new("bash")
        .arg(here().join("install.sh"))
        .arg("--prefix")
        .arg(&prefix)
        .arg("--lib-dir")
        .arg(lib_dir())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for f in [
        "include/LUCX/MPI/DHT.h",
        "include/LUCX/DHT.h",
        "lib/libfabkit_mpi_dht.so",
        "lib/libfabkit_mpi_dht.a",
        "lib/cmake/fabkit-dht/fabkit-dht-config.cmake",
        "lib/cmake/fabkit-dht/fabkit-dht-config-version.cmake",
    ] {
        assert!(prefix.join(f).exists(), "{f} not installed");
    }
    prefix
}

#[test]
fn installed_with_pkg_config_files_programs_build_against_it_alone() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = install(dir.path());
    let dump = dir.path().to_str().unwrap();
    for (pc, compiler, src, want) in [
        ("fabkit-dht", "mpicc", "mpidht_api.c", ": ok hits 40 of 40"),
        (
            "fabkit-dht-static",
            "mpicc",
            "mpidht_api.c",
            ": ok hits 40 of 40",
        ),
        ("fabkit-dht", "mpifort", "mpidht_api.f90", ": ok hits 40"),
    ] {
        let exe = dir.path().join(format!("{pc}-{src}"));
        let mut c = Command::new(compiler);
        if compiler == "mpifort" {
            // The module file gfortran writes goes to the temporary
            // directory, not the crate's.
            c.arg("-J").arg(dir.path());
        }
        c.arg(here().join("examples").join(src))
            .args(["-Wall", "-Werror", "-o"])
            .arg(&exe)
            .args(flags(&prefix, pc));
        compile(c);
        // The shared library is found through the rpath pkg-config gave,
        // not LD_LIBRARY_PATH (run sets it to cargo's directory, which
        // holds the same library: unset it here).
        let out = run(&exe, 2, &[dump], &[("LD_LIBRARY_PATH", "")]);
        every_rank_says(&format!("{compiler} {src} with {pc}"), 2, out, want);
    }
}

/// Runs `cmake` with `args`, failing with its output if it fails.
fn cmake(args: &[&std::ffi::OsStr]) {
    let o = Command::new("cmake")
        .args(args)
        .output()
        .expect("running cmake (installed by .ci/install-deps)");
    assert!(
        o.status.success(),
        "cmake {args:?}:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Replacing the MPI-DHT's `add_subdirectory` with `find_package` is the
/// whole switch: a CMake project links `MPIDHT::nolock` and
/// `MPIDHT::coarse` from C and `MPIDHT::fine` from C++ (MPI's C++ bindings
/// kept out), each program gets the variant its target names
/// without FABKIT_DHT_VARIANT (and that variable still overrides), and it
/// runs from its build folder without LD_LIBRARY_PATH.
#[test]
fn a_cmake_project_links_the_mpidht_target_names_and_each_gets_its_variant() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = install(dir.path());
    let build = dir.path().join("build");
    let mut define = std::ffi::OsString::from("-DCMAKE_PREFIX_PATH=");
    define.push(&prefix);
    cmake(&[
        "-S".as_ref(),
        here().join("examples/cmake").as_os_str(),
        "-B".as_ref(),
        build.as_os_str(),
        &define,
        "-DCMAKE_C_FLAGS=-Wall -Werror".as_ref(),
        "-DCMAKE_CXX_FLAGS=-Wall -Wextra -Werror".as_ref(),
    ]);
    cmake(&["--build".as_ref(), build.as_os_str()]);
    for (target, env, want) in [
        ("with_nolock", "", ": ok, lockfree over mpi"),
        ("with_coarse", "", ": ok, coarse over mpi"),
        ("with_fine_cxx", "", ": ok, fine over mpi"),
        ("with_nolock", "fine", ": ok, fine over mpi"),
    ] {
        let exe = build.join(target);
        let out = run(
            &exe,
            2,
            &[],
            &[("LD_LIBRARY_PATH", ""), ("FABKIT_DHT_VARIANT", env)],
        );
        every_rank_says(
            &format!("{target} with FABKIT_DHT_VARIANT={env:?}"),
            2,
            out,
            want,
        );
    }
}
