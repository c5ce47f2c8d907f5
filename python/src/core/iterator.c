/*
 * core/iterator.c - the one iterator of every sequence (bcpy_iter): records
 * read ahead on worker threads (bc_readahead) and decoded by the sequence's
 * kind, or elements made a chunk at a time by the kind (views with Python
 * code).  ReaderIterator (range and index streams of a Reader) is made
 * here; _CacheIter (loadit/) and ViewIterator (views/) are the same type
 * under their own names.
 *
 * Each __next__ that finds its batch empty refills it: the GIL is released
 * once and up to `batch` records are taken from the read-ahead window
 * (waiting only as long as they are not ready); they are then handed out
 * one per call.  From the main thread Ctrl-C reaches a wait for a fill
 * through the interrupt handler (module.c); the iteration then ends with
 * KeyboardInterrupt, and when the sequence's reads may wait for a cache's
 * fill (kind->waits) a thread of its own closes the read-ahead.
 *
 * Streams of positions:
 *   - bc_seq_iterate: every position of a sequence of known length;
 *   - lazy: 0, 1, 2, ... up to the length once it is exact, never waiting
 *     for it (a cache whose source still runs); a read past the end then
 *     fails with BC_ERANGE, which ends the iteration when that position is
 *     at or past the now exact length;
 *   - the indices a Python iterable yields (ReaderIterator): bc_readahead
 *     pulls them only inside bc_readahead_next, i.e. in the thread that
 *     runs __next__ and has released the GIL; the callback takes the GIL
 *     to call next() and holds no bagcache lock meanwhile.  An exception of
 *     the Python iterator is stored here and ends the stream; bc_readahead
 *     reports that end only after every record of the indices before it,
 *     and __next__ then re-raises the stored exception.  A 1-D buffer of
 *     native integers (a numpy array) is copied up front and streamed
 *     without the GIL.
 *
 * `busy` (read and written with the GIL held) keeps a second thread, or
 * the index iterator itself, from entering a refill while one runs: a
 * bc_readahead has one consumer.  After fork() the worker threads do not
 * exist in the child: an iterator inherited from the parent (or a first
 * pass, whose appender is the parent's) refuses to run there and, when
 * freed there, leaks its window instead of joining threads that are not
 * there.
 */
#include "core/bcpy.h"

#include <stdlib.h>
#include <string.h>

/* ---- the lazy stream ------------------------------------------------------------ */

struct bcpy_stream {
  bc_seq *seq;   /* own reference */
  uint64_t next; /* next position the stream yields */
};

static int lazy_next(void *payload, uint64_t *index) {
  struct bcpy_stream *r = payload;
  bc_len l;
  int rc = bc_seq_length(r->seq, false, &l);
  if (rc != 0) return rc;
  if (l.kind == BC_LEN_EXACT && r->next >= l.value) return 0;
  *index = r->next++;
  return 1;
}

/* Closes a read-ahead and frees its lazy stream (no GIL: it waits for the
 * reads in flight). */
static void close_readahead(bc_readahead *ra, struct bcpy_stream *stream) {
  bc_readahead_close(ra);
  if (stream != NULL) {
    bc_seq_unref(stream->seq);
    free(stream);
  }
}

/* A read-ahead of seq from `from` (lazy: its own stream). */
static int open_readahead(bcpy_iter *it, bc_seq *seq, uint64_t from, size_t window,
                          int threads, bool lazy) {
  bc_readahead_options o = BC_READAHEAD_OPTIONS_INIT;
  o.window = window;
  if (threads > 0) o.threads = threads;
  if (!lazy) return bc_seq_iterate(&it->ra, seq, from, &o);
  struct bcpy_stream *r = calloc(1, sizeof *r);
  if (r == NULL) return bc_set_errmsg(BC_ENOMEM, "out of memory");
  r->seq = bc_seq_ref(seq);
  r->next = from;
  int rc = bc_readahead_open(&it->ra, seq, lazy_next, r, &o);
  if (rc != 0) {
    bc_seq_unref(r->seq);
    free(r);
    return rc;
  }
  it->stream = r;
  return 0;
}

/* ---- construction -------------------------------------------------------------- */

