/*
 * The disk limit and regeneration: a limit below the smallest workable one
 * (two shards plus the prefetched ones) is an error (not a deadlock, nor
 * thrashing); random access under a limit of a quarter of the data reads
 * every record right while the bytes in shards/ never exceed the limit;
 * regeneration continues a pass already positioned before the shard; and a
 * source that is not deterministic is caught (BC_ENONDET) without
 * publishing anything different.
 *
 * The per-process reader LRU is kept small (max_open_shards) where a test
 * needs evicted shards to be regenerated rather than served from a reader
 * this process still holds open.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/internal.h"
#include "util.h"

typedef struct fixture {
  char *dir, *root, *shards, *scratch;
  ts_shared *sh;
  bc_cache *c;
  bc_buf buf;      /* the tests' read buffer */
  uint64_t *sizes; /* shard sizes, when a test measured them */
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  if (f == NULL) return -1;
  f->dir = cu_tmp_dir();
  f->root = cu_path(f->dir, "c");
  f->shards = cu_path(f->root, "shards");
  f->scratch = cu_path(f->root, "scratch");
  cu_watchdog(60);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  bc_buf_release(&f->buf);
  free(f->sizes);
  bc_cache_close(f->c);
  ts_shared_free(f->sh);
  cu_rm_rf(f->dir);
  free(f->scratch);
  free(f->shards);
  free(f->root);
  free(f->dir);
  free(f);
  cu_watchdog(0);
  return 0;
}

static bc_cache_options limited(uint64_t records, uint64_t limit) {
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = records;
  o.prefetch_shards = -1;
  o.disk_limit = limit;
  return o;
}

static void open_with(fixture *f, const ts_config *cfg,
                      const bc_cache_options *o) {
  if (f->sh == NULL) {
    f->sh = ts_shared_new(cfg);
    assert_non_null(f->sh);
  }
  CU_OK(cu_open(&f->c, f->root, cfg, f->sh, o));
}

static bc_cache_stats stats_of(bc_cache *c) {
  bc_cache_stats st;
  CU_OK(bc_cache_stats_get(c, &st));
  return st;
}

/* The shard starts present in the shared state, as a bit set. */
static uint64_t present_set(bc_cache *c, uint64_t records) {
  bc_cache_shard list[64];
  size_t n = 0;
  CU_OK(bc_cache_shards(c, list, 64, &n));
  assert_true(n <= 64);
  uint64_t set = 0;
  for (size_t k = 0; k < n; k++) set |= (uint64_t)1 << (list[k].start / records);
  return set;
}

static void get_ok(bc_cache *c, int64_t i, bool fixed) {
  bc_buf b = BC_BUF_INIT;
  int rc = cu_get_cmp(c, i, fixed, &b);
  bc_buf_release(&b);
  if (rc != 0)
    fail_msg("get(%lld): %s (%s)", (long long)i,
             rc == 1 ? "differs from the model" : bc_error_name(rc),
             rc == 1 ? "" : bc_errmsg());
}

/* ---- a limit below the smallest workable one ------------------------------ */

/* A limit that cannot hold two shards (the one read, the one filled; no
 * prefetching here) would make every fill evict what the reader needs: it
 * is refused, at the first publish when the root is new (no shard size is
 * known at open), at open when shards are present; the error names the
 * smallest workable limit. */
