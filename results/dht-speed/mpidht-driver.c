/*
 * mpidht-driver.c: fabkit's `fabkit dht -w paper` benchmark (uniform
 * distribution) run against the MPI-DHT (github.com/sobc/MPI-DHT, the
 * MPI one-sided variants of its library) so that fabkit and the MPI-DHT
 * can be measured in one benchmark run on the same machine.
 *
 * This file is fabkit's own code. It only includes the MPI-DHT's public
 * header and calls its public functions (DHT_create, DHT_write, DHT_read,
 * DHT_free); nothing else of the MPI-DHT is in it. The MPI-DHT itself is
 * built by hand outside the fabkit repository and is never committed. The
 * build used was of MPI-DHT commit 8d0e6cc701fee2ef79b47bb178da707434d7680c
 * (the newest commit of the GitHub repository sobc/MPI-DHT when fetched).
 *
 * How it was built. The MPI-DHT's CMake file requires UCX even for its MPI
 * variants, so the MPI sources were compiled directly with Open MPI 4.1.4's
 * mpicc (gcc 12.2). With the MPI-DHT checked out in /tmp/anchors/mpidht/src,
 * each of the six C files in src/mpi (access, accumulated, cleanup,
 * collectives, file, init) was compiled once per variant with
 * "mpicc -O2 -c -Isrc/include -DLUCX_MPI_IMPL -D<MACRO> <file> -o <obj>",
 * and the objects of one variant were archived with "ar rcs" into
 * build/libmpidht-<variant>.a. The macro picks the variant, as the
 * MPI-DHT's own CMake targets do: LUCX_MPI_NO_LOCK for "lockfree" (no locks,
 * a 32-bit checksum per bucket, target nolock), LUCX_MPI_OLD for "coarse"
 * (MPI_Win_lock of the whole target window per operation, target coarse),
 * LUCX_MPI_FINE_LOCK for "fine" (a 64-bit lock word per bucket taken with
 * compare-and-swap and fetch-and-op, target fine) and LUCX_MPI_ACC for
 * "accumulate" (no locks, buckets moved with MPI_Get_accumulate and
 * MPI_Accumulate, target accumulate). This driver was then compiled once
 * per variant, from /tmp/anchors/mpidht, with
 * "mpicc -O2 -Wall -Isrc/include -DLUCX_MPI_IMPL -DMPIDHT_VARIANT=\"lockfree\"
 * driver.c build/libmpidht-lockfree.a -lm -o mpidht-bench-lockfree", and the
 * same command with coarse, fine or accumulate in place of lockfree in the
 * three places it appears.
 *
 * Run with Open MPI as "mpirun -n 2 --mca osc rdma ./mpidht-bench-lockfree"
 * (lockfree, coarse and accumulate work on osc rdma here); the fine variant
 * segfaults in osc rdma's compare-and-swap on this Open MPI 4.1.4, so it
 * runs with "--mca osc pt2pt" ("--mca osc sm,pt2pt" also ends up on pt2pt,
 * since osc sm only takes shared-memory windows and the MPI-DHT uses
 * MPI_Win_create).
 *
 * The workload follows tools/src/dhtbench/workload.rs (paper, uniform) and
 * phase.rs: rank r of R with K keys writes the key ids r*K .. r*K+K-1, then
 * reads every rank's ids (its own first, then the next rank's, wrapping)
 * and K ids nobody writes (R*K + r*K onwards), then runs --ops operations
 * (default K), each a read with 95 % odds and an update otherwise, of an id
 * drawn uniformly below R*K. Key bytes, values, the random stream, the
 * seed derivation (repetition 0) and the value tags are fabkit's, so the
 * ranks issue the same operations on the same bytes as fabkit's ranks do.
 * Everything is laid out before the clock; each phase is timed with
 * MPI_Wtime from a barrier to the rank's last operation, and the rate is
 * all ranks' operations over the slowest rank's time. Every hit's value is
 * checked inside the timed loop, as fabkit does. The MPI-DHT is driven one
 * blocking operation at a time (fabkit's batch 1).
 *
 * The same file, unchanged, also builds against fabkit's C API (capi/,
 * installed with capi/install.sh), which is how results/capi/relink.md
 * measures a program relinked from the MPI-DHT to fabkit:
 * "mpicc -O2 -Wall -DLUCX_MPI_IMPL -DMPIDHT_VARIANT=\"fabkit\" driver.c
 * $(pkg-config --cflags --libs fabkit-dht) -lm -o bench-fabkit". Built so,
 * it also takes --batch N: runs of up to N reads, or writes, go to
 * fabkit_dht_read_many or fabkit_dht_write_many, what fabkit adds in C.
 *
 * The hash the MPI-DHT asks for (it is used for the key's placement and,
 * in the lockfree variant, for the bucket checksum) is ours: it starts from
 * a constant xor the length, and for each little-endian 64-bit word of the
 * input (the last one zero-padded) replaces the state h by
 * splitmix64_finaliser(h xor word). Each step is a bijection, so keys that
 * differ only in their first word (fabkit's keys) never collide.
 *
 * Output: one line per phase on rank 0, fields separated by one space:
 * mpidht VARIANT paper uniform PHASE Mops/s X hits H misses M ranks R
 * keys K buckets B ops N secs S lost L false_hits F wrong W corrupt C
 * evictions E (all counts summed over the ranks).
 */