static bcpy_iter *iter_alloc(bcpy_sobj *owner, PyTypeObject *type, size_t batch,
                             size_t max_batch, bool chunked) {
  bcpy_iter *it = PyObject_GC_New(bcpy_iter, type);
  if (it == NULL) return NULL;
  memset((char *)it + sizeof(PyObject), 0, sizeof *it - sizeof(PyObject));
  Py_INCREF(owner);
  it->owner = owner;
  it->forks = bcpy_forks();
  it->fail = (bc_error_state)BC_ERROR_STATE_INIT;
  it->batch = batch;
  it->max_batch = max_batch;
  it->cap = max_batch;
  if (chunked) {
    it->items = PyMem_Calloc(it->cap, sizeof *it->items);
  } else {
    it->bufs = PyMem_RawCalloc(it->cap, sizeof *it->bufs);
    it->index = PyMem_RawMalloc(it->cap * sizeof *it->index);
  }
  PyObject_GC_Track(it);
  if (chunked ? it->items == NULL : it->bufs == NULL || it->index == NULL) {
    Py_DECREF(it);
    PyErr_NoMemory();
    return NULL;
  }
  if (owner->kind->track != NULL) owner->kind->track(owner, it, true);
  return it;
}

PyObject *bcpy_iter_open(bcpy_sobj *owner, PyTypeObject *type, bc_seq *seq, uint64_t from,
                         size_t window, int threads, size_t batch, size_t max_batch,
                         bool lazy, bool chunked) {
  bcpy_iter *it = iter_alloc(owner, type, batch, max_batch, chunked);
  if (it == NULL) return NULL;
  int rc = 0;
  if (chunked) {
    bc_len l;
    it->next = from;
    rc = bc_seq_length(seq, false, &l); /* never waits */
    if (rc == 0 && l.kind == BC_LEN_EXACT) {
      it->bounded = true;
      it->end = l.value;
    }
  } else {
    it->pulled = from;
    Py_BEGIN_ALLOW_THREADS /* bc_seq_iterate may settle the length */
    rc = open_readahead(it, seq, from, window, threads, lazy);
    Py_END_ALLOW_THREADS
  }
  if (rc != 0) {
    owner->kind->raise(rc, bc_errno(), NULL);
    Py_DECREF(it);
    return NULL;
  }
  return (PyObject *)it;
}

/* ---- ReaderIterator's constructors ------------------------------------------------ */

/* Records kept in flight: bagz's rule (about 1 MiB of stored bytes, or
 * read_ahead records), bounded so that tiny records do not ask for a huge
 * window. */
#define DEFAULT_WINDOW_BYTES (1u << 20)
#define MAX_DEFAULT_WINDOW 4096
#define MAX_BATCH 64

static int window_size(bcpy_seq *seq, PyObject *read_ahead, uint64_t count,
                       size_t *out) {
  uint64_t w;
  if (read_ahead == NULL || read_ahead == Py_None) {
    bc_bag *bag = bc_seq_bag(seq->root);
    double bpr = bag != NULL ? bc_bag_bytes_per_record(bag) : 1024.0;
    if (bpr < 8) bpr = 8;
    w = 1 + (uint64_t)(DEFAULT_WINDOW_BYTES / bpr);
    if (w > MAX_DEFAULT_WINDOW) w = MAX_DEFAULT_WINDOW;
  } else {
    Py_ssize_t r = PyNumber_AsSsize_t(read_ahead, PyExc_OverflowError);
    if (r == -1 && PyErr_Occurred()) return -1;
    if (r < 0) {
      PyErr_Format(PyExc_ValueError, "read_ahead must be >= 0, not %zd", r);
      return -1;
    }
    w = (uint64_t)r;
    if (w > (1u << 24)) w = 1u << 24; /* slots are allocated up front */
  }
  if (w > count) w = count;
  if (w < 1) w = 1;
  *out = (size_t)w;
  return 0;
}

static int reader_threads(bcpy_seq *seq) {
  return seq->readahead_threads > 0 ? seq->readahead_threads : 2;
}

PyObject *bcpy_iter_range(bcpy_seq *seq, uint64_t start, uint64_t count,
                          PyObject *read_ahead) {
  size_t window;
  if (window_size(seq, read_ahead, count, &window) < 0) return NULL;
  size_t batch = window < MAX_BATCH ? window : MAX_BATCH;
  bc_seq *view = NULL;
  int rc = 0;
  if (start == 0 && count == seq->len)
    view = bc_seq_ref(seq->seq);
  else
    rc = bc_seq_slice(&view, seq->seq, (int64_t)start, (int64_t)(start + count), 1);
  if (rc != 0) return bcpy_raise(rc, NULL);
  PyObject *it = bcpy_iter_open((bcpy_sobj *)seq, &bcpy_Iterator_Type, view, 0, window,
                                reader_threads(seq), batch, batch, false, false);
  bc_seq_unref(view); /* the read-ahead holds its own */
  return it;
}

