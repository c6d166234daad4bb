//! The errors every layer can meet: an operation that timed out or went
//! outside a region, a bad argument, ranks that disagree or cannot exchange.
//! Each names what failed and, where a peer was involved, which rank and
//! operation, so a user can act on it. The libfabric and MPI crates wrap it
//! in errors of their own.

use std::time::Duration;

use crate::op::OpKind;

/// What can go wrong in any layer, whatever carries the operations.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An operation did not complete in time.
    #[error(
        "{op} to rank {peer} did not complete within {timeout:?}: the peer is dead, \
         hung, or not making progress (if it is only slow: a longer --timeout, or \
         FABKIT_TIMEOUT_SCALE=N to stretch every timeout N times)"
    )]
    Timeout {
        /// The operation.
        op: OpKind,
        /// The rank it targeted (for receives: the rank expected to send).
        peer: usize,
        /// How long was waited.
        timeout: Duration,
    },
    /// An access outside a peer's exposed region, refused before posting.
    #[error(
        "{op} of {len} B at offset {offset} is outside rank {peer}'s region of {region_len} B"
    )]
    OutOfBounds {
        /// The operation.
        op: OpKind,
        /// Target rank.
        peer: usize,
        /// Requested offset.
        offset: u64,
        /// Requested length.
        len: usize,
        /// Size of that rank's region.
        region_len: usize,
    },
    /// A rank number outside `0..ranks`.
    #[error("rank {peer} does not exist: the job has {ranks} ranks (0..{ranks})")]
    NoSuchRank {
        /// Requested rank.
        peer: usize,
        /// Number of ranks.
        ranks: usize,
    },
    /// A collective of the MPI bootstrap (allgather, barrier, window
    /// creation) did not complete in time: some rank never joined it.
    #[error(
        "{what} on rank {rank} did not complete within {timeout:?}: it waited for the other \
         {others} rank(s), and at least one never joined (dead, hung, or busy elsewhere; \
         if it is only slow: a longer --timeout, or FABKIT_TIMEOUT_SCALE=N to stretch every \
         timeout N times)"
    )]
    CollectiveTimeout {
        /// The collective, in words.
        what: &'static str,
        /// This rank.
        rank: usize,
        /// How many other ranks it waited for.
        others: usize,
        /// How long it waited.
        timeout: Duration,
    },
    /// A collective of the MPI bootstrap failed inside MPI (it could not
    /// start, or MPI_Test reported an error): the ranks no longer agree
    /// which collective they are in, so the bootstrap is broken.
    #[error("{what} on rank {rank}: {call} failed: {msg} (MPI error {code})")]
    CollectiveFailed {
        /// The collective, in words.
        what: &'static str,
        /// This rank.
        rank: usize,
        /// The MPI function.
        call: &'static str,
        /// Its return code.
        code: i32,
        /// `MPI_Error_string` of it.
        msg: String,
    },
    /// An earlier collective of the MPI bootstrap timed out or failed, so
    /// later ones (and window frees, and `MPI_Finalize`) are refused instead
    /// of waiting for ranks that will not come.
    #[error(
        "rank {rank}: an earlier {what} did not complete, so the ranks no longer agree \
         which collective they are in; end the job"
    )]
    BootstrapBroken {
        /// This rank.
        rank: usize,
        /// The collective that did not complete.
        what: &'static str,
    },
    /// Bad argument from the caller.
    #[error("{0}")]
    InvalidArgument(String),
    /// Ranks disagree about something they must share.
    #[error("ranks disagree on {what}: {detail}")]
    Mismatch {
        /// What differs.
        what: String,
        /// The values seen.
        detail: String,
    },
    /// Ranks could not exchange their addresses.
    #[error("bootstrap failed: {0}")]
    Bootstrap(String),
    /// Another rank failed and left the job ([`crate::bootstrap::Bootstrap::leave`]):
    /// this rank's exchange ended because of it.
    #[error("rank {rank} failed and left the job: {why}")]
    PeerLeft {
        /// The rank that left.
        rank: usize,
        /// Its error, in one line.
        why: String,
    },
    /// An operating-system error (memory, files of the file bootstrap).
    /// Its cause is in its message, not also its `source()`, so a chain
    /// printed on one line says it once.
    #[error("{what}: {cause}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        cause: std::io::Error,
    },
}

/// Result with the shared [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
