//! A C program written only against the public MPI-DHT's API
//! (`examples/mpidht_api.c`: its own hash, 4-byte keys and values, 50
//! buckets per rank), built with `mpicc` against fabkit's header and
//! library, shared and static, and run under mpirun on 2 and 4 ranks.
//! mpicc and mpirun are installed by .ci/install-deps; these tests fail,
//! not skip, without them.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Where cargo put this crate's shared and static libraries: beside this
/// test (`target/debug/deps`, where `cargo test` builds them), or one up
/// (`target/debug`, where `cargo build` copies them).
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap().to_path_buf();
    let has = |d: &Path| d.join("libfabkit_mpi_dht.so").exists();
    match deps.parent() {
        Some(up) if !has(&deps) && has(up) => up.to_path_buf(),
        _ => deps,
    }
}

/// Builds the example into `out`, linked against the shared library or the
/// static one.
fn build(out: &Path, shared: bool) {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut c = Command::new("mpicc");
    c.arg(here.join("examples/mpidht_api.c"))
        .arg("-I")
        .arg(here.join("include"))
        .arg("-o")
        .arg(out);
    if shared {
        c.arg("-L").arg(lib_dir()).arg("-lfabkit_mpi_dht");
    } else {
        // What a static Rust library needs from the system; in a workspace
        // build the DHT also has its libfabric transport, and so libfabric
        // and libibverbs (features unify across the packages built).
        c.arg(lib_dir().join("libfabkit_mpi_dht.a")).args([
            "-lfabric",
            "-libverbs",
            "-lrdmacm",
            "-lpthread",
            "-ldl",
            "-lm",
        ]);
    }
    let o = c
        .output()
        .expect("running mpicc (is libopenmpi-dev installed?)");
    assert!(
        o.status.success(),
        "mpicc failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Kills mpirun's process group however the test ends.
struct Group(i32);
impl Drop for Group {
    fn drop(&mut self) {
        // SAFETY: a plain syscall on the process group this test made.
        unsafe { libc::killpg(self.0, libc::SIGKILL) };
    }
}

/// Runs `exe` as `ranks` ranks; returns its exit status and output.
fn run(exe: &Path, ranks: usize) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("out");
    let mut child = Command::new("mpirun")
        .args(["--oversubscribe", "--mca", "osc", "sm,pt2pt", "-n"])
        .arg(ranks.to_string())
        .arg(exe)
        .arg(dir.path())
        .env("LD_LIBRARY_PATH", lib_dir())
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
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
        assert!(
            start.elapsed() < limit,
            "mpirun still running after {limit:?}"
        );
        // Polling a child's exit status, not synchronising on time.
        std::thread::sleep(Duration::from_millis(50));
    };
    (status.success(), std::fs::read_to_string(&log).unwrap())
}

#[test]
fn a_program_written_for_the_mpi_dht_relinks_and_runs_on_2_and_4_ranks() {
    let dir = tempfile::tempdir().unwrap();
    for shared in [true, false] {
        let exe = dir.path().join(if shared { "shared" } else { "static" });
        build(&exe, shared);
        for ranks in [2, 4] {
            let (ok, out) = run(&exe, ranks);
            let how = format!(
                "{} on {ranks} ranks",
                if shared { "shared" } else { "static" }
            );
            assert!(ok, "{how}: mpirun failed:\n{out}");
            for r in 0..ranks {
                let line = out
                    .lines()
                    .find(|l| l.starts_with(&format!("RESULT rank {r}: ")))
                    .unwrap_or_else(|| panic!("{how}: no result from rank {r}:\n{out}"));
                assert!(line.contains(": ok hits "), "{how}: {line}");
            }
        }
    }
}
