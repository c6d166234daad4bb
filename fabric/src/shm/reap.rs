//! What is in `/dev/shm`: which segments fabkit (or libfabric's `shm`
//! provider) made, whose creator is gone, which are still mapped, and
//! removing the stale ones ([`reap_stale`], `fabkit clean`).

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use fabkit_core::Error as CoreError;

use super::name::{
    canonical, parse_name, parse_provider_name, pid_namespace, pid_state, Creator, Liveness,
    PidState, INIT_PID_NS,
};
use super::SHM_DIR;
use crate::error::{Error, Result};

/// What made a segment [`survey`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Maker {
    /// fabkit, as recorded in the name ([`segment_name`](super::segment_name)).
    Fabkit {
        /// The creating process.
        creator: Creator,
        /// What it was for.
        what: String,
    },
    /// The libfabric shm provider, for an endpoint of process `pid`.
    Provider {
        /// The pid in the name (the provider's creator).
        pid: u32,
    },
}

/// A file in [`SHM_DIR`] that a killed process may have left: one of this
/// user's whose maker no longer runs (or cannot be judged).
#[derive(Clone, Debug)]
pub struct Segment {
    /// File name in [`SHM_DIR`].
    pub file: String,
    /// Who made it.
    pub maker: Maker,
    dev: u64,
    ino: u64,
}

/// What is to be done with a [`Segment`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing runs that made or holds it: it may be removed ([`remove`]).
    Stale(String),
    /// It stays, for the reason given.
    Keep(String),
}

/// The processes that have a file of [`SHM_DIR`] open or mapped, by
/// (device, inode), and those whose open files and mappings could not be
/// read (`blind`).
struct Holders {
    held: HashMap<(u64, u64), u32>,
    blind: Vec<u32>,
}

/// Scans `/proc/<pid>/fd` and `/proc/<pid>/maps` of every process for files
/// on the device `dev` (that of [`SHM_DIR`]). Files are matched by device
/// and inode, not name, so a segment removed and made again under the same
/// name is not confused with the old one.
fn holders(dev: u64) -> Holders {
    let mut h = Holders {
        held: HashMap::new(),
        blind: Vec::new(),
    };
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return h;
    };
    let me = std::process::id();
    // maps writes the device as major:minor in hex.
    let dev_text = format!("{:02x}:{:02x}", libc::major(dev), libc::minor(dev));
    for p in procs.flatten() {
        let Some(pid) = p
            .file_name()
            .to_str()
            .and_then(canonical)
            .and_then(|n| u32::try_from(n).ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let gone = |e: &std::io::Error| {
            e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH)
        };
        let mut blind = false;
        // Open files first, then mappings: a process between shm_open and
        // mmap is seen in one or the other (it maps before it closes).
        match std::fs::read_dir(p.path().join("fd")) {
            Ok(fds) => {
                for fd in fds.flatten() {
                    // stat follows the link to the open file itself.
                    if let Ok(m) = std::fs::metadata(fd.path()) {
                        if m.dev() == dev {
                            h.held.entry((m.dev(), m.ino())).or_insert(pid);
                        }
                    }
                }
            }
            Err(e) if gone(&e) => continue,
            Err(_) => blind = true,
        }
        match std::fs::read_to_string(p.path().join("maps")) {
            Ok(maps) => {
                for line in maps.lines() {
                    // address perms offset dev inode [path]
                    let mut f = line.split_whitespace().skip(3);
                    if f.next() == Some(dev_text.as_str()) {
                        if let Some(ino) = f.next().and_then(canonical) {
                            h.held.entry((dev, ino)).or_insert(pid);
                        }
                    }
                }
            }
            Err(e) if gone(&e) => continue,
            Err(_) => blind = true,
        }
        if blind {
            h.blind.push(pid);
        }
    }
    h
}

/// Whether a process of this PID namespace we could not look into might
/// hold a file owned by `owner`: it runs as `owner` or may override file
/// permissions (CAP_DAC_OVERRIDE, root). If its status cannot be read
/// either, it might.
fn could_hold(pid: u32, owner: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return true;
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    let same_user = field("Uid:").is_none_or(|u| {
        u.split_whitespace()
            .any(|id| canonical(id) == Some(u64::from(owner)))
    });
    const CAP_DAC_OVERRIDE: u64 = 1 << 1;
    let overrides = field("CapEff:")
        .is_none_or(|c| u64::from_str_radix(c, 16).map_or(true, |c| c & CAP_DAC_OVERRIDE != 0));
    same_user || overrides
}