static void test_limit_below_the_workable_minimum(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(50);
  cfg.fixed = true;
  uint64_t *sizes = f->sizes = cu_shard_sizes(50, 10, true);
  char want[200];
  snprintf(want, sizeof want, "is below the smallest workable limit, %llu bytes: "
           "2 shards of %llu bytes", (unsigned long long)(2 * sizes[0]),
           (unsigned long long)sizes[0]);
  uint64_t too_small[] = {sizes[0] - 1, sizes[0], 2 * sizes[0] - 1};
  for (size_t t = 0; t < 3; t++) {
    bc_cache_options o = limited(10, too_small[t]);
    open_with(f, &cfg, &o);
    bc_buf *b = &f->buf;
    /* Refused at publish, every time (the claim is released, so a second
     * try neither hangs nor succeeds), and nothing is left behind. */
    for (int k = 0; k < 2; k++) {
      CU_RC(bc_cache_get(f->c, 3, b), BC_EINVAL);
      if (strstr(bc_errmsg(), want) == NULL) fail_msg("message: %s", bc_errmsg());
    }
    assert_int_equal(cu_dir_count(f->shards), 0);
    assert_int_equal(cu_dir_count(f->scratch), 0);
    bc_cache_stats st = stats_of(f->c);
    assert_int_equal(st.shards_present, 0);
    assert_int_equal(st.bytes_on_disk, 0);
    assert_int_equal(st.fills, 0);
    bc_cache_close(f->c);
    f->c = NULL;
  }
  /* Exactly two shards fit: every read works, two shards at most. */
  bc_cache_options o = limited(10, 2 * sizes[0]);
  open_with(f, &cfg, &o);
  for (int64_t i = 0; i < 50; i += 7) {
    get_ok(f->c, i, true);
    assert_true(cu_dir_bytes(f->shards, NULL) <= 2 * sizes[0]);
  }
  assert_int_equal(stats_of(f->c).shards_present, 2);
  bc_cache_close(f->c);
  f->c = NULL;
  /* With shards present, a smaller limit is refused at open (and not
   * stored); with the default prefetching, three shards are needed. */
  o = limited(10, 2 * sizes[0] - 1);
  CU_RC(cu_open(&f->c, f->root, &cfg, f->sh, &o), BC_EINVAL);
  f->c = NULL;
  if (strstr(bc_errmsg(), want) == NULL || strstr(bc_errmsg(), "largest shard present") == NULL)
    fail_msg("message: %s", bc_errmsg());
  o.prefetch_shards = 0;
  o.disk_limit = 3 * sizes[0] - 1;
  CU_RC(cu_open(&f->c, f->root, &cfg, f->sh, &o), BC_EINVAL);
  f->c = NULL;
  if (strstr(bc_errmsg(), "3 shards of") == NULL || strstr(bc_errmsg(), "1 prefetched") == NULL)
    fail_msg("message: %s", bc_errmsg());
  o.disk_limit = 3 * sizes[0];
  open_with(f, &cfg, &o);
  assert_int_equal(stats_of(f->c).disk_limit, 3 * sizes[0]);
}

/* ---- random access under a quarter of the data ---------------------------- */

static void test_limit_random_access(void **state) {
  fixture *f = *state;
  const uint64_t n = 400, records = 10, shards = 40;
  uint64_t *sizes = f->sizes = cu_shard_sizes(n, records, false);
  uint64_t total = 0, largest = 0;
  for (uint64_t k = 0; k < shards; k++) {
    total += sizes[k];
    if (sizes[k] > largest) largest = sizes[k];
  }
  uint64_t limit = total / 4;
  assert_true(limit >= 2 * largest);
  ts_config cfg = ts_config_default(n);
  bc_cache_options o = limited(records, limit);
  o.max_open_shards = 2;
  open_with(f, &cfg, &o);
  uint64_t seed = 42;
  int reads = CU_SANITIZED ? 300 : 800;
  bc_buf *b = &f->buf;
  for (int k = 0; k < reads; k++) {
    int64_t i = (int64_t)(cu_rand(&seed) % n);
    int rc = cu_get_cmp(f->c, i, false, b);
    if (rc != 0)
      fail_msg("read %d, record %lld: %s (%s)", k, (long long)i,
               rc == 1 ? "differs" : bc_error_name(rc), rc == 1 ? "" : bc_errmsg());
    bc_cache_stats st = stats_of(f->c);
    size_t files = 0;
    uint64_t on_disk = cu_dir_bytes(f->shards, &files);
    if (st.bytes_on_disk > limit || on_disk > limit)
      fail_msg("read %d: %llu bytes in the state, %llu in shards/, limit %llu",
               k, (unsigned long long)st.bytes_on_disk,
               (unsigned long long)on_disk, (unsigned long long)limit);
    /* One process: the state's account is the directory's, exactly. */
    assert_int_equal(st.bytes_on_disk, on_disk);
    assert_int_equal(st.shards_present, files);
  }
  bc_cache_stats st = stats_of(f->c);
  assert_true(st.evictions > 0);
  assert_true(st.regenerations > 0);
  /* Every publish adds a shard (shards kept on a pass's way too) and
   * every eviction removes one. */
  uint64_t published = st.fills + st.regenerations + st.shards_kept;
  assert_int_equal(published - st.evictions, st.shards_present);
  assert_true(st.fills <= shards);
  /* Each publish wrote its shard's records once through next() (and a
   * shard crossed with room only for itself, not the next one, is not
   * written: nothing else is). */
  assert_int_equal(atomic_load(&f->sh->produced), published * records);
  assert_int_equal(st.records_written, published * records);
  cu_check_shards(f->root, false, false);
  uint64_t bad = 0;
  CU_OK(bc_cache_verify(f->c, &bad));
  /* Sequential reading afterwards still matches, and stays under. */
  cu_check_all(f->c, n, false);
  assert_true(cu_dir_bytes(f->shards, NULL) <= limit);
}

