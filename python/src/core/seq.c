/*
 * core/seq.c - _SeqBase (the raw records of a bag set, or a slice of one)
 * and _ReaderBase (a _SeqBase opened from a file spec): subtypes of
 * _Sequence (core/sequence.c), which does their subscripts and slices.
 *
 * Invariant of an open object: seq is root itself or a bc_seq_slice of it
 * (slices of slices compose in bc_seq_slice), and len is seq's exact
 * length.  The coordinates pickling stores, element k of seq being
 * root[start + k * step], are read back from the slice (_state) by
 * resolving elements 0 and 1; unpickling slices the reopened root again
 * (bagcache/__init__.py, _reopen).  Views share root and `meta`; they are
 * immutable.
 */
#include "core/bcpy.h"

#include <unistd.h>

#include "structmember.h"

/* ---- construction --------------------------------------------------------- */

int bcpy_seq_check(bcpy_seq *self) {
  if (self->seq != NULL) return 0;
  PyErr_Format(PyExc_ValueError, "%s object is not open (its __init__ was not run)",
               Py_TYPE(self)->tp_name);
  return -1;
}

int bcpy_seq_check_bulk(bcpy_seq *self) {
  if (bcpy_seq_check(self) < 0) return -1;
  if (self->max_parallelism >= 0) return 0;
  PyErr_Format(PyExc_ValueError, "max_parallelism must be >= 0, not %d",
               self->max_parallelism);
  return -1;
}

static const bcpy_seq_kind seq_kind;

/* tp_new of _SeqBase and _ReaderBase (and their Python subclasses). */
static PyObject *seq_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
  bcpy_seq *self = (bcpy_seq *)PyType_GenericNew(type, args, kwds);
  if (self != NULL) self->kind = &seq_kind;
  return (PyObject *)self;
}

/* A new object of self's type over `seq` (taken over), a slice of self. */
static PyObject *seq_wrap(bcpy_sobj *base, bc_seq *seq, PyObject *key) {
  (void)key;
  bcpy_seq *self = (bcpy_seq *)base;
  PyTypeObject *type = Py_TYPE(self);
  uint64_t len;
  int rc = bc_seq_len(seq, &len);
  bcpy_seq *v = rc == 0 ? (bcpy_seq *)type->tp_alloc(type, 0) : NULL;
  if (v == NULL) {
    bc_seq_unref(seq);
    return rc != 0 ? bcpy_raise(rc, NULL) : NULL;
  }
  v->kind = &seq_kind;
  v->seq = seq;
  v->root = bc_seq_ref(self->root);
  v->len = len;
  v->max_parallelism = self->max_parallelism;
  v->readahead_threads = self->readahead_threads;
  Py_XINCREF(self->meta);
  v->meta = self->meta;
  return (PyObject *)v;
}

