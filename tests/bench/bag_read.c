/*
 * bag_read - how fast bagcache writes and reads Bagz files, next to plain
 * code doing the same work on the same data in the same run.
 *
 *   bag_read [--records N] [--reads N] [--record-size B] [--repeat R]
 *            [--dir DIR] [--only KEY,...] [--quick]
 *
 * Data: N records (default 200,000) of B bytes (default 1024) of word salad
 * from a seeded PRNG, written as DIR/data.bag and DIR/data.bagz with
 * bc_writer; then `--reads` (default 1,000,000) uniformly random indices,
 * read on one thread with the page cache warm.  Every measurement runs R
 * times (default 5, baseline and bagcache alternating) and the table shows
 * medians.  ratio = baseline time / bagcache time (for get_many: the speed-up
 * over the single-thread get loop); "target" is the goal from the design,
 * "below" marks a miss.  Timings never fail the program: it exits 1 only
 * when bagcache and a baseline disagree about the bytes, 2 on bad usage.
 * doc/performance.md explains each baseline and has results.
 *
 * Row keys for --only: write-bag write-bagz bag-get bag-view bagz-get
 * bagz-many zstd-2-threads bag-many bag-get-mem bagz-get-mem.
 * "zstd-2-threads" is not bagcache: the bare zstd loop split over two
 * threads, the most two threads can gain on this machine (the ceiling for
 * the get_many row).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "bagcache.h"
#include "bench.h"

#define NOINLINE __attribute__((noinline))

typedef struct config {
  uint64_t records, reads;
  size_t record_size;
  int repeat;
  const char *dir;
  const char *only;
} config;

typedef struct dataset {
  unsigned char *bytes; /* records * record_size bytes */
  uint64_t records;
  size_t record_size;
  uint64_t *indices;
  size_t reads;
} dataset;

/* A tail Bagz file mapped by the baselines, split without the library. */
typedef struct mapping {
  const unsigned char *map;
  size_t size;
  const unsigned char *limits; /* count u64 LE end offsets */
  uint64_t count;
} mapping;

static const config *cfg;
static char dir[PATH_MAX], bag_path[PATH_MAX + 16], bagz_path[PATH_MAX + 16],
    bare_path[PATH_MAX + 16];
static bool own_dir;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "bag_read: ");
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
  exit(1);
}

static void die_bc(const char *what, int rc) __attribute__((noreturn));
static void die_bc(const char *what, int rc) {
  fprintf(stderr, "bag_read: %s: %s (%s)\n", what, bc_error_name(rc),
          bc_errmsg());
  exit(1);
}

static bool selected(const char *key) {
  if (cfg->only == NULL) return true;
  size_t len = strlen(key);
  for (const char *p = cfg->only; *p;) {
    const char *e = strchr(p, ',');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (n == len && memcmp(p, key, n) == 0) return true;
    if (e == NULL) break;
    p = e + 1;
  }
  return false;
}

static inline uint64_t load_u64le(const unsigned char *b) {
  uint64_t v;
  memcpy(&v, b, 8); /* the benchmark assumes a little-endian host */
  return v;
}

/* The checksums every loop folds its records into, so no work can be
 * optimised away and bagcache and the baseline can be compared: a copy
 * check (length, first and last byte) and a view check (length, first). */
static inline uint64_t copy_check(uint64_t c, const unsigned char *p,
                                  size_t n) {
  return c * 31 + n + (n ? (uint64_t)p[0] << 8 | p[n - 1] : 0);
}

static inline uint64_t view_check(uint64_t c, const unsigned char *p,
                                  size_t n) {
  return c * 31 + n + (n ? p[0] : 0);
}

/* ---- data ------------------------------------------------------------------ */

static void make_dataset(dataset *d) {
  d->records = cfg->records;
  d->record_size = cfg->record_size;
  d->reads = (size_t)cfg->reads;
  d->bytes = malloc((size_t)(d->records * d->record_size));
  d->indices = malloc(d->reads * sizeof *d->indices);
  if (d->bytes == NULL || d->indices == NULL) die("%s", "out of memory");
  bench_rng rng = {42};
  for (uint64_t i = 0; i < d->records; i++)
    bench_word_salad(&rng, d->bytes + i * d->record_size, d->record_size);
  bench_rng irng = {7};
  for (size_t i = 0; i < d->reads; i++)
    d->indices[i] = bench_rng_below(&irng, d->records);
}

