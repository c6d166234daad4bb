/* What fabkit adds in C, on a table whose variant and transport the
 * command line chooses:  fabkit_api VARIANT TRANSPORT [MODE]
 *
 * Every rank counts into two shared keys at once with
 * DHT_write_accumulate (the sums must come out exact: no increment lost),
 * writes its own keys as one batch and reads everyone's as another, then
 * checks the counters, the table's description and a few failures. MODE
 * "disagree" has rank 1 ask for another variant than the others,
 * "bogus" asks for a variant that does not exist, and "osc-rdma" names
 * Open MPI's osc rdma for a variant with atomics on MPI windows (after
 * MPI_Init, which keeps the launcher's component): DHT_create must then
 * fail on every rank with a message. Prints one RESULT line per rank. */
#define _POSIX_C_SOURCE 200112L
#include <LUCX/MPI/DHT.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROUNDS 200
#define MINE 64

/* Adds the 8-byte number sent to the 8-byte value; declines a zero. */
static int add(int send_size, void *data, int value_size, void *value) {
  uint64_t d, v;
  if (send_size != 8 || value_size != 8)
    return 2;
  memcpy(&d, data, 8);
  if (d == 0)
    return 1;
  memcpy(&v, value, 8);
  v += d;
  memcpy(value, &v, 8);
  return 0;
}

static const char *counting(DHT *t, int rank, int size, int lockfree) {
  uint64_t one = 1, mine = (uint64_t)rank + 1, zero = 0;
  uint64_t k1 = 1, k2 = 2, k3 = 3;
  int ret = -7;
  DHT_set_accumulate_callback(t, add);
  if (lockfree) {
    if (DHT_write_accumulate(t, &k1, 8, &one, NULL, NULL, &ret) !=
            DHT_NOT_IMPLEMENTED ||
        !strstr(fabkit_dht_last_error(), "lock-free"))
      return "accumulate on a lock-free table: not DHT_NOT_IMPLEMENTED";
    return NULL;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < ROUNDS; i++) {
    int rc = DHT_write_accumulate(t, &k1, 8, &one, NULL, NULL, &ret);
    if ((rc != DHT_SUCCESS && rc != DHT_WRITE_SUCCESS_WITH_EVICTION) ||
        ret != 0)
      return "DHT_write_accumulate";
    rc = DHT_write_accumulate(t, &k2, 8, &mine, NULL, NULL, &ret);
    if ((rc != DHT_SUCCESS && rc != DHT_WRITE_SUCCESS_WITH_EVICTION) ||
        ret != 0)
      return "DHT_write_accumulate";
  }
  /* A callback that declines stores nothing and says so. */
  if (DHT_write_accumulate(t, &k3, 8, &zero, NULL, NULL, &ret) < 0 ||
      ret != 1)
    return "a declining callback's return";
  MPI_Barrier(MPI_COMM_WORLD);
  uint64_t v1 = 0, v2 = 0, v3;
  if (DHT_read(t, &k1, &v1) != DHT_SUCCESS ||
      DHT_read(t, &k2, &v2) != DHT_SUCCESS)
    return "reading the counters";
  uint64_t want2 = (uint64_t)ROUNDS * (uint64_t)size * (size + 1) / 2;
  if (v1 != (uint64_t)ROUNDS * size || v2 != want2) {
    printf("rank %d: counters %llu and %llu, want %llu and %llu\n", rank,
           (unsigned long long)v1, (unsigned long long)v2,
           (unsigned long long)ROUNDS * size, (unsigned long long)want2);
    return "increments lost";
  }
  if (DHT_read(t, &k3, &v3) != DHT_READ_MISS)
    return "a declined accumulation stored something";
  return NULL;
}

/* Lock-free writers racing for one bucket may lose a write (as in the
 * MPI-DHT): on a lock-free table the ranks write one at a time, on the
 * others all at once. */
