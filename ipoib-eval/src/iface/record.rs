//! The record: an interface's settings written to [`RECORD_DIR`] before
//! the first change, held (and locked) while a sweep or server runs, put
//! back when the [`Held`] value goes or by `ipoib-eval restore` after a
//! crash.

use std::path::PathBuf;
use std::time::Duration;

use super::set::restore;
use super::{read, this_netns, valid_name, IfaceError, Saved, RECORD_DIR};

/// The record's path for `iface` in the namespace with inode `netns`.
pub fn record_path(netns: u64, iface: &str) -> PathBuf {
    PathBuf::from(format!("{RECORD_DIR}/{netns}-{iface}.json"))
}

fn load(path: &std::path::Path) -> Result<Saved, IfaceError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| IfaceError(format!("reading {}: {e}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| {
        IfaceError(format!(
            "{} is not an ipoib-eval record ({e}): remove it after checking the interface",
            path.display()
        ))
    })
}

/// The record and its path, taken by whichever restores first (the owner
/// or the signal thread), held while it restores.
type Pending = std::sync::Arc<std::sync::Mutex<Option<(Saved, PathBuf)>>>;

/// Restores a pending record once, removing it if everything went back.
fn restore_pending(p: &Pending) -> Result<(), IfaceError> {
    let mut g = p.lock().unwrap_or_else(|e| e.into_inner());
    let Some((saved, path)) = g.take() else {
        return Ok(());
    };
    restore(&saved)?;
    std::fs::remove_file(&path).map_err(|e| IfaceError(format!("removing {}: {e}", path.display())))
}

/// An interface whose settings are recorded; dropping it restores them.
#[derive(Debug)]
pub struct Held {
    saved: Saved,
    pending: Pending,
    _undo: fabkit_netns::cleanup::Registered,
    /// The record's lock: one sweep or server per interface.
    lock: (std::fs::File, PathBuf),
}

impl Held {
    /// The settings from before.
    pub fn saved(&self) -> &Saved {
        &self.saved
    }

    /// Restores now, removing the record if everything went back.
    pub fn restore(&mut self) -> Result<(), IfaceError> {
        restore_pending(&self.pending)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Err(e) = self.restore() {
            eprintln!("ipoib-eval: {e} (the record stays: `ipoib-eval restore` tries again)");
        }
        // Still locked: nobody waits on it (holders take it or give up).
        let _ = std::fs::remove_file(&self.lock.1);
    }
}

/// Records `iface`'s settings (or takes the record a crashed run left)
/// before anything changes them. The second value says the record was
/// left by an earlier run. One process at a time holds an interface.
pub fn hold(iface: &str) -> Result<(Held, bool), IfaceError> {
    let now = read(iface)?;
    let path = record_path(now.netns, iface);
    std::fs::create_dir_all(RECORD_DIR)
        .map_err(|e| IfaceError(format!("creating {RECORD_DIR}: {e}")))?;
    let lock_path = path.with_extension("lock");
    let lock =
        fabkit_netns::lock_file(&lock_path.to_string_lossy(), Duration::ZERO).map_err(|_| {
            IfaceError(format!(
                "{iface} is held by another ipoib-eval sweep or server (see `fuser {}`)",
                lock_path.display()
            ))
        })?;
    let (saved, earlier) = if path.exists() {
        let old = load(&path)?;
        if old.address != now.address {
            return Err(IfaceError(format!(
                "{}: its record is for another device (address {}, {iface} has {}); remove \
                 the record if that device is gone",
                path.display(),
                old.address,
                now.address
            )));
        }
        (old, true)
    } else {
        let tmp = path.with_extension("tmp");
        let text = serde_json::to_string_pretty(&now).unwrap_or_default();
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::File::open(&tmp)?.sync_all())
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| IfaceError(format!("writing {}: {e}", path.display())))?;
        (now, false)
    };
    let pending: Pending = std::sync::Arc::new(std::sync::Mutex::new(Some((saved.clone(), path))));
    let (p, l) = (pending.clone(), lock_path.clone());
    let undo = fabkit_netns::cleanup::register(move || match restore_pending(&p) {
        // The process ends next: its lock goes with it.
        Ok(()) => {
            let _ = std::fs::remove_file(&l);
        }
        Err(e) => eprintln!("ipoib-eval: {e} (`ipoib-eval restore` tries again)"),
    });
    Ok((
        Held {
            saved,
            pending,
            _undo: undo,
            lock: (lock, lock_path),
        },
        earlier,
    ))
}

/// Replays the records of this network namespace (all, or `iface`'s),
/// removing each that went back; returns the interfaces restored.
pub fn restore_recorded(iface: Option<&str>) -> Result<Vec<String>, IfaceError> {
    if let Some(i) = iface {
        valid_name(i)?;
    }
    let netns = this_netns()?;
    let prefix = format!("{netns}-");
    let entries = match std::fs::read_dir(RECORD_DIR) {
        Ok(rd) => rd.filter_map(Result::ok).collect::<Vec<_>>(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(IfaceError(format!("reading {RECORD_DIR}: {e}"))),
    };
    let mut done = Vec::new();
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name
            .strip_prefix(&prefix)
            .and_then(|r| r.strip_suffix(".json"))
        else {
            continue;
        };
        if iface.is_some_and(|i| i != rest) {
            continue;
        }
        // A record whose owner still runs is not a crash's: leave it.
        let lock_path = e.path().with_extension("lock");
        let Ok(_lock) = fabkit_netns::lock_file(&lock_path.to_string_lossy(), Duration::ZERO)
        else {
            return Err(IfaceError(format!(
                "{rest} is held by a running ipoib-eval sweep or server: stop it instead \
                 (it restores on exit)"
            )));
        };
        let s = load(&e.path())?;
        restore(&s)?;
        std::fs::remove_file(e.path())
            .map_err(|x| IfaceError(format!("removing {}: {x}", e.path().display())))?;
        let _ = std::fs::remove_file(&lock_path);
        done.push(s.iface);
    }
    Ok(done)
}
