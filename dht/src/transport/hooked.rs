//! A transport that calls the test's hooks around each batch: before it (a
//! claimer stalled between two batches of its operation, as long as the
//! test likes, without sleeping) and after it (what another rank sees the
//! moment a release lands, before anything delayed past it). A test double,
//! always compiled, like [`super::recording`].

use std::sync::{Mutex, PoisonError};

use super::wrap::WrapperLane;
use super::{Op, Transport};

/// A hook: called with the batch's ops (after: as executed). It must not
/// execute on the transport it is hooked to.
pub type Hook = Box<dyn FnMut(&[Op<'_>]) + Send>;

/// Wraps a transport and runs a hook before and after each batch.
pub struct HookedTransport<T> {
    inner: T,
    before: Mutex<Option<Hook>>,
    after: Mutex<Option<Hook>>,
}

impl<T> HookedTransport<T> {
    /// `inner`, with no hooks yet.
    pub fn new(inner: T) -> Self {
        HookedTransport {
            inner,
            before: Mutex::new(None),
            after: Mutex::new(None),
        }
    }

    /// Sets (or, with `None`, removes) the hook run before each batch.
    pub fn before(&self, hook: Option<Hook>) {
        *self.before.lock().unwrap_or_else(PoisonError::into_inner) = hook;
    }

    /// Sets (or, with `None`, removes) the hook run after each batch.
    pub fn after(&self, hook: Option<Hook>) {
        *self.after.lock().unwrap_or_else(PoisonError::into_inner) = hook;
    }

    /// The wrapped transport.
    pub fn inner(&self) -> &T {
        &self.inner
    }
}

impl<T> std::fmt::Debug for HookedTransport<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HookedTransport")
    }
}

fn run(hook: &Mutex<Option<Hook>>, ops: &[Op<'_>]) {
    if let Some(h) = hook.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
        h(ops);
    }
}

impl<T: Transport> super::wrap::Wrapper for HookedTransport<T> {
    type Inner = T;
    type OwnLane = ();

    fn inner(&self) -> &T {
        &self.inner
    }
    fn name(&self) -> String {
        format!("hooked {}", self.inner.name())
    }
    fn execute(&self, ops: &mut [Op<'_>]) -> Result<(), T::Error> {
        run(&self.before, ops);
        let r = self.inner.execute(ops);
        run(&self.after, ops);
        r
    }
    /// The hook before runs as the batch is posted; the hook after, once
    /// it has completed (at once, unless it is in flight).
    fn post(&self, lane: &mut WrapperLane<Self>, ops: &mut [Op<'_>]) -> Result<bool, T::Error> {
        run(&self.before, ops);
        let r = self.inner.post(&mut lane.inner, ops);
        if !matches!(r, Ok(true)) {
            run(&self.after, ops);
        }
        r
    }
    fn complete(&self, lane: &mut WrapperLane<Self>, ops: &mut [Op<'_>]) -> Result<(), T::Error> {
        let r = self.inner.complete(&mut lane.inner, ops);
        run(&self.after, ops);
        r
    }
}