static void seq_dealloc(bcpy_seq *self) {
  if (self->weakrefs != NULL) PyObject_ClearWeakRefs((PyObject *)self);
  bc_seq_unref(self->seq);
  bc_seq_unref(self->root);
  Py_CLEAR(self->meta);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* ---- items ------------------------------------------------------------------ */

static Py_ssize_t seq_length(bcpy_seq *self) {
  if (bcpy_seq_check(self) < 0) return -1;
  if (self->len > (uint64_t)PY_SSIZE_T_MAX) {
    PyErr_SetString(PyExc_OverflowError, "sequence too long for len()");
    return -1;
  }
  return (Py_ssize_t)self->len;
}

/* Record `index` (negative counts from the end) as bytes. */
static PyObject *get_item(bcpy_sobj *base, int64_t index) {
  bcpy_seq *self = (bcpy_seq *)base;
  int64_t i = index;
  if (i < 0) i += (int64_t)self->len;
  if (i < 0 || (uint64_t)i >= self->len) {
    PyErr_Format(PyExc_IndexError, "index %lld out of range [0, %llu)", (long long)index,
                 (unsigned long long)self->len);
    return NULL;
  }
  bc_buf fallback = BC_BUF_INIT;
  bc_buf *buf = bcpy_scratch_take(&fallback);
  int rc;
  /* The read may touch the disk and decompress: no GIL. */
  Py_BEGIN_ALLOW_THREADS
  rc = bc_seq_get(self->seq, (int64_t)i, buf);
  Py_END_ALLOW_THREADS
  PyObject *result = rc != 0 ? bcpy_raise(rc, NULL)
                             : PyBytes_FromStringAndSize((const char *)buf->data,
                                                         (Py_ssize_t)buf->size);
  bcpy_scratch_give(buf, &fallback);
  return result;
}

static int seq_check(bcpy_sobj *self) { return bcpy_seq_check((bcpy_seq *)self); }

static const bcpy_seq_kind seq_kind = {
    .check = seq_check,
    .item = get_item,
    .take = NULL, /* bagz: integers and slices only */
    .wait = bcpy_wait_plain,
    .wrap = seq_wrap,
    .raise = bcpy_raise_errno,
};

/* self[::-1]; an empty view is its own reverse (as bagz's). */
static PyObject *seq_reversed(bcpy_seq *self, PyObject *unused) {
  if (bcpy_seq_check(self) < 0) return NULL;
  if (self->len == 0) return Py_NewRef(self);
  return bcpy_sobj_reversed((bcpy_sobj *)self, unused);
}

static int seq_sq_contains(bcpy_seq *self, PyObject *value) {
  return bcpy_seq_contains(self, value);
}

static PyObject *seq_iter(bcpy_seq *self) {
  if (bcpy_seq_check(self) < 0) return NULL;
  return bcpy_iter_range(self, 0, self->len, NULL);
}

static PyObject *seq_read_range_iter(bcpy_seq *self, PyObject *args,
                                     PyObject *kwds) {
  static char *kwlist[] = {"start", "num_records", "read_ahead", NULL};
  Py_ssize_t start, num;
  PyObject *read_ahead = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "nn|$O:read_range_iter", kwlist,
                                   &start, &num, &read_ahead))
    return NULL;
  if (bcpy_seq_check(self) < 0 || bcpy_seq_check_range(self, &start, num) < 0) return NULL;
  return bcpy_iter_range(self, (uint64_t)start, (uint64_t)num, read_ahead);
}

static PyObject *seq_read_indices_iter(bcpy_seq *self, PyObject *args,
                                       PyObject *kwds) {
  static char *kwlist[] = {"indices", "read_ahead", NULL};
  PyObject *indices, *read_ahead = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:read_indices_iter", kwlist,
                                   &indices, &read_ahead))
    return NULL;
  if (bcpy_seq_check(self) < 0) return NULL;
  return bcpy_iter_indices(self, indices, read_ahead);
}

/* ---- pickling support --------------------------------------------------- */

static PyObject *seq_state(bcpy_seq *self, PyObject *unused) {
  (void)unused;
  if (bcpy_seq_check(self) < 0) return NULL;
  int64_t at[2] = {0, 1};
  for (uint64_t k = 0; k < 2 && k < self->len; k++) {
    bc_seq *leaf;
    uint64_t li;
    int rc = bc_seq_resolve(self->seq, (int64_t)k, &leaf, &li); /* arithmetic */
    if (rc != 0) return bcpy_raise(rc, NULL);
    at[k] = (int64_t)li;
  }
  if (self->len < 2) at[1] = at[0] + 1;
  return Py_BuildValue("(LLK)", (long long)at[0], (long long)(at[1] - at[0]),
                       (unsigned long long)self->len);
}

/* ---- method tables ---------------------------------------------------------- */

static PyMethodDef seq_methods[] = {
    {"__reversed__", (PyCFunction)seq_reversed, METH_NOARGS,
     "__reversed__() -> same type\n\nThe view in reverse order (self[::-1])."},
    {"read", (PyCFunction)bcpy_seq_read, METH_NOARGS,
     "read() -> list[bytes]\n\nEvery record of the view, read in parallel."},
    {"read_range", (PyCFunction)bcpy_seq_read_range, METH_VARARGS,
     "read_range(start, num_records) -> list[bytes]\n\n"
     "The records [start, start + num_records) of the view, read in parallel."},
    {"read_indices", (PyCFunction)bcpy_seq_read_indices, METH_O,
     "read_indices(indices) -> list[bytes]\n\n"
     "The records at `indices`: a list or other iterable of ints, a 1-D\n"
     "integer numpy array (any buffer of integers), a range or a slice.\n"
     "Negative indices count from the end.  A repeated index gives the same\n"
     "bytes object at every position.  IndexError names the first index\n"
     "out of range; no record is returned then."},
    {"read_range_iter", (PyCFunction)(void (*)(void))seq_read_range_iter,
     METH_VARARGS | METH_KEYWORDS,
     "read_range_iter(start, num_records, *, read_ahead=None) -> ReaderIterator\n\n"
     "Iterates the records [start, start + num_records), reading ahead on\n"
     "worker threads.  The range is checked now."},
    {"read_indices_iter", (PyCFunction)(void (*)(void))seq_read_indices_iter,
     METH_VARARGS | METH_KEYWORDS,
     "read_indices_iter(indices, read_ahead=None) -> ReaderIterator\n\n"
     "Iterates the records at the indices an iterable yields (it may be\n"
     "endless), reading ahead on worker threads.  An exception raised by the\n"
     "iterable is raised after the records of the indices before it."},
    {"count", (PyCFunction)bcpy_seq_count, METH_O,
     "count(value: bytes) -> int\n\nNumber of records equal to value."},
    {"index", (PyCFunction)(void (*)(void))bcpy_seq_index,
     METH_VARARGS | METH_KEYWORDS,
     "index(value: bytes, start=0, stop=None) -> int\n\n"
     "Position of the first record equal to value in [start, stop);\n"
     "ValueError if there is none."},
    {"_state", (PyCFunction)seq_state, METH_NOARGS,
     "_state() -> (start, step, length) of the view within its root."},
    {NULL, NULL, 0, NULL}};

