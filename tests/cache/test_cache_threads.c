/*
 * Threads on one cache (also run under ThreadSanitizer): four threads read
 * random records at once.  With a source that is not thread-safe the cache
 * never calls it from two threads at once and fills each shard once; with a
 * thread-safe source, two fill workers and prefetching, under a small disk
 * limit, every read is right and the limit holds; a fill that fails reports
 * the source's error and message to every thread waiting for it;
 * bc_cache_try_get never waits for another thread's fill or pass.
 *
 * Worker threads never call cmocka: they record what went wrong and the
 * main thread fails the test.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

#define NTHREADS 4

typedef struct fixture {
  char *dir, *root, *shards;
  ts_shared *sh;
  bc_cache *c, *c2; /* closed by teardown, also after a failure */
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  if (f == NULL) return -1;
  f->dir = cu_tmp_dir();
  f->root = cu_path(f->dir, "c");
  f->shards = cu_path(f->root, "shards");
  cu_watchdog(120);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  bc_cache_close(f->c2);
  bc_cache_close(f->c);
  ts_shared_free(f->sh);
  cu_rm_rf(f->dir);
  free(f->shards);
  free(f->root);
  free(f->dir);
  free(f);
  cu_watchdog(0);
  return 0;
}

typedef struct job {
  bc_cache *c;
  uint64_t n, limit;
  bool fixed;
  int id, reads;
  int64_t fixed_index; /* >= 0: every read is this record */
  int rc;              /* the first failure (or 0) */
  char error[256];
  uint64_t max_bytes;  /* the largest bytes_on_disk seen */
} job;

static void *reader(void *arg) {
  job *j = arg;
  bc_buf b = BC_BUF_INIT;
  uint64_t seed = 77 + (uint64_t)j->id;
  for (int k = 0; k < j->reads && j->rc == 0; k++) {
    int64_t i = j->fixed_index >= 0 ? j->fixed_index
                                    : (int64_t)(cu_rand(&seed) % j->n);
    int rc = cu_get_cmp(j->c, i, j->fixed, &b);
    if (rc != 0) {
      j->rc = rc;
      snprintf(j->error, sizeof j->error, "record %lld: %s", (long long)i,
               rc == 1 ? "differs from the model" : bc_errmsg());
      break;
    }
    if (j->limit != 0) {
      bc_cache_stats st;
      if (bc_cache_stats_get(j->c, &st) != 0) {
        j->rc = -1;
        snprintf(j->error, sizeof j->error, "stats: %s", bc_errmsg());
        break;
      }
      if (st.bytes_on_disk > j->max_bytes) j->max_bytes = st.bytes_on_disk;
    }
  }
  bc_buf_release(&b);
  return NULL;
}

static void run(job *jobs) {
  pthread_t t[NTHREADS];
  for (int k = 0; k < NTHREADS; k++)
    assert_int_equal(pthread_create(&t[k], NULL, reader, &jobs[k]), 0);
  for (int k = 0; k < NTHREADS; k++) pthread_join(t[k], NULL);
}

static void test_threads_one_pass(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(300);
  cfg.delay_us = 20;
  f->sh = ts_shared_new(&cfg);
  assert_non_null(f->sh);
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = 10;
  o.prefetch_shards = -1;
  CU_OK(cu_open(&f->c, f->root, &cfg, f->sh, &o));
  job jobs[NTHREADS];
  memset(jobs, 0, sizeof jobs);
  for (int k = 0; k < NTHREADS; k++)
    jobs[k] = (job){.c = f->c, .n = 300, .id = k, .fixed_index = -1,
                    .reads = CU_SANITIZED ? 60 : 200};
  run(jobs);
  for (int k = 0; k < NTHREADS; k++)
    if (jobs[k].rc != 0) fail_msg("thread %d: %s", k, jobs[k].error);
  /* The source (not thread-safe) was never entered twice at once, and
   * every shard was produced once, whole, or not at all. */
  assert_int_equal(atomic_load(&f->sh->overlaps), 0);
  bc_cache_stats st;
  CU_OK(bc_cache_stats_get(f->c, &st));
  uint64_t touched = 0;
  for (uint64_t s = 0; s < 30; s++) {
    uint32_t first = atomic_load(&f->sh->per_record[s * 10]);
    assert_true(first <= 1);
    for (uint64_t i = s * 10; i < s * 10 + 10; i++)
      assert_int_equal(atomic_load(&f->sh->per_record[i]), first);
    touched += first;
  }
  /* (Shards crossed on the way to another are kept: no limit.) */
  assert_int_equal(st.fills + st.shards_kept, touched);
  assert_int_equal(st.shards_present, touched);
  assert_int_equal(st.regenerations, 0);
  cu_check_shards(f->root, false, false);
}

