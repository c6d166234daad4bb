//! The variants as state machines that do no I/O (quinn-proto's shape,
//! see STYLE.md 2b). A machine plans a batch of remote operations into a
//! [`Batch`] the caller owns, is fed the batch's completions (or its
//! error), and plans the next one, until it is done. The table
//! ([`crate::Dht`]) is the only driver: it posts the batch on the transport
//! and passes `now`; nothing here touches a transport or a clock.
//!
//! What a machine holds (a lock word, a chunked claim) is state, not control
//! flow: a failed batch moves it to a release step that gives back every
//! lock and claim it holds or may hold, and a retry loop (a lock, a claim,
//! a consistent snapshot) ends at the deadline with an error naming the
//! key, the rank and the bucket. Machines allocate nothing: keys, values,
//! outcomes, probes and the batch's buffers belong to the caller and are
//! reused from one operation to the next.
//!
//! A failed batch is taken to have an unknown effect: any of its operations
//! may or may not have reached its target (a real error completion does not
//! say which). Every hold is therefore tagged with its owner (rank and a
//! sequence number, see [`word`]) and given back by compare-and-swap from
//! the tagged value, which does nothing if the hold was never taken.

pub(crate) mod chunked;
pub(crate) mod coarse;
pub(crate) mod fine;
pub(crate) mod lockfree;

use std::time::{Duration, Instant};

use crate::layout::Layout;
use crate::outcome::{key_hex, Error, Result, Stats, Write};
use crate::placement::Placement;
use crate::transport::{Completion, Op, Remote};

/// The most keys one run of a machine takes; the table splits larger
/// batches. It bounds the per-round scans and keeps the tags of one run's
/// probes distinct (see [`word::tag`]).
pub(crate) const MAX_RUN: usize = 1024;

/// What one key's operation came to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Not decided yet.
    #[default]
    Pending,
    Hit,
    Miss,
    Corrupt,
    Inserted,
    Updated,
    Evicted,
    Found,
    Full,
}

impl Outcome {
    fn of(w: Write) -> Outcome {
        match w {
            Write::Inserted => Outcome::Inserted,
            Write::Updated => Outcome::Updated,
            Write::Evicted => Outcome::Evicted,
        }
    }
}

/// The operation a machine runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Read,
    Write,
    FindOrPut,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Read => "read",
            Mode::Write => "write",
            Mode::FindOrPut => "find_or_put",
        }
    }
}

/// What every machine of one table shares: pure values, no transport.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape {
    pub(crate) layout: Layout,
    pub(crate) place: Placement,
    pub(crate) buckets: u64,
    pub(crate) chunk: u32,
    pub(crate) checksum_retries: u32,
    /// This rank, for the tags of its holds.
    pub(crate) rank: usize,
    /// How long one operation may wait on locks, claims and re-reads.
    pub(crate) deadline: Duration,
    /// Rounds are memory accesses, not round trips ([`crate::transport::Transport::near`]).
    pub(crate) near: bool,
}

impl Shape {
    fn data_at(&self, rank: usize, bucket: u64) -> Remote {
        Remote::new(
            rank,
            self.layout.offset(bucket) + self.layout.data_start() as u64,
        )
    }
    fn word_at(&self, rank: usize, bucket: u64) -> Remote {
        Remote::new(rank, self.layout.offset(bucket))
    }
}

/// Tagged 8-byte words: the lock word of fine (per bucket) and coarse (per
/// region), and the claim in a chunked state word.
///
/// A lock word is `version << 36 | tag`: tag 0 is free, any other tag is
/// held by the writer it names. A writer takes it by compare-and-swap from
/// the free value it saw to that value plus its tag, and gives it back by
/// compare-and-swap from exactly its tagged value: to the next version if
/// it wrote, to the same one if not. Readers take nothing: they read the
/// word before and after the data, and the data is whole when both are the
/// same free value (a sequence lock), so no reader can hold a writer off,
/// and a reader that fails holds nothing to give back.
pub(crate) mod word {
    /// Tag bits: 20 for the rank, 16 for the sequence. The other 28 are
    /// the version: a reader's two fetches would have to straddle exactly
    /// 2^28 writes of one bucket to be fooled.
    const TAG_BITS: u32 = 36;
    const TAG_MASK: u64 = (1 << TAG_BITS) - 1;
    /// Ranks are told apart modulo this (2^20 - 1).
    const RANKS: u64 = (1 << 20) - 1;

