/*
 * core/sequence.c - _Sequence, the one base type of the extension's
 * sequences (Reader, LoadIt and its views, bagcache.views): the subscript
 * path, the slice path, the slice-bound rule and the wait policies.
 *
 * A subtype starts its struct with BCPY_SEQ_HEAD and points `kind` at its
 * bcpy_seq_kind (set by its tp_new): how an element is read and decoded
 * (item), what an index list gives (take), how a call that may wait is run
 * (wait), what object a slice makes (wrap) and how errors are raised.
 * Everything else about keys is here, once:
 *
 *   int, bool, numpy integer  -> kind->item(i) (no int64: IndexError)
 *   slice                     -> bc_seq_slice(self->seq, ...), wrapped:
 *                                a slice of a slice composes in C
 *   anything else             -> kind->take(key), or TypeError
 *
 * A slice whose bounds are non-negative with a positive step, or of a
 * sequence whose length is known, is arithmetic and is made with the GIL
 * held; any other needs the length settled (a LoadIt's source drained) and
 * goes through the subtype's wait policy.
 */
#include "core/bcpy.h"

#include <stdlib.h>
#include <string.h>

/* ---- wait policies -------------------------------------------------------- */

void bcpy_call_run(bcpy_call *c) { c->rc = c->run(c); }

int bcpy_wait_plain(bcpy_sobj *self, bcpy_call *c) {
  (void)self;
  Py_BEGIN_ALLOW_THREADS
  bcpy_call_run(c);
  Py_END_ALLOW_THREADS
  return 0;
}

/* ---- slice bounds ------------------------------------------------------------ */

int bcpy_slice_bound(PyObject *obj, int64_t *out, bool *big) {
  if (obj == Py_None) {
    *out = BC_NONE;
    return 0;
  }
  PyObject *num = PyNumber_Index(obj);
  if (num == NULL) {
    if (PyErr_ExceptionMatches(PyExc_TypeError)) {
      PyErr_Clear();
      PyErr_Format(bcpy_InvalidSliceError,
                   "Invalid slice: slice indices must be integers or None, not %.200s",
                   Py_TYPE(obj)->tp_name);
    }
    return -1;
  }
  int overflow;
  long long v = PyLong_AsLongLongAndOverflow(num, &overflow);
  Py_DECREF(num);
  if (v == -1 && PyErr_Occurred()) return -1;
  if (overflow > 0) {
    v = INT64_MAX;
    *big = true;
  }
  if (overflow < 0 || v == BC_NONE) v = INT64_MIN + 1; /* BC_NONE means None */
  *out = v;
  return 0;
}

static int slice_bounds(PyObject *slice, int64_t *start, int64_t *stop, int64_t *step,
                      bool *big) {
  PySliceObject *s = (PySliceObject *)slice;
  if (bcpy_slice_bound(s->start, start, big) < 0 || bcpy_slice_bound(s->stop, stop, big) < 0 ||
      bcpy_slice_bound(s->step, step, big) < 0)
    return -1;
  if (*step == BC_NONE) *step = 1;
  if (*step == 0) {
    PyErr_SetString(PyExc_ValueError, "slice step cannot be zero");
    return -1;
  }
  return 0;
}

Py_ssize_t bcpy_slice_indices(PyObject *slice, Py_ssize_t len, Py_ssize_t *start,
                              Py_ssize_t *step) {
  int64_t a, b, c;
  bool big = false;
  if (slice_bounds(slice, &a, &b, &c, &big) < 0) return -1;
  /* None as PySlice_Unpack gives it: the far end for the step's sign. */
  Py_ssize_t lo = c > 0 ? 0 : PY_SSIZE_T_MAX;
  Py_ssize_t hi = c > 0 ? PY_SSIZE_T_MAX : PY_SSIZE_T_MIN;
  Py_ssize_t s = a == BC_NONE ? lo : (Py_ssize_t)a, e = b == BC_NONE ? hi : (Py_ssize_t)b;
  Py_ssize_t n = PySlice_AdjustIndices(len, &s, &e, (Py_ssize_t)c);
  *start = s;
  *step = (Py_ssize_t)c;
  return n;
}

/* ---- the subscript path ------------------------------------------------------ */

/* self[i] for an integer object (an int, or anything with __index__). */
static PyObject *item_of(bcpy_sobj *self, PyObject *num) {
  int overflow;
  long long i = PyLong_AsLongLongAndOverflow(num, &overflow);
  if (i == -1 && PyErr_Occurred()) return NULL;
  if (overflow != 0) return PyErr_Format(PyExc_IndexError, "index %R out of range", num);
  return self->kind->item(self, (int64_t)i);
}

/* 0 when self can be read (kind->check), else -1 with ValueError. */
static int sobj_check(bcpy_sobj *self) {
  if (self->kind != NULL) return self->kind->check(self);
  PyErr_Format(PyExc_ValueError, "%.200s object is not open", Py_TYPE(self)->tp_name);
  return -1;
}

/* The one subscript path: ints and numpy integers -> kind->item, slices ->
 * bcpy_sobj_slice, anything else -> kind->take (or TypeError). */
