//! `fabkit clean` and what killed ranks leave in /dev/shm, run for real:
//! processes are killed with SIGKILL, so nothing of theirs can unlink its
//! own segments. Only names these tests made, or that contain a pid they
//! killed, are asserted on: other jobs on the machine may come and go.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fabkit_fabric::shm::{parse_name, segment_name, Creator, SharedSegment, SHM_DIR};

/// One `fabkit clean` at a time in this binary: one test's clean would
/// otherwise remove what another test is about to show its clean removes.
static SERIAL: Mutex<()> = Mutex::new(());

const CHILD_ENV: &str = "FABKIT_CLEAN_TEST_CHILD";

fn fabkit() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fabkit"))
}

fn clean(args: &[&str]) -> (Output, String) {
    let out = fabkit()
        .arg("clean")
        .args(args)
        .output()
        .expect("running fabkit");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("fabkit clean {args:?}:\n{text}{err}");
    assert!(!err.contains("panicked"), "{err}");
    (out, text)
}

fn listing() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(SHM_DIR)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn shm_path(name: &str) -> PathBuf {
    Path::new(SHM_DIR).join(name.trim_start_matches('/'))
}

/// Removes files in /dev/shm a test made, also when it fails.
struct Remove(Vec<PathBuf>);

impl Drop for Remove {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// A child process, killed and reaped when the test ends however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sigkill(child: &mut Killed) {
    child.0.kill().unwrap();
    child.0.wait().unwrap();
}

/// The pid of a process that has exited (and was waited for).
fn dead_pid() -> u32 {
    let mut c = Command::new("true").spawn().unwrap();
    let pid = c.id();
    c.wait().unwrap();
    pid
}

/// Not a test on its own: the process `live_segments_are_kept_and_a_killed_processs_go`
/// starts. It holds a fabkit segment and one named as libfabric's shm
/// provider names them, mapped, until its stdin closes (or it is killed).
#[test]
#[ignore = "run as a child process by the clean tests"]
fn child_holds_segments() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let own = SharedSegment::create(&segment_name("test-held").unwrap(), 64).unwrap();
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let prov = SharedSegment::create(&format!("/{}:{uid}:77", std::process::id()), 64).unwrap();
    println!("READY {} {}", own.name(), prov.name());
    std::io::stdout().flush().unwrap();
    // Hold them until told (stdin closed) or killed.
    let mut sink = String::new();
    let _ = std::io::stdin().read_line(&mut sink);
    drop((own, prov));
}

/// Starts `child_holds_segments`; returns it and the two names it made.
fn spawn_holder() -> (Killed, String, String) {
    let mut child = Killed(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_holds_segments",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut out = BufReader::new(child.0.stdout.take().unwrap()).lines();
    for line in out.by_ref() {
        let line = line.unwrap();
        // libtest's "test child_holds_segments ... " may precede it.
        if let Some((_, rest)) = line.split_once("READY ") {
            let (own, prov) = rest.split_once(' ').unwrap();
            // Keep reading what libtest prints after, so the child can end
            // normally (a closed pipe would fail it).
            std::thread::spawn(move || out.for_each(drop));
            return (child, own.to_string(), prov.to_string());
        }
    }
    panic!("the holder child ended before making its segments");
}

#[test]
fn live_segments_are_kept_and_a_killed_processs_go() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (mut child, own, prov) = spawn_holder();
    let _cleanup = Remove(vec![shm_path(&own), shm_path(&prov)]);
    let pid = child.0.id();
    assert_eq!(parse_name(&own).unwrap().0.pid, pid);

    // Alive: both stay. The provider-named one is held (mapped) by the child.
    let (out, text) = clean(&[]);
    assert!(out.status.success());
    assert!(
        shm_path(&own).exists() && shm_path(&prov).exists(),
        "{text}"
    );
    assert!(
        text.contains(&format!("kept {}", shm_path(&prov).display()))
            && text.contains(&format!("pid {pid}")),
        "{text}"
    );
    assert!(!text.contains(&own[1..]), "{text}");

    sigkill(&mut child);
    assert!(shm_path(&own).exists() && shm_path(&prov).exists());
    // The dead process's provider segment is still mapped by a live one
    // (this test): kept. Its fabkit segment, mapped by nobody: removed.
    let held = SharedSegment::open(&prov, 64).unwrap();
    let (out, text) = clean(&[]);
    assert!(out.status.success());
    assert!(!shm_path(&own).exists(), "{text}");
    assert!(
        text.contains(&format!("removed {}", shm_path(&own).display())),
        "{text}"
    );
    assert!(shm_path(&prov).exists(), "{text}");
    drop(held);

    // --dry-run says, and removes nothing.
    let (out, text) = clean(&["--dry-run"]);
    assert!(out.status.success());
    assert!(
        text.contains(&format!("would remove {}", shm_path(&prov).display())),
        "{text}"
    );
    assert!(shm_path(&prov).exists());

    let (out, text) = clean(&[]);
    assert!(out.status.success());
    assert!(
        text.contains(&format!("removed {}", shm_path(&prov).display())),
        "{text}"
    );
    assert!(!shm_path(&prov).exists());

    // Nothing of ours is left: the next clean does not name it, and says
    // "nothing to remove" exactly when it removed nothing.
    let (out, text) = clean(&[]);
    assert!(out.status.success());
    assert!(
        !text.contains(&own[1..]) && !text.contains(&prov[1..]),
        "{text}"
    );
    let removed_any = text.lines().any(|l| l.starts_with("removed "));
    assert_eq!(text.contains("nothing to remove"), !removed_any, "{text}");
}

