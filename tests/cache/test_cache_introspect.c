/*
 * The cache engine's introspection and whole-cache operations against the
 * generator's model: exact statistics for scripted access patterns (with
 * and without a skip callback, with a one-reader LRU, with two passes),
 * the shard listing and the shared access clock, pass positions,
 * prefetching (default policy, a custom policy, preload_all), a view
 * outliving bc_cache_close, export to a Bagz set, and clear.
 *
 * Every test runs in its own temporary directory under a watchdog
 * (fixture.h).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache/internal.h"
#include "fixture.h"

/* ---- the root's counters ----------------------------------------------------- */

typedef struct root_counts {
  uint64_t fills, regenerations, evictions, records_generated, bytes_written, kept;
} root_counts;

static void check_root(bc_cache *c, root_counts e, const char *when) {
  bc_cache_stats st = fx_stats(c);
  if (st.root.fills != e.fills || st.root.regenerations != e.regenerations ||
      st.root.evictions != e.evictions ||
      st.root.records_generated != e.records_generated ||
      st.root.bytes_written != e.bytes_written || st.root.shards_kept != e.kept)
    fail_msg("%s: root fills %llu regen %llu evict %llu records %llu bytes %llu kept %llu; "
             "expected %llu %llu %llu %llu %llu %llu", when,
             (unsigned long long)st.root.fills, (unsigned long long)st.root.regenerations,
             (unsigned long long)st.root.evictions,
             (unsigned long long)st.root.records_generated,
             (unsigned long long)st.root.bytes_written,
             (unsigned long long)st.root.shards_kept, (unsigned long long)e.fills,
             (unsigned long long)e.regenerations, (unsigned long long)e.evictions,
             (unsigned long long)e.records_generated, (unsigned long long)e.bytes_written,
             (unsigned long long)e.kept);
}

/* Deletes the root's counters from its shared state, as a root last
 * written by a version before them has none. */
static void drop_root_counters(const char *root) {
  char *locks = cu_path(root, "locks");
  bc__env *env = NULL;
  bool fresh = false;
  CU_OK(bc__env_acquire(&env, locks, 0644, &fresh));
  MDB_txn *t = NULL;
  CU_OK(bc__txn_begin(env, true, &t));
  static const char *const names[] = {"n_fills", "n_regenerations", "n_evictions",
                                      "n_records_generated", "n_bytes_written",
                                      "n_shards_kept"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    MDB_val k = {strlen(names[i]), (void *)names[i]};
    int rc = mdb_del(t, bc__dbi_meta(env), &k, NULL);
    assert_true(rc == 0 || rc == MDB_NOTFOUND);
  }
  assert_int_equal(mdb_txn_commit(t), 0);
  bc__env_release(env);
  free(locks);
}

