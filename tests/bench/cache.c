/*
 * tests/bench/cache - what the cache engine costs, beside baselines measured
 * in the same run.  Not a test: it prints a table and exits 0; 1 when a call
 * fails or the cache returns bytes other than the source's; 2 on bad usage.
 * BC_BENCH_VERBOSE=1 in the environment prints every run's times.
 *
 *   cache [--records N] [--reads N] [--cold-reads N] [--repeat R]
 *         [--dir DIR] [--quick] [--only drain,get,limit,fill,cold]
 *
 * The source: N records (default 200,000) of 1 KiB, record i being one of
 * 1024 pre-generated word-salad records (seeded) with "iNNNNNNNNNN " stamped
 * on its first 12 bytes.  Making a record is a memcpy and a few stores, so
 * the drain rows time the engine, not the generator; the baselines make the
 * records with the very same function.
 *
 *   1. drain: the whole source into a fresh cache (open, bc_cache_fill_all,
 *      close; shard_records N/20, at most 10,000; no background workers) vs
 *      bc_writer writing the same records into one .bag / .bagz.  Target
 *      >= 0.9x.
 *   2. warm random get: `--reads` (default 1,000,000) uniformly random
 *      indices through bc_cache_get on the drained cache (no source; every
 *      shard already open, page cache warm) vs bc_bag_get on the same shard
 *      files opened as one bag set.  Target >= 0.8x.  An extra row compares
 *      with one bc_bag per shard (what the cache reads through, without its
 *      bookkeeping).
 *   3. disk limit: a fresh cache with shard_records N/200 and disk_limit a
 *      quarter of the data, then min(20,000, reads) random gets (1,000 with
 *      --quick; prefetch off): throughput and the engine's counters.
 *   4. fill workers: a thread-safe source costing 20 us per record
 *      (busy-waiting on the clock; skip stays free), N/4 records, shards of
 *      2,000.  Baseline: one filler (bc_cache_fill_all, no workers).  Rows:
 *      2 workers + preload_all (the caller polls the state until every
 *      shard is present);
 *      2 workers + prefetch_shards 2 driven by a caller reading each
 *      shard's first record in order; 2 caller threads reading alternate
 *      shards' first records.  Target >= 1.7x.
 *
 * Every figure is the median of --repeat runs (default 5); baseline and
 * cache alternate within a run; the drains start with one uncounted run.
 * doc/performance.md has results.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bagcache.h"
#include "bench.h"

#define REC 1024      /* record size */
#define POOL_BITS 10  /* 1024 distinct bodies */
#define STAMP 12      /* "i" + 10 digits + " " */

static unsigned char *pool; /* (1 << POOL_BITS) * REC bytes */

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "cache bench: ");
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
  exit(1);
}

static void check(const char *what, int rc) {
  if (rc != 0) die("%s: %s: %s", what, bc_strerror(rc), bc_errmsg());
}

/* Record i into dst[0..REC): the same bytes for every caller, every run. */
static void gen_record(uint64_t i, unsigned char *dst) {
  uint64_t k = (i * 0x9E3779B97F4A7C15ULL) >> (64 - POOL_BITS);
  memcpy(dst, pool + k * REC, REC);
  dst[0] = 'i';
  uint64_t v = i;
  for (int d = STAMP - 2; d >= 1; d--) {
    dst[d] = (unsigned char)('0' + v % 10);
    v /= 10;
  }
  dst[STAMP - 1] = ' ';
}

/* ---- the source --------------------------------------------------------- */

typedef struct {
  uint64_t n;  /* records */
  double cost; /* seconds of busy-waiting per record produced by next() */
} src_payload;

typedef struct {
  uint64_t pos;
} src_pass;

/* Nanoseconds spent busy-waiting in next(), all passes together: divided by
 * the elapsed time it says how many passes ran at once on average. */
static atomic_uint_fast64_t busy_ns;

static int src_open(void *payload, void **pass) {
  (void)payload;
  src_pass *p = calloc(1, sizeof *p);
  if (p == NULL) return bc_set_errmsg(BC_ENOMEM, "bench source: out of memory");
  *pass = p;
  return 0;
}