#include <LUCX/DHT.h>

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef MPIDHT_VARIANT
#error "compile with -DMPIDHT_VARIANT=\"name\""
#endif

/* ---- fabkit's primitives (tools/src/dhtbench/workload.rs) ---- */

static uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

#define GOLDEN 0x9e3779b97f4a7c15ULL
#define LONG_STREAM 0xa0761d6478bd642fULL
#define SHORT_STREAM 0xe7037ed1a0b428dbULL

typedef struct {
  uint64_t s;
} rng_t;

static rng_t rng_new(uint64_t seed, uint64_t rank, uint64_t phase) {
  rng_t r = {mix(mix(mix(seed ^ 0x243f6a8885a308d3ULL) ^ rank) ^ phase)};
  return r;
}

static uint64_t rng_next(rng_t *r) {
  r->s += GOLDEN;
  return mix(r->s);
}

/* Unbiased draw in 0..n-1 (n > 0), multiply-shift with rejection. */
static uint64_t rng_below(rng_t *r, uint64_t n) {
  unsigned __int128 m = (unsigned __int128)rng_next(r) * n;
  if ((uint64_t)m < n) {
    uint64_t floor = (0 - n) % n;
    while ((uint64_t)m < floor)
      m = (unsigned __int128)rng_next(r) * n;
  }
  return (uint64_t)(m >> 64);
}

/* Key id -> key bytes: big-endian id in the first min(len, 8) bytes, '#'
 * after. */
static void make_key(uint64_t id, unsigned char *out, size_t len) {
  size_t n = len < 8 ? len : 8;
  for (size_t i = 0; i < n; i++)
    out[i] = (unsigned char)(id >> (8 * (n - 1 - i)));
  memset(out + n, '#', len - n);
}

static uint64_t value_tag(uint64_t rank, uint64_t version) {
  return (version << 24) | (rank & 0xffffffULL);
}

static void put_le(unsigned char *p, uint64_t w, size_t n) {
  for (size_t i = 0; i < n; i++)
    p[i] = (unsigned char)(w >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, size_t n) {
  uint64_t w = 0;
  for (size_t i = 0; i < n; i++)
    w |= (uint64_t)p[i] << (8 * i);
  return w;
}

static void fill_words(uint64_t s, unsigned char *out, size_t len) {
  for (size_t j = 0; j * 8 < len; j++) {
    size_t n = len - j * 8 < 8 ? len - j * 8 : 8;
    put_le(out + j * 8, s + (uint64_t)j * GOLDEN, n);
  }
}

static int words_match(uint64_t s, const unsigned char *v, size_t len) {
  for (size_t j = 0; j * 8 < len; j++) {
    size_t n = len - j * 8 < 8 ? len - j * 8 : 8;
    uint64_t want = s + (uint64_t)j * GOLDEN;
    if (n < 8)
      want &= (1ULL << (8 * n)) - 1;
    if (get_le(v + j * 8, n) != want)
      return 0;
  }
  return 1;
}

static void make_value(uint64_t id, uint64_t tag, unsigned char *out,
                       size_t len) {
  if (len >= 16) {
    put_le(out, tag, 8);
    fill_words(mix(tag ^ (mix(id ^ LONG_STREAM) | 1)), out + 8, len - 8);
  } else {
    fill_words(mix(id ^ SHORT_STREAM) | 1, out, len);
  }
}

static int value_good(uint64_t id, const unsigned char *v, size_t len) {
  if (len >= 16) {
    uint64_t tag = get_le(v, 8);
    return words_match(mix(tag ^ (mix(id ^ LONG_STREAM) | 1)), v + 8,
                       len - 8);
  }
  return words_match(mix(id ^ SHORT_STREAM) | 1, v, len);
}

/* ---- the hash handed to the MPI-DHT ---- */

static uint64_t word_hash(int len, const void *data) {
  const unsigned char *p = data;
  uint64_t h = 0x6a09e667f3bcc908ULL ^ (uint64_t)(unsigned)len;
  int i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    h = mix(h ^ w);
  }
  if (i < len) {
    uint64_t w = 0;
    memcpy(&w, p + i, (size_t)(len - i));
    h = mix(h ^ w);
  }
  return h;
}

