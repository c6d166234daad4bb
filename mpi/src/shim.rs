//! The MPI constants rsmpi lacks (`MPI_REPLACE`, `MPI_NO_OP`, the lock
//! types), exported by `mpi_shim.c` as the `mpi.h` in use defines them.

use mpi::ffi;

#[allow(non_upper_case_globals)]
extern "C" {
    pub(crate) static fabkit_mpi_replace: ffi::MPI_Op;
    pub(crate) static fabkit_mpi_no_op: ffi::MPI_Op;
    pub(crate) static fabkit_mpi_lock_shared: i32;
    pub(crate) static fabkit_mpi_lock_exclusive: i32;
    pub(crate) static fabkit_mpi_success: i32;
    pub(crate) static fabkit_mpi_max_error_string: i32;
    pub(crate) static fabkit_mpi_err_truncate: i32;
    #[cfg(feature = "test-seams")]
    pub(crate) static fabkit_mpi_err_other: i32;
}
