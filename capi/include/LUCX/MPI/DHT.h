/* fabkit's distributed hash table for MPI programs, with the API of the
 * public MPI-DHT (types, functions and return codes), so that a program
 * written against that header relinks against fabkit unchanged:
 *
 *   mpicc prog.c $(pkg-config --cflags --libs fabkit-dht)
 *
 * The table, by default and by choice:
 * - By default a table is the lock-free variant on a duplicate of the
 *   caller's communicator, as the MPI-DHT's default build: DHT_read can
 *   return DHT_READ_CORRUPT. A program built against the MPI-DHT's
 *   coarse-locking variant gets lock-free semantics unless it chooses
 *   coarse (FABKIT_DHT_VARIANT=coarse). Its operations take the auto path:
 *   ranks on one node share their regions as shared memory; across nodes
 *   a batch's keys go as one MPI point-to-point request per owner, run by
 *   the owner's service thread, where MPI gives MPI_THREAD_MULTIPLE
 *   (MPI_Init_thread), else by MPI one-sided operations on an
 *   MPI_Win_allocate window, as the MPI-DHT does. fabkit_dht_describe says
 *   which path a table took and why.
 * - The environment chooses, read at each DHT_create, the same on every
 *   rank (ranks that differ fail DHT_create on all):
 *     FABKIT_DHT_VARIANT    lockfree (default), fine, coarse, chunked
 *     FABKIT_DHT_TRANSPORT  mpi (default), fabric (libfabric to every
 *                           rank), shm (shared memory to the ranks of this
 *                           node, libfabric to the others)
 *     FABKIT_DHT_PROVIDER   the libfabric provider of fabric and shm
 *                           (default "tcp;ofi_rxm"; "verbs;ofi_rxm",
 *                           "cxi", "efa", "psm3" on their fabrics)
 *     FABKIT_DHT_DOMAIN     its interface, device or network (default:
 *                           chosen)
 *     FABKIT_DHT_PATH       how operations travel: auto (default), memory
 *                           (shared memory within a node, one-sided to
 *                           others), rma (one-sided to every rank: MPI
 *                           windows or libfabric RMA), message (one
 *                           request per owner and batch); not an option
 *                           field. A path the transport cannot carry (shm
 *                           with another path; message under MPI without
 *                           MPI_THREAD_MULTIPLE; memory across nodes under
 *                           MPI) fails DHT_create with the reason.
 *   fabkit_dht_create takes the same choices as strings, over the
 *   environment's. CMake's MPIDHT:: targets choose a variant by name, as
 *   the MPI-DHT's do (see FABKIT_DHT_LINK_VARIANT at the end).
 * - DHT_write_accumulate updates a key's value while the variant holds its
 *   bucket (fine, coarse, chunked); on a lock-free table it returns
 *   DHT_NOT_IMPLEMENTED, and on the message path, for a key whose owner is
 *   reached by messages, an error (the callback cannot travel). The callback gets (send_size, data, value size,
 *   value): the stored value, or zeros for a key not there, to update in
 *   place; it returns 0 to store it. Keep it short: it runs while the
 *   bucket is held. It must not call the table, nor throw. A call that
 *   fails before giving the bucket back leaves it as it was, so a retry
 *   counts once; one that fails in giving it back has stored the value. A
 *   chunked accumulation never takes over a claim a stalled writer holds:
 *   it fails after the timeout instead.
 * - Under Open MPI 4.1 the default one-sided component, osc rdma, crashes
 *   in the atomics that the fine, coarse and chunked variants send on MPI
 *   windows (the rma path): run them with --mca osc sm,pt2pt (or ucx).
 *   DHT_create refuses them where the job's list allows osc rdma
 *   (OMPI_MCA_osc=rdma, or pt2pt,rdma: Open MPI picks by priority); where
 *   no list is given (or one of exclusions keeps rdma; an MCA parameter
 *   file may also set it) fabkit cannot see which component MPI chose, and
 *   fabkit_dht_describe says so.
 * - DHT_to_file writes fabkit's checksummed shards <filename>.rank<N>;
 *   DHT_from_file reads them (not the MPI-DHT's files) into a table of any
 *   size or rank count.
 * - proc and index of DHT_write receive the key's rank and its first
 *   candidate bucket (where it was stored may be a later one).
 *
 * What differs from the MPI-DHT:
 * - DHT is opaque here: its fields are fabkit's own. Programs that read the
 *   MPI-DHT's fields (its header lists them and asks not to) do not build.
 * - Every failure is a return code (NULL from DHT_create) whose message
 *   fabkit_dht_last_error() gives (valid until the next call on the same
 *   thread). Nothing is printed but by DHT_print_statistics, except when an
 *   MPI epoch cannot be closed, which aborts the job saying why; fabkit's
 *   notices (a stale segment it removed, a resource it could not close)
 *   are kept as the last message, not printed.
 * - Wrong sizes or options on any rank fail DHT_create on every rank. After
 *   an internal error a table refuses every call but DHT_free.
 * - A table is used from one thread at a time, and is gone after DHT_free
 *   whatever it returns; two threads must not create tables on one
 *   communicator at once. hash_func must not throw (C++).
 * - DHT_print_statistics prints the counters summed over ranks, on rank 0,
 *   and does not reset them (the MPI-DHT's does).
 * - Waits on other ranks end after a timeout (60 s, times
 *   FABKIT_TIMEOUT_SCALE) with an error naming the operation, but for MPI's
 *   own calls that have no deadline: on the mpi transport, MPI_Win_lock,
 *   MPI_Win_flush and MPI_Win_free wait for the peer as MPI does (a coarse
 *   table holds its target's window lock while the accumulate callback
 *   runs). After DHT_create timed out, a duplication of the caller's
 *   communicator may still be pending on it: end the job.
 * MPI is the caller's: initialise it before DHT_create and finalise it
 * after DHT_free (calls after MPI_Finalize are refused). Build with the
 * same MPI fabkit was built with (MPI_Comm differs between MPIs).
 */
