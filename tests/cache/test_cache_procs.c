/*
 * Many processes on one root: eight forked children create and read one
 * cache at once.  Without a limit every shard is filled exactly once across
 * all of them (the source's per-record counters live in shared memory);
 * under a small limit every read is still right and the files in shards/,
 * sampled after every read while holding the state's write lock (so that no
 * publish is half-way through), never exceed the limit.
 *
 * Children report through a shared mapping and their exit status; they
 * never call cmocka.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache/internal.h"
#include "util.h"

#define NPROC 8

/* What each child reports. */
typedef struct report {
  bc_cache_stats st;
  uint64_t max_sampled; /* the largest sum of shards/ seen */
  char error[256];
} report;

typedef struct fixture {
  char *dir, *root, *shards;
  ts_shared *sh;
  report *reports; /* NPROC, shared */
  bc_cache *c;     /* closed by teardown, also after a failure */
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  if (f == NULL) return -1;
  f->dir = cu_tmp_dir();
  f->root = cu_path(f->dir, "c");
  f->shards = cu_path(f->root, "shards");
  void *p = mmap(NULL, NPROC * sizeof(report), PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return -1;
  f->reports = p;
  cu_watchdog(60);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  bc_cache_close(f->c);
  munmap(f->reports, NPROC * sizeof(report));
  ts_shared_free(f->sh);
  cu_rm_rf(f->dir);
  free(f->shards);
  free(f->root);
  free(f->dir);
  free(f);
  cu_watchdog(0);
  return 0;
}

typedef struct plan {
  ts_config cfg;
  bc_cache_options opts;
  int reads;
  bool sample; /* check shards/ against the limit after every read */
} plan;

/* The sum of shards/ while no process can publish or evict: the state's
 * write lock is held (every change to shards/ happens under it). */
static int locked_dir_bytes(const char *root, uint64_t *bytes) {
  char locks[4200], shards[4200];
  snprintf(locks, sizeof locks, "%s/locks", root);
  snprintf(shards, sizeof shards, "%s/shards", root);
  bc__env *env = NULL;
  bool fresh = false;
  int rc = bc__env_acquire(&env, locks, 0644, &fresh);
  if (rc != 0) return rc;
  MDB_txn *t = NULL;
  rc = bc__txn_begin(env, true, &t);
  if (rc == 0) {
    *bytes = cu_dir_bytes(shards, NULL);
    mdb_txn_abort(t);
  }
  bc__env_release(env);
  return rc;
}

/* A child: opens the root, reads `reads` random records, checks each. */
static int child(fixture *f, const plan *p, int id) {
  report *r = &f->reports[id];
  bc_cache *c = NULL;
  bc_buf b = BC_BUF_INIT;
  int code = 1;
  int rc = cu_open(&c, f->root, &p->cfg, f->sh, &p->opts);
  if (rc != 0) {
    snprintf(r->error, sizeof r->error, "open: %s", bc_errmsg());
    goto cleanup;
  }
  uint64_t seed = 1000 + (uint64_t)id;
  for (int k = 0; k < p->reads; k++) {
    int64_t i = (int64_t)(cu_rand(&seed) % p->cfg.n);
    rc = cu_get_cmp(c, i, p->cfg.fixed, &b);
    if (rc != 0) {
      snprintf(r->error, sizeof r->error, "record %lld: %s", (long long)i,
               rc == 1 ? "differs from the model" : bc_errmsg());
      goto cleanup;
    }
    if (p->sample) {
      uint64_t bytes = 0;
      if ((rc = locked_dir_bytes(f->root, &bytes)) != 0) {
        snprintf(r->error, sizeof r->error, "lock: %s", bc_errmsg());
        goto cleanup;
      }
      if (bytes > r->max_sampled) r->max_sampled = bytes;
      bc_cache_stats st;
      if (bc_cache_stats_get(c, &st) != 0 ||
          st.bytes_on_disk > p->opts.disk_limit ||
          bytes > p->opts.disk_limit) {
        snprintf(r->error, sizeof r->error,
                 "after read %d: %llu bytes in shards/, limit %llu", k,
                 (unsigned long long)bytes,
                 (unsigned long long)p->opts.disk_limit);
        goto cleanup;
      }
    }
  }
  if (bc_cache_stats_get(c, &r->st) != 0) {
    snprintf(r->error, sizeof r->error, "stats: %s", bc_errmsg());
    goto cleanup;
  }
  code = 0;
cleanup:
  bc_buf_release(&b);
  bc_cache_close(c);
  return code;
}

/* Forks NPROC children running the plan at once; fails unless all of them
 * exit 0. */
static void run_children(fixture *f, const plan *p) {
  pid_t pids[NPROC];
  memset(f->reports, 0, NPROC * sizeof(report));
  for (int id = 0; id < NPROC; id++) {
    pids[id] = fork();
    assert_true(pids[id] >= 0);
    if (pids[id] == 0) _exit(child(f, p, id));
  }
  for (int id = 0; id < NPROC; id++) {
    int status = 0;
    assert_int_equal(waitpid(pids[id], &status, 0), pids[id]);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      fail_msg("child %d: status %#x: %s", id, (unsigned)status,
               f->reports[id].error);
  }
}

static void test_processes_fill_each_shard_once(void **state) {
  fixture *f = *state;
  plan p;
  p.cfg = ts_config_default(400);
  p.cfg.delay_us = 20; /* fills take long enough to overlap */
  p.opts = (bc_cache_options)BC_CACHE_OPTIONS_INIT;
  p.opts.shard_records = 10;
  p.opts.prefetch_shards = -1;
  p.reads = CU_SANITIZED ? 60 : 150;
  p.sample = false;
  f->sh = ts_shared_new(&p.cfg);
  assert_non_null(f->sh);
  run_children(f, &p);

  uint64_t fills = 0;
  for (int id = 0; id < NPROC; id++) {
    const bc_cache_stats *st = &f->reports[id].st;
    assert_int_equal(st->regenerations, 0);
    assert_int_equal(st->evictions, 0);
    fills += st->fills + st->shards_kept; /* (kept on a pass's way: published) */
  }
  /* Each shard was produced by the source whole or not at all: filled
   * once (by one process), or read whole again by a pass of another
   * process crossing it to reach a later shard, which compares stored
   * records with their checksum (doc/cache.md, "The determinism check"). */
  uint64_t shards_touched = 0, produced = 0;
  for (uint64_t s = 0; s < 40; s++) {
    uint32_t first = atomic_load(&f->sh->per_record[s * 10]);
    for (uint64_t i = s * 10; i < s * 10 + 10; i++)
      if (atomic_load(&f->sh->per_record[i]) != first)
        fail_msg("record %llu produced %u times, its shard's first %u",
                 (unsigned long long)i, atomic_load(&f->sh->per_record[i]), first);
    shards_touched += first > 0;
    produced += 10 * (uint64_t)first;
  }
  /* Filled once each: every shard produced is present, and published by
   * exactly one fill. */
  size_t files = 0;
  cu_dir_bytes(f->shards, &files);
  assert_int_equal(fills, shards_touched);
  assert_int_equal(files, shards_touched);
  assert_int_equal(atomic_load(&f->sh->produced), produced);
  assert_int_equal(atomic_load(&f->sh->overlaps), 0);

  /* The parent sees the same shards, all complete. */
  bc_cache *c = NULL;
  bc_cache_options o = p.opts;
  CU_OK(bc_cache_open(&c, f->root, NULL, &o));
  bc_cache_stats st;
  CU_OK(bc_cache_stats_get(c, &st));
  assert_int_equal(st.shards_present, fills);
  assert_int_equal(st.bytes_on_disk, cu_dir_bytes(f->shards, NULL));
  cu_check_shards(f->root, false, false);
  uint64_t bad = 0;
  CU_OK(bc_cache_verify(c, &bad));
  bc_cache_close(c);
}

static void test_processes_under_limit(void **state) {
  fixture *f = *state;
  uint64_t *sizes = cu_shard_sizes(200, 10, true);
  plan p;
  p.cfg = ts_config_default(200);
  p.cfg.fixed = true;
  p.cfg.delay_us = 10;
  p.opts = (bc_cache_options)BC_CACHE_OPTIONS_INIT;
  p.opts.shard_records = 10;
  p.opts.prefetch_shards = -1;
  p.opts.max_open_shards = 2;
  p.opts.disk_limit = 4 * sizes[0] + sizes[0] / 2; /* four of twenty shards */
  p.reads = CU_SANITIZED ? 40 : 100;
  p.sample = true;
  f->sh = ts_shared_new(&p.cfg);
  assert_non_null(f->sh);
  run_children(f, &p);
  uint64_t evictions = 0, regenerations = 0;
  for (int id = 0; id < NPROC; id++) {
    evictions += f->reports[id].st.evictions;
    regenerations += f->reports[id].st.regenerations;
    assert_true(f->reports[id].max_sampled <= p.opts.disk_limit);
  }
  assert_true(evictions > 0);
  assert_true(regenerations > 0);
  assert_true(cu_dir_bytes(f->shards, NULL) <= p.opts.disk_limit);
  cu_check_shards(f->root, true, false);
  bc_cache *c = NULL;
  CU_OK(bc_cache_open(&c, f->root, NULL, &p.opts));
  bc_cache_stats st;
  CU_OK(bc_cache_stats_get(c, &st));
  assert_int_equal(st.bytes_on_disk, cu_dir_bytes(f->shards, NULL));
  uint64_t bad = 0;
  CU_OK(bc_cache_verify(c, &bad));
  bc_cache_close(c);
  free(sizes);
}

/* Eight processes create one root at once, each estimating the shard
 * length from the source: they agree on the one recorded. */
static void test_processes_create_with_estimate(void **state) {
  fixture *f = *state;
  plan p;
  p.cfg = ts_config_default(300);
  p.opts = (bc_cache_options)BC_CACHE_OPTIONS_INIT;
  p.opts.shard_bytes = 600;
  p.opts.prefetch_shards = -1;
  p.reads = 30;
  p.sample = false;
  f->sh = ts_shared_new(&p.cfg);
  assert_non_null(f->sh);
  run_children(f, &p);
  uint64_t r = f->reports[0].st.shard_records;
  assert_true(r > 1);
  for (int id = 1; id < NPROC; id++)
    assert_int_equal(f->reports[id].st.shard_records, r);
  CU_OK(bc_cache_open(&f->c, f->root, NULL, &p.opts));
  bc_cache_stats st;
  CU_OK(bc_cache_stats_get(f->c, &st));
  assert_int_equal(st.shard_records, r);
  cu_check_shards(f->root, false, false);
  bc_cache_shard list[300];
  size_t n = 0;
  CU_OK(bc_cache_shards(f->c, list, 300, &n));
  for (size_t k = 0; k < n && k < 300; k++) {
    assert_int_equal(list[k].start % r, 0);
    assert_true(list[k].end - list[k].start <= r);
  }
}

/* Another process evicts a shard this one has open: when a use more than
 * a second later bumps the access clock (within 16 reads of the thread),
 * the reader is dropped (that read may still come from the old mapping,
 * same bytes), the read after it regenerates the shard, and the deleted
 * file is no longer held. */
static void test_evicted_elsewhere_released(void **state) {
  fixture *f = *state;
  uint64_t *sizes = cu_shard_sizes(100, 10, true);
  ts_config cfg = ts_config_default(100);
  cfg.fixed = true;
  f->sh = ts_shared_new(&cfg);
  assert_non_null(f->sh);
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = 10;
  o.prefetch_shards = -1;
  o.disk_limit = 3 * sizes[0] + sizes[0] / 2;
  free(sizes);
  CU_OK(cu_open(&f->c, f->root, &cfg, f->sh, &o));
  bc_buf b = BC_BUF_INIT;
  int rc = cu_get_cmp(f->c, 5, true, &b);
  assert_int_equal(rc, 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    bc_cache *c = NULL;
    bc_buf cb = BC_BUF_INIT;
    int code = cu_open(&c, f->root, &cfg, f->sh, &o) != 0;
    for (int64_t i = 15; code == 0 && i < 60; i += 10)
      code = cu_get_cmp(c, i, true, &cb) != 0;
    bc_buf_release(&cb);
    bc_cache_close(c);
    _exit(code);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  char *zero = cu_path(f->shards, "0.10.bag");
  struct stat sb;
  assert_int_not_equal(stat(zero, &sb), 0); /* evicted by the child */
  free(zero);
  struct timespec pause = {1, 200 * 1000 * 1000};
  nanosleep(&pause, NULL);
  /* A thread reads the clock once every 16 of its hits: the eviction is
   * noticed within 16 reads, and the read after that regenerates. */
  bc_cache_stats st;
  int reads = 0;
  do {
    rc = cu_get_cmp(f->c, 6, true, &b);
    CU_OK(bc_cache_stats_get(f->c, &st));
    reads++;
  } while (rc == 0 && st.regenerations == 0 && reads < 40);
  bc_buf_release(&b);
  assert_int_equal(rc, 0);
  assert_int_equal(st.regenerations, 1);
  assert_true(reads <= 17);
  assert_int_equal(cu_deleted_held(f->shards), 0);
}

/* A child process fills shard 0 slowly: the parent's bc_cache_try_get of a
 * record in it is BC_EAGAIN at once (naming the filler), where
 * bc_cache_get would poll the child's claim; after the child is done the
 * record is read from the child's shard, not filled again. */
static void test_try_get_with_another_process_filling(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(40);
  cfg.delay_us = 20 * 1000; /* a shard of 20 records: 0.4 s */
  f->sh = ts_shared_new(&cfg);
  assert_non_null(f->sh);
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = 20;
  o.prefetch_shards = -1;
  CU_OK(cu_open(&f->c, f->root, &cfg, f->sh, &o));
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    bc_cache *c = NULL;
    bc_buf cb = BC_BUF_INIT;
    int code = cu_open(&c, f->root, &cfg, f->sh, &o) != 0;
    if (code == 0) code = cu_get_cmp(c, 0, false, &cb) != 0;
    bc_buf_release(&cb);
    bc_cache_close(c);
    _exit(code);
  }
  struct timespec tick = {0, 1000 * 1000};
  while (atomic_load(&f->sh->produced) == 0) nanosleep(&tick, NULL);
  bc_buf b = BC_BUF_INIT;
  CU_RC(bc_cache_try_get(f->c, 5, &b), BC_EAGAIN);
  char want[64];
  snprintf(want, sizeof want, "being filled by process %d", (int)pid);
  assert_non_null(strstr(bc_errmsg(), want));
  assert_true(atomic_load(&f->sh->produced) < 20);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CU_OK(bc_cache_try_get(f->c, 5, &b));
  assert_true(ts_matches(5, false, &b));
  bc_buf_release(&b);
  assert_int_equal(atomic_load(&f->sh->opens), 1); /* the child's pass only */
}

/* A cache opened before fork() and used by the children (as a data loader
 * forking its workers does): the state is reopened in each child, and each
 * child is its own claimant, so shards are still filled once and every
 * read is right. */
static int inherited_child(fixture *f, bc_cache *c, int id, int reads,
                           uint64_t n) {
  report *r = &f->reports[id];
  bc_buf b = BC_BUF_INIT;
  int code = 1;
  uint64_t seed = 2000 + (uint64_t)id;
  for (int k = 0; k < reads; k++) {
    int64_t i = (int64_t)(cu_rand(&seed) % n);
    int rc = cu_get_cmp(c, i, false, &b);
    if (rc != 0) {
      snprintf(r->error, sizeof r->error, "record %lld: %s", (long long)i,
               rc == 1 ? "differs from the model" : bc_errmsg());
      goto cleanup;
    }
  }
  if (bc_cache_stats_get(c, &r->st) != 0) goto cleanup;
  code = 0;
cleanup:
  bc_buf_release(&b);
  return code;
}

static void test_cache_inherited_across_fork(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(400);
  cfg.delay_us = 20;
  f->sh = ts_shared_new(&cfg);
  assert_non_null(f->sh);
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = 10;
  o.prefetch_shards = -1; /* no worker threads to lose in the fork */
  CU_OK(cu_open(&f->c, f->root, &cfg, f->sh, &o));
  bc_buf b = BC_BUF_INIT;
  assert_int_equal(cu_get_cmp(f->c, 0, false, &b), 0); /* shard 0 in the parent */
  bc_buf_release(&b);
  memset(f->reports, 0, NPROC * sizeof(report));
  pid_t pids[NPROC];
  int reads = CU_SANITIZED ? 60 : 150;
  for (int id = 0; id < NPROC; id++) {
    pids[id] = fork();
    assert_true(pids[id] >= 0);
    if (pids[id] == 0) _exit(inherited_child(f, f->c, id, reads, 400));
  }
  int failed = 0;
  char first[300] = "";
  for (int id = 0; id < NPROC; id++) {
    int status = 0;
    assert_int_equal(waitpid(pids[id], &status, 0), pids[id]);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      if (failed++ == 0)
        snprintf(first, sizeof first, "child %d: status %#x: %s", id,
                 (unsigned)status, f->reports[id].error);
    }
  }
  if (failed) fail_msg("%d of %d children failed; %s", failed, NPROC, first);
  /* Every shard filled once (a pass of another process crossing a
   * shard reads it again, to compare it with its checksum: counts of
   * records produced do not tell fills apart). */
  bc_cache_stats st;
  CU_OK(bc_cache_stats_get(f->c, &st));
  uint64_t fills = st.fills + st.shards_kept;
  for (int id = 0; id < NPROC; id++) {
    const bc_cache_stats *c = &f->reports[id].st;
    assert_int_equal(c->regenerations, 0);
    /* (The child's copy counts the parent's too; shards kept on a pass's
     * way are published as the fills are.) */
    fills += c->fills + c->shards_kept - st.fills - st.shards_kept;
  }
  size_t files = 0;
  cu_dir_bytes(f->shards, &files);
  assert_int_equal(fills, files);
  assert_int_equal(st.bytes_on_disk, cu_dir_bytes(f->shards, NULL));
  cu_check_shards(f->root, false, false);
}

int main(void) {
  bc_set_notice_handler(NULL, NULL);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_processes_fill_each_shard_once,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_processes_under_limit, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_processes_create_with_estimate,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_cache_inherited_across_fork, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_try_get_with_another_process_filling,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_evicted_elsewhere_released, setup,
                                      teardown),
  };
  return cmocka_run_group_tests_name("cache processes", tests, NULL, NULL);
}
