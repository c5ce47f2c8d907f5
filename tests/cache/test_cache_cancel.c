/*
 * tests/cache/test_cache_cancel.c - the interrupt handler and callback-error
 * payloads on a cache (also run under ThreadSanitizer):
 *   - a deadline handler ends a wait for another thread's slow fill with
 *     BC_ECANCELED, while that fill goes on and publishes;
 *   - a handler ends the thread's own fill: its claim and scratch file go,
 *     and a later call fills the shard again, right;
 *   - a handler that never fires (or none) changes nothing;
 *   - a fill a handler abandoned is retried, not reported, by the threads
 *     that waited for it;
 *   - a source failure's payload reaches the filler and every thread that
 *     waited for that fill, counted so that every reference is released;
 *   - a handler ends bc_cache_get_many's wait for the worker pool;
 *   - a deadline ends the polling of another process's claim;
 *   - a deadline ends an open's wait for another process's gate
 *     (locks/gate, held while it opens the state or clears the root);
 *   - bc_cache_close interrupted while it waits for a worker stuck in the
 *     source abandons that fill and completes.
 *
 * Worker threads never call cmocka: they record what happened and the main
 * thread checks it.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fixture.h"

/* An error object a failing source attaches to its failure (the payload):
 * reference-counted, like a binding's exception object. */
typedef struct {
  atomic_int refs;
  int id;
} err_obj;

static void err_retain(void *p) { atomic_fetch_add(&((err_obj *)p)->refs, 1); }
static void err_release(void *p) { atomic_fetch_sub(&((err_obj *)p)->refs, 1); }

