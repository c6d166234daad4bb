/* Everything fabkit uses from libfabric. Kept to the stable public headers. */
#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

/* FI_VERSION is a function-like macro, which bindgen drops; expose the
 * version of the headers we were compiled against as constants. */
static const unsigned int fabkit_fi_major_version = FI_MAJOR_VERSION;
static const unsigned int fabkit_fi_minor_version = FI_MINOR_VERSION;
