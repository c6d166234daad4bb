//! What every test of the `fabkit` binary starts from.
#![allow(dead_code)]

use std::process::{Command, Output};

/// The binary under test.
pub fn fabkit() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fabkit"))
}

/// `n` processes of the binary under Open MPI's mpirun (installed by
/// .ci/install-deps: tests that use it fail, not skip, without it).
/// --oversubscribe: more ranks than the 2 cores. The one-sided components
/// are named because Debian's default (osc rdma) crashes in
/// MPI_Compare_and_swap; `fabkit check` only bootstraps through MPI, but
/// the same line must work for the MPI benchmarks.
pub fn mpirun(n: usize) -> Command {
    let mut c = Command::new("mpirun");
    c.args(["--oversubscribe", "--mca", "osc", "sm,pt2pt", "-n"])
        .arg(n.to_string())
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .arg(env!("CARGO_BIN_EXE_fabkit"));
    c
}

/// Runs `cmd` to its end, showing its standard error in the test's output.
pub fn output(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("running fabkit");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    out
}
