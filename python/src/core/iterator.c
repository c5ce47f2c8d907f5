/*
 * core/iterator.c - ReaderIterator: records read ahead on worker threads
 * (bc_readahead), over a range of a view or over the indices a Python
 * iterable yields.
 *
 * Each __next__ that finds its local batch empty releases the GIL once and
 * takes up to `batch` records from the read-ahead window (waiting only as
 * long as the records are not ready), then hands them out one per call.
 *
 * A 1-D buffer of native integers (a numpy array) is copied into a C array
 * up front and streamed without the GIL; its out-of-range indices still
 * end the iteration only after the records before them.
 *
 * Index streams: bc_readahead pulls indices only inside bc_readahead_next,
 * i.e. in the thread that runs __next__ and has released the GIL; the
 * stream callback takes the GIL (PyGILState_Ensure) to call next() on the
 * Python iterator, and holds no bagcache lock while doing so.  An exception
 * of the Python iterator is stored here and ends the stream; bc_readahead
 * reports that end only after every record of the indices before it, and
 * __next__ then re-raises the stored exception.
 *
 * `busy` (read and written with the GIL held) keeps a second thread, or
 * the index iterator itself, from entering bc_readahead_next while a call
 * is in it: a bc_readahead has one consumer.
 *
 * After fork() the worker threads do not exist in the child: an iterator
 * inherited from the parent refuses to run there and, when freed there,
 * leaks its window instead of joining threads that are not there.
 */
#include "core/bcpy.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "structmember.h"

typedef struct {
  PyObject_HEAD
  bc_readahead *ra;
  PyObject *source; /* iterator of indices, or NULL for a range */
  bcpy_ivec array;  /* or the indices of a native integer buffer, read
                       without the GIL (next: array_pos) */
  size_t array_pos;
  PyObject *owner;  /* the sequence object the records come from */
  uint64_t len;     /* its length, for checking streamed indices */
  pid_t pid;        /* the process whose threads serve `ra` */
  bool busy;
  bool done; /* ra has ended; what remains is bufs[head..count) + the end */
  bc_buf *bufs;
  size_t cap, head, count;
  int end_rc;    /* how the iteration ended: 0 or a BC_E* code */
  char *end_msg; /* its message */
  int end_errno; /* and its bc_errno() */
  PyObject *exc_type, *exc_value, *exc_tb; /* the source's exception */
} bcpy_iter;

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

static bcpy_iter *iter_new(bcpy_seq *seq, size_t window) {
  bcpy_iter *it = PyObject_GC_New(bcpy_iter, &bcpy_Iterator_Type);
  if (it == NULL) return NULL;
  it->ra = NULL;
  it->source = NULL;
  it->array = (bcpy_ivec){NULL, 0, 0};
  it->array_pos = 0;
  Py_INCREF(seq);
  it->owner = (PyObject *)seq;
  it->len = seq->len;
  it->pid = getpid();
  it->busy = false;
  it->done = false;
  it->cap = window < MAX_BATCH ? window : MAX_BATCH;
  it->head = it->count = 0;
  it->end_rc = 0;
  it->end_msg = NULL;
  it->exc_type = it->exc_value = it->exc_tb = NULL;
  it->bufs = PyMem_RawCalloc(it->cap, sizeof *it->bufs);
  PyObject_GC_Track(it);
  if (it->bufs == NULL) {
    Py_DECREF(it);
    PyErr_NoMemory();
    return NULL;
  }
  return it;
}

/* ---- construction ----------------------------------------------------------- */

PyObject *bcpy_iter_range(bcpy_seq *seq, uint64_t start, uint64_t count,
                          PyObject *read_ahead) {
  size_t window;
  if (window_size(seq, read_ahead, count, &window) < 0) return NULL;
  bcpy_iter *it = iter_new(seq, window);
  if (it == NULL) return NULL;
  bc_seq *view = NULL;
  int rc = 0;
  bc_readahead_options o = BC_READAHEAD_OPTIONS_INIT;
  o.window = window;
  o.threads = seq->readahead_threads > 0 ? seq->readahead_threads : 2;
  if (start == 0 && count == seq->len)
    view = bc_seq_ref(seq->seq);
  else
    rc = bc_seq_slice(&view, seq->seq, (int64_t)start, (int64_t)(start + count), 1);
  if (rc == 0) rc = bc_seq_iterate(&it->ra, view, 0, &o); /* ra refs view */
  bc_seq_unref(view);
  if (rc != 0) {
    bcpy_raise(rc, NULL);
    Py_DECREF(it);
    return NULL;
  }
  return (PyObject *)it;
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
  int conv = bcpy_indices_from_buffer(indices, &array);
  if (conv < 0) return NULL;
  if (conv == 0 && (source = PyObject_GetIter(indices)) == NULL) return NULL;
  if (window_size(seq, read_ahead, conv ? array.n : UINT64_MAX, &window) < 0) {
    Py_XDECREF(source);
    PyMem_RawFree(array.v);
    return NULL;
  }
  bcpy_iter *it = iter_new(seq, window);
  if (it == NULL) { /* freed on the way out: nothing of ours taken yet */
    Py_XDECREF(source);
    PyMem_RawFree(array.v);
    return NULL;
  }
  it->source = source;
  it->array = array;
  bc_readahead_options o = BC_READAHEAD_OPTIONS_INIT;
  o.window = window;
  o.threads = seq->readahead_threads > 0 ? seq->readahead_threads : 2;
  int rc = bc_readahead_open(&it->ra, seq->seq, conv ? array_stream : index_stream,
                             it, &o);
  if (rc != 0) {
    bcpy_raise(rc, NULL);
    Py_DECREF(it);
    return NULL;
  }
  return (PyObject *)it;
}

