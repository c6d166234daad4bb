//! Chunked linear probing (Oortwijn, "A Distributed Hash Table for Shared Memory"): a key's buckets are linear
//! runs of C buckets (chunks), the i-th chunk starting at the key's i-th
//! candidate bucket (distinct and uniform, see [`crate::placement`]), so
//! runs do not cluster. A chunk wraps past the region's last bucket to
//! bucket 0 (two reads then). Each round fetches two chunks (the
//! next one with the current), halving round trips for long probes; where
//! a round costs no round trip ([`crate::transport::Caps::near`]: every
//! region mapped), one, halving the bytes read instead.
//!
//! Every store is made under a claim of the bucket's state word (see
//! [`crate::layout`]): empty or full becomes a claim by compare-and-swap,
//! the data is written (with delivery completion), and a compare-and-swap
//! from the claim publishes it, full with its publication count moved on.
//! A claim word is odd; bit 1 says the bucket was full when claimed (an
//! update or an eviction: the data under it is a whole record or one being
//! replaced); bits 8 to 43 hold the claimer's tag; bits 48 to 63 the
//! publication count of the full value it replaced.
//!
//! - Readers take nothing. An empty bucket, or one claimed while empty (a
//!   first fill), ends the probe: a miss. A bucket claimed while full is
//!   read like a full one: a whole record of the key is a hit.
//! - Writers never pass a bucket claimed while empty (it may be getting
//!   their key) nor one of their key's claimed for an update: they wait for
//!   its publication. A claim seen unchanged for a whole deadline is taken
//!   over by compare-and-swap: its claimer is gone or stalled, and its
//!   publish (a compare-and-swap from its own claim) now fails, so it
//!   starts again instead of publishing over the new owner's record.
//! - A failed batch gives back every claim held or perhaps held: an insert
//!   to empty; an update to full, after rewriting the record if its write
//!   failed (compare-and-swaps from the tagged claim, which do nothing if
//!   it was never taken or was taken over).

use std::time::{Duration, Instant};

use super::run::Waited;
use super::{Batch, Hold, Look, Machine, Mode, Outcome, Role, Run, Shape, Step};
use crate::layout::{
    claimed_over_full, full, full_version, is_claimed, is_full, CLAIMED, CLAIMED_OVER_FULL,
    STATE_EMPTY, STATE_FULL,
};
use crate::outcome::{Error, Result, Stats};

/// The claim by `tag` of a bucket that was full (`over_full`) with
/// publication count `version`, or empty.
fn claim(tag: u64, over_full: bool, version: u16) -> u64 {
    const TAG: u64 = (1 << 36) - 1;
    let over = if over_full { CLAIMED_OVER_FULL } else { 0 };
    u64::from(version) << 48 | (tag & TAG) << 8 | over | CLAIMED
}

/// The publication count of the full value claim `c` replaced.
fn claim_version(c: u64) -> u16 {
    (c >> 48) as u16
}

/// Buckets per chunk.
fn chunk_len(shape: &Shape) -> u64 {
    u64::from(shape.chunk).min(shape.buckets)
}

/// Where chunk `i` of the key with hash `hash` starts: its `i`-th candidate
/// bucket, so each chunk starts at any bucket with equal probability and
/// the chunks of one key start at distinct buckets. (Quadratic steps of C
/// buckets, as published, reach every chunk only when B / C is a power of
/// two: with 24 buckets of chunks of 8, a key's 8 chunks cover 16.)
fn start(shape: &Shape, hash: u64, i: u32) -> u64 {
    shape.place.candidate(hash, i)
}

/// Plans the read of the chunk starting at `s` (two reads if it wraps).
fn read_chunk(shape: &Shape, b: &mut Batch, rank: usize, s: u64, i: usize, role: Role) {
    let bl = shape.layout.bucket_len;
    let len = chunk_len(shape);
    let head = (shape.buckets - s).min(len);
    b.read(shape.word_at(rank, s), head as usize * bl, i, role);
    if head < len {
        b.read(
            shape.word_at(rank, 0),
            (len - head) as usize * bl,
            i,
            Role::Wrap,
        );
    }
}

