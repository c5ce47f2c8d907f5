/*
 * loadit/loadit.h - private declarations of the loadit-compatible cache objects
 * (loadit/loadit.c), the bc_source over a Python iterator factory
 * (loadit/source.c) and interruptible blocking calls (loadit/runner.c).
 *
 * Threads and the GIL.  The cache engine calls the source from whichever
 * thread needs a shard (the reader itself, a fill worker, a read-ahead or
 * batch worker, or a runner helper); every source callback takes the GIL
 * with PyGILState_Ensure only around its Python calls, and the engine holds
 * none of its locks while calling it.  Every call into the engine from
 * Python releases the GIL.
 *
 * Ctrl-C.  Python runs signal handlers only in the main thread.  The
 * extension sets an interrupt handler there (bc_set_interrupt_handler,
 * module.c) that runs them; every wait in the engine polls it, so a call
 * that waits for another thread (a fill done by a worker, a drain,
 * read-ahead) returns BC_ECANCELED within about 10 ms of a Ctrl-C, with
 * KeyboardInterrupt set.  A fill the main thread runs itself is abandoned
 * cleanly (the claim released, the scratch file removed); fills other
 * threads run go on (a close stops them: the source's passes are
 * cancelled).
 */
#ifndef BCPY_LOADIT_H
#define BCPY_LOADIT_H

#include "core/bcpy.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

/* ---- the source (loadit/source.c) --------------------------------------- */

/* Shared by the cache (as its source and prefetch payload) and the Python
 * core object: reference counted; the last unref takes the GIL to release
 * the Python objects.  Python object fields are read and written with the
 * GIL held. */
typedef struct bcpy_source {
  atomic_long refs;
  PyObject *create_iter; /* callable returning an iterable */
  PyObject *dumps;       /* callable(obj, *dumps_args) -> bytes-like; NULL:
                            records are taken as bytes-like objects as they are */
  PyObject *dumps_args;  /* a tuple of at most BCPY_DUMPS_ARGS_MAX, or NULL */
  atomic_ulong generation; /* passes opened under an older one are cancelled */
  atomic_bool closed;        /* the loader was closed: no new passes */
  /* Prefetch policy after each shard opened (see BCPY_PREFETCH_*). */
  atomic_int prefetch_mode;
  atomic_int prefetch_ahead;
  /* BCPY_PREFETCH_NEXT's memory: the last shards opened, as shard + 1 (0:
   * none), to prefetch only for a sequential read, as the engine's default
   * policy does (doc/cache.md, "Prefetching").  Racy updates only blur it. */
#define BCPY_RECENT_OPENS 4
  _Atomic uint64_t recent_opens[BCPY_RECENT_OPENS];
  atomic_uint recent_next;
  PyObject *prefetch_fn; /* BCPY_PREFETCH_PYTHON: fn(loader, index) */
  PyObject *loader;      /* weak reference to the loader passed to it */
  atomic_int passes;     /* passes open now */
  struct bcpy_tee *tee;  /* the first pass in progress, if any (GIL) */
  struct bcpy_tee *unwarned; /* a first pass whose driver failed after its
                                loop: warned about by the close (GIL) */
  atomic_bool tee_active; /* tee != NULL: no prefetch meanwhile */
  uint64_t bytes_read;   /* bytes of the records passes pulled from the
                            iterator, serialized (GIL): for progress */
} bcpy_source;

enum { BCPY_PREFETCH_NONE = 0, BCPY_PREFETCH_NEXT = 1, BCPY_PREFETCH_PYTHON = 2 };

#define BCPY_DUMPS_ARGS_MAX 4

/* A new source (one reference) calling create_iter() for every pass and
 * dumps(record, *dumps_args) for every record (dumps may be NULL; dumps_args
 * a tuple of at most BCPY_DUMPS_ARGS_MAX, or NULL). */
bcpy_source *bcpy_source_new(PyObject *create_iter, PyObject *dumps, PyObject *dumps_args);
/* dumps(item, *dumps_args) (GIL held, s->dumps set): a new reference, or
 * NULL with an exception. */
PyObject *bcpy_source_dumps(const bcpy_source *s, PyObject *item);
/* Fills a bc_source over s, taking a reference for the cache (released by
 * free_payload). */
void bcpy_source_describe(bcpy_source *s, bool thread_safe, bc_source *out);
/* Makes a described source seekable: passes from record N > 0 call
 * create_iter(start=N). */
void bcpy_source_seekable(bc_source *out);
/* Drops a reference (GIL held or not). */
void bcpy_source_unref(bcpy_source *s);
/* Makes every pass opened so far fail at its next record. */
void bcpy_source_cancel(bcpy_source *s);
/* Cancels, and refuses to open passes from now on. */
void bcpy_source_close(bcpy_source *s);
/* The bc_prefetch_fn over a source payload. */
size_t bcpy_source_prefetch(void *payload, uint64_t index, uint64_t shard_records,
                            uint64_t *shards, size_t max);
