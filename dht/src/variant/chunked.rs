//! Chunked linear probing (seed 002, Oortwijn): a key's buckets are linear
//! runs of C buckets (chunks), the i-th chunk placed by quadratic probing
//! from the key's first candidate, so runs do not cluster. A chunk is one
//! remote read; each round fetches two chunks (the next one with the
//! current), halving round trips for long probes. An empty bucket is claimed
//! by one compare-and-swap on its state word (empty to a claim carrying the
//! claimer's tag), filled, then published (claim to full by compare-and-swap)
//! in a later batch; reads verify the CRC. A failed batch gives every claim
//! it holds or may hold back (claim to empty by compare-and-swap, which does
//! nothing if the claim was never taken or already published).

use std::time::{Duration, Instant};

use super::{Batch, Hold, Machine, Mode, Outcome, Role, Run, Shape, Step};
use crate::layout::{is_claimed, STATE_EMPTY, STATE_FULL};
use crate::outcome::{Error, Result, Stats};

/// The claim of a probe with tag `tag` (odd, so never empty or full).
fn claim(tag: u64) -> u64 {
    tag << 8 | 1
}

/// Where chunk `i` of a key starts.
fn start(shape: &Shape, c0: u64, i: u32) -> u64 {
    let chunk = u64::from(shape.chunk).min(shape.buckets);
    let starts = shape.buckets - chunk + 1;
    let tri = u64::from(i) * (u64::from(i) + 1) / 2;
    (c0 % starts + tri.wrapping_mul(chunk) % starts) % starts
}

fn chunk_len(shape: &Shape) -> u64 {
    u64::from(shape.chunk).min(shape.buckets)
}

/// A scanned bucket.
enum Seen {
    Empty(u64),
    Claimed(u64, u64),
    Mine {
        bucket: u64,
        at: usize,
        ok: bool,
    },
    /// Full, another key, and its checksum fails: a write in flight (its
    /// key bytes may be torn too, so it may be this key's).
    Torn,
    Other,
}

