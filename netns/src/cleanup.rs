//! What an interrupted run must undo: testbeds it built and interface
//! settings it changed. Owners register an undo step while the thing
//! exists and drop the registration when they undo it themselves;
//! [`on_signals`] runs whatever is still registered when SIGINT, SIGTERM
//! or SIGHUP arrives, then ends the process with 128 + the signal.
//! Children a run starts go with it ([`child_dies_with_us`]).
//!
//! eBPF links need nothing here: they go away with the process.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, RwLock, RwLockReadGuard};

type Undo = Box<dyn FnOnce() + Send>;

/// Undo steps by registration number.
#[derive(Default)]
struct Steps {
    list: Mutex<Vec<(u64, Undo)>>,
    next: AtomicU64,
}

impl Steps {
    const fn new() -> Steps {
        Steps {
            list: Mutex::new(Vec::new()),
            next: AtomicU64::new(0),
        }
    }

    fn register(&'static self, undo: Undo) -> Registered {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().push((id, undo));
        Registered { steps: self, id }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(u64, Undo)>> {
        // A step that panicked leaves the list as it was: use it.
        self.list.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn run_all(&self) {
        let steps = std::mem::take(&mut *self.lock());
        for (_, undo) in steps.into_iter().rev() {
            undo();
        }
    }
}

/// The process's steps.
static STEPS: Steps = Steps::new();

/// A registered undo step; dropping it unregisters the step without
/// running it (its owner undid the thing itself).
#[must_use = "dropping the registration unregisters the step at once"]
pub struct Registered {
    steps: &'static Steps,
    id: u64,
}

impl std::fmt::Debug for Registered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Registered({})", self.id)
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.steps.lock().retain(|(id, _)| *id != self.id);
    }
}

/// Registers `undo`, run if the process is interrupted while the returned
/// value lives.
pub fn register(undo: impl FnOnce() + Send + 'static) -> Registered {
    STEPS.register(Box::new(undo))
}

/// Set when a terminating signal arrived: no new change may start.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);
/// Held (shared) around each change the undo steps must see whole, such as
/// creating a namespace; the signal thread takes it exclusively, so undo
/// never runs beside a half-made change, and none starts after it.
static GATE: RwLock<()> = RwLock::new(());

/// The process is being interrupted: the change was not started.
#[derive(Debug, thiserror::Error)]
#[error("interrupted: not started")]
pub struct Interrupted;

/// Permission to make one change that an undo step will have to find
/// (hold it for the change only; never take a second one while holding
/// one).
#[derive(Debug)]
pub struct Gate {
    _shared: RwLockReadGuard<'static, ()>,
}

/// Takes the gate for one change, unless the process is being interrupted.
pub fn gate() -> Result<Gate, Interrupted> {
    let g = GATE.read().unwrap_or_else(|p| p.into_inner());
    if INTERRUPTED.load(Ordering::SeqCst) {
        return Err(Interrupted);
    }
    Ok(Gate { _shared: g })
}

/// What the signal thread is doing, for the program to tell its user in
/// its own words (it knows what it registered and how to finish the job).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signalled {
    /// A terminating signal arrived: the registered steps run now, then the
    /// process ends; a second signal ends it at once.
    Undoing {
        /// The signal's number.
        signal: i32,
    },
    /// A second signal arrived: the process ends now, with steps not run.
    Abandoned {
        /// The signal's number.
        signal: i32,
    },
}

/// From now on, SIGINT, SIGTERM and SIGHUP undo what is registered and end
/// the process (exit 128 + signal), telling `say` first. Call first thing
/// in `main`, before any thread starts: the signals are blocked in the
/// calling thread and in every thread it starts later, and taken by a
/// thread of their own.
pub fn on_signals(say: fn(Signalled)) -> std::io::Result<()> {
    crate::sys::block_terminating()?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let sig = crate::sys::wait_terminating();
            say(Signalled::Undoing { signal: sig });
            // A second signal ends the process without waiting for the undo.
            let _ = std::thread::Builder::new()
                .name("signals-2".into())
                .spawn(move || {
                    let again = crate::sys::wait_terminating();
                    say(Signalled::Abandoned { signal: again });
                    std::process::exit(128 + again);
                });
            // No change starts from now on; the ones under way finish first.
            INTERRUPTED.store(true, Ordering::SeqCst);
            let _all = GATE.write().unwrap_or_else(|p| p.into_inner());
            STEPS.run_all();
            std::process::exit(128 + sig);
        })?;
    Ok(())
}

pub use crate::sys::{child_takes_terminating, HeldTerminating};

/// Makes a child started by `cmd` be killed when the thread that started
/// it ends, so an interrupted run leaves no such process behind (and takes
/// signals normally, whatever the mask [`on_signals`] set in the thread
/// that forks).
pub fn child_dies_with_us(cmd: &mut std::process::Command) {
    crate::sys::child_dies_with_us(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn steps_run_once_newest_first_unless_unregistered() {
        // A list of its own: the process's may hold other tests' steps.
        let steps: &'static Steps = Box::leak(Box::default());
        let log = Arc::new(Mutex::new(Vec::new()));
        let step = |n: u32| {
            let log = log.clone();
            steps.register(Box::new(move || log.lock().unwrap().push(n)))
        };
        let (_a, b, _c) = (step(1), step(2), step(3));
        drop(b);
        steps.run_all();
        assert_eq!(*log.lock().unwrap(), [3, 1]);
        steps.run_all();
        assert_eq!(log.lock().unwrap().len(), 2, "run once");
    }
}
