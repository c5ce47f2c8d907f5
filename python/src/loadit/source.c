/*
 * loadit/source.c - a bc_source over a Python iterator factory:
 * open() calls create_iter() and iter() on the result, next() calls next()
 * on that iterator and serializes the record (dumps, or the record's own
 * bytes), skip() drops records without serializing them, close() closes the
 * iterator (generator.close()).  A pass opened while a first pass runs in
 * a reader's thread reads that pass's records instead, and may be handed
 * its iterator (loadit/tee.c).  Also the prefetch policy of a LoadIt.
 *
 * GIL: every callback is called by the engine with no bagcache lock held,
 * from whichever thread needs the records; it takes the GIL with
 * PyGILState_Ensure around its Python calls only.  During interpreter
 * shutdown the callbacks fail without touching Python.
 *
 * Exceptions: an exception raised by create_iter, the iterator or dumps is
 * attached to the BC_ESOURCE failure as its payload (bc_error_set_payload:
 * a box holding a reference to the exception, with its traceback).  The
 * engine carries the payload to every thread that needed the fill; the
 * Python error path (bcpy_raise) raises that very object.  The box's last
 * release drops the reference with the GIL taken.  StopIteration from
 * next() is the end of the source, not an error.
 *
 * Cancellation: a pass remembers the source's generation when it is
 * opened; bcpy_source_close() bumps it, and the pass's next callback then
 * fails (BC_ECLOSED, which the threads that waited for the fill retry)
 * without calling the iterator, so an abandoned fill ends within one
 * record.  bcpy_source_close() also refuses new passes (a closed loader
 * fills nothing more, whatever reads of it are still in flight).
 */
#include "loadit/loadit.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the GIL in threads Python did not start ----------------------------------
 *
 * PyGILState_Ensure in a thread without a Python thread state creates one,
 * and the matching Release deletes it: per record, from the engine's
 * threads.  Both take the runtime's thread-state lock without the GIL, and
 * CPython before 3.12 does not hold that lock across fork(): a child forked
 * while another thread held it deadlocks in PyOS_AfterFork_Child.  So each
 * such thread keeps one thread state for its lifetime (an outer Ensure that
 * is released only when the thread exits, by a thread-specific key's
 * destructor); the Ensure/Release pairs of the callbacks then only take and
 * drop the GIL.  Threads that exit during interpreter shutdown leave their
 * state to the runtime's cleanup. */

static pthread_key_t pin_key;
static pthread_once_t pin_once = PTHREAD_ONCE_INIT;
static bool pin_ok;

/* The thread exits.  Python's own key for the state may already have been
 * cleared (keys are torn down in creation order), so the state is deleted
 * directly rather than through PyGILState_Release. */
static void unpin(void *tstate) {
  if (tstate == NULL || bcpy_finalizing()) return;
  PyEval_RestoreThread(tstate);
  PyThreadState_Clear(tstate);
  PyThreadState_DeleteCurrent(); /* and drops the GIL */
}

static void pin_init(void) { pin_ok = pthread_key_create(&pin_key, unpin) == 0; }

/* Takes the GIL for a source callback's Python calls from any thread
 * (marking it as bcpy_in_callback); gil_leave gives it back. */
static PyGILState_STATE gil_enter(void) {
  if (PyGILState_GetThisThreadState() == NULL) {
    pthread_once(&pin_once, pin_init);
    if (pin_ok) {
      (void)PyGILState_Ensure(); /* creates this thread's state ... */
      PyThreadState *ts = PyEval_SaveThread(); /* ... kept, GIL dropped */
      if (pthread_setspecific(pin_key, ts) != 0) {
        PyEval_RestoreThread(ts);
        PyGILState_Release(PyGILState_UNLOCKED);
      }
    }
  }
  PyGILState_STATE st = PyGILState_Ensure();
  bcpy_in_callback++;
  return st;
}

static void gil_leave(PyGILState_STATE st) {
  bcpy_in_callback--;
  PyGILState_Release(st);
}

/* The payload of a source's failure: a reference to its exception. */
typedef struct {
  atomic_long refs;
  PyObject *exc;
} exc_box;

static void box_retain(void *p) { atomic_fetch_add(&((exc_box *)p)->refs, 1); }

/* Drops an exception in the main thread (a pending call: GIL held). */
static int drop_exception(void *exc) {
  Py_DECREF((PyObject *)exc);
  return 0;
}

