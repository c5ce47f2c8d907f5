/*
 * loadit/runner.c - blocking calls that Ctrl-C can interrupt.
 *
 * Off the main thread a job simply runs with the GIL released (no signal
 * handler could run there anyway).  On the main thread it is queued to a
 * pool of helper threads, and the main thread waits for it in slices of
 * SLICE_MS, taking the GIL between slices to run pending signal handlers
 * (PyErr_CheckSignals).  If a handler raises (KeyboardInterrupt), the main
 * thread cancels the source's passes and returns at once; the job belongs
 * to the helper from then on, which frees it when its call returns.
 *
 * Pool invariants (under pool.lock, which is taken alone and never held
 * while a job runs or is released): `queue` holds jobs not yet taken;
 * `idle` counts helpers waiting for work that no queued job has reserved
 * (every queued job has a helper of its own); a job has refs == 2 while both
 * the submitter and the helper hold it, and whoever drops the last
 * reference after `done` frees it.  Helpers live for the process; after a
 * fork the child starts with an empty pool (the parent's helpers and their
 * jobs do not exist there).
 */
#include "loadit/loadit.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SLICE_MS 50
#define MAX_HELPERS 64

static struct {
  pthread_mutex_t lock;
  pthread_cond_t work; /* a job was queued */
  pthread_cond_t done; /* a job finished */
  bcpy_job *queue, *tail;
  int helpers, idle;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
          PTHREAD_COND_INITIALIZER, NULL, NULL, 0, 0};

/* The thread that runs Python signal handlers (the forking thread in a
 * child: CPython makes it the main thread there). */
static pthread_t main_thread;

bool bcpy_is_main_thread(void) { return pthread_equal(pthread_self(), main_thread); }

/* The threads waiting in bcpy_run now (0: a free entry).  A first pass
 * asks whether its reader's thread is one of them (loadit/tee.c); when the
 * table is full a thread is simply not listed. */
#define WAITERS 32
static atomic_ulong waiters[WAITERS];

int bcpy_waiter_add(void) {
  unsigned long self = (unsigned long)pthread_self();
  for (int k = 0; k < WAITERS; k++) {
    unsigned long free_entry = 0;
    if (atomic_compare_exchange_strong(&waiters[k], &free_entry, self)) return k;
  }
  return -1;
}

void bcpy_waiter_remove(int k) {
  if (k >= 0) atomic_store(&waiters[k], 0);
}

bool bcpy_thread_waits(pthread_t thread) {
  for (int k = 0; k < WAITERS; k++)
    if (atomic_load(&waiters[k]) == (unsigned long)thread) return true;
  return false;
}

static void before_fork(void) { pthread_mutex_lock(&pool.lock); }
static void after_fork_parent(void) { pthread_mutex_unlock(&pool.lock); }
/* Forks this process's line has been through (children count one more). */
static atomic_uint forks;

unsigned bcpy_forks(void) { return atomic_load_explicit(&forks, memory_order_relaxed); }

static void after_fork_child(void) {
  atomic_fetch_add(&forks, 1);
  /* No helper exists here; the parent's queued jobs are forgotten. */
  pthread_mutex_init(&pool.lock, NULL);
  pthread_cond_init(&pool.work, NULL);
  pthread_cond_init(&pool.done, NULL);
  pool.queue = pool.tail = NULL;
  pool.helpers = pool.idle = 0;
  main_thread = pthread_self();
  for (int k = 0; k < WAITERS; k++) atomic_store(&waiters[k], 0);
}

int bcpy_runner_init(void) {
  /* The module may be imported from any thread: ask threading which one
   * is the main thread... which only tells an ident, the same value as
   * pthread_self() there (CPython's thread ident is pthread_t). */
  PyObject *threading = PyImport_ImportModule("threading");
  if (threading == NULL) return -1;
  PyObject *mt = PyObject_CallMethod(threading, "main_thread", NULL);
  Py_DECREF(threading);
  if (mt == NULL) return -1;
  PyObject *ident = PyObject_GetAttrString(mt, "ident");
  Py_DECREF(mt);
  if (ident == NULL) return -1;
  unsigned long id = PyLong_AsUnsignedLong(ident);
  Py_DECREF(ident);
  if (id == (unsigned long)-1 && PyErr_Occurred()) return -1;
  main_thread = (pthread_t)id;
  if (pthread_atfork(before_fork, after_fork_parent, after_fork_child) != 0) {
    PyErr_SetString(PyExc_RuntimeError, "pthread_atfork failed");
    return -1;
  }
  return 0;
}