/// What a chunk shows for one key, up to the first decisive bucket.
#[derive(Clone, Copy, Debug)]
enum Seen {
    /// Empty, or claimed while empty (`claim`): the key is not further on.
    Empty { bucket: u64, claim: Option<u64> },
    /// This key, whole, at byte `at` of the chunk; `state` is full or a
    /// claim over full (an update in progress).
    Mine { bucket: u64, at: usize, state: u64 },
    /// Its checksum fails: a write in flight or damage. `mine` if its key
    /// bytes are this key's.
    Torn { bucket: u64, state: u64, mine: bool },
    /// Every bucket holds another key; the last one and its state.
    Other { last: u64, state: u64 },
}

/// Chunked's read rule, given the bucket's state word: an empty bucket,
/// or one claimed while empty (a first fill), ends the probe; a record
/// failing its checksum is torn; a whole record of the key is a hit.
pub(crate) fn look(state: u64, bk: &crate::layout::Bucket<'_>, key: &[u8]) -> Look {
    let mine = bk.key == key;
    if state == STATE_EMPTY || (is_claimed(state) && !claimed_over_full(state)) {
        Look::End
    } else if !bk.checksum_ok() {
        Look::Torn { mine }
    } else if mine {
        Look::Hit
    } else {
        Look::Next
    }
}

/// Scans the chunk `bytes` (first bucket `first`) for `key`. Torn buckets
/// of other keys are passed over once `patient` is false (their retries
/// are spent: damage, not a write in flight).
fn scan(shape: &Shape, bytes: &[u8], first: u64, key: &[u8], patient: bool) -> Seen {
    let bl = shape.layout.bucket_len;
    let mut last = Seen::Other {
        last: first,
        state: 0,
    };
    for (j, b) in bytes.chunks_exact(bl).enumerate() {
        let state = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
        let bucket = (first + j as u64) % shape.buckets;
        let bk = shape.layout.decode(&b[8..], STATE_FULL);
        match look(state, &bk, key) {
            Look::End => {
                let claim = (state != STATE_EMPTY).then_some(state);
                return Seen::Empty { bucket, claim };
            }
            Look::Torn { mine } if mine || patient => {
                return Seen::Torn {
                    bucket,
                    state,
                    mine,
                };
            }
            Look::Hit => {
                return Seen::Mine {
                    bucket,
                    at: j * bl + 8,
                    state,
                };
            }
            _ => {}
        }
        last = Seen::Other {
            last: bucket,
            state,
        };
    }
    last
}

pub(crate) struct Chunked<'a> {
    run: Run<'a>,
    releasing: bool,
}

impl<'a> Chunked<'a> {
    pub(crate) fn new(run: Run<'a>) -> Self {
        for p in run.probes.iter_mut() {
            p.phase = Some(Role::Data);
        }
        Chunked {
            run,
            releasing: false,
        }
    }

    /// The chunks of probe `i` arrived: `n1` reads from op `j`, then `n2`
    /// (the next chunk; 0 if none). Returns whether it moved on rather than
    /// waiting on a claim.
    fn seen(&mut self, b: &Batch, j: usize, n1: usize, n2: usize, now: Instant) -> bool {
        let shape = *self.run.shape;
        let i = b.op(j).probe as usize;
        let p = self.run.probes[i];
        let patient = p.retries < shape.checksum_retries;
        let mut at = j;
        for (k, n) in [(p.k, n1), (p.k + 1, n2)] {
            if n == 0 {
                break;
            }
            let bytes = b.span(at, n);
            let seen = scan(
                &shape,
                bytes,
                start(&shape, p.hash, k),
                self.run.keys[i],
                patient,
            );
            at += n;
            self.run.probes[i].k = k;
            match seen {
                Seen::Other { last, state } => {
                    if k + 1 < shape.place.candidates() {
                        continue;
                    }
                    return self.probed_all(i, last, state, now);
                }
                Seen::Empty { bucket, claim } => return self.empty(i, bucket, claim, now),
                Seen::Mine { bucket, at, state } => {
                    let bl = shape.layout.bucket_len;
                    let data = &bytes[at..at + bl - 8];
                    return self.mine(i, bucket, data, state, now);
                }
                Seen::Torn {
                    bucket,
                    state,
                    mine,
                } => return self.torn(i, bucket, state, mine, now),
            }
        }
        // The chunks read hold other keys: the next round reads on from the
        // chunk after the last one read.
        let p = &mut self.run.probes[i];
        p.k += 1;
        p.retries = 0;
        true
    }

