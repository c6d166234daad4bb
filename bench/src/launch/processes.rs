//! `fabkit launch` without MPI: ranks as processes of this machine (one per
//! network namespace, or `-n` plain ones), each the leader of a process
//! group, meeting in a private directory; the launcher watches them, ends
//! the rest when one fails, passes signals on, and leaves nothing behind.

use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use fabkit_netns::cleanup::{child_takes_terminating, HeldTerminating};

use super::{
    check_namespaces, ends_with_this_process, ENV_DIR, ENV_NETNS, ENV_RANK, ENV_SIZE, ENV_TIMEOUT,
};

/// Makes the process `c` starts the leader of a process group of its own,
/// so that the launcher can end it with everything it started (a shell's
/// `sleep`, a rank's helpers), and [`ends_with_this_process`]. The signals
/// the launcher holds to pass on ([`HeldTerminating`]) are unblocked in it.
fn own_group_ending_with_this_process(c: &mut std::process::Command) {
    // SAFETY: setpgid is async-signal-safe; it runs in the child before
    // exec and touches no memory of the parent.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(c, || {
            if libc::setpgid(0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    child_takes_terminating(c);
    ends_with_this_process(c);
}

/// Sends `sig` to the process group a rank leads (the rank and whatever
/// it started). A group that has ended is no error.
fn signal_group(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) touches no memory; a negative pid names the group.
    unsafe { libc::kill(-(pid as libc::pid_t), sig) };
}

/// The directory a launch's ranks meet in, removed however
/// `launch_processes` ends.
struct TempDir(crate::held::Held);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0.path);
    }
}

/// The prefix of a launch's meeting place in the temporary directory.
const MEETING: &str = "fabkit-launch-";

/// Makes the directory a launch's ranks meet in: under the temporary
/// directory, with a name no other user can predict (the pid and 64 random
/// bits), only this user's (0700), and held while this launcher lives
/// ([`crate::held`]), since the ranks leave their addresses, memory keys
/// and a benchmark's Redis password there. A name that exists, a link
/// included, is refused: one another user made first is never used.
fn meeting_place() -> Result<TempDir> {
    let path = std::env::temp_dir().join(format!(
        "{MEETING}{}-{:016x}",
        std::process::id(),
        fabkit_core::random_u64()?
    ));
    let held = crate::held::make(&path)
        .with_context(|| format!("creating the ranks' meeting place {}", path.display()))?;
    Ok(TempDir(held))
}

/// Removes (or with `dry_run` lists) the meeting places of launchers that
/// were killed (`fabkit clean`).
pub fn reap_meeting_places(dry_run: bool) -> Vec<std::path::PathBuf> {
    crate::held::reap(
        &std::env::temp_dir(),
        |name| name.starts_with(MEETING),
        dry_run,
    )
}