static void finish(bcpy_job *job, int rc) {
  job->rc = rc;
  if (rc != 0) {
    const char *m = bc_errmsg();
    snprintf(job->msg, sizeof job->msg, "%s", m[0] ? m : bc_strerror(rc));
    job->sys_errno = bc_errno();
  }
}

void bcpy_job_free(bcpy_job *job) {
  if (job == NULL) return;
  if (job->release) job->release(job);
  PyMem_RawFree(job);
}

static void *helper_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&pool.lock);
  for (;;) {
    while (pool.queue == NULL) pthread_cond_wait(&pool.work, &pool.lock);
    bcpy_job *job = pool.queue;
    pool.queue = job->next;
    if (pool.queue == NULL) pool.tail = NULL;
    pthread_mutex_unlock(&pool.lock);

    finish(job, job->run(job));

    pthread_mutex_lock(&pool.lock);
    job->done = true;
    bool last = --job->refs == 0;
    pthread_cond_broadcast(&pool.done);
    if (last) { /* abandoned by its submitter: ours to free, unlocked */
      pthread_mutex_unlock(&pool.lock);
      bcpy_job_free(job);
      pthread_mutex_lock(&pool.lock);
    }
    pool.idle++;
  }
  return NULL;
}

/* Queues the job with `refs` references (2: the submitter waits for it;
 * 1: the helper frees it), starting a helper when none is idle.  0, or -1
 * when no helper could be started (the caller then runs the job itself). */
static int submit(bcpy_job *job, int refs) {
  int rc = 0;
  pthread_mutex_lock(&pool.lock);
  if (pool.idle == 0) {
    if (pool.helpers >= MAX_HELPERS) {
      rc = -1;
      goto out;
    }
    pthread_attr_t attr;
    pthread_t t;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int err = pthread_create(&t, &attr, helper_main, NULL);
    pthread_attr_destroy(&attr);
    if (err != 0) {
      rc = -1;
      goto out;
    }
    pool.helpers++; /* reserved for this job */
  } else {
    pool.idle--;
  }
  job->refs = refs;
  job->done = false;
  job->next = NULL;
  if (pool.tail) pool.tail->next = job;
  else pool.queue = job;
  pool.tail = job;
  pthread_cond_signal(&pool.work);
out:
  pthread_mutex_unlock(&pool.lock);
  return rc;
}

int bcpy_run_detached(bcpy_job *job) {
  return submit(job, 1); /* the helper's only: it frees the job */
}

int bcpy_job_start(bcpy_job *job) { return submit(job, 2); }

bool bcpy_job_wait(bcpy_job *job, int ms) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += ms / 1000;
  until.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&pool.lock);
  while (!job->done && pthread_cond_timedwait(&pool.done, &pool.lock, &until) != ETIMEDOUT) {
  }
  bool done = job->done;
  if (done) job->refs--; /* the helper has dropped its reference */
  pthread_mutex_unlock(&pool.lock);
  return done;
}

static int wait_for(bcpy_job *job, bcpy_source *cancel);

int bcpy_run(bcpy_job *job, bcpy_source *cancel) {
  int waiter = bcpy_waiter_add();
  int result = 0;
  if (!bcpy_is_main_thread() || submit(job, 2) != 0) {
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = job->run(job);
    finish(job, rc);
    Py_END_ALLOW_THREADS
  } else {
    result = wait_for(job, cancel);
  }
  bcpy_waiter_remove(waiter);
  return result;
}

/* The main thread's wait for a submitted job (see bcpy_run). */
static int wait_for(bcpy_job *job, bcpy_source *cancel) {
  for (;;) {
    bool done;
    Py_BEGIN_ALLOW_THREADS
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += SLICE_MS * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&pool.lock);
    while (!job->done && pthread_cond_timedwait(&pool.done, &pool.lock, &until) != ETIMEDOUT) {
    }
    done = job->done;
    if (done) job->refs--; /* the helper has dropped its reference */
    pthread_mutex_unlock(&pool.lock);
    Py_END_ALLOW_THREADS
    if (done) return 0;
    if (PyErr_CheckSignals() < 0) {
      /* Abandon it: the passes it may be filling fail at their next record,
       * and the helper frees the job. */
      bcpy_source_cancel(cancel);
      pthread_mutex_lock(&pool.lock);
      bool last = --job->refs == 0;
      pthread_mutex_unlock(&pool.lock);
      if (last) { /* it finished just now; freeing may end a cache */
        Py_BEGIN_ALLOW_THREADS
        bcpy_job_free(job);
        Py_END_ALLOW_THREADS
      }
      return -1;
    }
  }
}