static PyObject *sobj_subscript(bcpy_sobj *self, PyObject *key) {
  const bcpy_seq_kind *kind = self->kind;
  if (sobj_check(self) < 0) return NULL;
  if (PyLong_CheckExact(key)) return item_of(self, key); /* r[i]: the hot path */
  if (PyIndex_Check(key)) {
    PyObject *num = PyNumber_Index(key);
    if (num == NULL) {
      /* An ndarray has __index__ too, for its 0-d case only: as a key it
       * is an index list. */
      if (kind->take == NULL || !PyErr_ExceptionMatches(PyExc_TypeError) ||
          !(PySequence_Check(key) || PyObject_CheckBuffer(key)))
        return NULL;
      PyErr_Clear();
      return kind->take(self, key);
    }
    PyObject *r = item_of(self, num);
    Py_DECREF(num);
    return r;
  }
  if (PySlice_Check(key)) return bcpy_sobj_slice(self, key);
  if (kind->take != NULL) return kind->take(self, key);
  PyErr_Format(PyExc_TypeError, "%.200s indices must be integers or slices, not %.200s",
               Py_TYPE(self)->tp_name, Py_TYPE(key)->tp_name);
  return NULL;
}

static PyObject *sobj_sq_item(bcpy_sobj *self, Py_ssize_t i) {
  return sobj_check(self) < 0 ? NULL : self->kind->item(self, (int64_t)i);
}

/* ---- the slice path ------------------------------------------------------------ */

typedef struct {
  bcpy_call base;
  bc_seq *seq;
  int64_t start, stop, step;
  bc_seq *out;
} slice_call;

static int slice_run(bcpy_call *c) {
  slice_call *s = (slice_call *)c;
  return bc_seq_slice(&s->out, s->seq, s->start, s->stop, s->step);
}

PyObject *bcpy_sobj_slice(bcpy_sobj *self, PyObject *key) {
  const bcpy_seq_kind *kind = self->kind;
  int64_t start, stop, step;
  bool big = false;
  if (slice_bounds(key, &start, &stop, &step, &big) < 0) return NULL;
  bc_len l;
  int rc = bc_seq_length(self->seq, false, &l); /* never waits */
  if (rc != 0) return kind->raise(rc, bc_errno(), NULL);
  bool lazy = step > 0 && (start == BC_NONE || start >= 0) && (stop == BC_NONE || stop >= 0);
  if (l.kind == BC_LEN_INFINITE) {
    /* An endless sequence has elements at every index, but only indices
     * up to 2**63-1 can be named: a bound beyond that cannot be clamped
     * without changing the elements. */
    if (big)
      return PyErr_Format(PyExc_IndexError, "slice bound out of range: an endless view "
                          "has indices up to 2**63-1 only");
    if (!lazy)
      return PyErr_Format(PyExc_TypeError, "an endless view has no end to count from: "
                          "slice it with non-negative bounds and a positive step");
  }
  bc_seq *out = NULL;
  if (lazy || l.kind != BC_LEN_AT_LEAST) { /* arithmetic */
    rc = bc_seq_slice(&out, self->seq, start, stop, step);
    if (rc != 0) return kind->raise(rc, bc_errno(), NULL);
    return kind->wrap(self, out, key);
  }
  slice_call c = {{slice_run, NULL, 0}, bc_seq_ref(self->seq), start, stop, step, NULL};
  kind->wait(self, &c.base);
  PyObject *r = c.base.rc != 0 ? kind->raise(c.base.rc, bc_errno(), NULL)
                               : kind->wrap(self, c.out, key);
  Py_BEGIN_ALLOW_THREADS /* the last reference to a sequence may close a cache */
  bc_seq_unref(c.seq);
  Py_END_ALLOW_THREADS
  return r;
}

PyObject *bcpy_sobj_reversed(bcpy_sobj *self, PyObject *unused) {
  (void)unused;
  if (sobj_check(self) < 0) return NULL;
  PyObject *minus_one = PyLong_FromLong(-1);
  if (minus_one == NULL) return NULL;
  PyObject *key = PySlice_New(NULL, NULL, minus_one);
  Py_DECREF(minus_one);
  if (key == NULL) return NULL;
  PyObject *r = bcpy_sobj_slice(self, key);
  Py_DECREF(key);
  return r;
}

/* ---- type ------------------------------------------------------------------------ */

static PySequenceMethods sobj_as_sequence = {
    .sq_item = (ssizeargfunc)sobj_sq_item,
};

static PyMappingMethods sobj_as_mapping = {
    .mp_subscript = (binaryfunc)sobj_subscript,
};

/* Abstract: only its subtypes make objects (their tp_new sets `kind`). */
PyTypeObject bcpy_Sequence_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bagcache._bagcache._Sequence",
    .tp_basicsize = sizeof(bcpy_sobj),
    .tp_as_sequence = &sobj_as_sequence,
    .tp_as_mapping = &sobj_as_mapping,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The base of bagcache's sequences: one bc_seq, one subscript path.",
};
