/*
 * Crash safety: a child process filling a cache (random reads under a disk
 * limit, a slow source so that kills land in the middle of fills, of
 * publishes and of evictions) is killed with SIGKILL at a random moment,
 * again and again on the same root.  After each kill:
 *   - every file in shards/ is a complete shard (a valid bag of END-START
 *     records equal to the model): nothing partial is ever visible;
 *   - shards/ holds no more than the limit;
 *   - the parent reopens the root with a source and reads every record
 *     correctly, promptly (a dead claim never blocks), after which scratch/
 *     is empty (dead writers' files are cleaned).
 * A second loop kills readers without a source on a complete cache:
 * nothing published is ever lost.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

#define N 200
#define R 10

typedef struct fixture {
  char *dir, *root, *shards, *scratch;
  ts_shared *sh;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  if (f == NULL) return -1;
  f->dir = cu_tmp_dir();
  f->root = cu_path(f->dir, "c");
  f->shards = cu_path(f->root, "shards");
  f->scratch = cu_path(f->root, "scratch");
  cu_watchdog(120);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
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

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void sleep_us(uint64_t us) {
  struct timespec t = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
  nanosleep(&t, NULL);
}

/* The child: reads random records until killed.  Exit 3 on a failed or
 * wrong read (a kill is the normal end). */
static void child(const fixture *f, const ts_config *cfg,
                  const bc_cache_options *o, uint64_t seed) {
  bc_cache *c = NULL;
  bc_buf b = BC_BUF_INIT;
  if (cu_open(&c, f->root, cfg, f->sh, o) != 0) _exit(2);
  for (;;) {
    int64_t i = (int64_t)(cu_rand(&seed) % N);
    int rc = cu_get_cmp(c, i, true, &b);
    if (rc != 0) _exit(3);
  }
}

/* Forks the child, kills it after `delay_us`, reaps it; fails the test if
 * it ended otherwise. */
static void kill_child(const fixture *f, const ts_config *cfg,
                       const bc_cache_options *o, uint64_t seed,
                       uint64_t delay_us) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) child(f, cfg, o, seed);
  sleep_us(delay_us);
  kill(pid, SIGKILL);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
    fail_msg("the child ended by itself (status %#x): open failed or a "
             "record was wrong", (unsigned)status);
}

/* What must hold after any kill. */
static void check_after_kill(const fixture *f, uint64_t limit, int iteration) {
  char why[256];
  size_t files = 0;
  if (cu_shards_valid(f->root, true, false, &files, why) != 0)
    fail_msg("iteration %d: a partial or wrong shard is visible: %s",
             iteration, why);
  uint64_t bytes = cu_dir_bytes(f->shards, NULL);
  if (limit != 0 && bytes > limit)
    fail_msg("iteration %d: %llu bytes in shards/, limit %llu", iteration,
             (unsigned long long)bytes, (unsigned long long)limit);
}

static void test_kill_fillers(void **state) {
  fixture *f = *state;
  uint64_t *sizes = cu_shard_sizes(N, R, true);
  ts_config slow = ts_config_default(N);
  slow.fixed = true;
  slow.delay_us = 150; /* a shard takes about 1.5 ms to fill */
  ts_config fast = slow;
  fast.delay_us = 0;
  f->sh = ts_shared_new(&slow);
  assert_non_null(f->sh);
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = R;
  o.prefetch_shards = -1;
  o.max_open_shards = 2;
  o.disk_limit = 5 * sizes[0] + sizes[0] / 2;
  uint64_t seed = 9;
  int iterations = 30;
  for (int it = 0; it < iterations; it++) {
    /* Sometimes right at the start (creating the root, claiming), mostly
     * a few fills in. */
    uint64_t delay = it % 5 == 0 ? cu_rand(&seed) % 2000 : 2000 + cu_rand(&seed) % 12000;
    kill_child(f, &slow, &o, 100 + (uint64_t)it, delay);
    check_after_kill(f, o.disk_limit, it);

    double t0 = now();
    bc_cache *c = NULL;
    CU_OK(cu_open(&c, f->root, &fast, f->sh, &o));
    assert_int_equal(cu_dir_count(f->scratch), 0);
    cu_check_all(c, N, true);
    uint64_t len = 0;
    CU_OK(bc_cache_len(c, &len));
    assert_int_equal(len, N);
    bc_cache_stats st;
    CU_OK(bc_cache_stats_get(c, &st));
    assert_true(st.bytes_on_disk <= o.disk_limit);
    bc_cache_close(c);
    double took = now() - t0;
    if (took > 10.0)
      fail_msg("iteration %d: reading everything after the kill took %.1f s "
               "(a stale claim waited on?)", it, took);
    check_after_kill(f, o.disk_limit, it);
  }
  free(sizes);
}

static void test_kill_readers_nothing_lost(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(N);
  cfg.fixed = true;
  f->sh = ts_shared_new(&cfg);
  assert_non_null(f->sh);
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = R;
  o.prefetch_shards = -1;
  o.max_open_shards = 1; /* every read of another shard opens it: a write
                            transaction bumps its access clock */
  bc_cache *c = NULL;
  CU_OK(cu_open(&c, f->root, &cfg, f->sh, &o));
  CU_OK(bc_cache_fill_all(c));
  bc_cache_close(c);
  uint64_t seed = 5;
  for (int it = 0; it < 30; it++) {
    kill_child(f, NULL, &o, 300 + (uint64_t)it, cu_rand(&seed) % 8000);
    check_after_kill(f, 0, it);
    /* Without a source: everything is still there. */
    CU_OK(cu_open(&c, f->root, NULL, NULL, &o));
    cu_check_all(c, N, true);
    bc_cache_stats st;
    CU_OK(bc_cache_stats_get(c, &st));
    assert_int_equal(st.shards_present, N / R);
    assert_true(st.length_final);
    uint64_t bad = 0;
    CU_OK(bc_cache_verify(c, &bad));
    bc_cache_close(c);
  }
  size_t files = 0;
  cu_dir_bytes(f->shards, &files);
  assert_int_equal(files, N / R);
}

int main(void) {
  bc_set_notice_handler(NULL, NULL);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_kill_fillers, setup, teardown),
      cmocka_unit_test_setup_teardown(test_kill_readers_nothing_lost, setup,
                                      teardown),
  };
  return cmocka_run_group_tests_name("cache crash safety", tests, NULL, NULL);
}