/* ---- regeneration continues a positioned pass ------------------------------- */

static void test_regeneration_reuses_pass(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(100);
  cfg.fixed = true;
  uint64_t *sizes = f->sizes = cu_shard_sizes(100, 10, true);
  bc_cache_options o = limited(10, 3 * sizes[0] + sizes[0] / 2); /* 3 shards */
  o.max_open_shards = 1;
  open_with(f, &cfg, &o);
  for (int64_t i = 0; i < 60; i += 10) get_ok(f->c, i, true);
  /* Shards 0..5 filled by one pass (now at 60); 0, 1 and 2 were evicted. */
  assert_int_equal(present_set(f->c, 10), 0x38);
  bc_cache_stats st = stats_of(f->c);
  assert_int_equal(st.fills, 6);
  assert_int_equal(st.evictions, 3);
  assert_int_equal(st.passes_opened, 1);
  assert_int_equal(st.records_skipped, 0);

  /* Shard 1: the pass is past it, so a new pass skips 0..9; it evicts the
   * least recently used shard, 3. */
  get_ok(f->c, 15, true);
  st = stats_of(f->c);
  assert_int_equal(st.regenerations, 1);
  assert_int_equal(st.passes_opened, 2);
  assert_int_equal(st.records_skipped, 10);
  assert_int_equal(present_set(f->c, 10), 0x32);
  /* Shard 2: that pass now sits at 20, right at the shard: nothing is
   * skipped (a restart would skip 20) and no pass is opened. */
  get_ok(f->c, 27, true);
  st = stats_of(f->c);
  assert_int_equal(st.regenerations, 2);
  assert_int_equal(st.passes_opened, 2);
  assert_int_equal(st.records_skipped, 10);
  assert_int_equal(st.evictions, 5);
  assert_int_equal(present_set(f->c, 10), 0x26);
  assert_int_equal(atomic_load(&f->sh->opens), 2);
  /* Records 10..29 were produced twice, the rest of 0..59 once. */
  for (uint64_t i = 0; i < 60; i++)
    assert_int_equal(atomic_load(&f->sh->per_record[i]),
                     i >= 10 && i < 30 ? 2 : 1);
  cu_check_shards(f->root, true, false);
}

/* ---- determinism ------------------------------------------------------------- */

static void test_nondeterministic_content(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(100);
  cfg.fixed = true;
  cfg.nondet_pass = 1; /* the first pass is the model; later ones differ */
  uint64_t *sizes = f->sizes = cu_shard_sizes(100, 10, true);
  bc_cache_options o = limited(10, 3 * sizes[0] + sizes[0] / 2);
  o.max_open_shards = 1;
  open_with(f, &cfg, &o);
  for (int64_t i = 0; i < 60; i += 10) get_ok(f->c, i, true);
  uint64_t before = present_set(f->c, 10);
  assert_int_equal(before, 0x38);
  bc_cache_shard old[8];
  size_t n_old = 0;
  CU_OK(bc_cache_shards(f->c, old, 8, &n_old));

  /* Shard 0 again: a second pass, whose bytes differ. */
  bc_buf *b = &f->buf;
  for (int k = 0; k < 2; k++) {
    CU_RC(bc_cache_get(f->c, 5, b), BC_ENONDET);
    const char *msg = bc_errmsg();
    if (strstr(msg, "shard 0") == NULL || strstr(msg, "0..10") == NULL)
      fail_msg("the message does not name shard 0 (records 0..10): %s", msg);
  }
  /* Nothing different was published and nothing was evicted for it: the
   * same shards, same sizes, same (model) bytes. */
  bc_cache_stats st = stats_of(f->c);
  assert_int_equal(st.regenerations, 0);
  assert_int_equal(st.evictions, 3);
  assert_int_equal(present_set(f->c, 10), before);
  bc_cache_shard now[8];
  size_t n_now = 0;
  CU_OK(bc_cache_shards(f->c, now, 8, &n_now));
  assert_int_equal(n_now, n_old);
  for (size_t k = 0; k < n_now; k++) {
    assert_int_equal(now[k].start, old[k].start);
    assert_int_equal(now[k].end, old[k].end);
    assert_int_equal(now[k].bytes, old[k].bytes);
  }
  assert_int_equal(cu_dir_count(f->scratch), 0);
  cu_check_shards(f->root, true, false);
  for (int64_t i = 30; i < 60; i++) get_ok(f->c, i, true);
  uint64_t bad = 0;
  CU_OK(bc_cache_verify(f->c, &bad));
}