static void test_root_counters(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(100);
  bc_cache_options o = fx_quiet_options(10);
  fx_open(f, &cfg, &o);
  check_root(f->c, (root_counts){0}, "fresh");
  fx_get_ok(f->c, 0);  /* fill shard 0: 10 records */
  fx_get_ok(f->c, 35); /* keep shards 1 and 2 on the way, fill shard 3 */
  uint64_t b1 = fx_stats(f->c).bytes_on_disk;
  check_root(f->c, (root_counts){2, 0, 0, 40, b1, 2}, "two fills, two kept");
  /* A second cache object (another process would do the same) counts into
   * the same root; its own counters start at 0. */
  fx_reopen(f, &cfg, &o);
  assert_int_equal(fx_stats(f->c).fills, 0);
  check_root(f->c, (root_counts){2, 0, 0, 40, b1, 2}, "reopened");
  /* A new pass: reads shards 0..3 to check them against the source (a new
   * cache object has checked none), then fills shard 4. */
  fx_get_ok(f->c, 45);
  uint64_t b2 = fx_stats(f->c).bytes_on_disk;
  check_root(f->c, (root_counts){3, 0, 0, 40 + 40 + 10, b2, 2}, "after the reopen");

  /* A root without counters (written before them) starts them at 0. */
  bc_cache_close(f->c);
  f->c = NULL;
  drop_root_counters(f->root);
  fx_open(f, &cfg, &o);
  check_root(f->c, (root_counts){0}, "old root");
  fx_get_ok(f->c, 55); /* a new cache's pass: checks 0..49, fills shard 5 */
  uint64_t b3 = fx_stats(f->c).bytes_on_disk;
  check_root(f->c, (root_counts){1, 0, 0, 60, b3 - b2, 0}, "old root, one fill");

  /* Under a limit of two shards: evictions and regenerations are counted. */
  bc_cache_close(f->c);
  f->c = NULL;
  drop_root_counters(f->root);
  o.disk_limit = 2 * (b1 / 2) + (b1 / 2) / 2; /* 2.5 shards of shard 0's size */
  fx_open(f, &cfg, &o);
  fx_get_ok(f->c, 5); /* present */
  fx_get_ok(f->c, 75); /* fill shard 7 (0..5 present): evicts down to the limit */
  bc_cache_stats st = fx_stats(f->c);
  assert_true(st.root.evictions >= 2);
  assert_int_equal(st.root.evictions, st.evictions);
  assert_int_equal(st.root.fills, 1);
  fx_get_ok(f->c, 35); /* regenerated if it went */
  st = fx_stats(f->c);
  assert_int_equal(st.root.regenerations, st.regenerations);
  assert_int_equal(st.root.evictions, st.evictions);
  assert_int_equal(st.root.records_generated, st.records_written + st.records_skipped);
}

/* ---- statistics for a scripted access pattern --------------------------------- */

typedef struct expect {
  uint64_t fills, hits, shard_opens, passes_opened, records_skipped;
} expect;

static void check_stats(bc_cache *c, expect e, const char *when) {
  bc_cache_stats st = fx_stats(c);
  if (st.fills != e.fills || st.hits != e.hits ||
      st.shard_opens != e.shard_opens || st.passes_opened != e.passes_opened ||
      st.records_skipped != e.records_skipped || st.regenerations != 0 ||
      st.evictions != 0 || st.waits != 0)
    fail_msg("%s: fills %llu hits %llu opens %llu passes %llu skipped %llu "
             "regen %llu evict %llu waits %llu; expected %llu %llu %llu %llu "
             "%llu 0 0 0", when, (unsigned long long)st.fills,
             (unsigned long long)st.hits, (unsigned long long)st.shard_opens,
             (unsigned long long)st.passes_opened,
             (unsigned long long)st.records_skipped,
             (unsigned long long)st.regenerations,
             (unsigned long long)st.evictions, (unsigned long long)st.waits,
             (unsigned long long)e.fills, (unsigned long long)e.hits,
             (unsigned long long)e.shard_opens,
             (unsigned long long)e.passes_opened,
             (unsigned long long)e.records_skipped);
}