/* Threads reading at random, two fill workers prefetching, under a limit
 * of six and a half shards; `behind`: with publish-behind (its publisher
 * thread, queued shards read from their scratch files by every thread). */
static void workers_under_limit(fixture *f, bool behind) {
  uint64_t *sizes = cu_shard_sizes(300, 10, true);
  ts_config cfg = ts_config_default(300);
  cfg.fixed = true;
  cfg.thread_safe = true;
  cfg.delay_us = 10;
  f->sh = ts_shared_new(&cfg);
  assert_non_null(f->sh);
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = 10;
  o.fill_workers = 2;
  o.prefetch_shards = 2;
  o.max_open_shards = 3;
  o.disk_limit = 6 * sizes[0] + sizes[0] / 2;
  o.publish_behind = behind;
  CU_OK(cu_open(&f->c, f->root, &cfg, f->sh, &o));
  job jobs[NTHREADS];
  for (int k = 0; k < NTHREADS; k++)
    jobs[k] = (job){.c = f->c, .n = 300, .fixed = true, .id = k,
                    .fixed_index = -1, .limit = o.disk_limit,
                    .reads = CU_SANITIZED ? 60 : 200};
  run(jobs);
  for (int k = 0; k < NTHREADS; k++) {
    if (jobs[k].rc != 0) fail_msg("thread %d: %s", k, jobs[k].error);
    assert_true(jobs[k].max_bytes <= o.disk_limit);
  }
  bc_cache_stats before;
  CU_OK(bc_cache_stats_get(f->c, &before));
  if (behind) assert_true(before.publishes_queued > 0);
  assert_int_equal(before.publish_failures, 0);
  bc_cache_close(f->c); /* stops the workers: nothing changes after this */
  f->c = NULL;
  assert_true(cu_dir_bytes(f->shards, NULL) <= o.disk_limit);
  cu_check_shards(f->root, true, false);
  bc_cache_options quiet = o;
  quiet.prefetch_shards = -1;
  quiet.fill_workers = 0; /* no source to run them */
  CU_OK(cu_open(&f->c, f->root, NULL, NULL, &quiet));
  bc_cache_stats st;
  CU_OK(bc_cache_stats_get(f->c, &st));
  assert_int_equal(st.bytes_on_disk, cu_dir_bytes(f->shards, NULL));
  uint64_t bad = 0;
  CU_OK(bc_cache_verify(f->c, &bad));
  free(sizes);
}

static void test_threads_workers_under_limit(void **state) {
  workers_under_limit(*state, false);
}

static void test_threads_publish_behind(void **state) {
  workers_under_limit(*state, true);
}

