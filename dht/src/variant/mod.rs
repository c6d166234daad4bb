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

mod batch;
pub(crate) mod chunked;
pub(crate) mod coarse;
pub(crate) mod fine;
mod lock;
pub(crate) mod lockfree;
mod look;
mod run;

use std::time::{Duration, Instant};

use crate::layout::Layout;
use crate::outcome::{Error, Result, Stats, Write};
use crate::placement::Placement;
use crate::transport::Remote;

pub(crate) use batch::{recycle, Batch, Role};
pub(crate) use lock::{lock_failed, lock_released, plan_lock_release, release_step, released};
pub(crate) use look::{locked_look, locked_read, look, take, Look, Settled};
pub(crate) use run::{store_or_advance, Hold, Probe, Run, Update, Updating};

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

    /// A writing run's outcome as the caller sees it.
    pub(crate) fn written(self) -> Write {
        match self {
            Outcome::Updated => Write::Updated,
            Outcome::Evicted => Write::Evicted,
            _ => Write::Inserted,
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
    /// Rounds are memory accesses, not round trips ([`crate::transport::Caps::near`]).
    pub(crate) near: bool,
    /// A batch's ops take effect in order ([`crate::transport::Caps::in_order`]).
    pub(crate) in_order: bool,
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
