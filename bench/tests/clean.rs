//! `fabkit clean` and what killed ranks leave in /dev/shm, run for real:
//! processes are killed with SIGKILL, so nothing of theirs can unlink its
//! own segments. Only names these tests made, or that contain a pid they
//! killed, are asserted on: other jobs on the machine may come and go.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;

mod common;
use common::fabkit;

use fabkit_fabric::shm::{parse_name, segment_name, Creator, SharedSegment, SHM_DIR};

/// One `fabkit clean` at a time in this binary: one test's clean would
/// otherwise remove what another test is about to show its clean removes.
static SERIAL: Mutex<()> = Mutex::new(());

const CHILD_ENV: &str = "FABKIT_CLEAN_TEST_CHILD";

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

/// `name` is gone, and `clean` removed it or a same-user DHT start on this
/// machine reaped it first (then clean does not list it as kept).
fn assert_removed(text: &str, name: &str) {
    let path = shm_path(name);
    assert!(!path.exists(), "{name}: {text}");
    assert!(
        !text.contains(&format!("kept {}", path.display())),
        "{name}: {text}"
    );
}

/// Whether this process may chown files to another user (root here).
fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
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

/// Starts this test binary's ignored test `name` as a child process, with
/// its stdin (which it waits on) and stdout piped to the test.
fn child(name: &str) -> Killed {
    Killed(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                name,
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

/// Starts `child_holds_segments`; returns it and the two names it made.
fn spawn_holder() -> (Killed, String, String) {
    let mut child = child("child_holds_segments");
    let line = ready_line(&mut child).expect("the holder child ended before making its segments");
    let (_, rest) = line.split_once("READY ").unwrap();
    let (own, prov) = rest.split_once(' ').unwrap();
    (child, own.to_string(), prov.to_string())
}

/// The first line of `child`'s stdout that says READY, or `None` if it
/// ended first. Bounded: a child stuck before it fails the test (and is
/// killed by its guard) instead of hanging it. What the child prints after
/// is read on, so it can end normally (a closed pipe would fail it).
fn ready_line(child: &mut Killed) -> Option<String> {
    let out = BufReader::new(child.0.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in out.lines().map_while(Result::ok) {
            // libtest's "test child_... " may precede it on the line.
            if line.contains("READY") {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(line);
                }
            }
        }
    });
    let limit = fabkit_core::time::scaled(std::time::Duration::from_secs(60));
    match rx.recv_timeout(limit) {
        Ok(line) => Some(line),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => None,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("the child printed no READY line within {limit:?}")
        }
    }
}