static void test_nondeterministic_length(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(100);
  cfg.fixed = true;
  cfg.nondet_pass = 1;
  cfg.nondet_n = 55; /* later passes end early (same bytes up to there) */
  uint64_t *sizes = f->sizes = cu_shard_sizes(100, 10, true);
  bc_cache_options o = limited(10, 3 * sizes[0] + sizes[0] / 2);
  o.max_open_shards = 1;
  open_with(f, &cfg, &o);
  CU_OK(bc_cache_fill_all(f->c));
  assert_int_equal(present_set(f->c, 10), 0x380);
  bc_buf *b = &f->buf;
  /* Shard 6: the new pass ends at 55, before the shard, though 100 records
   * were seen: not an end of the source, a nondeterministic one. */
  CU_RC(bc_cache_get(f->c, 65, b), BC_ENONDET);
  /* Shard 5: the new pass writes 5 of its 10 records, then ends. */
  CU_RC(bc_cache_get(f->c, 52, b), BC_ENONDET);
  bc_cache_stats st = stats_of(f->c);
  assert_true(st.length_final);
  assert_int_equal(st.length, 100);
  assert_int_equal(present_set(f->c, 10), 0x380);
  assert_int_equal(cu_dir_count(f->scratch), 0);
  cu_check_shards(f->root, true, false);
  get_ok(f->c, 99, true);
}

/* Issue 26: a root filled from one source, then opened with another.
 * Shards 0 and 9 are stored (the pass to shard 9 crossed 1..8 without
 * keeping them); a new process's source has other bytes (variant
 * "bytes") or ends after 5 records ("length").  Reading record 25 (shard
 * 2, never filled) moves a pass across stored shard 0: its records are
 * compared with shard 0's recorded checksum, and the difference is
 * BC_ENONDET, saying the source changed and how to start over, with
 * nothing published.  Before, shard 2 was filled from the new source
 * (mixing two datasets) and the short one was blamed on the iterator. */
static void crossed_shard_checked(fixture *f, uint64_t ends_after) {
  ts_config cfg = ts_config_default(100);
  cfg.fixed = true;
  /* A limit of 3.5 shards keeps shard 1 on the way to 9 (room for it and
   * one more), not 2..8. */
  uint64_t *sizes = f->sizes = cu_shard_sizes(100, 10, true);
  bc_cache_options o = limited(10, 3 * sizes[0] + sizes[0] / 2);
  open_with(f, &cfg, &o);
  get_ok(f->c, 5, true);
  get_ok(f->c, 95, true);
  assert_int_equal(present_set(f->c, 10), 0x203);
  assert_int_equal(stats_of(f->c).records_skipped, 70);
  assert_int_equal(stats_of(f->c).shards_kept, 1);
  bc_cache_close(f->c);
  f->c = NULL;
  ts_shared_free(f->sh);
  f->sh = NULL;
  cfg.nondet_pass = 0; /* every pass of the new source differs */
  cfg.nondet_n = ends_after;
  open_with(f, &cfg, &o);
  bc_buf *b = &f->buf;
  CU_RC(bc_cache_get(f->c, 25, b), BC_ENONDET);
  const char *msg = bc_errmsg();
  const char *want = ends_after ? "the source now ends after 5 records, but 100 are known"
                                : "records 0..10 (shard 0) came out different from the ones stored";
  if (strstr(msg, want) == NULL ||
      strstr(msg, "the source changed since the cache was filled") == NULL ||
      strstr(msg, "bagcache cache clear ") == NULL)
    fail_msg("message: %s", msg);
  /* The pass read shard 0's records (next(), not skip()) and stopped. */
  bc_cache_stats st = stats_of(f->c);
  assert_int_equal(st.records_skipped, ends_after ? 5 : 10);
  assert_int_equal(st.records_written, 0);
  assert_int_equal(st.fills + st.regenerations + st.shards_kept, 0);
  assert_int_equal(present_set(f->c, 10), 0x203);
  assert_int_equal(st.length, 100);
  assert_int_equal(cu_dir_count(f->scratch), 0);
  /* Again: the same error (a check that failed is not remembered as done). */
  CU_RC(bc_cache_get(f->c, 25, b), BC_ENONDET);
  /* Stored records are still served as they are. */
  get_ok(f->c, 5, true);
}

