//! Errors of the fabric layer. Each names what failed and, where a peer was
//! involved, which rank and operation, so a user can act on it.

use std::ffi::CStr;
use std::time::Duration;

use fabric_sys as ffi;

/// The kind of a data-transfer operation, used in error messages and stats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// RMA read (`fi_read`).
    Read,
    /// RMA write (`fi_write`).
    Write,
    /// Atomic compare-and-swap on a u64 (`fi_compare_atomic`, `FI_CSWAP`).
    CompareAndSwap,
    /// Atomic fetch-and-add on a u64 (`fi_fetch_atomic`, `FI_SUM`).
    FetchAdd,
    /// Atomic read of a u64 (`fi_fetch_atomic`, `FI_ATOMIC_READ`).
    Fetch,
    /// Atomic swap of a u64 (`fi_fetch_atomic`, `FI_ATOMIC_WRITE`).
    Swap,
    /// Message send (`fi_send`).
    Send,
    /// Message receive (`fi_recv`).
    Recv,
}

impl std::fmt::Display for OpKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            OpKind::Read => "RMA read",
            OpKind::Write => "RMA write",
            OpKind::CompareAndSwap => "atomic compare-and-swap",
            OpKind::FetchAdd => "atomic fetch-add",
            OpKind::Fetch => "atomic fetch",
            OpKind::Swap => "atomic swap",
            OpKind::Send => "send",
            OpKind::Recv => "receive",
        })
    }
}

impl OpKind {
    /// True for the u64 atomics.
    pub fn is_atomic(self) -> bool {
        matches!(
            self,
            OpKind::CompareAndSwap | OpKind::FetchAdd | OpKind::Fetch | OpKind::Swap
        )
    }
}

