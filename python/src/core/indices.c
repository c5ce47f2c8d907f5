/*
 * Index lists from Python: a 1-D buffer of native integers (numpy arrays,
 * array.array) is converted in one pass; any other iterable of integers
 * (lists, tuples, ranges, generators) item by item.  One converter for
 * every sequence: the views and LoadIt take index lists as loadit does,
 * a Reader's read_indices as bagz does (`bagz_len`, bcpy.h).
 */
#include "core/bcpy.h"

#include <string.h>

int bcpy_ivec_grow(bcpy_ivec *a) {
  size_t cap = a->cap ? 2 * a->cap : 64;
  int64_t *v = PyMem_RawRealloc(a->v, cap * sizeof *v);
  if (v == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  a->v = v;
  a->cap = cap;
  return 0;
}

/* The index `item` at position `pos` of the list, as the rules say. */
static int index_value(PyObject *item, size_t pos, const uint64_t *bagz_len, int64_t *out) {
  PyObject *num = PyNumber_Index(item);
  if (num == NULL) {
    if (bagz_len == NULL && PyErr_ExceptionMatches(PyExc_TypeError)) {
      PyErr_Clear();
      PyErr_Format(PyExc_TypeError, "indices[%zu] must be an integer, not %.200s", pos,
                   Py_TYPE(item)->tp_name);
    }
    return -1;
  }
  int overflow;
  long long v = PyLong_AsLongLongAndOverflow(num, &overflow);
  if (overflow != 0 && bagz_len == NULL)
    PyErr_Format(PyExc_IndexError, "indices[%zu] is out of range", pos);
  else if (overflow != 0)
    PyErr_Format(PyExc_IndexError, "indices[%zu] = %R out of range [0, %llu)", pos, num,
                 (unsigned long long)*bagz_len);
  Py_DECREF(num);
  if ((v == -1 && PyErr_Occurred()) || overflow != 0) return -1;
  *out = v;
  return 0;
}

/* bagz's rule: checks a->v[from..) against *bagz_len (if given) and makes
 * them non-negative. */
static int check_bounds(bcpy_ivec *a, size_t from, const uint64_t *bagz_len) {
  for (size_t k = from; bagz_len != NULL && k < a->n; k++) {
    int64_t v = a->v[k], i = v < 0 ? v + (int64_t)*bagz_len : v;
    if (i < 0 || (uint64_t)i >= *bagz_len) {
      PyErr_Format(PyExc_IndexError, "indices[%zu] = %lld out of range [0, %llu)", k,
                   (long long)v, (unsigned long long)*bagz_len);
      return -1;
    }
    a->v[k] = i;
  }
  return 0;
}

int bcpy_indices_from_buffer(PyObject *obj, bcpy_ivec *a, bool bagz) {
  Py_buffer view;
  if (PyUnicode_Check(obj) || (!bagz && (PyBytes_Check(obj) || PyByteArray_Check(obj))) ||
      !PyObject_CheckBuffer(obj))
    return 0;
  if (PyObject_GetBuffer(obj, &view, PyBUF_RECORDS_RO) < 0) {
    PyErr_Clear();
    return 0;
  }
  int result = 0;
  const char *f = view.format != NULL ? view.format : "B";
  if (*f == '@' || *f == '=' || (*f == '<' && PY_LITTLE_ENDIAN)) f++;
  if (f[0] == '?' && f[1] == '\0') {
    if (!bagz) PyErr_SetString(PyExc_TypeError, "boolean masks are not indices");
    result = bagz ? 0 : -1; /* bagz iterates them: False, True are 0, 1 */
    goto cleanup;
  }
  if (f[0] == '\0' || f[1] != '\0' || strchr("bBhHiIlLqQnN", f[0]) == NULL) goto cleanup;
  if (view.ndim != 1) {
    PyErr_Format(PyExc_ValueError, "indices must be a 1-D array, not %d-D", view.ndim);
    result = -1;
    goto cleanup;
  }
  bool is_unsigned = strchr("BHILQN", f[0]) != NULL;
  Py_ssize_t n = view.shape[0], stride = view.strides[0];
  const char *p = view.buf;
  a->v = PyMem_RawMalloc((n > 0 ? (size_t)n : 1) * sizeof *a->v);
  if (a->v == NULL) {
    PyErr_NoMemory();
    result = -1;
    goto cleanup;
  }
  a->cap = n > 0 ? (size_t)n : 1;
  for (Py_ssize_t k = 0; k < n; k++, p += stride) {
    int64_t s = 0;
    uint64_t u = 0;
    switch (view.itemsize) {
      case 1: if (is_unsigned) u = *(const uint8_t *)p; else s = *(const int8_t *)p; break;
      case 2: { uint16_t x; memcpy(&x, p, 2); if (is_unsigned) u = x; else s = (int16_t)x; break; }
      case 4: { uint32_t x; memcpy(&x, p, 4); if (is_unsigned) u = x; else s = (int32_t)x; break; }
      case 8: { uint64_t x; memcpy(&x, p, 8); if (is_unsigned) u = x; else s = (int64_t)x; break; }
      default:
        PyMem_RawFree(a->v);
        a->v = NULL;
        a->cap = 0;
        goto cleanup; /* unusual item size: iterate instead */
    }
    if (is_unsigned) {
      if (u > (uint64_t)INT64_MAX) {
        PyErr_Format(PyExc_IndexError, "indices[%zd] = %llu is out of range", k,
                     (unsigned long long)u);
        result = -1;
        goto cleanup;
      }
      s = (int64_t)u;
    }
    a->v[a->n++] = s;
  }
  result = 1;
cleanup:
  PyBuffer_Release(&view);
  return result;
}

/* Any sequence or iterable of integers -> bcpy_ivec. */
int bcpy_indices_from_object(PyObject *obj, bcpy_ivec *a, const uint64_t *bagz_len) {
  int rc = bcpy_indices_from_buffer(obj, a, bagz_len != NULL);
  if (rc != 0) return rc < 0 || check_bounds(a, 0, bagz_len) < 0 ? -1 : 0;
  if (bagz_len == NULL && (PyUnicode_Check(obj) || PyBytes_Check(obj) || PyByteArray_Check(obj))) {
    PyErr_Format(PyExc_TypeError, "indices must be integers, not %.200s",
                 Py_TYPE(obj)->tp_name);
    return -1;
  }
  PyObject *it = PyObject_GetIter(obj);
  if (it == NULL) return -1;
  PyObject *item;
  while ((item = PyIter_Next(it)) != NULL) {
    int64_t v;
    int r = index_value(item, a->n, bagz_len, &v);
    Py_DECREF(item);
    if (r < 0 || bcpy_ivec_push(a, v) < 0 || check_bounds(a, a->n - 1, bagz_len) < 0) {
      Py_DECREF(it);
      return -1;
    }
  }
  Py_DECREF(it);
  return PyErr_Occurred() ? -1 : 0;
}

int bcpy_key_indices(PyObject *key, const char *what, bool strict, bcpy_ivec *a) {
  bool bad = PyUnicode_Check(key) || PyBytes_Check(key) || PyByteArray_Check(key) ||
             PyFloat_Check(key) ||
             (strict && (key == Py_None || (!PySequence_Check(key) && !PyObject_CheckBuffer(key))));
  if (!bad && bcpy_indices_from_object(key, a, NULL) == 0) return 0;
  if (bad || (PyErr_ExceptionMatches(PyExc_TypeError) && !PySequence_Check(key))) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "%s must be integers, slices or sequences of integers, "
                 "not %.200s", what, Py_TYPE(key)->tp_name);
  }
  return -1;
}