/* The last release drops the exception with the GIL taken.  It may run in
 * an engine thread holding engine locks, so it never waits for the GIL
 * there: a thread without the GIL hands the reference to the main thread
 * (Py_AddPendingCall, which takes no lock a GIL holder could hold), and
 * takes the GIL itself only when that queue is full.  As inside a source
 * callback (gil_enter), a loader that dies with the exception hands
 * its teardown to another thread. */
static void box_release(void *p) {
  exc_box *box = p;
  if (atomic_fetch_sub(&box->refs, 1) != 1) return;
  PyObject *exc = box->exc;
  PyMem_RawFree(box);
  if (bcpy_finalizing()) return; /* at shutdown the object is left to the runtime */
  if (!PyGILState_Check() && Py_AddPendingCall(drop_exception, exc) == 0) return;
  PyGILState_STATE gil = gil_enter();
  Py_DECREF(exc);
  gil_leave(gil);
}

int bcpy_keep_exception(const char *what) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (value == NULL) { /* cannot happen after a failed call; be safe */
    Py_XDECREF(type);
    Py_XDECREF(tb);
    return bc_set_errmsg(BC_ESOURCE, "the source's %s failed", what);
  }
  if (tb != NULL) PyException_SetTraceback(value, tb);
  const char *tname = Py_TYPE(value)->tp_name;
  PyObject *text = PyObject_Str(value);
  const char *s = text != NULL ? PyUnicode_AsUTF8(text) : NULL;
  if (s == NULL) PyErr_Clear();
  int rc = bc_set_errmsg(BC_ESOURCE, "the source's %s raised %s: %.400s", what, tname,
                         s != NULL ? s : "?");
  Py_XDECREF(text);
  exc_box *box = PyMem_RawMalloc(sizeof *box);
  if (box != NULL) { /* out of memory: only the message remains (SourceError) */
    atomic_init(&box->refs, 0);
    box->exc = value; /* the box's reference */
    value = NULL;
    bc_error_set_payload(box, box_retain, box_release); /* takes the first */
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  return rc;
}

PyObject *bcpy_payload_exception(void) {
  if (bc_error_payload() == NULL) return NULL;
  bc_error_state st = BC_ERROR_STATE_INIT;
  bc_error_save(&st, 0);
  PyObject *exc = NULL;
  if (st.release == box_release) { /* ours, not another library's */
    exc = ((exc_box *)st.payload)->exc;
    Py_INCREF(exc);
  }
  bc_error_state_clear(&st); /* not the last reference: the thread holds one */
  return exc;
}

/* ---- the source ------------------------------------------------------------- */

/* Records a pass pulls from the iterator per GIL acquisition, at most, and
 * for at most BATCH_NS: taking the GIL once per record from an engine
 * thread while the reader's thread also wants it costs more than the
 * record itself (the two threads hand the GIL back and forth). */
#define BATCH 64
#define BATCH_NS 1000000

typedef struct {
  PyObject *it;          /* the pass's iterator */
  uint64_t pos;          /* records given or skipped so far */
  unsigned long generation;
  bc_buf queue[BATCH];   /* records serialized ahead, [head, count) */
  size_t head, count;
  int end_rc;            /* after the queue: 0 = the end, < 0 an error, */
  bc_error_state *end_err; /* ... with this error (payload included); 1 = not
                             reached */
} pass;

bcpy_source *bcpy_source_new(PyObject *create_iter, PyObject *dumps, PyObject *dumps_args) {
  bcpy_source *s = PyMem_RawCalloc(1, sizeof *s);
  if (s == NULL) {
    PyErr_NoMemory();
    return NULL;
  }
  atomic_init(&s->refs, 1);
  atomic_init(&s->generation, 0);
  atomic_init(&s->closed, false);
  atomic_init(&s->prefetch_mode, BCPY_PREFETCH_NONE);
  atomic_init(&s->prefetch_ahead, 1);
  atomic_init(&s->passes, 0);
  atomic_init(&s->tee_active, false);
  for (int k = 0; k < BCPY_RECENT_OPENS; k++) atomic_init(&s->recent_opens[k], 0);
  atomic_init(&s->recent_next, 0);
  Py_INCREF(create_iter);
  s->create_iter = create_iter;
  Py_XINCREF(dumps);
  s->dumps = dumps;
  Py_XINCREF(dumps_args);
  s->dumps_args = dumps_args;
  return s;
}

