//! Ranks as threads sharing their regions in one process: the test double
//! for a fabric. Regions are `AtomicU64` words and data is copied a word at a
//! time, so a reader can see half of a concurrent write (a torn read) exactly
//! as over RDMA, without undefined behaviour. Atomics are single-word atomic
//! operations, like a NIC's.
//!
//! Every op has taken effect when `execute` returns, so a write meets
//! [`Completion::Delivery`](fabkit_core::Completion::Delivery) trivially:
//! its word stores are `Release` and precede any later op of this thread.
//!
//! By default it has no region lock of its own, so the coarse variant
//! drives a lock word with atomics; [`LocalTransport::with_region_lock`]
//! gives it one, standing in for `MPI_Win_lock`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use fabkit_core::words::{prefetch_words, read_words, with_prefetch, write_words};

use fabkit_core::{Error, Op, OpKind, Remote, Result};

use super::{Caps, Deferred, Transport};

struct Regions {
    words: Vec<Box<[AtomicU64]>>,
    len: usize,
    /// Each region's lock, for handles made
    /// [`LocalTransport::with_region_lock`].
    locks: Vec<RegionLock>,
}

/// A reader-writer lock on one region, as `MPI_Win_lock` takes one on a
/// target's window: shared by any number of holders, or exclusive.
#[derive(Default)]
struct RegionLock {
    /// 0: free; n > 0: n shared holders; -1: one exclusive holder.
    holders: Mutex<isize>,
    /// Notified when holders leave.
    left: Condvar,
}

/// One rank's handle on the shared regions.
#[derive(Clone)]
pub struct LocalTransport {
    rank: usize,
    shared: Arc<Regions>,
    /// Batches a driver may keep in flight (see [`LocalTransport::with_depth`]).
    depth: usize,
    /// The ranks this handle reaches by memory (see
    /// [`LocalTransport::reaching`]); every rank when `None`.
    reach: Option<Arc<[bool]>>,
    /// Whether [`Transport::lock_region`] takes the region's lock (see
    /// [`LocalTransport::with_region_lock`]).
    region_lock: bool,
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
            locks: (0..ranks).map(|_| RegionLock::default()).collect(),
        });
        (0..ranks)
            .map(|rank| LocalTransport {
                rank,
                shared: shared.clone(),
                depth: 1,
                reach: None,
                region_lock: false,
            })
            .collect()
    }

    /// This handle with a region lock of its own, standing in for
    /// `MPI_Win_lock` (what the MPI transport gives the coarse
    /// variant): [`Transport::lock_region`] takes the target region's
    /// reader-writer lock, waiting while another handle holds it
    /// incompatibly (at most the default operation deadline, 30 s times
    /// `FABKIT_TIMEOUT_SCALE`: then a [`Error::Timeout`] naming a
    /// compare-and-swap, what a lock word would have taken), and answers
    /// true. Give it to every handle of the group, as MPI gives every
    /// rank the same window: the lock excludes only handles that take it
    /// too, and batches outside it take nothing. Tests run a coarse table
    /// on the transport's own lock this way.
    pub fn with_region_lock(mut self) -> Self {
        self.region_lock = true;
        self
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

    /// This handle reaching by memory only the ranks `reach` marks (this
    /// one's own among them), as a rank sees the regions of its node and
    /// not those of ranks elsewhere; operations on the others are refused.
    /// Tests of the message path, and of memory and messages mixed in one
    /// table, make "nodes" so.
    pub fn reaching(mut self, reach: &[bool]) -> Self {
        self.reach = Some(reach.into());
        self
    }

    fn region(&self, op: OpKind, at: Remote, len: usize) -> Result<&[AtomicU64]> {
        if !self.by_memory(at.rank) && at.rank < self.shared.words.len() {
            return Err(Error::InvalidArgument(format!(
                "{op} to rank {}: this handle does not reach its region (another node's, in \
                 this test)",
                at.rank
            )));
        }
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

    fn lock_of(&self, rank: usize) -> Result<&RegionLock> {
        self.shared.locks.get(rank).ok_or(Error::NoSuchRank {
            peer: rank,
            ranks: self.shared.words.len(),
        })
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
    /// Every region is this process's memory; a test keeps some ranks
    /// from it with [`LocalTransport::reaching`], as ranks on another node.
    fn by_memory(&self, rank: usize) -> bool {
        self.reach
            .as_ref()
            .map_or(rank < self.shared.words.len(), |r| {
                r.get(rank).copied().unwrap_or(false)
            })
    }

    fn execute(&self, ops: &mut [Op<'_>]) -> Result<()> {
        with_prefetch(ops, |op| self.prefetch(op), |op| self.one(op))
    }

    /// With [`LocalTransport::with_region_lock`]: takes `rank`'s region
    /// lock (see there). Without: false, no lock of its own.
    fn lock_region(&self, rank: usize, exclusive: bool) -> Result<bool> {
        if !self.region_lock {
            return Ok(false);
        }
        let lock = self.lock_of(rank)?;
        let timeout = crate::config::default_deadline();
        let free = |h: &mut isize| if exclusive { *h != 0 } else { *h < 0 };
        let (mut h, waited) = lock
            .left
            .wait_timeout_while(
                lock.holders.lock().unwrap_or_else(PoisonError::into_inner),
                timeout,
                free,
            )
            .unwrap_or_else(PoisonError::into_inner);
        if waited.timed_out() {
            return Err(Error::Timeout {
                op: OpKind::CompareAndSwap,
                peer: rank,
                timeout,
            });
        }
        *h = if exclusive { -1 } else { *h + 1 };
        Ok(true)
    }

    /// With [`LocalTransport::with_region_lock`]: gives back one hold of
    /// `rank`'s region lock; an error if nobody holds it.
    fn unlock_region(&self, rank: usize) -> Result<()> {
        if !self.region_lock {
            return Ok(());
        }
        let lock = self.lock_of(rank)?;
        let mut h = lock.holders.lock().unwrap_or_else(PoisonError::into_inner);
        *h = match *h {
            0 => {
                return Err(Error::InvalidArgument(format!(
                    "unlock_region({rank}): rank {rank}'s region is not locked"
                )))
            }
            -1 => 0,
            n => n - 1,
        };
        lock.left.notify_all();
        Ok(())
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

    #[test]
    fn the_region_lock_is_shared_or_exclusive_and_only_when_asked_for() {
        let plain = &LocalTransport::group(2, 64)[0];
        assert!(!plain.lock_region(1, true).unwrap(), "no lock of its own");
        plain.unlock_region(1).unwrap();

        let g: Vec<_> = LocalTransport::group(2, 64)
            .into_iter()
            .map(LocalTransport::with_region_lock)
            .collect();
        assert!(g[0].lock_region(1, false).unwrap());
        assert!(g[1].lock_region(1, false).unwrap(), "readers share it");
        assert!(
            g[1].lock_region(0, true).unwrap(),
            "another region's is free"
        );
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| {
                assert!(g[1].lock_region(1, true).unwrap());
                tx.send(()).unwrap();
                g[1].unlock_region(1).unwrap();
            });
            g[0].unlock_region(1).unwrap();
            assert!(
                rx.recv_timeout(std::time::Duration::from_millis(50))
                    .is_err(),
                "a writer waits for every reader"
            );
            g[1].unlock_region(1).unwrap();
            rx.recv().unwrap();
        });
        g[1].unlock_region(0).unwrap();
        let err = g[0].unlock_region(1).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        assert!(matches!(
            g[0].lock_region(2, true).unwrap_err(),
            Error::NoSuchRank { peer: 2, .. }
        ));
    }
}
