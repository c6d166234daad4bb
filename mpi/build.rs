//! Compiles the small C shim that exports MPI constants rsmpi lacks
//! (MPI_REPLACE, MPI_NO_OP, lock types).

fn main() {
    println!("cargo:rerun-if-changed=src/mpi_shim.c");
    let mut build = cc::Build::new();
    build.file("src/mpi_shim.c");
    match pkg_config::Config::new()
        .cargo_metadata(false)
        .probe("ompi-c")
    {
        Ok(lib) => {
            for inc in lib.include_paths {
                build.include(inc);
            }
        }
        Err(_) => {
            // Not Open MPI's pkg-config: ask the compiler wrapper (MPICH: -show).
            let out = ["-showme:compile", "-show"].iter().find_map(|flag| {
                std::process::Command::new("mpicc")
                    .arg(flag)
                    .output()
                    .ok()
                    .filter(|o| o.status.success())
            });
            let out = out.expect(
                "cannot find mpi.h: install an MPI (Debian: apt-get install libopenmpi-dev), \
                 or build the crates that use this one without their `mpi` feature",
            );
            for tok in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                if let Some(dir) = tok.strip_prefix("-I") {
                    build.include(dir);
                }
            }
        }
    }
    build.compile("fabkit_mpi_shim");
}