static void test_threads_share_a_failure(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(100);
  cfg.delay_us = 2000; /* the fill is slow: the other threads wait for it */
  cfg.fail_at = 28;
  cfg.fail_times = 1;
  f->sh = ts_shared_new(&cfg);
  assert_non_null(f->sh);
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = 10;
  o.prefetch_shards = -1;
  CU_OK(cu_open(&f->c, f->root, &cfg, f->sh, &o));
  job jobs[NTHREADS];
  for (int k = 0; k < NTHREADS; k++)
    jobs[k] = (job){.c = f->c, .n = 100, .id = k, .fixed_index = 21, .reads = 1};
  run(jobs);
  /* Each thread either shared the failed fill (the source's code and
   * message, passed across threads) or came later and read the record. */
  int failed = 0;
  for (int k = 0; k < NTHREADS; k++) {
    if (jobs[k].rc == 0) continue;
    if (jobs[k].rc != BC_ESOURCE || strstr(jobs[k].error, "failure at record 28") == NULL)
      fail_msg("thread %d: %s: %s", k, bc_error_name(jobs[k].rc), jobs[k].error);
    failed++;
  }
  assert_true(failed >= 1);
  assert_int_equal(atomic_load(&f->sh->failures), 1);
  bc_buf b = BC_BUF_INIT;
  assert_int_equal(cu_get_cmp(f->c, 21, false, &b), 0);
  bc_buf_release(&b);
  cu_check_shards(f->root, false, false);
}

/* Two caches opened on one root in one process (they share the process's
 * LMDB environment and its identity as a claimant), read by two threads
 * each: every read is right and the state accounts for the files. */
static void test_two_caches_one_root(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(200);
  cfg.delay_us = 200;
  f->sh = ts_shared_new(&cfg);
  assert_non_null(f->sh);
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = 10;
  o.prefetch_shards = -1;
  CU_OK(cu_open(&f->c, f->root, &cfg, f->sh, &o));
  CU_OK(cu_open(&f->c2, f->root, &cfg, f->sh, &o));
  job jobs[NTHREADS];
  for (int k = 0; k < NTHREADS; k++)
    jobs[k] = (job){.c = k % 2 ? f->c2 : f->c, .n = 200, .id = k / 2,
                    .fixed_index = -1, .reads = CU_SANITIZED ? 40 : 100};
  run(jobs);
  int failed = 0;
  char first[300] = "";
  for (int k = 0; k < NTHREADS; k++)
    if (jobs[k].rc != 0 && failed++ == 0)
      snprintf(first, sizeof first, "thread %d: %s", k, jobs[k].error);
  bc_cache_close(f->c2);
  f->c2 = NULL;
  if (failed) fail_msg("%d of %d threads failed; %s", failed, NTHREADS, first);
  bc_cache_stats st;
  CU_OK(bc_cache_stats_get(f->c, &st));
  size_t files = 0;
  assert_int_equal(st.bytes_on_disk, cu_dir_bytes(f->shards, &files));
  assert_int_equal(st.shards_present, files);
  cu_check_shards(f->root, false, false);
}

typedef struct close_job {
  bc_seq *seq;
  int rc;
} close_job;

static void *read_first(void *arg) {
  close_job *j = arg;
  bc_buf b = BC_BUF_INIT;
  j->rc = bc_seq_get(j->seq, 0, &b);
  if (j->rc == 0 && !ts_matches(0, false, &b)) j->rc = 1;
  bc_buf_release(&b);
  return NULL;
}

/* Two cache objects on one root: the first one's fill worker starts
 * draining (shard 0 first), a thread reading record 0 through the second
 * waits for that fill, and the first is closed meanwhile, which abandons
 * its worker's fill with BC_ECLOSED.  The waiter must not take that error
 * for its own: it fills the shard itself. */