/// This user's files in [`SHM_DIR`] a killed process may have left: fabkit
/// segments whose creator does not run (or that cannot be judged from
/// here), and, if `provider`, libfabric shm provider segments whose pid does
/// not run. Segments of live makers are not listed; other users' files and
/// other names never are.
fn candidates(provider: bool) -> Result<Vec<Segment>> {
    let dir = Path::new(SHM_DIR);
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        // No /dev/shm: no segments either.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(Error::from(CoreError::Io {
                what: format!("listing {SHM_DIR}"),
                cause: source,
            }))
        }
    };
    // SAFETY: geteuid and getuid have no preconditions.
    let (euid, uid) = unsafe { (libc::geteuid(), libc::getuid()) };
    let mut found = Vec::new();
    for e in entries.flatten() {
        // fabkit's and the provider's names are ASCII: any other is neither.
        let Ok(file) = e.file_name().into_string() else {
            continue;
        };
        let maker = if let Some((creator, what)) = parse_name(&file) {
            if creator.liveness() == Liveness::Alive {
                continue;
            }
            Maker::Fabkit {
                what: what.to_string(),
                creator,
            }
        } else if let Some((pid, owner, _)) = parse_provider_name(&file) {
            if !provider || (owner != uid && owner != euid) {
                continue;
            }
            // A live job's: not a leftover. (Outside the initial PID
            // namespace the pid says nothing: listed, and kept by `judge`.)
            if pid_namespace() == Some(INIT_PID_NS) && pid_state(pid) != PidState::Gone {
                continue;
            }
            Maker::Provider { pid }
        } else {
            continue;
        };
        // Not followed: a symlink is never a segment of ours.
        let Ok(meta) = e.path().symlink_metadata() else {
            continue;
        };
        if !meta.file_type().is_file() || meta.uid() != euid {
            continue;
        }
        found.push(Segment {
            file,
            maker,
            dev: meta.dev(),
            ino: meta.ino(),
        });
    }
    found.sort_by(|a, b| a.file.cmp(&b.file));
    Ok(found)
}

/// Judges one candidate. `holders` is scanned on first need.
fn judge(seg: &Segment, holders_of: &mut Option<Holders>) -> Verdict {
    let maker = match &seg.maker {
        Maker::Fabkit { creator, what } => {
            match creator.liveness() {
                Liveness::Alive => {
                    return Verdict::Keep(format!("its creator pid {} runs", creator.pid))
                }
                Liveness::Foreign => {
                    return Verdict::Keep(format!(
                        "made in PID namespace {} (this is {}), whose pids cannot be \
                         checked from here: run fabkit clean there, or remove it by hand \
                         if that namespace is gone",
                        creator.pid_ns,
                        pid_namespace().map_or("unknown".into(), |n| n.to_string())
                    ))
                }
                Liveness::Dead => {}
            }
            format!(
                "fabkit segment ({what}, job {}) of pid {}, which has exited",
                creator.job, creator.pid
            )
        }
        Maker::Provider { pid } => {
            // Its name records a pid of some namespace and nothing else: only
            // where every process is visible can "nobody holds it" be known.
            if pid_namespace() != Some(INIT_PID_NS) {
                return Verdict::Keep(
                    "a libfabric shm segment can only be judged from the initial PID \
                     namespace (its holders may run where this process cannot see)"
                        .into(),
                );
            }
            if pid_state(*pid) != PidState::Gone {
                return Verdict::Keep(format!("its creator pid {pid} runs"));
            }
            format!("libfabric shm segment of pid {pid}, which has exited")
        }
    };
    let h = holders_of.get_or_insert_with(|| holders(seg.dev));
    if let Some(pid) = h.held.get(&(seg.dev, seg.ino)) {
        return Verdict::Keep(format!(
            "{maker}, but pid {pid} still has it open or mapped"
        ));
    }
    // SAFETY: geteuid has no preconditions.
    let owner = unsafe { libc::geteuid() };
    let blind: Vec<String> = h
        .blind
        .iter()
        .filter(|&&p| could_hold(p, owner))
        .map(u32::to_string)
        .collect();
    if blind.is_empty() {
        return Verdict::Stale(maker);
    }
    // A process that could hold it cannot be looked into (a supervisor with
    // more privilege than this one, a non-dumpable process, another user's
    // while not root). Removing the name cannot harm it if it does: a
    // mapping or an open file outlives the name, and the only process that
    // would still open it by name is a late peer of a maker already proven
    // gone (pid free in this namespace; for fabkit also by start time). So
    // it is removed, and the line says who could not be seen.
    let more = if blind.len() > 3 { ", ..." } else { "" };
    Verdict::Stale(format!(
        "{maker}; the open files of pid {}{more} could not be read (a mapping there \
         would outlive the name)",
        blind[..blind.len().min(3)].join(", ")
    ))
}

