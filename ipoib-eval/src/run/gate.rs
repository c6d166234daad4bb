//! What the stream threads of one data phase share: the start line they
//! wait at (and that any of them can abort), and the counters each
//! publishes for the interval sampler.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use super::{failed, RunError};

/// The start line: every stream thread arms itself, then waits here.
#[derive(Debug, Default)]
pub(super) struct Gate {
    state: Mutex<GateState>,
    cv: Condvar,
    aborted: AtomicBool,
}

#[derive(Debug, Default)]
struct GateState {
    armed: usize,
    start: Option<Instant>,
    abort: Option<String>,
}

impl Gate {
    pub(super) fn arm(&self) {
        self.state.lock().unwrap().armed += 1;
        self.cv.notify_all();
    }

    pub(super) fn wait_armed(&self, n: usize, timeout: Duration) -> Result<(), RunError> {
        let g = self.state.lock().unwrap();
        let (g, _) = self
            .cv
            .wait_timeout_while(g, timeout, |s| s.armed < n && s.abort.is_none())
            .unwrap();
        if let Some(a) = &g.abort {
            return Err(failed(a.clone()));
        }
        if g.armed < n {
            return Err(failed(format!(
                "only {} of {n} stream threads got ready within {timeout:?}",
                g.armed
            )));
        }
        Ok(())
    }

    pub(super) fn open(&self) -> Instant {
        let now = Instant::now();
        self.state.lock().unwrap().start = Some(now);
        self.cv.notify_all();
        now
    }

    pub(super) fn wait(&self, timeout: Duration) -> Result<Instant, String> {
        let g = self.state.lock().unwrap();
        let (g, _) = self
            .cv
            .wait_timeout_while(g, timeout, |s| s.start.is_none() && s.abort.is_none())
            .unwrap();
        match (&g.abort, g.start) {
            (Some(a), _) => Err(a.clone()),
            (None, Some(t)) => Ok(t),
            (None, None) => Err(format!("the test did not start within {timeout:?}")),
        }
    }

    pub(super) fn abort(&self, why: String) {
        let mut g = self.state.lock().unwrap();
        if g.abort.is_none() {
            g.abort = Some(why);
        }
        self.aborted.store(true, Ordering::Relaxed);
        self.cv.notify_all();
    }

    pub(super) fn aborted(&self) -> bool {
        self.aborted.load(Ordering::Relaxed)
    }

    pub(super) fn abort_reason(&self) -> Option<String> {
        self.state.lock().unwrap().abort.clone()
    }
}

/// Counters a stream thread publishes for the interval sampler, and the
/// stop conditions the control reader sets for a receiver.
#[derive(Debug)]
pub(super) struct Live {
    pub(super) msgs: AtomicU64,
    pub(super) bytes: AtomicU64,
    pub(super) gaps: AtomicU64,
    pub(super) retransmits: AtomicU64,
    /// Receiver: messages the peer says it sent (u64::MAX: not known yet).
    pub(super) expected: AtomicU64,
    /// Receiver: stop reading at this many ns after the start (u64::MAX: no).
    pub(super) stop_at_ns: AtomicU64,
}

impl Default for Live {
    fn default() -> Self {
        Live {
            msgs: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            gaps: AtomicU64::new(0),
            retransmits: AtomicU64::new(0),
            expected: AtomicU64::new(u64::MAX),
            stop_at_ns: AtomicU64::new(u64::MAX),
        }
    }
}