static void map_tail(const char *path, mapping *m) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) die("cannot open %s", path);
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size < 8) die("bad file %s", path);
  m->size = (size_t)st.st_size;
  void *p = mmap(NULL, m->size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) die("cannot map %s", path);
  m->map = p;
  uint64_t end = load_u64le(m->map + m->size - 8);
  m->limits = m->map + end;
  m->count = (m->size - end) / 8;
}

static void unmap(mapping *m) { munmap((void *)m->map, m->size); }

/* Reads a file once so its pages are in the page cache. */
static void warm(const char *path) {
  static unsigned char buf[1 << 20];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) die("cannot open %s", path);
  while (read(fd, buf, sizeof buf) > 0) {
  }
  close(fd);
}

/* ---- writes -------------------------------------------------------------- */

/* Baseline: one write() per record, the limits in one write() at the end,
 * fsync - the least any writer of this file must do. */
static NOINLINE void write_bare(const dataset *d, const char *path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) die("cannot create %s", path);
  unsigned char *limits = malloc((size_t)d->records * 8);
  if (limits == NULL) die("%s", "out of memory");
  uint64_t end = 0;
  for (uint64_t i = 0; i < d->records; i++) {
    if (write(fd, d->bytes + i * d->record_size, d->record_size) !=
        (ssize_t)d->record_size)
      die("write to %s failed", path);
    end += d->record_size;
    memcpy(limits + 8 * i, &end, 8);
  }
  if (write(fd, limits, (size_t)d->records * 8) != (ssize_t)(d->records * 8))
    die("write to %s failed", path);
  if (fsync(fd) != 0 || close(fd) != 0) die("fsync of %s failed", path);
  free(limits);
}

/* bagcache: bc_writer from open to close (fsync, rename, fsync dir). */
static NOINLINE uint64_t write_lib(const dataset *d, const char *path) {
  bc_writer *w = NULL;
  int rc = bc_writer_open(&w, path, NULL);
  if (rc != 0) die_bc("bc_writer_open", rc);
  for (uint64_t i = 0; i < d->records && rc == 0; i++)
    rc = bc_writer_write(w, d->bytes + i * d->record_size, d->record_size);
  if (rc != 0) die_bc("bc_writer_write", rc);
  uint64_t stored = bc_writer_records_bytes(w);
  rc = bc_writer_close(w);
  if (rc != 0) die_bc("bc_writer_close", rc);
  bc_writer_free(w);
  return stored;
}

/* Baseline: compression alone, as bagz calls it (one CDict, a reused CCtx
 * and destination buffer).  Returns the compressed bytes. */
static NOINLINE uint64_t compress_bare(const dataset *d, ZSTD_CCtx *cctx,
                                       const ZSTD_CDict *cdict,
                                       unsigned char *dst, size_t cap) {
  uint64_t total = 0;
  for (uint64_t i = 0; i < d->records; i++) {
    size_t n = ZSTD_compress_usingCDict(cctx, dst, cap,
                                        d->bytes + i * d->record_size,
                                        d->record_size, cdict);
    if (ZSTD_isError(n)) die("ZSTD_compress_usingCDict: %s", ZSTD_getErrorName(n));
    total += n;
  }
  return total;
}

/* ---- reads --------------------------------------------------------------- */

static NOINLINE uint64_t loop_bare_copy(const mapping *m, const uint64_t *idx,
                                        size_t n, unsigned char *buf) {
  uint64_t c = 0;
  for (size_t k = 0; k < n; k++) {
    uint64_t i = idx[k];
    uint64_t lo = i ? load_u64le(m->limits + 8 * (i - 1)) : 0;
    uint64_t hi = load_u64le(m->limits + 8 * i);
    size_t len = (size_t)(hi - lo);
    memcpy(buf, m->map + lo, len);
    c = copy_check(c, buf, len);
  }
  return c;
}