static void test_crossed_shard_checked(void **state) {
  crossed_shard_checked(*state, 0);
}
static void test_crossed_shard_checked_length(void **state) {
  crossed_shard_checked(*state, 5);
}

/* A crossed shard is checked once per cache object: one this object
 * filled, or matched once, is skipped (skip()) by later passes.  Under a
 * limit of 3.5 shards: no room to keep shard 2 on the way (it would leave
 * none for the next miss). */
static void test_crossed_shard_checked_once(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(100);
  cfg.fixed = true;
  cfg.with_skip = true;
  uint64_t *sizes = f->sizes = cu_shard_sizes(100, 10, true);
  bc_cache_options o = limited(10, 3 * sizes[0] + sizes[0] / 2);
  o.max_passes = 1;
  open_with(f, &cfg, &o);
  get_ok(f->c, 5, true);
  get_ok(f->c, 15, true); /* shards 0 and 1, in order */
  bc_cache_close(f->c);
  f->c = NULL;
  open_with(f, &cfg, &o); /* a new cache object: nothing checked yet */
  uint64_t produced = atomic_load(&f->sh->produced);
  uint64_t skipped = atomic_load(&f->sh->skipped);
  /* A new pass crosses 0 and 1 (read and matched), skips 2, fills 3. */
  get_ok(f->c, 35, true);
  assert_int_equal(atomic_load(&f->sh->produced) - produced, 30);
  assert_int_equal(atomic_load(&f->sh->skipped) - skipped, 10);
  assert_int_equal(present_set(f->c, 10), 0xb);
  /* Shard 2: behind the one pass, which restarts from 0: 0 and 1 are
   * checked now, so they are skipped. */
  get_ok(f->c, 25, true);
  assert_int_equal(atomic_load(&f->sh->produced) - produced, 40);
  assert_int_equal(atomic_load(&f->sh->skipped) - skipped, 30);
  assert_int_equal(stats_of(f->c).shards_kept, 0);
}

/* The first fill of a shard must not shorten a length already known final
 * from later shards: a pass that ends inside shard 5 although shard 9 (up
 * to 95) was published is a nondeterministic source, not an end. */
static void test_nondeterministic_length_first_fill(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(95);
  cfg.fixed = true;
  cfg.nondet_pass = 1;
  cfg.nondet_n = 55;
  /* A limit of 2.5 shards: pass 0 keeps shard 0 on its way (room for it
   * and one more), not 1..8. */
  uint64_t *sizes = f->sizes = cu_shard_sizes(100, 10, true);
  bc_cache_options o = limited(10, 2 * sizes[0] + sizes[0] / 2);
  open_with(f, &cfg, &o);
  get_ok(f->c, 92, true); /* pass 0 fills shard 9 and finds the end: 95 */
  bc_cache_stats st = stats_of(f->c);
  assert_true(st.length_final);
  assert_int_equal(st.length, 95);
  bc_buf *b = &f->buf;
  /* Shard 5 was never filled; pass 1 ends after record 54. */
  CU_RC(bc_cache_get(f->c, 52, b), BC_ENONDET);
  st = stats_of(f->c);
  assert_true(st.length_final);
  assert_int_equal(st.length, 95);
  assert_int_equal(present_set(f->c, 10), 0x201);
  get_ok(f->c, 94, true);
  uint64_t len = 0;
  CU_OK(bc_cache_len(f->c, &len));
  assert_int_equal(len, 95);
}

/* Evicting a shard this process has open drops its reader: the unlinked
 * file is neither mapped nor open afterwards (its disk space is freed), and
 * the next read of it regenerates it instead of serving the old mapping. */
static void test_evicted_readers_released(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(100);
  cfg.fixed = true;
  uint64_t *sizes = f->sizes = cu_shard_sizes(100, 10, true);
  bc_cache_options o = limited(10, 3 * sizes[0] + sizes[0] / 2);
  /* the default max_open_shards (128) would keep every reader */
  open_with(f, &cfg, &o);
  for (int64_t i = 0; i < 100; i += 10) {
    get_ok(f->c, i, true);
    size_t held = cu_deleted_held(f->shards);
    if (held != 0)
      fail_msg("after reading %lld: %zu mappings or descriptors of deleted "
               "shard files", (long long)i, held);
  }
  bc_cache_stats st = stats_of(f->c);
  assert_int_equal(st.evictions, 7);
  assert_int_equal(st.regenerations, 0);
  get_ok(f->c, 3, true);
  st = stats_of(f->c);
  assert_int_equal(st.regenerations, 1);
  assert_int_equal(cu_deleted_held(f->shards), 0);
}

