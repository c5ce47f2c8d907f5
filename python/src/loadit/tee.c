/*
 * loadit/tee.c - the first pass over an empty cache: the reader's thread
 * runs the iterator itself, serializes each object, hands the bytes to
 * the cache's appender (bagcache/cache.h, doc/cache.md "Appending") and
 * yields the object.  The appender writes behind (write_behind): the
 * append copies the bytes into its queue, and its thread writes,
 * checksums and publishes them while the loop goes on; the iterator's
 * end waits for that, publishes the last shard and makes the length
 * final before StopIteration reaches the loop, so a process may exit
 * right after its loop.
 *
 * The appender claims each shard only at its end (claim_late): nobody
 * waits for the loop, so a read of the shard in progress (from the loop's
 * body, or from a thread the loop waits for) fills it with a pass of its
 * own, and the appender checks its records against that shard instead of
 * writing it again.  The same holds for a preload drain running meanwhile.
 *
 * The loop stops early (break, an exception in its body, the iterator
 * dropped, the loader closed or collected while the iterator is held):
 * the shard it was in is completed with the same iterator (what it had
 * generated is not wasted) and nothing after it is generated; then the
 * appender is discarded (nothing partial is published, the length stays
 * open).  The iterator raises: the shard in progress is discarded and the
 * exception reaches the loop as itself.  The cache fails (a full disk, an
 * I/O error, a nondeterministic iterator): the loop is warned once
 * (CacheWarning) and goes on with the iterator's items, storing nothing
 * more.
 *
 * A pass of the source opened at record 0 before the loop has pulled
 * anything (list(loader) asks len(loader), which drains, right after
 * iter()) takes the iterator over (bcpy_tee_take): the loop then reads
 * the cache, and the iterator still runs once.  Once the loop has pulled
 * records, such a pass makes an iterator of its own.
 *
 * A completed shard is published by another thread of the appender
 * (publish_behind), so that its syncs do not hold up the writing of the
 * next one.  The loop waits only when the appender's queue is full, and
 * at its end.
 *
 * GIL: held throughout, except around an append that must wait for room
 * in the queue (bc_appender_try_append says so: the appender's thread
 * may be waiting for another filler of a shard, which may need the GIL)
 * or copies a large record, and around the appender's close and discard.
 * `in_next` keeps other threads out of the iterator meanwhile.  Those
 * waits poll the thread's interrupt handler (the main thread's: Ctrl-C,
 * then KeyboardInterrupt, the appender discarded).
 *
 * The pass is the one iterator of core/iterator.c, a _CacheIter opened
 * chunked: bcpy_tee_chunk is its refill (one element per refill, and
 * after a take the records of the cache), bcpy_tee_release its drop.
 *
 * Ownership: the iterator owns its bcpy_tee (it->producer).  The source
 * registers it in s->tee (GIL) while the pass runs, so that no second
 * first pass starts, the prefetcher stays idle (tee_active) and the
 * loader's close can settle it.  A failure found while settling in a
 * deallocation (which cannot warn) passes the tee to s->unwarned, warned
 * by the close.
 */
#include "loadit/loadit.h"

#include <errno.h>
#include <unistd.h>

/* Records of at least this many bytes are appended without the GIL (the
 * copy into the shard is worth another thread's running meanwhile). */
#define BIG_RECORD ((size_t)1 << 16)

struct bcpy_tee {
  bc_appender *a;    /* NULL once closed or discarded */
  PyObject *it;      /* the iterator; NULL once over */
  PyObject *root;    /* the cache's root (str), for the warning */
  bcpy_source *src;  /* own reference */
  uint64_t R;
  pid_t pid;
  bool in_next;      /* inside the iterator, dumps or an append (GIL) */
  bool alone;        /* the cache failed: the iterator's items, not saved */
  bool given;        /* a pass of the source took the iterator before its
                        first record: the loop reads the cache */
  bool warned;       /* the CacheWarning was given */
  bool interrupted;  /* an append's wait was stopped by the interrupt
                        handler (Ctrl-C): the loop gets KeyboardInterrupt */
  int fill_rc;       /* the cache's failure (not the iterator's) */
  char fill_msg[1024];
};

/* ---- the tee -------------------------------------------------------------------- */

/* Discards the appender, if any (GIL held, released meanwhile: it waits
 * for a shard being published, which may wait for a fill that needs the
 * GIL). */
static void discard(bcpy_tee *t) {
  bc_appender *a = t->a;
  t->a = NULL;
  if (a == NULL) return;
  Py_BEGIN_ALLOW_THREADS
  bc_appender_discard(a);
  Py_END_ALLOW_THREADS
}

