//! The read rules: what each variant's reader makes of a bucket, for its
//! own reads and for the dump.

use super::{chunked, coarse, fine, lockfree, Outcome, Run};
use crate::outcome::Write;

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