#[test]
fn the_holder_ending_normally_leaves_nothing() {
    let (mut child, own, prov) = spawn_holder();
    let _cleanup = Remove(vec![shm_path(&own), shm_path(&prov)]);
    drop(child.0.stdin.take());
    assert!(child.0.wait().unwrap().success());
    assert!(!shm_path(&own).exists() && !shm_path(&prov).exists());
}

#[test]
fn another_users_segments_are_never_removed() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Named exactly as what `clean` removes for this user (a dead creator,
    // mapped by nobody), but owned by `nobody`.
    let pid = dead_pid();
    let me = Creator::current();
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let names = [
        format!("fabkit.{}.{}.{pid}.{}.other-0", me.job, me.pid_ns, me.start),
        format!("{pid}:{uid}:0"),
        format!("{pid}:65534:0"),
    ];
    let paths: Vec<PathBuf> = names.iter().map(|n| shm_path(n)).collect();
    let _cleanup = Remove(paths.clone());
    for p in &paths {
        std::fs::write(p, [0u8; 64]).unwrap();
        std::os::unix::fs::chown(p, Some(65534), Some(65534)).unwrap_or_else(|e| {
            panic!(
                "chown {} to nobody: {e} (this test needs root, as CI runs)",
                p.display()
            )
        });
    }
    let (out, text) = clean(&[]);
    assert!(out.status.success(), "{text}");
    for (p, n) in paths.iter().zip(&names) {
        assert!(p.exists(), "{n} was removed: {text}");
        assert!(!text.contains(n.as_str()), "{text}");
    }
}

#[test]
fn a_killed_rank_leaves_dev_shm_as_it_was_after_clean() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = listing();
    // Long enough to be killed mid-run: the DHT over the shm provider, with
    // the same-node shortcut.
    let mut child = Killed(
        fabkit()
            .args(["dht", "-p", "shm", "--shm", "-n", "2", "-k", "200000"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = child.0.id();
    let related = |names: &[String]| -> Vec<String> {
        names
            .iter()
            .filter(|n| {
                n.starts_with(&format!("{pid}:"))
                    || parse_name(n).is_some_and(|(c, _)| c.pid == pid)
            })
            .cloned()
            .collect()
    };
    // Wait (polling, with a deadline) until its ranks have made their
    // segments, i.e. it is mid-run.
    let deadline = Instant::now() + Duration::from_secs(60);
    while related(&listing()).len() < 2 {
        assert!(
            child.0.try_wait().unwrap().is_none(),
            "fabkit dht ended before it could be killed"
        );
        assert!(
            Instant::now() < deadline,
            "fabkit dht made no shm segments in 60 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    sigkill(&mut child);
    let left = related(&listing());
    let _cleanup = Remove(left.iter().map(|n| shm_path(n)).collect());
    assert!(
        !left.is_empty(),
        "a killed rank leaves its segments: the case this guards"
    );

    let (out, text) = clean(&[]);
    assert!(out.status.success(), "{text}");
    for n in &left {
        assert!(
            text.contains(&format!("removed {}", shm_path(n).display())),
            "{n}: {text}"
        );
    }
    assert_eq!(related(&listing()), related(&before), "{text}");
    assert!(related(&before).is_empty());
}