/* ---- iteration ---------------------------------------------------------------- */

/* Stops the workers (GIL released: they may be finishing a read). */
static void stop_readahead(bcpy_iter *it) {
  bc_readahead *ra = it->ra;
  it->ra = NULL;
  if (ra == NULL) return;
  if (it->pid != getpid()) return; /* forked child: no threads to stop */
  Py_BEGIN_ALLOW_THREADS
  bc_readahead_close(ra);
  Py_END_ALLOW_THREADS
}

/* After the last record: raises how the iteration ended, once. */
static PyObject *finish(bcpy_iter *it) {
  int rc = it->end_rc;
  it->end_rc = 0;
  if (rc == 0) return NULL; /* StopIteration */
  if (it->exc_type != NULL) {
    PyErr_Restore(it->exc_type, it->exc_value, it->exc_tb);
    it->exc_type = it->exc_value = it->exc_tb = NULL;
    return NULL;
  }
  bcpy_raise_errno(rc, it->end_errno, it->end_msg);
  free(it->end_msg);
  it->end_msg = NULL;
  return NULL;
}

static PyObject *iter_next(bcpy_iter *it) {
  if (it->head < it->count) {
    bc_buf *b = &it->bufs[it->head++];
    return PyBytes_FromStringAndSize((const char *)b->data, (Py_ssize_t)b->size);
  }
  if (it->done) return finish(it);
  if (it->busy) {
    PyErr_SetString(PyExc_RuntimeError, "ReaderIterator is already running "
                                         "(used from two threads, or from its own "
                                         "index iterator)");
    return NULL;
  }
  if (it->pid != getpid()) {
    PyErr_SetString(PyExc_RuntimeError,
                    "ReaderIterator was created in another process (before fork); "
                    "create a new iterator in this one");
    return NULL;
  }
  it->busy = true;
  size_t n = 0;
  int rc = 1;
  char *msg = NULL;
  int msg_errno = 0;
  bc_readahead *ra = it->ra;
  bc_buf *bufs = it->bufs;
  size_t cap = it->cap;
  Py_BEGIN_ALLOW_THREADS
  while (n < cap && (rc = bc_readahead_next(ra, &bufs[n], NULL)) == 1) n++;
  if (rc < 0) {
    msg = strdup(bc_errmsg());
    msg_errno = bc_errno();
  }
  Py_END_ALLOW_THREADS
  it->busy = false;
  it->head = 0;
  it->count = n;
  if (rc != 1) {
    it->done = true;
    it->end_rc = rc < 0 ? rc : 0;
    it->end_msg = msg;
    it->end_errno = msg_errno;
    stop_readahead(it);
  }
  return iter_next(it);
}

/* ---- type ------------------------------------------------------------------------ */

static int iter_traverse(bcpy_iter *it, visitproc visit, void *arg) {
  Py_VISIT(it->source);
  Py_VISIT(it->owner);
  Py_VISIT(it->exc_type);
  Py_VISIT(it->exc_value);
  Py_VISIT(it->exc_tb);
  return 0;
}

static int iter_clear(bcpy_iter *it) {
  Py_CLEAR(it->source);
  Py_CLEAR(it->owner);
  Py_CLEAR(it->exc_type);
  Py_CLEAR(it->exc_value);
  Py_CLEAR(it->exc_tb);
  return 0;
}

static void iter_dealloc(bcpy_iter *it) {
  PyObject_GC_UnTrack(it);
  /* Workers never touch Python objects, so they can be stopped before or
   * after the references go; the source must outlive the stream, which
   * runs only inside __next__. */
  stop_readahead(it);
  iter_clear(it);
  if (it->bufs != NULL)
    for (size_t k = 0; k < it->cap; k++) bc_buf_release(&it->bufs[k]);
  PyMem_RawFree(it->bufs);
  PyMem_RawFree(it->array.v);
  free(it->end_msg);
  PyObject_GC_Del(it);
}

PyTypeObject bcpy_Iterator_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bagcache.ReaderIterator",
    .tp_basicsize = sizeof(bcpy_iter),
    .tp_dealloc = (destructor)iter_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Iterator over records, read ahead on worker threads.\n\n"
              "Made by iter(reader), read_range_iter and read_indices_iter.",
    .tp_traverse = (traverseproc)iter_traverse,
    .tp_clear = (inquiry)iter_clear,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)iter_next,
};