    /// The tag of hold `seq` of `rank`: never 0.
    pub(crate) fn tag(rank: usize, seq: u16) -> u64 {
        ((rank as u64 % RANKS) + 1) << 16 | u64::from(seq)
    }

    /// Who holds a lock word or claim with tag `t` (None if free).
    pub(crate) fn holder_of_tag(t: u64) -> Option<usize> {
        let r = (t & TAG_MASK) >> 16;
        (r != 0).then(|| (r - 1) as usize)
    }

    /// Whether a lock word is held.
    pub(crate) fn held(w: u64) -> bool {
        w & TAG_MASK != 0
    }

    /// The lock word `w` with its tag removed: its free value.
    pub(crate) fn free(w: u64) -> u64 {
        w & !TAG_MASK
    }

    /// The free value after a writer that wrote releases `w`.
    pub(crate) fn bumped(w: u64) -> u64 {
        ((w >> TAG_BITS).wrapping_add(1)) << TAG_BITS
    }

    /// Who holds lock word `w`.
    pub(crate) fn holder(w: u64) -> Option<usize> {
        holder_of_tag(w)
    }
}

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

/// What a machine wants next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Post the batch (after its `wait`), then feed the completions back.
    Issue,
    /// Take `rank`'s region with the transport's own lock, if it has one
    /// (MPI_Win_lock); the answer is in `Batch::native`.
    LockRegion { rank: usize, exclusive: bool },
    /// Give back what `LockRegion` took.
    UnlockRegion { rank: usize },
    /// Finished: ask the machine for its result.
    Done,
}

/// A variant's operation on a run of keys, as a state machine.
pub(crate) trait Machine {
    /// Plans the first step.
    fn start(&mut self, b: &mut Batch, now: Instant) -> Step;
    /// The last step completed (its results are in `b`); plans the next.
    fn on_complete(&mut self, b: &mut Batch, now: Instant) -> Step;
    /// The last step failed: plan the release of everything held.
    fn on_error(&mut self, e: Error, b: &mut Batch, now: Instant) -> Step;
    /// The result, once `Done`; counters go into `stats`.
    fn finish(&mut self, stats: &mut Stats) -> Result<()>;
}

/// Where one key is in its probe.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Probe {
    pub(crate) rank: usize,
    pub(crate) hash: u64,
    /// Candidate (chunk, for chunked) being probed.
    pub(crate) k: u32,
    pub(crate) bucket: u64,
    pub(crate) retries: u32,
    /// What the probe waits for: the role of its op in the current batch.
    pub(crate) phase: Option<Role>,
    /// The tagged value of the lock word or claim this probe holds or is
    /// taking (the value its release swaps back from).
    pub(crate) word: u64,
    /// The lock word or state last seen: the snapshot of a fine read,
    /// another rank's hold (for the deadline error), the value a chunked
    /// claim swaps from, or the fingerprint of a lock-free bucket's failing
    /// bytes.
    pub(crate) seen: u64,
    /// The free value to give a lock back to; the state a chunked claim
    /// gives its bucket back with.
    pub(crate) free: u64,
    pub(crate) hold: Hold,
    /// A write was issued under the hold: give back with a new version.
    pub(crate) dirty: bool,
    /// Decided (or failed); nothing more to plan.
    pub(crate) done: bool,
    /// A decision waiting for a check (fine reads).
    pub(crate) pending: Outcome,
    /// Since when the probe has watched `seen` unchanged (chunked: a claim
    /// it waits on, taken over once it is a deadline old).
    pub(crate) since: Option<Instant>,
    /// A damaged bucket a writer may reuse, kept while it looks further for
    /// its key (lockfree).
    pub(crate) spare: Option<u64>,
}

/// What a probe holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Hold {
    #[default]
    None,
    /// Its acquire was in a failed batch: perhaps.
    Maybe,
    Held,
}

impl Probe {
    pub(crate) fn new(shape: &Shape, key: &[u8]) -> Probe {
        let hash = crate::placement::hash_key(key);
        Probe {
            rank: shape.place.rank_of(hash) as usize,
            hash,
            bucket: shape.place.candidate(hash, 0),
            ..Probe::default()
        }
    }

