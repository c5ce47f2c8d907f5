/*
 * The process-wide worker pool behind every batch operation.
 *
 * A caller publishes a job (a task function and a task count) on the pool's
 * queue, wakes helpers, and works on the job itself.  Tasks are claimed with
 * an atomic counter, so they are started in increasing order and each runs
 * exactly once.  At most max_parallelism - 1 pool threads join one job.
 * When the caller runs out of tasks it unlinks the job (no new helpers can
 * join) and waits until the helpers that joined have finished their tasks.
 *
 * Fanning out costs the caller a wake-up and, when a helper joined, a wait
 * for it: a few microseconds on an idle machine, and up to a scheduler
 * time slice where the CPUs are busy (a helper preempted in the middle of
 * its task holds the caller until it runs again).  A batch of records
 * already in the page cache reads in less than that.  So the caller first
 * runs tasks itself, timing them, and publishes the job only once the
 * tasks left would take at least FANOUT_MIN_NS at the pace of the FASTEST
 * task so far, and at least FANOUT_MIN_TIMED tasks were timed: a task
 * that was preempted (milliseconds on a loaded machine) says nothing of
 * the work, and with the mean pace it made page-cache batches fan out on
 * every preemption and lose up to 2x in wall time (doc/performance.md).
 * Cheap jobs never wake anyone; slow ones (cold reads, decompression of
 * large records) fan out after their second task.  300 us, not less:
 * on this 2-CPU machine, shared with other work, a fan-out cost about
 * 100 us of wall time per batch (the wake-ups, the wait for a helper that
 * lost its CPU), and batches of 1 KiB zstd records (a few hundred us)
 * that fanned out at 150 us ran 9-29% slower than on one thread.
 * Helpers are woken one at a time (worker_main).
 *
 * Helpers run no code that may block for an unbounded time: a task that
 * would have to run the user's source (a cache fill, which may sleep for
 * an hour and cannot be interrupted in a thread other than the main one)
 * gives itself back (bc__pool_give_back) and the caller runs it after the
 * helpers are done, in its own thread, where its interrupt handler
 * reaches it.  So the caller's wait for helpers is always short, and an
 * interrupt of the caller stops the whole job (issue 25).
 *
 * Threads are created lazily, never destroyed (they sleep on a condition
 * variable), and grown to the largest parallelism asked for (up to
 * MAX_THREADS).  After fork() the child has none of them: an atfork handler
 * resets the pool so the child grows a new one on first use.
 *
 * Lock order: pool.lock is the only lock; task functions run without it.
 */
#include "config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/internal.h"

#define MAX_THREADS 256
/* Work left, in nanoseconds at the pace of the tasks run so far, below
 * which the caller does it alone (see above). */
#define FANOUT_MIN_NS 300000.0
/* Tasks timed before the caller may fan out (see above). */
#define FANOUT_MIN_TIMED 2

typedef struct job {
  bc__task_fn fn;
  void *arg;
  size_t ntasks;
  atomic_size_t next;     /* next task number to claim */
  size_t helpers_allowed; /* pool threads that may still join */
  size_t active_helpers;  /* pool threads working on it (pool.lock) */
  bool linked;            /* on the queue (pool.lock) */
  pthread_cond_t helpers_done;
  /* The lowest failing task and its error (pool.lock). */
  size_t err_task;
  bc_error_state err;
  /* The caller has an interrupt handler: helpers poll `cancelled` as
   * theirs, which is set when the caller's fires (or a task was
   * interrupted), so the whole job stops promptly. */
  bool hooked;
  atomic_bool cancelled;
  /* Tasks helpers gave back (bc__pool_give_back): back[t] (pool.lock;
   * allocated at the first), run by the caller after the join. */
  bool *back;
  size_t nback;
  /* The fastest task's time in the caller's first tasks (ns). */
  double pace_ns;
  struct job *next_job;
} job;

/* This thread is a pool thread working on a job's task; the task gave
 * itself back (bc__pool_give_back). */
static _Thread_local bool in_helper, gave_back;

bool bc__pool_helper(void) { return in_helper; }

int bc__pool_give_back(const char *what) {
  gave_back = true;
  return bc__error(BC_EAGAIN, "%s: left to the caller of the batch", what);
}

static struct {
  pthread_mutex_t lock;
  pthread_cond_t work; /* signalled when a job is queued */
  job *queue;          /* jobs that still accept helpers */
  size_t nthreads;
  size_t idle;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, 0};

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* In the child only the forking thread exists: forget the old workers and
 * any queued jobs (their callers do not exist in the child either). */