#[test]
fn live_segments_are_kept_and_a_killed_processs_go() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (mut child, own, prov) = spawn_holder();
    let _cleanup = Remove(vec![shm_path(&own), shm_path(&prov)]);
    let pid = child.0.id();
    assert_eq!(parse_name(&own).unwrap().0.pid, pid);

    // Alive: both stay, and neither is a leftover to report.
    let (out, text) = clean(&[]);
    assert!(out.status.success());
    assert!(
        shm_path(&own).exists() && shm_path(&prov).exists(),
        "{text}"
    );
    assert!(
        !text.contains(&own[1..]) && !text.contains(&prov[1..]),
        "{text}"
    );

    sigkill(&mut child);
    assert!(shm_path(&own).exists() && shm_path(&prov).exists());
    // The dead process's provider segment is still mapped by a live one
    // (this test): kept. Its fabkit segment, mapped by nobody: removed.
    let held = SharedSegment::open(&prov, 64).unwrap();
    let (out, text) = clean(&[]);
    assert!(out.status.success());
    assert_removed(&text, &own);
    assert!(shm_path(&prov).exists(), "{text}");
    assert!(
        text.contains(&format!(
            "kept {}: libfabric shm segment of pid {pid}, which has exited, but pid {} \
             still has it open or mapped",
            shm_path(&prov).display(),
            std::process::id()
        )),
        "{text}"
    );
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
    assert_removed(&text, &prov);

    // Nothing of ours is left: the next clean does not name it, and says
    // "nothing to remove" only when it listed nothing. (It may list nothing
    // and still not say so: an entry found may be gone before its turn, as
    // any DHT start also reaps.)
    let (out, text) = clean(&[]);
    assert!(out.status.success());
    assert!(
        !text.contains(&own[1..]) && !text.contains(&prov[1..]),
        "{text}"
    );
    let listed = text
        .lines()
        .any(|l| l.starts_with("removed /dev/shm") || l.starts_with("kept /dev/shm"));
    assert!(
        !(text.contains("nothing to remove in /dev/shm") && listed),
        "{text}"
    );
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
    if !is_root() {
        eprintln!("SKIPPED: making a file of another user needs root (CI runs as root)");
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Named exactly as what `clean` removes for this user (a dead creator,
    // mapped by nobody, this uid in the provider name), but owned by
    // `nobody`: only the owner tells them apart.
    let pid = dead_pid();
    let me = Creator::current();
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let names = [
        format!("fabkit.{}.{}.{pid}.{}.other-0", me.job, me.pid_ns, me.start),
        format!("{pid}:{uid}:0"),
    ];
    let paths: Vec<PathBuf> = names.iter().map(|n| shm_path(n)).collect();
    let _cleanup = Remove(paths.clone());
    for p in &paths {
        std::fs::write(p, [0u8; 64]).unwrap();
        std::os::unix::fs::chown(p, Some(65534), Some(65534)).unwrap();
    }
    let (out, text) = clean(&[]);
    assert!(out.status.success(), "{text}");
    for (p, n) in paths.iter().zip(&names) {
        assert!(p.exists(), "{n} was removed: {text}");
        assert!(!text.contains(n.as_str()), "{text}");
    }
}

/// One rank whose job stops at the first barrier: it prints `READY` there
/// and waits for its stdin to close. A one-process stand-in for the
/// launcher a killed rank's peers would be; the rank itself is real.
struct StopAtBarrier;

impl fabkit_core::bootstrap::Bootstrap for StopAtBarrier {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn allgather(&self, mine: &[u8]) -> fabkit_core::Result<Vec<Vec<u8>>> {
        Ok(vec![mine.to_vec()])
    }
    fn barrier(&self) -> fabkit_core::Result<()> {
        println!("READY");
        std::io::stdout().flush().unwrap();
        let mut sink = String::new();
        let _ = std::io::stdin().read_line(&mut sink);
        Ok(())
    }
}

/// Not a test on its own: a DHT rank over the shm provider with the
/// same-node shortcut, stopped in setup (its segment made, not yet
/// unlinked) for `a_rank_killed_in_setup_leaves_dev_shm_as_it_was_after_clean`.
#[test]
#[ignore = "run as a child process by the clean tests"]
fn child_rank_in_setup() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let mut rc = fabkit_fabric::RankConfig::new("shm");
    rc.region_len = 4096;
    let t =
        fabkit_dht::transport::shm::ShmTransport::establish_sharing(rc, &StopAtBarrier, &[true]);
    drop(t);
}

#[test]
fn a_rank_killed_in_setup_leaves_dev_shm_as_it_was_after_clean() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = listing();
    let mut child = child("child_rank_in_setup");
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
    // The child says when it is in setup: its segment made, not unlinked.
    let ready = ready_line(&mut child).is_some();
    assert!(ready, "the rank ended before its setup's barrier");
    sigkill(&mut child);
    let left = related(&listing());
    let _cleanup = Remove(left.iter().map(|n| shm_path(n)).collect());
    assert!(
        left.iter().any(|n| parse_name(n).is_some()),
        "a rank killed in setup leaves its fabkit segment: the case this guards ({left:?})"
    );

    let (out, text) = clean(&[]);
    assert!(out.status.success(), "{text}");
    for n in &left {
        assert_removed(&text, n);
    }
    assert_eq!(related(&listing()), related(&before), "{text}");
    assert!(related(&before).is_empty());
}

