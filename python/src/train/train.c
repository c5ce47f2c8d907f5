/*
 * train/train.c - the C parts of bagcache.train (training-loop loaders):
 *
 *   _gather(seq, indices, out[, max_parallelism])
 *       reads seq[indices[k]] for every k straight into row k of `out`, a
 *       writable C-contiguous buffer of len(indices) equal rows (a numpy
 *       batch), with the GIL released and no Python object per record:
 *       bc_seq_read_into, which copies (or zstd-decodes) each record of a
 *       bag straight into its row, on at most max_parallelism threads
 *       (0, the default: the sequence's own; 1: this thread only).
 *       seq is anything whose elements are its raw records: a Reader (or
 *       a slice of one), a view over such leaves, a LoadIt with
 *       serializer="raw".  A record whose size is not the row size is a
 *       ValueError naming its index.
 *   _epoch_indices(n, seed, start, stride, out)
 *       out[k] = element start + k * stride of bagcache.shuffle(range(n),
 *       seed): the library's keyed bijection, O(1) memory at any n.
 *   _iid_indices(n, seed, start, stride, out)
 *       out[k] = a uniform draw from [0, n) that depends only on (seed,
 *       start + k * stride): a counter-based generator, so any position of
 *       the stream is computable alone (resumable, the same on every rank).
 *
 * The DataLoader's C workers are train/loader.c (_Loader), the sampler's
 * order in C train/order.c, batch memory train/pool.c (_BatchPool).
 *
 * Index buffers are any C-contiguous buffers of 8-byte items (numpy int64
 * or uint64 arrays, array('q')); numpy is not needed to build this file.
 * Everything that touches records or loops over indices runs with the GIL
 * released; only argument parsing holds it.
 */
#include "core/bcpy.h"
#include "train/order.h"
#include "train/train.h"
#include "train/pool.h"

#include <stdlib.h>
#include <string.h>