/* ---- phases ---- */

typedef struct {
  const char *name;
  uint64_t n;
  unsigned char *is_write; /* per op */
  uint64_t *id;            /* per op */
  unsigned char *absent;   /* per op: a read of a key nobody writes */
  unsigned char *keys;     /* n * klen */
  unsigned char *vals;     /* n * vlen, NULL when the phase only reads */
} phase_t;

typedef struct {
  uint64_t hits, misses, lost, false_hits, wrong, corrupt, evictions;
} counts_t;

static size_t KLEN = 80, VLEN = 104;

static void *must_alloc(size_t n) {
  void *p = calloc(n ? n : 1, 1);
  if (!p) {
    fprintf(stderr, "mpidht-bench: out of memory (%zu B)\n", n);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  return p;
}

static void phase_alloc(phase_t *ph, const char *name, uint64_t n,
                        int writes) {
  ph->name = name;
  ph->n = n;
  ph->is_write = must_alloc(n);
  ph->id = must_alloc(n * sizeof(uint64_t));
  ph->absent = must_alloc(n);
  ph->keys = must_alloc(n * KLEN);
  ph->vals = writes ? must_alloc(n * VLEN) : NULL;
}

static void phase_set(phase_t *ph, uint64_t i, int write, uint64_t id,
                      int absent, uint64_t tag) {
  ph->is_write[i] = (unsigned char)write;
  ph->id[i] = id;
  ph->absent[i] = (unsigned char)absent;
  make_key(id, ph->keys + i * KLEN, KLEN);
  if (write)
    make_value(id, tag, ph->vals + i * VLEN, VLEN);
}

static void phase_free(phase_t *ph) {
  free(ph->is_write);
  free(ph->id);
  free(ph->absent);
  free(ph->keys);
  free(ph->vals);
}

static void fail(int rank, const char *what, uint64_t i, int rc) {
  fprintf(stderr, "mpidht-bench: rank %d: %s of op %llu returned %d\n", rank,
          what, (unsigned long long)i, rc);
  MPI_Abort(MPI_COMM_WORLD, 3);
}

/* Ops per call: 1 is the MPI-DHT's API, one blocking operation at a
 * time; more (--batch, fabkit's build only) passes each run of up to
 * BATCH consecutive reads, or writes, to fabkit_dht_read_many or
 * fabkit_dht_write_many. */
static uint64_t BATCH = 1;

static void count_read(counts_t *c, const phase_t *ph, uint64_t i, int rc,
                       const unsigned char *buf, int rank) {
  switch (rc) {
  case DHT_SUCCESS:
    c->hits++;
    c->false_hits += ph->absent[i];
    c->wrong += !value_good(ph->id[i], buf, VLEN);
    break;
  case DHT_READ_MISS:
    c->misses++;
    c->lost += !ph->absent[i];
    break;
  case DHT_READ_CORRUPT:
  case DHT_READ_INVALID:
    c->corrupt++;
    break;
  default:
    fail(rank, "DHT_read", i, rc);
  }
}

#ifdef FABKIT_LUCX_MPI_DHT_H
/* The ops from i on, in runs of one kind of at most BATCH; returns the
 * index after the run done. */
static uint64_t run_batch(DHT *dht, const phase_t *ph, uint64_t i,
                          unsigned char *vals, int *rcs, int rank,
                          counts_t *c) {
  uint64_t n = 1;
  while (i + n < ph->n && n < BATCH && ph->is_write[i + n] == ph->is_write[i])
    n++;
  if (ph->is_write[i]) {
    if (fabkit_dht_write_many(dht, n, ph->keys + i * KLEN, ph->vals + i * VLEN,
                              rcs) != DHT_SUCCESS)
      fail(rank, "fabkit_dht_write_many", i, -1);
    for (uint64_t j = 0; j < n; j++)
      c->evictions += rcs[j] == DHT_WRITE_SUCCESS_WITH_EVICTION;
  } else {
    if (fabkit_dht_read_many(dht, n, ph->keys + i * KLEN, vals, rcs) !=
        DHT_SUCCESS)
      fail(rank, "fabkit_dht_read_many", i, -1);
    for (uint64_t j = 0; j < n; j++)
      count_read(c, ph, i + j, rcs[j], vals + j * VLEN, rank);
  }
  return i + n;
}
#endif

static double run_phase(DHT *dht, const phase_t *ph, int rank,
                        counts_t *c) {
  unsigned char *buf = must_alloc(VLEN * BATCH);
  int *rcs = must_alloc(sizeof(int) * BATCH);
  memset(c, 0, sizeof *c);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
#ifdef FABKIT_LUCX_MPI_DHT_H
  if (BATCH > 1) {
    for (uint64_t i = 0; i < ph->n;)
      i = run_batch(dht, ph, i, buf, rcs, rank, c);
  }
#endif
  for (uint64_t i = 0; BATCH == 1 && i < ph->n; i++) {
    unsigned char *key = ph->keys + i * KLEN;
    if (ph->is_write[i]) {
      int rc = DHT_write(dht, key, ph->vals + i * VLEN, NULL, NULL);
      if (rc == DHT_WRITE_SUCCESS_WITH_EVICTION)
        c->evictions++;
      else if (rc != DHT_SUCCESS)
        fail(rank, "DHT_write", i, rc);
    } else {
      count_read(c, ph, i, DHT_read(dht, key, buf), buf, rank);
    }
  }
  double secs = MPI_Wtime() - t0;
  MPI_Barrier(MPI_COMM_WORLD);
  free(buf);
  free(rcs);
  return secs;
}

/* ---- command line ---- */

static void usage(const char *msg) {
  fprintf(stderr,
          "mpidht-bench: %s\n"
          "usage: mpidht-bench [-k KEYS] [-b BUCKETS] [--key BYTES] "
          "[--value BYTES] [-s SEED] [--ops OPS] [--batch N (fabkit only)]\n",
          msg);
  exit(1);
}

static uint64_t number(const char *flag, const char *s, uint64_t lo,
                       uint64_t hi) {
  char *end;
  if (!s || !*s)
    usage("a flag lacks its number");
  unsigned long long v = strtoull(s, &end, 0);
  if (*end || s[0] == '-' || v < lo || v > hi) {
    char m[160];
    snprintf(m, sizeof m, "%s wants a number from %llu to %llu, not '%s'",
             flag, (unsigned long long)lo, (unsigned long long)hi, s);
    usage(m);
  }
  return v;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank_i, ranks_i;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_i);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks_i);
  uint64_t rank = (uint64_t)rank_i, ranks = (uint64_t)ranks_i;

  uint64_t keys = 100000, buckets = 262144, seed = 1, ops = 0;
  const unsigned read_pct = 95;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-k") || !strcmp(a, "--keys"))
      keys = number(a, v, 1, 1ULL << 32), i++;
    else if (!strcmp(a, "-b") || !strcmp(a, "--buckets"))
      buckets = number(a, v, 1, 0xffffffffULL), i++;
    else if (!strcmp(a, "--key"))
      KLEN = number(a, v, 1, 1 << 20), i++;
    else if (!strcmp(a, "--value"))
      VLEN = number(a, v, 1, 1 << 20), i++;
    else if (!strcmp(a, "-s") || !strcmp(a, "--seed"))
      seed = number(a, v, 0, UINT64_MAX), i++;
    else if (!strcmp(a, "--ops"))
      ops = number(a, v, 1, 1ULL << 32), i++;