    /// Moves to the next candidate; false if there is none.
    pub(crate) fn advance(&mut self, shape: &Shape) -> bool {
        if self.k + 1 >= shape.place.candidates() {
            return false;
        }
        self.k += 1;
        self.retries = 0;
        self.bucket = shape.place.candidate(self.hash, self.k);
        true
    }

    pub(crate) fn last(&self, shape: &Shape) -> bool {
        self.k + 1 >= shape.place.candidates()
    }
}

/// What every machine carries: the run's keys, values and outcomes (the
/// caller's), its probes, deadline, error and counters.
pub(crate) struct Run<'a> {
    pub(crate) shape: &'a Shape,
    pub(crate) mode: Mode,
    pub(crate) keys: &'a [&'a [u8]],
    pub(crate) values: &'a [&'a [u8]],
    pub(crate) out: &'a mut [Outcome],
    /// Values found (reads, find_or_put): `value_len` bytes per key.
    pub(crate) found: &'a mut [u8],
    pub(crate) probes: &'a mut [Probe],
    /// Base of this run's tags.
    pub(crate) seq: u16,
    pub(crate) started: Instant,
    pub(crate) deadline: Instant,
    pub(crate) error: Option<Error>,
    pub(crate) stats: Stats,
    /// Rounds in a row in which only waits happened.
    pub(crate) idle: u32,
    /// The buckets this round's writers store to (see [`contended`]).
    pub(crate) stores: StoreFilter,
    /// When giving back after an error must stop trying.
    pub(crate) release_by: Option<Instant>,
}