/* The test source (source.h) of n records, thread-safe, delay_us a record. */
static ts_config slow_source(uint64_t n, unsigned delay_us) {
  ts_config cfg = ts_config_default(n);
  cfg.thread_safe = true;
  cfg.delay_us = delay_us;
  return cfg;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The interrupt handler of a deadline (seconds, CLOCK_MONOTONIC). */
typedef struct {
  double at;
  atomic_int calls;
} deadline;

static int past_deadline(void *ctx) {
  deadline *d = ctx;
  atomic_fetch_add(&d->calls, 1);
  return now() >= d->at;
}

static int never(void *ctx) {
  atomic_fetch_add(&((deadline *)ctx)->calls, 1);
  return 0;
}

static void open_cache(fixture *f, const ts_config *cfg, int workers, int prefetch) {
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = 100;
  o.fill_workers = workers;
  o.prefetch_shards = prefetch;
  fx_open(f, cfg, &o);
}

/* Entries of ROOT/sub (scratch files, shards). */
static size_t count_in(const fixture *f, const char *sub) {
  char *dir = cu_path(f->root, sub);
  size_t n = cu_dir_count(dir);
  free(dir);
  return n;
}

/* A thread that reads one record and keeps the outcome. */
typedef struct {
  bc_cache *c;
  int64_t index;
  int rc;
  char msg[256];
  void *payload; /* bc_error_payload() after the failure (retained) */
  pthread_t t;
} getter;

static void *getter_main(void *arg) {
  getter *g = arg;
  bc_buf buf = BC_BUF_INIT;
  g->rc = bc_cache_get(g->c, g->index, &buf);
  if (g->rc != 0) {
    snprintf(g->msg, sizeof g->msg, "%s", bc_errmsg());
    g->payload = bc_error_payload();
    if (g->payload != NULL) err_retain(g->payload);
  }
  bc_error_clear();
  bc_buf_release(&buf);
  return NULL;
}

static void getter_start(getter *g, bc_cache *c, int64_t index) {
  memset(g, 0, sizeof *g);
  g->c = c;
  g->index = index;
  assert_int_equal(pthread_create(&g->t, NULL, getter_main, g), 0);
}

/* Waits (up to 10 s) until the source produced `n` records. */
static void wait_produced(ts_shared *sh, uint64_t n) {
  double until = now() + 10;
  while (atomic_load(&sh->produced) < n && now() < until) usleep(1000);
  assert_true(atomic_load(&sh->produced) >= n);
}

/* ---- tests -------------------------------------------------------------- */

static void test_deadline_ends_a_wait_for_another_threads_fill(void **state) {
  fixture *f = *state;
  ts_config cfg = slow_source(300, 5000); /* 5 ms a record: 0.5 s a shard */
  open_cache(f, &cfg, 1, -1);
  getter g;
  getter_start(&g, f->c, 0); /* fills shard 0 */
  wait_produced(f->sh, 2);
  double start = now();
  deadline d = {start + 0.1, 0};
  bc_interrupt_handler prev = bc_set_interrupt_handler(past_deadline, &d);
  assert_null(prev.fn);
  bc_buf buf = BC_BUF_INIT;
  CU_RC(bc_cache_get(f->c, 50, &buf), BC_ECANCELED);
  double took = now() - start;
  bc_interrupt_handler mine = bc_set_interrupt_handler(prev.fn, prev.ctx);
  assert_ptr_equal(mine.fn, past_deadline);
  assert_ptr_equal(mine.ctx, &d);
  assert_true(atomic_load(&d.calls) >= 1);
  /* Before the fill it waited for ended (it has 98 more records at 5 ms). */
  assert_true(took < 0.4);
  /* The other thread's fill went on, and published. */
  assert_int_equal(pthread_join(g.t, NULL), 0);
  if (g.rc != 0) fail_msg("the filler failed: %s", g.msg);
  fx_get_ok(f->c, 50);
  assert_int_equal(fx_stats(f->c).fills, 1);
  assert_int_equal(atomic_load(&f->sh->produced), 100);
  bc_buf_release(&buf);
}

static void test_handler_abandons_the_threads_own_fill(void **state) {
  fixture *f = *state;
  ts_config cfg = slow_source(300, 2000); /* 2 ms a record */
  open_cache(f, &cfg, 1, -1);
  deadline d = {now() + 0.05, 0};
  bc_set_interrupt_handler(past_deadline, &d);
  bc_buf buf = BC_BUF_INIT;
  CU_RC(bc_cache_get(f->c, 150, &buf), BC_ECANCELED);
  bc_set_interrupt_handler(NULL, NULL);
  /* Stopped in the middle of shard 0's records (kept on the way to shard
   * 1): nothing published, no scratch file left, no claim on either (the
   * refill below would wait for it). */
  uint64_t produced = atomic_load(&f->sh->produced);
  assert_true(produced < 100);
  assert_int_equal(count_in(f, "scratch"), 0);
  assert_int_equal(count_in(f, "shards"), 0);
  atomic_store(&f->sh->no_delay, true);
  for (int64_t i = 100; i < 200; i++) fx_get_ok(f->c, i);
  assert_int_equal(fx_stats(f->c).fills, 1);
  assert_int_equal(fx_stats(f->c).shards_kept, 1);
  assert_int_equal(count_in(f, "shards"), 2);
  bc_buf_release(&buf);
}

static void test_no_handler_or_a_quiet_one_changes_nothing(void **state) {
  fixture *f = *state;
  ts_config cfg = slow_source(250, 100);
  open_cache(f, &cfg, 1, -1);
  getter g;
  getter_start(&g, f->c, 10); /* another thread's fill to wait for */
  wait_produced(f->sh, 1);
  deadline d = {0, 0};
  bc_set_interrupt_handler(never, &d);
  for (int64_t i = 0; i < 250; i += 7) fx_get_ok(f->c, i);
  bc_set_interrupt_handler(NULL, NULL);
  assert_int_equal(pthread_join(g.t, NULL), 0);
  assert_int_equal(g.rc, 0);
  assert_true(atomic_load(&d.calls) >= 1); /* polled, said go on */
  for (int64_t i = 249; i >= 0; i -= 5) fx_get_ok(f->c, i);
  bc_buf buf = BC_BUF_INIT;
  CU_RC(bc_cache_get(f->c, 250, &buf), BC_ERANGE);
  assert_int_equal(fx_stats(f->c).fills, 3);
  bc_buf_release(&buf);
}

/* The filler's handler fires; the thread that waited for its fill is not
 * interrupted: it fills the shard itself. */
typedef struct {
  getter g;
  deadline d;
} interrupted_getter;

static void *interrupted_main(void *arg) {
  interrupted_getter *ig = arg;
  bc_set_interrupt_handler(past_deadline, &ig->d);
  getter_main(&ig->g);
  bc_set_interrupt_handler(NULL, NULL);
  return NULL;
}

static void test_waiters_refill_a_fill_its_thread_abandoned(void **state) {
  fixture *f = *state;
  ts_config cfg = slow_source(300, 3000);
  open_cache(f, &cfg, 1, -1);
  interrupted_getter ig;
  memset(&ig, 0, sizeof ig);
  ig.g.c = f->c;
  ig.g.index = 0;
  ig.d.at = now() + 0.15;
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, interrupted_main, &ig), 0);
  wait_produced(f->sh, 2);
  getter waiter;
  getter_start(&waiter, f->c, 20); /* waits for that fill */
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_int_equal(ig.g.rc, BC_ECANCELED);
  assert_int_equal(pthread_join(waiter.t, NULL), 0);
  if (waiter.rc != 0) fail_msg("the waiter failed: %s", waiter.msg);
  atomic_store(&f->sh->no_delay, true);
  for (int64_t i = 0; i < 100; i += 9) fx_get_ok(f->c, i);
  assert_int_equal(fx_stats(f->c).fills, 1);
}