static NOINLINE uint64_t loop_bare_view(const mapping *m, const uint64_t *idx,
                                        size_t n) {
  uint64_t c = 0;
  for (size_t k = 0; k < n; k++) {
    uint64_t i = idx[k];
    uint64_t lo = i ? load_u64le(m->limits + 8 * (i - 1)) : 0;
    uint64_t hi = load_u64le(m->limits + 8 * i);
    c = view_check(c, m->map + lo, (size_t)(hi - lo));
  }
  return c;
}

static NOINLINE uint64_t loop_bare_zstd(const mapping *m, const uint64_t *idx,
                                        size_t n, ZSTD_DCtx *dctx,
                                        unsigned char *buf, size_t cap) {
  uint64_t c = 0;
  for (size_t k = 0; k < n; k++) {
    uint64_t i = idx[k];
    uint64_t lo = i ? load_u64le(m->limits + 8 * (i - 1)) : 0;
    uint64_t hi = load_u64le(m->limits + 8 * i);
    const unsigned char *src = m->map + lo;
    size_t len = (size_t)(hi - lo), out = 0;
    if (len > 0) {
      unsigned long long size = ZSTD_getFrameContentSize(src, len);
      if (size > cap) die("%s", "frame larger than the buffer");
      out = ZSTD_decompressDCtx(dctx, buf, (size_t)size, src, len);
      if (ZSTD_isError(out)) die("ZSTD_decompressDCtx: %s", ZSTD_getErrorName(out));
    }
    c = copy_check(c, buf, out);
  }
  return c;
}

/* The machine's own two-thread ceiling: the bare zstd loop on two threads,
 * each with its own DCtx and buffer, over one half of the indices. */
typedef struct half_job {
  const mapping *m;
  const uint64_t *idx;
  size_t n, cap;
  uint64_t check;
} half_job;

static void *bare_zstd_half(void *arg) {
  half_job *j = arg;
  ZSTD_DCtx *dctx = ZSTD_createDCtx();
  unsigned char *buf = malloc(j->cap);
  if (dctx == NULL || buf == NULL) die("%s", "out of memory");
  j->check = loop_bare_zstd(j->m, j->idx, j->n, dctx, buf, j->cap);
  free(buf);
  ZSTD_freeDCtx(dctx);
  return NULL;
}

static NOINLINE void bare_zstd_two_threads(const mapping *m,
                                           const uint64_t *idx, size_t n,
                                           size_t cap) {
  half_job a = {m, idx, n / 2, cap, 0}, b = {m, idx + n / 2, n - n / 2, cap, 0};
  pthread_t t;
  if (pthread_create(&t, NULL, bare_zstd_half, &b) != 0)
    die("%s", "pthread_create failed");
  bare_zstd_half(&a);
  pthread_join(t, NULL);
}

static NOINLINE uint64_t loop_bag_get(const bc_bag *bag, const uint64_t *idx,
                                      size_t n, bc_buf *buf) {
  uint64_t c = 0;
  for (size_t k = 0; k < n; k++) {
    int rc = bc_bag_get(bag, idx[k], buf);
    if (rc != 0) die_bc("bc_bag_get", rc);
    c = copy_check(c, buf->data, buf->size);
  }
  return c;
}

static NOINLINE uint64_t loop_bag_view(const bc_bag *bag, const uint64_t *idx,
                                       size_t n) {
  uint64_t c = 0;
  for (size_t k = 0; k < n; k++) {
    const void *p;
    size_t len;
    int rc = bc_bag_get_view(bag, idx[k], &p, &len);
    if (rc != 0) die_bc("bc_bag_get_view", rc);
    c = view_check(c, p, len);
  }
  return c;
}