impl<'a> Run<'a> {
    /// A run over `keys` (and `values` for writes), whose probes the caller
    /// has set with [`Probe::new`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        shape: &'a Shape,
        mode: Mode,
        keys: &'a [&'a [u8]],
        values: &'a [&'a [u8]],
        out: &'a mut [Outcome],
        found: &'a mut [u8],
        probes: &'a mut [Probe],
        seq: u16,
        now: Instant,
    ) -> Run<'a> {
        Run {
            shape,
            mode,
            keys,
            values,
            out,
            found,
            probes,
            seq,
            started: now,
            deadline: now.checked_add(shape.deadline).unwrap_or(now),
            error: None,
            stats: Stats::default(),
            idle: 0,
            stores: StoreFilter::default(),
            release_by: None,
        }
    }

    /// The tag of probe `i`'s holds.
    pub(crate) fn tag(&self, i: usize) -> u64 {
        word::tag(self.shape.rank, self.seq.wrapping_add(i as u16))
    }

    pub(crate) fn decide(&mut self, i: usize, o: Outcome) {
        self.out[i] = o;
        self.probes[i].done = true;
        self.probes[i].phase = None;
    }

    /// Copies a found value into the caller's buffer.
    pub(crate) fn keep_value(&mut self, i: usize, value: &[u8]) {
        let n = self.shape.layout.value_len;
        self.found[i * n..(i + 1) * n].copy_from_slice(value);
    }

    /// Plans the read of probe `i`'s bucket (its data part), for `role`.
    pub(crate) fn plan_read(&self, b: &mut Batch, i: usize, role: Role) {
        let p = &self.probes[i];
        let at = self.shape.data_at(p.rank, p.bucket);
        b.read(at, self.shape.layout.data_len(), i, role);
    }

    /// Plans the store of probe `i`'s record (its key and value, encoded)
    /// into its bucket.
    pub(crate) fn plan_store(&self, b: &mut Batch, i: usize) {
        let p = &self.probes[i];
        let at = self.shape.data_at(p.rank, p.bucket);
        let buf = b.write(at, self.shape.layout.data_len(), i, Role::Store);
        self.shape.layout.encode(self.keys[i], self.values[i], buf);
    }

    /// Ends the run with a deadline error for probe `i` if `now` is past
    /// the deadline; true if it did.
    pub(crate) fn past_deadline(&mut self, i: usize, now: Instant, what: &'static str) -> bool {
        if now < self.deadline {
            return false;
        }
        if self.error.is_none() {
            let p = self.probes[i];
            let locked = matches!(
                self.shape.layout.variant,
                crate::Variant::Fine | crate::Variant::Coarse
            );
            let holder = match what {
                "the lock" | "the region lock" => word::holder(p.seen),
                "a consistent read" if locked => word::holder(p.seen),
                "the claim" => word::holder_of_tag(p.seen >> 8),
                _ => None,
            };
            self.error = Some(Error::Deadline {
                op: self.mode.name(),
                key: key_hex(self.keys[i]),
                what,
                rank: p.rank,
                bucket: if what == "the region lock" {
                    0
                } else {
                    p.bucket
                },
                holder: holder.map_or(String::new(), |r| format!(" (held by rank {r})")),
                waited: now.saturating_duration_since(self.started),
            });
        }
        true
    }

    /// Records that probe `i`'s hold was not its own any more when given
    /// back (the first error of the run wins).
    pub(crate) fn lost(&mut self, i: usize, what: &'static str, found: u64) {
        let p = self.probes[i];
        self.error.get_or_insert(Error::Lost {
            op: self.mode.name(),
            key: key_hex(self.keys[i]),
            what,
            rank: p.rank,
            bucket: if what == "the region lock" {
                0
            } else {
                p.bucket
            },
            found,
        });
    }

    /// Sets the wait before the next batch: none while some probe made
    /// progress, then a yield, then a doubling sleep up to about 1 ms.
    pub(crate) fn pace(&mut self, b: &mut Batch, progressed: bool) {
        if progressed {
            self.idle = 0;
            return;
        }
        self.stats.lock_retries += 1;
        let d = if self.idle < 4 {
            Duration::ZERO
        } else {
            Duration::from_micros(1 << self.idle.min(10))
        };
        self.idle += 1;
        b.wait = Some(d);
    }

    /// Records the error of a failed batch (the first one wins) and starts
    /// the release clock: releases are retried until `now` + the deadline.
    pub(crate) fn failed(&mut self, e: Error, now: Instant) {
        self.error.get_or_insert(e);
        self.failed_at(now);
    }

    /// Starts the release clock (once): releases are retried until `now` +
    /// the deadline, so a deadline error still gives its holds back.
    pub(crate) fn failed_at(&mut self, now: Instant) {
        if self.release_by.is_none() {
            self.release_by = Some(now.checked_add(self.shape.deadline).unwrap_or(now));
        }
    }

    /// Whether releases may still be retried.
    pub(crate) fn may_retry_release(&self, now: Instant) -> bool {
        self.release_by.is_some_and(|t| now < t)
    }

    pub(crate) fn finish(&mut self, stats: &mut Stats) -> Result<()> {
        stats.add(&self.stats);
        match self.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Whether a writer may trust what it read of probe `i`'s bucket, and what
/// to do if not: another key of the run is about to store there (its
/// `phase` is Store): wait out that batch (`Defer`), then read again; one
/// stored there in the batch just completed (`done`), unordered with the
/// read: read again now (`Data`).
pub(crate) fn contended(run: &mut Run<'_>, done: &Batch, i: usize) -> Option<Role> {
    let p = run.probes[i];
    let at = run.shape.data_at(p.rank, p.bucket);
    // Most buckets are nobody else's: the filter says so in one look, and
    // only a bucket it may hold is searched for (a round stays linear in
    // its keys, not quadratic).
    if !run.stores.may_hold(run.shape, done, run.probes, at) {
        debug_assert!(
            !run.probes[..i]
                .iter()
                .any(|q| q.phase == Some(Role::Store) && q.rank == p.rank && q.bucket == p.bucket)
                && !(0..done.len()).any(|j| {
                    let op = done.op(j);
                    op.role == Role::Store && op.at == at && op.probe as usize != i
                }),
            "the store filter missed a contended bucket"
        );
        return None;
    }
    if run.probes[..i]
        .iter()
        .any(|q| q.phase == Some(Role::Store) && q.rank == p.rank && q.bucket == p.bucket)
    {
        return Some(Role::Defer);
    }
    (0..done.len())
        .any(|j| {
            let op = done.op(j);
            op.role == Role::Store && op.at == at && op.probe as usize != i
        })
        .then_some(Role::Data)
}

/// The buckets a round's writers may contend for: every bucket a probe is
/// about to store to, and every bucket the batch just completed stored to.
/// A set of bits (a Bloom filter with one hash), filled once per round from
/// the probes and the batch and then as probes choose to store: a clear bit
/// means no writer of the run wants the bucket; a set one may be another
/// bucket's, and the caller searches. Sized to the run, 16 bits a key (a
/// round holds at most a store per key planned and one per key completed:
/// at most one bit in eight set), up to [`MAX_RUN`]'s. No allocation: it
/// lives in the run. (Debug builds check every "no" against the search.)
#[derive(Clone, Copy, Debug)]
pub(crate) struct StoreFilter {
    /// The batch round the bits were filled for (`Batch::round`).
    round: Option<u64>,
    /// The words in use: `bits[..words]`.
    words: usize,
    bits: [u64; FILTER_WORDS],
}

const FILTER_WORDS: usize = MAX_RUN * 16 / 64;

impl Default for StoreFilter {
    fn default() -> Self {
        StoreFilter {
            round: None,
            words: 1,
            bits: [0; FILTER_WORDS],
        }
    }
}

impl StoreFilter {
    fn bit(&self, at: Remote) -> (usize, u64) {
        let h = crate::placement::mix(at.offset ^ (at.rank as u64).rotate_right(20));
        let n = (h % (self.words as u64 * 64)) as usize;
        (n / 64, 1 << (n % 64))
    }

    /// Adds the data of a bucket a probe chose to store to.
    pub(crate) fn insert(&mut self, at: Remote) {
        let (w, b) = self.bit(at);
        self.bits[w] |= b;
    }

    /// Whether the data at `at` may be a store of `probes` or of `done`;
    /// refills the bits when `done` is another round's batch.
    fn may_hold(&mut self, shape: &Shape, done: &Batch, probes: &[Probe], at: Remote) -> bool {
        if self.round != Some(done.round) {
            self.round = Some(done.round);
            self.words = (probes.len() * 16).div_ceil(64).clamp(1, FILTER_WORDS);
            self.bits[..self.words].fill(0);
            for q in probes.iter().filter(|q| q.phase == Some(Role::Store)) {
                self.insert(shape.data_at(q.rank, q.bucket));
            }
            for j in 0..done.len() {
                let op = done.op(j);
                if op.role == Role::Store {
                    self.insert(op.at);
                }
            }
        }
        let (w, b) = self.bit(at);
        self.bits[w] & b != 0
    }
}

/// A writer without a lock of its own on the bucket (lockfree, coarse)
/// acts on `choice` for probe `i`: store there, unless another key of the
/// run contends for it (then defer or read again), or go on to the next
/// candidate.
pub(crate) fn store_or_advance(run: &mut Run<'_>, done: &Batch, i: usize, choice: Option<Write>) {
    let Some(w) = choice else {
        run.probes[i].advance(run.shape);
        return;
    };
    // Two keys of this run that chose one bucket do not both write it: the
    // later one reads it again after the store.
    let wait = contended(run, done, i);
    let p = &mut run.probes[i];
    if let Some(next) = wait {
        p.phase = Some(next);
    } else {
        p.pending = Outcome::of(w);
        p.phase = Some(Role::Store);
        let at = run.shape.data_at(p.rank, p.bucket);
        run.stores.insert(at);
    }
}

/// What a variant's read makes of one bucket, for one key: each variant's
/// `look` says it, and its reads and the dump (`crate::dump`) both follow
/// it, so a dump returns what a read would.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Look {
    /// The key's record, whole: the read returns its value.
    Hit,
    /// The key is not further on: an empty bucket (buckets never become
    /// empty again), or, in chunked, one claimed while empty.
    End,
    /// Another key's record, or a bucket a writer may reuse: look at the
    /// next candidate.
    Next,
    /// The record fails its checksum (lockfree, chunked): a write in flight
    /// or damage; the reader reads it again. `mine`: the key bytes are the
    /// reader's (which a torn record may also fake).
    Torn {
        /// Whether the bucket's key bytes are the reader's key.
        mine: bool,
    },
    /// The bucket's lock is held (fine): a reader snapshots again until its
    /// deadline and never returns what lies under it.
    Held,
}

