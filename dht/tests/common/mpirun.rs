//! Tests of this crate run under `mpirun`: a parent test starts ranks of
//! its own test binary, each running an ignored test.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Kills a process group (mpirun and its ranks) when dropped.
struct Group(u32);

impl Drop for Group {
    fn drop(&mut self) {
        // A finished group is gone already: nothing to report.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0)])
            .stderr(Stdio::null())
            .status();
    }
}

/// Runs test `child` of the calling test binary as `n` ranks under mpirun
/// (osc sm,pt2pt), with `dir` in the children's environment as `env`;
/// returns mpirun's status and output. Bounded: a rank that hangs fails
/// the test, and mpirun's whole process group is killed whatever happens.
pub fn run(
    child: &str,
    n: usize,
    env: &str,
    dir: &std::path::Path,
) -> (std::process::ExitStatus, String) {
    let log = dir.join(format!("{child}.out"));
    let mut child = Command::new("mpirun")
        .args([
            "--oversubscribe",
            "--mca",
            "osc",
            "sm,pt2pt",
            "-n",
            &n.to_string(),
        ])
        .args(["-x", env])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            child,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(env, dir)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .process_group(0)
        .spawn()
        .expect("running mpirun (is openmpi-bin installed?)");
    // However the test ends, mpirun and its ranks (its process group) go:
    // SIGKILL to mpirun alone would orphan ranks waiting in a collective.
    let _group = Group(child.id());
    // Bounded: a rank left waiting in a collective would hang the job.
    let limit = fabkit_core::time::scaled(Duration::from_secs(120));
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "mpirun still running after {limit:?}: a rank hangs\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        // Polling a child's exit status, not synchronising on time.
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = std::fs::read_to_string(&log).unwrap();
    eprintln!("{out}");
    (status, out)
}
