/*
 * tests/cache/test_cache_abandon.c - a fill stuck in the source:
 * bc_cache_close waits for its worker until bc_cache_abandon_fills, which
 * drops the claim at once (another handle fills the shard meanwhile); when
 * the source returns, the stuck fill publishes nothing, removes its scratch
 * file, and the last reference it held frees the cache.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fixture.h"

/* Waits (up to 10 s) until *flag holds. */
static bool wait_true(_Atomic bool *flag) {
  for (int ms = 0; ms < 10000 && !atomic_load(flag); ms++) usleep(1000);
  return atomic_load(flag);
}

/* Waits (up to 10 s) until both caches freed their sources' payloads. */
static bool wait_two_frees(ts_shared *sh) {
  for (int ms = 0; ms < 10000 && atomic_load(&sh->frees) < 2; ms++) usleep(1000);
  return atomic_load(&sh->frees) == 2;
}

typedef struct {
  bc_cache *cache;
  atomic_bool done;
} closer;

static void *close_main(void *arg) {
  closer *k = arg;
  bc_cache_close(k->cache);
  atomic_store(&k->done, true);
  return NULL;
}

static void test_abandon_a_worker_stuck_in_the_source(void **state) {
  (void)state;
  cu_watchdog(60);
  char *dir = cu_tmp_dir();
  char *root = cu_path(dir, "c");
  char *scratch = cu_path(root, "scratch");
  char *shards = cu_path(root, "shards");
  /* The first cache's source blocks before record 15 while sh->hold. */
  ts_config stuck = ts_config_default(100);
  stuck.block_at = 15;
  ts_config plain = ts_config_default(100);
  ts_shared *sh = ts_shared_new(&stuck);
  assert_non_null(sh);
  atomic_store(&sh->hold, true);

  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = 10;
  o.fill_workers = 1; /* prefetch: the next shard after each one opened */
  bc_source s = ts_source(&stuck, sh);
  bc_cache *c = NULL;
  CU_OK(bc_cache_open(&c, root, &s, &o));
  fx_get_ok(c, 5); /* shard 0; the worker goes for shard 1, and blocks */
  assert_true(wait_true(&sh->held));

  bc_seq *hold = bc_seq_ref(bc_cache_seq(c)); /* for abandon, past close */
  closer k = {c, false};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, close_main, &k), 0);
  usleep(200 * 1000);
  assert_false(atomic_load(&k.done)); /* waits for the stuck worker */

  assert_int_equal(bc_cache_abandon_fills(c, 100), 1); /* still stuck */
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_true(atomic_load(&k.done));
  assert_int_equal(bc_cache_abandon_fills(c, 0), 0); /* nothing left */

  /* The claim is gone: another handle fills shard 1 without waiting. */
  bc_cache_options o2 = BC_CACHE_OPTIONS_INIT;
  o2.prefetch_shards = -1;
  bc_source s2 = ts_source(&plain, sh);
  bc_cache *c2 = NULL;
  CU_OK(bc_cache_open(&c2, root, &s2, &o2));
  for (int64_t i = 10; i < 20; i++) fx_get_ok(c2, i);
  bc_cache_stats st;
  CU_OK(bc_cache_stats_get(c2, &st));
  assert_int_equal(st.fills, 1);

  /* The source returns: the abandoned fill publishes nothing, removes its
   * scratch file, and the worker ends, dropping its reference. */
  atomic_store(&sh->hold, false);
  bc_seq_unref(hold);
  bc_cache_close(c2);
  assert_true(wait_two_frees(sh)); /* both caches are gone */
  assert_int_equal(cu_dir_count(scratch), 0);
  assert_int_equal(cu_dir_count(shards), 2); /* 0.10 and 10.20 */
  for (uint64_t start = 0; start < 20; start += 10) { /* whole and right */
    char name[64];
    snprintf(name, sizeof name, "%llu.%llu.bag", (unsigned long long)start,
             (unsigned long long)start + 10);
    char *path = cu_path(shards, name);
    bc_bag *bag = NULL;
    CU_OK(bc_bag_open(&bag, path, NULL));
    assert_int_equal(bc_bag_len(bag), 10);
    for (uint64_t i = 0; i < 10; i++) {
      bc_buf buf = BC_BUF_INIT;
      CU_OK(bc_bag_get(bag, i, &buf));
      assert_true(ts_matches(start + i, false, &buf));
      bc_buf_release(&buf);
    }
    bc_bag_close(bag);
    free(path);
  }

  ts_shared_free(sh);
  cu_rm_rf(dir);
  free(scratch);
  free(shards);
  free(root);
  free(dir);
  cu_watchdog(0);
}

/* More fills in progress than one round of bc_cache_abandon_fills takes
 * (64): every one is abandoned, and the count says so. */
enum { MANY_FILLS = 70 };

typedef struct {
  bc_cache *cache;
  int64_t index;
  int rc;
} getter;

static void *get_main(void *arg) {
  getter *g = arg;
  bc_buf buf = BC_BUF_INIT;
  g->rc = bc_seq_get(bc_cache_seq(g->cache), g->index, &buf);
  bc_buf_release(&buf);
  return NULL;
}

static void test_abandon_more_fills_than_one_round(void **state) {
  (void)state;
  cu_watchdog(120);
  char *dir = cu_tmp_dir();
  char *root = cu_path(dir, "c");
  /* Seekable and thread-safe: each caller's fill opens its own pass at its
   * shard and blocks in the pass's first next() while sh->hold. */
  ts_config cfg = ts_config_default(MANY_FILLS * 4);
  cfg.seekable = true;
  cfg.thread_safe = true;
  cfg.block_first = true;
  ts_shared *sh = ts_shared_new(&cfg);
  assert_non_null(sh);
  atomic_store(&sh->hold, true);

  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = 4;
  o.prefetch_shards = -1;
  o.fill_workers = MANY_FILLS; /* MANY_FILLS + 1 passes may run at once */
  o.max_passes = 2 * MANY_FILLS;
  bc_source s = ts_source(&cfg, sh);
  bc_cache *c = NULL;
  CU_OK(bc_cache_open(&c, root, &s, &o));
  getter g[MANY_FILLS];
  pthread_t t[MANY_FILLS];
  for (int k = 0; k < MANY_FILLS; k++) {
    g[k] = (getter){c, 4 * k + 1, 1};
    assert_int_equal(pthread_create(&t[k], NULL, get_main, &g[k]), 0);
  }
  for (int ms = 0; ms < 60000 && atomic_load(&sh->opens) < MANY_FILLS; ms++)
    usleep(1000);
  assert_int_equal(atomic_load(&sh->opens), MANY_FILLS); /* all stuck */

  assert_int_equal(bc_cache_abandon_fills(c, 0), MANY_FILLS);
  assert_int_equal(bc_cache_abandon_fills(c, 0), 0); /* nothing left */
  atomic_store(&sh->hold, false);
  for (int k = 0; k < MANY_FILLS; k++) {
    assert_int_equal(pthread_join(t[k], NULL), 0);
    if (g[k].rc != 0) assert_int_equal(g[k].rc, BC_ECLOSED);
  }
  /* The claims were dropped: every shard fills now, with the right bytes. */
  for (int64_t i = 0; i < MANY_FILLS * 4; i++) fx_get_ok(c, i);
  bc_cache_close(c);
  ts_shared_free(sh);
  cu_rm_rf(dir);
  free(root);
  free(dir);
  cu_watchdog(0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_abandon_a_worker_stuck_in_the_source),
      cmocka_unit_test(test_abandon_more_fills_than_one_round),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