static int src_next(void *payload, void *pass, bc_buf *out) {
  const src_payload *s = payload;
  src_pass *p = pass;
  if (p->pos >= s->n) return 0;
  if (s->cost > 0) {
    double t0 = bench_now(), t = t0;
    while (t < t0 + s->cost) t = bench_now();
    atomic_fetch_add(&busy_ns, (uint_fast64_t)((t - t0) * 1e9));
  }
  if (out->capacity < REC) {
    unsigned char *d = realloc(out->data, REC);
    if (d == NULL) return bc_set_errmsg(BC_ENOMEM, "bench source: out of memory");
    out->data = d;
    out->capacity = REC;
  }
  gen_record(p->pos, out->data);
  out->size = REC;
  p->pos++;
  return 1;
}

static int src_skip(void *payload, void *pass, uint64_t n, uint64_t *skipped) {
  const src_payload *s = payload;
  src_pass *p = pass;
  uint64_t left = s->n - p->pos;
  *skipped = n < left ? n : left;
  p->pos += *skipped;
  return 0;
}

static void src_close(void *payload, void *pass) {
  (void)payload;
  free(pass);
}

static bc_source make_source(src_payload *payload) {
  bc_source s = {0};
  s.version = BC_SOURCE_VERSION;
  s.open = src_open;
  s.next = src_next;
  s.skip = src_skip;
  s.close = src_close;
  s.payload = payload; /* static storage: no free_payload */
  s.thread_safe = true;
  return s;
}

/* ---- small helpers ------------------------------------------------------------ */

static atomic_int notices;
static char first_notice[512];

static void count_notice(void *payload, const char *message) {
  (void)payload;
  if (atomic_fetch_add(&notices, 1) == 0)
    snprintf(first_notice, sizeof first_notice, "%s", message);
}

static double load_average(void) {
  double l = -1;
  FILE *f = fopen("/proc/loadavg", "r");
  if (f != NULL) {
    if (fscanf(f, "%lf", &l) != 1) l = -1;
    fclose(f);
  }
  return l;
}

/* Removes a cache root if it exists (bc_cache_clear refuses non-caches). */
static void clear_root(const char *root) {
  struct stat st;
  if (stat(root, &st) == 0) check(root, bc_cache_clear(root));
}

/* The comma list of the cache's shard files, in order (malloc'd). */
static char *shard_spec(bc_cache *c, size_t *nshards) {
  size_t n = 0;
  check("shards", bc_cache_shards(c, NULL, 0, &n));
  bc_cache_shard *list = calloc(n ? n : 1, sizeof *list);
  if (list == NULL) die("out of memory");
  check("shards", bc_cache_shards(c, list, n, &n));
  char **paths = calloc(n ? n : 1, sizeof *paths);
  if (paths == NULL) die("out of memory");
  size_t size = 1;
  for (size_t i = 0; i < n; i++) {
    check("shard path", bc_cache_shard_path(c, &list[i], &paths[i]));
    size += strlen(paths[i]) + 1;
  }
  char *spec = malloc(size);
  if (spec == NULL) die("out of memory");
  spec[0] = '\0';
  size_t used = 0;
  for (size_t i = 0; i < n; i++) {
    used += (size_t)snprintf(spec + used, size - used, "%s%s", i ? "," : "",
                             paths[i]);
    free(paths[i]);
  }
  free(paths);
  free(list);
  *nshards = n;
  return spec;
}

/* ---- 1. drain ----------------------------------------------------------------- */

static double time_writer(const char *path, uint64_t n) {
  unsigned char rec[REC];
  double t0 = bench_now();
  bc_writer *w = NULL;
  check(path, bc_writer_open(&w, path, NULL));
  for (uint64_t i = 0; i < n; i++) {
    gen_record(i, rec);
    check("write", bc_writer_write(w, rec, REC));
  }
  check("close", bc_writer_close(w));
  bc_writer_free(w);
  double t = bench_now() - t0;
  unlink(path);
  return t;
}

