/*
 * loadit/runner.c - what the extension still runs on threads of its own,
 * and the thread bookkeeping of the first pass.
 *
 * Blocking calls run in the calling thread with the GIL released: Ctrl-C
 * reaches their waits through the main thread's interrupt handler
 * (module.c), so no call is handed to a helper to keep the main thread
 * responsive.  Two kinds of work still go to a detached thread of their
 * own (bcpy_run_detached):
 *   - teardown from inside a source callback (bcpy_in_callback): closing a
 *     cache or dropping a sequence there could join or free the calling
 *     thread's own engine state (it may be a fill worker in mid-fill);
 *   - closing a read-ahead whose reads in flight may be long fills, so
 *     that dropping an iterator never blocks (loadit.c), and the first
 *     pass's driver (loadit/tee.c).
 * Such work is rare and short-lived, so each job gets a thread of its own
 * (no pool).
 */
#include "loadit/loadit.h"

#include <pthread.h>
#include <string.h>

/* The thread that runs Python signal handlers (the forking thread in a
 * child: CPython makes it the main thread there). */
static pthread_t main_thread;

bool bcpy_is_main_thread(void) { return pthread_equal(pthread_self(), main_thread); }

/* The threads waiting in a call into the engine now (0: a free entry).  A
 * first pass asks whether its reader's thread is one of them
 * (loadit/tee.c); when the table is full a thread is simply not listed. */
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

/* Forks this process's line has been through (children count one more). */
static atomic_uint forks;

unsigned bcpy_forks(void) { return atomic_load_explicit(&forks, memory_order_relaxed); }

static void after_fork_child(void) {
  atomic_fetch_add(&forks, 1);
  main_thread = pthread_self();
  for (int k = 0; k < WAITERS; k++) atomic_store(&waiters[k], 0);
  bcpy_interrupt_install(); /* this thread runs the signal handlers now */
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
  if (pthread_atfork(NULL, NULL, after_fork_child) != 0) {
    PyErr_SetString(PyExc_RuntimeError, "pthread_atfork failed");
    return -1;
  }
  return 0;
}

void bcpy_job_free(bcpy_job *job) {
  if (job == NULL) return;
  if (job->release) job->release(job);
  PyMem_RawFree(job);
}

static void *detached_main(void *arg) {
  bcpy_job *job = arg;
  job->run(job);
  bcpy_job_free(job);
  bc_error_clear(); /* a payload (an exception) is released before the exit */
  return NULL;
}

int bcpy_run_detached(bcpy_job *job) {
  pthread_attr_t attr;
  pthread_t t;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int err = pthread_create(&t, &attr, detached_main, job);
  pthread_attr_destroy(&attr);
  return err == 0 ? 0 : -1;
}