/* Zero-copy in batches of 1024: the per-call cost is paid per batch. */
static NOINLINE uint64_t loop_bag_views(const bc_bag *bag, const uint64_t *idx,
                                        size_t n) {
  enum { BATCH = 1024 };
  const void *ptrs[BATCH];
  size_t lens[BATCH];
  uint64_t c = 0;
  for (size_t k = 0; k < n; k += BATCH) {
    size_t m = n - k < BATCH ? n - k : BATCH;
    int rc = bc_bag_get_views(bag, idx + k, m, ptrs, lens);
    if (rc != 0) die_bc("bc_bag_get_views", rc);
    for (size_t j = 0; j < m; j++) c = view_check(c, ptrs[j], lens[j]);
  }
  return c;
}

static NOINLINE void run_get_many(const bc_bag *bag, const uint64_t *idx,
                                  size_t n, bc_buf *outs) {
  int rc = bc_bag_get_many(bag, idx, n, outs);
  if (rc != 0) die_bc("bc_bag_get_many", rc);
}

static uint64_t outs_check(const bc_buf *outs, size_t n) {
  uint64_t c = 0;
  for (size_t k = 0; k < n; k++) c = copy_check(c, outs[k].data, outs[k].size);
  return c;
}

static bc_bag *open_bag(const char *path, bc_limits_storage storage) {
  bc_reader_options o = BC_READER_OPTIONS_INIT;
  o.limits_storage = storage;
  o.max_parallelism = 2;
  bc_bag *bag = NULL;
  int rc = bc_bag_open(&bag, path, &o);
  if (rc != 0) die_bc("bc_bag_open", rc);
  return bag;
}

/* Every record the loops read, compared in full once before timing. */
static void verify_reads(const dataset *d, const bc_bag *bag,
                         const bc_bag *bagz) {
  bc_buf buf = BC_BUF_INIT;
  size_t n = d->reads < 20000 ? d->reads : 20000;
  for (size_t k = 0; k < n; k++) {
    uint64_t i = d->indices[k];
    const unsigned char *want = d->bytes + i * d->record_size;
    int rc = bc_bag_get(bag, i, &buf);
    if (rc != 0) die_bc("bc_bag_get", rc);
    if (buf.size != d->record_size || memcmp(buf.data, want, buf.size) != 0)
      die("%s", ".bag record differs from what was written");
    rc = bc_bag_get(bagz, i, &buf);
    if (rc != 0) die_bc("bc_bag_get(.bagz)", rc);
    if (buf.size != d->record_size || memcmp(buf.data, want, buf.size) != 0)
      die("%s", ".bagz record differs from what was written");
  }
  bc_buf_release(&buf);
}

static void same(uint64_t a, uint64_t b, const char *what) {
  if (a != b) die("checksums differ: %s", what);
}

/* ---- the run ------------------------------------------------------------- */

#define MAX_REPEAT 101

typedef struct timings {
  double lib[MAX_REPEAT], base[MAX_REPEAT];
} timings;

static void row(const char *op, const char *base, double t, double bt,
                double units, bool bytes, double target) {
  bench_row r = {op, t, units, bytes, base, bt, target};
  bench_print_row(&r);
}