/// What a read does at a bucket once its re-reads are spent, on a table no
/// one writes (what fails its checksum now fails it for good).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Settled {
    /// It returns this bucket's value.
    Hit,
    /// It ends here without a value: a miss, corrupt (this key's record
    /// fails its checksum), or a wait on a held lock until its deadline.
    Stop,
    /// It looks at the next bucket (another key's damage is passed over).
    Next,
}

impl Look {
    /// Where a read ends up at this bucket once its re-reads are spent.
    pub(crate) fn settled(self) -> Settled {
        match self {
            Look::Hit => Settled::Hit,
            Look::End | Look::Held | Look::Torn { mine: true } => Settled::Stop,
            Look::Next | Look::Torn { mine: false } => Settled::Next,
        }
    }
}

/// The read rule of `variant`: what a reader of `key` makes of a bucket
/// whose first word is `word` (fine's lock word, chunked's state word;
/// ignored by the others) and whose record is `bk`.
pub(crate) fn look(
    variant: crate::layout::Variant,
    word: u64,
    bk: &crate::layout::Bucket<'_>,
    key: &[u8],
) -> Look {
    use crate::layout::Variant;
    match variant {
        Variant::Lockfree => lockfree::look(bk, key),
        Variant::Chunked => chunked::look(word, bk, key),
        Variant::Fine => fine::look(word, bk, key),
        Variant::Coarse => coarse::look(bk, key),
    }
}