#[test]
fn odd_names_symlinks_and_other_namespaces_are_left_alone() {
    use std::os::unix::ffi::OsStrExt;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let pid = dead_pid();
    let me = Creator::current();
    // Another PID namespace's segment: its pid means nothing here. Kept,
    // and said.
    let foreign = format!(
        "fabkit.{}.{}.{pid}.{}.other-ns-0",
        me.job,
        me.pid_ns + 1,
        me.start
    );
    // A symlink named as a dead creator's segment, pointing at a file.
    let link = format!("fabkit.{}.{}.{pid}.{}.link-0", me.job, me.pid_ns, me.start);
    let target = format!("fabkit-clean-test-target-{pid}");
    // A name that is not UTF-8.
    let odd = std::ffi::OsStr::from_bytes(b"fabkit.\xff-clean-test").to_os_string();
    let _cleanup = Remove(vec![
        shm_path(&foreign),
        shm_path(&link),
        shm_path(&target),
        Path::new(SHM_DIR).join(&odd),
    ]);
    std::fs::write(shm_path(&foreign), [0u8; 8]).unwrap();
    std::fs::write(shm_path(&target), [0u8; 8]).unwrap();
    std::os::unix::fs::symlink(shm_path(&target), shm_path(&link)).unwrap();
    std::fs::write(Path::new(SHM_DIR).join(&odd), [0u8; 8]).unwrap();
    let (out, text) = clean(&[]);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!(
            "kept {}: made in PID namespace {}",
            shm_path(&foreign).display(),
            me.pid_ns + 1
        )),
        "{text}"
    );
    assert!(shm_path(&foreign).exists());
    assert!(shm_path(&link).symlink_metadata().is_ok() && shm_path(&target).exists());
    assert!(!text.contains(&link) && !text.contains(&target), "{text}");
    assert!(Path::new(SHM_DIR).join(&odd).exists());
    assert!(!text.contains("nothing to remove in /dev/shm"), "{text}");
}

/// What killed runs leave in the temporary directory: a launcher's meeting
/// place and a Redis server's directory, each this user's with a lock
/// nobody holds, are removed; one whose lock a live process holds is kept.
#[test]
fn the_directories_of_killed_runs_are_removed_and_live_ones_kept() {
    // Another test's clean would remove these meanwhile.
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = std::env::temp_dir();
    let pid = std::process::id();
    let dead = [
        tmp.join(format!("fabkit-launch-{pid}-deadbeefdeadbeef")),
        tmp.join(format!("fabkit-redis-{pid}-999")),
    ];
    let live = tmp.join(format!("fabkit-launch-{pid}-1111111111111111"));
    // Not made as fabkit makes them (0755, not 0700): not judged.
    let open = tmp.join(format!("fabkit-launch-{pid}-2222222222222222"));
    let _cleanup = RemoveDirs(vec![
        dead[0].clone(),
        dead[1].clone(),
        live.clone(),
        open.clone(),
    ]);
    for d in dead.iter().chain([&live, &open]) {
        use std::os::unix::fs::DirBuilderExt;
        let mode = if *d == open { 0o755 } else { 0o700 };
        std::fs::DirBuilder::new().mode(mode).create(d).unwrap();
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
        std::fs::write(d.join("LOCK"), "").unwrap();
    }
    // The live one's lock, held by another process (flock(1) says so once
    // it holds it).
    let mut holder = Command::new("flock")
        .arg(live.join("LOCK"))
        .args(["-c", "echo held; cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "held\n");
    let (out, text) = clean(&["--dry-run"]);
    assert!(out.status.success(), "{text}");
    for d in &dead {
        assert!(
            text.contains(&format!("would remove {}", d.display())),
            "{text}"
        );
        assert!(d.exists(), "--dry-run removed {}", d.display());
    }
    let (out, text) = clean(&[]);
    assert!(out.status.success(), "{text}");
    for d in &dead {
        assert!(!d.exists(), "{} was kept: {text}", d.display());
    }
    assert!(
        live.exists(),
        "a live launch's meeting place was removed: {text}"
    );
    drop(holder.stdin.take());
    holder.wait().unwrap();
}

/// Removes directories however a test ends.
struct RemoveDirs(Vec<PathBuf>);

impl Drop for RemoveDirs {
    fn drop(&mut self) {
        for d in &self.0 {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}