static double time_drain(const char *root, uint64_t n, uint64_t shard,
                         bool zstd, bc_cache_stats *st) {
  src_payload payload = {n, 0};
  bc_source src = make_source(&payload);
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = shard;
  o.compression = zstd ? BC_COMPRESSION_ZSTD : BC_COMPRESSION_NONE;
  o.prefetch_shards = -1;
  clear_root(root);
  double t0 = bench_now();
  bc_cache *c = NULL;
  check(root, bc_cache_open(&c, root, &src, &o));
  check("fill_all", bc_cache_fill_all(c));
  double t = bench_now() - t0;
  check("stats", bc_cache_stats_get(c, st));
  bc_cache_close(c);
  t = t > 0 ? t : 1e-9;
  if (st->length != n || !st->length_final)
    die("%s: drained %llu records (final %d), expected %llu", root,
        (unsigned long long)st->length, st->length_final, (unsigned long long)n);
  return t;
}

/* ---- 2. warm random get --------------------------------------------------------- */

/* Times the cache, the shards as one bag set, and the shards as one bag
 * each (index / R picks the bag: the cache's own reads minus its
 * bookkeeping) over the same indices; checks all three agree with the
 * source on a sample. */
static void warm_gets(const char *root, bool zstd, uint64_t n, const uint64_t *idx,
                      uint64_t reads, int repeat, double *t_cache, double *t_bag,
                      double *t_bags) {
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.compression = zstd ? BC_COMPRESSION_ZSTD : BC_COMPRESSION_NONE;
  bc_cache *c = NULL;
  check(root, bc_cache_open(&c, root, NULL, &o)); /* no source: reads only */
  size_t nshards = 0;
  char *spec = shard_spec(c, &nshards);
  bc_bag *bag = NULL;
  check("bag set", bc_bag_open(&bag, spec, NULL));
  if (bc_bag_len(bag) != n)
    die("%s: the shards hold %llu records, expected %llu", root,
        (unsigned long long)bc_bag_len(bag), (unsigned long long)n);
  bc_cache_stats st;
  check("stats", bc_cache_stats_get(c, &st));
  uint64_t R = st.shard_records;
  bc_bag **bags = calloc(nshards, sizeof *bags);
  if (bags == NULL) die("out of memory");
  for (size_t k = 0; k < nshards; k++) {
    bc_shard_info info;
    check("shard info", bc_bag_shard_info(bag, k, &info));
    check("shard", bc_bag_open(&bags[k], info.path, NULL));
  }
  bc_buf a = BC_BUF_INIT, b = BC_BUF_INIT;
  unsigned char want[REC];
  /* Warm: every record through all three (page cache; every reader open). */
  for (uint64_t i = 0; i < n; i++) {
    check("cache get", bc_cache_get(c, (int64_t)i, &a));
    check("bag get", bc_bag_get(bag, i, &b));
    bool sample = i < 1000 || i % 997 == 0;
    if (sample) {
      gen_record(i, want);
      if (a.size != REC || memcmp(a.data, want, REC) != 0 || b.size != REC ||
          memcmp(b.data, want, REC) != 0)
        die("%s: record %llu differs from the source's", root,
            (unsigned long long)i);
    }
    check("shard get", bc_bag_get(bags[i / R], i % R, &b));
    if (sample && (b.size != REC || memcmp(b.data, want, REC) != 0))
      die("%s: record %llu differs in its shard", root, (unsigned long long)i);
  }
  double tc[16], tb[16], ts[16];
  for (int r = 0; r < repeat; r++) {
    double t0 = bench_now();
    for (uint64_t k = 0; k < reads; k++) check("bag get", bc_bag_get(bag, idx[k], &b));
    tb[r] = bench_now() - t0;
    t0 = bench_now();
    for (uint64_t k = 0; k < reads; k++)
      check("shard get", bc_bag_get(bags[idx[k] / R], idx[k] % R, &b));
    ts[r] = bench_now() - t0;
    t0 = bench_now();
    for (uint64_t k = 0; k < reads; k++)
      check("cache get", bc_cache_get(c, (int64_t)idx[k], &a));
    tc[r] = bench_now() - t0;
  }
  *t_cache = bench_median(tc, (size_t)repeat);
  *t_bag = bench_median(tb, (size_t)repeat);
  *t_bags = bench_median(ts, (size_t)repeat);
  bc_buf_release(&a);
  bc_buf_release(&b);
  for (size_t k = 0; k < nshards; k++) bc_bag_close(bags[k]);
  free(bags);
  bc_bag_close(bag);
  free(spec);
  bc_cache_close(c);
}

/* ---- 3. random gets under a disk limit ---------------------------------------- */