/* The index stream: called by bc_readahead_next, in the thread of __next__,
 * which has released the GIL. */
static int index_stream(void *payload, uint64_t *index) {
  bcpy_iter *it = payload;
  int rc;
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject *item = PyIter_Next(it->source);
  if (item == NULL) {
    if (!PyErr_Occurred()) {
      rc = 0; /* StopIteration: a clean end */
      goto done;
    }
    goto failed;
  }
  PyObject *num = PyNumber_Index(item);
  Py_DECREF(item);
  if (num == NULL) goto failed;
  long long v = PyLong_AsLongLong(num);
  Py_DECREF(num);
  if (v == -1 && PyErr_Occurred()) goto failed;
  long long i = v < 0 ? v + (long long)it->len : v;
  if (i < 0 || (unsigned long long)i >= it->len) {
    rc = bc_set_errmsg(BC_ERANGE, "index %lld out of range [0, %llu)", v,
                       (unsigned long long)it->len);
    goto done;
  }
  *index = (uint64_t)i;
  rc = 1;
  goto done;
failed:
  /* Kept for __next__ to raise once the records before it are out. */
  PyErr_Fetch(&it->exc_type, &it->exc_value, &it->exc_tb);
  rc = bc_set_errmsg(BC_ESOURCE, "the index iterator raised an exception");
done:
  PyGILState_Release(gil);
  return rc;
}

/* The stream of a C array of indices: no GIL needed. */
static int array_stream(void *payload, uint64_t *index) {
  bcpy_iter *it = payload;
  if (it->array_pos == it->array.n) return 0;
  int64_t v = it->array.v[it->array_pos++];
  int64_t i = v < 0 ? v + (int64_t)it->len : v;
  if (i < 0 || (uint64_t)i >= it->len)
    return bc_set_errmsg(BC_ERANGE, "index %lld out of range [0, %llu)",
                         (long long)v, (unsigned long long)it->len);
  *index = (uint64_t)i;
  return 1;
}

PyObject *bcpy_iter_indices(bcpy_seq *seq, PyObject *indices,
                            PyObject *read_ahead) {
  size_t window;
  bcpy_ivec array = {NULL, 0, 0};
  PyObject *source = NULL;
  int conv = bcpy_indices_from_buffer(indices, &array, false);
  if (conv < 0) return NULL;
  if (conv == 0 && (source = PyObject_GetIter(indices)) == NULL) return NULL;
  if (window_size(seq, read_ahead, conv ? array.n : UINT64_MAX, &window) < 0) {
    Py_XDECREF(source);
    PyMem_RawFree(array.v);
    return NULL;
  }
  size_t batch = window < MAX_BATCH ? window : MAX_BATCH;
  bcpy_iter *it = iter_alloc((bcpy_sobj *)seq, &bcpy_Iterator_Type, batch, batch, false);
  if (it == NULL) { /* freed on the way out: nothing of ours taken yet */
    Py_XDECREF(source);
    PyMem_RawFree(array.v);
    return NULL;
  }
  it->source = source;
  it->array = array;
  it->len = seq->len;
  bc_readahead_options o = BC_READAHEAD_OPTIONS_INIT;
  o.window = window;
  o.threads = reader_threads(seq);
  int rc = bc_readahead_open(&it->ra, seq->seq, conv ? array_stream : index_stream,
                             it, &o);
  if (rc != 0) {
    bcpy_raise(rc, NULL);
    Py_DECREF(it);
    return NULL;
  }
  return (PyObject *)it;
}

/* ---- stopping ----------------------------------------------------------------------- */

/* Closing a read-ahead whose reads may be fills, on a helper. */
typedef struct {
  bcpy_call base;
  bc_readahead *ra;
  struct bcpy_stream *stream;
} close_call;

static int close_run(bcpy_call *c) {
  close_call *k = (close_call *)c;
  close_readahead(k->ra, k->stream);
  k->ra = NULL;
  k->stream = NULL;
  return 0;
}

static void close_free(bcpy_call *c) {
  close_call *k = (close_call *)c;
  if (k->ra != NULL) close_readahead(k->ra, k->stream);
  PyMem_RawFree(k);
}

