/*
 * tests/bench/views - what views cost, beside baselines from the same run.
 *
 *   1. ns per index to resolve through each view type and through a stack
 *      of five, beside a bare array-index loop (index -> table[index]);
 *   2. get_many of random indices through 3 views over a sharded .bagz set
 *      vs get_many of the same leaf indices directly on the set (target
 *      >= 0.9x);
 *   3. the read-ahead iterator over the set with 2 threads vs a
 *      single-thread get loop (target >= 1.6x).
 * Every figure is the median of --repeat runs.  Not a test: it prints a
 * table and exits 0.
 *
 * Usage: views [--records N] [--reads N] [--repeat R] [--dir DIR] [--quick]
 */
#include <bagcache.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* CPU seconds used by the process (all threads): on a loaded machine the
 * wall clock of a parallel phase says little, its CPU cost still does. */
static double cpu_seconds(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static uint64_t rng = 42;
static uint64_t next_rand(void) {
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return rng * 0x2545F4914F6CDD1DULL;
}

static void die(const char *what, int rc) {
  fprintf(stderr, "views: %s: %s: %s\n", what, bc_strerror(rc), bc_errmsg());
  exit(1);
}
#define CHECK(what, call)            \
  do {                               \
    int rc_ = (call);                \
    if (rc_ < 0) die(what, rc_);     \
  } while (0)

/* 1 KiB of word salad: compresses about 3x, like text records. */
static void make_record(char *buf, size_t size) {
  static const char *words[] = {"the", "quick", "brown", "fox", "jumps",
                                "over", "lazy", "dog", "record", "bagcache",
                                "shard", "cache", "index", "value", "stream",
                                "random", "access", "sequence", "view", "data"};
  size_t n = 0;
  while (n < size) {
    const char *w = words[next_rand() % 20];
    size_t len = strlen(w);
    for (size_t i = 0; i < len && n < size; i++) buf[n++] = w[i];
    if (n < size) buf[n++] = (next_rand() % 9 == 0) ? '\n' : ' ';
  }
}

/* An array leaf of n empty records, for timing index maps alone. */
static int empty_get(void *payload, uint64_t index, bc_buf *out) {
  (void)payload;
  (void)index;
  out->size = 0;
  return 0;
}

static bc_seq *index_leaf(uint64_t n) {
  bc_callback_seq_options o = BC_CALLBACK_SEQ_OPTIONS_INIT;
  o.fixed_length = (bc_len){BC_LEN_EXACT, n};
  o.get = empty_get;
  o.thread_safe = true;
  bc_seq *s;
  CHECK("leaf", bc_seq_new_callbacks(&s, &o));
  return s;
}

static int affine(void *payload, uint64_t k, uint64_t *child) {
  *child = (k * 7 + 3) % *(uint64_t *)payload;
  return 0;
}

/* ns per bc_seq_resolve over `n` random in-range indices. */
static double time_resolve(bc_seq *s, const int64_t *idx, size_t n, int repeat) {
  double t[16];
  volatile uint64_t sink = 0;
  for (int r = 0; r < repeat; r++) {
    double t0 = now();
    for (size_t i = 0; i < n; i++) {
      bc_seq *leaf;
      uint64_t li;
      CHECK("resolve", bc_seq_resolve(s, idx[i], &leaf, &li));
      sink += li;
    }
    t[r] = (now() - t0) / (double)n * 1e9;
  }
  (void)sink;
  return median(t, repeat);
}

int main(int argc, char **argv) {
  uint64_t records = 200000, reads = 1000000;
  int repeat = 5;
  const char *dir_arg = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--records") && i + 1 < argc) records = strtoull(argv[++i], 0, 10);
    else if (!strcmp(argv[i], "--reads") && i + 1 < argc) reads = strtoull(argv[++i], 0, 10);
    else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir_arg = argv[++i];
    else if (!strcmp(argv[i], "--quick")) { records = 2000; reads = 10000; repeat = 3; }
    else {
      fprintf(stderr, "usage: views [--records N] [--reads N] [--repeat R] [--dir DIR] [--quick]\n");
      return 2;
    }
  }
  if (repeat < 1) repeat = 1;
  if (repeat > 16) repeat = 16;
  bc_set_notice_handler(NULL, NULL);

  /* ---- 1. index maps ------------------------------------------------------ */
  uint64_t n = records;
  int64_t *idx = malloc(reads * sizeof *idx);
  uint64_t *table = malloc(n * sizeof *table);
  for (uint64_t i = 0; i < n; i++) table[i] = (i * 2654435761u) % n;
  for (uint64_t i = 0; i < reads; i++) idx[i] = (int64_t)(next_rand() % n);

  double bare[16];
  volatile uint64_t sink = 0;
  for (int r = 0; r < repeat; r++) {
    double t0 = now();
    for (uint64_t i = 0; i < reads; i++) sink += table[idx[i]];
    bare[r] = (now() - t0) / (double)reads * 1e9;
  }
  double bare_ns = median(bare, repeat);

  bc_seq *leaf = index_leaf(n), *half = index_leaf(n / 2), *v;
  bc_seq *halves[2] = {half, half};
  printf("bagcache views benchmark: %llu-element sequences, %llu random indices, median of %d\n\n",
         (unsigned long long)n, (unsigned long long)reads, repeat);
  printf("%-34s %12s %12s\n", "index map", "ns/index", "vs bare");
  printf("%-34s %12.1f %12s\n", "bare array index (baseline)", bare_ns, "1.00x");
  printf("%-34s %12.1f %12.2fx\n", "leaf only (no view)", time_resolve(leaf, idx, reads, repeat),
         time_resolve(leaf, idx, reads, repeat) / bare_ns);
  struct {
    const char *name;
    int kind;
  } kinds[] = {{"slice [::-1]", 0}, {"take (array)", 1}, {"map (affine)", 2},
               {"concat (2 parts)", 3}, {"interleave (2 parts)", 4},
               {"repeat (x1)", 5}, {"chunk_shuffle (chunk 1000)", 6},
               {"shuffle (global)", 7}};
  for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
    switch (kinds[k].kind) {
      case 0: CHECK("slice", bc_seq_slice(&v, leaf, BC_NONE, BC_NONE, -1)); break;
      case 1: CHECK("take", bc_seq_take(&v, leaf, (const int64_t *)table, n)); break;
      case 2: CHECK("map", bc_seq_map(&v, leaf, affine, &n, NULL, (bc_len){BC_LEN_EXACT, n})); break;
      case 3: CHECK("concat", bc_seq_concat(&v, halves, 2)); break;
      case 4: CHECK("interleave", bc_seq_interleave(&v, halves, 2)); break;
      case 5: CHECK("repeat", bc_seq_repeat(&v, leaf, 1)); break;
      case 6: CHECK("chunk_shuffle", bc_seq_chunk_shuffle(&v, leaf, 1000, BC_LEN_ALL, 1)); break;
      default: CHECK("shuffle", bc_seq_shuffle(&v, leaf, 1)); break;
    }
    double ns = time_resolve(v, idx, reads, repeat);
    printf("%-34s %12.1f %12.2fx\n", kinds[k].name, ns, ns / bare_ns);
    bc_seq_unref(v);
  }
  /* A stack of five: shuffle(interleave(concat, ...)) style. */
  bc_seq *a, *b, *c, *d, *e;
  CHECK("stack", bc_seq_concat(&a, halves, 2));
  CHECK("stack", bc_seq_slice(&b, a, BC_NONE, BC_NONE, -1));
  CHECK("stack", bc_seq_take(&c, b, (const int64_t *)table, n));
  CHECK("stack", bc_seq_chunk_shuffle(&d, c, 1000, BC_LEN_ALL, 2));
  bc_seq *pair[2] = {d, d};
  CHECK("stack", bc_seq_interleave(&e, pair, 2));
  double stack_ns = time_resolve(e, idx, reads, repeat);
  printf("%-34s %12.1f %12.2fx\n", "stack of 5 (concat>slice>take>", stack_ns, stack_ns / bare_ns);
  printf("%-34s\n\n", "  chunk_shuffle>interleave)");
  bc_seq_unref(e);
  bc_seq_unref(d);
  bc_seq_unref(c);
  bc_seq_unref(b);
  bc_seq_unref(a);
  bc_seq_unref(half);
  bc_seq_unref(leaf);

  /* ---- data: a .bagz set of 4 shards ------------------------------------- */
  char dir[4096];
  if (dir_arg) snprintf(dir, sizeof dir, "%s", dir_arg);
  else {
    snprintf(dir, sizeof dir, "%s/bc-views-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
  }
  char path[4200], spec[4200];
  char rec[1024];
  for (int s = 0; s < 4; s++) {
    snprintf(path, sizeof path, "%s/set-%05d-of-00004.bagz", dir, s);
    bc_writer *w;
    CHECK("writer", bc_writer_open(&w, path, NULL));
    for (uint64_t i = s; i < records; i += 4) {
      make_record(rec, sizeof rec);
      CHECK("write", bc_writer_write(w, rec, sizeof rec));
    }
    CHECK("close", bc_writer_close(w));
    bc_writer_free(w);
  }
  snprintf(spec, sizeof spec, "%s/set@4.bagz", dir);
  bc_reader_options ro = BC_READER_OPTIONS_INIT;
  ro.max_parallelism = 2;
  bc_seq *set;
  CHECK("open", bc_seq_open_bag(&set, spec, &ro));
  bc_bag *bag = bc_seq_bag(set);
  uint64_t len = bc_bag_len(bag);

  /* Warm the page cache. */
  bc_buf buf = BC_BUF_INIT;
  for (uint64_t i = 0; i < len; i++) CHECK("warm", bc_bag_get(bag, i, &buf));

  /* ---- 2. get_many through 3 views --------------------------------------- */
  bc_seq *s1, *s2, *s3;
  CHECK("v1", bc_seq_shuffle(&s1, set, 11));
  CHECK("v2", bc_seq_slice(&s2, s1, BC_NONE, BC_NONE, -1));
  CHECK("v3", bc_seq_repeat(&s3, s2, 2));
  /* The same leaf records both ways: view indices, and where they land. */
  int64_t *vidx = malloc(reads * sizeof *vidx);
  uint64_t *lidx = malloc(reads * sizeof *lidx);
  for (uint64_t i = 0; i < reads; i++) {
    vidx[i] = (int64_t)(next_rand() % (2 * len));
    bc_seq *lf;
    CHECK("resolve", bc_seq_resolve(s3, vidx[i], &lf, &lidx[i]));
  }
  bc_buf *outs = calloc(reads, sizeof *outs);
  double direct[16], viewed[16];
  for (int r = 0; r < repeat; r++) {
    double t0 = now();
    CHECK("get_many direct", bc_bag_get_many(bag, lidx, reads, outs));
    direct[r] = now() - t0;
    t0 = now();
    CHECK("get_many views", bc_seq_get_many(s3, vidx, reads, outs));
    viewed[r] = now() - t0;
  }
  double dm = median(direct, repeat), vm = median(viewed, repeat);
  printf("%-46s %10s %12s %8s %7s\n", "batch reads (.bagz, 2 threads)", "median s", "M rec/s", "ratio", "target");
  printf("%-46s %10.3f %12.3f %8s %7s\n", "get_many on the set (baseline)", dm, reads / dm / 1e6, "1.00x", "");
  printf("%-46s %10.3f %12.3f %7.2fx %7s %s\n\n", "get_many through repeat>slice>shuffle", vm,
         reads / vm / 1e6, dm / vm, ">=0.9x", dm / vm >= 0.9 ? "ok" : "BELOW");

  /* ---- 3. read-ahead iteration ------------------------------------------- */
  double loop[16], ahead[16], loop_cpu[16], ahead_cpu[16];
  for (int r = 0; r < repeat; r++) {
    double t0 = now(), c0 = cpu_seconds();
    for (uint64_t i = 0; i < len; i++) CHECK("get", bc_bag_get(bag, i, &buf));
    loop[r] = now() - t0;
    loop_cpu[r] = cpu_seconds() - c0;
    bc_readahead *it;
    bc_readahead_options o = BC_READAHEAD_OPTIONS_INIT; /* window 1024, 2 threads */
    c0 = cpu_seconds();
    t0 = now();
    CHECK("iterate", bc_seq_iterate(&it, set, 0, &o));
    uint64_t got = 0;
    int rc;
    while ((rc = bc_readahead_next(it, &buf, NULL)) == 1) got++;
    CHECK("next", rc);
    ahead[r] = now() - t0;
    ahead_cpu[r] = cpu_seconds() - c0;
    bc_readahead_close(it);
    if (got != len) { fprintf(stderr, "views: iterated %llu of %llu\n", (unsigned long long)got, (unsigned long long)len); return 1; }
  }
  double lm = median(loop, repeat), am = median(ahead, repeat);
  double lc = median(loop_cpu, repeat), ac = median(ahead_cpu, repeat);
  printf("%-46s %10s %12s %8s %7s %8s\n", "sequential reads (.bagz)", "median s", "M rec/s", "ratio", "target", "cpu s");
  printf("%-46s %10.3f %12.3f %8s %7s %8.3f\n", "single-thread get loop (baseline)", lm, len / lm / 1e6, "1.00x", "", lc);
  printf("%-46s %10.3f %12.3f %7.2fx %7s %8.3f %s\n", "read-ahead iterator, 2 threads, window 1024", am,
         len / am / 1e6, lm / am, ">=1.6x", ac, lm / am >= 1.6 ? "ok" : "BELOW");
  printf("(cpu s: CPU time of all threads; read-ahead costs %.2fx the loop's CPU,\n"
         " so on an idle 2-core machine its ceiling is about %.2fx)\n", ac / lc, 2.0 * lc / ac);

  for (uint64_t i = 0; i < reads; i++) bc_buf_release(&outs[i]);
  free(outs);
  free(vidx);
  free(lidx);
  bc_buf_release(&buf);
  bc_seq_unref(s3);
  bc_seq_unref(s2);
  bc_seq_unref(s1);
  bc_seq_unref(set);
  if (!dir_arg) {
    for (int s = 0; s < 4; s++) {
      snprintf(path, sizeof path, "%s/set-%05d-of-00004.bagz", dir, s);
      unlink(path);
    }
    rmdir(dir);
  }
  free(idx);
  free(table);
  (void)sink;
  return 0;
}