/* Visits the Python objects of s (for a GC traverse). */
int bcpy_source_traverse(bcpy_source *s, visitproc visit, void *arg);

/* Takes the GIL for a source callback's Python calls from any thread
 * (marking it as bcpy_in_callback), and gives it back. */
PyGILState_STATE bcpy_gil_enter(void);
void bcpy_gil_leave(PyGILState_STATE st);

/* Stores the pending exception (GIL held, one set, taken) for the threads
 * that meet the failure and returns BC_ESOURCE with a message naming it;
 * `what` names the failing call. */
int bcpy_keep_exception(const char *what);

/* Non-zero while this thread runs Python code for a source callback (it
 * may be one of the engine's own threads, in the middle of a fill).  An
 * object that dies there (a collection can run anywhere) must not close a
 * cache or drop a sequence inline: that could join or free the thread's
 * own engine state.  Such teardown is handed to a thread of its own
 * (bcpy_run_detached). */
extern _Thread_local int bcpy_in_callback;

/* CLOCK_MONOTONIC in nanoseconds (the source's batches, the first pass's
 * stall timer). */
static inline uint64_t bcpy_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* ---- work on threads of its own (loadit/runner.c) ------------------------ */

typedef struct bcpy_job bcpy_job;
struct bcpy_job {
  int (*run)(bcpy_job *job);      /* the work; no GIL */
  void (*release)(bcpy_job *job); /* frees what the job still holds (no GIL
                                     is held; may take it) */
};

/* Runs job->run, then job->release, on a detached thread of its own, which
 * frees the job (allocated with PyMem_RawCalloc).  -1 when no thread could
 * be started (the job is untouched). */
int bcpy_run_detached(bcpy_job *job);
/* job->release(job), then frees it. */
void bcpy_job_free(bcpy_job *job);
/* True in the thread Python runs signal handlers in. */
bool bcpy_is_main_thread(void);
/* Changes in a child after fork(): a cheaper test than getpid() for
 * objects that must not be used across one. */
unsigned bcpy_forks(void);
/* True when `thread` is listed as waiting in a call into the engine. */
bool bcpy_thread_waits(pthread_t thread);
/* Lists this thread as waiting (around a call into the engine that may
 * wait); returns the entry (-1: not listed) to pass to the remove. */
int bcpy_waiter_add(void);
void bcpy_waiter_remove(int entry);
/* Sets up the fork handling and the main thread's identity. */
int bcpy_runner_init(void);

/* ---- the first pass over an empty cache (loadit/tee.c) ------------------ */

typedef struct bcpy_tee bcpy_tee;

/* The iterator of a first pass over the loader `loader` (whose sequence is
 * `seq`, R records per shard, in the directory `root`, a str): the
 * iterator's own objects, stored on the way.  NULL with an exception when
 * create_iter() failed; NULL without one when no such pass can start now
 * (a pass is open, one runs already): the caller then iterates the cache. */
PyObject *bcpy_tee_start(PyObject *loader, bcpy_source *src, bc_seq *seq, uint64_t R,
                         PyObject *root);
/* A pass being opened reads the first pass's records (GIL held): the tee,
 * with a reference for the pass, or NULL. */
bcpy_tee *bcpy_tee_attach(bcpy_source *s);
/* The attached pass's next record (no GIL held): 1 with the record in *out
 * (out NULL: skipped), 0 at the end, < 0 an error, or BCPY_TEE_GIVEN: the
 * records are through and the iterator is the pass's now (*it, a new
 * reference), to be read up to position *stop_at. */
#define BCPY_TEE_GIVEN 2
int bcpy_tee_next(bcpy_tee *t, const bcpy_source *s, unsigned long generation,
                  bc_buf *out, PyObject **it, uint64_t *stop_at);
/* The attached pass closes (GIL held); drops its reference. */
void bcpy_tee_detach(bcpy_tee *t);
/* Called before the loader closes (GIL held, released meanwhile): a first
 * pass that met its end, or was broken off (an OPEN one is broken off
 * now, unless its thread is inside the iterator), has its shards written
 * first: waits until its driver is done.  Then warns (CacheWarning) about
 * a driver failure nobody warned about.  0, or -1 with an exception: a
 * signal handler raised while waiting (only when `interruptible`), or the
 * warning was made an error. */
int bcpy_tee_settle(bcpy_source *s, bool interruptible);
/* Drops s->unwarned (GIL held). */
void bcpy_tee_forget(bcpy_source *s);

/* ---- types (loadit.c) -------------------------------------------------------- */

extern PyTypeObject bcpy_CacheCore_Type;
extern PyTypeObject bcpy_CacheSeq_Type;
extern PyTypeObject bcpy_CacheIter_Type;
extern PyTypeObject bcpy_TeeIter_Type;

/* An iterator over the cache of loader `loader` (a _CacheSeq) from `from`. */
PyObject *bcpy_cache_iter(PyObject *loader, uint64_t from);

#endif /* BCPY_LOADIT_H */
