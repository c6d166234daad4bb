//! A transport that logs every batch it executes, for tests that assert the
//! exact remote operations a variant issues.

use std::sync::Mutex;

use fabkit_core::{Completion, Op, OpKind, Remote};

use super::{Caps, Transport};

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

/// Wraps a transport and records its batches.
#[derive(Debug)]
pub struct RecordingTransport<T> {
    inner: T,
    log: Mutex<Vec<Vec<Logged>>>,
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

impl<T: Transport> Transport for RecordingTransport<T> {
    type Error = T::Error;

    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn ranks(&self) -> usize {
        self.inner.ranks()
    }
    fn region_len(&self, rank: usize) -> usize {
        self.inner.region_len(rank)
    }
    fn caps(&self) -> Caps {
        self.inner.caps()
    }
    fn name(&self) -> String {
        format!("recording {}", self.inner.name())
    }
    fn execute(&self, ops: &mut [Op<'_>]) -> Result<(), T::Error> {
        self.log(ops);
        self.inner.execute(ops)
    }
    type Lane = T::Lane;
    fn lane(&self) -> Result<T::Lane, T::Error> {
        self.inner.lane()
    }
    /// Logged as it is posted: batches of several lanes appear in the
    /// order they went out.
    fn post(&self, lane: &mut T::Lane, ops: &mut [Op<'_>]) -> Result<bool, T::Error> {
        self.log(ops);
        self.inner.post(lane, ops)
    }
    fn ready(&self, lane: &T::Lane) -> bool {
        self.inner.ready(lane)
    }
    fn complete(&self, lane: &mut T::Lane, ops: &mut [Op<'_>]) -> Result<(), T::Error> {
        self.inner.complete(lane, ops)
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
        log.push(batch);
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
}