static void test_payload_reaches_every_waiter(void **state) {
  fixture *f = *state;
  ts_config cfg = slow_source(300, 0);
  err_obj err = {0, 42};
  cfg.fail_at = 60;
  cfg.fail_times = -1; /* every pass fails there */
  cfg.fail_payload = &err;
  cfg.payload_retain = err_retain;
  cfg.payload_release = err_release;
  cfg.block_at = 30; /* the filler waits there until the others wait */
  open_cache(f, &cfg, 1, -1);
  atomic_store(&f->sh->hold, true);
  getter filler, waiters[3];
  getter_start(&filler, f->c, 5);
  while (!atomic_load(&f->sh->held)) usleep(1000);
  for (int k = 0; k < 3; k++) getter_start(&waiters[k], f->c, 10 + k);
  usleep(100 * 1000); /* they wait for the fill (or have not started) */
  atomic_store(&f->sh->hold, false);
  getter *all[4] = {&filler, &waiters[0], &waiters[1], &waiters[2]};
  for (int k = 0; k < 4; k++) {
    assert_int_equal(pthread_join(all[k]->t, NULL), 0);
    assert_int_equal(all[k]->rc, BC_ESOURCE);
    assert_non_null(strstr(all[k]->msg, "failure at record 60"));
    assert_ptr_equal(all[k]->payload, &err);
    err_release(&err); /* the getter's own */
  }
  /* Every holder let go: the failing thread's error, the fill's record,
   * the waiters' errors. */
  assert_int_equal(atomic_load(&err.refs), 0);
  /* This thread: a failure with a payload, cleared by the next message. */
  bc_buf buf = BC_BUF_INIT;
  CU_RC(bc_cache_get(f->c, 70, &buf), BC_ESOURCE);
  assert_ptr_equal(bc_error_payload(), &err);
  assert_int_equal(atomic_load(&err.refs), 1);
  bc_set_errmsg(BC_EINVAL, "another failure");
  assert_null(bc_error_payload());
  assert_int_equal(atomic_load(&err.refs), 0);
  bc_buf_release(&buf);
}

