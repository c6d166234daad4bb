//! Building C programs against the library with `mpicc` and running them
//! under mpirun. mpicc and mpirun are installed by .ci/install-deps; the
//! tests fail, not skip, without them.
#![allow(dead_code)]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Where cargo put this crate's shared and static libraries: beside this
/// test (`target/debug/deps`, where `cargo test` builds them), or one up
/// (`target/debug`, where `cargo build` copies them).
pub fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap().to_path_buf();
    let has = |d: &Path| d.join("libfabkit_mpi_dht.so").exists();
    match deps.parent() {
        Some(up) if !has(&deps) && has(up) => up.to_path_buf(),
        _ => deps,
    }
}

/// This crate's directory.
pub fn here() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// What a static link of the library needs besides it: libfabric (the
/// DHT's libfabric transport), and in a workspace build libibverbs and
/// librdmacm too (features unify across the packages built).
pub const STATIC_LIBS: [&str; 6] = [
    "-lfabric",
    "-libverbs",
    "-lrdmacm",
    "-lpthread",
    "-ldl",
    "-lm",
];

/// Runs `c` (a compiler), failing with its output if it fails.
pub fn compile(mut c: Command) {
    let o = c
        .output()
        .expect("running mpicc (is libopenmpi-dev installed?)");
    assert!(
        o.status.success(),
        "{c:?} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Builds `examples/<name>.c` into `out`, linked against the shared
/// library or the static one.
pub fn build(name: &str, out: &Path, shared: bool) {
    let mut c = Command::new("mpicc");
    c.arg(here().join(format!("examples/{name}.c")))
        .args(["-Wall", "-Werror", "-I"])
        .arg(here().join("include"))
        .arg("-o")
        .arg(out);
    if shared {
        c.arg("-L").arg(lib_dir()).arg("-lfabkit_mpi_dht");
    } else {
        c.arg(lib_dir().join("libfabkit_mpi_dht.a"))
            .args(STATIC_LIBS);
    }
    compile(c);
}

/// Kills mpirun's process group however the test ends.
struct Group(i32);
impl Drop for Group {
    fn drop(&mut self) {
        // SAFETY: a plain syscall on the process group this test made.
        unsafe { libc::killpg(self.0, libc::SIGKILL) };
    }
}

/// Runs `exe args` as `ranks` ranks with `env` added; returns whether it
/// succeeded and its standard output.
pub fn run(exe: &Path, ranks: usize, args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("out");
    let mut cmd = Command::new("mpirun");
    cmd.args(["--oversubscribe", "--mca", "osc", "sm,pt2pt", "-n"])
        .arg(ranks.to_string());
    for (k, _) in env {
        cmd.args(["-x", k]);
    }
    let mut child = cmd
        .arg(exe)
        .args(args)
        .env("LD_LIBRARY_PATH", lib_dir())
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .envs(env.iter().copied())
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(Stdio::inherit())
        .process_group(0)
        .spawn()
        .expect("running mpirun (is openmpi-bin installed?)");
    let _group = Group(child.id() as i32);
    let limit = fabkit_core::time::scaled(Duration::from_secs(120));
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() >= limit {
            panic!(
                "mpirun still running after {limit:?}; its output:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        // Polling a child's exit status, not synchronising on time.
        std::thread::sleep(Duration::from_millis(50));
    };
    (status.success(), std::fs::read_to_string(&log).unwrap())
}

/// Asserts that the run succeeded and every rank printed a RESULT line
/// containing `want`.
pub fn every_rank_says(how: &str, ranks: usize, (ok, out): (bool, String), want: &str) {
    assert!(ok, "{how}: mpirun failed:\n{out}");
    for r in 0..ranks {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("RESULT rank {r}: ")))
            .unwrap_or_else(|| panic!("{how}: no result from rank {r}:\n{out}"));
        assert!(line.contains(want), "{how}: {line}");
    }
}