/* The buffer of `obj` as 8-byte items: count in *n.  -1 with an exception. */
static int index_buffer(PyObject *obj, Py_buffer *view, int flags, size_t *n,
                        const char *what) {
  if (PyObject_GetBuffer(obj, view, flags | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
    return -1;
  const char *f = view->format != NULL ? view->format : "B";
  if (*f == '<' || *f == '=' || *f == '@') f++;
  bool ok = view->itemsize == 8 && strlen(f) == 1 && strchr("qQlL", *f) != NULL;
  if (!ok) {
    PyErr_Format(PyExc_TypeError, "%s must be a contiguous buffer of 64-bit integers", what);
    PyBuffer_Release(view);
    return -1;
  }
  *n = (size_t)(view->len / 8);
  return 0;
}

/* ---- _gather ----------------------------------------------------------------------- */

PyObject *bcpy_train_raise(int rc) {
  if (rc == BC_EINVAL) {
    /* Raw records read into rows fail with BC_EINVAL only for a record that
     * is not one row: the message names it. */
    PyErr_Format(PyExc_ValueError, "%s (variable-size records need a collate function)",
                 bc_errmsg());
    bc_error_clear();
    return NULL;
  }
  return bcpy_raise(rc, NULL);
}

static PyObject *train_gather(PyObject *mod, PyObject *args) {
  (void)mod;
  PyObject *src, *idx_obj, *out_obj;
  int max_parallelism = 0;
  if (!PyArg_ParseTuple(args, "OOO|i:_gather", &src, &idx_obj, &out_obj, &max_parallelism))
    return NULL;
  if (max_parallelism < 0) {
    PyErr_SetString(PyExc_ValueError, "max_parallelism must be >= 0");
    return NULL;
  }
  Py_buffer iv = {0}, ov = {0};
  int64_t *idx = NULL;
  PyObject *result = NULL;
  size_t n = 0;
  bc_seq *seq = bcpy_record_seq(src);
  if (seq == NULL) return NULL;
  if (index_buffer(idx_obj, &iv, PyBUF_SIMPLE, &n, "indices") < 0) goto cleanup;
  if (PyObject_GetBuffer(out_obj, &ov, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) goto cleanup;
  if (n == 0 ? ov.len != 0 : ov.len % (Py_ssize_t)n != 0) {
    PyErr_Format(PyExc_ValueError,
                 "the output buffer (%zd bytes) does not hold %zu equal rows", ov.len, n);
    goto cleanup;
  }
  size_t row_size = n == 0 ? 0 : (size_t)ov.len / n;
  /* A copy of the indices: another thread may change the caller's array
   * while the GIL is released, and the read checks each index before it
   * reads it.  (The output's buffer export keeps its memory in place.) */
  if ((idx = PyMem_RawMalloc(n ? n * sizeof *idx : 1)) == NULL) {
    PyErr_NoMemory();
    goto cleanup;
  }
  if (n > 0) memcpy(idx, iv.buf, n * sizeof *idx);
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = bc_seq_read_into(seq, idx, n, ov.buf, row_size, max_parallelism);
  Py_END_ALLOW_THREADS
  if (rc != 0)
    bcpy_train_raise(rc);
  else
    result = Py_NewRef(Py_None);
cleanup:
  PyMem_RawFree(idx);
  if (iv.obj != NULL) PyBuffer_Release(&iv);
  if (ov.obj != NULL) PyBuffer_Release(&ov);
  /* The last reference to a LoadIt's sequence may close its cache. */
  Py_BEGIN_ALLOW_THREADS
  bc_seq_unref(seq);
  Py_END_ALLOW_THREADS
  return result;
}

/* ---- index streams ------------------------------------------------------------------ */

static PyObject *train_epoch_indices(PyObject *mod, PyObject *args) {
  (void)mod;
  unsigned long long n, seed, start, stride;
  PyObject *out_obj;
  if (!PyArg_ParseTuple(args, "KKKKO:_epoch_indices", &n, &seed, &start, &stride, &out_obj))
    return NULL;
  Py_buffer ov;
  size_t count;
  if (index_buffer(out_obj, &ov, PyBUF_WRITABLE, &count, "out") < 0) return NULL;
  PyObject *result = NULL;
  /* The last position, start + (count - 1) * stride, must be below n. */
  if (count > 0 && (stride == 0 || start >= n || (count - 1) > (n - 1 - start) / stride)) {
    PyErr_Format(PyExc_IndexError,
                 "%zu positions from %llu by %llu are not all inside an epoch of %llu", count,
                 start, stride, n);
    goto cleanup;
  }
  if (count == 0) {
    result = Py_NewRef(Py_None);
    goto cleanup;
  }
  int64_t *v = ov.buf;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = bcpy_epoch_indices(n, seed, start, stride, count, NULL, v);
  Py_END_ALLOW_THREADS
  if (rc != 0) {
    bcpy_raise(rc, NULL);
    goto cleanup;
  }
  result = Py_NewRef(Py_None);
cleanup:
  PyBuffer_Release(&ov);
  return result;
}

static PyObject *train_iid_indices(PyObject *mod, PyObject *args) {
  (void)mod;
  unsigned long long n, seed, start, stride;
  PyObject *out_obj;
  if (!PyArg_ParseTuple(args, "KKKKO:_iid_indices", &n, &seed, &start, &stride, &out_obj))
    return NULL;
  Py_buffer ov;
  size_t count;
  if (index_buffer(out_obj, &ov, PyBUF_WRITABLE, &count, "out") < 0) return NULL;
  if (n == 0 && count > 0) {
    PyBuffer_Release(&ov);
    PyErr_SetString(PyExc_ValueError, "no indices can be drawn from an empty dataset");
    return NULL;
  }
  int64_t *v = ov.buf;
  Py_BEGIN_ALLOW_THREADS
  bcpy_iid_indices(n, seed, start, stride, count, v);
  Py_END_ALLOW_THREADS
  PyBuffer_Release(&ov);
  Py_RETURN_NONE;
}

static PyMethodDef train_methods[] = {
    {"_gather", train_gather, METH_VARARGS,
     "_gather(seq, indices, out[, max_parallelism]): seq's raw records at indices into "
     "the rows of out."},
    {"_epoch_indices", train_epoch_indices, METH_VARARGS,
     "_epoch_indices(n, seed, start, stride, out): shuffle(range(n), seed)[start::stride] "
     "into out."},
    {"_iid_indices", train_iid_indices, METH_VARARGS,
     "_iid_indices(n, seed, start, stride, out): uniform draws from [0, n) at stream "
     "positions start, start+stride, ..."},
    {NULL, NULL, 0, NULL}};

int bcpy_train_init(PyObject *mod) {
  if (PyModule_AddFunctions(mod, train_methods) < 0) return -1;
  if (bcpy_train_loader_init(mod) < 0) return -1;
  return bcpy_train_pool_init(mod);
}
