//! `fabkit clean`: removes the shared-memory segments that killed ranks
//! left in /dev/shm, and nothing else.
//!
//! Two kinds are removed, both only when they belong to this user:
//! - fabkit's own (`fabkit.<job>.<pid namespace>.<pid>.<start>.<what>`,
//!   see `fabkit_fabric::shm`), when the process that made them no longer
//!   exists in this PID namespace;
//! - the libfabric shm provider's, which it names `<pid>:<uid>:<endpoint>`
//!   (libfabric 1.17, `prov/shm`: the default endpoint name when no source
//!   address is given), when no live process has them open or mapped.
//!
//! Either kind is kept while any process still has it open or mapped (a
//! live job's), as seen in `/proc/<pid>/fd` and `/proc/<pid>/maps`. Only
//! the processes this user can see there count: a process of another user
//! cannot open this user's segments (they are made 0600) unless it is root.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use anyhow::{Context, Result};
use clap::Args;
use fabkit_fabric::shm::{parse_name, Liveness, SHM_DIR};

/// Arguments of `fabkit clean`.
#[derive(Args, Debug)]
pub struct CleanArgs {
    /// Say what would be removed, and remove nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// A segment that may be removed unless a live process holds it.
struct Candidate {
    file: String,
    why: String,
}

/// Whether `file` is named as the libfabric shm provider names an
/// endpoint's region for user `uid`: `<pid>:<uid>:<index>`.
fn provider_segment(file: &str, uid: u32) -> Option<u32> {
    let mut f = file.split(':');
    let pid: u32 = f.next()?.parse().ok()?;
    let owner: u32 = f.next()?.parse().ok()?;
    let _index: u32 = f.next()?.parse().ok()?;
    (f.next().is_none() && owner == uid).then_some(pid)
}

/// The segments (file names in /dev/shm) some process has open or mapped,
/// and one pid holding each.
fn held_segments() -> HashMap<String, u32> {
    let mut held = HashMap::new();
    let prefix = format!("{SHM_DIR}/");
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return held;
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let mut note = |path: &str| {
            if let Some(file) = path.strip_prefix(&prefix) {
                let file = file.strip_suffix(" (deleted)").unwrap_or(file);
                held.entry(file.to_string()).or_insert(pid);
            }
        };
        // Open files first, then mappings: a process between shm_open and
        // mmap is seen in one or the other (it maps before it closes).
        if let Ok(fds) = std::fs::read_dir(p.path().join("fd")) {
            for fd in fds.flatten() {
                if let Ok(target) = std::fs::read_link(fd.path()) {
                    note(&target.to_string_lossy());
                }
            }
        }
        if let Ok(maps) = std::fs::read_to_string(p.path().join("maps")) {
            for line in maps.lines() {
                // address perms offset dev inode path: the path is the rest
                // after five fields (it may hold spaces).
                let path = line.splitn(6, ' ').nth(5).unwrap_or("").trim_start();
                note(path);
            }
        }
    }
    held
}

/// What is left in /dev/shm that `fabkit clean` may remove.
fn candidates(dir: &Path) -> Result<Vec<Candidate>> {
    // SAFETY: geteuid and getuid have no preconditions.
    let (euid, uid) = unsafe { (libc::geteuid(), libc::getuid()) };
    let mut found = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
        Err(e) => return Err(e).with_context(|| format!("listing {}", dir.display())),
    };
    for e in entries.flatten() {
        let Ok(file) = e.file_name().into_string() else {
            continue;
        };
        let Ok(meta) = e.path().symlink_metadata() else {
            continue;
        };
        if !meta.file_type().is_file() || meta.uid() != euid {
            continue;
        }
        let why = if let Some((creator, what)) = parse_name(&file) {
            if creator.liveness() != Liveness::Dead {
                continue;
            }
            format!(
                "fabkit segment ({what}, job {}) of pid {}, which has exited",
                creator.job, creator.pid
            )
        } else if let Some(pid) =
            provider_segment(&file, uid).or_else(|| provider_segment(&file, euid))
        {
            format!("libfabric shm segment of pid {pid}, mapped by no process")
        } else {
            continue;
        };
        found.push(Candidate { file, why });
    }
    found.sort_by(|a, b| a.file.cmp(&b.file));
    Ok(found)
}

/// Runs `fabkit clean`: one line per segment removed (or, with
/// `--dry-run`, that would be), or "nothing to remove". False when a
/// removal failed.
pub fn run(args: &CleanArgs) -> Result<bool> {
    let dir = Path::new(SHM_DIR);
    let found = candidates(dir)?;
    // Looked at after listing: a segment made later is no candidate.
    let held = if found.is_empty() {
        HashMap::new()
    } else {
        held_segments()
    };
    let mut ok = true;
    let mut removed = 0usize;
    for c in &found {
        let path = dir.join(&c.file);
        if let Some(pid) = held.get(&c.file) {
            println!(
                "kept {}: {}, but pid {pid} still has it open",
                path.display(),
                c.why
            );
            continue;
        }
        if args.dry_run {
            println!("would remove {}: {}", path.display(), c.why);
            removed += 1;
            continue;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => {
                println!("removed {}: {}", path.display(), c.why);
                removed += 1;
            }
            // Gone meanwhile (its job ended, or a starting rank reaped it).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                eprintln!("fabkit: error: could not remove {}: {e}", path.display());
                ok = false;
            }
        }
    }
    if removed == 0 && ok {
        println!("nothing to remove in {SHM_DIR}");
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_names_are_pid_uid_index_of_this_user() {
        assert_eq!(provider_segment("19403:0:0", 0), Some(19403));
        assert_eq!(provider_segment("19403:1000:12", 1000), Some(19403));
        for other in [
            "19403:1000:0",
            "19403:0",
            "19403:0:0:1",
            "x:0:0",
            "fabkit.a.1.2.3.w",
        ] {
            assert_eq!(provider_segment(other, 0), None, "{other}");
        }
    }
}