/* A limit stored by one open holds for the next opens that pass none, and
 * BC_CACHE_NO_LIMIT removes it: then everything is kept. */
static void test_limit_removed(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(100);
  cfg.fixed = true;
  uint64_t *sizes = f->sizes = cu_shard_sizes(100, 10, true);
  uint64_t limit = 3 * sizes[0] + sizes[0] / 2;
  bc_cache_options o = limited(10, limit);
  open_with(f, &cfg, &o);
  bc_cache_close(f->c);
  f->c = NULL;
  o.disk_limit = 0; /* the stored limit applies */
  open_with(f, &cfg, &o);
  assert_int_equal(stats_of(f->c).disk_limit, limit);
  for (int64_t i = 0; i < 100; i += 10) get_ok(f->c, i, true);
  assert_int_equal(stats_of(f->c).shards_present, 3);
  bc_cache_close(f->c);
  f->c = NULL;
  o.disk_limit = BC_CACHE_NO_LIMIT;
  open_with(f, &cfg, &o);
  bc_cache_close(f->c);
  f->c = NULL;
  o.disk_limit = 0; /* nothing stored any more */
  open_with(f, &cfg, &o);
  assert_int_equal(stats_of(f->c).disk_limit, 0);
  for (int64_t i = 0; i < 100; i += 10) get_ok(f->c, i, true);
  bc_cache_stats st = stats_of(f->c);
  assert_int_equal(st.shards_present, 10);
  assert_int_equal(st.evictions, 0);
  assert_int_equal(st.bytes_on_disk, cu_dir_bytes(f->shards, NULL));
}

/* ---- the access clock of shard opens ---------------------------------------- */

/* The id of the last transaction committed to the root's shared state. */
static size_t last_commit(const char *root) {
  char *locks = cu_path(root, "locks");
  bc__env *env = NULL;
  bool fresh = false;
  CU_OK(bc__env_acquire(&env, locks, 0644, &fresh));
  MDB_txn *t = NULL;
  CU_OK(bc__txn_begin(env, false, &t));
  size_t id = mdb_txn_id(t);
  mdb_txn_abort(t);
  bc__env_release(env);
  free(locks);
  return id;
}

/* Cold reads (one open shard allowed, every read in another shard) commit
 * nothing per read: an open's access-clock bump waits in a batch (one
 * transaction, so one disk sync, a second at most).  The bumps still land,
 * in the order of the opens, by the time the cache closes. */
static void test_cold_opens_commit_in_batches(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(40);
  cfg.fixed = true;
  bc_cache_options o = limited(10, 0);
  o.max_open_shards = 1;
  open_with(f, &cfg, &o);
  for (int64_t i = 0; i < 40; i += 10) get_ok(f->c, i, true); /* fills 0..3 */
  bc_cache_close(f->c);
  f->c = NULL;
  open_with(f, &cfg, &o);
  size_t before = last_commit(f->root);
  /* Shards 0, 3, 2, 1, 0, 3, 2, 1, ... : every read opens its shard. */
  for (int k = 0; k < 40; k++) get_ok(f->c, (int64_t)((4 - k % 4) % 4 * 10 + k % 10), true);
  bc_cache_stats st = stats_of(f->c);
  assert_int_equal(st.shard_opens, 40);
  assert_int_equal(st.hits, 0);
  size_t commits = last_commit(f->root) - before;
  /* One per read before batching; one a second now (a slow machine may
   * spread the reads over a few seconds). */
  if (commits > 4) fail_msg("40 cold reads committed %zu transactions", commits);
  bc_cache_close(f->c);
  f->c = NULL;
  open_with(f, &cfg, &o);
  bc_cache_shard list[4];
  size_t n = 0;
  CU_OK(bc_cache_shards(f->c, list, 4, &n));
  assert_int_equal(n, 4);
  /* Filled 0, 1, 2, 3; opened last in the order 0, 3, 2, 1. */
  assert_true(list[0].last_access < list[3].last_access);
  assert_true(list[3].last_access < list[2].last_access);
  assert_true(list[2].last_access < list[1].last_access);
}

