//! Segment names that record their creator (job, PID namespace, pid and
//! start time), and whether that creator still lives.

use std::sync::atomic::{AtomicU32, Ordering};

use fabkit_core::Error as CoreError;

use super::PREFIX;
use crate::error::{Error, Result};

/// The process that created a fabkit segment, as the segment's name
/// records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Creator {
    /// The launcher's job id (`ompi<id>`, `slurm<id>`) or `p<pid>`.
    pub job: String,
    /// Inode of the creator's PID namespace (`/proc/self/ns/pid`); 0 when
    /// it could not be read, and then the creator is never judged dead.
    pub pid_ns: u64,
    /// The creator's pid, in that namespace.
    pub pid: u32,
    /// The creator's start time (clock ticks after boot, `/proc/<pid>/stat`
    /// field 22): tells the creator from a later process given its pid.
    pub start: u64,
}

/// Whether a segment's creator still runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// It runs (or could not be ruled out: then it is kept).
    Alive,
    /// It no longer exists in this PID namespace (its pid is free, names a
    /// zombie, or names a process started at another time).
    Dead,
    /// It was made in another PID namespace (or one that could not be read),
    /// where its pid means nothing here: it is never reaped from here.
    Foreign,
}

impl Creator {
    /// This process. Its PID namespace and start time are read from
    /// `/proc/self`; when that `/proc` is not this process's own (mounted
    /// for another PID namespace) or cannot be read, both are recorded as
    /// 0, so the segment counts as [`Liveness::Foreign`] everywhere and is
    /// never reaped (`fabkit clean` lists it as kept).
    pub fn current() -> Creator {
        let pid = std::process::id();
        let ns = pid_namespace();
        Creator {
            job: job_id(),
            pid_ns: ns.unwrap_or(0),
            pid,
            start: ns
                .and_then(|_| proc_stat("/proc/self/stat"))
                .map_or(0, |s| s.start),
        }
    }

    /// Whether the creator still runs, judged in this PID namespace.
    pub fn liveness(&self) -> Liveness {
        match pid_namespace() {
            Some(ns) if ns == self.pid_ns && ns != 0 => {}
            // Another or an unknown namespace: nothing can be judged.
            _ => return Liveness::Foreign,
        }
        match pid_state(self.pid) {
            PidState::Gone => Liveness::Dead,
            // The pid is taken; by the creator only if it started at the
            // recorded time.
            PidState::Running { start: Some(s) } if s != self.start => Liveness::Dead,
            PidState::Running { .. } => Liveness::Alive,
        }
    }
}

/// What a pid of this PID namespace names now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PidState {
    /// No process, or a zombie (it has exited; its mappings are gone).
    Gone,
    /// A process, started at `start` if its `/proc` entry could be read.
    Running { start: Option<u64> },
}

pub(super) fn pid_state(pid: u32) -> PidState {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return PidState::Gone;
    };
    if p <= 0 {
        // kill(0) and kill(-1) address groups; no process has such a pid.
        return PidState::Gone;
    }
    // SAFETY: signal 0 only checks that the pid exists; nothing is sent.
    if unsafe { libc::kill(p, 0) } != 0
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    {
        return PidState::Gone;
    }
    // kill(pid, 0) succeeds on a zombie: it has exited all the same.
    match proc_stat(&format!("/proc/{pid}/stat")) {
        Some(s) if s.state == b'Z' || s.state == b'X' => PidState::Gone,
        Some(s) => PidState::Running {
            start: Some(s.start),
        },
        // It exists (kill said so; EPERM: another user's) but its stat
        // could not be read: keep what it may own.
        None => PidState::Running { start: None },
    }
}

/// The launcher's job id, if a launcher started us (Open MPI, Slurm), else
/// `p<pid>`; only `[A-Za-z0-9_-]`, at most 40 characters.
pub fn job_id() -> String {
    let from = |var: &str, tag: &str| {
        let v = std::env::var(var).ok()?;
        let clean: String = v
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .take(32)
            .collect();
        (!clean.is_empty()).then(|| format!("{tag}{clean}"))
    };
    from("OMPI_MCA_ess_base_jobid", "ompi")
        .or_else(|| from("SLURM_JOB_ID", "slurm"))
        .unwrap_or_else(|| format!("p{}", std::process::id()))
}