static PyMemberDef seq_members[] = {
    {"_meta", T_OBJECT, offsetof(bcpy_seq, meta), READONLY,
     "State of the Python layer, shared by every view."},
    {NULL, 0, 0, 0, NULL}};

static PySequenceMethods seq_as_sequence = {
    .sq_length = (lenfunc)seq_length,
    .sq_contains = (objobjproc)seq_sq_contains,
};

static PyMappingMethods seq_as_mapping = {
    .mp_length = (lenfunc)seq_length,
};

PyTypeObject bcpy_SeqBase_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bagcache._bagcache._SeqBase",
    .tp_basicsize = sizeof(bcpy_seq),
    .tp_dealloc = (destructor)seq_dealloc,
    .tp_as_sequence = &seq_as_sequence,
    .tp_as_mapping = &seq_as_mapping,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_SEQUENCE,
    .tp_doc = "A read-only, random-access view of a bagcache sequence.",
    .tp_weaklistoffset = offsetof(bcpy_seq, weakrefs),
    .tp_iter = (getiterfunc)seq_iter,
    .tp_methods = seq_methods,
    .tp_members = seq_members,
    .tp_base = &bcpy_Sequence_Type,
    .tp_new = seq_new,
};

/* ---- _ReaderBase: a bag set ------------------------------------------------- */

/* Threads a batch may use: bagz's max_parallelism is a cap (default 100,
 * meant for remote file systems); more threads than a few per core only
 * add switching for local files, so the cap is also bounded by the CPUs. */
static int effective_parallelism(int requested) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus < 1) cpus = 1;
  long cap = 4 * cpus;
  if (requested <= 1) return 1;
  return requested < cap ? requested : (int)cap;
}

static PyObject *reader_open(bcpy_seq *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"spec", "sharding_layout", "limits_placement",
                           "limits_storage", "compression", "dictionary",
                           "access_pattern", "cache_policy", "max_parallelism",
                           "meta", NULL};
  const char *spec;
  int layout, placement, storage, compression, access, cache, parallelism;
  Py_buffer dict = {0};
  PyObject *meta;
  bc_seq *root = NULL;
  PyObject *result = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "siiiiy*iiiO:_open", kwlist, &spec,
                                   &layout, &placement, &storage, &compression,
                                   &dict, &access, &cache, &parallelism, &meta))
    return NULL;
  if (self->seq != NULL) {
    PyErr_SetString(PyExc_ValueError, "reader is already open");
    goto cleanup;
  }
  bc_reader_options o = BC_READER_OPTIONS_INIT;
  o.sharding_layout = (bc_sharding_layout)layout;
  o.limits_placement = (bc_limits_placement)placement;
  o.limits_storage = (bc_limits_storage)storage;
  o.compression = (bc_compression)compression;
  o.dictionary = dict.len > 0 ? dict.buf : NULL;
  o.dictionary_size = (size_t)dict.len;
  o.access_pattern = (bc_access_pattern)access;
  o.cache_policy = (bc_cache_policy)cache;
  o.max_parallelism = effective_parallelism(parallelism);
  int rc;
  /* Opening maps every shard (and may glob a directory): no GIL. */
  Py_BEGIN_ALLOW_THREADS
  rc = bc_seq_open_bag(&root, spec, &o);
  Py_END_ALLOW_THREADS
  if (rc != 0) {
    bcpy_raise(rc, NULL);
    goto cleanup;
  }
  uint64_t len;
  if ((rc = bc_seq_len(root, &len)) != 0) {
    bcpy_raise(rc, NULL);
    goto cleanup;
  }
  self->max_parallelism = parallelism;
  /* Iterators read ahead on 2 to 4 threads, no more than there are CPUs
   * (beyond 2): on 2 CPUs a third and fourth worker only take turns with
   * the consumer (read_indices_iter: 280-300 ms with 2 workers, 350-375 ms
   * with 4, python_bench). */
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int cap = cpus >= 4 ? 4 : cpus == 3 ? 3 : 2;
  self->readahead_threads = o.max_parallelism < cap ? o.max_parallelism : cap;
  if (self->readahead_threads < 2) self->readahead_threads = 2;
  self->seq = bc_seq_ref(root);
  self->root = bc_seq_ref(root);
  self->len = len;
  Py_INCREF(meta);
  Py_XSETREF(self->meta, meta);
  Py_INCREF(Py_None);
  result = Py_None;