static double limited_gets(const char *root, uint64_t n, uint64_t shard,
                           uint64_t limit, const uint64_t *idx, uint64_t gets,
                           bc_cache_stats *st) {
  src_payload payload = {n, 0};
  bc_source src = make_source(&payload);
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = shard;
  o.disk_limit = limit;
  o.prefetch_shards = -1; /* random access: reading ahead only evicts */
  clear_root(root);
  bc_cache *c = NULL;
  check(root, bc_cache_open(&c, root, &src, &o));
  bc_buf buf = BC_BUF_INIT;
  unsigned char want[REC];
  double t0 = bench_now();
  for (uint64_t k = 0; k < gets; k++) {
    check("limited get", bc_cache_get(c, (int64_t)idx[k], &buf));
    if (k % 256 == 0) {
      gen_record(idx[k], want);
      if (buf.size != REC || memcmp(buf.data, want, REC) != 0)
        die("%s: record %llu differs from the source's", root,
            (unsigned long long)idx[k]);
    }
  }
  double t = bench_now() - t0;
  check("stats", bc_cache_stats_get(c, st));
  if (st->bytes_on_disk > limit)
    die("%s: %llu bytes in shards/, over the limit %llu", root,
        (unsigned long long)st->bytes_on_disk, (unsigned long long)limit);
  bc_buf_release(&buf);
  bc_cache_close(c);
  return t;
}

/* ---- 4. fill workers ---------------------------------------------------------- */

typedef enum {
  FILL_ONE,       /* baseline: the caller drains, no workers */
  FILL_PRELOAD2,  /* 2 workers, preload_all; the caller only watches */
  FILL_PREFETCH2, /* 2 workers, prefetch 2, the caller reads shard starts */
  FILL_THREADS2   /* 2 caller threads read alternate shard starts */
} fill_mode;

typedef struct {
  bc_cache *c;
  uint64_t shard, first;
} walker;

/* Reads the first record of shards first, first + 2, ... until the end. */
static void *walk_alternate(void *arg) {
  walker *w = arg;
  bc_buf buf = BC_BUF_INIT;
  for (uint64_t s = w->first;; s += 2) {
    int rc = bc_cache_get(w->c, (int64_t)(s * w->shard), &buf);
    if (rc == BC_ERANGE) break;
    check("walker get", rc);
  }
  bc_buf_release(&buf);
  return NULL;
}

static double time_fill(const char *root, fill_mode mode, uint64_t n,
                        uint64_t shard, double cost, bc_cache_stats *st,
                        double *concurrency) {
  src_payload payload = {n, cost};
  bc_source src = make_source(&payload);
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = shard;
  o.fill_workers = mode == FILL_ONE ? 1 : 2;
  o.prefetch_shards = mode == FILL_PREFETCH2 ? 2 : -1;
  o.preload_all = mode == FILL_PRELOAD2;
  clear_root(root);
  atomic_store(&busy_ns, 0);
  double t0 = bench_now();
  bc_cache *c = NULL;
  check(root, bc_cache_open(&c, root, &src, &o));
  if (mode == FILL_PREFETCH2) {
    bc_buf buf = BC_BUF_INIT;
    for (uint64_t s = 0;; s++) {
      int rc = bc_cache_get(c, (int64_t)(s * shard), &buf);
      if (rc == BC_ERANGE) break;
      check("get", rc);
    }
    bc_buf_release(&buf);
  } else if (mode == FILL_PRELOAD2) {
    /* Only the two workers fill: the caller polls the shared state (a
     * bc_cache_fill_all here would join the drain as a third filler). */
    uint64_t shards = (n + shard - 1) / shard;
    for (;;) {
      check("stats", bc_cache_stats_get(c, st));
      if (st->length_final && st->shards_present == shards) break;
      struct timespec ts = {0, 1000000};
      nanosleep(&ts, NULL);
    }
  } else if (mode == FILL_THREADS2) {
    walker w[2] = {{c, shard, 0}, {c, shard, 1}};
    pthread_t th;
    if (pthread_create(&th, NULL, walk_alternate, &w[1]) != 0) die("pthread_create");
    walk_alternate(&w[0]);
    pthread_join(th, NULL);
  }
  check("fill_all", bc_cache_fill_all(c));
  check("stats", bc_cache_stats_get(c, st));
  bc_cache_close(c);
  double t = bench_now() - t0;
  *concurrency = (double)atomic_load(&busy_ns) * 1e-9 / t;
  if (st->length != n || !st->length_final || st->shards_present != (n + shard - 1) / shard)
    die("%s: %llu records, %llu shards after the fill, expected %llu",
        root, (unsigned long long)st->length,
        (unsigned long long)st->shards_present, (unsigned long long)n);
  return t;
}