/// The rule of the variants whose readers hold a lock, or found it free
/// (coarse, fine): the first empty bucket ends the probe; no checksum.
pub(crate) fn locked_look(bk: &crate::layout::Bucket<'_>, key: &[u8]) -> Look {
    if !bk.occupied() {
        Look::End
    } else if bk.key == key {
        Look::Hit
    } else {
        Look::Next
    }
}

/// A locked read's [`Look`] as the probe's outcome: `Miss` at the end,
/// `Hit` with the value kept, or `Pending`: look at the next candidate.
pub(crate) fn locked_read(run: &mut Run<'_>, i: usize, look: Look, value: &[u8]) -> Outcome {
    match look {
        Look::End => Outcome::Miss,
        Look::Hit => {
            run.keep_value(i, value);
            Outcome::Hit
        }
        _ => Outcome::Pending,
    }
}

/// Whether a writer takes a bucket, and with what outcome: the first
/// candidate that is empty or holds the same key; else the last.
pub(crate) fn take(occupied: bool, same_key: bool, last: bool) -> Option<Write> {
    if !occupied {
        Some(Write::Inserted)
    } else if same_key {
        Some(Write::Updated)
    } else if last {
        Some(Write::Evicted)
    } else {
        None
    }
}

/// Plans the release of every lock-word hold of `run`'s probes (fine, and
/// coarse per region), after rewriting the data of a dirty hold whose write
/// may not have landed: first the rewrites, then (next batch) the releases.
/// Returns false if nothing is held any more.
pub(crate) fn plan_lock_release(run: &mut Run<'_>, b: &mut Batch) -> bool {
    b.clear();
    let shape = *run.shape;
    // Rewrites first: a hold whose write failed still owns the bucket, and
    // the record must be whole before the version moves on.
    for i in 0..run.probes.len() {
        let p = run.probes[i];
        // (Coarse: the hold is the region's, kept by the group's first
        // probe; every probe that stored under it is dirty.)
        if p.dirty && p.phase == Some(Role::Store) {
            run.plan_store(b, i);
        }
    }
    if !b.is_empty() {
        return true;
    }
    for i in 0..run.probes.len() {
        let p = run.probes[i];
        if p.hold == Hold::None {
            continue;
        }
        let to = if p.dirty {
            word::bumped(p.word)
        } else {
            p.free
        };
        b.cas(
            Remote::new(p.rank, word_offset(&shape, p)),
            p.word,
            to,
            i,
            Role::Release,
        );
        run.probes[i].phase = Some(Role::Release);
    }
    !b.is_empty()
}

/// The offset of the lock word a probe holds: its bucket's (fine) or the
/// region's (coarse).
fn word_offset(shape: &Shape, p: Probe) -> u64 {
    match shape.layout.variant {
        crate::Variant::Coarse => 0,
        _ => shape.layout.offset(p.bucket),
    }
}

/// After a release batch: the releases that completed hold nothing any
/// more; a completed rewrite leaves its hold to be released next.
pub(crate) fn released(run: &mut Run<'_>, b: &Batch) {
    for i in 0..b.len() {
        let op = b.op(i);
        let p = &mut run.probes[op.probe as usize];
        match op.role {
            Role::Release => {
                p.hold = Hold::None;
                p.phase = None;
            }
            Role::Store => p.phase = None,
            _ => {}
        }
    }
}

/// The release loop shared by the locking variants, after an error:
/// re-plans until nothing is held, or until releases must stop. The
/// error stays the one that started it.
pub(crate) fn release_step(run: &mut Run<'_>, b: &mut Batch, now: Instant) -> Step {
    if plan_lock_release(run, b) {
        if run.may_retry_release(now) {
            return Step::Issue;
        }
        b.clear();
    }
    Step::Done
}

