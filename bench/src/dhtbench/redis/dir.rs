//! The private directory a server writes in: created mode 0700 under
//! `$TMPDIR`, held by a lock while its fabkit lives, removed on drop; a
//! later start removes the ones dead runs left.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{anyhow, Context, Result};

use super::shorten;
use crate::held;

/// Log lines quoted in an error about a server that exited, and the
/// characters kept of each (redis's warnings run to 300 and more).
const LOG_LINES: usize = 3;
const LOG_LINE_CHARS: usize = 160;

/// A directory only this server uses, removed (with all in it) on drop.
#[derive(Debug)]
pub(super) struct PrivateDir {
    pub(super) path: PathBuf,
    /// Its `LOCK`, held while this fabkit lives ([`held`]): a later start
    /// tells a dead run's directory from a live one's.
    _held: held::Held,
}

/// Removes the directories of servers whose fabkit was killed before it
/// could (the death signal ends the servers, but a SIGKILLed process
/// removes nothing): `fabkit-redis-PID-N` of this user whose `LOCK` is no
/// longer held ([`held::reap`]). One without a lock file, or whose lock is
/// held, is kept; a failure to remove one is no reason not to start.
/// Returns the ones removed, or with `dry_run` the ones that would be
/// (`fabkit clean`).
pub(crate) fn reap_stale(base: &Path, dry_run: bool) -> Vec<PathBuf> {
    held::reap(base, |name| stale_pid(name).is_some(), dry_run)
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
        reap_stale(&base, false);
        let mut last = None;
        for _ in 0..100 {
            let n = SEQ.fetch_add(1, Ordering::Relaxed);
            let path = base.join(format!("fabkit-redis-{}-{n}", std::process::id()));
            match held::make(&path) {
                Ok(h) => {
                    return Ok(PrivateDir {
                        path: h.path.clone(),
                        _held: h,
                    })
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
