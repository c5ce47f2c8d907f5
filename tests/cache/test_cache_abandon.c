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

#include "util.h"

/* A source of "r<i>" records whose next() blocks before record `block_at`
 * while `blocking` is set. */
static struct {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  bool blocking, blocked;
  int frees;
} gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, false, 0};

typedef struct {
  uint64_t n, block_at;
} src_cfg;

static int src_open(void *payload, void **pass) {
  (void)payload;
  uint64_t *pos = calloc(1, sizeof *pos);
  if (pos == NULL) return BC_ENOMEM;
  *pass = pos;
  return 0;
}

static int src_next(void *payload, void *pass, bc_buf *out) {
  src_cfg *cfg = payload;
  uint64_t *pos = pass;
  if (*pos >= cfg->n) return 0;
  if (*pos == cfg->block_at) {
    pthread_mutex_lock(&gate.lock);
    while (gate.blocking) {
      gate.blocked = true;
      pthread_cond_broadcast(&gate.cond);
      pthread_cond_wait(&gate.cond, &gate.lock);
    }
    pthread_mutex_unlock(&gate.lock);
  }
  char rec[32];
  int len = snprintf(rec, sizeof rec, "r%llu", (unsigned long long)*pos);
  if (out->capacity < (size_t)len) {
    unsigned char *p = realloc(out->data, (size_t)len);
    if (p == NULL) return BC_ENOMEM;
    out->data = p;
    out->capacity = (size_t)len;
  }
  memcpy(out->data, rec, (size_t)len);
  out->size = (size_t)len;
  (*pos)++;
  return 1;
}

static void src_close(void *payload, void *pass) {
  (void)payload;
  free(pass);
}

static void src_free(void *payload) {
  free(payload);
  pthread_mutex_lock(&gate.lock);
  gate.frees++;
  pthread_cond_broadcast(&gate.cond);
  pthread_mutex_unlock(&gate.lock);
}

static bc_source make_source(uint64_t n, uint64_t block_at) {
  src_cfg *cfg = malloc(sizeof *cfg);
  assert_non_null(cfg);
  cfg->n = n;
  cfg->block_at = block_at;
  bc_source s = {.version = BC_SOURCE_VERSION, .open = src_open, .next = src_next,
                 .close = src_close, .free_payload = src_free, .payload = cfg};
  return s;
}

/* Waits (up to 10 s) until pred() holds, under gate.lock. */
static bool wait_gate(bool (*pred)(void)) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 10;
  pthread_mutex_lock(&gate.lock);
  bool ok = true;
  while (!pred() && ok) ok = pthread_cond_timedwait(&gate.cond, &gate.lock, &until) == 0;
  ok = pred();
  pthread_mutex_unlock(&gate.lock);
  return ok;
}

static bool is_blocked(void) { return gate.blocked; }
static bool two_frees(void) { return gate.frees == 2; }

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

static void check_record(bc_cache *c, int64_t i) {
  bc_buf buf = BC_BUF_INIT;
  CU_OK(bc_cache_get(c, i, &buf));
  char want[32];
  int len = snprintf(want, sizeof want, "r%lld", (long long)i);
  assert_int_equal(buf.size, (size_t)len);
  assert_memory_equal(buf.data, want, (size_t)len);
  bc_buf_release(&buf);
}

static void test_abandon_a_worker_stuck_in_the_source(void **state) {
  (void)state;
  cu_watchdog(60);
  char *dir = cu_tmp_dir();
  char *root = cu_path(dir, "c");
  char *scratch = cu_path(root, "scratch");
  char *shards = cu_path(root, "shards");
  gate.blocking = true;
  gate.blocked = false;
  gate.frees = 0;

  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = 10;
  o.fill_workers = 1; /* prefetch: the next shard after each one opened */
  bc_source s = make_source(100, 15);
  bc_cache *c = NULL;
  CU_OK(bc_cache_open(&c, root, &s, &o));
  check_record(c, 5); /* shard 0; the worker goes for shard 1, and blocks */
  assert_true(wait_gate(is_blocked));

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
  bc_source s2 = make_source(100, UINT64_MAX);
  bc_cache *c2 = NULL;
  CU_OK(bc_cache_open(&c2, root, &s2, &o2));
  for (int64_t i = 10; i < 20; i++) check_record(c2, i);
  bc_cache_stats st;
  CU_OK(bc_cache_stats_get(c2, &st));
  assert_int_equal(st.fills, 1);

  /* The source returns: the abandoned fill publishes nothing, removes its
   * scratch file, and the worker ends, dropping its reference. */
  pthread_mutex_lock(&gate.lock);
  gate.blocking = false;
  pthread_cond_broadcast(&gate.cond);
  pthread_mutex_unlock(&gate.lock);
  bc_seq_unref(hold);
  bc_cache_close(c2);
  assert_true(wait_gate(two_frees)); /* both caches are gone */
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
      char want[32];
      int len = snprintf(want, sizeof want, "r%llu", (unsigned long long)(start + i));
      assert_int_equal(buf.size, (size_t)len);
      assert_memory_equal(buf.data, want, (size_t)len);
      bc_buf_release(&buf);
    }
    bc_bag_close(bag);
    free(path);
  }

  cu_rm_rf(dir);
  free(scratch);
  free(shards);
  free(root);
  free(dir);
  cu_watchdog(0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_abandon_a_worker_stuck_in_the_source),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