/// Lists this user's segments in [`SHM_DIR`] that killed processes may have
/// left, each with its verdict: [`Verdict::Stale`] only when its maker no
/// longer runs in this PID namespace (its pid free or a zombie; for fabkit
/// segments also not recycled: the start time differs) and no process this
/// one can look into has it open or mapped. Processes that cannot be
/// looked into are named in the reason, not waited for: a mapping outlives
/// the name, so removing it harms only a late peer of a dead maker.
/// With `provider`, libfabric shm provider segments are judged too (only
/// from the initial PID namespace, which sees every process). fabkit
/// segments of live creators and provider segments of live pids are not
/// listed; other users' files and other names never are.
pub fn survey(provider: bool) -> Result<Vec<(Segment, Verdict)>> {
    let mut h = None;
    Ok(candidates(provider)?
        .into_iter()
        .map(|s| {
            let v = judge(&s, &mut h);
            (s, v)
        })
        .collect())
}

/// What [`remove`] did.
#[derive(Debug)]
pub enum Removal {
    /// Unlinked.
    Removed,
    /// Already gone (another start reaped it, or its job removed it).
    Gone,
    /// Kept after all: it changed or came back to life since the survey.
    Kept(String),
}

/// Removes a segment [`survey`] judged stale, after judging it again just
/// before: the name must still be the same file (device and inode), its
/// maker still gone and nobody holding it. (A process opening it between
/// that check and the unlink still could: no call unlinks a name only if
/// it is a given inode. Its maker is gone, so only a late peer of a dead
/// job could.)
pub fn remove(seg: &Segment) -> std::io::Result<Removal> {
    let path = Path::new(SHM_DIR).join(&seg.file);
    let meta = match path.symlink_metadata() {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Removal::Gone),
        Err(e) => return Err(e),
    };
    if (meta.dev(), meta.ino()) != (seg.dev, seg.ino) || !meta.file_type().is_file() {
        return Ok(Removal::Kept(
            "it was replaced by another file since it was looked at".into(),
        ));
    }
    if let Verdict::Keep(why) = judge(seg, &mut None) {
        return Ok(Removal::Kept(why));
    }
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(Removal::Removed),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Removal::Gone),
        Err(e) => Err(e),
    }
}

/// What [`reap_stale`] did.
#[derive(Debug, Default)]
pub struct Reaped {
    /// Names removed, each with why.
    pub removed: Vec<(String, String)>,
    /// Names that could not be removed, or the listing that failed.
    pub failed: Vec<(String, String)>,
}