static void scripted(fixture *f, bool with_skip) {
  ts_config cfg = ts_config_default(100);
  cfg.with_skip = with_skip;
  bc_cache_options o = fx_quiet_options(10);
  fx_open(f, &cfg, &o);
  /* Passes are parked where they stop (up to max_passes; one runs at a time,
   * the source is not thread-safe); with no disk limit the shards a pass
   * crosses on its way are kept.  Each step: what it costs. */
  fx_get_ok(f->c, 0);  /* open a pass, fill shard 0; the pass sits at 10 */
  check_stats(f->c, (expect){1, 0, 1, 1, 0}, "get 0");
  fx_get_ok(f->c, 5);  /* a hit */
  fx_get_ok(f->c, 35); /* keep shards 1 and 2 on the way, fill shard 3;
                          the pass sits at 40 */
  check_stats(f->c, (expect){2, 1, 2, 1, 0}, "get 35");
  assert_int_equal(fx_stats(f->c).shards_kept, 2);
  fx_get_ok(f->c, 15); /* kept: opened, nothing filled, no pass */
  check_stats(f->c, (expect){2, 1, 3, 1, 0}, "get 15");
  fx_get_ok(f->c, 25);
  fx_get_ok(f->c, 36);
  fx_get_ok(f->c, 0);
  check_stats(f->c, (expect){2, 3, 4, 1, 0}, "get 25, 36, 0");
  bc_cache_stats st = fx_stats(f->c);
  assert_int_equal(st.shards_present, 4);
  assert_int_equal(st.shards_kept, 2);
  assert_int_equal(st.records_written, 40);
  assert_int_equal(st.length, 40);
  assert_false(st.length_final);
  char *sd = fx_shards_dir(f);
  assert_int_equal(st.bytes_on_disk, cu_dir_bytes(sd, NULL));
  free(sd);

  /* The source saw the same: one pass, not closed, 40 records produced,
   * none skipped. */
  assert_int_equal(atomic_load(&f->sh->opens), 1);
  assert_int_equal(atomic_load(&f->sh->closes), 0);
  assert_int_equal(atomic_load(&f->sh->skip_calls), 0);
  assert_int_equal(atomic_load(&f->sh->produced), 40);
  assert_int_equal(atomic_load(&f->sh->overlaps), 0);

  /* The pass is parked at 40, after shard 3. */
  uint64_t pos[4];
  size_t n = 0;
  CU_OK(bc_cache_worker_positions(f->c, pos, 4, &n));
  assert_int_equal(n, 1);
  assert_int_equal(pos[0], 40);

  /* The listing: ascending, exact ranges, paths and sizes; the shared
   * clock orders them by last publish or open (0, 3, 1, 2: the kept
   * shards were published before 3, and opened after it). */
  bc_cache_shard list[8];
  CU_OK(bc_cache_shards(f->c, NULL, 0, &n));
  assert_int_equal(n, 4);
  CU_OK(bc_cache_shards(f->c, list, 2, &n));
  assert_int_equal(n, 4);
  CU_OK(bc_cache_shards(f->c, list, 8, &n));
  assert_int_equal(n, 4);
  for (size_t k = 0; k < 4; k++) {
    assert_int_equal(list[k].start, 10 * k);
    assert_int_equal(list[k].end, 10 * k + 10);
    char name[64];
    snprintf(name, sizeof name, "shards/%zu.%zu.bag", 10 * k, 10 * k + 10);
    char *want = cu_path(f->root, name), *path = NULL;
    assert_false(list[k].zstd);
    CU_OK(bc_cache_shard_path(f->c, &list[k], &path));
    assert_string_equal(path, want);
    free(want);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(list[k].bytes, (uint64_t)sb.st_size);
    free(path);
  }
  assert_true(list[0].last_access < list[3].last_access);
  assert_true(list[3].last_access < list[1].last_access);
  assert_true(list[1].last_access < list[2].last_access);

  /* Closing the cache closes the pass and frees the payload. */
  bc_cache_close(f->c);
  f->c = NULL;
  assert_int_equal(atomic_load(&f->sh->closes), 1);
  assert_int_equal(atomic_load(&f->sh->frees), 1);
}

static void test_stats_with_skip(void **state) { scripted(*state, true); }
static void test_stats_without_skip(void **state) { scripted(*state, false); }

