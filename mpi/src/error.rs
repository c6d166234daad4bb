//! Errors of MPI calls: each names the call and, where a target was
//! involved, its rank; MPI's own text comes from `MPI_Error_string`.

use std::time::Duration;

use fabkit_core::OpKind;

use mpi::ffi;

use crate::shim::{fabkit_mpi_max_error_string, fabkit_mpi_success};

/// What can go wrong with MPI's bootstrap and windows.
#[derive(Debug, thiserror::Error)]
pub enum Error {
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
    /// An error every layer can meet: a timeout, a bound, a bad argument, a
    /// collective that did not complete.
    #[error(transparent)]
    Core(#[from] fabkit_core::Error),
}

/// Result with the MPI [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `MPI_Error_string` of `rc`.
pub(crate) fn error_string(rc: i32) -> String {
    // SAFETY: a plain constant exported by the shim.
    let mut buf = vec![0u8; unsafe { fabkit_mpi_max_error_string }.max(0) as usize + 1];
    let mut len = 0;
    // SAFETY: buf has room for MPI_MAX_ERROR_STRING characters.
    unsafe { ffi::MPI_Error_string(rc, buf.as_mut_ptr().cast(), &mut len) };
    buf.truncate((len.max(0) as usize).min(buf.len()));
    String::from_utf8_lossy(&buf).into_owned()
}

/// Turns an MPI return code into a Result naming `call`.
pub(crate) fn check(call: &'static str, rc: i32) -> Result<()> {
    // SAFETY: a plain constant exported by the shim.
    if rc == unsafe { fabkit_mpi_success } {
        return Ok(());
    }
    Err(Error::Mpi {
        call,
        code: rc,
        msg: error_string(rc),
    })
}