/// Removes this user's fabkit segments from [`SHM_DIR`] whose creating
/// process no longer exists in this PID namespace and that no process
/// holds (a rank killed before it could unlink), judged as [`survey`]
/// judges. Segments of live processes, other users and other PID
/// namespaces are left alone. A failure is noted and the rest still done:
/// called at the start of every same-node transport, which must start
/// whatever was left. `fabkit clean` does the same and more.
pub fn reap_stale() -> Reaped {
    let mut out = Reaped::default();
    let found = match survey(false) {
        Ok(f) => f,
        Err(e) => {
            out.failed.push((SHM_DIR.into(), e.to_string()));
            return out;
        }
    };
    for (seg, verdict) in found {
        let Verdict::Stale(why) = verdict else {
            continue;
        };
        match remove(&seg) {
            Ok(Removal::Removed) => out.removed.push((seg.file, why)),
            Ok(Removal::Gone | Removal::Kept(_)) => {}
            Err(e) => out.failed.push((seg.file, e.to_string())),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::shm::segment_name;
    use crate::shm::tests::Unlink;
    use crate::shm::{SharedSegment, PREFIX};

    /// Held by the tests that make a dead creator's segment: each reaps
    /// every stale segment of this user, the other's fixture included (it
    /// vanished mid-test, 2 runs in 10, before this).
    fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
        static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
        LOCK.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    #[test]
    fn reaping_removes_a_dead_creators_segment_only() {
        let _one = one_at_a_time();
        // A child that exits at once: its pid is free after wait().
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let me = Creator::current();
        let dead = format!("{PREFIX}{}.{}.{pid}.1.test-dead-0", me.job, me.pid_ns);
        let live = segment_name("test-live").unwrap();
        let _g = (Unlink(dead.clone()), Unlink(live.clone()));
        std::fs::write(Path::new(SHM_DIR).join(&dead), [0u8; 8]).unwrap();
        let seg = SharedSegment::create(&live, 8).unwrap();
        let reaped = reap_stale();
        assert!(reaped.failed.is_empty(), "{reaped:?}");
        // Removed by this call, or by a rank starting elsewhere on this
        // machine just before: gone either way, and never the live one.
        assert!(!Path::new(SHM_DIR).join(&dead).exists());
        assert!(Path::new(SHM_DIR).join(&live[1..]).exists());
        assert!(
            reaped.removed.iter().all(|(r, _)| *r != live[1..]),
            "{reaped:?}"
        );
        drop(seg);
    }

    #[test]
    fn a_dead_creators_segment_still_mapped_is_kept_and_a_replaced_one_is_not_removed() {
        let _one = one_at_a_time();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let me = Creator::current();
        let dead = format!("{PREFIX}{}.{}.{pid}.1.test-held-0", me.job, me.pid_ns);
        let _g = Unlink(dead.clone());
        let path = Path::new(SHM_DIR).join(&dead);
        std::fs::write(&path, [0u8; 8]).unwrap();
        let found = survey(false).unwrap();
        let (seg, verdict) = found.iter().find(|(s, _)| s.file == dead).unwrap();
        assert!(matches!(verdict, Verdict::Stale(_)), "{verdict:?}");
        // The name now holds another file: the old judgement does not
        // remove it.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, [0u8; 8]).unwrap();
        // (A tmpfs may hand the freed inode number straight back.)
        if std::fs::metadata(&path).unwrap().ino() != seg.ino {
            assert!(matches!(remove(seg), Ok(Removal::Kept(_))));
            assert!(path.exists());
        }
        // Open in a live process (a child holding it as its stdin, as a
        // peer of the dead creator would hold it): kept, naming the holder.
        struct Reap(std::process::Child);
        impl Drop for Reap {
            fn drop(&mut self) {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
        let mut holder = Reap(
            std::process::Command::new("sleep")
                .arg("600")
                .stdin(std::fs::File::open(&path).unwrap())
                .spawn()
                .unwrap(),
        );
        let verdict = |file: &str| {
            survey(false)
                .unwrap()
                .into_iter()
                .find(|(s, _)| s.file == file)
                .unwrap()
        };
        let (seg, v) = verdict(&dead);
        match &v {
            Verdict::Keep(why) => assert!(
                why.contains(&format!("pid {} still has it open", holder.0.id())),
                "{why}"
            ),
            v => panic!("{v:?}"),
        }
        assert!(matches!(remove(&seg), Ok(Removal::Kept(_))));
        assert!(path.exists());
        holder.0.kill().unwrap();
        holder.0.wait().unwrap();
        let (seg, v) = verdict(&dead);
        assert!(matches!(v, Verdict::Stale(_)), "{v:?}");
        assert!(matches!(remove(&seg), Ok(Removal::Removed | Removal::Gone)));
        assert!(!path.exists());
    }
}