static void test_stats_reader_lru(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(100);
  bc_cache_options o = fx_quiet_options(10);
  o.max_open_shards = 1;
  fx_open(f, &cfg, &o);
  fx_get_ok(f->c, 0);
  fx_get_ok(f->c, 1);  /* hit */
  fx_get_ok(f->c, 10); /* fill shard 1; shard 0's reader is closed */
  fx_get_ok(f->c, 2);  /* shard 0 again: opened again, not filled */
  check_stats(f->c, (expect){2, 1, 3, 1, 0}, "one open shard");
  assert_int_equal(fx_stats(f->c).open_shards, 1);
  /* Three allowed: the count grows to the bound and stays there. */
  bc_cache_options three = o;
  three.max_open_shards = 3;
  fx_reopen(f, &cfg, &three);
  assert_int_equal(fx_stats(f->c).open_shards, 0);
  fx_get_ok(f->c, 0);
  fx_get_ok(f->c, 15);
  assert_int_equal(fx_stats(f->c).open_shards, 2);
  for (int64_t i = 20; i < 100; i += 10) {
    fx_get_ok(f->c, i);
    assert_true(fx_stats(f->c).open_shards <= 3);
  }
  assert_int_equal(fx_stats(f->c).open_shards, 3);
  /* A second cache on the same root in the same process sees the shards
   * without filling anything. */
  CU_OK(bc_cache_open(&f->c2, f->root, NULL, &o));
  fx_get_ok(f->c2, 19);
  check_stats(f->c2, (expect){0, 0, 1, 0, 0}, "second cache");
}

static void test_worker_positions_thread_safe(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(100);
  cfg.thread_safe = true;
  cfg.seekable = true; /* (a pass from 0 would keep 0..49 on its way) */
  bc_cache_options o = fx_quiet_options(10);
  fx_open(f, &cfg, &o);
  fx_get_ok(f->c, 55); /* a pass opened at 50, now at 60 */
  fx_get_ok(f->c, 5);  /* a second pass (two may be open): at 10 */
  uint64_t pos[4];
  size_t n = 0;
  CU_OK(bc_cache_worker_positions(f->c, pos, 4, &n));
  assert_int_equal(n, 2);
  uint64_t lo = pos[0] < pos[1] ? pos[0] : pos[1];
  uint64_t hi = pos[0] < pos[1] ? pos[1] : pos[0];
  assert_int_equal(lo, 10);
  assert_int_equal(hi, 60);
  fx_get_ok(f->c, 65); /* continues the pass at 60 */
  fx_get_ok(f->c, 15); /* continues the pass at 10 */
  check_stats(f->c, (expect){4, 0, 4, 2, 0}, "two passes");
  CU_OK(bc_cache_worker_positions(f->c, pos, 1, &n));
  assert_int_equal(n, 2);
}

/* ---- prefetching ------------------------------------------------------------------ */