/* A shard this process opened counts as recently used for its own next
 * eviction at once, even though the open's bump is not committed yet.  The
 * source seeks, so every shard costs the same to rebuild and eviction is
 * plain LRU (cache.md, "Eviction"). */
static void test_open_protects_from_own_eviction(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(100);
  cfg.fixed = true;
  cfg.seekable = true;
  uint64_t *sizes = f->sizes = cu_shard_sizes(100, 10, true);
  bc_cache_options o = limited(10, 3 * sizes[0] + sizes[0] / 2); /* 3 shards */
  o.max_open_shards = 1;
  open_with(f, &cfg, &o);
  for (int64_t i = 0; i < 30; i += 10) get_ok(f->c, i, true); /* 0, 1, 2 */
  get_ok(f->c, 5, true); /* opens shard 0 again: now the most recent */
  get_ok(f->c, 35, true); /* fills 3, evicting the least recent: 1 */
  assert_int_equal(present_set(f->c, 10), 0xd);
  assert_int_equal(stats_of(f->c).evictions, 1);
}

/* ---- one publish evicting many shards -------------------------------------- */

/* A source of SMALL_SHARDS records of 16 bytes, then one record of
 * big_bytes (set by the test once the small shards' sizes are known), then
 * the end.  Shards of one record. */
#define SMALL_SHARDS 100
static size_t big_bytes;

static int many_open(void *payload, void **handle) {
  (void)payload;
  uint64_t *pos = calloc(1, sizeof *pos);
  if (pos == NULL) return BC_ENOMEM;
  *handle = pos;
  return 0;
}

static int many_next(void *payload, void *handle, bc_buf *out) {
  (void)payload;
  uint64_t *pos = handle;
  if (*pos > SMALL_SHARDS) return 0;
  size_t n = *pos < SMALL_SHARDS ? 16 : big_bytes;
  int rc = bc__buf_reserve(out, n);
  if (rc != 0) return rc;
  memset(out->data, 'a' + (int)(*pos % 26), n);
  out->size = n;
  ++*pos;
  return 1;
}

static void many_close(void *payload, void *handle) {
  (void)payload;
  free(handle);
}

/* One publish that evicts more than 32 shards (issue 15: the victims were
 * kept in an array of 32, and readers of the others stayed open, their
 * unlinked files mapped): every victim's reader in this process is dropped
 * and its file unmapped at once, before any other open. */
static void test_publish_evicts_many(void **state) {
  fixture *f = *state;
  bc_source src = {.version = BC_SOURCE_VERSION, .open = many_open,
                   .next = many_next, .close = many_close};
  bc_cache_options o = limited(1, 0);
  o.max_open_shards = 1000;
  CU_OK(bc_cache_open(&f->c, f->root, &src, &o));
  for (int64_t i = 0; i < SMALL_SHARDS; i++) CU_OK(bc_cache_get(f->c, i, &f->buf));
  bc_cache_stats st = stats_of(f->c);
  assert_int_equal(st.open_shards, SMALL_SHARDS);
  uint64_t limit = st.bytes_on_disk, small = limit / SMALL_SHARDS;
  assert_int_equal(limit % SMALL_SHARDS, 0);
  /* Half the limit less a small shard's size: the big shard (its file a
   * little larger than its record) stays within the smallest workable
   * limit, and its publish must evict at least 40 small shards. */
  big_bytes = (size_t)(limit / 2 - small);
  bc_cache *other = NULL; /* stores the limit for every opener */
  bc_cache_options lo = limited(1, limit);
  CU_OK(bc_cache_open(&other, f->root, NULL, &lo));
  bc_cache_close(other);
  CU_OK(bc_cache_fill_all(f->c)); /* publishes the big shard: no open */
  st = stats_of(f->c);
  assert_true(st.length_final);
  assert_int_equal(st.length, SMALL_SHARDS + 1);
  assert_true(st.evictions >= 40);
  assert_int_equal(st.shards_present, SMALL_SHARDS + 1 - st.evictions);
  assert_true(st.bytes_on_disk <= limit);
  /* Every victim's reader is gone, and no unlinked file stays mapped. */
  assert_int_equal(st.open_shards, SMALL_SHARDS - st.evictions);
  assert_int_equal(cu_deleted_held(f->shards), 0);
}

/* ---- room held by another process's fills ---------------------------------- */