static void pool_reset_in_child(void) {
  pthread_mutex_init(&pool.lock, NULL);
  pthread_cond_init(&pool.work, NULL);
  pool.queue = NULL;
  pool.nthreads = 0;
  pool.idle = 0;
}

/* Hold the lock across fork so the child never inherits it mid-update. */
static void pool_prepare_fork(void) { pthread_mutex_lock(&pool.lock); }
static void pool_parent_after_fork(void) { pthread_mutex_unlock(&pool.lock); }

static void register_atfork(void) {
  pthread_atfork(pool_prepare_fork, pool_parent_after_fork,
                 pool_reset_in_child);
}

int bc__cpu_count(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : (int)(n > MAX_THREADS ? MAX_THREADS : n);
}

/* Records a task failure; keeps the lowest-numbered one.  Caller holds no
 * lock; the message is this thread's bc_errmsg(). */
static void job_record_error(job *j, size_t task, int code) {
  pthread_mutex_lock(&pool.lock);
  if (code != 0 && task < j->err_task) {
    j->err_task = task;
    bc_error_save(&j->err, code);
  }
  pthread_mutex_unlock(&pool.lock);
  if (code == BC_ECANCELED) atomic_store(&j->cancelled, true);
  /* Every unclaimed task is numbered above `task`: skip them all. */
  atomic_store(&j->next, j->ntasks);
}

/* A helper's interrupt handler while it works on a job of a caller that
 * has one. */
static int job_cancelled(void *ctx) {
  return atomic_load(&((job *)ctx)->cancelled);
}

/* Marks task t given back by a helper (its failure is not an error). */
static void job_give_back(job *j, size_t t) {
  bc_error_clear();
  pthread_mutex_lock(&pool.lock);
  if (j->back == NULL) j->back = calloc(j->ntasks, sizeof *j->back);
  bool ok = j->back != NULL;
  if (ok) {
    j->back[t] = true;
    j->nback++;
  }
  pthread_mutex_unlock(&pool.lock);
  if (!ok) job_record_error(j, t, bc__error(BC_ENOMEM, "out of memory"));
}

static void job_run_tasks(job *j) {
  for (;;) {
    size_t t = atomic_fetch_add(&j->next, 1);
    if (t >= j->ntasks) return;
    gave_back = false;
    int rc = j->fn(j->arg, t);
    if (rc != 0 && in_helper && gave_back)
      job_give_back(j, t);
    else if (rc != 0)
      job_record_error(j, t, rc);
  }
}

static void job_unlink(job *j) {
  for (job **p = &pool.queue; *p != NULL; p = &(*p)->next_job) {
    if (*p == j) {
      *p = j->next_job;
      break;
    }
  }
  j->linked = false;
}

static void *worker_main(void *unused) {
  BC__UNUSED(unused);
  pthread_mutex_lock(&pool.lock);
  for (;;) {
    job *j = pool.queue;
    while (j != NULL &&
           (j->helpers_allowed == 0 || atomic_load(&j->next) >= j->ntasks))
      j = j->next_job;
    if (j == NULL) {
      pool.idle++;
      pthread_cond_wait(&pool.work, &pool.lock);
      pool.idle--;
      continue;
    }
    j->helpers_allowed--;
    j->active_helpers++;
    /* Helpers are woken one at a time, each by the one before, while the
     * tasks left would still take FANOUT_MIN_NS shared among one more
     * thread: a broadcast woke every idle thread (up to 4 per CPU for a
     * Reader), which then took turns on the lock and the CPUs (6
     * context switches per batch of 256 page-cache records). */
    size_t next = atomic_load(&j->next);
    size_t left = next < j->ntasks ? j->ntasks - next : 0;
    if (j->helpers_allowed > 0 && pool.idle > 0 &&
        j->pace_ns * (double)left / (double)(j->active_helpers + 2) >= FANOUT_MIN_NS)
      pthread_cond_signal(&pool.work);
    pthread_mutex_unlock(&pool.lock);
    if (j->hooked) bc_set_interrupt_handler(job_cancelled, j);
    in_helper = true;
    job_run_tasks(j);
    in_helper = false;
    if (j->hooked) bc_set_interrupt_handler(NULL, NULL);
    bc_error_clear(); /* recorded in the job (payload included) */
    pthread_mutex_lock(&pool.lock);
    if (--j->active_helpers == 0) pthread_cond_signal(&j->helpers_done);
  }
  return NULL;
}