static void tee_free(bcpy_tee *t) {
  if (t == NULL) return;
  /* In a child after fork() the appender is the parent's (its publisher
   * thread, if any, is not here): left alone. */
  if (t->pid == getpid()) discard(t);
  Py_XDECREF(t->it);
  Py_XDECREF(t->root);
  bcpy_source_unref(t->src);
  PyMem_RawFree(t);
}

/* The pass is over for the source: another first pass may start, the
 * prefetcher works again (GIL held). */
static void unregister(bcpy_tee *t) {
  if (t->src->tee != t) return;
  t->src->tee = NULL;
  atomic_store(&t->src->tee_active, false);
}

/* Records the cache's failure rc (message: bc_errmsg()) and drops the
 * appender: the iterator's items go on alone. */
static void cache_failed(bcpy_tee *t, int rc) {
  t->fill_rc = rc;
  snprintf(t->fill_msg, sizeof t->fill_msg, "%s", bc_errmsg());
  discard(t);
  t->alone = true;
}

/* Appends a record (GIL held; released around a wait for the appender's
 * queue, and around big copies).  A failure of the cache is recorded
 * (cache_failed). */
static void append(bcpy_tee *t, const char *data, size_t n) {
  if (t->a == NULL) return;
  int rc = n >= BIG_RECORD ? BC_EAGAIN : bc_appender_try_append(t->a, data, n);
  if (rc == BC_EAGAIN) { /* (data: the bytes object the caller holds) */
    Py_BEGIN_ALLOW_THREADS
    rc = bc_appender_append(t->a, data, n);
    Py_END_ALLOW_THREADS
  }
  if (rc == BC_ECANCELED) { /* Ctrl-C: not the cache's failure */
    discard(t);
    t->alone = t->interrupted = true;
  } else if (rc != 0) {
    cache_failed(t, rc);
  }
}

/* The iterator ended: publishes the rest, makes the length final. */
static void close_appender(bcpy_tee *t) {
  if (t->a == NULL) return;
  bc_appender *a = t->a;
  t->a = NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = bc_appender_close(a);
  Py_END_ALLOW_THREADS
  if (rc != 0) {
    t->fill_rc = rc;
    snprintf(t->fill_msg, sizeof t->fill_msg, "%s", bc_errmsg());
  }
}

/* The errno behind a cache failure's code, 0 when it is not the system's. */
static int fill_errno(int rc) {
  switch (rc) {
    case BC_ENOSPC: return ENOSPC; /* also EDQUOT and EFBIG underneath */
    case BC_EIO: return EIO;
    case BC_EPERM: return EACCES;
    case BC_ENOTFOUND: return ENOENT;
    case BC_ENOMEM: return ENOMEM;
    default: return 0;
  }
}

/* Warns once that the first pass could not write the cache (GIL held, no
 * exception set): bagcache.loadit._warn_cache_failed makes the
 * CacheWarning (its `filename` the root, its `errno` the system's error
 * number, None when the failure is not the system's), attributed to the
 * Python code iterating.  -1 with an exception when the warning filters
 * made it an error. */
static int warn_fill_failed(bcpy_tee *t) {
  if (t->fill_rc == 0 || t->warned) return 0;
  t->warned = true;
  PyObject *mod = PyImport_ImportModule("bagcache.loadit");
  PyObject *r = mod == NULL ? NULL
                            : PyObject_CallMethod(mod, "_warn_cache_failed", "Oiy", t->root,
                                                  fill_errno(t->fill_rc), t->fill_msg);
  Py_XDECREF(mod);
  Py_XDECREF(r);
  return r != NULL ? 0 : -1;
}

/* The iterator is over: no more records (GIL held). */
static void iterator_over(bcpy_tee *t) {
  if (t->it == NULL) return;
  PyObject *it = t->it;
  t->it = NULL;
  Py_DECREF(it);
}

/* The loop stopped early (GIL held, not inside the iterator): completes
 * the shard it was in with the iterator, then discards the appender.
 * 0, or -1 with the exception of an interrupt (KeyboardInterrupt,
 * SystemExit...) that stopped the completion; another exception of the
 * iterator there only ends it (the shard is then dropped). */
static int break_off(bcpy_tee *t) {
  int rc = 0;
  t->in_next = true;
  while (t->a != NULL && t->it != NULL && bc_appender_count(t->a) % t->R != 0) {
    PyObject *item = PyIter_Next(t->it);
    if (item == NULL) {
      if (!PyErr_Occurred()) { /* the end came within the shard */
        iterator_over(t);
        close_appender(t);
      } else if (!PyErr_ExceptionMatches(PyExc_Exception)) {
        rc = -1;
      } else {
        PyErr_Clear();
      }
      break;
    }
    PyObject *record = bcpy_source_record(t->src, item);
    Py_DECREF(item);
    if (record == NULL) {
      if (!PyErr_ExceptionMatches(PyExc_Exception)) rc = -1;
      else PyErr_Clear();
      break;
    }
    append(t, PyBytes_AS_STRING(record), (size_t)PyBytes_GET_SIZE(record));
    Py_DECREF(record);
  }
  discard(t); /* at a shard's start: nothing to drop */
  iterator_over(t);
  t->in_next = false;
  unregister(t);
  return rc;
}

