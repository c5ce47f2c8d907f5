/*
 * bagz/index.c - Index and MultiIndex: record bytes -> position(s) in a Reader
 * view, over bc_index.
 *
 * The index borrows the bag, so each object keeps a reference on the
 * reader's root sequence (which owns the bag) for as long as it lives.
 * Positions are those of the view the index was built from: view element k
 * is root record start + k * step.
 */
#include "core/bcpy.h"

#include <stdlib.h>

typedef struct {
  PyObject_HEAD
  bc_index *index;
  bc_seq *root; /* owns the bag the index reads keys back from */
  bool multi;   /* a MultiIndex: every position of a record, not the first */
} bcpy_index;

static int index_init(bcpy_index *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"reader", NULL};
  PyObject *obj;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:Index", kwlist, &obj)) return -1;
  if (!PyObject_TypeCheck(obj, &bcpy_ReaderBase_Type)) {
    PyErr_Format(PyExc_TypeError, "Index needs a bagcache.Reader, not %.200s",
                 Py_TYPE(obj)->tp_name);
    return -1;
  }
  bcpy_seq *reader = (bcpy_seq *)obj;
  if (bcpy_seq_check(reader) < 0) return -1;
  bc_bag *bag = bc_seq_bag(reader->root);
  if (bag == NULL) {
    PyErr_SetString(PyExc_TypeError, "Index needs a Reader over a bag set");
    return -1;
  }
  uint64_t *positions = NULL;
  uint64_t n = reader->len;
  bool whole = reader->seq == reader->root;
  if (!whole) {
    positions = PyMem_RawMalloc((n > 0 ? n : 1) * sizeof *positions);
    if (positions == NULL) {
      PyErr_NoMemory();
      return -1;
    }
    /* A slice of the bag: its positions by arithmetic. */
    for (uint64_t k = 0; k < n; k++) {
      bc_seq *leaf;
      int rc = bc_seq_resolve(reader->seq, (int64_t)k, &leaf, &positions[k]);
      if (rc != 0) {
        PyMem_RawFree(positions);
        bcpy_raise(rc, NULL);
        return -1;
      }
    }
  }
  bc_index *index = NULL;
  int rc;
  /* Reads every record of the view on the worker pool: no GIL. */
  Py_BEGIN_ALLOW_THREADS
  rc = bc_index_build(&index, bag, positions, n);
  Py_END_ALLOW_THREADS
  PyMem_RawFree(positions);
  if (rc != 0) {
    bcpy_raise(rc == BC_ERANGE ? BC_ECORRUPT : rc, NULL);
    return -1;
  }
  bc_index_free(self->index);
  bc_seq_unref(self->root);
  self->index = index;
  self->root = bc_seq_ref(reader->root);
  self->multi = PyObject_TypeCheck(self, &bcpy_MultiIndex_Type);
  return 0;
}

static void index_dealloc(bcpy_index *self) {
  bc_index_free(self->index);
  bc_seq_unref(self->root);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The bytes of a key: bytes-like, or str as UTF-8.  Borrowed from `key`
 * (which the caller keeps alive); release with PyBuffer_Release. */
static int key_bytes(PyObject *key, Py_buffer *view) {
  if (PyUnicode_Check(key)) {
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(key, &n);
    if (s == NULL) return -1;
    return PyBuffer_FillInfo(view, NULL, (void *)s, n, 1, PyBUF_SIMPLE);
  }
  if (PyObject_CheckBuffer(key) && PyObject_GetBuffer(key, view, PyBUF_SIMPLE) == 0)
    return 0;
  PyErr_Clear();
  PyErr_Format(PyExc_TypeError, "key must be str or bytes, not %.200s",
               Py_TYPE(key)->tp_name);
  return -1;
}

/* Looks the key up.  Returns 1 (found: *first, or *all and *count, set), 0 (not
 * found), -1 (error set). */
static int lookup(bcpy_index *self, PyObject *key, uint64_t *first,
                  const uint64_t **all, uint64_t *count) {
  if (self->index == NULL) {
    PyErr_SetString(PyExc_ValueError, "index is not built (its __init__ was not run)");
    return -1;
  }
  Py_buffer view;
  if (key_bytes(key, &view) < 0) return -1;
  int rc;
  /* Candidates are read back from the bag to compare bytes: no GIL. */
  Py_BEGIN_ALLOW_THREADS
  rc = all != NULL ? bc_index_all(self->index, view.buf, (size_t)view.len, all, count)
                   : bc_index_first(self->index, view.buf, (size_t)view.len, first);
  Py_END_ALLOW_THREADS
  PyBuffer_Release(&view);
  if (rc == BC_ENOTFOUND) return 0;
  if (rc != 0) {
    bcpy_raise(rc, NULL);
    return -1;
  }
  return 1;
}

static PyObject *positions_list(const uint64_t *all, uint64_t count) {
  PyObject *list = PyList_New((Py_ssize_t)count);
  if (list == NULL) return NULL;
  for (uint64_t k = 0; k < count; k++) {
    PyObject *v = PyLong_FromUnsignedLongLong(all[k]);
    if (v == NULL) {
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)k, v);
  }
  return list;
}

