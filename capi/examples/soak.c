/* A soak of the C API:  soak [SECONDS]  (default 20)
 *
 * Tables of the environment's variant and transport are created, written
 * (every rank 200 keys), read back whole and freed, again and again until
 * SECONDS have passed on rank 0. After each free every rank counts its
 * open file descriptors, its threads and the /dev/shm files named after
 * its pid (fabkit's segments and the libfabric shm provider's). The first
 * tenth of the cycles is warm-up; a count above its value at the end of
 * warm-up afterwards is a leak. Prints one RESULT line per rank. */
#define _POSIX_C_SOURCE 200809L
#include <LUCX/MPI/DHT.h>
#include <dirent.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KEYS 200
#define MAX_CYCLES 100000

/* Entries of directory `path` (minus the one opendir holds, for fd). */
static long entries(const char *path, int minus) {
  DIR *d = opendir(path);
  long n = 0;
  if (!d)
    return -1;
  while (readdir(d))
    n++;
  closedir(d);
  return n - 2 - minus; /* . and .. */
}

static long threads(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long n = -1;
  if (!f)
    return -1;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "Threads:", 8))
      n = strtol(line + 8, NULL, 10);
  fclose(f);
  return n;
}

/* /dev/shm names with this pid as a dot-separated field (fabkit's
 * fabkit.<job>.<ns>.<pid>.<start>.<what>) or before the first colon
 * (libfabric shm's <pid>:<uid>:<n>). */
static long segments(void) {
  char dot[32], colon[32];
  snprintf(dot, sizeof dot, ".%ld.", (long)getpid());
  snprintf(colon, sizeof colon, "%ld:", (long)getpid());
  DIR *d = opendir("/dev/shm");
  struct dirent *e;
  long n = 0;
  if (!d)
    return -1;
  while ((e = readdir(d)))
    if (strstr(e->d_name, dot) || !strncmp(e->d_name, colon, strlen(colon)))
      n++;
  closedir(d);
  return n;
}

/* One table's life; NULL or what failed. */
static const char *cycle(int rank, int round) {
  DHT_init_t init = {.key_size = 8, .data_size = 8, .bucket_count = 1024,
                     .hash_func = NULL, .comm = MPI_COMM_WORLD};
  DHT *t = DHT_create(&init);
  const char *fail = NULL;
  if (!t)
    return "DHT_create";
  for (uint64_t i = 0; i < KEYS && !fail; i++) {
    uint64_t k = (uint64_t)rank << 32 | i, v = k ^ (uint64_t)round;
    if (DHT_write(t, &k, &v, NULL, NULL) != DHT_SUCCESS)
      fail = "DHT_write";
  }
  MPI_Barrier(MPI_COMM_WORLD);
  for (uint64_t i = 0; i < KEYS && !fail; i++) {
    uint64_t k = (uint64_t)rank << 32 | i, v = 0;
    int rc = DHT_read(t, &k, &v);
    /* A lock-free insert may lose its bucket to another rank's racing one
     * (a miss), or a read be torn (corrupt); a hit is what was written. */
    if ((rc == DHT_SUCCESS && v != (k ^ (uint64_t)round)) ||
        (rc != DHT_SUCCESS && rc != DHT_READ_MISS && rc != DHT_READ_CORRUPT))
      fail = "DHT_read";
  }
  if (DHT_free(t, NULL) != DHT_SUCCESS && !fail)
    fail = "DHT_free";
  return fail;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  double secs = argc > 1 ? atof(argv[1]) : 20.0;
  static long fds[MAX_CYCLES], thr[MAX_CYCLES], seg[MAX_CYCLES];
  double start = MPI_Wtime();
  const char *fail = NULL;
  int n = 0, more = 1;
  while (more && n < MAX_CYCLES) {
    fail = cycle(rank, n);
    int failed = fail != NULL, any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    fds[n] = entries("/proc/self/fd", 1);
    thr[n] = threads();
    seg[n] = segments();
    n++;
    more = !any && MPI_Wtime() - start < secs;
    MPI_Bcast(&more, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (any && !fail)
      fail = "another rank's cycle";
  }
  int warm = n / 10 > 0 ? n / 10 : 1;
  long most[3] = {0, 0, 0};
  for (int i = warm; i < n; i++) {
    most[0] = fds[i] > most[0] ? fds[i] : most[0];
    most[1] = thr[i] > most[1] ? thr[i] : most[1];
    most[2] = seg[i] > most[2] ? seg[i] : most[2];
  }
  const long *at[3] = {fds, thr, seg};
  const char *names[3] = {"fds", "threads", "segments"};
  char counts[256] = "";
  for (int c = 0; c < 3; c++) {
    long base = at[c][warm - 1];
    long top = n > warm ? most[c] : base;
    char one[64];
    snprintf(one, sizeof one, "%s%s %ld->%ld", c ? ", " : "", names[c], base,
             top);
    strncat(counts, one, sizeof counts - strlen(counts) - 1);
    if (!fail && (base < 0 || top > base))
      fail = names[c];
  }
  if (!fail && n < 10)
    fail = "fewer than 10 cycles";
  printf("RESULT rank %d: %s soak %d cycles: %s%s%s\n", rank,
         fail ? "FAIL" : "ok", n, counts, fail ? ": " : "",
         fail ? fail : "");
  fflush(stdout);
  MPI_Finalize();
  return fail ? 1 : 0;
}