PyObject *bcpy_source_dumps(const bcpy_source *s, PyObject *item) {
  PyObject *dumps = s->dumps;
  Py_INCREF(dumps); /* the call may run code that clears s's objects */
  PyObject *r;
  if (s->dumps_args == NULL) {
    r = PyObject_CallOneArg(dumps, item);
  } else {
    /* Extra arguments go positionally, through vectorcall where there is
     * one: a functools.partial with keywords would copy its keyword dict
     * on every call, a cost of the order of pickling a small record. */
    PyObject *args = s->dumps_args;
    Py_INCREF(args);
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    PyObject *stack[1 + BCPY_DUMPS_ARGS_MAX];
    stack[0] = item;
    for (Py_ssize_t i = 0; i < n; i++) stack[1 + i] = PyTuple_GET_ITEM(args, i);
    r = PyObject_Vectorcall(dumps, stack, (size_t)(1 + n), NULL);
    Py_DECREF(args);
  }
  Py_DECREF(dumps);
  return r;
}

void bcpy_source_unref(bcpy_source *s) {
  if (s == NULL || atomic_fetch_sub(&s->refs, 1) != 1) return;
  if (!bcpy_finalizing()) { /* at shutdown the objects are left to the runtime */
    PyGILState_STATE gil = gil_enter();
    Py_XDECREF(s->create_iter);
    Py_XDECREF(s->dumps);
    Py_XDECREF(s->dumps_args);
    Py_XDECREF(s->prefetch_fn);
    Py_XDECREF(s->loader);
    bcpy_tee_forget(s);
    gil_leave(gil);
  }
  PyMem_RawFree(s);
}

void bcpy_source_close(bcpy_source *s) {
  if (s == NULL) return;
  atomic_store(&s->closed, true);
  atomic_store(&s->prefetch_mode, BCPY_PREFETCH_NONE);
  atomic_fetch_add(&s->generation, 1); /* passes opened so far are cancelled */
}

/* The core reports the source's objects to the collector, so that a loader
 * in a reference cycle through its create_iter can be collected.  That is
 * safe because the core's finalizer closes the source before the collector
 * clears anything (finalizers run first), and every callback checks, with
 * the GIL, that the source is open (or its pass not cancelled) before it
 * touches these objects, holding a reference of its own while it calls
 * one. */
int bcpy_source_traverse(bcpy_source *s, visitproc visit, void *arg) {
  if (s == NULL) return 0;
  Py_VISIT(s->create_iter);
  Py_VISIT(s->dumps);
  Py_VISIT(s->dumps_args);
  Py_VISIT(s->prefetch_fn);
  return 0;
}

static int shutting_down(void) {
  return bc_set_errmsg(BC_ESOURCE, "the Python interpreter is shutting down");
}

/* A pass of a closed (or collected) loader: BC_ECLOSED, which threads that
 * waited for the fill retry with their own source. */
static int cancelled(void) {
  return bc_set_errmsg(BC_ECLOSED, "the fill was stopped: its LoadIt was closed");
}

/* A pass from record `start`: create_iter() for 0, create_iter(start=start)
 * otherwise (a seekable create_iter, see bcpy_source_seekable). */
static int open_pass(bcpy_source *s, uint64_t start, void **out) {
  if (bcpy_finalizing()) return shutting_down();
  if (atomic_load(&s->closed))
    return bc_set_errmsg(BC_ECLOSED, "the LoadIt was closed");
  pass *p = PyMem_RawCalloc(1, sizeof *p);
  if (p == NULL) return bc_set_errmsg(BC_ENOMEM, "out of memory");
  p->generation = atomic_load(&s->generation);
  p->end_rc = 1;
  int rc = 0;
  PyGILState_STATE gil = gil_enter();
  if (atomic_load(&s->closed) || s->create_iter == NULL) { /* closed meanwhile */
    rc = bc_set_errmsg(BC_ECLOSED, "the LoadIt was closed");
    goto done;
  }
  if (start == 0 && (p->it = bcpy_tee_take(s)) != NULL)
    goto done; /* the first pass's iterator, before its first record */
  /* A reference of our own for the call: the collector must never take
   * an object in use here for garbage (see bcpy_source_traverse). */
  PyObject *create = s->create_iter;
  Py_INCREF(create);
  PyObject *iterable = NULL;
  if (start == 0) {
    iterable = PyObject_CallNoArgs(create);
  } else {
    PyObject *kw = Py_BuildValue("{s:K}", "start", (unsigned long long)start);
    PyObject *noargs = PyTuple_New(0);
    if (kw != NULL && noargs != NULL) iterable = PyObject_Call(create, noargs, kw);
    Py_XDECREF(kw);
    Py_XDECREF(noargs);
  }
  Py_DECREF(create);
  if (iterable == NULL) {
    char what[64];
    snprintf(what, sizeof what, start == 0 ? "create_iter()" : "create_iter(start=%llu)",
             (unsigned long long)start);
    rc = bcpy_keep_exception(what);
    goto done;
  }
  p->pos = start;
  p->it = PyObject_GetIter(iterable);
  Py_DECREF(iterable);
  if (p->it == NULL) rc = bcpy_keep_exception("iter(create_iter())");
done:
  gil_leave(gil);
  if (rc != 0) {
    PyMem_RawFree(p);
    return rc;
  }
  atomic_fetch_add(&s->passes, 1);
  *out = p;
  return 0;
}