/* The value for key (the first position, or a MultiIndex's list of every
 * position), or NULL with no exception set when it is absent. */
static PyObject *find(bcpy_index *self, PyObject *key) {
  uint64_t first = 0, count = 0;
  const uint64_t *all = NULL;
  int found = lookup(self, key, &first, self->multi ? &all : NULL, &count);
  if (found <= 0) return NULL;
  return self->multi ? positions_list(all, count) : PyLong_FromUnsignedLongLong(first);
}

static PyObject *index_subscript(bcpy_index *self, PyObject *key) {
  PyObject *v = find(self, key);
  if (v == NULL && !PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, key);
  return v;
}

static PyObject *index_get(bcpy_index *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"record", "default", NULL};
  PyObject *key, *dflt = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:get", kwlist, &key, &dflt))
    return NULL;
  PyObject *v = find(self, key);
  if (v == NULL && !PyErr_Occurred()) {
    Py_INCREF(dflt);
    v = dflt;
  }
  return v;
}

static int index_contains(bcpy_index *self, PyObject *key) {
  uint64_t first;
  return lookup(self, key, &first, NULL, NULL);
}

static Py_ssize_t index_length(bcpy_index *self) {
  if (self->index == NULL) return 0;
  return (Py_ssize_t)bc_index_distinct(self->index);
}

static PyMethodDef index_methods[] = {
    {"get", (PyCFunction)(void (*)(void))index_get, METH_VARARGS | METH_KEYWORDS,
     "get(record: str | bytes, default=None) -> int | None\n\n"
     "First position of the record, or default when it is absent."},
    {NULL, NULL, 0, NULL}};

static PyMethodDef multi_methods[] = {
    {"get", (PyCFunction)(void (*)(void))index_get, METH_VARARGS | METH_KEYWORDS,
     "get(record: str | bytes, default=None) -> list[int] | None\n\n"
     "Every position of the record (ascending), or default when it is absent."},
    {NULL, NULL, 0, NULL}};

static PySequenceMethods index_as_sequence = {
    .sq_contains = (objobjproc)index_contains,
};

static PyMappingMethods index_as_mapping = {
    .mp_length = (lenfunc)index_length,
    .mp_subscript = (binaryfunc)index_subscript,
};

PyTypeObject bcpy_Index_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bagcache.Index",
    .tp_basicsize = sizeof(bcpy_index),
    .tp_dealloc = (destructor)index_dealloc,
    .tp_as_sequence = &index_as_sequence,
    .tp_as_mapping = &index_as_mapping,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Index(reader)\n\n"
              "Maps each record of the reader (a view) to the first position\n"
              "holding it.  index[key] raises KeyError for an absent record;\n"
              "keys are bytes or str (UTF-8).  len() counts distinct records.\n"
              "Built by reading every record once; keeps only hashes and\n"
              "positions in memory.",
    .tp_methods = index_methods,
    .tp_init = (initproc)index_init,
    .tp_new = PyType_GenericNew,
};

PyTypeObject bcpy_MultiIndex_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bagcache.MultiIndex",
    .tp_basicsize = sizeof(bcpy_index),
    .tp_dealloc = (destructor)index_dealloc,
    .tp_as_sequence = &index_as_sequence,
    .tp_as_mapping = &index_as_mapping,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "MultiIndex(reader)\n\n"
              "Maps each record of the reader (a view) to the ascending list of\n"
              "every position holding it.  multi_index[key] raises KeyError for\n"
              "an absent record; keys are bytes or str (UTF-8).  len() counts\n"
              "distinct records.",
    .tp_methods = multi_methods,
    .tp_init = (initproc)index_init,
    .tp_new = PyType_GenericNew,
};