/* Stops the workers.  `may_detach`: reads in flight may be long fills that
 * this thread must not wait for (the main thread, a source callback), so
 * a thread of its own closes it there. */
static void stop_readahead(bcpy_iter *it, bool may_detach) {
  bc_readahead *ra = it->ra;
  struct bcpy_stream *stream = it->stream;
  it->ra = NULL;
  it->stream = NULL;
  if (ra == NULL) return;
  if (it->forks != bcpy_forks()) return; /* forked child: no threads to stop; leaked */
  const bcpy_seq_kind *kind = it->owner->kind;
  if (may_detach && kind->waits != NULL && kind->waits(it->owner) &&
      (bcpy_is_main_thread() || bcpy_in_callback)) {
    close_call *c = PyMem_RawCalloc(1, sizeof *c);
    if (c != NULL) {
      *c = (close_call){{close_run, close_free, 0}, ra, stream};
      if (bcpy_run_detached(&c->base) == 0) return;
      PyMem_RawFree(c);
    }
  }
  Py_BEGIN_ALLOW_THREADS
  close_readahead(ra, stream);
  Py_END_ALLOW_THREADS
}

void bcpy_iter_stop(bcpy_iter *it) { stop_readahead(it, true); }

/* ---- refills ----------------------------------------------------------------------- */

static void keep_exception(bcpy_iter *it) {
  Py_CLEAR(it->exc_type);
  Py_CLEAR(it->exc_value);
  Py_CLEAR(it->exc_tb);
  PyErr_Fetch(&it->exc_type, &it->exc_value, &it->exc_tb);
}

/* Takes up to it->batch records from the read-ahead, the GIL released
 * (from the main thread, Ctrl-C reaches a wait for a fill through the
 * interrupt handler: BC_ECANCELED with KeyboardInterrupt pending). */
static void refill_readahead(bcpy_iter *it) {
  bc_readahead *ra = it->ra;
  size_t n = 0, want = it->batch;
  int got = 1;
  Py_BEGIN_ALLOW_THREADS
  while (n < want && (got = bc_readahead_next(ra, &it->bufs[n], &it->index[n])) == 1) n++;
  Py_END_ALLOW_THREADS
  if (got == BC_ECANCELED && PyErr_Occurred()) {
    /* Ctrl-C (the exception is pending): the iteration ends now; the
     * read-ahead's reads in flight may be long fills, so a thread of its
     * own closes it where this one must not wait. */
    keep_exception(it);
    bc_error_clear();
    it->head = it->count = 0;
    it->done = true;
    stop_readahead(it, true);
    return;
  }
  if (got == BC_ERANGE && it->stream != NULL) {
    /* Past the end of a sequence whose end was not known when the
     * position was streamed: the end, if the length now says so. */
    bc_len l;
    if (bc_seq_length(it->stream->seq, false, &l) == 0 && l.kind == BC_LEN_EXACT &&
        it->pulled + n >= l.value)
      got = 0;
  }
  it->head = 0;
  it->count = n;
  it->pulled += n;
  if (got != 1) {
    it->done = true;
    if (got < 0) { /* raised after the records before it */
      bc_error_save(&it->fail, got);
      bc_error_clear();
    }
    stop_readahead(it, false); /* finished: nothing is in flight */
  }
}

/* ---- iteration ---------------------------------------------------------------------- */

/* After the last element: raises how the iteration ended, once. */
static PyObject *finish(bcpy_iter *it) {
  if (it->exc_type != NULL) {
    PyErr_Restore(it->exc_type, it->exc_value, it->exc_tb);
    it->exc_type = it->exc_value = it->exc_tb = NULL;
    bc_error_state_clear(&it->fail);
    return NULL;
  }
  if (it->fail.code == 0) return NULL; /* StopIteration */
  int rc = bc_error_restore(&it->fail);
  bc_error_state_clear(&it->fail);
  it->owner->kind->raise(rc, bc_errno(), NULL);
  return NULL;
}

/* Everything but handing out a record read ahead: items of a chunk, the
 * end, refills.  Apart, so that the hot path below stays small.  *ready:
 * records were read ahead, for iter_next to hand out. */
