/*
 * bagz/writer.c - _WriterBase: one Bagz file written through bc_writer.
 *
 * A bc_writer takes one thread at a time; `lock` serialises the calls of
 * Python threads sharing one Writer.  The lock is always taken after the
 * GIL was released (and dropped before it is taken back), so a thread
 * waiting for the lock never holds the GIL that the lock's owner needs.
 *
 * Nothing is visible under the file name until close() (the C writer
 * publishes atomically).  A Writer that is garbage-collected unclosed is
 * closed then, with a ResourceWarning, like an unclosed Python file: the
 * records written are published rather than silently dropped.
 */
#include "core/bcpy.h"

#include "pythread.h"

typedef struct {
  PyObject_HEAD
  bc_writer *w;
  PyThread_type_lock lock;
  bool closed;
  PyObject *weakrefs;
} bcpy_writer;

static int writer_check(bcpy_writer *self) {
  if (self->w != NULL) return 0;
  PyErr_SetString(PyExc_ValueError, "Writer is not open (its __init__ was not run)");
  return -1;
}

static PyObject *writer_open(bcpy_writer *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"path", "limits_placement", "compression", "level",
                           "dictionary", NULL};
  const char *path;
  int placement, compression, level;
  Py_buffer dict = {0};
  PyObject *result = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "siiiy*:_open", kwlist, &path,
                                   &placement, &compression, &level, &dict))
    return NULL;
  if (self->w != NULL) {
    PyErr_SetString(PyExc_ValueError, "Writer is already open");
    goto cleanup;
  }
  if (self->lock == NULL && (self->lock = PyThread_allocate_lock()) == NULL) {
    PyErr_NoMemory();
    goto cleanup;
  }
  bc_writer_options o = BC_WRITER_OPTIONS_INIT;
  o.limits_placement = (bc_limits_placement)placement;
  o.compression = (bc_compression)compression;
  o.zstd_level = level;
  o.dictionary = dict.len > 0 ? dict.buf : NULL;
  o.dictionary_size = (size_t)dict.len;
  int rc;
  bc_writer *w = NULL;
  Py_BEGIN_ALLOW_THREADS
  rc = bc_writer_open(&w, path, &o);
  Py_END_ALLOW_THREADS
  if (rc != 0) {
    bcpy_raise(rc == BC_ENOTFOUND ? BC_EINVAL : rc, NULL); /* bagz: ValueError */
    goto cleanup;
  }
  self->w = w;
  self->closed = false;
  Py_INCREF(Py_None);
  result = Py_None;
cleanup:
  PyBuffer_Release(&dict);
  return result;
}

/* Runs op on the writer with the GIL released and the writer's lock held. */
enum op { OP_WRITE, OP_FLUSH, OP_CLOSE };

static int run(bcpy_writer *self, enum op op, const void *data, size_t size) {
  int rc = 0;
  Py_BEGIN_ALLOW_THREADS
  PyThread_acquire_lock(self->lock, WAIT_LOCK);
  switch (op) {
    case OP_WRITE: rc = bc_writer_write(self->w, data, size); break;
    case OP_FLUSH: rc = bc_writer_flush(self->w); break;
    case OP_CLOSE: rc = bc_writer_close(self->w); break;
  }
  PyThread_release_lock(self->lock);
  Py_END_ALLOW_THREADS
  return rc;
}

static PyObject *closed_error(void) {
  PyErr_SetString(PyExc_ValueError, "FAILED_PRECONDITION: Closed (the Writer was closed)");
  return NULL;
}