static const char *batches(DHT *t, int rank, int size, int lockfree) {
  uint64_t keys[MINE], values[MINE];
  int results[MINE];
  for (int i = 0; i < MINE; i++) {
    keys[i] = 1000000 + (uint64_t)rank * MINE + i;
    values[i] = keys[i] * 3;
  }
  const char *fail = NULL;
  for (int turn = 0; turn < (lockfree ? size : 1); turn++) {
    if (!lockfree || turn == rank) {
      if (fabkit_dht_write_many(t, MINE, keys, values, results) !=
          DHT_SUCCESS)
        fail = "fabkit_dht_write_many";
      for (int i = 0; i < MINE && !fail; i++)
        if (results[i] != DHT_SUCCESS)
          fail = "a write's result (an eviction in a table this large)";
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (fail)
    return fail;
  for (int r = 0; r < size; r++) {
    for (int i = 0; i < MINE; i++) {
      keys[i] = 1000000 + (uint64_t)r * MINE + i;
      values[i] = 0;
    }
    if (fabkit_dht_read_many(t, MINE, keys, values, results) != DHT_SUCCESS)
      return "fabkit_dht_read_many";
    for (int i = 0; i < MINE; i++)
      if (results[i] != DHT_SUCCESS || values[i] != keys[i] * 3)
        return "a batch read back";
  }
  return NULL;
}

static const char *counters(DHT *t, int size, int lockfree) {
  fabkit_dht_stats_t mine, all;
  if (fabkit_dht_stats(t, &mine, 0) != DHT_SUCCESS ||
      fabkit_dht_stats(t, &all, 1) != DHT_SUCCESS)
    return "fabkit_dht_stats";
  uint64_t reads = (uint64_t)size * MINE + (lockfree ? 0 : 3);
  if (mine.reads != reads || all.reads != reads * size ||
      all.hits < (uint64_t)size * size * MINE || mine.remote_ops == 0)
    return "the counters";
  return NULL;
}

static const char *failures(DHT *t, int rank) {
  uint64_t v;
  fabkit_dht_stats_t s;
  if (fabkit_dht_read_many(t, 0, NULL, NULL, NULL) != DHT_SUCCESS ||
      fabkit_dht_write_many(t, 0, NULL, NULL, NULL) != DHT_SUCCESS)
    return "an empty batch";
  /* A collective call refused on one rank is refused on all, at once. */
  if (fabkit_dht_stats(t, rank == 0 ? NULL : &s, 1) != DHT_UCX_ERROR ||
      !strstr(fabkit_dht_last_error(), rank == 0 ? "out is null" : "rank 0"))
    return "stats into NULL on rank 0 only";
  if (DHT_read(t, NULL, &v) != DHT_UCX_ERROR ||
      !strstr(fabkit_dht_last_error(), "key is null"))
    return "a NULL key";
  if (fabkit_dht_read_many(t, SIZE_MAX, &v, &v, NULL) != DHT_UCX_ERROR ||
      !strstr(fabkit_dht_last_error(), "do not fit"))
    return "a batch larger than memory";
  if (DHT_to_file(t, NULL) != DHT_FILE_IO_ERROR)
    return "a NULL filename";
  return NULL;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char *variant = argc > 1 ? argv[1] : "fine";
  const char *transport = argc > 2 ? argv[2] : "mpi";
  const char *mode = argc > 3 ? argv[3] : "";
  if (!strcmp(mode, "disagree") && rank == 1)
    variant = strcmp(variant, "fine") ? "fine" : "coarse";
  if (!strcmp(mode, "bogus"))
    variant = "bogus";
  if (!strcmp(mode, "osc-rdma")) {
    setenv("OMPI_MCA_osc", "rdma", 1);
    setenv("FABKIT_DHT_PATH", "rma", 1);
  }

  DHT_init_t init = {.key_size = 8, .data_size = 8, .bucket_count = 1000,
                     .hash_func = NULL, .comm = MPI_COMM_WORLD};
  fabkit_dht_options_t opts = {.variant = variant, .transport = transport};
  DHT *t = fabkit_dht_create(&init, &opts);
  const char *fail = NULL;
  if (*mode) {
    /* Expected to fail on every rank, saying why. */
    const char *why = fabkit_dht_last_error();
    const char *want = !strcmp(mode, "bogus")      ? "give one of"
                       : !strcmp(mode, "osc-rdma") ? "osc sm,pt2pt"
                                                   : "disagree";
    if (t || !strstr(why, want))
      fail = "DHT_create did not fail as it should";
    printf("RESULT rank %d: %s: %s\n", rank, fail ? "FAIL" : "ok refused",
           why);
    if (t)
      DHT_free(t, NULL);
    MPI_Finalize();
    return fail ? 1 : 0;
  }
  if (!t) {
    printf("RESULT rank %d: FAIL DHT_create: %s\n", rank,
           fabkit_dht_last_error());
    MPI_Finalize();
    return 1;
  }
  int lockfree = !strcmp(variant, "lockfree");
  if (!strstr(fabkit_dht_describe(t), variant) ||
      !strstr(fabkit_dht_describe(t), transport))
    fail = "fabkit_dht_describe";
  if (!fail)
    fail = counting(t, rank, size, lockfree);
  if (!fail)
    fail = batches(t, rank, size, lockfree);
  if (!fail)
    fail = counters(t, size, lockfree);
  if (!fail)
    fail = failures(t, rank);
  const char *last = fail ? fabkit_dht_last_error() : "";
  if (DHT_free(t, NULL) != DHT_SUCCESS && !fail) {
    fail = "DHT_free";
    last = fabkit_dht_last_error();
  }
  if (fail)
    printf("RESULT rank %d: FAIL %s: %s\n", rank, fail, last);
  else
    printf("RESULT rank %d: ok %s\n", rank, variant);
  fflush(stdout);
  MPI_Finalize();
  return fail ? 1 : 0;
}