/// A failed batch in a locking variant: an acquire in it may have landed,
/// so it counts as held until its release says otherwise; then release.
/// Retries of a failed release wait a millisecond between attempts.
pub(crate) fn lock_failed(
    run: &mut Run<'_>,
    releasing: &mut bool,
    e: Error,
    b: &mut Batch,
    now: Instant,
) -> Step {
    run.failed(e, now);
    for p in run.probes.iter_mut() {
        if p.phase == Some(Role::Acquire) && p.hold == Hold::None {
            p.hold = Hold::Maybe;
        }
        p.done = true;
    }
    let retry = std::mem::replace(releasing, true);
    let step = release_step(run, b, now);
    if retry && step == Step::Issue {
        b.wait = Some(Duration::from_millis(1));
    }
    step
}

/// A release batch of a locking variant completed.
pub(crate) fn lock_released(run: &mut Run<'_>, b: &mut Batch, now: Instant) -> Step {
    released(run, b);
    release_step(run, b, now)
}

#[cfg(test)]
mod tests {
    use super::{look, word, Look, Settled};
    use crate::layout::{Layout, Variant, CLAIMED, CLAIMED_OVER_FULL, STATE_EMPTY, STATE_FULL};

    /// Each variant's read rule on the buckets a reader meets, and where a
    /// dump's read ends up at each once its re-reads are spent.
    #[test]
    fn each_variant_reads_a_bucket_by_its_own_rule() {
        let (key, other) = (*b"key-0001", *b"key-0002");
        for v in [
            Variant::Coarse,
            Variant::Fine,
            Variant::Lockfree,
            Variant::Chunked,
        ] {
            let l = Layout::new(v, 8, 16);
            let state = |s: u64| if v == Variant::Chunked { s } else { 0 };
            let mut mine = vec![0u8; l.data_len()];
            l.encode(&key, &[7; 16], &mut mine);
            let mut theirs = vec![0u8; l.data_len()];
            l.encode(&other, &[7; 16], &mut theirs);
            let empty = vec![0u8; l.data_len()];
            let at = |data: &[u8], w: u64| look(v, w, &l.decode(data, state(STATE_FULL)), &key);
            let full = state(STATE_FULL);
            assert_eq!(at(&mine, full), Look::Hit, "{v:?}");
            assert_eq!(at(&theirs, full), Look::Next, "{v:?}");
            let empty_word = state(STATE_EMPTY);
            let end = look(v, empty_word, &l.decode(&empty, state(STATE_EMPTY)), &key);
            assert_eq!(end, Look::End, "{v:?}");
            // A value byte changed after the checksum was taken.
            let mut torn = mine.clone();
            let k = torn
                .windows(8)
                .position(|w| w == key)
                .expect("the key is in the bucket");
            torn[k + 8 + 3] ^= 0xff;
            let t = at(&torn, full);
            match v {
                Variant::Lockfree | Variant::Chunked => {
                    assert_eq!(t, Look::Torn { mine: true }, "{v:?}");
                    assert_eq!(t.settled(), Settled::Stop);
                }
                // No checksum: what a locked read sees is the record.
                _ => assert_eq!(t, Look::Hit, "{v:?}"),
            }
        }
        // Fine never reads through a held lock; chunked ends at a first
        // fill's claim and reads through an update's.
        let l = Layout::new(Variant::Fine, 8, 16);
        let mut data = vec![0u8; l.data_len()];
        l.encode(&key, &[1; 16], &mut data);
        let held = word::tag(3, 1);
        let seen = look(Variant::Fine, held, &l.decode(&data, 0), &key);
        assert_eq!((seen, seen.settled()), (Look::Held, Settled::Stop));
        let l = Layout::new(Variant::Chunked, 8, 16);
        let mut data = vec![0u8; l.data_len()];
        l.encode(&key, &[1; 16], &mut data);
        let bk = l.decode(&data, STATE_FULL);
        let first_fill = (5 << 8) | CLAIMED;
        assert_eq!(look(Variant::Chunked, first_fill, &bk, &key), Look::End);
        let update = first_fill | CLAIMED_OVER_FULL;
        assert_eq!(look(Variant::Chunked, update, &bk, &key), Look::Hit);
        assert_eq!(Look::Torn { mine: false }.settled(), Settled::Next);
    }
}