/* ---- 5. cold get: every read opens its shard ------------------------------------ */

#define COLD_SHARDS 8

/* Fills a cache of COLD_SHARDS shards of `shard` records at root (once). */
static void make_cold_cache(const char *root, uint64_t shard) {
  src_payload payload = {COLD_SHARDS * shard, 0};
  bc_source src = make_source(&payload);
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = shard;
  o.prefetch_shards = -1;
  clear_root(root);
  bc_cache *c = NULL;
  check(root, bc_cache_open(&c, root, &src, &o));
  check("fill_all", bc_cache_fill_all(c));
  bc_cache_close(c);
}

/* The baseline of one cold read: what any reader of a Bagz file it does
 * not keep open must do, with raw POSIX calls.  Record `i` of the tail
 * file `path` into dst (REC bytes). */
static void raw_cold_read(const char *path, uint64_t i, unsigned char *dst) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) die("%s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) die("%s: %s", path, strerror(errno));
  size_t size = (size_t)st.st_size;
  const unsigned char *m = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) die("%s: mmap: %s", path, strerror(errno));
  close(fd);
  uint64_t end, lo = 0, hi;
  memcpy(&end, m + size - 8, 8); /* little-endian host */
  const unsigned char *lim = m + end + 8 * i;
  if (i > 0) memcpy(&lo, lim - 8, 8);
  memcpy(&hi, lim, 8);
  if (hi - lo != REC) die("%s: record %llu is not %d bytes", path, (unsigned long long)i, REC);
  memcpy(dst, m + lo, REC);
  munmap((void *)m, size);
}

/* Times `reads` cold gets through a cache opened with max_open_shards 1
 * (nothing open at the start) and the raw baseline on the same indices,
 * alternating, `repeat` times; checks both against the source. */
static void cold_gets(const char *root, uint64_t shard, uint64_t reads, int repeat,
                      double *t_cache, double *t_raw) {
  uint64_t *idx = malloc(reads * sizeof *idx);
  if (idx == NULL) die("out of memory");
  bench_rng rng = {11};
  uint64_t prev = COLD_SHARDS;
  for (uint64_t k = 0; k < reads; k++) {
    uint64_t s;
    do s = bench_rng_below(&rng, COLD_SHARDS); while (s == prev);
    prev = s;
    idx[k] = s * shard + bench_rng_below(&rng, shard);
  }
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.max_open_shards = 1;
  o.prefetch_shards = -1;
  bc_cache *probe = NULL;
  check(root, bc_cache_open(&probe, root, NULL, &o));
  bc_cache_shard *list = calloc(COLD_SHARDS, sizeof *list);
  if (list == NULL) die("out of memory");
  size_t n = 0;
  check("shards", bc_cache_shards(probe, list, COLD_SHARDS, &n));
  if (n != COLD_SHARDS) die("%s: %zu shards, expected %d", root, n, COLD_SHARDS);
  char *paths[COLD_SHARDS];
  for (size_t i = 0; i < n; i++)
    check("shard path", bc_cache_shard_path(probe, &list[i], &paths[i]));
  bc_cache_close(probe);

  unsigned char *got = malloc(REC), want[REC];
  bc_buf buf = BC_BUF_INIT;
  if (got == NULL) die("out of memory");
  /* Untimed: both sides return the source's bytes. */
  bc_cache *c = NULL;
  check(root, bc_cache_open(&c, root, NULL, &o));
  for (uint64_t k = 0; k < reads && k < 64; k++) {
    gen_record(idx[k], want);
    raw_cold_read(paths[idx[k] / shard], idx[k] % shard, got);
    check("cold get", bc_cache_get(c, (int64_t)idx[k], &buf));
    if (memcmp(got, want, REC) != 0 || buf.size != REC ||
        memcmp(buf.data, want, REC) != 0)
      die("cold read: record %llu differs from the source's",
          (unsigned long long)idx[k]);
  }
  bc_cache_close(c);
  double tc[16], tr[16];
  for (int r = 0; r < repeat; r++) {
    double t0 = bench_now();
    for (uint64_t k = 0; k < reads; k++)
      raw_cold_read(paths[idx[k] / shard], idx[k] % shard, got);
    tr[r] = bench_now() - t0;
    /* A new handle each run: no reader open at the start. */
    check(root, bc_cache_open(&c, root, NULL, &o));
    t0 = bench_now();
    for (uint64_t k = 0; k < reads; k++)
      check("cold get", bc_cache_get(c, (int64_t)idx[k], &buf));
    tc[r] = bench_now() - t0;
    bc_cache_stats st;
    check("stats", bc_cache_stats_get(c, &st));
    if (st.shard_opens != reads || st.hits != 0)
      die("cold get: %llu opens and %llu hits for %llu reads",
          (unsigned long long)st.shard_opens, (unsigned long long)st.hits,
          (unsigned long long)reads);
    bc_cache_close(c);
  }
  *t_cache = bench_median(tc, (size_t)repeat);
  *t_raw = bench_median(tr, (size_t)repeat);
  bc_buf_release(&buf);
  for (size_t i = 0; i < n; i++) free(paths[i]);
  free(got);
  free(list);
  free(idx);
}