/* Grows the pool to `want` threads (pool.lock held). */
static void pool_grow(size_t want) {
  if (want > MAX_THREADS) want = MAX_THREADS;
  while (pool.nthreads < want) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &attr, worker_main, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) break; /* fewer helpers only means less parallelism */
    pool.nthreads++;
    pool.idle++; /* counted idle until it reaches its first wait */
  }
}

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Runs tasks 0, 1, ... in the calling thread while the tasks left would
 * take less than FANOUT_MIN_NS at the pace of the fastest task so far, or
 * fewer than FANOUT_MIN_TIMED were timed (all of them when `timed` is
 * false).  Returns the number of tasks run; a failing task stops the loop
 * with its code in *rc (it is the lowest failing one). */
static size_t run_inline(size_t ntasks, bc__task_fn fn, void *arg, bool timed,
                         int *rc, double *pace) {
  double last = timed ? now_ns() : 0, fastest = 0;
  size_t done = 0;
  while (done < ntasks) {
    int r = fn(arg, done++);
    if (r != 0) {
      *rc = r;
      break;
    }
    if (!timed || done == ntasks) continue;
    double now = now_ns(), took = now - last;
    last = now;
    if (done == 1 || took < fastest) fastest = took;
    if (done >= FANOUT_MIN_TIMED && fastest * (double)(ntasks - done) >= FANOUT_MIN_NS)
      break;
  }
  *pace = fastest;
  return done;
}

int bc__parallel_for(size_t ntasks, int max_parallelism, bc__task_fn fn,
                     void *arg) {
  if (max_parallelism == 0) max_parallelism = bc__cpu_count();
  int rc = 0;
  bool timed = max_parallelism > 1 && ntasks > 1;
  double pace = 0;
  size_t done = run_inline(ntasks, fn, arg, timed, &rc, &pace);
  if (rc != 0 || done == ntasks) return rc;
  if (done + 1 == ntasks) return fn(arg, done); /* nothing to share */
  pthread_once(&atfork_once, register_atfork);

  size_t helpers = (size_t)max_parallelism - 1;
  if (helpers > ntasks - done - 1) helpers = ntasks - done - 1;
  job j = {.fn = fn, .arg = arg, .ntasks = ntasks, .helpers_allowed = helpers,
           .linked = true, .err_task = SIZE_MAX, .err = BC_ERROR_STATE_INIT,
           .hooked = bc__interrupt_fn != NULL, .pace_ns = pace};
  atomic_init(&j.next, done);
  atomic_init(&j.cancelled, false);
  pthread_cond_init(&j.helpers_done, NULL);

  pthread_mutex_lock(&pool.lock);
  pool_grow(helpers);
  j.next_job = pool.queue;
  pool.queue = &j;
  pthread_cond_signal(&pool.work); /* one helper: it calls the next (worker_main) */
  pthread_mutex_unlock(&pool.lock);

  job_run_tasks(&j);

  pthread_mutex_lock(&pool.lock);
  job_unlink(&j); /* from here no helper can join */
  /* Interrupted: the helpers' tasks end at their next poll; they use j,
   * so the wait goes on until they are out.  Tasks that completed did
   * their work: only a task that failed makes the call fail. */
  while (j.active_helpers > 0)
    if (bc__cond_wait(&j.helpers_done, &pool.lock) != 0)
      atomic_store(&j.cancelled, true);
  pthread_mutex_unlock(&pool.lock);
  pthread_cond_destroy(&j.helpers_done);

  /* Tasks given back, in order, below the lowest failing one (whose error
   * a lower failure replaces); none after an interrupt. */
  int brc = 0;
  if (j.nback > 0 && atomic_load(&j.cancelled) && j.err.code == 0)
    brc = bc__error(BC_ECANCELED, "interrupted");
  for (size_t t = 0; j.nback > 0 && brc == 0 && !atomic_load(&j.cancelled) &&
                     t < j.ntasks && t < j.err_task; t++)
    if (j.back[t]) brc = fn(arg, t);
  free(j.back);
  if (brc != 0)
    rc = brc;
  else if (j.err.code != 0)
    rc = bc_error_restore(&j.err);
  bc_error_state_clear(&j.err);
  return rc;
}
