//! A batch: the remote operations a machine plans, with the buffers their
//! data and results land in, owned by the caller and reused.

use std::time::Duration;

use crate::transport::{Completion, Op, Remote};

/// One planned operation. Data of reads and writes lives in the batch's
/// byte buffer at `off`; results of atomics in its word buffer at `off`.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Plan {
    Read { len: usize },
    Write { len: usize },
    Cas { expected: u64, new: u64 },
    Fetch,
}

/// What an op is for, so the machine can read its completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// A lock word snapshot before the data (fine, coarse reads).
    Snap,
    /// The data of one bucket, or the first chunk (chunked).
    Data,
    /// The second chunk of a chunked round.
    Next,
    /// The part of a chunk that wraps past the region's last bucket, read
    /// from bucket 0 (it follows its chunk's `Data` or `Next` read).
    Wrap,
    /// A lock word re-read after the data (fine, coarse); a chunked
    /// taker's read of the bucket it took over; a lock-free reader's last
    /// look at a bucket before it marks it invalid.
    Check,
    Acquire,
    Store,
    Release,
    Invalidate,
    Claim,
    Publish,
    /// Nothing this batch: another key of the run stores to the bucket this
    /// probe wants, and the probe reads it again only once that store has
    /// completed (ops of one batch are unordered).
    Defer,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Planned {
    pub(crate) plan: Plan,
    pub(crate) at: Remote,
    off: usize,
    pub(crate) probe: u32,
    pub(crate) role: Role,
}

/// A batch of operations, planned by a machine into buffers the caller owns
/// and reuses (after the first operations, planning allocates nothing).
#[derive(Debug, Default)]
pub struct Batch {
    ops: Vec<Planned>,
    /// The data of reads and writes: `data[..used]` is this batch's; the
    /// rest is kept from earlier batches, so that planning zero-fills only
    /// bytes it has never used (a read's bytes are overwritten by the read,
    /// a write's by its planner).
    data: Vec<u8>,
    used: usize,
    words: Vec<u64>,
    /// Wait this long before posting (a retry of a lock or claim).
    pub(crate) wait: Option<Duration>,
    /// Whether the transport's own region lock was taken (coarse over MPI).
    pub(crate) native: bool,
    /// Counts the batch's plannings: which round a completed batch was.
    pub(crate) round: u64,
}

impl Batch {
    pub(crate) fn clear(&mut self) {
        self.round = self.round.wrapping_add(1);
        self.ops.clear();
        self.used = 0;
        self.words.clear();
        self.wait = None;
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.ops.len()
    }

    pub(crate) fn op(&self, i: usize) -> Planned {
        self.ops[i]
    }

    /// `len` more bytes of data for the op being planned: their offset.
    fn take(&mut self, len: usize) -> usize {
        let off = self.used;
        self.used += len;
        if self.data.len() < self.used {
            self.data.resize(self.used, 0);
        }
        off
    }

    pub(crate) fn read(&mut self, at: Remote, len: usize, probe: usize, role: Role) {
        let off = self.take(len);
        self.push(Plan::Read { len }, at, off, probe, role);
    }

    /// Plans a write of `len` bytes and returns them to be filled: the
    /// caller sets every byte (they hold an earlier batch's).
    pub(crate) fn write(&mut self, at: Remote, len: usize, probe: usize, role: Role) -> &mut [u8] {
        let off = self.take(len);
        self.push(Plan::Write { len }, at, off, probe, role);
        &mut self.data[off..off + len]
    }

    pub(crate) fn cas(&mut self, at: Remote, expected: u64, new: u64, probe: usize, role: Role) {
        let off = self.words.len();
        self.words.push(0);
        self.push(Plan::Cas { expected, new }, at, off, probe, role);
    }

    pub(crate) fn fetch(&mut self, at: Remote, probe: usize, role: Role) {
        let off = self.words.len();
        self.words.push(0);
        self.push(Plan::Fetch, at, off, probe, role);
    }

    fn push(&mut self, plan: Plan, at: Remote, off: usize, probe: usize, role: Role) {
        self.ops.push(Planned {
            plan,
            at,
            off,
            probe: probe as u32,
            role,
        });
    }

    /// Bytes the batch's operations carry across the fabric: the data of
    /// reads and writes, and the operand and result words of atomics (a
    /// compare-and-swap sends two and gets one back, a fetch gets one).
    pub(crate) fn payload(&self) -> u64 {
        let words: usize = self
            .ops
            .iter()
            .map(|p| match p.plan {
                Plan::Cas { .. } => 3,
                Plan::Fetch => 1,
                Plan::Read { .. } | Plan::Write { .. } => 0,
            })
            .sum();
        (self.used + 8 * words) as u64
    }

    /// The bytes op `i` read.
    pub(crate) fn bytes(&self, i: usize) -> &[u8] {
        match self.ops[i].plan {
            Plan::Read { len } | Plan::Write { len } => {
                let off = self.ops[i].off;
                &self.data[off..off + len]
            }
            _ => &[],
        }
    }

    /// The bytes reads `i..i + n` fetched, as one slice: reads planned one
    /// after another have adjacent buffers.
    pub(crate) fn span(&self, i: usize, n: usize) -> &[u8] {
        let start = self.ops[i].off;
        let mut end = start;
        for op in &self.ops[i..i + n] {
            let Plan::Read { len } = op.plan else {
                unreachable!("a span is of reads")
            };
            debug_assert_eq!(op.off, end, "reads of a span are adjacent");
            end += len;
        }
        &self.data[start..end]
    }

    /// The old value atomic op `i` returned.
    pub(crate) fn word(&self, i: usize) -> u64 {
        match self.ops[i].plan {
            Plan::Cas { .. } | Plan::Fetch => self.words[self.ops[i].off],
            _ => 0,
        }
    }

    /// The transport's view of the batch, in `ops` (emptied first). Data
    /// were allocated in planning order, so the buffers split in order.
    pub(crate) fn as_ops<'a>(&'a mut self, ops: &mut Vec<Op<'a>>) {
        ops.clear();
        let mut data: &'a mut [u8] = &mut self.data[..self.used];
        let mut words = self.words.iter_mut();
        for p in &self.ops {
            match p.plan {
                Plan::Read { len } => {
                    let (into, rest) = std::mem::take(&mut data).split_at_mut(len);
                    data = rest;
                    ops.push(Op::Read { from: p.at, into });
                }
                Plan::Write { len } => {
                    let (from, rest) = std::mem::take(&mut data).split_at_mut(len);
                    data = rest;
                    // Every store of the DHT precedes a release (a lock's,
                    // a claim's publication) or the end of its operation,
                    // after which another rank may read it: it completes
                    // only once its data are visible at the target.
                    ops.push(Op::Write {
                        to: p.at,
                        from,
                        completion: Completion::Delivery,
                    });
                }
                Plan::Cas { expected, new } => ops.push(Op::CompareAndSwap {
                    at: p.at,
                    expected,
                    new,
                    old: words.next().expect("a word per atomic"),
                }),
                Plan::Fetch => ops.push(Op::Fetch {
                    at: p.at,
                    value: words.next().expect("a word per atomic"),
                }),
            }
        }
    }
}

/// Gives an emptied `Vec<Op>` another lifetime, keeping its allocation
/// (collecting an iterator of a vector into a vector of a type of the same
/// size reuses the buffer).
pub(crate) fn recycle<'a, 'b>(mut v: Vec<Op<'a>>) -> Vec<Op<'b>> {
    v.clear();
    v.into_iter().map(|_| unreachable!("emptied")).collect()
}