/// A number written the one way `{}` writes it: ASCII digits, no sign, no
/// leading zero (so one value has one name).
pub(super) fn canonical(s: &str) -> Option<u64> {
    let ok =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    ok.then(|| s.parse().ok()).flatten()
}

/// Whether `/proc` is this process's own: `/proc/self` names our pid. It
/// does not when `/proc` was mounted for another PID namespace, and then
/// nothing read there says anything about our pids.
fn own_proc() -> bool {
    std::fs::read_link("/proc/self")
        .ok()
        .and_then(|l| l.to_str().and_then(canonical))
        == Some(u64::from(std::process::id()))
}

/// Inode of this process's PID namespace, from `/proc/self/ns/pid`
/// (`pid:[4026531836]`); `None` if `/proc` is not this process's own.
pub fn pid_namespace() -> Option<u64> {
    if !own_proc() {
        return None;
    }
    let link = std::fs::read_link("/proc/self/ns/pid").ok()?;
    let s = link.to_str()?;
    canonical(s.strip_prefix("pid:[")?.strip_suffix(']')?).filter(|&n| n != 0)
}

/// Inode of the initial PID namespace: a kernel constant (`PROC_PID_INIT_INO`).
/// Only from there does `/proc` show every process on the machine.
pub(super) const INIT_PID_NS: u64 = 0xEFFF_FFFC;

struct ProcStat {
    state: u8,
    start: u64,
}

/// Fields 3 (state) and 22 (start time) of a `/proc/<pid>/stat`.
fn proc_stat(path: &str) -> Option<ProcStat> {
    let stat = std::fs::read_to_string(path).ok()?;
    // The command (field 2) is in parentheses and may hold spaces or ')':
    // fields are counted after the last ')'. Field 3 is the first there.
    let mut rest = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = *rest.next()?.as_bytes().first()?;
    let start = canonical(rest.nth(22 - 4)?)?;
    Some(ProcStat { state, start })
}

/// Start time of process `pid` in clock ticks after boot (field 22 of
/// `/proc/<pid>/stat`), if it exists and can be read.
pub fn process_start(pid: u32) -> Option<u64> {
    proc_stat(&format!("/proc/{pid}/stat")).map(|s| s.start)
}

static NEXT_SEGMENT: AtomicU32 = AtomicU32::new(0);

/// A fresh `shm_open` name for a segment made by this process:
/// `/fabkit.<job>.<pid namespace>.<pid>.<start>.<what>-<n>`, `n` counting
/// this process's segments (in-process ranks share a pid). `what` says
/// what it is for, in `[A-Za-z0-9_-]`.
pub fn segment_name(what: &str) -> Result<String> {
    if what.is_empty()
        || what.len() > 64
        || !what
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(Error::from(CoreError::InvalidArgument(format!(
            "segment purpose `{what}`: use 1 to 64 of A-Z a-z 0-9 - _"
        ))));
    }
    let me = Creator::current();
    let n = NEXT_SEGMENT.fetch_add(1, Ordering::Relaxed);
    Ok(format!(
        "/{PREFIX}{}.{}.{}.{}.{what}-{n}",
        me.job, me.pid_ns, me.pid, me.start
    ))
}

/// The creator and purpose recorded in a fabkit segment name (with or
/// without the leading `/`); `None` for any other name. Numbers must be
/// written as [`segment_name`] writes them (no sign, no leading zero) and
/// the pid is never 0.
pub fn parse_name(name: &str) -> Option<(Creator, &str)> {
    let rest = name
        .strip_prefix('/')
        .unwrap_or(name)
        .strip_prefix(PREFIX)?;
    let mut f = rest.splitn(5, '.');
    let job = f.next()?;
    let pid_ns = canonical(f.next()?)?;
    let pid = u32::try_from(canonical(f.next()?)?).ok()?;
    let start = canonical(f.next()?)?;
    let what = f.next()?;
    if job.is_empty() || what.is_empty() || pid == 0 {
        return None;
    }
    Some((
        Creator {
            job: job.to_string(),
            pid_ns,
            pid,
            start,
        },
        what,
    ))
}