    /// Every chunk of probe `i` holds other keys; `last` is the last bucket
    /// of the last chunk.
    fn probed_all(&mut self, i: usize, last: u64, state: u64, now: Instant) -> bool {
        match self.run.mode {
            Mode::Read => self.run.decide(i, Outcome::Miss),
            Mode::FindOrPut => self.run.decide(i, Outcome::Full),
            // Evict the last bucket probed, under a claim.
            Mode::Write if is_full(state) => self.take(i, last, state, Outcome::Evicted),
            Mode::Write => return self.wait_claim(i, last, state, now),
        }
        true
    }

    fn empty(&mut self, i: usize, bucket: u64, claim: Option<u64>, now: Instant) -> bool {
        match (self.run.mode, claim) {
            (Mode::Read, _) => self.run.decide(i, Outcome::Miss),
            (_, None) => self.take(i, bucket, STATE_EMPTY, Outcome::Inserted),
            // Being filled, perhaps with this key: an insert never passes it.
            (_, Some(c)) => return self.wait_claim(i, bucket, c, now),
        }
        true
    }

    fn mine(&mut self, i: usize, bucket: u64, data: &[u8], state: u64, now: Instant) -> bool {
        let value = self.run.shape.layout.decode(data, STATE_FULL).value;
        match self.run.mode {
            Mode::Read => {
                self.run.keep_value(i, value);
                self.run.decide(i, Outcome::Hit);
            }
            Mode::FindOrPut => {
                self.run.keep_value(i, value);
                self.run.decide(i, Outcome::Found);
            }
            Mode::Write if is_full(state) => self.take(i, bucket, state, Outcome::Updated),
            // Another writer is updating this key: after it.
            Mode::Write => return self.wait_claim(i, bucket, state, now),
        }
        true
    }

    fn torn(&mut self, i: usize, bucket: u64, state: u64, mine: bool, now: Instant) -> bool {
        let shape = *self.run.shape;
        let p = &mut self.run.probes[i];
        if p.retries < shape.checksum_retries {
            p.retries += 1;
            self.run.stats.checksum_retries += 1;
            self.run.past_deadline(i, now, Waited::ConsistentRead);
            return true;
        }
        // Still failing, with this key's bytes: damage (scan passes over
        // other keys' damage once patience is spent).
        debug_assert!(mine);
        match self.run.mode {
            Mode::Read => self.run.decide(i, Outcome::Corrupt),
            _ if is_full(state) => {
                let o = if self.run.mode == Mode::Write {
                    Outcome::Updated
                } else {
                    Outcome::Inserted
                };
                self.take(i, bucket, state, o);
            }
            _ => return self.wait_claim(i, bucket, state, now),
        }
        true
    }

    /// Probe `i` claims `bucket`, seen in `state` (empty or full), to store
    /// with outcome `o`.
    fn take(&mut self, i: usize, bucket: u64, state: u64, o: Outcome) {
        let tag = self.run.tag(i);
        let p = &mut self.run.probes[i];
        p.bucket = bucket;
        p.seen = state;
        p.free = state;
        p.word = claim(tag, is_full(state), full_version(state));
        p.since = None;
        p.pending = o;
        p.phase = Some(Role::Claim);
    }