static void test_waiter_survives_other_close(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(100);
  cfg.delay_us = 2000; /* a shard of 50 records: 100 ms */
  f->sh = ts_shared_new(&cfg);
  assert_non_null(f->sh);
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = 50;
  o.prefetch_shards = -1;
  CU_OK(cu_open(&f->c2, f->root, &cfg, f->sh, &o));
  o.preload_all = true;
  CU_OK(cu_open(&f->c, f->root, &cfg, f->sh, &o));
  struct timespec pause = {0, 20 * 1000 * 1000};
  nanosleep(&pause, NULL); /* the worker is filling shard 0 */
  close_job j = {bc_seq_ref(bc_cache_seq(f->c2)), 0};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, read_first, &j), 0);
  nanosleep(&pause, NULL); /* the reader waits for the worker's fill */
  bc_cache_close(f->c);
  f->c = NULL;
  pthread_join(t, NULL);
  bc_seq_unref(j.seq);
  if (j.rc != 0) fail_msg("the waiter failed: %s", bc_error_name(j.rc));
  cu_check_shards(f->root, false, false);
}

typedef struct fill_job {
  bc_cache *c;
  int64_t index;
  int rc;
} fill_job;

static void *get_one(void *arg) {
  fill_job *j = arg;
  bc_buf b = BC_BUF_INIT;
  j->rc = cu_get_cmp(j->c, j->index, false, &b);
  bc_buf_release(&b);
  return NULL;
}

/* bc_cache_try_get while another thread fills shard 0 (slowly) with the
 * only pass of a source that is not thread-safe: a record of that shard,
 * one of a shard nobody fills (it would wait for the pass) and one counted
 * from an unknown end are each BC_EAGAIN at once, with no claim left
 * behind.  Once the fill is done the same calls read the model (filling
 * shard 1 in the calling thread), and a negative index counts from the end
 * once it is known. */
static void test_try_get_never_waits(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(100);
  cfg.delay_us = 10 * 1000; /* a shard of 50 records: half a second */
  f->sh = ts_shared_new(&cfg);
  assert_non_null(f->sh);
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = 50;
  o.prefetch_shards = -1;
  CU_OK(cu_open(&f->c, f->root, &cfg, f->sh, &o));
  fill_job j = {f->c, 0, 0};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, get_one, &j), 0);
  struct timespec tick = {0, 1000 * 1000};
  while (atomic_load(&f->sh->produced) == 0) nanosleep(&tick, NULL);
  /* The fill of shard 0 is under way and has at least 49 records to go. */
  bc_buf b = BC_BUF_INIT;
  CU_RC(bc_cache_try_get(f->c, 10, &b), BC_EAGAIN);
  assert_non_null(strstr(bc_errmsg(), "being filled by another thread"));
  CU_RC(bc_cache_try_get(f->c, 60, &b), BC_EAGAIN);
  assert_non_null(strstr(bc_errmsg(), "every pass over the source is in use"));
  CU_RC(bc_cache_try_get(f->c, -1, &b), BC_EAGAIN);
  /* Many at once: the first position that would wait is named. */
  int64_t waiting[3] = {40, 10, 20};
  bc_buf outs[5] = {BC_BUF_INIT, BC_BUF_INIT, BC_BUF_INIT, BC_BUF_INIT, BC_BUF_INIT};
  CU_RC(bc_cache_try_get_many(f->c, waiting, 3, outs), BC_EAGAIN);
  assert_non_null(strstr(bc_errmsg(), "indices[0] = 40: "));
  assert_true(atomic_load(&f->sh->produced) < 50);
  pthread_join(t, NULL);
  CU_OK(j.rc);
  CU_OK(bc_cache_try_get(f->c, 10, &b));
  assert_true(ts_matches(10, false, &b));
  CU_OK(bc_cache_try_get(f->c, 60, &b)); /* the claim tried above is gone */
  assert_true(ts_matches(60, false, &b));
  assert_int_equal(atomic_load(&f->sh->opens), 1); /* one pass did it all */
  uint64_t len = 0;
  CU_OK(bc_cache_len(f->c, &len));
  assert_int_equal(len, 100);
  CU_OK(bc_cache_try_get(f->c, -1, &b));
  assert_true(ts_matches(99, false, &b));
  CU_RC(bc_cache_try_get(f->c, -101, &b), BC_ERANGE);
  CU_RC(bc_cache_try_get(f->c, 100, &b), BC_ERANGE);
  bc_buf_release(&b);
  /* Many at once, in request order, repeats and negative indices too. */
  int64_t many[5] = {99, 0, 60, -100, 99};
  uint64_t want[5] = {99, 0, 60, 0, 99};
  CU_OK(bc_cache_try_get_many(f->c, many, 5, outs));
  for (size_t k = 0; k < 5; k++) assert_true(ts_matches(want[k], false, &outs[k]));
  int64_t past[3] = {1, 100, 2};
  CU_RC(bc_cache_try_get_many(f->c, past, 3, outs), BC_ERANGE);
  assert_non_null(strstr(bc_errmsg(), "indices[1] = 100: "));
  for (size_t k = 0; k < 5; k++) bc_buf_release(&outs[k]);
  /* The cache behind its sequence, and no cache behind other sequences. */
  assert_ptr_equal(bc_seq_cache(bc_cache_seq(f->c)), f->c);
  bc_seq *slice = NULL;
  CU_OK(bc_seq_slice(&slice, bc_cache_seq(f->c), 0, 10, 1));
  assert_null(bc_seq_cache(slice));
  assert_null(bc_seq_cache(NULL));
  bc_seq_unref(slice);
  cu_check_shards(f->root, false, false);
}

