//! Ranks as threads sharing their regions in one process: the test double
//! for a fabric. Regions are `AtomicU64` words and data is copied a word at a
//! time, so a reader can see half of a concurrent write (a torn read) exactly
//! as over RDMA, without undefined behaviour. Atomics are single-word atomic
//! operations, like a NIC's.
//!
//! Every op has taken effect when `execute` returns, so a write meets
//! [`Completion::Delivery`](fabkit_core::Completion::Delivery) trivially:
//! its word stores are `Release` and precede any later op of this thread.

use std::sync::atomic::{AtomicU64, Ordering};

use fabkit_core::words::{prefetch_words, read_words, with_prefetch, write_words};
use std::sync::Arc;

use fabkit_core::{Error, Op, OpKind, Remote, Result};

use super::{Caps, Deferred, Transport};

struct Regions {
    words: Vec<Box<[AtomicU64]>>,
    len: usize,
}

/// One rank's handle on the shared regions.
#[derive(Clone)]
pub struct LocalTransport {
    rank: usize,
    shared: Arc<Regions>,
    /// Batches a driver may keep in flight (see [`LocalTransport::with_depth`]).
    depth: usize,
}

impl std::fmt::Debug for LocalTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "LocalTransport({}/{})",
            self.rank,
            self.shared.words.len()
        )
    }
}

impl LocalTransport {
    /// `ranks` handles over zeroed regions of `region_len` bytes each.
    pub fn group(ranks: usize, region_len: usize) -> Vec<LocalTransport> {
        let words = region_len.div_ceil(8);
        let shared = Arc::new(Regions {
            words: (0..ranks)
                .map(|_| (0..words).map(|_| AtomicU64::new(0)).collect())
                .collect(),
            len: region_len,
        });
        (0..ranks)
            .map(|rank| LocalTransport {
                rank,
                shared: shared.clone(),
                depth: 1,
            })
            .collect()
    }

    /// This handle with room for `depth` batches in flight (at least 1):
    /// a batch posted runs only when the driver completes it, so batches
    /// of several lanes take effect in the order they are completed,
    /// whatever order they were posted in (see [`Deferred`]). Tests run
    /// the table's driver with lanes this way.
    pub fn with_depth(mut self, depth: usize) -> Self {
        self.depth = depth.max(1);
        self
    }

    fn region(&self, op: OpKind, at: Remote, len: usize) -> Result<&[AtomicU64]> {
        let ranks = self.shared.words.len();
        let region = self.shared.words.get(at.rank).ok_or(Error::NoSuchRank {
            peer: at.rank,
            ranks,
        })?;
        let fits = usize::try_from(at.offset)
            .ok()
            .and_then(|o| o.checked_add(len))
            .is_some_and(|e| e <= self.shared.len);
        if !fits {
            return Err(Error::OutOfBounds {
                op,
                peer: at.rank,
                offset: at.offset,
                len,
                region_len: self.shared.len,
            });
        }
        Ok(region)
    }

    /// Starts fetching the lines a read or write will copy (see
    /// [`with_prefetch`]).
    fn prefetch(&self, op: &Op<'_>) {
        if matches!(op.kind(), OpKind::Read | OpKind::Write) {
            let at = op.target();
            if let Some(r) = self.shared.words.get(at.rank) {
                let off = usize::try_from(at.offset).unwrap_or(usize::MAX);
                prefetch_words(r, off, op.len());
            }
        }
    }

    fn word(&self, op: OpKind, at: Remote) -> Result<&AtomicU64> {
        if !at.offset.is_multiple_of(8) {
            return Err(Error::InvalidArgument(format!(
                "{op} at offset {}: atomics need an 8-byte aligned offset",
                at.offset
            )));
        }
        Ok(&self.region(op, at, 8)?[at.offset as usize / 8])
    }
}

impl Transport for LocalTransport {
    type Error = Error;

    fn rank(&self) -> usize {
        self.rank
    }
    fn ranks(&self) -> usize {
        self.shared.words.len()
    }
    fn region_len(&self, _rank: usize) -> usize {
        self.shared.len
    }
    fn caps(&self) -> Caps {
        Caps {
            atomics: true,
            // Every op has taken effect when its batch returns.
            delivers: true,
            near: false,
            // Ops run one after another (acquire loads, release stores,
            // atomics acquire-release), and the first error stops the
            // batch.
            in_order: true,
            depth: self.depth,
        }
    }
    fn name(&self) -> String {
        "local".into()
    }

    fn execute(&self, ops: &mut [Op<'_>]) -> Result<()> {
        with_prefetch(ops, |op| self.prefetch(op), |op| self.one(op))
    }

    type Lane = Deferred;
    fn post(&self, lane: &mut Deferred, ops: &mut [Op<'_>]) -> Result<bool> {
        if lane.post(self.depth) {
            return Ok(true);
        }
        self.execute(ops).map(|()| false)
    }
    fn complete(&self, lane: &mut Deferred, ops: &mut [Op<'_>]) -> Result<()> {
        if lane.take() {
            self.execute(ops)?;
        }
        Ok(())
    }
}

impl LocalTransport {
    /// Executes one op of a batch.
    fn one(&self, op: &mut Op<'_>) -> Result<()> {
        let kind = op.kind();
        match op {
            Op::Read { from, into } => {
                let r = self.region(kind, *from, into.len())?;
                read_words(r, from.offset as usize, into);
            }
            // Visible when execute returns: meets Delivery trivially.
            Op::Write { to, from, .. } => {
                let r = self.region(kind, *to, from.len())?;
                write_words(r, to.offset as usize, from);
            }
            Op::CompareAndSwap {
                at,
                expected,
                new,
                old,
            } => {
                let w = self.word(kind, *at)?;
                **old = match w.compare_exchange(
                    *expected,
                    *new,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(v) | Err(v) => v,
                };
            }
            Op::FetchAdd { at, delta, old } => {
                **old = self.word(kind, *at)?.fetch_add(*delta, Ordering::AcqRel)
            }
            Op::Fetch { at, value } => **value = self.word(kind, *at)?.load(Ordering::Acquire),
            Op::Swap { at, new, old } => **old = self.word(kind, *at)?.swap(*new, Ordering::AcqRel),
            Op::Send { .. } | Op::Recv { .. } => {
                return Err(Error::InvalidArgument(
                    "the local transport does one-sided operations only".into(),
                ))
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabkit_core::Completion;

    #[test]
    fn unaligned_bytes_round_trip_without_touching_neighbours() {
        let t = &LocalTransport::group(2, 64)[0];
        t.execute(&mut [Op::Write {
            to: Remote::new(1, 0),
            from: &[0xff; 32],
            completion: Completion::Transmit,
        }])
        .unwrap();
        t.execute(&mut [Op::Write {
            to: Remote::new(1, 3),
            from: &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
            completion: Completion::Transmit,
        }])
        .unwrap();
        let mut back = [0u8; 16];
        t.execute(&mut [Op::Read {
            from: Remote::new(1, 0),
            into: &mut back,
        }])
        .unwrap();
        assert_eq!(
            back,
            [0xff, 0xff, 0xff, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0xff, 0xff, 0xff]
        );
        let mut old = 0;
        t.execute(&mut [Op::FetchAdd {
            at: Remote::new(0, 8),
            delta: 5,
            old: &mut old,
        }])
        .unwrap();
        let err = t
            .execute(&mut [Op::Read {
                from: Remote::new(1, 60),
                into: &mut back,
            }])
            .unwrap_err();
        assert!(matches!(err, Error::OutOfBounds { .. }));
    }
}