/// Everything that can go wrong in the fabric layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A libfabric call returned an error code.
    #[error("{call} failed: {msg} (fi_errno {code})")]
    Call {
        /// The C function that failed.
        call: &'static str,
        /// The positive libfabric error number.
        code: i32,
        /// `fi_strerror` of it.
        msg: String,
    },
    /// `fi_getinfo` knows no provider of this name for the requested
    /// capabilities.
    #[error(
        "provider `{requested}` is not available with {needs} on this machine; \
         available: {}. Pick one with -p/--provider (see `fabkit info`)",
        if available.is_empty() { "none".to_string() } else { available.join(", ") }
    )]
    UnknownProvider {
        /// What the user asked for.
        requested: String,
        /// What it was asked for with (e.g. "RMA and atomics").
        needs: String,
        /// Providers that do offer what was asked for.
        available: Vec<String>,
    },
    /// The provider exists but cannot do something the caller needs.
    #[error("provider `{provider}` cannot do {what}; {hint}")]
    Unsupported {
        /// Provider name.
        provider: String,
        /// What is missing.
        what: String,
        /// What to do instead.
        hint: String,
    },
    /// An operation did not complete in time.
    #[error(
        "{op} to rank {peer} did not complete within {timeout:?}: the peer is dead, \
         hung, or not making progress (raise the timeout with --timeout if it is only slow)"
    )]
    Timeout {
        /// The operation.
        op: OpKind,
        /// The rank it targeted (for receives: the rank expected to send).
        peer: usize,
        /// How long was waited.
        timeout: Duration,
    },
    /// An operation completed with an error.
    #[error("{op} to rank {peer} failed: {msg} (fi_errno {code}, provider errno {prov_errno})")]
    Completion {
        /// The operation.
        op: OpKind,
        /// The rank it targeted.
        peer: usize,
        /// Positive libfabric error number.
        code: i32,
        /// Provider-specific error number.
        prov_errno: i32,
        /// Human-readable text (`fi_cq_strerror`).
        msg: String,
    },
    /// The completion queue itself failed while an operation was waited for:
    /// an overrun (an `FI_EOVERRUN` error entry), an error entry of no
    /// operation, or a failed `fi_cq_read`/`fi_cq_readerr`. Completions may
    /// have been lost.
    #[error(
        "{op} to rank {peer}: the completion queue failed ({call}: {msg}, fi_errno {code}); \
         completions may have been lost, so the rank cannot go on (restart the job)"
    )]
    CompletionQueue {
        /// The operation waited for.
        op: OpKind,
        /// The rank it targeted.
        peer: usize,
        /// The CQ call that failed.
        call: &'static str,
        /// Positive libfabric error number.
        code: i32,
        /// `fi_strerror` of it.
        msg: String,
    },
    /// The rank can no longer make progress and refuses every operation.
    #[error("rank {rank} has failed and takes no more operations: {reason}")]
    RankFailed {
        /// This rank.
        rank: usize,
        /// Why, and how many operations are lost.
        reason: String,
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
    /// An MPI call returned an error.
    #[error("{call} failed: {msg} (MPI error {code})")]
    Mpi {
        /// The MPI function.
        call: &'static str,
        /// Its return code.
        code: i32,
        /// `MPI_Error_string` of it.
        msg: String,
    },
    /// MPI refused one operation of a batch; the batch's epoch was still
    /// completed before the error was returned.
    #[error("{op} to rank {peer}: {call} failed: {msg} (MPI error {code})")]
    MpiOp {
        /// The operation.
        op: OpKind,
        /// The rank it targeted.
        peer: usize,
        /// The MPI function.
        call: &'static str,
        /// Its return code.
        code: i32,
        /// `MPI_Error_string` of it.
        msg: String,
    },
    /// A collective of the MPI bootstrap (allgather, barrier, window
    /// creation) did not complete in time: some rank never joined it.
    #[error(
        "{what} on rank {rank} did not complete within {timeout:?}: it waited for the other \
         {others} rank(s), and at least one never joined (dead, hung, or busy elsewhere; \
         raise the timeout with --timeout if it is only slow)"
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
    /// An MPI synchronisation call on one target's window (lock, unlock,
    /// flush, start) failed.
    #[error("{call} on rank {peer}'s window failed: {msg} (MPI error {code})")]
    MpiPeer {
        /// The MPI function.
        call: &'static str,
        /// The target rank.
        peer: usize,
        /// Its return code.
        code: i32,
        /// `MPI_Error_string` of it.
        msg: String,
    },
    /// A bounded wait on an MPI window (PSCW `MPI_Win_wait` through
    /// `MPI_Win_test`) ran out: the origins named never completed their
    /// access epoch.
    #[error(
        "{call} on rank {rank} did not complete within {timeout:?}: origin rank(s) {origins} \
         never completed their access epoch (dead, hung, or not running this batch)"
    )]
    WindowTimeout {
        /// The MPI function waited for.
        call: &'static str,
        /// This rank.
        rank: usize,
        /// The origins it waited for.
        origins: String,
        /// How long it waited.
        timeout: Duration,
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
    /// A peer address whose length does not match the provider's addresses:
    /// `fi_av_insert` takes no length, so it would read past a short one.
    #[error(
        "{} address is {len} B, but provider `{provider}` addresses are {expected}: \
         it was truncated or comes from another provider (check that every rank \
         runs the same fabkit and provider)",
        match peer { Some(r) => format!("rank {r}'s"), None => "the".to_string() }
    )]
    AddressLength {
        /// Whose address it is, when known.
        peer: Option<usize>,
        /// Its length.
        len: usize,
        /// What the provider reads.
        expected: String,
        /// Provider name.
        provider: String,
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
    /// A shared-memory segment is shorter than the mapping asked for:
    /// touching the missing tail would be SIGBUS, so it is refused before
    /// mapping.
    #[error(
        "shared segment {name} holds {size} B but {wanted} B were asked for: \
         it was made by another job or for another region size; start all ranks \
         with the same configuration (`fabkit clean` removes stale segments)"
    )]
    SegmentTooShort {
        /// The segment's name.
        name: String,
        /// Its size in bytes.
        size: u64,
        /// The size the caller wanted to map.
        wanted: u64,
    },
    /// An operating-system error (memory, files of the file bootstrap).
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// An operation that completed with `code` (positive fi_errno).
    pub fn completion(op: OpKind, peer: usize, code: i32, prov_errno: i32) -> Error {
        Error::Completion {
            op,
            peer,
            code,
            prov_errno,
            msg: strerror(code),
        }
    }
}

impl Error {
    /// The completion queue failed while `op` to `peer` was waited for.
    pub fn completion_queue(op: OpKind, peer: usize, call: &'static str, code: i32) -> Error {
        Error::CompletionQueue {
            op,
            peer,
            call,
            code,
            msg: strerror(code),
        }
    }
}

/// Result with the fabric [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `fi_strerror` as a String.
pub fn strerror(code: i32) -> String {
    // SAFETY: fi_strerror returns a pointer to a static NUL-terminated string
    // for any input.
    unsafe { CStr::from_ptr(ffi::fi_strerror(code)) }
        .to_string_lossy()
        .into_owned()
}

/// Turns a libfabric return code (negative on error) into a Result.
pub(crate) fn check(call: &'static str, rc: impl Into<i64>) -> Result<()> {
    let rc = rc.into();
    if rc < 0 {
        let code = (-rc) as i32;
        Err(Error::Call {
            call,
            code,
            msg: strerror(code),
        })
    } else {
        Ok(())
    }
}

pub(crate) fn call_error(call: &'static str, code: i32) -> Error {
    Error::Call {
        call,
        code,
        msg: strerror(code),
    }
}