static void run(const dataset *d) {
  int R = cfg->repeat;
  double recs = (double)d->reads;
  double raw_bytes = (double)d->records * (double)d->record_size;
  timings t;

  printf("bag_read: %llu records x %zu B, %zu random reads, median of %d, "
         "libzstd %s, bagcache %s\n",
         (unsigned long long)d->records, d->record_size, d->reads, R,
         ZSTD_versionString(), bc_version());
  printf("bag_read: files in %s\n\n", dir);
  bench_print_header();

  /* Writes (these also make the files every read measures). */
  bool wb = selected("write-bag"), wz = selected("write-bagz");
  for (int r = 0; r < (wb ? R : 1); r++) {
    if (wb) {
      double t0 = bench_now();
      write_bare(d, bare_path);
      t.base[r] = bench_now() - t0;
      unlink(bare_path);
    }
    unlink(bag_path); /* publish a new file, as the baseline makes one */
    double t0 = bench_now();
    write_lib(d, bag_path);
    t.lib[r] = bench_now() - t0;
  }
  if (wb)
    row("write .bag (bc_writer)", "write() per record + fsync",
        bench_median(t.lib, R), bench_median(t.base, R), raw_bytes, true, 0.8);

  uint64_t stored = 0;
  {
    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    ZSTD_CDict *cdict = ZSTD_createCDict(NULL, 0, 3);
    size_t cap = ZSTD_compressBound(d->record_size);
    unsigned char *dst = malloc(cap);
    if (cctx == NULL || cdict == NULL || dst == NULL) die("%s", "zstd setup");
    uint64_t bare_stored = 0;
    for (int r = 0; r < (wz ? R : 1); r++) {
      if (wz) {
        double t0 = bench_now();
        bare_stored = compress_bare(d, cctx, cdict, dst, cap);
        t.base[r] = bench_now() - t0;
      }
      unlink(bagz_path);
      double t0 = bench_now();
      stored = write_lib(d, bagz_path);
      t.lib[r] = bench_now() - t0;
    }
    if (wz) {
      same(stored, bare_stored, "compressed sizes of bc_writer and the bare "
                                "ZSTD_compress_usingCDict loop");
      row("write .bagz (bc_writer)", "ZSTD_compress_usingCDict loop",
          bench_median(t.lib, R), bench_median(t.base, R), raw_bytes, true,
          0.9);
    }
    free(dst);
    ZSTD_freeCDict(cdict);
    ZSTD_freeCCtx(cctx);
  }

  warm(bag_path);
  warm(bagz_path);
  bc_bag *bag = open_bag(bag_path, BC_LIMITS_ON_DISK);
  bc_bag *bagz = open_bag(bagz_path, BC_LIMITS_ON_DISK);
  verify_reads(d, bag, bagz);
  mapping mb, mz;
  map_tail(bag_path, &mb);
  map_tail(bagz_path, &mz);
  if (mb.count != d->records || mz.count != d->records)
    die("%s", "record count of a written file is wrong");

  unsigned char *buf = malloc(d->record_size);
  bc_buf out = BC_BUF_INIT;
  if (buf == NULL) die("%s", "out of memory");
  uint64_t c_lib = 0, c_base = 0;
  const uint64_t *idx = d->indices;
  size_t n = d->reads;

  if (selected("bag-get")) {
    for (int r = 0; r < R; r++) {
      double t0 = bench_now();
      c_base = loop_bare_copy(&mb, idx, n, buf);
      t.base[r] = bench_now() - t0;
      t0 = bench_now();
      c_lib = loop_bag_get(bag, idx, n, &out);
      t.lib[r] = bench_now() - t0;
      same(c_lib, c_base, ".bag get vs mmap + memcpy");
    }
    row(".bag get (copy)", "mmap + limits + memcpy", bench_median(t.lib, R),
        bench_median(t.base, R), recs, false, 0.6);
  }

  if (selected("bag-view")) {
    for (int r = 0; r < R; r++) {
      double t0 = bench_now();
      c_base = loop_bare_view(&mb, idx, n);
      t.base[r] = bench_now() - t0;
      t0 = bench_now();
      c_lib = loop_bag_view(bag, idx, n);
      t.lib[r] = bench_now() - t0;
      same(c_lib, c_base, ".bag get_view vs pointer arithmetic");
    }
    row(".bag get_view (zero copy)", "mmap + limits, pointer only",
        bench_median(t.lib, R), bench_median(t.base, R), recs, false, 0.9);
    for (int r = 0; r < R; r++) {
      double t0 = bench_now();
      c_base = loop_bare_view(&mb, idx, n);
      t.base[r] = bench_now() - t0;
      t0 = bench_now();
      c_lib = loop_bag_views(bag, idx, n);
      t.lib[r] = bench_now() - t0;
      same(c_lib, c_base, ".bag get_views vs pointer arithmetic");
    }
    row(".bag get_views (zero copy, x1024)", "mmap + limits, pointer only",
        bench_median(t.lib, R), bench_median(t.base, R), recs, false, 0.9);
  }

  double bagz_get = 0;
  bool zg = selected("bagz-get"), zm = selected("bagz-many");
  if (zg || zm) {
    ZSTD_DCtx *dctx = ZSTD_createDCtx();
    if (dctx == NULL) die("%s", "ZSTD_createDCtx");
    for (int r = 0; r < R; r++) {
      if (zg) {
        double t0 = bench_now();
        c_base = loop_bare_zstd(&mz, idx, n, dctx, buf, d->record_size);
        t.base[r] = bench_now() - t0;
      }
      double t0 = bench_now();
      c_lib = loop_bag_get(bagz, idx, n, &out);
      t.lib[r] = bench_now() - t0;
      if (zg) same(c_lib, c_base, ".bagz get vs ZSTD_decompressDCtx");
    }
    ZSTD_freeDCtx(dctx);
    bagz_get = bench_median(t.lib, R);
    if (zg)
      row(".bagz get", "ZSTD_decompressDCtx loop", bagz_get,
          bench_median(t.base, R), recs, false, 0.9);
  }

  bc_buf *outs = NULL;
  if (zm || selected("bag-many")) {
    outs = calloc(n, sizeof *outs);
    if (outs == NULL) die("%s", "out of memory");
  }
  if (zm) {
    for (int r = 0; r < R; r++) {
      double t0 = bench_now();
      run_get_many(bagz, idx, n, outs);
      t.lib[r] = bench_now() - t0;
      same(outs_check(outs, n), c_lib, ".bagz get_many vs get");
    }
    row(".bagz get_many (2 threads)", ".bagz get loop (1 thread)",
        bench_median(t.lib, R), bagz_get, recs, false, 1.6);
  }

  if (selected("zstd-2-threads")) {
    ZSTD_DCtx *dctx = ZSTD_createDCtx();
    if (dctx == NULL) die("%s", "ZSTD_createDCtx");
    for (int r = 0; r < R; r++) {
      double t0 = bench_now();
      loop_bare_zstd(&mz, idx, n, dctx, buf, d->record_size);
      t.base[r] = bench_now() - t0;
      t0 = bench_now();
      bare_zstd_two_threads(&mz, idx, n, d->record_size);
      t.lib[r] = bench_now() - t0;
    }
    ZSTD_freeDCtx(dctx);
    row("(bare zstd loop on 2 threads)", "ZSTD_decompressDCtx loop",
        bench_median(t.lib, R), bench_median(t.base, R), recs, false, 0);
  }

  if (selected("bag-many")) {
    for (int r = 0; r < R; r++) {
      double t0 = bench_now();
      c_lib = loop_bag_get(bag, idx, n, &out);
      t.base[r] = bench_now() - t0;
      t0 = bench_now();
      run_get_many(bag, idx, n, outs);
      t.lib[r] = bench_now() - t0;
      same(outs_check(outs, n), c_lib, ".bag get_many vs get");
    }
    row(".bag get_many (2 threads)", ".bag get loop (1 thread)",
        bench_median(t.lib, R), bench_median(t.base, R), recs, false, 0);
  }
  if (outs != NULL) {
    for (size_t k = 0; k < n; k++) bc_buf_release(&outs[k]);
    free(outs);
  }

  /* Limits held in memory instead of read from the mapping per access. */
  if (selected("bag-get-mem")) {
    bc_bag *mem = open_bag(bag_path, BC_LIMITS_IN_MEMORY);
    for (int r = 0; r < R; r++) {
      double t0 = bench_now();
      c_base = loop_bare_copy(&mb, idx, n, buf);
      t.base[r] = bench_now() - t0;
      t0 = bench_now();
      c_lib = loop_bag_get(mem, idx, n, &out);
      t.lib[r] = bench_now() - t0;
      same(c_lib, c_base, ".bag IN_MEMORY get vs mmap + memcpy");
    }
    bc_bag_close(mem);
    row(".bag get, IN_MEMORY limits", "mmap + limits + memcpy",
        bench_median(t.lib, R), bench_median(t.base, R), recs, false, 0);
  }
  if (selected("bagz-get-mem")) {
    bc_bag *mem = open_bag(bagz_path, BC_LIMITS_IN_MEMORY);
    ZSTD_DCtx *dctx = ZSTD_createDCtx();
    if (dctx == NULL) die("%s", "ZSTD_createDCtx");
    for (int r = 0; r < R; r++) {
      double t0 = bench_now();
      c_base = loop_bare_zstd(&mz, idx, n, dctx, buf, d->record_size);
      t.base[r] = bench_now() - t0;
      t0 = bench_now();
      c_lib = loop_bag_get(mem, idx, n, &out);
      t.lib[r] = bench_now() - t0;
      same(c_lib, c_base, ".bagz IN_MEMORY get vs ZSTD_decompressDCtx");
    }
    ZSTD_freeDCtx(dctx);
    bc_bag_close(mem);
    row(".bagz get, IN_MEMORY limits", "ZSTD_decompressDCtx loop",
        bench_median(t.lib, R), bench_median(t.base, R), recs, false, 0);
  }

  printf("\nbag_read: .bag %.1f MB, .bagz %.1f MB (records %.2fx smaller)\n",
         (double)mb.size / 1e6, (double)mz.size / 1e6,
         raw_bytes / (double)(stored ? stored : 1));
  bc_buf_release(&out);
  free(buf);
  unmap(&mb);
  unmap(&mz);
  bc_bag_close(bag);
  bc_bag_close(bagz);
}

