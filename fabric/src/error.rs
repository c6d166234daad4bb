//! Errors of the fabric layer. Each names what failed and, where a peer was
//! involved, which rank and operation, so a user can act on it.

use std::ffi::CStr;

use fabkit_core::OpKind;
use fabric_sys as ffi;

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
    /// A message longer than the buffer posted for it. It is refused
    /// whole, never handed over cut to the buffer's length.
    #[error(
        "{what}: the message is {}longer than the {limit} B {room}; it was refused, not cut",
        len.map(|n| format!("{n} B, ")).unwrap_or_default()
    )]
    TooLong {
        /// The operation and the peer, in words (`receive to rank 0`).
        what: String,
        /// The message's length, when the provider said it.
        len: Option<usize>,
        /// The room there was.
        limit: usize,
        /// What the room was (`buffer given to recv`).
        room: String,
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
    /// An error every layer can meet: a timeout, a bound, a bad argument, a
    /// bootstrap that failed.
    #[error(transparent)]
    Core(#[from] fabkit_core::Error),
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