    /// Probe `i` waits for claim `c` on `bucket` to be published; once it
    /// has seen the same claim for a whole deadline, it takes it over.
    fn wait_claim(&mut self, i: usize, bucket: u64, c: u64, now: Instant) -> bool {
        let deadline = self.run.shape.deadline;
        let tag = self.run.tag(i);
        let p = &mut self.run.probes[i];
        p.phase = Some(Role::Data);
        if p.bucket == bucket && p.seen == c {
            if let Some(t) = p.since {
                if now.saturating_duration_since(t) >= deadline && self.run.update.is_some() {
                    // An accumulation never takes a claim over: the
                    // stalled claimer's write may land after the takeover
                    // read the bucket, and an increment would be lost. It
                    // fails at its deadline, as fine and coarse writers do.
                    self.run.past_deadline(i, now, Waited::Claim);
                    return false;
                }
                if now.saturating_duration_since(t) >= deadline {
                    // Its claimer is gone or stalled. What the bucket holds
                    // is read under the new claim before anything is
                    // decided; given back, it goes to a new full value
                    // (its data may have changed under the old claim) if it
                    // was full, else to empty (it never held a record).
                    let next = claim_version(c).wrapping_add(1);
                    p.free = if claimed_over_full(c) {
                        full(next)
                    } else {
                        STATE_EMPTY
                    };
                    p.word = claim(tag, claimed_over_full(c), claim_version(c));
                    p.since = None;
                    p.pending = Outcome::Pending;
                    p.phase = Some(Role::Claim);
                    return true;
                }
                return false;
            }
        }
        p.bucket = bucket;
        p.seen = c;
        p.since = Some(now);
        // A new claim: others are making progress, and this probe has
        // waited its whole deadline only if the run has.
        self.run.past_deadline(i, now, Waited::Claim);
        false
    }

    /// A takeover's read of the bucket it now holds (or an accumulation's,
    /// of the bucket it claimed): this key's whole record is updated
    /// (found); another key's is pushed out if the probe claimed it to
    /// evict, else published back as it was while the probe looks on;
    /// anything not whole is overwritten.
    fn checked(&mut self, i: usize, data: &[u8]) {
        let layout = self.run.shape.layout;
        let bk = layout.decode(data, STATE_FULL);
        let whole = bk.checksum_ok();
        let mine = bk.key == self.run.keys[i];
        let pending = self.run.probes[i].pending;
        let (o, phase) = match (whole, mine, self.run.mode) {
            // An accumulation that claimed an empty bucket: whatever lies
            // there was never published (a first fill given back).
            _ if pending == Outcome::Inserted => {
                self.run.old_value(i, None, data);
                (Outcome::Inserted, Role::Store)
            }
            (true, true, Mode::FindOrPut) => {
                // Found: published, also if the stalled claim was a first
                // fill whose record landed.
                self.run.keep_value(i, bk.value);
                let next = claim_version(self.run.probes[i].word).wrapping_add(1);
                self.run.probes[i].free = full(next);
                (Outcome::Found, Role::Publish)
            }
            (true, true, _) => {
                self.run.old_value(i, Some(bk.value), data);
                (Outcome::Updated, Role::Store)
            }
            (true, false, _) if pending == Outcome::Evicted => {
                self.run.old_value(i, None, data);
                (Outcome::Evicted, Role::Store)
            }
            (true, false, _) => (Outcome::Pending, Role::Publish),
            (false, _, _) => {
                self.run.old_value(i, None, data);
                (Outcome::Inserted, Role::Store)
            }
        };
        let p = &mut self.run.probes[i];
        p.pending = o;
        p.phase = Some(phase);
    }

    /// The state word probe `p` publishes: the next full value if it wrote,
    /// else what it claimed.
    fn publish_value(p: &super::Probe) -> u64 {
        if p.dirty {
            full(claim_version(p.word).wrapping_add(1))
        } else {
            p.free
        }
    }