/* ---- the source's side ----------------------------------------------------------- */

PyObject *bcpy_tee_take(bcpy_source *s) {
  bcpy_tee *t = s->tee;
  if (t == NULL || t->pid != getpid() || t->in_next || t->it == NULL ||
      t->a == NULL || bc_appender_count(t->a) != 0)
    return NULL;
  PyObject *it = t->it;
  t->it = NULL;
  discard(t);
  t->given = true;
  unregister(t);
  return it;
}

int bcpy_tee_settle(bcpy_source *s, bool interruptible) {
  bcpy_tee *t = s != NULL ? s->tee : NULL;
  int rc = 0;
  if (t != NULL && t->pid == getpid()) {
    /* A loop holding its iterator mid-way is broken off by the close
     * (unless it is inside the iterator now). */
    if (!t->in_next) rc = break_off(t);
    if (rc < 0 && !interruptible) {
      if (PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) PyErr_SetInterrupt();
      PyErr_Clear();
      rc = 0;
    }
    if (rc == 0) rc = warn_fill_failed(t);
  }
  if (rc == 0 && s != NULL && s->unwarned != NULL) { /* failed in a dealloc */
    t = s->unwarned;
    s->unwarned = NULL;
    if (t->pid == getpid()) rc = warn_fill_failed(t);
    tee_free(t);
  }
  return rc;
}

void bcpy_tee_forget(bcpy_source *s) {
  if (s == NULL || s->unwarned == NULL) return;
  tee_free(s->unwarned);
  s->unwarned = NULL;
}

/* ---- the iterator ------------------------------------------------------------------ */

/* The iteration is over (GIL held): the appender is closed or discarded
 * already. */
static void pass_over(bcpy_iter *it, bcpy_tee *t) {
  it->done = true;
  iterator_over(t);
  unregister(t);
}

/* The iterator ended (exception pending if any): the shards up to the
 * end are published and the length final (when it ended), or the shard
 * in progress dropped (when it raised); the cache's failure is warned
 * about.  A failing warning becomes the exception, with the pending one
 * as its context. */
static void end_of_pass(bcpy_iter *it, bcpy_tee *t) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  if (value == NULL && type == NULL) {
    close_appender(t);
  } else {
    discard(t);
  }
  pass_over(it, t);
  int rc = warn_fill_failed(t);
  if (rc == 0 || value == NULL) {
    if (rc == 0) PyErr_Restore(type, value, tb);
    else {
      Py_XDECREF(type);
      Py_XDECREF(tb);
    }
    return;
  }
  PyObject *type2, *value2, *tb2;
  PyErr_Fetch(&type2, &value2, &tb2);
  PyErr_NormalizeException(&type2, &value2, &tb2);
  PyErr_NormalizeException(&type, &value, &tb);
  if (tb != NULL) PyException_SetTraceback(value, tb);
  PyException_SetContext(value2, value); /* takes the reference */
  Py_XDECREF(type);
  Py_XDECREF(tb);
  PyErr_Restore(type2, value2, tb2);
}

/* The next element of the first pass (GIL held, in_next set): the
 * iterator's next object, cached on the way; NULL at its end, or with an
 * exception. */
static PyObject *tee_next(bcpy_iter *it, bcpy_tee *t) {
  bcpy_source *s = t->src;
  PyObject *item = PyIter_Next(t->it);
  PyObject *record = item != NULL ? bcpy_source_record(s, item) : NULL;
  if (record == NULL) {
    Py_XDECREF(item);
    end_of_pass(it, t);
    return NULL;
  }
  if (!t->alone) {
    append(t, PyBytes_AS_STRING(record), (size_t)PyBytes_GET_SIZE(record));
    bool failed = t->interrupted || (t->alone && warn_fill_failed(t) < 0);
    if (failed) {
      /* Ctrl-C stopped an append (the pending KeyboardInterrupt ends the
       * loop), or the warning of the cache's failure was made an error. */
      Py_DECREF(item);
      Py_DECREF(record);
      pass_over(it, t);
      if (t->interrupted && PyErr_CheckSignals() == 0) PyErr_SetNone(PyExc_KeyboardInterrupt);
      return NULL;
    }
  }
  if (s->dumps == NULL) { /* raw: what the cache gives back */
    Py_DECREF(item);
    return record;
  }
  Py_DECREF(record);
  return item;
}

