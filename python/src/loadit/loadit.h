/*
 * loadit/loadit.h - private declarations of the loadit-compatible cache objects
 * (loadit/loadit.c), the bc_source over a Python iterator factory
 * (loadit/source.c) and the first pass (loadit/tee.c).
 *
 * Threads and the GIL.  The cache engine calls the source from whichever
 * thread needs a shard (the reader itself, a fill worker, a read-ahead or
 * batch worker, or a detached helper); every source callback takes the GIL
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
  struct bcpy_tee *unwarned; /* a first pass whose cache failed as its
                                iterator was dropped: warned about by the
                                close (GIL) */
  atomic_bool tee_active; /* tee != NULL: no prefetch meanwhile */
  uint64_t bytes_read;   /* bytes of the records passes pulled from the
                            iterator, serialized (GIL): for progress */
  uint64_t pulled;       /* records passes pulled from the iterator, given
                            or skipped (GIL): for progress and the warning
                            about reads that keep regenerating */
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
/* The record as stored (GIL held): dumps(item), or item's own bytes
 * (serializer="raw"), as a bytes object (a new reference), or NULL with
 * a TypeError naming what is not bytes-like. */
PyObject *bcpy_source_record(const bcpy_source *s, PyObject *item);
/* Fills a bc_source over s, taking a reference for the cache (released by
 * free_payload). */
void bcpy_source_describe(bcpy_source *s, bool thread_safe, bc_source *out);
/* Makes a described source seekable: passes from record N > 0 call
 * create_iter(start=N). */
void bcpy_source_seekable(bc_source *out);
/* Drops a reference (GIL held or not). */
void bcpy_source_unref(bcpy_source *s);
/* Makes every pass opened so far fail at its next record, and refuses to
 * open passes from now on. */
void bcpy_source_close(bcpy_source *s);
/* The bc_prefetch_fn over a source payload. */
size_t bcpy_source_prefetch(void *payload, uint64_t index, uint64_t shard_records,
                            uint64_t *shards, size_t max);
/* Visits the Python objects of s (for a GC traverse). */
int bcpy_source_traverse(bcpy_source *s, visitproc visit, void *arg);

/* Stores the pending exception (GIL held, one set, taken) for the threads
 * that meet the failure and returns BC_ESOURCE with a message naming it;
 * `what` names the failing call. */
int bcpy_keep_exception(const char *what);

/* CLOCK_MONOTONIC in nanoseconds (the source's batches, the first pass's
 * stall timer). */
static inline uint64_t bcpy_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* ---- the first pass over an empty cache (loadit/tee.c) ------------------ */

typedef struct bcpy_tee bcpy_tee;

/* The iterator of a first pass over the loader `loader` (whose sequence is
 * `seq`, R records per shard, in the directory `root`, a str): a
 * _CacheIter whose elements are the iterator's own objects, stored on the
 * way (it->producer is the tee).  NULL with an exception when
 * create_iter() failed; NULL without one when no such pass can start now
 * (a pass is open, one runs already): the caller then iterates the cache. */
PyObject *bcpy_tee_start(bcpy_sobj *loader, bcpy_source *src, bc_seq *seq, uint64_t R,
                         PyObject *root);
/* kind->chunk of a LoadIt: the refill of a first pass's iterator. */
void bcpy_tee_chunk(bcpy_sobj *loader, bcpy_iter *it);
/* Releases a first pass's iterator's tee (GIL held): a loop that dropped
 * it mid-pass is broken off, as by bcpy_tee_settle. */
void bcpy_tee_release(bcpy_iter *it);
/* A pass of the source being opened at record 0 (GIL held): the first
 * pass's iterator (a new reference), when the loop has not pulled any
 * record from it yet; the loop then reads the cache.  NULL otherwise. */
PyObject *bcpy_tee_take(bcpy_source *s);
/* Called before the loader closes (GIL held): a first pass still held
 * mid-way is broken off (unless its thread is inside the iterator now):
 * the shard it was in is completed with its iterator, nothing after it is
 * generated.  Then warns (CacheWarning) about a failure of the cache
 * nobody warned about.  0, or -1 with an exception: an interrupt raised
 * by the iterator while completing the shard (only when `interruptible`),
 * or the warning was made an error. */
int bcpy_tee_settle(bcpy_source *s, bool interruptible);
/* Drops s->unwarned (GIL held). */
void bcpy_tee_forget(bcpy_source *s);

/* ---- types (loadit.c) -------------------------------------------------------- */

extern PyTypeObject bcpy_CacheCore_Type;
extern PyTypeObject bcpy_CacheSeq_Type;
extern PyTypeObject bcpy_CacheIter_Type;

/* An iterator over the cache of loader `loader` (a _CacheSeq) from `from`. */
PyObject *bcpy_cache_iter(PyObject *loader, uint64_t from);

#endif /* BCPY_LOADIT_H */