#ifdef FABKIT_LUCX_MPI_DHT_H
    else if (!strcmp(a, "--batch"))
      BATCH = number(a, v, 1, 1 << 16), i++;
#endif
    else {
      char m[160];
      snprintf(m, sizeof m, "unknown argument '%s'", a);
      usage(m);
    }
  }
  if (ops == 0)
    ops = keys;
  uint64_t written = ranks * keys;
  /* Distinct ids must give distinct keys (fabkit's keys_fit). */
  if (KLEN < 8 && 2 * written + 1 > (1ULL << (8 * KLEN)))
    usage("--key is too short for that many distinct keys");

  /* fabkit's per-run seed for repetition 0, and its phase versions. */
  uint64_t run_seed = mix(seed ^ 0);

  phase_t ph[3];
  uint64_t base = rank * keys;

  phase_alloc(&ph[0], "write", keys, 1);
  for (uint64_t i = 0; i < keys; i++)
    phase_set(&ph[0], i, 1, base + i, 0, value_tag(rank, 0));

  phase_alloc(&ph[1], "read", written + keys, 0);
  uint64_t j = 0;
  for (uint64_t step = 0; step < ranks; step++) {
    uint64_t r = (rank + step) % ranks;
    for (uint64_t i = 0; i < keys; i++)
      phase_set(&ph[1], j++, 0, r * keys + i, 0, 0);
  }
  for (uint64_t i = 0; i < keys; i++)
    phase_set(&ph[1], j++, 0, written + base + i, 1, 0);

  phase_alloc(&ph[2], "mixed", ops, 1);
  rng_t rng = rng_new(run_seed, rank, 2);
  for (uint64_t i = 0; i < ops; i++) {
    int read = rng_below(&rng, 100) < read_pct;
    uint64_t id = rng_below(&rng, written);
    phase_set(&ph[2], i, !read, id, 0, value_tag(rank, 2));
  }

  DHT_init_t init = {.key_size = (int)KLEN,
                     .data_size = (int)VLEN,
                     .bucket_count = (unsigned int)buckets,
                     .hash_func = word_hash,
                     .comm = MPI_COMM_WORLD};
  DHT *dht = DHT_create(&init);
  if (!dht) {
    fprintf(stderr, "mpidht-bench: rank %d: DHT_create failed\n", rank_i);
    MPI_Abort(MPI_COMM_WORLD, 4);
  }

  for (int p = 0; p < 3; p++) {
    counts_t c;
    double secs = run_phase(dht, &ph[p], rank_i, &c), maxsecs;
    uint64_t mine[8] = {ph[p].n,   c.hits,    c.misses,  c.lost,
                        c.false_hits, c.wrong, c.corrupt, c.evictions};
    uint64_t sum[8];
    MPI_Reduce(&secs, &maxsecs, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(mine, sum, 8, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      printf("mpidht %s%s paper uniform %s Mops/s %.3f hits %llu misses %llu "
             "ranks %llu keys %llu buckets %llu ops %llu secs %.4f lost %llu "
             "false_hits %llu wrong %llu corrupt %llu evictions %llu\n",
             MPIDHT_VARIANT, BATCH > 1 ? "-batched" : "", ph[p].name,
             (double)sum[0] / maxsecs / 1e6,
             (unsigned long long)sum[1], (unsigned long long)sum[2],
             (unsigned long long)ranks, (unsigned long long)keys,
             (unsigned long long)buckets, (unsigned long long)sum[0], maxsecs,
             (unsigned long long)sum[3], (unsigned long long)sum[4],
             (unsigned long long)sum[5], (unsigned long long)sum[6],
             (unsigned long long)sum[7]);
      fflush(stdout);
    }
  }

  int rc = DHT_free(dht, NULL);
  if (rc != DHT_SUCCESS)
    fprintf(stderr, "mpidht-bench: rank %d: DHT_free returned %d\n", rank_i,
            rc);
  for (int p = 0; p < 3; p++)
    phase_free(&ph[p]);
  MPI_Finalize();
  return 0;
}