/* ---- main ------------------------------------------------------------------------ */

/* True when `key` is in the comma list `only` (or there is no list). */
static bool wanted(const char *only, const char *key) {
  if (only == NULL) return true;
  size_t n = strlen(key);
  for (const char *p = only; *p;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == n && strncmp(p, key, n) == 0) return true;
    p += len + (e != NULL);
  }
  return false;
}

int main(int argc, char **argv) {
  uint64_t records = 200000, reads = 1000000, limit_gets = 20000;
  uint64_t cold_reads = 2000, cold_shard = 65536;
  int repeat = 5;
  const char *dir_arg = NULL, *only = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--records") && i + 1 < argc) records = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--reads") && i + 1 < argc) reads = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--cold-reads") && i + 1 < argc) cold_reads = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir_arg = argv[++i];
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if (!strcmp(argv[i], "--quick")) {
      records = 8000;
      reads = 20000;
      limit_gets = 1000;
      cold_reads = 200;
      cold_shard = 1024;
      repeat = 3;
    } else {
      fprintf(stderr, "usage: cache [--records N] [--reads N] [--cold-reads N] "
                      "[--repeat R] [--dir DIR] [--quick] "
                      "[--only drain,get,limit,fill,cold]\n");
      return 2;
    }
  }
  if (records < 40 || reads < 1 || cold_reads < 1) {
    fprintf(stderr, "cache: --records must be at least 40, --reads and "
                    "--cold-reads at least 1\n");
    return 2;
  }
  if (repeat < 1) repeat = 1;
  if (repeat > 16) repeat = 16;
  bc_set_notice_handler(count_notice, NULL);

  /* The record bodies. */
  pool = malloc((size_t)REC << POOL_BITS);
  if (pool == NULL) die("out of memory");
  bench_rng rng = {20240601};
  for (size_t k = 0; k < (size_t)1 << POOL_BITS; k++)
    bench_word_salad(&rng, pool + k * REC, REC);

  char dir[PATH_MAX];
  if (dir_arg != NULL) {
    snprintf(dir, sizeof dir, "%s", dir_arg);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) die("%s: %s", dir, strerror(errno));
  } else {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/bc-cache-bench-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) die("mkdtemp: %s", strerror(errno));
  }
  char root[2][PATH_MAX + 32], base[2][PATH_MAX + 32], root_tmp[PATH_MAX + 32];
  for (int z = 0; z < 2; z++) {
    snprintf(root[z], sizeof root[z], "%s/cache-%s", dir, z ? "bagz" : "bag");
    snprintf(base[z], sizeof base[z], "%s/base.%s", dir, z ? "bagz" : "bag");
  }
  snprintf(root_tmp, sizeof root_tmp, "%s/cache-work", dir);
  char root_cold[PATH_MAX + 32];
  snprintf(root_cold, sizeof root_cold, "%s/cache-cold", dir);

  uint64_t drain_shard = records / 20 < 10000 ? records / 20 : 10000;
  uint64_t limit_shard = records / 200 ? records / 200 : 1;
  uint64_t gets = reads < limit_gets ? reads : limit_gets;
  /* The data of an uncompressed cache: the records and 8 bytes of limits
   * per record (tail Bagz files), whatever the shard length. */
  uint64_t limit = records * (REC + 8) / 4;
  uint64_t fill_n = records / 4;
  uint64_t fill_shard = fill_n >= 20000 ? 2000 : fill_n / 10;
  double cost = 20e-6;

  uint64_t *idx = malloc(reads * sizeof *idx);
  if (idx == NULL) die("out of memory");
  bench_rng pick = {7};
  for (uint64_t k = 0; k < reads; k++) idx[k] = bench_rng_below(&pick, records);

  printf("bagcache cache-engine benchmark: %llu records of %d bytes, %llu "
         "random reads, median of %d; load average %.2f at start\n",
         (unsigned long long)records, REC, (unsigned long long)reads, repeat,
         load_average());
  printf("working directory %s\n\n", dir);
  bench_print_header();

  /* ---- 1. drain (also makes the caches of 2.) ------------------------------ */
  bc_cache_stats st_drain[2];
  bool drained = false;
  if (wanted(only, "drain") || wanted(only, "get")) {
    int runs = wanted(only, "drain") ? repeat : 1;
    for (int z = 0; z < 2; z++) {
      double tw[16], tc[16];
      /* Run -1 is a warm-up (not counted): the first writes of a process
       * into fresh page-cache memory are much slower on some machines. */
      for (int r = -1; r < runs; r++) {
        /* Both sides start with the previous copy deleted, so both write
         * into page-cache memory that was just freed. */
        clear_root(root[z]);
        double w = time_writer(base[z], records);
        double d = time_drain(root[z], records, drain_shard, z, &st_drain[z]);
        if (getenv("BC_BENCH_VERBOSE"))
          fprintf(stderr, "run %d: writer %.3f cache %.3f\n", r, w, d);
        if (r < 0) continue;
        tw[r] = w;
        tc[r] = d;
      }
      if (!wanted(only, "drain")) continue;
      char op[64];
      snprintf(op, sizeof op, "drain -> cache %s", z ? ".bagz" : ".bag");
      bench_row row = {op, bench_median(tc, (size_t)runs), (double)records * REC,
                       true, z ? "bc_writer -> one .bagz" : "bc_writer -> one .bag",
                       bench_median(tw, (size_t)runs), 0.9};
      bench_print_row(&row);
    }
    drained = true;
  }

  /* ---- 2. warm random get --------------------------------------------------- */
  if (wanted(only, "get")) {
    for (int z = 0; z < 2; z++) {
      double tc, tb, ts;
      warm_gets(root[z], z, records, idx, reads, repeat, &tc, &tb, &ts);
      bench_row row = {z ? "warm random get, cache .bagz" : "warm random get, cache .bag",
                       tc, (double)reads, false,
                       z ? "bc_bag_get, same .bagz shards" : "bc_bag_get, same .bag shards",
                       tb, 0.8};
      bench_print_row(&row);
      bench_row info = {"  (the same cache reads)", tc, (double)reads, false,
                        "bc_bag_get, one bc_bag per shard", ts, 0};
      bench_print_row(&info);
    }
  }

  /* ---- 3. random gets under a disk limit ------------------------------------ */
  bc_cache_stats st_lim;
  double tl[16], lim_time = 0;
  if (wanted(only, "limit")) {
    for (int r = 0; r < repeat; r++)
      tl[r] = limited_gets(root_tmp, records, limit_shard, limit, idx, gets, &st_lim);
    lim_time = bench_median(tl, (size_t)repeat);
    bench_row row = {"random get, disk_limit 25%", lim_time, (double)gets, false,
                     NULL, 0, 0};
    bench_print_row(&row);
  }

  /* ---- 4. fill workers ------------------------------------------------------- */
  static const char *const fill_names[] = {
      "1 filler", "fill: 2 workers, preload_all", "fill: 2 workers, prefetch 2",
      "fill: 2 threads, alternate"};
  double tf[4][16], conc[4][16], fill_time[4] = {0}, fill_conc[4] = {0};
  bc_cache_stats st_fill[4];
  if (wanted(only, "fill")) {
    for (int r = 0; r < repeat; r++) {
      for (int m = 0; m < 4; m++)
        tf[m][r] = time_fill(root_tmp, (fill_mode)m, fill_n, fill_shard, cost,
                             &st_fill[m], &conc[m][r]);
      if (getenv("BC_BENCH_VERBOSE"))
        fprintf(stderr, "run %d: fill %.3f %.3f %.3f %.3f s\n", r, tf[0][r],
                tf[1][r], tf[2][r], tf[3][r]);
    }
    for (int m = 0; m < 4; m++) {
      fill_time[m] = bench_median(tf[m], (size_t)repeat);
      fill_conc[m] = bench_median(conc[m], (size_t)repeat);
    }
    for (int m = 1; m < 4; m++) {
      bench_row row = {fill_names[m], fill_time[m], (double)fill_n, false,
                       "1 filler (bc_cache_fill_all)", fill_time[0], 1.7};
      bench_print_row(&row);
    }
  }

  /* ---- 5. cold get ------------------------------------------------------------ */
  if (wanted(only, "cold")) {
    double tc, tr;
    make_cold_cache(root_cold, cold_shard);
    cold_gets(root_cold, cold_shard, cold_reads, repeat, &tc, &tr);
    bench_row row = {"cold get, max_open_shards 1", tc, (double)cold_reads, false,
                     "open + mmap + read + munmap + close", tr, 1.0 / 3};
    bench_print_row(&row);
  }

  /* ---- details ---------------------------------------------------------------- */
  printf("\n");
  if (drained)
    printf("drain: shards of %llu records; .bag cache %llu shards, %llu bytes; "
           ".bagz cache %llu shards, %llu bytes\n",
           (unsigned long long)drain_shard,
           (unsigned long long)st_drain[0].shards_present,
           (unsigned long long)st_drain[0].bytes_on_disk,
           (unsigned long long)st_drain[1].shards_present,
           (unsigned long long)st_drain[1].bytes_on_disk);
  if (wanted(only, "limit"))
    printf("disk limit: %llu random gets, shards of %llu records, limit %llu "
           "bytes (%llu in use at the end): %.0f gets/s; per run: fills %llu, "
           "regenerations %llu, evictions %llu, passes opened %llu, records "
           "skipped %llu, shard opens %llu, hits %llu\n",
           (unsigned long long)gets, (unsigned long long)limit_shard,
           (unsigned long long)limit, (unsigned long long)st_lim.bytes_on_disk,
           gets / lim_time, (unsigned long long)st_lim.fills,
           (unsigned long long)st_lim.regenerations,
           (unsigned long long)st_lim.evictions,
           (unsigned long long)st_lim.passes_opened,
           (unsigned long long)st_lim.records_skipped,
           (unsigned long long)st_lim.shard_opens, (unsigned long long)st_lim.hits);
  if (wanted(only, "fill")) {
    printf("fill: %llu records of 20 us (busy) in shards of %llu; the source "
           "alone needs %.2f s on one thread\n",
           (unsigned long long)fill_n, (unsigned long long)fill_shard, fill_n * cost);
    for (int m = 0; m < 4; m++)
      printf("  %-30s %7.3f s  source busy %.2f passes on average; fills %llu, "
             "waits %llu, passes opened %llu, records skipped %llu\n",
             fill_names[m], fill_time[m], fill_conc[m],
             (unsigned long long)st_fill[m].fills,
             (unsigned long long)st_fill[m].waits,
             (unsigned long long)st_fill[m].passes_opened,
             (unsigned long long)st_fill[m].records_skipped);
  }
  if (wanted(only, "cold"))
    printf("cold get: %d shards of %llu records (%llu bytes each), %llu reads, "
           "each in another shard than the one before\n", COLD_SHARDS,
           (unsigned long long)cold_shard,
           (unsigned long long)(cold_shard * (REC + 8)),
           (unsigned long long)cold_reads);
  printf("load average %.2f at the end\n", load_average());
  if (atomic_load(&notices) > 0)
    printf("%d notices, the first: %s\n", atomic_load(&notices), first_notice);

  for (int z = 0; z < 2; z++) clear_root(root[z]);
  clear_root(root_tmp);
  clear_root(root_cold);
  if (dir_arg == NULL) rmdir(dir);
  free(idx);
  free(pool);
  return 0;
}