cleanup:
  bc_seq_unref(root);
  PyBuffer_Release(&dict);
  return result;
}

/* The bag set of an open Reader (its root), or NULL with an exception. */
static bc_bag *reader_bag(bcpy_seq *self) {
  if (bcpy_seq_check(self) < 0) return NULL;
  bc_bag *bag = bc_seq_bag(self->root);
  if (bag == NULL) PyErr_SetString(PyExc_TypeError, "not a bag set");
  return bag;
}

static PyObject *reader_bytes_per_record(bcpy_seq *self, PyObject *unused) {
  (void)unused;
  bc_bag *bag = reader_bag(self);
  if (bag == NULL) return NULL;
  return PyFloat_FromDouble(bc_bag_bytes_per_record(bag));
}

static PyObject *reader_shards(bcpy_seq *self, PyObject *unused) {
  (void)unused;
  bc_bag *bag = reader_bag(self);
  if (bag == NULL) return NULL;
  size_t n = bc_bag_shard_count(bag);
  PyObject *list = PyList_New((Py_ssize_t)n);
  if (list == NULL) return NULL;
  for (size_t k = 0; k < n; k++) {
    bc_shard_info info;
    int rc = bc_bag_shard_info(bag, k, &info);
    PyObject *item = rc != 0 ? bcpy_raise(rc, NULL)
                             : Py_BuildValue("{s:s,s:z,s:K,s:K,s:s}", "path",
                                             info.path, "limits_path",
                                             info.limits_path, "records",
                                             (unsigned long long)info.records,
                                             "records_bytes",
                                             (unsigned long long)info.records_bytes,
                                             "compression",
                                             info.compression == BC_COMPRESSION_ZSTD
                                                 ? "zstd"
                                                 : "none");
    if (item == NULL) {
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)k, item);
  }
  return list;
}

static PyMethodDef reader_methods[] = {
    {"_open", (PyCFunction)(void (*)(void))reader_open, METH_VARARGS | METH_KEYWORDS,
     "_open(spec, sharding_layout, limits_placement, limits_storage, compression,\n"
     "      dictionary, access_pattern, cache_policy, max_parallelism, meta)\n\n"
     "Opens the bag set (once).  Enum arguments are the C enum values."},
    {"approximate_bytes_per_record", (PyCFunction)reader_bytes_per_record,
     METH_NOARGS,
     "approximate_bytes_per_record() -> float\n\n"
     "Stored (possibly compressed) bytes per record over all shards of the\n"
     "file spec; not updated for slices."},
    {"shards", (PyCFunction)reader_shards, METH_NOARGS,
     "shards() -> list[dict]\n\n"
     "One dict per shard file: path, limits_path (None for tail limits),\n"
     "records, records_bytes, compression ('none' or 'zstd')."},
    {NULL, NULL, 0, NULL}};

PyTypeObject bcpy_ReaderBase_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bagcache._bagcache._ReaderBase",
    .tp_basicsize = sizeof(bcpy_seq),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_SEQUENCE,
    .tp_doc = "A view of a set of Bagz shards opened from a file spec.",
    .tp_methods = reader_methods,
    .tp_base = &bcpy_SeqBase_Type,
    .tp_new = seq_new,
};
