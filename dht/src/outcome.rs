//! What the DHT's operations return: outcomes, errors and statistics. A
//! leaf module: the variants' state machines and the table that drives them
//! both use it, and it uses neither.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::layout::Variant;

/// Errors of the DHT.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A key or value of the wrong length.
    #[error("{what} is {got} B, but this table was created for {expected} B {what}s")]
    Length {
        /// "key" or "value".
        what: &'static str,
        /// Its length.
        got: usize,
        /// The table's.
        expected: usize,
    },
    /// The configuration cannot work.
    #[error("invalid DHT configuration: {0}")]
    Config(String),
    /// The transport's region cannot hold the table.
    #[error(
        "rank {rank}'s region is {have} B but {buckets} {variant:?} buckets need {need} B: \
         give the transport a larger region (Config::region_len) or fewer buckets"
    )]
    RegionTooSmall {
        /// Rank.
        rank: usize,
        /// Bytes available.
        have: usize,
        /// Bytes needed.
        need: usize,
        /// Buckets asked for.
        buckets: u64,
        /// Variant.
        variant: Variant,
    },
    /// The variant needs atomics the transport does not have.
    #[error(
        "the {variant:?} variant needs remote atomics, which {transport} does not offer: \
         use the lockfree variant, or a provider with atomics (see `fabkit info`)"
    )]
    NoAtomics {
        /// Variant.
        variant: Variant,
        /// Transport name.
        transport: String,
    },
    /// The transport cannot make a write visible before a later operation.
    #[error(
        "{transport} offers no way to make a write visible before a later operation (neither \
         FI_DELIVERY_COMPLETE, FI_FENCE nor read-after-write order): the DHT's locks and claims \
         would release data that has not landed; pick a provider whose `order` column in \
         `fabkit info` is not `none`"
    )]
    Unordered {
        /// Transport name.
        transport: String,
    },
    /// Ranks created the table differently.
    #[error("ranks disagree on the table: {0}")]
    Mismatch(String),
    /// A bounded wait ran out: a lock, a claim or a consistent snapshot of
    /// one bucket did not come within the operation's deadline.
    #[error(
        "{op} of key {key} gave up after {waited:?}: {what} (bucket {bucket}) on rank {rank}{holder} \
         (a rank that died holding it, or contention past the deadline; raise it with Dht::set_deadline)"
    )]
    Deadline {
        /// "read", "write" or "find_or_put".
        op: &'static str,
        /// The key, as hex (its first 16 bytes).
        key: String,
        /// What was waited for: "the lock", "the claim", "a consistent read".
        what: &'static str,
        /// The rank holding the bucket.
        rank: usize,
        /// The bucket (for coarse, the region's lock: bucket 0).
        bucket: u64,
        /// Who held it when the wait ended, as " (held by rank r)", or "".
        holder: String,
        /// How long the operation had waited.
        waited: std::time::Duration,
    },
    /// A lock or claim this operation held was no longer its own when it
    /// gave it back: another rank broke it, or a late operation landed.
    #[error(
        "{op} of key {key}: {what} of bucket {bucket} on rank {rank} was no longer held by this \
         operation when it gave it back (the word was {found:#x}); the bucket's data may be torn"
    )]
    Lost {
        /// "read", "write" or "find_or_put".
        op: &'static str,
        /// The key, as hex.
        key: String,
        /// "the lock", "the region lock" or "the claim".
        what: &'static str,
        /// The rank holding the bucket.
        rank: usize,
        /// The bucket.
        bucket: u64,
        /// The word found instead.
        found: u64,
    },
    /// A defect in a variant's state machine (please report it).
    #[error("internal error: {0}")]
    Internal(String),
    /// The transport failed: its own error ([`crate::Transport::Error`]),
    /// boxed so that the table's type does not depend on the transport's;
    /// [`Error::transport_error`] gives it back typed.
    #[error(transparent)]
    Transport(Box<dyn std::error::Error + Send + Sync + 'static>),
    /// The ranks could not exchange what the table's collectives need
    /// (create, dump, restore): the bootstrap failed, or a rank left.
    #[error(transparent)]
    Bootstrap(#[from] fabkit_core::Error),
    /// Reading or writing a file (a dump's shard) failed. The cause is in
    /// the message, not also the `source()`, so a chain printed on one line
    /// says it once.
    #[error("{what} {}: {cause}", path.display())]
    Io {
        /// What was being done: "creating", "reading", "renaming to" ...
        what: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// The cause.
        cause: std::io::Error,
    },
    /// A dump's shard is damaged, truncated, or not part of the dump being
    /// restored; nothing was restored.
    #[error("{}, byte {offset}: {what}", path.display())]
    Shard {
        /// The shard.
        path: std::path::PathBuf,
        /// Where in it the problem is.
        offset: u64,
        /// What is wrong, and what to do.
        what: String,
    },
    /// A dump found a lock held, or the region changing: the table is not
    /// quiet, and what lies under a held lock may be torn.
    #[error(
        "rank {rank}: {what}; a dump needs a quiet table: stop every writer first (a lock left \
         held by a writer that died stays held: restore from an earlier dump instead)"
    )]
    Held {
        /// The rank whose region it is.
        rank: usize,
        /// What was found.
        what: String,
    },
    /// A collective operation failed on one or more ranks; every rank
    /// returns this same error (see [`crate::collective::agree`]).
    #[error("{op} failed on {}", describe(failed))]
    Collective {
        /// The operation: "dump", "restore" ...
        op: &'static str,
        /// Each failing rank and its message, in rank order.
        failed: Vec<(usize, String)>,
        /// This rank's own error, if it was one of them (its message is
        /// already in `failed`, so it is not a `source`: one line says all).
        local: Option<Box<Error>>,
    },
    /// A request on the message path got no reply within the table's
    /// deadline (or its reply could not be received).
    #[error(
        "no reply from rank {rank} to a {op} of {keys} keys (request {id}) within {waited:?}: \
         {}: {cause}",
        if *changes { "the owner may have applied it" } else { "a read changes nothing" }
    )]
    NoReply {
        /// The owner asked.
        rank: usize,
        /// What was asked: "read", "write", "find-or-put".
        op: &'static str,
        /// Keys the request carried.
        keys: usize,
        /// The request's id.
        id: u64,
        /// How long the caller waited.
        waited: Duration,
        /// Whether the request changes the table (a write, an insert): then
        /// the owner may have applied it although no reply came, and a
        /// retry of a non-idempotent operation may apply it twice.
        changes: bool,
        /// What the messenger said.
        cause: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// An owner received the request and could not run it (its own
    /// deadline, its transport): nothing of it was applied unless said.
    #[error("rank {rank} could not run a {op} of {keys} keys: {message}")]
    Remote {
        /// The owner.
        rank: usize,
        /// What was asked.
        op: &'static str,
        /// Keys the request carried.
        keys: usize,
        /// The owner's error, as it said it.
        message: String,
    },
    /// A reply that is not the request's, or does not add up.
    #[error("rank {rank}'s reply to a {op} (request {id}) was refused: {why}")]
    BadReply {
        /// The owner.
        rank: usize,
        /// What was asked.
        op: &'static str,
        /// The request's id.
        id: u64,
        /// Why.
        why: Refusal,
    },
}

