//! A transport that logs every batch it executes, for tests that assert the
//! exact remote operations a variant issues.

use std::sync::Mutex;

use fabkit_fabric::{Op, OpKind, Remote, Result};

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

/// Wraps a transport and records its batches.
#[derive(Debug)]
pub struct RecordingTransport<T> {
    inner: T,
    log: Mutex<Vec<Vec<Logged>>>,
}

impl<T: Transport> RecordingTransport<T> {
    /// Records what `inner` executes.
    pub fn new(inner: T) -> Self {
        RecordingTransport {
            inner,
            log: Mutex::new(Vec::new()),
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

    /// Forgets the log.
    pub fn clear(&self) {
        self.log.lock().unwrap().clear();
    }
}

impl<T: Transport> Transport for RecordingTransport<T> {
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn ranks(&self) -> usize {
        self.inner.ranks()
    }
    fn region_len(&self, rank: usize) -> usize {
        self.inner.region_len(rank)
    }
    fn has_atomics(&self) -> bool {
        self.inner.has_atomics()
    }
    fn name(&self) -> String {
        format!("recording {}", self.inner.name())
    }
    fn execute(&self, ops: &mut [Op<'_>]) -> Result<()> {
        let batch = ops
            .iter()
            .map(|o| Logged {
                kind: o.kind(),
                at: o.target(),
                len: o.len(),
            })
            .collect();
        self.log.lock().unwrap().push(batch);
        self.inner.execute(ops)
    }
}