    fn plan(&mut self, b: &mut Batch, progressed: bool, now: Instant) -> Step {
        b.clear();
        if self.run.error.is_some() {
            return self.release(b, now);
        }
        let shape = *self.run.shape;
        let chunks = shape.place.candidates();
        for i in 0..self.run.probes.len() {
            let p = self.run.probes[i];
            if p.done {
                continue;
            }
            match p.phase {
                Some(Role::Data) => {
                    read_chunk(&shape, b, p.rank, start(&shape, p.hash, p.k), i, Role::Data);
                    // The next chunk with this one saves a round trip
                    // where there is one to save.
                    if p.k + 1 < chunks && !shape.near {
                        let s = start(&shape, p.hash, p.k + 1);
                        read_chunk(&shape, b, p.rank, s, i, Role::Next);
                    }
                }
                Some(Role::Claim) => b.cas(
                    shape.word_at(p.rank, p.bucket),
                    p.seen,
                    p.word,
                    i,
                    Role::Claim,
                ),
                Some(Role::Check) => self.run.plan_read(b, i, Role::Check),
                Some(Role::Store) if self.run.accumulate(i) => {
                    self.run.probes[i].dirty = true;
                    self.run.plan_store(b, i);
                }
                Some(Role::Store) => {
                    // An accumulation that keeps the bucket as it was.
                    self.run.probes[i].phase = Some(Role::Publish);
                    b.cas(
                        shape.word_at(p.rank, p.bucket),
                        p.word,
                        Self::publish_value(&p),
                        i,
                        Role::Publish,
                    );
                }
                Some(Role::Publish) => b.cas(
                    shape.word_at(p.rank, p.bucket),
                    p.word,
                    Self::publish_value(&p),
                    i,
                    Role::Publish,
                ),
                _ => unreachable!("every open chunked probe has a phase"),
            }
        }
        if b.is_empty() {
            return Step::Done;
        }
        self.run.pace(b, progressed);
        Step::Issue
    }

    /// Gives back every claim held or perhaps held: first the rewrites of
    /// updates whose write failed, then the claims (an insert's to empty,
    /// an update's to full).
    fn release(&mut self, b: &mut Batch, now: Instant) -> Step {
        if !self.releasing {
            self.releasing = true;
            for p in self.run.probes.iter_mut() {
                p.done = true;
                if p.hold == Hold::None {
                    p.phase = None;
                    continue;
                }
                let failed_store = p.phase == Some(Role::Store) && p.dirty;
                if failed_store && p.free == STATE_EMPTY {
                    // A first fill: back to empty, whatever landed.
                    p.dirty = false;
                }
                p.phase = Some(if failed_store && p.dirty {
                    Role::Store
                } else {
                    Role::Release
                });
            }
        }
        self.run.failed_at(now);
        b.clear();
        if !self.run.may_retry_release(now) {
            return Step::Done;
        }
        let shape = *self.run.shape;
        for role in [Role::Store, Role::Release] {
            for i in 0..self.run.probes.len() {
                let p = self.run.probes[i];
                if p.hold == Hold::None || p.phase != Some(role) {
                    continue;
                }
                if role == Role::Store {
                    self.run.plan_store(b, i);
                } else {
                    let at = shape.word_at(p.rank, p.bucket);
                    b.cas(at, p.word, Self::publish_value(&p), i, Role::Release);
                }
            }
            if !b.is_empty() {
                return Step::Issue;
            }
        }
        Step::Done
    }
}