static int src_open(void *payload, void **out) { return open_pass(payload, 0, out); }

static int src_open_at(void *payload, uint64_t start, void **out) {
  return open_pass(payload, start, out);
}

PyObject *bcpy_source_record(const bcpy_source *s, PyObject *item) {
  PyObject *b;
  if (s->dumps != NULL) {
    b = bcpy_source_dumps(s, item);
  } else {
    Py_INCREF(item);
    b = item;
  }
  if (b == NULL || PyBytes_CheckExact(b)) return b;
  /* Another bytes-like object (it could change after this): a copy. */
  PyObject *copy = NULL;
  if ((PyUnicode_Check(b) || !PyObject_CheckBuffer(b)) && s->dumps != NULL) {
    PyErr_Format(PyExc_TypeError, "the serializer returned %.200s, not a bytes-like object",
                 Py_TYPE(b)->tp_name);
  } else if (PyUnicode_Check(b) || !PyObject_CheckBuffer(b)) {
    PyErr_Format(PyExc_TypeError, "a record must be a bytes-like object "
                 "(serializer=\"raw\"), not %.200s", Py_TYPE(b)->tp_name);
  } else {
    copy = PyBytes_FromObject(b);
  }
  Py_DECREF(b);
  return copy;
}

/* One record from the iterator into out (GIL held): 1, 0 at the end, or
 * an error (the exception kept). */
static int pull_one(bcpy_source *s, pass *p, bc_buf *out) {
  PyObject *item = PyIter_Next(p->it);
  if (item == NULL) return PyErr_Occurred() ? bcpy_keep_exception("iterator") : 0;
  if (p->generation != atomic_load(&s->generation)) {
    /* Cancelled while the iterator ran (by an interrupt, a close, or a
     * collection of the loader: then s's objects may be cleared). */
    Py_DECREF(item);
    return cancelled();
  }
  PyObject *record = bcpy_source_record(s, item);
  Py_DECREF(item);
  if (record == NULL) return bcpy_keep_exception("serializer");
  size_t n = (size_t)PyBytes_GET_SIZE(record);
  if (n > out->capacity) {
    unsigned char *data = realloc(out->data, n);
    if (data == NULL) {
      Py_DECREF(record);
      return bc_set_errmsg(BC_ENOMEM, "out of memory");
    }
    out->data = data;
    out->capacity = n;
  }
  if (n > 0) memcpy(out->data, PyBytes_AS_STRING(record), n);
  out->size = n;
  s->bytes_read += n;
  s->pulled++;
  Py_DECREF(record);
  return 1;
}

/* A copy of this thread's error, for after the queued records. */
static bc_error_state *save_error(int code) {
  bc_error_state *e = PyMem_RawMalloc(sizeof *e);
  if (e != NULL) {
    *e = (bc_error_state)BC_ERROR_STATE_INIT;
    bc_error_save(e, code);
  }
  return e;
}

/* The pass's stored failure as this thread's error: its code. */
static int restore_error(pass *p) {
  if (p->end_err == NULL) return bc_set_errmsg(p->end_rc, "%s", bc_strerror(p->end_rc));
  return bc_error_restore(p->end_err);
}

/* Fills the pass's queue with up to BATCH records under one GIL
 * acquisition (fewer when the iterator is slow: BATCH_NS); an end or an
 * error is kept for after the records before it. */