/* Removes what the run made (also after a failure). */
static void remove_files(void) {
  unlink(bag_path);
  unlink(bagz_path);
  unlink(bare_path);
  if (own_dir) rmdir(dir);
}

/* ---- options ------------------------------------------------------------- */

static void usage(void) {
  fprintf(stderr,
          "usage: bag_read [--records N] [--reads N] [--record-size B] "
          "[--repeat R]\n"
          "                [--dir DIR] [--only KEY,...] [--quick]\n");
  exit(2);
}

static uint64_t number(const char *s, uint64_t min, uint64_t max) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v < min ||
      v > max) {
    fprintf(stderr, "bag_read: bad number '%s' (%llu..%llu)\n", s,
            (unsigned long long)min, (unsigned long long)max);
    exit(2);
  }
  return v;
}

static void parse(int argc, char **argv, config *c) {
  c->records = 200000;
  c->reads = 1000000;
  c->record_size = 1024;
  c->repeat = 5;
  c->dir = NULL;
  c->only = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--quick") == 0) {
      c->records = 2000;
      c->reads = 20000;
      c->repeat = 3;
      continue;
    }
    if (v == NULL) usage();
    if (strcmp(a, "--records") == 0)
      c->records = number(v, 1, (uint64_t)1 << 32);
    else if (strcmp(a, "--reads") == 0)
      c->reads = number(v, 1, (uint64_t)1 << 32);
    else if (strcmp(a, "--record-size") == 0)
      c->record_size = (size_t)number(v, 1, (uint64_t)1 << 24);
    else if (strcmp(a, "--repeat") == 0)
      c->repeat = (int)number(v, 1, MAX_REPEAT);
    else if (strcmp(a, "--dir") == 0)
      c->dir = v;
    else if (strcmp(a, "--only") == 0)
      c->only = v;
    else
      usage();
    i++;
  }
}

int main(int argc, char **argv) {
  config c;
  parse(argc, argv, &c);
  cfg = &c;
  if (c.dir != NULL) {
    snprintf(dir, sizeof dir, "%s", c.dir);
  } else {
    const char *base = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/bag_read.XXXXXX",
             base && base[0] ? base : "/tmp");
    if (mkdtemp(dir) == NULL) die("cannot create a directory under %s", dir);
    own_dir = true;
  }
  snprintf(bag_path, sizeof bag_path, "%s/data.bag", dir);
  snprintf(bagz_path, sizeof bagz_path, "%s/data.bagz", dir);
  snprintf(bare_path, sizeof bare_path, "%s/bare.bag", dir);

  atexit(remove_files);

  dataset d;
  make_dataset(&d);
  run(&d);
  free(d.bytes);
  free(d.indices);
  return 0;
}