static __attribute__((noinline)) PyObject *next_slow(bcpy_iter *it, bool *ready) {
  bcpy_sobj *owner = it->owner;
  if (owner == NULL) return NULL; /* cleared by the collector: ended */
  const bcpy_seq_kind *kind = owner->kind;
  for (;;) {
    if (it->head < it->count) {
      PyObject *obj = it->items[it->head];
      it->items[it->head++] = NULL;
      return obj;
    }
    if (kind->check(owner) < 0) return NULL; /* closed: its records are gone */
    if (it->done) return finish(it);
    if (it->busy) {
      PyErr_Format(PyExc_RuntimeError, "%s is already running (used from two threads, "
                   "or from its own index iterator)", Py_TYPE(it)->tp_name);
      return NULL;
    }
    if ((it->ra != NULL || it->producer != NULL) && it->forks != bcpy_forks()) {
      PyErr_Format(PyExc_RuntimeError, "%s was created in another process (before "
                   "fork); create a new iterator in this one", Py_TYPE(it)->tp_name);
      return NULL;
    }
    it->busy = true;
    if (it->ra != NULL)
      refill_readahead(it);
    else if (it->items != NULL && kind->chunk != NULL)
      kind->chunk(owner, it);
    else
      it->done = true; /* the read-ahead was stopped */
    it->busy = false;
    if (it->batch < it->max_batch) it->batch = 2 * it->batch < it->max_batch ? 2 * it->batch
                                                                            : it->max_batch;
    if (it->head < it->count && it->items == NULL) {
      *ready = true;
      return NULL;
    }
  }
}

static PyObject *iter_next(bcpy_iter *it) {
  for (;;) {
    size_t k = it->head;
    if (k < it->count && it->items == NULL) { /* a record read ahead */
      it->head = k + 1;
      bc_buf *b = &it->bufs[k];
      bcpy_sobj *owner = it->owner;
      if (owner->kind->decode != NULL) return owner->kind->decode(owner, b, it->index[k]);
      return PyBytes_FromStringAndSize((const char *)b->data, (Py_ssize_t)b->size);
    }
    bool ready = false;
    PyObject *r = next_slow(it, &ready);
    if (!ready) return r;
  }
}

/* ---- type ------------------------------------------------------------------------ */

static int iter_traverse(bcpy_iter *it, visitproc visit, void *arg) {
  Py_VISIT(it->source);
  Py_VISIT(it->owner);
  if (it->items != NULL)
    for (size_t k = it->head; k < it->count; k++) Py_VISIT(it->items[k]);
  Py_VISIT(it->exc_type);
  Py_VISIT(it->exc_value);
  Py_VISIT(it->exc_tb);
  return 0;
}

/* Also breaks cycles through the owner: the read-ahead is stopped first
 * (its stream may use the source), and the iterator unlisted. */
static int iter_clear(bcpy_iter *it) {
  bcpy_sobj *owner = it->owner;
  if (owner != NULL) {
    if (owner->kind->track != NULL) owner->kind->track(owner, it, false);
    stop_readahead(it, true);
  }
  Py_CLEAR(it->source);
  if (it->items != NULL) {
    for (size_t k = it->head; k < it->count; k++) Py_CLEAR(it->items[k]);
    it->head = it->count = 0;
  }
  Py_CLEAR(it->exc_type);
  Py_CLEAR(it->exc_value);
  Py_CLEAR(it->exc_tb);
  Py_CLEAR(it->owner);
  it->head = it->count = 0; /* nothing is handed out without an owner */
  return 0;
}

static void iter_dealloc(bcpy_iter *it) {
  PyObject_GC_UnTrack(it);
  iter_clear(it);
  if (it->bufs != NULL)
    for (size_t k = 0; k < it->cap; k++) bc_buf_release(&it->bufs[k]);
  PyMem_RawFree(it->bufs);
  PyMem_RawFree(it->index);
  PyMem_Free(it->items);
  PyMem_RawFree(it->array.v);
  bc_error_state_clear(&it->fail);
  PyObject_GC_Del(it);
}

PyTypeObject bcpy_Iterator_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bagcache.ReaderIterator",
    .tp_basicsize = sizeof(bcpy_iter),
    .tp_dealloc = (destructor)iter_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, /* subtypes: static only */
    .tp_doc = "Iterator over records, read ahead on worker threads.\n\n"
              "Made by iter(reader), read_range_iter and read_indices_iter.",
    .tp_traverse = (traverseproc)iter_traverse,
    .tp_clear = (inquiry)iter_clear,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)iter_next,
};