static void refill(bcpy_source *s, pass *p) {
  p->head = p->count = 0;
  PyGILState_STATE gil = gil_enter();
  uint64_t start = bcpy_now_ns();
  while (p->count < BATCH) {
    if (p->generation != atomic_load(&s->generation)) { /* cancelled */
      p->end_rc = cancelled();
      break;
    }
    int rc = pull_one(s, p, &p->queue[p->count]);
    if (rc != 1) {
      p->end_rc = rc;
      break;
    }
    p->count++;
    if (bcpy_now_ns() - start > BATCH_NS) break;
  }
  gil_leave(gil);
  if (p->end_rc < 0) p->end_err = save_error(p->end_rc);
}

static int src_next(void *payload, void *pass_, bc_buf *out) {
  bcpy_source *s = payload;
  pass *p = pass_;
  if (bcpy_finalizing()) return shutting_down();
  if (p->generation != atomic_load(&s->generation)) return cancelled();
  if (p->head == p->count && p->end_rc == 1) refill(s, p);
  if (p->head < p->count) {
    /* Hand over the queued buffer; the queue keeps the caller's old one. */
    bc_buf tmp = *out;
    *out = p->queue[p->head];
    p->queue[p->head++] = tmp;
    p->pos++;
    return 1;
  }
  if (p->end_rc < 0) return restore_error(p);
  return p->end_rc; /* 0: the end */
}

static int src_skip(void *payload, void *pass_, uint64_t n, uint64_t *skipped) {
  bcpy_source *s = payload;
  pass *p = pass_;
  if (bcpy_finalizing()) return shutting_down();
  uint64_t k = 0;
  int rc = 0;
  while (k < n && p->head < p->count) { /* the queue first */
    p->head++;
    p->pos++;
    k++;
  }
  if (k == n || p->end_rc != 1) { /* done, or the queue ended the pass */
    if (k < n && p->end_rc < 0) return restore_error(p);
    *skipped = k;
    return 0;
  }
  /* The GIL is held across the records; the interpreter still hands it to
   * other threads while the iterator's own Python code runs. */
  PyGILState_STATE gil = gil_enter();
  while (k < n) {
    if (p->generation != atomic_load(&s->generation)) {
      rc = cancelled();
      break;
    }
    PyObject *item = PyIter_Next(p->it);
    if (item == NULL) {
      if (PyErr_Occurred()) rc = bcpy_keep_exception("iterator");
      break;
    }
    Py_DECREF(item);
    p->pos++;
    k++;
    s->pulled++;
  }
  gil_leave(gil);
  if (rc == 0) *skipped = k;
  return rc;
}

static void src_close(void *payload, void *pass_) {
  bcpy_source *s = payload;
  pass *p = pass_;
  if (p == NULL) return;
  atomic_fetch_sub(&s->passes, 1);
  if (!bcpy_finalizing()) {
    PyGILState_STATE gil = gil_enter();
    PyObject *saved_type, *saved_value, *saved_tb;
    PyErr_Fetch(&saved_type, &saved_value, &saved_tb);
    if (p->it != NULL) {
      /* A generator is closed now (its finally blocks run) rather than
       * whenever it is collected; an error there is nobody's to handle. */
      PyObject *r = PyObject_CallMethod(p->it, "close", NULL);
      if (r == NULL) PyErr_Clear();
      Py_XDECREF(r);
      Py_DECREF(p->it);
    }
    PyErr_Restore(saved_type, saved_value, saved_tb);
    gil_leave(gil);
  }
  for (size_t k = 0; k < BATCH; k++) bc_buf_release(&p->queue[k]);
  if (p->end_err != NULL) bc_error_state_clear(p->end_err);
  PyMem_RawFree(p->end_err);
  PyMem_RawFree(p);
}

static void src_free(void *payload) { bcpy_source_unref(payload); }

void bcpy_source_describe(bcpy_source *s, bool thread_safe, bc_source *out) {
  memset(out, 0, sizeof *out);
  out->version = BC_SOURCE_VERSION;
  out->open = src_open;
  out->next = src_next;
  out->skip = src_skip;
  out->close = src_close;
  out->free_payload = src_free;
  out->payload = s;
  out->thread_safe = thread_safe;
  atomic_fetch_add(&s->refs, 1);
}

void bcpy_source_seekable(bc_source *out) { out->open_at = src_open_at; }

/* ---- prefetch ----------------------------------------------------------------- */

/* Adds shard `shard` to shards[] unless present; false when full. */
static bool add_shard(uint64_t *shards, size_t *n, size_t max, uint64_t shard) {
  for (size_t k = 0; k < *n; k++)
    if (shards[k] == shard) return true;
  if (*n == max) return false;
  shards[(*n)++] = shard;
  return true;
}