/// `fabkit launch`: starts `cmd` once per rank on this machine, each inside
/// one of `netns` (one rank per namespace, as one host each) or `n` plain
/// processes, meeting through a fresh shared directory (the file bootstrap,
/// no MPI). When a rank fails the others are stopped. Returns the first
/// failing rank's exit code, or 0.
pub fn launch_processes(
    netns: &[String],
    n: Option<usize>,
    timeout: Duration,
    cmd: &[String],
) -> Result<i32> {
    let size = match (netns.len(), n) {
        (0, Some(n)) if n > 0 => n,
        (k, None) if k > 0 => k,
        (k, Some(n)) if k == n && n > 0 => n,
        _ => {
            return Err(usage!(
                "launch takes --netns a,b,... (one rank each) or -n RANKS, or both agreeing"
            ))
        }
    };
    let Some((prog, args)) = cmd.split_first() else {
        return Err(usage!(
            "launch needs a command after --, e.g. fabkit launch -n 2 -- fabkit check"
        ));
    };
    check_namespaces("launch", netns)?;
    // Held from before the first rank starts, so none is missed, until
    // after the meeting place is removed (dropped after it).
    let signals = HeldTerminating::hold().context("holding SIGINT, SIGTERM and SIGHUP")?;
    let dir = meeting_place()?;
    let mut children = Vec::new();
    for rank in 0..size {
        let mut c = match netns.get(rank) {
            // `ip netns exec` also gives the child a /sys of its namespace.
            Some(ns) => {
                let mut c = std::process::Command::new("ip");
                c.args(["netns", "exec", ns, prog]).args(args);
                c
            }
            None => {
                let mut c = std::process::Command::new(prog);
                c.args(args);
                c
            }
        };
        // A launcher killed or signalled alone (a scheduler, `timeout`,
        // Ctrl-C at its terminal) takes each rank's group with it.
        own_group_ending_with_this_process(&mut c);
        // A rank in a group of its own that reads the terminal would be
        // stopped (SIGTTIN) and wait for ever: ranks read no terminal.
        // SAFETY: isatty has no preconditions.
        if unsafe { libc::isatty(0) } == 1 {
            c.stdin(std::process::Stdio::null());
        }
        if !netns.is_empty() {
            c.env(ENV_NETNS, netns.join(","));
        }
        c.env(ENV_DIR, &dir.0.path)
            .env(ENV_RANK, rank.to_string())
            .env(ENV_SIZE, size.to_string())
            .env(ENV_TIMEOUT, timeout.as_secs_f64().to_string());
        match c.spawn() {
            Ok(child) => children.push((rank, child)),
            Err(e) => {
                for (_, mut ch) in children {
                    signal_group(ch.id(), libc::SIGKILL);
                    let _ = ch.wait();
                }
                return Err(anyhow!("starting rank {rank} ({prog}): {e}"));
            }
        }
    }
    let groups: Vec<u32> = children.iter().map(|(_, ch)| ch.id()).collect();
    let code = watch(&children, &dir.0.path, size, &signals);
    // Whatever a rank started ends with the job, however the job ended;
    // then the ranks are reaped (their pids named their groups till now).
    for &g in &groups {
        signal_group(g, libc::SIGKILL);
    }
    for (_, mut ch) in children {
        let _ = ch.wait();
    }
    if !matches!(code, Ok(0)) {
        remove_segments_of(&groups);
    }
    code
}

/// Removes the /dev/shm segments the ranks `pids` made (fabkit's, and the
/// libfabric shm provider's) that nothing holds any more: a rank that was
/// killed, or stopped after another failed, could not unlink them.
/// Judged as `fabkit clean` judges; said on stderr, a failure included.
fn remove_segments_of(pids: &[u32]) {
    use fabkit_fabric::shm::{remove, survey, Maker, Removal, Verdict};
    let Ok(found) = survey(true) else {
        return;
    };
    for (seg, verdict) in found {
        let pid = match &seg.maker {
            Maker::Fabkit { creator, .. } => creator.pid,
            Maker::Provider { pid } => *pid,
        };
        if !pids.contains(&pid) || !matches!(verdict, Verdict::Stale(_)) {
            continue;
        }
        match remove(&seg) {
            Ok(Removal::Removed) => {
                eprintln!(
                    "fabkit launch: removed /dev/shm/{} (rank pid {pid})",
                    seg.file
                )
            }
            Ok(_) => {}
            Err(e) => eprintln!("fabkit launch: could not remove /dev/shm/{}: {e}", seg.file),
        }
    }
}

