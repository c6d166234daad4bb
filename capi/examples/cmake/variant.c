/* Creates a table through the MPI-DHT's DHT_create, writes and reads back
 * one key per rank, and prints which variant the build's target chose:
 *   RESULT rank R: ok, <fabkit_dht_describe's line>
 * Includes <LUCX/DHT.h>, which needs the LUCX_MPI_IMPL the MPIDHT::
 * targets define, as the MPI-DHT's do. */
#include <LUCX/DHT.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>

static uint64_t hash(int size, const void *key) {
  uint32_t k = *(const uint32_t *)key;
  (void)size;
  return (uint64_t)k * 0x9e3779b97f4a7c15ull;
}

int main(int argc, char **argv) {
  int rank = 0, ok = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  DHT_init_t init = {.key_size = 4, .data_size = 4, .bucket_count = 64,
                     .hash_func = hash, .comm = MPI_COMM_WORLD};
  DHT *t = DHT_create(&init);
  if (t == NULL) {
    printf("RESULT rank %d: DHT_create failed: %s\n", rank,
           fabkit_dht_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  uint32_t key = 1000u + (uint32_t)rank, value = 7u * key, back = 0;
  int w = DHT_write(t, &key, &value, NULL, NULL);
  MPI_Barrier(MPI_COMM_WORLD);
  int r = DHT_read(t, &key, &back);
  ok = w == DHT_SUCCESS && r == DHT_SUCCESS && back == value;
  printf("RESULT rank %d: %s, %s\n", rank, ok ? "ok" : "wrong read",
         fabkit_dht_describe(t));
  fflush(stdout);
  DHT_free(t, NULL);
  MPI_Finalize();
  return ok ? 0 : 1;
}