static void test_handler_ends_a_wait_for_the_pool(void **state) {
  fixture *f = *state;
  ts_config cfg = slow_source(800, 3000); /* 0.3 s a shard */
  open_cache(f, &cfg, 1, -1);
  /* Tasks of 64 indices (batch.c), each in a shard of its own: the first
   * runs in this thread, and once it has taken 0.3 s the rest go to the
   * pool, whose helpers fill shards while this thread waits for them. */
  enum { N = 8 * 64 };
  int64_t *idx = calloc(N, sizeof *idx);
  bc_buf *outs = calloc(N, sizeof *outs);
  assert_non_null(idx);
  assert_non_null(outs);
  for (int p = 0; p < N; p++) idx[p] = 100 * (p / 64) + p % 64;
  double start = now();
  deadline d = {start + 0.45, 0};
  bc_set_interrupt_handler(past_deadline, &d);
  int rc = bc_seq_get_many(bc_cache_seq(f->c), idx, N, outs);
  bc_set_interrupt_handler(NULL, NULL);
  double took = now() - start;
  CU_RC(rc, BC_ECANCELED);
  assert_true(took < 1.5); /* 8 shards at 0.3 s: 2.4 s in one thread */
  assert_int_equal(count_in(f, "scratch"), 0);
  atomic_store(&f->sh->no_delay, true);
  CU_OK(bc_seq_get_many(bc_cache_seq(f->c), idx, N, outs));
  for (int p = 0; p < N; p++) {
    assert_true(ts_matches((uint64_t)idx[p], false, &outs[p]));
    bc_buf_release(&outs[p]);
  }
  free(idx);
  free(outs);
}

static void test_interrupted_close_abandons_a_stuck_worker(void **state) {
  fixture *f = *state;
  ts_config cfg = slow_source(300, 0);
  cfg.block_at = 150;
  f->sh = ts_shared_new(&cfg);
  assert_non_null(f->sh);
  atomic_store(&f->sh->hold, true);
  open_cache(f, &cfg, 1, 1); /* prefetch: the worker goes for shard 1, and blocks */
  fx_get_ok(f->c, 5);
  double until = now() + 10;
  while (!atomic_load(&f->sh->held) && now() < until) usleep(1000);
  assert_true(atomic_load(&f->sh->held));
  bc_seq *hold = bc_seq_ref(bc_cache_seq(f->c));
  deadline d = {now() + 0.1, 0};
  bc_set_interrupt_handler(past_deadline, &d);
  bc_cache_close(f->c); /* returns: the stuck fill is abandoned */
  bc_set_interrupt_handler(NULL, NULL);
  f->c = NULL;
  assert_true(atomic_load(&d.calls) >= 1);
  /* Its claim is gone: another handle fills shard 1 at once. */
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.prefetch_shards = -1;
  ts_config other = slow_source(300, 0); /* same records, never blocks */
  CU_OK(cu_open(&f->c2, f->root, &other, f->sh, &o));
  for (int64_t i = 100; i < 200; i += 11) fx_get_ok(f->c2, i);
  bc_cache_close(f->c2);
  f->c2 = NULL;
  assert_int_equal(atomic_load(&f->sh->frees), 1); /* c2's */
  atomic_store(&f->sh->hold, false); /* the worker ends, drops its ref */
  bc_seq_unref(hold);
  until = now() + 10;
  while (atomic_load(&f->sh->frees) < 2 && now() < until) usleep(1000);
  assert_int_equal(atomic_load(&f->sh->frees), 2);
  assert_int_equal(count_in(f, "scratch"), 0);
}

