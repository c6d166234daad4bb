//! A transport that logs every batch it executes, for tests that assert the
//! exact remote operations a variant issues, and every region lock it is
//! asked for, in the order of the batches.

use std::sync::Mutex;

use fabkit_core::{Completion, Op, OpKind, Remote};

use super::wrap::WrapperLane;
use super::Transport;

/// One logged operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Logged {
    /// What it was.
    pub kind: OpKind,
    /// Where.
    pub at: Remote,
    /// Bytes (8 for atomics).
    pub len: usize,
}

/// One thing a [`RecordingTransport`] passed on, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A batch executed or posted, its ops in order.
    Batch(Vec<Logged>),
    /// [`Transport::lock_region`] was asked for.
    LockRegion {
        /// Whose region.
        rank: usize,
        /// Exclusive (a writer) or shared (a reader).
        exclusive: bool,
        /// Whether the transport took a lock of its own (`MPI_Win_lock`);
        /// false: it has none, or failed to take it.
        taken: bool,
    },
    /// [`Transport::unlock_region`] was asked for.
    UnlockRegion {
        /// Whose region.
        rank: usize,
    },
}

/// Wraps a transport and records its batches and region locks.
#[derive(Debug)]
pub struct RecordingTransport<T> {
    inner: T,
    log: Mutex<Vec<Event>>,
    /// Per batch, the completion each op asked for (writes only).
    completions: Mutex<Vec<Vec<Option<Completion>>>>,
}

impl<T: Transport> RecordingTransport<T> {
    /// Records what `inner` executes.
    pub fn new(inner: T) -> Self {
        RecordingTransport {
            inner,
            log: Mutex::new(Vec::new()),
            completions: Mutex::new(Vec::new()),
        }
    }

    /// Every batch so far, in order.
    pub fn batches(&self) -> Vec<Vec<Logged>> {
        let log = self.log.lock().unwrap();
        log.iter()
            .filter_map(|e| match e {
                Event::Batch(b) => Some(b.clone()),
                _ => None,
            })
            .collect()
    }

    /// Everything so far, in order: the batches of [`Self::batches`] and
    /// the region locks around them.
    pub fn events(&self) -> Vec<Event> {
        self.log.lock().unwrap().clone()
    }

    /// The kinds of all operations so far, batch by batch.
    pub fn kinds(&self) -> Vec<Vec<OpKind>> {
        self.batches()
            .iter()
            .map(|b| b.iter().map(|l| l.kind).collect())
            .collect()
    }

    /// The completion each operation asked for ([`Op::completion`]: `Some`
    /// for writes), batch by batch, in the order of [`Self::batches`].
    pub fn completions(&self) -> Vec<Vec<Option<Completion>>> {
        self.completions.lock().unwrap().clone()
    }

    /// Forgets the log.
    pub fn clear(&self) {
        let mut log = self.log.lock().unwrap();
        log.clear();
        self.completions.lock().unwrap().clear();
    }
}

impl<T: Transport> super::wrap::Wrapper for RecordingTransport<T> {
    type Inner = T;
    type OwnLane = ();

    fn inner(&self) -> &T {
        &self.inner
    }
    fn name(&self) -> String {
        format!("recording {}", self.inner.name())
    }
    fn execute(&self, ops: &mut [Op<'_>]) -> Result<(), T::Error> {
        self.log(ops);
        self.inner.execute(ops)
    }
    /// Logged as it is posted: batches of several lanes appear in the
    /// order they went out.
    fn post(&self, lane: &mut WrapperLane<Self>, ops: &mut [Op<'_>]) -> Result<bool, T::Error> {
        self.log(ops);
        self.inner.post(&mut lane.inner, ops)
    }
    /// Logged once answered, with whether the lock was taken.
    fn lock_region(&self, rank: usize, exclusive: bool) -> Result<bool, T::Error> {
        let r = self.inner.lock_region(rank, exclusive);
        self.log.lock().unwrap().push(Event::LockRegion {
            rank,
            exclusive,
            taken: matches!(r, Ok(true)),
        });
        r
    }
    /// Logged before it is passed on: after every batch under the lock.
    fn unlock_region(&self, rank: usize) -> Result<(), T::Error> {
        self.log.lock().unwrap().push(Event::UnlockRegion { rank });
        self.inner.unlock_region(rank)
    }
}

impl<T> RecordingTransport<T> {
    fn log(&self, ops: &[Op<'_>]) {
        let batch = ops
            .iter()
            .map(|o| Logged {
                kind: o.kind(),
                at: o.target(),
                len: o.len(),
            })
            .collect();
        let asked = ops.iter().map(Op::completion).collect();
        // Both logs under the first lock, so their batches stay aligned.
        let mut log = self.log.lock().unwrap();
        log.push(Event::Batch(batch));
        self.completions.lock().unwrap().push(asked);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::local::LocalTransport;

    #[test]
    fn records_the_completion_each_write_asked_for() {
        let g = LocalTransport::group(2, 64);
        let t = RecordingTransport::new(g[0].clone());
        let mut v = 0;
        t.execute(&mut [
            Op::Write {
                to: Remote::new(1, 0),
                from: &[1; 8],
                completion: Completion::Delivery,
            },
            Op::Fetch {
                at: Remote::new(1, 8),
                value: &mut v,
            },
        ])
        .unwrap();
        t.execute(&mut [Op::Write {
            to: Remote::new(1, 16),
            from: &[2; 8],
            completion: Completion::Transmit,
        }])
        .unwrap();
        assert_eq!(
            t.completions(),
            vec![
                vec![Some(Completion::Delivery), None],
                vec![Some(Completion::Transmit)]
            ]
        );
        assert_eq!(t.batches().len(), 2);
        t.clear();
        assert!(t.completions().is_empty());
    }

    #[test]
    fn region_locks_are_events_between_the_batches_not_batches() {
        let g = LocalTransport::group(2, 64);
        let t = RecordingTransport::new(g[0].clone());
        assert!(!t.lock_region(1, true).unwrap());
        let mut v = 0;
        t.execute(&mut [Op::Fetch {
            at: Remote::new(1, 8),
            value: &mut v,
        }])
        .unwrap();
        t.unlock_region(1).unwrap();
        assert_eq!(t.kinds(), vec![vec![OpKind::Fetch]]);
        assert_eq!(
            t.events(),
            vec![
                Event::LockRegion {
                    rank: 1,
                    exclusive: true,
                    taken: false
                },
                Event::Batch(t.batches()[0].clone()),
                Event::UnlockRegion { rank: 1 },
            ]
        );
        let t = RecordingTransport::new(g[0].clone().with_region_lock());
        assert!(t.lock_region(1, false).unwrap());
        assert!(matches!(
            t.events()[..],
            [Event::LockRegion { taken: true, .. }]
        ));
        t.unlock_region(1).unwrap();
        t.clear();
        assert!(t.events().is_empty());
    }
}
