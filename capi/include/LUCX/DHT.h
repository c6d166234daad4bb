/* The MPI-DHT's other include path: with LUCX_MPI_IMPL defined, its MPI
 * build's API, the same as <LUCX/MPI/DHT.h>. fabkit offers no UCX build. */
#ifndef FABKIT_LUCX_DHT_H
#define FABKIT_LUCX_DHT_H

#ifndef LUCX_MPI_IMPL
#error "fabkit offers the MPI-DHT's MPI API only: define LUCX_MPI_IMPL, or include <LUCX/MPI/DHT.h>"
#endif

#include <LUCX/MPI/DHT.h>

#endif