/* Adds the shard of index object `obj` (GIL held); false to stop. */
static bool add_index(PyObject *obj, uint64_t R, uint64_t *shards, size_t *n,
                      size_t max) {
  long long v = PyLong_AsLongLong(obj);
  if (v == -1 && PyErr_Occurred()) return false;
  if (v < 0) return true; /* relative to an unknown end: skipped */
  return add_shard(shards, n, max, (uint64_t)v / R);
}

/* preload_fn(loader, index) yields lists of indices (loadit), or indices:
 * their shards, in order, deduplicated (GIL held).  -1 on error. */
static int python_policy(bcpy_source *s, uint64_t index, uint64_t R,
                         uint64_t *shards, size_t max, size_t *n) {
  PyObject *fn = s->prefetch_fn, *loader = NULL, *result = NULL, *it = NULL;
  int rc = -1;
  if (atomic_load(&s->closed) || atomic_load(&s->prefetch_mode) != BCPY_PREFETCH_PYTHON ||
      fn == NULL || s->loader == NULL)
    return 0;
  Py_INCREF(fn);
  loader = PyWeakref_GetObject(s->loader);
  if (loader == NULL || loader == Py_None) {
    rc = loader == NULL ? -1 : 0;
    loader = NULL;
    goto done;
  }
  Py_INCREF(loader);
  result = PyObject_CallFunction(fn, "OK", loader, (unsigned long long)index);
  if (result == NULL || result == Py_None) {
    rc = result == NULL ? -1 : 0;
    goto done;
  }
  if ((it = PyObject_GetIter(result)) == NULL) goto done;
  PyObject *group;
  bool more = true;
  while (more && (group = PyIter_Next(it)) != NULL) {
    if (PyIndex_Check(group)) {
      PyObject *num = PyNumber_Index(group);
      more = num != NULL && add_index(num, R, shards, n, max);
      Py_XDECREF(num);
    } else {
      PyObject *git = PyObject_GetIter(group);
      PyObject *item;
      while (more && git != NULL && (item = PyIter_Next(git)) != NULL) {
        PyObject *num = PyNumber_Index(item);
        Py_DECREF(item);
        more = num != NULL && add_index(num, R, shards, n, max);
        Py_XDECREF(num);
      }
      if (git == NULL) more = false;
      Py_XDECREF(git);
    }
    Py_DECREF(group);
  }
  rc = PyErr_Occurred() ? -1 : 0;
done:
  Py_XDECREF(it);
  Py_XDECREF(result);
  Py_XDECREF(loader);
  if (rc < 0) PyErr_WriteUnraisable(fn); /* advice only: reported, dropped */
  Py_DECREF(fn);
  return rc;
}

size_t bcpy_source_prefetch(void *payload, uint64_t index, uint64_t shard_records,
                            uint64_t *shards, size_t max) {
  bcpy_source *s = payload;
  uint64_t R = shard_records ? shard_records : 1;
  size_t n = 0;
  if (atomic_load(&s->tee_active)) return 0; /* a first pass asks for its shards */
  switch (atomic_load(&s->prefetch_mode)) {
    case BCPY_PREFETCH_NEXT: {
      /* Only when this open continues a sequential read: the first shard,
       * or the one before it among the last shards opened.  Under random
       * access the next shard would cost a shard of records and evict one
       * a reader is as likely to need. */
      uint64_t shard = index / R;
      bool sequential = shard == 0;
      for (int k = 0; k < BCPY_RECENT_OPENS && !sequential; k++)
        sequential = atomic_load(&s->recent_opens[k]) == shard;
      unsigned slot = atomic_fetch_add(&s->recent_next, 1) % BCPY_RECENT_OPENS;
      atomic_store(&s->recent_opens[slot], shard + 1);
      if (!sequential) return 0;
      int ahead = atomic_load(&s->prefetch_ahead);
      for (int k = 1; k <= ahead && n < max; k++) shards[n++] = index / R + (uint64_t)k;
      return n;
    }
    case BCPY_PREFETCH_PYTHON: {
      if (bcpy_finalizing()) return 0;
      PyGILState_STATE gil = gil_enter();
      if (python_policy(s, index, R, shards, max, &n) < 0) n = 0;
      gil_leave(gil);
      return n;
    }
    default:
      return 0;
  }
}