/* Waits up to 10 s for `present` shards; false on timeout. */
static bool wait_present(bc_cache *c, uint64_t present) {
  for (int k = 0; k < 1000; k++) {
    bc_cache_stats st;
    if (bc_cache_stats_get(c, &st) == 0 && st.shards_present >= present)
      return true;
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return false;
}

static bool shard_present(bc_cache *c, uint64_t start) {
  bc_cache_shard list[64];
  size_t n = 0;
  if (bc_cache_shards(c, list, 64, &n) != 0) return false;
  for (size_t k = 0; k < n && k < 64; k++)
    if (list[k].start == start) return true;
  return false;
}

static void test_prefetch_default(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(100);
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = 10;
  o.prefetch_shards = 2;
  fx_open(f, &cfg, &o);
  fx_get_ok(f->c, 3);
  /* Shards 1 and 2 follow in the background. */
  assert_true(wait_present(f->c, 3));
  assert_true(shard_present(f->c, 10));
  assert_true(shard_present(f->c, 20));
  cu_check_shards(f->root, false, false);
}

static size_t pick_seven(void *payload, uint64_t index, uint64_t records,
                         uint64_t *shards, size_t max) {
  int *calls = payload;
  (*calls)++;
  assert_int_equal(records, 10);
  (void)index;
  if (max < 1) return 0;
  shards[0] = 7;
  return 1;
}

static void test_prefetch_policy(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(100);
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = 10;
  int calls = 0;
  o.prefetch = pick_seven;
  o.prefetch_payload = &calls;
  cfg.seekable = true; /* (a pass from 0 would keep 1..6 on its way to 7) */
  fx_open(f, &cfg, &o);
  fx_get_ok(f->c, 3);
  assert_true(wait_present(f->c, 2));
  assert_true(shard_present(f->c, 70));
  assert_false(shard_present(f->c, 10));
  assert_true(calls >= 1);
}

static void test_preload_all(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(95);
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = 10;
  o.preload_all = true;
  fx_open(f, &cfg, &o);
  assert_true(wait_present(f->c, 10));
  for (int k = 0; k < 500 && !fx_stats(f->c).length_final; k++) {
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  bc_cache_stats st = fx_stats(f->c);
  assert_true(st.length_final);
  assert_int_equal(st.length, 95);
  for (uint64_t i = 0; i < 95; i++)
    assert_int_equal(atomic_load(&f->sh->per_record[i]), 1);
  cu_check_shards(f->root, false, false);
}

/* Waits up to 30 s for bc_cache_draining to give `want`. */
static bool wait_draining(bc_cache *c, bool want) {
  for (int k = 0; k < 3000; k++) {
    if (bc_cache_draining(c) == want) return true;
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return false;
}

typedef struct len_call {
  bc_cache *c;
  uint64_t len;
  int rc;
} len_call;

static void *call_len(void *arg) {
  len_call *l = arg;
  l->rc = bc_cache_len(l->c, &l->len);
  return NULL;
}

/* bc_cache_draining: false while nothing drains; true during a length's
 * drain (the source sleeps, so the drain takes at least 0.4 s) and from
 * the open of a preload_all until its workers are done. */
static void test_draining(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(200);
  cfg.delay_us = 2000;
  bc_cache_options o = fx_quiet_options(10);
  fx_open(f, &cfg, &o);
  assert_false(bc_cache_draining(f->c));
  fx_get_ok(f->c, 3); /* a fill, not a drain */
  assert_false(bc_cache_draining(f->c));
  len_call l = {f->c, 0, -1};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, call_len, &l), 0);
  assert_true(wait_draining(f->c, true));
  pthread_join(t, NULL);
  CU_OK(l.rc);
  assert_int_equal(l.len, 200);
  assert_false(bc_cache_draining(f->c));
  bc_cache_close(f->c);
  f->c = NULL;
  cu_rm_rf(f->root);

  o.preload_all = true;
  o.prefetch_shards = 0;
  fx_open(f, &cfg, &o);
  assert_true(bc_cache_draining(f->c)); /* requested at open */
  assert_true(wait_draining(f->c, false));
  bc_cache_stats st = fx_stats(f->c);
  assert_true(st.length_final);
  assert_int_equal(st.length, 200);
  assert_int_equal(st.shards_present, 20);
}

/* A view keeps the cache alive after bc_cache_close: it still reads (and
 * fills on demand); the payload is freed with the last reference. */
static void test_view_outlives_close(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(60);
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = 10;
  fx_open(f, &cfg, &o);
  bc_seq *tail = NULL;
  CU_OK(bc_seq_slice(&tail, bc_cache_seq(f->c), 30, 60, 1));
  fx_get_ok(f->c, 0);
  bc_cache_close(f->c);
  f->c = NULL;
  assert_int_equal(atomic_load(&f->sh->frees), 0);
  bc_buf b = BC_BUF_INIT;
  for (int64_t k = 0; k < 30; k++) {
    CU_OK(bc_seq_get(tail, k, &b));
    assert_true(ts_matches(30 + (uint64_t)k, false, &b));
  }
  uint64_t len = 0;
  CU_OK(bc_seq_len(tail, &len));
  assert_int_equal(len, 30);
  bc_buf_release(&b);
  bc_seq_unref(tail);
  assert_int_equal(atomic_load(&f->sh->frees), 1);
  assert_int_equal(atomic_load(&f->sh->opens), atomic_load(&f->sh->closes));
}

/* ---- export and clear ---------------------------------------------------------------- */

static void test_export(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(95);
  bc_cache_options o = fx_quiet_options(10);
  fx_open(f, &cfg, &o);
  fx_get_ok(f->c, 42);
  /* Export fills what is missing (there is a source). */
  char *spec = cu_path(f->dir, "out@3.bagz");
  CU_OK(bc_cache_export(f->c, spec));
  bc_bag *bag = NULL;
  CU_OK(bc_bag_open(&bag, spec, NULL));
  assert_int_equal(bc_bag_len(bag), 95);
  assert_int_equal(bc_bag_shard_count(bag), 3);
  static const uint64_t counts[3] = {31, 32, 32}; /* k * 95 / 3 boundaries */
  for (size_t k = 0; k < 3; k++) {
    bc_shard_info info;
    CU_OK(bc_bag_shard_info(bag, k, &info));
    assert_int_equal(info.records, counts[k]);
    assert_int_equal(info.compression, BC_COMPRESSION_ZSTD);
  }
  char *first = cu_path(f->dir, "out-00000-of-00003.bagz");
  struct stat sb;
  assert_int_equal(stat(first, &sb), 0);
  bc_buf b = BC_BUF_INIT;
  for (uint64_t i = 0; i < 95; i++) {
    CU_OK(bc_bag_get(bag, i, &b));
    if (!ts_matches(i, false, &b)) fail_msg("exported record %llu differs",
                                            (unsigned long long)i);
  }
  bc_bag_close(bag);
  /* An uncompressed single file, from a cache without a source. */
  fx_reopen(f, NULL, &o);
  char *plain = cu_path(f->dir, "plain@1.bag");
  CU_OK(bc_cache_export(f->c, plain));
  char *plain_file = cu_path(f->dir, "plain-00000-of-00001.bag");
  CU_OK(bc_bag_open(&bag, plain_file, NULL));
  assert_int_equal(bc_bag_len(bag), 95);
  bc_shard_info info;
  CU_OK(bc_bag_shard_info(bag, 0, &info));
  assert_int_equal(info.compression, BC_COMPRESSION_NONE);
  for (uint64_t i = 0; i < 95; i++) {
    CU_OK(bc_bag_get(bag, i, &b));
    assert_true(ts_matches(i, false, &b));
  }
  bc_bag_close(bag);
  CU_RC(bc_cache_export(f->c, ""), BC_EINVAL);
  bc_buf_release(&b);
  free(plain_file);
  free(plain);
  free(first);
  free(spec);
}

static void test_clear(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(30);
  bc_cache_options o = fx_quiet_options(10);
  fx_open(f, &cfg, &o);
  CU_OK(bc_cache_fill_all(f->c));
  bc_cache_close(f->c);
  f->c = NULL;
  CU_OK(bc_cache_clear(f->root));
  struct stat sb;
  assert_int_not_equal(stat(f->root, &sb), 0);
  /* A directory that is not a cache is refused and left alone. */
  char *other = cu_path(f->dir, "not-a-cache");
  assert_int_equal(mkdir(other, 0755), 0);
  char *file = cu_path(other, "precious.txt");
  cu_write_text(file, "keep me\n");
  CU_RC(bc_cache_clear(other), BC_EINVAL);
  assert_int_equal(stat(file, &sb), 0);
  char *missing = cu_path(f->dir, "missing");
  CU_RC(bc_cache_clear(missing), BC_ENOTFOUND);
  /* A cleared root can be created again from scratch. */
  fx_open(f, &cfg, &o);
  cu_check_all(f->c, 30, false);
  free(missing);
  free(file);
  free(other);
}

int main(void) {
  bc_set_notice_handler(NULL, NULL);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_root_counters, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_stats_with_skip, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_stats_without_skip, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_stats_reader_lru, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_worker_positions_thread_safe, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_prefetch_default, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_prefetch_policy, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_preload_all, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_draining, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_view_outlives_close, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_export, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_clear, fx_setup, fx_teardown),
  };
  return cmocka_run_group_tests_name("cache introspection", tests, NULL, NULL);
}