/// Scans a fetched chunk (first bucket `first`) for `key` up to the first
/// decisive bucket.
fn scan(shape: &Shape, bytes: &[u8], first: u64, key: &[u8]) -> Seen {
    let bl = shape.layout.bucket_len;
    for (j, b) in bytes.chunks_exact(bl).enumerate() {
        let state = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
        let bucket = first + j as u64;
        if state == STATE_EMPTY {
            return Seen::Empty(bucket);
        }
        if is_claimed(state) {
            return Seen::Claimed(bucket, state);
        }
        if state == STATE_FULL {
            let bk = shape.layout.decode(&b[8..], state);
            if bk.key == key {
                return Seen::Mine {
                    bucket,
                    at: j * bl + 8,
                    ok: bk.checksum_ok(),
                };
            }
            if !bk.checksum_ok() {
                return Seen::Torn;
            }
        }
    }
    Seen::Other
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

    /// The chunks of probe `i` arrived in ops `j` (and `j + 1` if `two`).
    /// Returns whether it moved on rather than waiting on a claim.
    fn seen(&mut self, b: &Batch, j: usize, two: bool, now: Instant) -> bool {
        let shape = *self.run.shape;
        let i = b.op(j).probe as usize;
        let p = self.run.probes[i];
        let c0 = shape.place.candidate(p.hash, 0);
        let key = self.run.keys[i];
        let mut seen = Seen::Other;
        let mut scanned = 0;
        for (n, op) in [j, j + 1]
            .into_iter()
            .take(1 + usize::from(two))
            .enumerate()
        {
            scanned += 1;
            seen = scan(&shape, b.bytes(op), start(&shape, c0, p.k + n as u32), key);
            if !matches!(seen, Seen::Other) {
                if let Seen::Mine { at, ok, bucket } = seen {
                    let bl = shape.layout.bucket_len;
                    let data = &b.bytes(op)[at..at + bl - 8];
                    let bk = shape.layout.decode(data, STATE_FULL);
                    match self.run.mode {
                        Mode::Read if ok => {
                            self.run.keep_value(i, bk.value);
                            self.run.decide(i, Outcome::Hit);
                        }
                        Mode::Read => {
                            let p = &mut self.run.probes[i];
                            if p.retries < shape.checksum_retries {
                                p.retries += 1;
                                self.run.stats.checksum_retries += 1;
                                self.run.past_deadline(i, now, "a consistent read");
                            } else {
                                self.run.decide(i, Outcome::Corrupt);
                            }
                        }
                        Mode::FindOrPut => {
                            self.run.keep_value(i, bk.value);
                            self.run.decide(i, Outcome::Found);
                        }
                        Mode::Write => {
                            // An update in place (a claim first: issue 12).
                            let p = &mut self.run.probes[i];
                            p.bucket = bucket;
                            p.pending = Outcome::Updated;
                            p.phase = Some(Role::Store);
                        }
                    }
                    return true;
                }
                break;
            }
        }
        let p = &mut self.run.probes[i];
        if matches!(seen, Seen::Torn) {
            if p.retries < shape.checksum_retries {
                p.retries += 1;
                self.run.stats.checksum_retries += 1;
                self.run.past_deadline(i, now, "a consistent read");
                return true;
            }
            // Still torn: damage; move past it as another key's.
            seen = Seen::Other;
        }
        match seen {
            Seen::Empty(bucket) => {
                if self.run.mode == Mode::Read {
                    self.run.decide(i, Outcome::Miss);
                } else {
                    p.bucket = bucket;
                    p.phase = Some(Role::Claim);
                }
            }
            Seen::Claimed(bucket, state) => {
                // Being written, perhaps with this key: look again, until
                // the deadline.
                p.bucket = bucket;
                p.seen = state;
                self.run.past_deadline(i, now, "the claim");
                return false;
            }
            Seen::Other => {
                let last_chunk = p.k + scanned - 1;
                p.k += scanned;
                p.retries = 0;
                if p.k < shape.place.candidates() {
                    return true;
                }
                match self.run.mode {
                    Mode::Read => self.run.decide(i, Outcome::Miss),
                    Mode::FindOrPut => self.run.decide(i, Outcome::Full),
                    Mode::Write => {
                        // Every chunk full: overwrite the last bucket probed.
                        p.bucket = start(&shape, c0, last_chunk) + chunk_len(&shape) - 1;
                        p.pending = Outcome::Evicted;
                        p.phase = Some(Role::Store);
                    }
                }
            }
            Seen::Mine { .. } | Seen::Torn => unreachable!("handled above"),
        }
        true
    }

    fn plan(&mut self, b: &mut Batch, progressed: bool, now: Instant) -> Step {
        b.clear();
        if self.run.error.is_some() {
            return self.release(b, now);
        }
        let shape = *self.run.shape;
        let bl = shape.layout.bucket_len;
        let chunks = shape.place.candidates();
        for i in 0..self.run.probes.len() {
            let p = self.run.probes[i];
            if p.done {
                continue;
            }
            match p.phase {
                Some(Role::Data) => {
                    let c0 = shape.place.candidate(p.hash, 0);
                    let len = chunk_len(&shape) as usize * bl;
                    for (k, role) in [(p.k, Role::Data), (p.k + 1, Role::Next)] {
                        if k < chunks {
                            let at = shape.word_at(p.rank, start(&shape, c0, k));
                            b.read(at, len, i, role);
                        }
                    }
                }
                Some(Role::Claim) => {
                    let c = claim(self.run.tag(i));
                    self.run.probes[i].word = c;
                    b.cas(
                        shape.word_at(p.rank, p.bucket),
                        STATE_EMPTY,
                        c,
                        i,
                        Role::Claim,
                    );
                }
                Some(Role::Store) => {
                    let at = shape.data_at(p.rank, p.bucket);
                    let buf = b.write(at, shape.layout.data_len(), i, Role::Store);
                    self.run.encode(i, buf);
                }
                Some(Role::Publish) => b.cas(
                    shape.word_at(p.rank, p.bucket),
                    p.word,
                    STATE_FULL,
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

    /// Gives back every claim held or perhaps held (claim to empty).
    fn release(&mut self, b: &mut Batch, now: Instant) -> Step {
        self.releasing = true;
        self.run.failed_at(now);
        b.clear();
        let shape = *self.run.shape;
        for i in 0..self.run.probes.len() {
            let p = &mut self.run.probes[i];
            p.done = true;
            if p.hold != Hold::None {
                p.phase = Some(Role::Release);
                b.cas(
                    shape.word_at(p.rank, p.bucket),
                    p.word,
                    STATE_EMPTY,
                    i,
                    Role::Release,
                );
            }
        }
        if b.is_empty() || !self.run.may_retry_release(now) {
            b.clear();
            return Step::Done;
        }
        Step::Issue
    }
}

impl Machine for Chunked<'_> {
    fn start(&mut self, b: &mut Batch, now: Instant) -> Step {
        self.plan(b, true, now)
    }

    fn on_complete(&mut self, b: &mut Batch, now: Instant) -> Step {
        if self.releasing {
            for j in 0..b.len() {
                self.run.probes[b.op(j).probe as usize].hold = Hold::None;
            }
            return self.release(b, now);
        }
        let mut progressed = false;
        let mut j = 0;
        while j < b.len() {
            let op = b.op(j);
            let i = op.probe as usize;
            match op.role {
                Role::Data => {
                    let two = j + 1 < b.len() && b.op(j + 1).role == Role::Next;
                    progressed |= self.seen(b, j, two, now);
                    j += usize::from(two);
                }
                Role::Claim => {
                    progressed = true;
                    let p = &mut self.run.probes[i];
                    if b.word(j) == STATE_EMPTY {
                        p.hold = Hold::Held;
                        p.pending = Outcome::Inserted;
                        p.phase = Some(Role::Store);
                    } else {
                        // Another writer claimed it first: scan this chunk again.
                        p.phase = Some(Role::Data);
                        p.seen = b.word(j);
                        self.run.past_deadline(i, now, "the claim");
                    }
                }
                Role::Store => {
                    progressed = true;
                    let p = &mut self.run.probes[i];
                    if p.hold == Hold::Held {
                        p.phase = Some(Role::Publish);
                    } else {
                        let o = p.pending;
                        self.run.decide(i, o);
                    }
                }
                Role::Publish => {
                    progressed = true;
                    self.run.probes[i].hold = Hold::None;
                    if b.word(j) != self.run.probes[i].word {
                        self.run.lost(i, "the claim", b.word(j));
                    }
                    let o = self.run.probes[i].pending;
                    self.run.decide(i, o);
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