/// The pid, uid and index in a name the libfabric shm provider gives an
/// endpoint's region: `<pid>:<uid>:<index>` (libfabric 1.17 `prov/shm`, the
/// default name when no source address is given). Canonical numbers only,
/// pid never 0.
pub fn parse_provider_name(name: &str) -> Option<(u32, u32, u32)> {
    let mut f = name.split(':');
    let mut num = || u32::try_from(canonical(f.next()?)?).ok();
    let (pid, uid, index) = (num()?, num()?, num()?);
    (f.next().is_none() && pid != 0).then_some((pid, uid, index))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_record_the_creator_and_parse_back() {
        let name = segment_name("dht-r3").unwrap();
        let (c, what) = parse_name(&name).unwrap();
        assert_eq!(c, Creator::current());
        assert!(what.starts_with("dht-r3-"), "{what}");
        assert_eq!(c.liveness(), Liveness::Alive);
        assert_ne!(segment_name("dht-r3").unwrap(), name, "names are fresh");
        for bad in ["", "a.b", "a/b", &"x".repeat(65)] {
            assert!(segment_name(bad).is_err(), "{bad:?}");
        }
        for other in [
            "12:0:0",
            "fabkit.j.1.x.2.w",
            "fabkit.j.1.0.2.w",
            "fabkit.j.1.2.3",
        ] {
            assert!(parse_name(other).is_none(), "{other}");
        }
        // Another PID namespace: its pids mean nothing here.
        let foreign = Creator {
            pid_ns: c.pid_ns.wrapping_add(1),
            ..c.clone()
        };
        assert_eq!(foreign.liveness(), Liveness::Foreign);
        // Our pid with another start time: a recycled pid, so dead.
        let recycled = Creator {
            start: c.start.wrapping_add(1),
            ..c.clone()
        };
        assert_eq!(recycled.liveness(), Liveness::Dead);
    }

    #[test]
    fn numbers_in_names_are_canonical() {
        assert_eq!(parse_provider_name("19403:0:0"), Some((19403, 0, 0)));
        assert_eq!(
            parse_provider_name("19403:1000:12"),
            Some((19403, 1000, 12))
        );
        for bad in [
            "0:0:0",
            "+1:0:0",
            "01:0:0",
            "1:00:0",
            "1:0:-0",
            "1:0",
            "1:0:0:1",
            "x:0:0",
            "4294967296:0:0",
            "1: 0:0",
        ] {
            assert_eq!(parse_provider_name(bad), None, "{bad}");
        }
        for bad in [
            "fabkit.j.1.+2.3.w",
            "fabkit.j.1.02.3.w",
            "fabkit.j.01.2.3.w",
            "fabkit.j.1.2.03.w",
            "fabkit.j.1.0.3.w",
            "fabkit.j.1.4294967296.3.w",
        ] {
            assert!(parse_name(bad).is_none(), "{bad}");
        }
        assert!(parse_name("fabkit.j.1.2.0.w").is_some());
    }

    #[test]
    fn a_zombie_creator_is_dead() {
        // Exited but not waited for: kill(pid, 0) still succeeds.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        // Waiting on the child's state, not sleeping for it: /proc says Z
        // once it has exited.
        while proc_stat(&format!("/proc/{pid}/stat")).map(|s| s.state) != Some(b'Z') {
            assert!(std::time::Instant::now() < deadline, "`true` did not exit");
            std::thread::yield_now();
        }
        let me = Creator::current();
        let zombie = Creator {
            pid,
            start: process_start(pid).unwrap(),
            ..me
        };
        assert_eq!(zombie.liveness(), Liveness::Dead);
        assert_eq!(pid_state(pid), PidState::Gone);
        child.wait().unwrap();
    }

    #[test]
    fn this_process_is_judged_through_its_own_proc() {
        let me = Creator::current();
        assert_ne!(me.pid_ns, 0);
        assert_eq!(Some(me.start), process_start(me.pid));
        // A name recording no namespace (an unreadable /proc at its start)
        // is never judged.
        let unknown = Creator { pid_ns: 0, ..me };
        assert_eq!(unknown.liveness(), Liveness::Foreign);
    }
}