impl Error {
    /// A transport's error, boxed into [`Error::Transport`].
    pub(crate) fn transport(e: impl std::error::Error + Send + Sync + 'static) -> Error {
        Error::Transport(Box::new(e))
    }

    /// The transport's error of type `E` behind this one, if that is what
    /// failed (for example `fabkit_fabric::Error` under a fabric rank).
    pub fn transport_error<E: std::error::Error + 'static>(&self) -> Option<&E> {
        match self {
            Error::Transport(e) => e.downcast_ref(),
            _ => None,
        }
    }
}

/// "rank 1: msg", or "ranks 0, 2: msg; rank 3: other" (ranks with the same
/// message named together), for [`Error::Collective`].
fn describe(failed: &[(usize, String)]) -> String {
    let mut groups: Vec<(Vec<usize>, &str)> = Vec::new();
    for (rank, msg) in failed {
        match groups.iter_mut().find(|g| g.1 == msg) {
            Some(g) => g.0.push(*rank),
            None => groups.push((vec![*rank], msg)),
        }
    }
    groups
        .iter()
        .map(|(ranks, msg)| {
            let list: Vec<String> = ranks.iter().map(usize::to_string).collect();
            let s = if ranks.len() == 1 { "" } else { "s" };
            format!("rank{s} {}: {msg}", list.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Result with the DHT [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What a read found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Read {
    /// The key's value.
    Hit(Vec<u8>),
    /// Not in the table.
    Miss,
    /// The key's bucket kept failing its checksum (lockfree, chunked): a
    /// concurrent write, or damage. Lockfree marks the bucket invalid, so
    /// that a later write can reuse it.
    Corrupt,
}

/// What a read found, its value (on a hit) having gone into the caller's
/// buffer: the allocation-free form of [`Read`], from [`crate::Dht::read_into`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Found {
    /// The key's value is in the caller's buffer.
    Hit,
    /// Not in the table.
    #[default]
    Miss,
    /// The key's bucket kept failing its checksum (see [`Read::Corrupt`]).
    Corrupt,
}

/// What a write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Write {
    /// Stored in an empty (or invalid) bucket.
    Inserted,
    /// The key was there; its value was replaced.
    Updated,
    /// Every candidate held another key; the last one was overwritten.
    Evicted,
}

/// What `find_or_put` did (chunked).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FindOrPut {
    /// The key was there, with this value (left unchanged).
    Found(Vec<u8>),
    /// The key was absent and is now stored.
    Inserted,
    /// Absent, and every probed chunk is full.
    Full,
}

/// Per-rank statistics; add them up with [`Stats::add`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Keys read.
    pub reads: u64,
    /// Keys written.
    pub writes: u64,
    /// Reads that found the key.
    pub hits: u64,
    /// Reads that did not.
    pub misses: u64,
    /// Reads returned as corrupt.
    pub corrupt: u64,
    /// Writes into empty or invalid buckets.
    pub inserts: u64,
    /// Writes that replaced a value.
    pub updates: u64,
    /// Writes that overwrote another key.
    pub evictions: u64,
    /// Re-reads after a checksum mismatch.
    pub checksum_retries: u64,
    /// Buckets marked invalid.
    pub invalidations: u64,
    /// Failed lock attempts (fine, coarse).
    pub lock_retries: u64,
    /// Remote operations issued.
    pub remote_ops: u64,
    /// Batches (post/complete cycles) issued.
    pub batches: u64,
    /// Bytes the remote operations carried: read and written data, and
    /// the operand and result words of atomics (a region lock taken with
    /// the transport's own mechanism counts as one word).
    #[serde(default)]
    pub remote_bytes: u64,
    /// Of `remote_ops`: the ones this rank aimed at itself (through the
    /// transport all the same, unless it maps its own region).
    #[serde(default)]
    pub self_ops: u64,
    /// Of `remote_ops`: reads aimed at other ranks.
    #[serde(default)]
    pub cross_reads: u64,
    /// Of `remote_ops`: writes aimed at other ranks.
    #[serde(default)]
    pub cross_writes: u64,
    /// Of `remote_ops`: atomics aimed at other ranks (and region locks
    /// taken with the transport's own mechanism).
    #[serde(default)]
    pub cross_atomics: u64,
    /// Keys of this rank's operations that it owned itself (read or
    /// written in its own region, never leaving it).
    #[serde(default)]
    pub own_keys: u64,
    /// Request messages this rank sent on the message path (one per owner
    /// per batch, or more where a batch outgrows a message).
    #[serde(default)]
    pub requests: u64,
    /// Keys those requests carried.
    #[serde(default)]
    pub request_keys: u64,
    /// Bytes of those requests and their replies.
    #[serde(default)]
    pub message_bytes: u64,
    /// Requests of peers this rank's service ran.
    #[serde(default)]
    pub served_requests: u64,
    /// Keys of those requests.
    #[serde(default)]
    pub served_keys: u64,
    /// Messages the service refused (malformed, another version or table,
    /// sizes not the table's, not from a member, or longer than any
    /// request and dropped on arrival): never run, never answered.
    #[serde(default)]
    pub refused: u64,
    /// Of `refused`: from an address not in the job, or claiming a rank it
    /// did not come from.
    #[serde(default)]
    pub strangers: u64,
    /// Requests the service had run already (a duplicate the network
    /// delivered): dropped, not answered.
    #[serde(default)]
    pub duplicates: u64,
    /// Busy CPU time of this rank's service thread, ns: what answering
    /// peers' requests cost, idle waits included.
    #[serde(default)]
    pub service_cpu_ns: u64,
}

/// Every counter of [`Stats`], in one order: the one its wire form, sums
/// and differences follow (a counter added here is added everywhere).
macro_rules! counters {
    ($m:ident) => {
        $m!(
            reads,
            writes,
            hits,
            misses,
            corrupt,
            inserts,
            updates,
            evictions,
            checksum_retries,
            invalidations,
            lock_retries,
            remote_ops,
            batches,
            remote_bytes,
            self_ops,
            cross_reads,
            cross_writes,
            cross_atomics,
            own_keys,
            requests,
            request_keys,
            message_bytes,
            served_requests,
            served_keys,
            refused,
            strangers,
            duplicates,
            service_cpu_ns
        )
    };
}

macro_rules! count_fields {
    ($($f:ident),*) => { [$(stringify!($f)),*].len() };
}

/// How many counters a [`Stats`] holds.
pub const COUNTERS: usize = counters!(count_fields);

impl Stats {
    /// The counters in their one order (see `COUNTERS`).
    pub fn to_array(&self) -> [u64; COUNTERS] {
        macro_rules! arr {
            ($($f:ident),*) => { [$(self.$f),*] };
        }
        counters!(arr)
    }

    /// The counters from `to_array`'s order.
    pub fn from_array(a: [u64; COUNTERS]) -> Stats {
        let mut s = Stats::default();
        macro_rules! set {
            ($($f:ident),*) => {
                let mut it = a.into_iter();
                $(s.$f = it.next().unwrap_or(0);)*
            };
        }
        counters!(set);
        s
    }

    /// Field-wise sum.
    pub fn add(&mut self, o: &Stats) {
        let (mut a, b) = (self.to_array(), o.to_array());
        for (x, y) in a.iter_mut().zip(b) {
            *x += y;
        }
        *self = Stats::from_array(a);
    }

    /// What was counted since `earlier` (a snapshot of the same counters),
    /// field by field; a counter that went back gives 0.
    pub fn since(&self, earlier: &Stats) -> Stats {
        let (mut a, b) = (self.to_array(), earlier.to_array());
        for (x, y) in a.iter_mut().zip(b) {
            *x = x.saturating_sub(y);
        }
        Stats::from_array(a)
    }

    /// Remote operations per DHT operation.
    pub fn ops_per_op(&self) -> f64 {
        let n = self.reads + self.writes;
        if n == 0 {
            0.0
        } else {
            self.remote_ops as f64 / n as f64
        }
    }
}

/// The hex form of a key's first 16 bytes, for error messages.
pub(crate) fn key_hex(key: &[u8]) -> String {
    let mut s: String = key.iter().take(16).map(|b| format!("{b:02x}")).collect();
    if key.len() > 16 {
        s.push_str("..");
    }
    s
}

/// Why a message was refused. Each is counted; none is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// Shorter than a header, or its length disagrees with its counts.
    Malformed,
    /// Not this format, or another version of it.
    Version,
    /// For another table (another job, or a table freed and made again).
    Table,
    /// From an address not in the job, or claiming another rank than the
    /// one it came from.
    Stranger,
    /// Key or value lengths other than the table's, a count of zero or
    /// over the most a message carries, or an unknown kind.
    Sizes,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Refusal::Malformed => "malformed",
            Refusal::Version => "another version",
            Refusal::Table => "another table",
            Refusal::Stranger => "not from a member",
            Refusal::Sizes => "sizes not the table's",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{describe, Stats};

    #[test]
    fn since_undoes_add_field_by_field_and_never_wraps() {
        // Every field distinct, so a field paired with another shows.
        let earlier = Stats::from_array(std::array::from_fn(|i| i as u64 + 1));
        let step = Stats::from_array(std::array::from_fn(|i| (i as u64 + 1) * 100));
        let mut now = earlier;
        now.add(&step);
        assert_eq!(now.since(&earlier), step);
        assert_eq!(earlier.since(&now), Stats::default());
    }

    #[test]
    fn ranks_with_one_message_are_named_together() {
        let f = vec![
            (0, "a".to_string()),
            (2, "b".to_string()),
            (3, "a".to_string()),
        ];
        assert_eq!(describe(&f), "ranks 0, 3: a; rank 2: b");
        assert_eq!(describe(&f[1..2]), "rank 2: b");
    }
}