/* Another process's claim holds the whole limit in its reservation (as
 * publish-behind fills of other processes do, all at once, under load):
 * a read that fills a shard finds no room and nothing to evict.  It used
 * to wait 30 s and fail with BC_ENOSPC under a limit accepted at open.
 * Now it waits BC__ROOM_WAIT_S for the reservation to go, then is served
 * from its scratch file, the shard not kept (bypassed); once the other
 * process lets go, shards are published again. */
static void test_room_held_by_another_process(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(40);
  cfg.fixed = true;
  uint64_t *sizes = f->sizes = cu_shard_sizes(40, 10, true);
  uint64_t limit = 2 * sizes[0] + sizes[0] / 2; /* accepted: 2 shards fit */
  bc_cache_options o = limited(10, limit);
  int held[2], go[2];
  assert_int_equal(pipe(held), 0);
  assert_int_equal(pipe(go), 0);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) { /* holds a reservation of the whole limit on shard 3 */
    bc_cache *c = NULL;
    int ok = cu_open(&c, f->root, NULL, NULL, &o) == 0;
    bc__publish_req q = {.shard = 3, .token = 77, .size = limit, .records = 10,
                         .default_limit = limit, .seekable = true};
    bc__shard_rec rec;
    bool claimed = false;
    uint64_t room = 0;
    bc__victims v = {0};
    ok = ok && bc__store_claim_room(&c->store, &q, &rec, &claimed, &room, &v) == 0 &&
         claimed && room == limit;
    bc__victims_free(&v);
    char b = ok ? 'y' : 'n';
    ok = ok && write(held[1], &b, 1) == 1 && read(go[0], &b, 1) == 1;
    if (c != NULL) bc__store_release(&c->store, 3, 77);
    bc_cache_close(c);
    _exit(ok ? 0 : 1);
  }
  char b = 0;
  assert_int_equal(read(held[0], &b, 1), 1);
  assert_int_equal(b, 'y');
  open_with(f, &cfg, &o);
  /* Shard 0 (a synchronous publish: the process's first fill) and shard 1
   * (its claim finds no room to reserve): both served, neither kept, so
   * that reading shard 0 again fills it again (its reader, on a file
   * that is gone, is not kept either: its space goes with the read). */
  get_ok(f->c, 3, true);
  assert_int_equal(atomic_load(&f->c->stats.bypassed), 1);
  get_ok(f->c, 15, true);
  assert_int_equal(atomic_load(&f->c->stats.bypassed), 2);
  get_ok(f->c, 0, true);
  assert_int_equal(atomic_load(&f->c->stats.bypassed), 3);
  bc_cache_stats st = stats_of(f->c);
  assert_int_equal(st.shards_present, 0);
  assert_int_equal(st.fills, 0);
  assert_int_equal(cu_dir_count(f->shards), 0);
  assert_int_equal(cu_dir_count(f->scratch), 0);
  /* The other process lets go: the next fills are published. */
  b = 'g';
  assert_int_equal(write(go[1], &b, 1), 1);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  get_ok(f->c, 25, true);
  get_ok(f->c, 35, true);
  st = stats_of(f->c);
  assert_int_equal(st.fills, 2);
  assert_int_equal(st.shards_present, 2);
  assert_true(st.bytes_on_disk <= limit);
  assert_int_equal(atomic_load(&f->c->stats.bypassed), 3);
  cu_check_all(f->c, 40, true);
  for (int i = 0; i < 2; i++) {
    close(held[i]);
    close(go[i]);
  }
}

int main(void) {
  bc_set_notice_handler(NULL, NULL);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_limit_below_the_workable_minimum, setup, teardown),
      cmocka_unit_test_setup_teardown(test_limit_random_access, setup, teardown),
      cmocka_unit_test_setup_teardown(test_regeneration_reuses_pass, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_nondeterministic_content, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_nondeterministic_length, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_crossed_shard_checked, setup, teardown),
      cmocka_unit_test_setup_teardown(test_crossed_shard_checked_length, setup, teardown),
      cmocka_unit_test_setup_teardown(test_crossed_shard_checked_once, setup, teardown),
      cmocka_unit_test_setup_teardown(test_nondeterministic_length_first_fill,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_evicted_readers_released, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_limit_removed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_cold_opens_commit_in_batches, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_open_protects_from_own_eviction,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_publish_evicts_many, setup, teardown),
      cmocka_unit_test_setup_teardown(test_room_held_by_another_process, setup,
                                      teardown),
  };
  return cmocka_run_group_tests_name("cache disk limit", tests, NULL, NULL);
}
