/* MPI constants that rsmpi does not export. In Open MPI several are
 * addresses of library globals behind macros, which bindgen cannot see; a C
 * translation unit turns them into plain symbols. */
#include <mpi.h>

const MPI_Op fabkit_mpi_replace = MPI_REPLACE;
const MPI_Op fabkit_mpi_no_op = MPI_NO_OP;
const int fabkit_mpi_lock_shared = MPI_LOCK_SHARED;
const int fabkit_mpi_lock_exclusive = MPI_LOCK_EXCLUSIVE;
const int fabkit_mpi_mode_nocheck = MPI_MODE_NOCHECK;
const int fabkit_mpi_success = MPI_SUCCESS;
const int fabkit_mpi_max_error_string = MPI_MAX_ERROR_STRING;
const int fabkit_mpi_err_other = MPI_ERR_OTHER;
const int fabkit_mpi_err_truncate = MPI_ERR_TRUNCATE;
