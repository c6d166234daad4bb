//! A run: the keys one machine serves, each key's probe along its
//! candidate buckets, and what the variants share to decide and store.

use std::time::{Duration, Instant};

use super::{word, Batch, Mode, Outcome, Role, Shape, MAX_RUN};
use crate::outcome::{key_hex, Error, Result, Stats, Write};
use crate::transport::Remote;

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
    /// it waits on, taken over once it is a deadline old); lock-free: when
    /// its pause before a last look at a torn bucket ends.
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
    /// The probe of a key whose hash is `hash` (the table's [`KeyHash`](crate::placement::KeyHash)).
    pub(crate) fn new(shape: &Shape, hash: u64) -> Probe {
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
    /// A write that computes each key's value from the one it replaces
    /// (see [`Run::old_value`], [`Run::accumulate`]); none for plain
    /// writes.
    pub(crate) update: Option<Updating<'a>>,
}

/// An accumulating write's function: the key's index in the run, what
/// the store will be, its value to update in place (the old value, or
/// zeros where there was none); false to leave the bucket as it was.
pub(crate) type Update<'a> = dyn FnMut(usize, Write, &mut [u8]) -> bool + 'a;

/// What an accumulating run carries besides its function.
pub(crate) struct Updating<'a> {
    pub(crate) f: &'a mut Update<'a>,
    /// Each key's bucket as it was read under the hold (its data part,
    /// `data_len` bytes per key): a batch that fails after the store puts
    /// it back, so a failed accumulation changes nothing and a retry
    /// counts once.
    pub(crate) before: &'a mut [u8],
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
            update: None,
        }
    }

    /// An accumulating write: probe `i` took its bucket, whose data part
    /// read under the probe's hold is `raw`, holding `old` for its key
    /// (`None`: empty, another key's, or damaged). Keeps `old` (zeros for
    /// `None`) as the value to update and `raw` to put back should the
    /// run fail; plain writes ignore both.
    pub(crate) fn old_value(&mut self, i: usize, old: Option<&[u8]>, raw: &[u8]) {
        let Some(u) = self.update.as_mut() else {
            return;
        };
        let dl = self.shape.layout.data_len();
        u.before[i * dl..(i + 1) * dl].copy_from_slice(&raw[..dl]);
        let n = self.shape.layout.value_len;
        let v = &mut self.found[i * n..(i + 1) * n];
        match old {
            Some(o) => v.copy_from_slice(o),
            None => v.fill(0),
        }
    }

    /// Whether probe `i`, holding its bucket, stores: always for a plain
    /// write; for an accumulating one, once its function has updated the
    /// kept value and said so. Called once, as the store is planned.
    pub(crate) fn accumulate(&mut self, i: usize) -> bool {
        let Some(u) = self.update.as_mut() else {
            return true;
        };
        let n = self.shape.layout.value_len;
        let w = self.probes[i].pending.written();
        (u.f)(i, w, &mut self.found[i * n..(i + 1) * n])
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
    /// into its bucket; for an accumulation after an error, of the bucket
    /// as it was before.
    pub(crate) fn plan_store(&self, b: &mut Batch, i: usize) {
        let p = &self.probes[i];
        let at = self.shape.data_at(p.rank, p.bucket);
        let dl = self.shape.layout.data_len();
        let buf = b.write(at, dl, i, Role::Store);
        let n = self.shape.layout.value_len;
        match &self.update {
            Some(u) if self.error.is_some() => {
                buf.copy_from_slice(&u.before[i * dl..(i + 1) * dl]);
            }
            Some(_) => {
                let value = &self.found[i * n..(i + 1) * n];
                self.shape.layout.encode(self.keys[i], value, buf);
            }
            None => self.shape.layout.encode(self.keys[i], self.values[i], buf),
        }
    }

    /// Ends the run with a deadline error for probe `i` if `now` is past
    /// the deadline; true if it did.
    pub(crate) fn past_deadline(&mut self, i: usize, now: Instant, what: Waited) -> bool {
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
                Waited::Lock | Waited::RegionLock => word::holder(p.seen),
                Waited::ConsistentRead if locked => word::holder(p.seen),
                Waited::Claim => word::holder_of_tag(p.seen >> 8),
                Waited::ConsistentRead => None,
            };
            self.error = Some(Error::Deadline {
                op: self.mode.name(),
                key: key_hex(self.keys[i]),
                what: what.text(),
                rank: p.rank,
                bucket: what.bucket(p.bucket),
                holder: holder.map_or(String::new(), |r| format!(" (held by rank {r})")),
                waited: now.saturating_duration_since(self.started),
            });
        }
        true
    }

    /// Records that probe `i`'s hold was not its own any more when given
    /// back (the first error of the run wins).
    pub(crate) fn lost(&mut self, i: usize, what: Waited, found: u64) {
        let p = self.probes[i];
        self.error.get_or_insert(Error::Lost {
            op: self.mode.name(),
            key: key_hex(self.keys[i]),
            what: what.text(),
            rank: p.rank,
            bucket: what.bucket(p.bucket),
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

/// What a probe waited for, or held, when its run failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Waited {
    /// A bucket's lock (fine).
    Lock,
    /// The region's lock (coarse), in the region's first word.
    RegionLock,
    /// A read whose checksum or lock word agreed.
    ConsistentRead,
    /// A bucket's claim (chunked).
    Claim,
}

impl Waited {
    /// How an error says it.
    pub(crate) fn text(self) -> &'static str {
        match self {
            Waited::Lock => "the lock",
            Waited::RegionLock => "the region lock",
            Waited::ConsistentRead => "a consistent read",
            Waited::Claim => "the claim",
        }
    }

    /// The bucket an error names: the region lock lives in bucket 0.
    fn bucket(self, probed: u64) -> u64 {
        if self == Waited::RegionLock {
            0
        } else {
            probed
        }
    }
}
