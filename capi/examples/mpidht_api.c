/* A program written only against the public MPI-DHT's API: its own hash
 * function, 4-byte keys and values, 50 buckets per rank. Each rank writes
 * its share of the keys; every rank reads every key back and one that was
 * never written; the table is dumped, restored into a second one and read
 * again. Prints one RESULT line per rank; exits 1 on a failure. It builds
 * against the MPI-DHT's header too (fabkit_dht_last_error only where
 * fabkit's header is included). */
#include <LUCX/MPI/DHT.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define KEYS 40

static long hash_calls = 0;

static uint64_t my_hash(int size, const void *key) {
  /* FNV-1a over the key's bytes; counted, to show the table uses it. */
  hash_calls++;
  const unsigned char *b = key;
  uint64_t h = 1469598103934665603ULL;
  for (int i = 0; i < size; i++) {
    h ^= b[i];
    h *= 1099511628211ULL;
  }
  return h;
}

/* fabkit says why a call failed, and what a table is; the MPI-DHT has no
 * such calls. */
static const char *why(void) {
#ifdef FABKIT_LUCX_MPI_DHT_H
  return fabkit_dht_last_error();
#else
  return "";
#endif
}

static const char *what(DHT *t) {
#ifdef FABKIT_LUCX_MPI_DHT_H
  return fabkit_dht_describe(t);
#else
  (void)t;
  return "the MPI-DHT";
#endif
}

static int read_all(DHT *t, int *hits) {
  *hits = 0;
  for (uint32_t k = 0; k < KEYS; k++) {
    uint32_t v = 0;
    int rc = DHT_read(t, &k, &v);
    if (rc == DHT_SUCCESS) {
      if (v != k * 7 + 1)
        return -100;
      (*hits)++;
    } else if (rc != DHT_READ_MISS) {
      return rc;
    }
  }
  return DHT_SUCCESS;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char *dir = argc > 1 ? argv[1] : "/tmp";
  char prefix[4096];
  snprintf(prefix, sizeof prefix, "%s/mpidht-api", dir);

  DHT_init_t init = {.key_size = 4, .data_size = 4, .bucket_count = 50,
                     .hash_func = my_hash, .comm = MPI_COMM_WORLD};
  char described[256] = "";
  DHT *t = DHT_create(&init);
  const char *fail = NULL;
  int local_evict = 0, evictions = 0, hits = 0, hits2 = 0, rc = 0;
  if (!t) {
    fail = "DHT_create";
    goto out;
  }
  snprintf(described, sizeof described, "%s", what(t));
  /* One rank writes at a time: two lock-free writers racing for one bucket
   * may lose a write without an eviction (as in the MPI-DHT), and this
   * program checks what was written, not that race. */
  for (int turn = 0; turn < size; turn++) {
    if (turn == rank) {
      for (uint32_t k = rank; k < KEYS; k += size) {
        uint32_t v = k * 7 + 1, proc = 99, index = 0;
        rc = DHT_write(t, &k, &v, &proc, &index);
        if (rc == DHT_WRITE_SUCCESS_WITH_EVICTION)
          local_evict++;
        else if (rc != DHT_SUCCESS)
          fail = "DHT_write";
        if (proc >= (uint32_t)size || index >= 50)
          fail = "DHT_write's proc or index";
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (fail)
    goto out;
  if (hash_calls == 0) {
    fail = "the program's hash_func was never called";
    goto out;
  }
  MPI_Allreduce(&local_evict, &evictions, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if ((rc = read_all(t, &hits)) != DHT_SUCCESS || hits < KEYS - evictions ||
      (evictions == 0 && hits != KEYS)) {
    fail = "reading every key back";
    goto out;
  }
  uint32_t absent = 1000000, v;
  if (DHT_read(t, &absent, &v) != DHT_READ_MISS) {
    fail = "a key never written";
    goto out;
  }
  if (DHT_read(NULL, &absent, &v) != DHT_UCX_ERROR) {
    fail = "a NULL table";
    goto out;
  }
  if (DHT_print_statistics(t) != DHT_SUCCESS) {
    fail = "DHT_print_statistics";
    goto out;
  }
  if (DHT_to_file(t, prefix) != DHT_SUCCESS) {
    fail = "DHT_to_file";
    goto out;
  }
  DHT *u = DHT_create(&init);
  if (!u || DHT_from_file(u, prefix) != DHT_SUCCESS ||
      read_all(u, &hits2) != DHT_SUCCESS || hits2 != hits) {
    fail = "DHT_from_file into a new table";
    goto out;
  }
  uint32_t retries = 12345;
  if (DHT_free(u, &retries) != DHT_SUCCESS || retries == 12345) {
    fail = "DHT_free";
    goto out;
  }
out:
  if (t && DHT_free(t, NULL) != DHT_SUCCESS && !fail)
    fail = "DHT_free";
  if (fail)
    printf("RESULT rank %d: FAIL %s (rc %d): %s\n", rank, fail, rc, why());
  else
    printf("RESULT rank %d: ok hits %d of %d, evictions %d (%s)\n", rank, hits,
           KEYS, evictions, described);
  fflush(stdout);
  MPI_Finalize();
  return fail ? 1 : 0;
}