impl Machine for Chunked<'_> {
    fn start(&mut self, b: &mut Batch, now: Instant) -> Step {
        self.plan(b, true, now)
    }

    fn on_complete(&mut self, b: &mut Batch, now: Instant) -> Step {
        if self.releasing {
            for j in 0..b.len() {
                let op = b.op(j);
                let p = &mut self.run.probes[op.probe as usize];
                match op.role {
                    Role::Store => p.phase = Some(Role::Release),
                    _ => {
                        // Given back, or not its own any more (taken
                        // over): either way nothing is held.
                        p.hold = Hold::None;
                        p.phase = None;
                    }
                }
            }
            return self.release(b, now);
        }
        let mut progressed = false;
        let mut j = 0;
        while j < b.len() {
            let op = b.op(j);
            let i = op.probe as usize;
            let follows = |at: usize, role: Role| {
                at < b.len() && b.op(at).role == role && b.op(at).probe == op.probe
            };
            match op.role {
                Role::Data => {
                    let n1 = 1 + usize::from(follows(j + 1, Role::Wrap));
                    let n2 = if follows(j + n1, Role::Next) {
                        1 + usize::from(follows(j + n1 + 1, Role::Wrap))
                    } else {
                        0
                    };
                    progressed |= self.seen(b, j, n1, n2, now);
                    j += n1 + n2;
                    continue;
                }
                Role::Claim => {
                    let p = &mut self.run.probes[i];
                    if b.word(j) == p.seen {
                        progressed = true;
                        p.hold = Hold::Held;
                        p.dirty = false;
                        // An accumulation reads the bucket it updates again
                        // under the claim: the scan's reads of the state
                        // and of the data are not one moment (a read's
                        // bytes land in no promised order), so what it saw
                        // may be older than the state it claimed from.
                        let reread = self.run.update.is_some();
                        p.phase = Some(if p.pending == Outcome::Pending || reread {
                            Role::Check
                        } else {
                            Role::Store
                        });
                    } else {
                        // Another writer got there first: scan again.
                        p.phase = Some(Role::Data);
                        p.seen = b.word(j);
                        p.since = None;
                        self.run.past_deadline(i, now, Waited::Claim);
                    }
                }
                Role::Check => {
                    progressed = true;
                    self.checked(i, b.bytes(j));
                }
                Role::Store => {
                    progressed = true;
                    self.run.probes[i].phase = Some(Role::Publish);
                }
                Role::Publish => {
                    progressed = true;
                    let p = &mut self.run.probes[i];
                    p.hold = Hold::None;
                    let ours = b.word(j) == p.word;
                    p.dirty = false;
                    if ours && p.pending != Outcome::Pending {
                        let o = p.pending;
                        self.run.decide(i, o);
                    } else if !ours && self.run.update.is_some() {
                        // Taken over while this accumulation held the
                        // claim: its store may have landed and been kept.
                        // Doing it again could count it twice; say so.
                        let found = b.word(j);
                        self.run.lost(i, Waited::Claim, found);
                        self.run.probes[i].done = true;
                        self.run.probes[i].phase = None;
                    } else {
                        // Published back another key's record after a
                        // takeover: look on. Or taken over (this claim was
                        // stalled a deadline): start again.
                        if !ours {
                            p.k = 0;
                            p.retries = 0;
                        }
                        p.phase = Some(Role::Data);
                        p.since = None;
                        self.run.past_deadline(i, now, Waited::Claim);
                    }
                }
                _ => {}
            }
            j += 1;
        }
        self.plan(b, progressed, now)
    }

    fn on_error(&mut self, e: Error, b: &mut Batch, now: Instant) -> Step {
        let retry = self.releasing;
        self.run.failed(e, now);
        for p in self.run.probes.iter_mut() {
            if p.phase == Some(Role::Claim) && p.hold == Hold::None {
                p.hold = Hold::Maybe;
            }
        }
        let step = self.release(b, now);
        if retry && step == Step::Issue {
            b.wait = Some(Duration::from_millis(1));
        }
        step
    }

    fn finish(&mut self, stats: &mut Stats) -> Result<()> {
        self.run.finish(stats)
    }
}

#[cfg(test)]
mod tests {
    use super::super::word;
    use super::*;

    #[test]
    fn claims_are_odd_and_say_what_they_replaced() {
        let tag = word::tag(5, 0xbeef);
        for (over, v) in [(false, 0u16), (true, 7), (true, u16::MAX)] {
            let c = claim(tag, over, v);
            assert!(is_claimed(c) && !is_full(c) && c != STATE_EMPTY);
            assert_eq!(claimed_over_full(c), over);
            assert_eq!(claim_version(c), v);
            assert_eq!(word::holder_of_tag(c >> 8), Some(5));
        }
        assert!(is_full(full(0)) && is_full(full(u16::MAX)));
        assert_eq!(
            full_version(full(claim_version(claim(tag, true, 9)) + 1)),
            10
        );
    }
}