/// Watches every rank: the first failure stops the rest (they would wait
/// in the bootstrap until its timeout otherwise), and a signal the
/// launcher gets is passed on to every rank's group. Returns the job's
/// exit code. Ranks are not reaped here ([`exited`]): a leader's pid stays
/// its group's until the launcher has ended the group.
fn watch(
    children: &[(usize, std::process::Child)],
    dir: &std::path::Path,
    size: usize,
    signals: &HeldTerminating,
) -> Result<i32> {
    let mut done: Vec<Option<std::process::ExitStatus>> = vec![None; children.len()];
    loop {
        for ((rank, ch), d) in children.iter().zip(done.iter_mut()) {
            if d.is_none() {
                *d = exited(ch).map_err(|e| anyhow!("waiting for rank {rank}: {e}"))?;
            }
        }
        let failed: Vec<(usize, std::process::ExitStatus)> = children
            .iter()
            .zip(&done)
            .filter_map(|((r, _), d)| d.filter(|st| !st.success()).map(|st| (*r, st)))
            .collect();
        if let Some(&(first, st)) = failed.first() {
            // The others end at once when one leaves (Bootstrap::leave), so
            // the first exit seen may be an echo: the rank that left first
            // says so in the shared directory, and its status is the job's.
            let (rank, st) = match origin(dir, size) {
                Some(k) if k != first => match failed.iter().find(|(r, _)| *r == k) {
                    Some(&(k, st)) => (k, st),
                    None => match children.iter().find(|(r, _)| *r == k) {
                        Some((_, ch)) => (k, wait_briefly(ch).unwrap_or(st)),
                        None => (first, st),
                    },
                },
                _ => (first, st),
            };
            eprintln!("fabkit launch: rank {rank} failed ({st}); stopping the others");
            return Ok(st.code().unwrap_or(1));
        }
        let running: Vec<&std::process::Child> = children
            .iter()
            .zip(&done)
            .filter(|(_, d)| d.is_none())
            .map(|((_, ch), _)| ch)
            .collect();
        if running.is_empty() {
            return Ok(0);
        }
        // Polling child exits, and taking a signal meanwhile; no busy loop.
        if let Some(sig) = signals.wait(Duration::from_millis(20)) {
            let name = match sig {
                libc::SIGINT => "SIGINT",
                libc::SIGTERM => "SIGTERM",
                _ => "SIGHUP",
            };
            eprintln!("fabkit launch: {name} received; passing it on to the ranks");
            for ch in &running {
                signal_group(ch.id(), sig);
            }
            // They get a moment to end cleanly (remove their segments);
            // the caller then ends what is left.
            for ch in &running {
                wait_briefly(ch);
            }
            return Ok(128 + sig);
        }
    }
}

/// The rank that left a `fabkit launch` job first, by its `left.rankN`
/// file in the shared directory (only a rank's own failure writes one).
fn origin(dir: &std::path::Path, size: usize) -> Option<usize> {
    (0..size).find(|r| dir.join(format!("left.rank{r}")).exists())
}

/// The exit status of `ch` if it ends within a second: a rank that left
/// the job is on its way out.
fn wait_briefly(ch: &std::process::Child) -> Option<std::process::ExitStatus> {
    for _ in 0..50 {
        if let Ok(Some(st)) = exited(ch) {
            return Some(st);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// `ch`'s exit status if it has ended, without reaping it (`waitid` with
/// `WNOWAIT`): until it is reaped its pid, which names its process group,
/// cannot be given to another process, so signalling the group later can
/// only reach what the rank started.
fn exited(ch: &std::process::Child) -> std::io::Result<Option<std::process::ExitStatus>> {
    use std::os::unix::process::ExitStatusExt;
    // SAFETY: an all-zero siginfo_t is a valid out parameter.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid writes only `info`; the pid is our child's, not yet
    // reaped (only `launch_processes` reaps, after the job).
    let rc = unsafe {
        libc::waitid(
            libc::P_PID,
            ch.id() as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: after a successful waitid the pid field is set (0: no change).
    if unsafe { info.si_pid() } == 0 {
        return Ok(None);
    }
    // SAFETY: as above, for a child that changed state.
    let status = unsafe { info.si_status() };
    let raw = match info.si_code {
        libc::CLD_EXITED => (status & 0xff) << 8,
        libc::CLD_DUMPED => status | 0x80,
        _ => status,
    };
    Ok(Some(std::process::ExitStatus::from_raw(raw)))
}