static PyObject *writer_write(bcpy_writer *self, PyObject *record) {
  if (writer_check(self) < 0) return NULL;
  if (self->closed) return closed_error();
  int rc;
  if (PyUnicode_Check(record)) {
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(record, &n);
    if (s == NULL) return NULL;
    /* The UTF-8 form is cached in the str, which the caller keeps alive. */
    rc = run(self, OP_WRITE, s, (size_t)n);
  } else {
    Py_buffer view;
    if (!PyObject_CheckBuffer(record) ||
        PyObject_GetBuffer(record, &view, PyBUF_C_CONTIGUOUS) < 0) {
      PyErr_Clear();
      PyErr_Format(PyExc_TypeError,
                   "record must be str or bytes (or a contiguous buffer), not %.200s",
                   Py_TYPE(record)->tp_name);
      return NULL;
    }
    rc = run(self, OP_WRITE, view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
  }
  if (rc != 0) return bcpy_raise(rc, NULL);
  Py_RETURN_NONE;
}

static PyObject *writer_flush(bcpy_writer *self, PyObject *unused) {
  (void)unused;
  if (writer_check(self) < 0) return NULL;
  if (self->closed) return closed_error();
  int rc = run(self, OP_FLUSH, NULL, 0);
  if (rc != 0) return bcpy_raise(rc, NULL);
  Py_RETURN_NONE;
}

static PyObject *writer_close(bcpy_writer *self, PyObject *unused) {
  (void)unused;
  if (writer_check(self) < 0) return NULL;
  self->closed = true;
  /* Idempotent: the C writer returns its first close's result again. */
  int rc = run(self, OP_CLOSE, NULL, 0);
  if (rc != 0) return bcpy_raise(rc, NULL);
  Py_RETURN_NONE;
}

static PyObject *writer_enter(bcpy_writer *self, PyObject *unused) {
  (void)unused;
  if (writer_check(self) < 0) return NULL;
  Py_INCREF(self);
  return (PyObject *)self;
}

static PyObject *writer_exit(bcpy_writer *self, PyObject *args) {
  (void)args; /* closes also when the block raised */
  return writer_close(self, NULL);
}

static PyObject *writer_get_closed(bcpy_writer *self, void *unused) {
  (void)unused;
  return PyBool_FromLong(self->w == NULL || self->closed);
}

static PyObject *writer_get_count(bcpy_writer *self, void *unused) {
  (void)unused;
  if (writer_check(self) < 0) return NULL;
  return PyLong_FromUnsignedLongLong(bc_writer_count(self->w));
}

static void writer_finalize(bcpy_writer *self) {
  if (self->w == NULL || self->closed) return;
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  if (PyErr_WarnFormat(PyExc_ResourceWarning, 1,
                       "unclosed bagcache Writer: closing it now") < 0)
    PyErr_WriteUnraisable((PyObject *)self);
  PyObject *r = writer_close(self, NULL);
  if (r == NULL)
    PyErr_WriteUnraisable((PyObject *)self);
  else
    Py_DECREF(r);
  PyErr_Restore(type, value, tb);
}

static void writer_dealloc(bcpy_writer *self) {
  if (PyObject_CallFinalizerFromDealloc((PyObject *)self) < 0) return;
  if (self->weakrefs != NULL) PyObject_ClearWeakRefs((PyObject *)self);
  bc_writer_free(self->w);
  if (self->lock != NULL) PyThread_free_lock(self->lock);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef writer_methods[] = {
    {"_open", (PyCFunction)(void (*)(void))writer_open, METH_VARARGS | METH_KEYWORDS,
     "_open(path, limits_placement, compression, level, dictionary)\n\n"
     "Starts the file (once).  Enum arguments are the C enum values."},
    {"write", (PyCFunction)writer_write, METH_O,
     "write(record: bytes | str) -> None\n\n"
     "Appends one record; str is written as UTF-8, and any contiguous buffer\n"
     "(bytearray, memoryview, numpy array) as its bytes."},
    {"flush", (PyCFunction)writer_flush, METH_NOARGS,
     "flush() -> None\n\n"
     "Hands buffered records to the operating system.  They become visible\n"
     "under the file name only at close()."},
    {"close", (PyCFunction)writer_close, METH_NOARGS,
     "close() -> None\n\n"
     "Writes the limits, syncs, and publishes the file atomically under its\n"
     "name (and limits.NAME for separate limits).  Idempotent."},
    {"__enter__", (PyCFunction)writer_enter, METH_NOARGS, "Returns self."},
    {"__exit__", (PyCFunction)writer_exit, METH_VARARGS,
     "Closes the writer, also when the block raised."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef writer_getset[] = {
    {"closed", (getter)writer_get_closed, NULL, "Whether close() was called.", NULL},
    {"num_records", (getter)writer_get_count, NULL, "Records written so far.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject bcpy_WriterBase_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bagcache._bagcache._WriterBase",
    .tp_basicsize = sizeof(bcpy_writer),
    .tp_dealloc = (destructor)writer_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Writes one Bagz file.",
    .tp_weaklistoffset = offsetof(bcpy_writer, weakrefs),
    .tp_methods = writer_methods,
    .tp_getset = writer_getset,
    .tp_new = PyType_GenericNew,
    .tp_finalize = (destructor)writer_finalize,
};
