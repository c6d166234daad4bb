/* fabkit's distributed hash table for MPI programs, with the API of the
 * public MPI-DHT (types, functions and return codes), so that a program
 * written against that header relinks against fabkit unchanged:
 *
 *   mpicc prog.c -I<fabkit>/capi/include -L<lib dir> -lfabkit_mpi_dht
 *
 * What differs, and what fabkit adds:
 * - DHT is opaque here: its fields are fabkit's own. Programs that read the
 *   MPI-DHT's fields (its header lists them and asks not to) do not build.
 * - A table is the lock-free variant over an MPI_Win_allocate window on a
 *   duplicate of the caller's communicator, as the MPI-DHT's default build:
 *   DHT_read can return DHT_READ_CORRUPT. A program built against the
 *   MPI-DHT's coarse-locking variant gets lock-free semantics.
 * - DHT_write_accumulate and DHT_set_accumulate_callback return (or leave)
 *   DHT_NOT_IMPLEMENTED for now.
 * - Every failure is a return code (or NULL from DHT_create) whose message
 *   fabkit_dht_last_error() gives (valid until the next DHT_* call on the
 *   same thread); nothing is printed but by DHT_print_statistics, except
 *   when an MPI epoch cannot be closed, which aborts the job saying why.
 * - DHT_to_file writes fabkit's checksummed shards <filename>.rank<N>;
 *   DHT_from_file reads them (not the MPI-DHT's files) into a table of any
 *   size or rank count.
 * - A table is used from one thread at a time, and is gone after DHT_free
 *   whatever it returns. hash_func must not throw (C++).
 * MPI is the caller's: initialise it before DHT_create and finalise it
 * after DHT_free (calls after MPI_Finalize are refused). Build with the
 * same MPI fabkit was built with (MPI_Comm differs between MPIs).
 */
#ifndef FABKIT_LUCX_MPI_DHT_H
#define FABKIT_LUCX_MPI_DHT_H

#include <mpi.h>
#include <stdbool.h>
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

/* Collective over init_params->comm; NULL on failure, on every rank when a
 * rank's sizes are wrong. */
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
/* DHT_NOT_IMPLEMENTED for now. */
void DHT_set_accumulate_callback(DHT *table,
                                 int (*callback_func)(int, void *, int,
                                                      void *));
int DHT_write_accumulate(DHT *table, const void *key, int send_size,
                         void *data, uint32_t *proc, uint32_t *index,
                         int *callback_ret);

/* fabkit's: the message of this thread's last failure ("" if none). */
const char *fabkit_dht_last_error(void);

#if defined(__cplusplus)
}
#endif

#endif