static void test_deadline_ends_a_wait_for_another_process(void **state) {
  fixture *f = *state;
  ts_config cfg = slow_source(300, 5000); /* 0.5 s a shard */
  f->sh = ts_shared_new(&cfg); /* shared with the child: it counts there */
  assert_non_null(f->sh);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) { /* the child fills shard 0, slowly */
    open_cache(f, &cfg, 1, -1);
    bc_buf buf = BC_BUF_INIT;
    int rc = bc_cache_get(f->c, 0, &buf);
    bc_buf_release(&buf);
    bc_cache_close(f->c);
    _exit(rc == 0 ? 0 : 1);
  }
  double until = now() + 10;
  while (count_in(f, "scratch") == 0 && now() < until) usleep(1000);
  assert_true(count_in(f, "scratch") > 0); /* its claim is made */
  open_cache(f, &cfg, 1, -1);
  double start = now();
  deadline d = {start + 0.1, 0};
  bc_set_interrupt_handler(past_deadline, &d);
  bc_buf buf = BC_BUF_INIT;
  int rc = bc_cache_get(f->c, 50, &buf);
  bc_set_interrupt_handler(NULL, NULL);
  double took = now() - start;
  CU_RC(rc, BC_ECANCELED);
  assert_true(took < 0.4); /* before the child's fill ended */
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  fx_get_ok(f->c, 50); /* the child's shard */
  assert_int_equal(fx_stats(f->c).fills, 0);
  assert_int_equal(atomic_load(&f->sh->produced), 100); /* the child's fill only */
  bc_buf_release(&buf);
}

/* Another process holds locks/gate (as while it validates data.mdb at its
 * open, or deletes the root in bc_cache_clear): an open waits for it, and
 * the interrupt handler ends that wait with BC_ECANCELED.  It used to be a
 * blocking flock(2), not interruptible: the open returned only once the
 * holder let go (here after 5 s, or when told). */
static void test_deadline_ends_a_wait_for_the_gate(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(100);
  open_cache(f, &cfg, 1, -1); /* the root and its locks/ exist */
  bc_cache_close(f->c);
  f->c = NULL;
  char *locks = cu_path(f->root, "locks");
  char *gate = cu_path(locks, "gate");
  int held[2], go[2];
  assert_int_equal(pipe(held), 0);
  assert_int_equal(pipe(go), 0);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) { /* holds the gate until told, 5 s at most */
    int fd = open(gate, O_RDWR);
    char b = fd >= 0 && flock(fd, LOCK_EX) == 0 ? 'y' : 'n';
    if (write(held[1], &b, 1) != 1) _exit(1);
    struct pollfd p = {go[0], POLLIN, 0};
    poll(&p, 1, 5000);
    _exit(b == 'y' ? 0 : 1);
  }
  char b = 0;
  assert_int_equal(read(held[0], &b, 1), 1);
  assert_int_equal(b, 'y');
  deadline d = {now() + 0.1, 0};
  bc_set_interrupt_handler(past_deadline, &d);
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = 100;
  bc_cache *c = NULL;
  int rc = cu_open(&c, f->root, &cfg, f->sh, &o);
  bc_set_interrupt_handler(NULL, NULL);
  b = 'g';
  assert_int_equal(write(go[1], &b, 1), 1); /* (before any assertion) */
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  assert_null(c);
  CU_RC(rc, BC_ECANCELED);
  assert_true(atomic_load(&d.calls) > 1); /* polled while it waited */
  /* The gate free, the open goes through, and the root is as it was. */
  open_cache(f, &cfg, 1, -1);
  fx_get_ok(f->c, 0);
  for (int i = 0; i < 2; i++) {
    close(held[i]);
    close(go[i]);
  }
  free(gate);
  free(locks);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_deadline_ends_a_wait_for_another_threads_fill,
                                      fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_handler_abandons_the_threads_own_fill,
                                      fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_no_handler_or_a_quiet_one_changes_nothing,
                                      fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_waiters_refill_a_fill_its_thread_abandoned,
                                      fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_payload_reaches_every_waiter, fx_setup,
                                      fx_teardown),
      cmocka_unit_test_setup_teardown(test_handler_ends_a_wait_for_the_pool, fx_setup,
                                      fx_teardown),
      cmocka_unit_test_setup_teardown(test_interrupted_close_abandons_a_stuck_worker,
                                      fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_deadline_ends_a_wait_for_the_gate, fx_setup,
                                      fx_teardown),
      cmocka_unit_test_setup_teardown(test_deadline_ends_a_wait_for_another_process,
                                      fx_setup, fx_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
