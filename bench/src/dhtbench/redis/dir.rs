//! The private directory a server writes in: created mode 0700 under
//! `$TMPDIR`, held by a lock while its fabkit lives, removed on drop; a
//! later start removes the ones dead runs left.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{anyhow, Context, Result};

use super::shorten;

/// Log lines quoted in an error about a server that exited, and the
/// characters kept of each (redis's warnings run to 300 and more).
const LOG_LINES: usize = 3;
const LOG_LINE_CHARS: usize = 160;

/// A directory only this server uses, removed (with all in it) on drop.
#[derive(Debug)]
pub(super) struct PrivateDir {
    pub(super) path: PathBuf,
    /// `LOCK` inside, held (flock) while this fabkit lives: the kernel
    /// drops it when the process ends however it ends, so a later start
    /// can tell a dead run's directory from a live one's in any PID
    /// namespace or container that shares $TMPDIR.
    _lock: fs::File,
}

/// The lock file of a server directory.
pub(super) const LOCK: &str = "LOCK";

/// Takes `file`'s flock exclusively, without waiting; whether it was free.
fn try_lock(file: &fs::File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor `file` owns; no memory is passed.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// Removes the directories of servers whose fabkit was killed before it
/// could (the death signal ends the servers, but a SIGKILLed process
/// removes nothing): `fabkit-redis-PID-N` of this user whose `LOCK` is no
/// longer held. One without a lock file, or whose lock is held, is kept; a
/// failure to remove one is no reason not to start.
pub(super) fn reap_stale(base: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = fs::read_dir(base) else {
        return;
    };
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        // A directory still being made (`.new`, see `PrivateDir::create`)
        // lives microseconds; one a minute old was left by a run killed
        // while making it.
        if let Some(made) = name.strip_suffix(".new") {
            let old = fs::symlink_metadata(e.path()).ok().is_some_and(|m| {
                m.is_dir()
                    && m.uid() == me
                    && m.modified()
                        .ok()
                        .and_then(|t| t.elapsed().ok())
                        .is_some_and(|age| age > std::time::Duration::from_secs(60))
            });
            if stale_pid(made).is_some() && old {
                let _ = fs::remove_dir_all(e.path());
            }
            continue;
        }
        let Some(pid) = stale_pid(&name) else {
            continue;
        };
        let Ok(meta) = fs::symlink_metadata(e.path()) else {
            continue;
        };
        if !meta.is_dir() || meta.uid() != me || pid == std::process::id() {
            continue;
        }
        // The lock is taken through a file that must not be a link.
        let lock = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(e.path().join(LOCK));
        if lock.is_ok_and(|f| try_lock(&f)) {
            let _ = fs::remove_dir_all(e.path());
        }
    }
}

/// The PID in a server directory's name `fabkit-redis-PID-N`.
pub(super) fn stale_pid(name: &str) -> Option<u32> {
    let (pid, n) = name.strip_prefix("fabkit-redis-")?.split_once('-')?;
    n.parse::<u64>().ok()?;
    pid.parse::<u32>().ok().filter(|p| *p > 0)
}

impl PrivateDir {
    /// Creates `$TMPDIR/fabkit-redis-PID-N`, readable by us alone. A name
    /// left by an earlier fabkit with the same pid (killed before it could
    /// clean up) is skipped, not reused.
    pub(super) fn create() -> Result<PrivateDir> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let base = std::env::temp_dir();
        reap_stale(&base);
        let mut last = None;
        for _ in 0..100 {
            let n = SEQ.fetch_add(1, Ordering::Relaxed);
            let path = base.join(format!("fabkit-redis-{}-{n}", std::process::id()));
            // Made under a name the reaper does not take (`.new`), locked,
            // then renamed: another fabkit's reaper must never see the
            // directory between its creation and its lock, which it would
            // take for a dead run's and remove.
            let fresh = path.with_extension("new");
            if path.exists() {
                last = Some(path);
                continue;
            }
            match fs::DirBuilder::new().mode(0o700).create(&fresh) {
                Ok(()) => {
                    let made = fs::File::create(fresh.join(LOCK))
                        .with_context(|| format!("creating {}/{LOCK}", fresh.display()))
                        .and_then(|lock| {
                            anyhow::ensure!(
                                try_lock(&lock),
                                "{}/{LOCK} is locked by another process",
                                fresh.display()
                            );
                            Ok(lock)
                        })
                        .and_then(|lock| {
                            fs::rename(&fresh, &path).with_context(|| {
                                format!("renaming {} to {}", fresh.display(), path.display())
                            })?;
                            Ok(lock)
                        });
                    match made {
                        Ok(lock) => return Ok(PrivateDir { path, _lock: lock }),
                        Err(e) => {
                            let _ = fs::remove_dir_all(&fresh);
                            return Err(e);
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(path),
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!("creating a directory for redis-server: {}", path.display())
                    })
                }
            }
        }
        Err(anyhow!(
            "creating a directory for redis-server: 100 names in {} were taken (last {:?})",
            base.display(),
            last
        ))
    }

    /// The last lines of the server's log (and of what it printed before
    /// the log opened), on one line, without redis's pid and time stamps.
    pub(super) fn log_tail(&self) -> String {
        let mut lines = Vec::new();
        for name in ["stdio.log", "redis.log"] {
            if let Ok(text) = fs::read_to_string(self.path.join(name)) {
                let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
                let from = all.len().saturating_sub(LOG_LINES);
                lines.extend(
                    all[from..]
                        .iter()
                        .map(|l| shorten(log_message(l), LOG_LINE_CHARS)),
                );
            }
        }
        if lines.is_empty() {
            "(empty)".to_owned()
        } else {
            lines.join(" | ")
        }
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        // Nothing to report to from a drop; a failure leaves a directory in
        // $TMPDIR, which `ls` shows by its name.
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// The message of a redis log line: `8115:M 26 Nov 2026 11:36:59.050 # msg`
/// becomes `msg`; a line of another shape is kept whole.
pub(super) fn log_message(line: &str) -> &str {
    let parts: Vec<&str> = line.splitn(7, ' ').collect();
    match parts.as_slice() {
        [role, _day, _month, _year, _time, level, msg]
            if role.contains(':') && level.len() == 1 =>
        {
            msg
        }
        _ => line,
    }
}