#ifndef FABKIT_LUCX_MPI_DHT_H
#define FABKIT_LUCX_MPI_DHT_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define DHT_SUCCESS 0
#define DHT_UCX_ERROR -1
#define DHT_READ_MISS -2
#define DHT_READ_CORRUPT -3
#define DHT_READ_INVALID -4
#define DHT_WRITE_SUCCESS_WITH_EVICTION -5
#define DHT_WRONG_FILE -11
#define DHT_FILE_IO_ERROR -12
#define DHT_FILE_READ_ERROR -13
#define DHT_FILE_WRITE_ERROR -14
#define DHT_NO_MEM -15
#define DHT_NOT_IMPLEMENTED -32
#define DHT_FILEHEADER_SIZE 8

#if defined(__cplusplus)
extern "C" {
#endif

/* A table: opaque. */
typedef struct DHT DHT;

/* What DHT_create takes. bucket_count is per rank; hash_func may be NULL
 * (fabkit's hash). */
typedef struct DHT_init {
  int key_size;
  int data_size;
  unsigned int bucket_count;
  uint64_t (*hash_func)(int, const void *);
  MPI_Comm comm;
} DHT_init_t;

/* Collective over init_params->comm; NULL on failure, on every rank. */
DHT *DHT_create(const DHT_init_t *init_params);
/* proc and index (may be NULL) receive the key's rank and first bucket. */
int DHT_write(DHT *table, void *key, void *data, uint32_t *proc,
              uint32_t *index);
int DHT_read(DHT *table, const void *key, void *destination);
/* Collective. */
int DHT_to_file(DHT *table, const char *filename);
int DHT_from_file(DHT *table, const char *filename);
int DHT_free(DHT *table, uint32_t *chksum_retries);
int DHT_print_statistics(DHT *table);
/* See above: fine, coarse and chunked tables; DHT_NOT_IMPLEMENTED on
 * lock-free ones. */
void DHT_set_accumulate_callback(DHT *table,
                                 int (*callback_func)(int, void *, int,
                                                      void *));
int DHT_write_accumulate(DHT *table, const void *key, int send_size,
                         void *data, uint32_t *proc, uint32_t *index,
                         int *callback_ret);

/* fabkit's own. */

/* The choices of the environment variables above, as strings; a NULL
 * field takes the variable's, else the default. */
typedef struct fabkit_dht_options {
  const char *variant;
  const char *transport;
  const char *provider;
  const char *domain;
} fabkit_dht_options_t;

/* DHT_create with options (may be NULL); collective. */
DHT *fabkit_dht_create(const DHT_init_t *init_params,
                       const fabkit_dht_options_t *options);

/* n keys (back to back) read with their operations overlapped: a hit's
 * value lands in values (n values back to back), each key's DHT_SUCCESS,
 * DHT_READ_MISS or DHT_READ_CORRUPT in results. DHT_SUCCESS when the batch
 * ran. */
int fabkit_dht_read_many(DHT *table, size_t n, const void *keys,
                         void *values, int *results);
/* n keys and values written likewise; results (may be NULL) receive
 * DHT_SUCCESS or DHT_WRITE_SUCCESS_WITH_EVICTION per key. */
int fabkit_dht_write_many(DHT *table, size_t n, const void *keys,
                          const void *values, int *results);

/* A table's counters. The struct grows as fabkit counts more (new
 * counters are appended): build against the header of the library you
 * link. */
typedef struct fabkit_dht_stats {
  uint64_t reads, writes, hits, misses, corrupt;
  uint64_t inserts, updates, evictions;
  uint64_t checksum_retries, invalidations, lock_retries;
  uint64_t remote_ops, batches, remote_bytes;
  /* Of remote_ops: aimed at this rank itself; across, by kind. */
  uint64_t self_ops, cross_reads, cross_writes, cross_atomics;
} fabkit_dht_stats_t;

/* This rank's counters, or with all_ranks nonzero the sum over every rank
 * (then collective). */
int fabkit_dht_stats(DHT *table, fabkit_dht_stats_t *out, int all_ranks);

/* The table's variant and transport in one line, e.g. "lockfree over mpi
 * (MPI_Win_allocate)"; valid until DHT_free. */
const char *fabkit_dht_describe(DHT *table);

/* The message of this thread's last failure or notice ("" if none). */
const char *fabkit_dht_last_error(void);

#if defined(__cplusplus)
}
#endif

/* The variant a build chose: the CMake targets MPIDHT::nolock (lockfree),
 * MPIDHT::coarse, MPIDHT::fine and MPIDHT::accumulate (fine, which serves
 * DHT_write_accumulate; the MPI-DHT's accumulate build instead makes each
 * get and put one MPI accumulate) define FABKIT_DHT_LINK_VARIANT, and
 * DHT_create, called by name in code compiled with it, then creates that
 * variant unless FABKIT_DHT_VARIANT is set when the program runs. A
 * pointer to DHT_create, and Fortran's binding, reach the plain one. */
#if defined(FABKIT_DHT_LINK_VARIANT)
#include <stdlib.h>
static inline DHT *fabkit_dht_create_linked(const DHT_init_t *init_params) {
  const char *chosen = getenv("FABKIT_DHT_VARIANT");
  fabkit_dht_options_t options = {FABKIT_DHT_LINK_VARIANT, NULL, NULL, NULL};
  if (chosen != NULL && chosen[0] != '\0')
    return DHT_create(init_params);
  return fabkit_dht_create(init_params, &options);
}
#define DHT_create(init_params) fabkit_dht_create_linked(init_params)
#endif

#endif