void bcpy_tee_chunk(bcpy_sobj *loader, bcpy_iter *it) {
  bcpy_tee *t = it->producer;
  bcpy_source *s = t->src;
  PyObject *item = NULL;
  it->head = it->count = 0;
  if (t->given && !atomic_load(&s->closed)) {
    /* A pass took the iterator before its first record (a len() of the
     * loader right after iter(), as list() does): the cache it fills
     * gives the records, from the first. */
    if (it->source == NULL && (it->source = bcpy_cache_iter((PyObject *)loader, 0)) == NULL) {
      it->done = true;
    }
    while (it->source != NULL && it->count < it->batch &&
           (item = PyIter_Next(it->source)) != NULL)
      it->items[it->count++] = item;
    if (it->source != NULL && item == NULL) it->done = true;
  } else if (t->in_next) {
    PyErr_SetString(PyExc_RuntimeError, "the iterator is already running in another thread");
  } else if (atomic_load(&s->closed) || t->it == NULL) {
    /* (the close settled it already: nothing to discard) */
    discard(t);
    pass_over(it, t);
    PyErr_SetString(PyExc_ValueError, "the LoadIt is closed");
  } else {
    t->in_next = true;
    item = tee_next(it, t);
    t->in_next = false;
    if (item != NULL) it->items[it->count++] = item;
  }
  /* An end or an exception is raised once the elements before it are out. */
  if (PyErr_Occurred()) {
    it->done = true;
    PyErr_Fetch(&it->exc_type, &it->exc_value, &it->exc_tb);
  }
}

/* The loop dropped its iterator mid-pass (a break, an exception in the
 * loop's body): the shard it was in is completed, and is on disk when the
 * drop returns, as if each shard had been written before its records were
 * yielded (loadit's own loop, and what code that looks at the root right
 * after the loop expects).  An interrupt stops that and is raised again
 * at once (a dealloc cannot raise).  Any exception being propagated is
 * kept; a failure of the cache is warned about by the loader's close. */
void bcpy_tee_release(bcpy_iter *it) {
  bcpy_tee *t = it->producer;
  it->producer = NULL;
  if (!it->done && t->pid == getpid()) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (break_off(t) < 0) {
      if (PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) PyErr_SetInterrupt();
      PyErr_Clear();
    }
    PyErr_Restore(type, value, tb);
  }
  unregister(t);
  if (t->fill_rc != 0 && !t->warned && t->pid == getpid() && t->src->unwarned == NULL) {
    t->src->unwarned = t; /* close() warns */
  } else {
    tee_free(t);
  }
}

/* Iterators of a first pass hand out the elements one per refill; once a
 * pass took the iterator, up to this many records of the cache. */
#define GIVEN_BATCH 64

PyObject *bcpy_tee_start(bcpy_sobj *loader, bcpy_source *s, bc_seq *seq, uint64_t R,
                         PyObject *root) {
  bc_cache *cache = bc_seq_cache(seq);
  if (R == 0 || cache == NULL || atomic_load(&s->closed) ||
      atomic_load(&s->passes) != 0 || (s->tee != NULL && s->tee->pid == getpid()))
    return NULL;
  bcpy_tee *t = PyMem_RawCalloc(1, sizeof *t);
  if (t == NULL) return PyErr_NoMemory();
  t->pid = getpid();
  t->R = R;
  atomic_fetch_add(&s->refs, 1);
  t->src = s;
  Py_INCREF(root);
  t->root = root;
  /* Claimed late, written and published behind: see the header. */
  bc_appender_options opts = BC_APPENDER_OPTIONS_INIT;
  opts.claim_late = true;
  opts.publish_behind = true;
  opts.write_behind = true;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = bc_cache_appender_open(&t->a, cache, &opts);
  Py_END_ALLOW_THREADS
  if (rc != 0) {
    t->a = NULL;
    tee_free(t);
    return NULL; /* the regular iterator will do */
  }
  /* The iterator itself, as a pass would make it. */
  PyObject *create = s->create_iter;
  Py_INCREF(create);
  PyObject *iterable = PyObject_CallNoArgs(create);
  Py_DECREF(create);
  t->it = iterable != NULL ? PyObject_GetIter(iterable) : NULL;
  Py_XDECREF(iterable);
  bcpy_iter *it = NULL;
  if (t->it == NULL || (it = (bcpy_iter *)bcpy_iter_open(loader, &bcpy_CacheIter_Type, seq, 0,
                                                          0, 0, 1, GIVEN_BATCH, false, true)) == NULL) {
    tee_free(t); /* the source's exception reaches the caller as itself */
    return NULL;
  }
  it->producer = t;
  s->tee = t; /* registered: no second first pass, no prefetch */
  atomic_store(&s->tee_active, true);
  return (PyObject *)it;
}