/* Four threads read random records of a filled cache that may keep only
 * two shard readers open, so readers are dropped while other threads have
 * them pinned, closed by their last user, and reopened (in the same slot)
 * all the time: every read is right, each read is exactly one hit or one
 * shard open, and afterwards at most two shard files stay mapped. */
static void test_reader_churn(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(400);
  f->sh = ts_shared_new(&cfg);
  assert_non_null(f->sh);
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = 10;
  o.prefetch_shards = -1;
  o.max_open_shards = 2;
  CU_OK(cu_open(&f->c, f->root, &cfg, f->sh, &o));
  CU_OK(bc_cache_fill_all(f->c));
  bc_cache_stats before;
  CU_OK(bc_cache_stats_get(f->c, &before));
  job jobs[NTHREADS];
  memset(jobs, 0, sizeof jobs);
  int reads = CU_SANITIZED ? 400 : 4000;
  for (int k = 0; k < NTHREADS; k++)
    jobs[k] = (job){.c = f->c, .n = 400, .id = k, .fixed_index = -1,
                    .reads = reads};
  /* Half of the threads hammer one record, so its shard is hot while the
   * others churn the rest. */
  jobs[0].fixed_index = 7;
  run(jobs);
  for (int k = 0; k < NTHREADS; k++)
    if (jobs[k].rc != 0) fail_msg("thread %d: %s", k, jobs[k].error);
  bc_cache_stats st;
  CU_OK(bc_cache_stats_get(f->c, &st));
  assert_int_equal((st.hits - before.hits) + (st.shard_opens - before.shard_opens),
                   (uint64_t)NTHREADS * (uint64_t)reads);
  assert_true(st.shard_opens - before.shard_opens > 40);
  assert_int_equal(st.fills, 40);
  assert_int_equal(st.regenerations, 0);
  assert_true(cu_mapped(f->shards) <= 2);
  assert_int_equal(cu_deleted_held(f->shards), 0);
}

int main(void) {
  bc_set_notice_handler(NULL, NULL);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_threads_one_pass, setup, teardown),
      cmocka_unit_test_setup_teardown(test_threads_publish_behind, setup, teardown),
      cmocka_unit_test_setup_teardown(test_threads_workers_under_limit, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_threads_share_a_failure, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_two_caches_one_root, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_reader_churn, setup, teardown),
      cmocka_unit_test_setup_teardown(test_try_get_never_waits, setup, teardown),
      cmocka_unit_test_setup_teardown(test_waiter_survives_other_close, setup,
                                      teardown),
  };
  return cmocka_run_group_tests_name("cache threads", tests, NULL, NULL);
}
