//! Private directories a live fabkit holds: each has a `LOCK` file whose
//! flock the process takes when it makes the directory and keeps while it
//! lives. The kernel drops the lock however the process ends (SIGKILL
//! included), so a later run or `fabkit clean` tells a dead run's
//! directory from a live one's, in any PID namespace or container that
//! shares `$TMPDIR`, without guessing from process ids.

use std::fs;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The lock file in a held directory.
pub const LOCK: &str = "LOCK";

/// Takes `file`'s flock exclusively, without waiting; whether it was free.
pub fn try_lock(file: &fs::File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor `file` owns; no memory is passed.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// A private directory this process holds (see the module docs); the
/// lock goes with it when it is dropped, the directory stays (its owner
/// removes it).
#[derive(Debug)]
pub struct Held {
    /// Where it is.
    pub path: PathBuf,
    _lock: fs::File,
}

/// Makes `path` (which must not exist: a name that exists, a link
/// included, is refused with `AlreadyExists`) as a directory only this
/// user reads (0700), and holds it. It is made as `path.new`, locked, then
/// renamed: a reaper never sees it between its creation and its lock,
/// which it would take for a dead run's.
pub fn make(path: &Path) -> std::io::Result<Held> {
    use std::os::unix::fs::DirBuilderExt;
    if fs::symlink_metadata(path).is_ok() {
        return Err(std::io::ErrorKind::AlreadyExists.into());
    }
    let fresh = path.with_extension("new");
    fs::DirBuilder::new().mode(0o700).create(&fresh)?;
    let held = (|| {
        let lock = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(fresh.join(LOCK))?;
        if !try_lock(&lock) {
            return Err(std::io::Error::other(format!(
                "{}/{LOCK} is locked by another process",
                fresh.display()
            )));
        }
        // rename(2) would replace an empty directory made at `path`
        // meanwhile; checked once more just before.
        if fs::symlink_metadata(path).is_ok() {
            return Err(std::io::ErrorKind::AlreadyExists.into());
        }
        fs::rename(&fresh, path)?;
        Ok(lock)
    })();
    match held {
        Ok(lock) => Ok(Held {
            path: path.to_path_buf(),
            _lock: lock,
        }),
        Err(e) => {
            let _ = fs::remove_dir_all(&fresh);
            Err(e)
        }
    }
}

/// Whether `dir` is this user's directory (not a link) whose lock no
/// process holds: its maker ended. One without a lock file (not fabkit's)
/// is not.
pub fn abandoned(dir: &Path) -> bool {
    // The lock is taken through a file that must not be a link.
    mine(dir)
        && fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(dir.join(LOCK))
            .is_ok_and(|f| try_lock(&f))
}

/// Whether `dir` is a directory (not a link) of this user that only this
/// user may enter (0700, as [`make`] makes them).
fn mine(dir: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    fs::symlink_metadata(dir)
        .is_ok_and(|m| m.is_dir() && m.uid() == me && m.permissions().mode() & 0o077 == 0)
}

/// How old a half-made directory (`NAME.new`) must be to be taken for a
/// dead run's: making one takes microseconds.
const HALF_MADE: std::time::Duration = std::time::Duration::from_secs(60);

/// Removes (or with `dry_run` only lists) the abandoned directories in
/// `base` whose names `ours` accepts, and the half-made ones (`NAME.new`)
/// a run killed while making them left; returns them.
pub fn reap(base: &Path, ours: impl Fn(&str) -> bool, dry_run: bool) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(base) else {
        return Vec::new();
    };
    let mut reaped = Vec::new();
    for e in entries.flatten() {
        let (name, path) = (e.file_name(), e.path());
        let name = name.to_string_lossy();
        let gone = match name.strip_suffix(".new") {
            Some(made) => {
                ours(made)
                    && mine(&path)
                    && fs::symlink_metadata(&path)
                        .ok()
                        .and_then(|m| m.modified().ok())
                        .and_then(|t| t.elapsed().ok())
                        .is_some_and(|age| age > HALF_MADE)
            }
            None => ours(&name) && abandoned(&path),
        };
        if gone && (dry_run || fs::remove_dir_all(&path).is_ok()) {
            reaped.push(path);
        }
    }
    reaped
}
