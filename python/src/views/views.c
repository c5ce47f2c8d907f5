/*
 * views/views.c - _View: loadit-compatible views (take, map, slice, concat,
 * interleave, repeat, chunk shuffle) over ANY Python sequence, built on the
 * C views of bagcache/seq.h.
 *
 * How elements flow.  A view is a C sequence tree (bc_seq).  Its leaves
 * are of three kinds:
 *   native   a bagcache sequence (a Reader, another native view): records
 *            are bytes, read by the library with the GIL released;
 *   decoded  a native sequence whose records are turned into objects by a
 *            Python callable (e.g. pickle.loads): a `natleaf` wrapping it;
 *   python   any Python object with __len__ and __getitem__: a `pyleaf`,
 *            holding the object; its elements are whatever obj[i] returns.
 * An element is read by resolving its position through the C tree
 * (bc_seq_resolve, no I/O) to (leaf, leaf index).  A python leaf is then
 * indexed in Python (obj[i], any object comes back, nothing is copied); a
 * native or decoded leaf is read in C.  Batches (iteration) resolve a chunk
 * of positions at once and read every native position of the chunk with
 * one bc_seq_get_many (grouped by leaf, on the worker pool); a tree without
 * python leaves is iterated by bc_readahead entirely in C.
 *
 * pyleaf and natleaf are foreign leaves implemented through the public
 * bc_seq_ops interface (not bc_seq_new_callbacks) so that a resolved leaf is
 * recognised by its ops table in O(1).  A pyleaf's `get` is never called:
 * its elements are read in Python.
 *
 * GIL: a tree holding a native leaf may block in resolve (a cache settling
 * its length runs the user's iterator, which needs the GIL on a fill
 * thread), so such trees are resolved and read with the GIL released.  A
 * tree of python leaves only is resolved with the GIL held (pure
 * arithmetic).  Python index maps (SequenceView(seq, fn, length)) call fn
 * with PyGILState_Ensure; they are only ever run in the thread that asked
 * for the element, so an exception fn raises stays in that thread's state
 * and is re-raised as is.
 */
#include "core/bcpy.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "structmember.h"

/* ---- kinds of leaves in a tree ------------------------------------------------ */

#define VK_PYTHON 1u /* python leaves or python index maps: Python code runs */
#define VK_NATIVE 2u /* native leaves: reads may block, GIL released */
#define VK_DECODE 4u /* decoded leaves: records go through a Python decoder */
#define VK_WAITS 8u  /* leaves whose reads may wait for a fill (a LoadIt's) */
/* (bagcache/views.py reads these bits as _kinds.) */

const char bcpy_waits_mark[] = "a LoadIt's sequence: reads may wait for fills";

typedef struct {
  BCPY_SEQ_HEAD      /* seq: the view; NULL until an _init_* method ran */
  unsigned kinds;    /* VK_* of every leaf and map in the tree */
  PyObject *weakrefs;
} bcpy_view;

/* The class of views made by slicing/indexing (bagcache.views.SequenceView
 * once that module is imported). */
static PyObject *view_class;

/* ---- python leaves -------------------------------------------------------------- */

typedef struct {
  bc_seq base;
  PyObject *obj; /* strong reference */
  uint64_t len;  /* len(obj) when the leaf was made */
} pyleaf;

static int pyleaf_length(bc_seq *self, bool exact, bc_len *out) {
  (void)exact;
  *out = (bc_len){BC_LEN_EXACT, ((pyleaf *)self)->len};
  return 0;
}

/* Raised Python exceptions become BC_ESOURCE with the exception's text. */
static int python_failure(void) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  PyObject *text = value != NULL ? PyObject_Str(value) : NULL;
  const char *s = text != NULL ? PyUnicode_AsUTF8(text) : NULL;
  if (s == NULL) PyErr_Clear();
  int rc = bc_set_errmsg(BC_ESOURCE, "%s: %s",
                         type != NULL ? ((PyTypeObject *)type)->tp_name : "error",
                         s != NULL ? s : "?");
  Py_XDECREF(text);
  PyErr_Restore(type, value, tb); /* left for the caller's thread */
  return rc;
}

/* obj[i] (GIL held). */
static PyObject *pyleaf_item(const pyleaf *p, uint64_t i) {
  PyObject *obj = p->obj;
  if (PyList_CheckExact(obj) && i < (uint64_t)PyList_GET_SIZE(obj))
    return Py_NewRef(PyList_GET_ITEM(obj, (Py_ssize_t)i));
  if (PyTuple_CheckExact(obj) && i < (uint64_t)PyTuple_GET_SIZE(obj))
    return Py_NewRef(PyTuple_GET_ITEM(obj, (Py_ssize_t)i));
  PyObject *key = PyLong_FromUnsignedLongLong(i);
  if (key == NULL) return NULL;
  PyObject *item = PyObject_GetItem(obj, key);
  Py_DECREF(key);
  return item;
}

/* Never called: a python leaf's elements are any objects, read in Python
 * (pyleaf_item); every tree holding one has VK_PYTHON, which no C reader
 * of records is given (bcpy_record_seq refuses it, iteration resolves it
 * in chunks, read_natives skips its leaves). */
static int pyleaf_get(bc_seq *self, uint64_t index, bc_buf *out) {
  (void)self;
  (void)out;
  return bc_set_errmsg(BC_EINVAL, "python: element %llu is read in Python, not as bytes",
                       (unsigned long long)index);
}

static void pyleaf_destroy(bc_seq *self) {
  pyleaf *p = (pyleaf *)self;
  if (!bcpy_finalizing()) {
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_XDECREF(p->obj);
    PyGILState_Release(gil);
  }
  free(p);
}

static const bc_seq_ops pyleaf_ops = {
    .version = BC_SEQ_OPS_VERSION,
    .type_name = "python",
    .length = pyleaf_length,
    .get = pyleaf_get,
    .destroy = pyleaf_destroy,
};

/* A leaf over obj (GIL held); `len` is fixed now. */
static bc_seq *pyleaf_new(PyObject *obj, uint64_t len) {
  pyleaf *p = calloc(1, sizeof *p);
  if (p == NULL) {
    PyErr_NoMemory();
    return NULL;
  }
  if (bc_seq_init(&p->base, &pyleaf_ops, 0) != 0) {
    free(p);
    bcpy_raise(BC_EINVAL, NULL);
    return NULL;
  }
  p->obj = Py_NewRef(obj);
  p->len = len;
  return &p->base;
}

/* ---- decoded native leaves -------------------------------------------------------- */

typedef struct {
  bc_seq base;
  bc_seq *inner;    /* a native sequence of records */
  PyObject *decode; /* callable(bytes) -> element */
} natleaf;

static int natleaf_length(bc_seq *self, bool exact, bc_len *out) {
  return bc_seq_length(((natleaf *)self)->inner, exact, out);
}

static int natleaf_get(bc_seq *self, uint64_t index, bc_buf *out) {
  return bc_seq_get(((natleaf *)self)->inner, (int64_t)index, out);
}

static int natleaf_get_many(bc_seq *self, const uint64_t *indices, size_t count,
                            bc_buf *outs) {
  /* Indices come from resolve, so they are below 2**63. */
  int64_t *signed_indices = malloc((count ? count : 1) * sizeof *signed_indices);
  if (signed_indices == NULL) return bc_set_errmsg(BC_ENOMEM, "out of memory");
  for (size_t k = 0; k < count; k++) signed_indices[k] = (int64_t)indices[k];
  int rc = bc_seq_get_many(((natleaf *)self)->inner, signed_indices, count, outs);
  free(signed_indices);
  return rc;
}

static void natleaf_destroy(bc_seq *self) {
  natleaf *n = (natleaf *)self;
  bc_seq_unref(n->inner);
  if (!bcpy_finalizing()) {
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_XDECREF(n->decode);
    PyGILState_Release(gil);
  }
  free(n);
}

static const bc_seq_ops natleaf_ops = {
    .version = BC_SEQ_OPS_VERSION,
    .type_name = "decoded",
    .length = natleaf_length,
    .get = natleaf_get,
    .get_many = natleaf_get_many,
    .destroy = natleaf_destroy,
};

static bc_seq *natleaf_new(bc_seq *inner, PyObject *decode) {
  natleaf *n = calloc(1, sizeof *n);
  if (n == NULL) {
    PyErr_NoMemory();
    return NULL;
  }
  if (bc_seq_init(&n->base, &natleaf_ops, BC_SEQ_F_THREAD_SAFE) != 0) {
    free(n);
    bcpy_raise(BC_EINVAL, NULL);
    return NULL;
  }
  n->inner = bc_seq_ref(inner);
  n->decode = Py_NewRef(decode);
  return &n->base;
}

/* ---- python index maps -------------------------------------------------------------- */

typedef struct {
  PyObject *fn;
  bc_seq *child; /* borrowed: the map view holds it */
} pymap;

static int pymap_call(void *payload, uint64_t index, uint64_t *child_index) {
  pymap *m = payload;
  long long v = 0;
  int rc = 0;
  if (bcpy_finalizing()) return bc_set_errmsg(BC_ESOURCE, "index map: the interpreter is exiting");
  PyGILState_STATE gil = PyGILState_Ensure();
  if (PyErr_Occurred()) {
    rc = bc_set_errmsg(BC_ESOURCE, "a Python error is pending");
  } else {
    PyObject *r = PyObject_CallFunction(m->fn, "K", (unsigned long long)index);
    PyObject *num = r != NULL ? PyNumber_Index(r) : NULL;
    Py_XDECREF(r);
    if (num != NULL) {
      int overflow;
      v = PyLong_AsLongLongAndOverflow(num, &overflow);
      Py_DECREF(num);
      if (overflow != 0)
        rc = bc_set_errmsg(BC_ERANGE, "index map: fn(%llu) is out of range",
                           (unsigned long long)index);
    }
    if (rc == 0 && PyErr_Occurred()) rc = python_failure();
  }
  PyGILState_Release(gil);
  if (rc != 0) return rc;
  if (v >= 0) {
    *child_index = (uint64_t)v;
    return 0;
  }
  /* A negative child index counts from the child's end (no GIL held here
   * unless the caller holds it, which it does only for trees of python
   * leaves, whose lengths are fixed). */
  uint64_t n;
  if ((rc = bc_seq_len(m->child, &n)) != 0) return rc;
  if ((uint64_t)(-(v + 1)) + 1 > n)
    return bc_set_errmsg(BC_ERANGE, "index map: fn(%llu) = %lld out of range",
                         (unsigned long long)index, v);
  *child_index = n - ((uint64_t)(-(v + 1)) + 1);
  return 0;
}

static void pymap_free(void *payload) {
  pymap *m = payload;
  if (!bcpy_finalizing()) {
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_XDECREF(m->fn);
    PyGILState_Release(gil);
  }
  free(m);
}

/* ---- error helpers ----------------------------------------------------------------- */

/* After a failed library call: the Python exception a callback left, or
 * the library's error. */
static PyObject *view_raise(int rc, const char *message) {
  if (PyErr_Occurred()) return NULL;
  if (rc == BC_EINFINITE) {
    PyErr_SetString(PyExc_TypeError,
                    message != NULL && message[0] ? message : bc_errmsg());
    return NULL;
  }
  return bcpy_raise(rc, message);
}

#define GIL_RELEASE_IF(cond) \
  {                          \
    PyThreadState *_save = (cond) ? PyEval_SaveThread() : NULL;
#define GIL_RESTORE \
  if (_save != NULL) PyEval_RestoreThread(_save); \
  }

/* ---- adopting Python objects ---------------------------------------------------------- */

extern PyTypeObject bcpy_View_Type;

static bool is_view(PyObject *obj) { return PyObject_TypeCheck(obj, &bcpy_View_Type); }

/* A _SeqBase (Reader or a slice of one) whose items are its records: its
 * type has not replaced the C __getitem__. */
static bool is_record_seq(PyObject *obj) {
  if (!PyObject_TypeCheck(obj, &bcpy_SeqBase_Type)) return false;
  PyMappingMethods *m = Py_TYPE(obj)->tp_as_mapping;
  return m != NULL && m->mp_subscript == bcpy_SeqBase_Type.tp_as_mapping->mp_subscript &&
         ((bcpy_seq *)obj)->seq != NULL;
}

/* The bc_seq of a native source object (a _SeqBase, a _View, or a capsule
 * "bagcache.bc_seq"): new reference, or NULL with an exception. */
static bc_seq *native_source(PyObject *src, unsigned *kinds) {
  if (is_view(src)) {
    bcpy_view *v = (bcpy_view *)src;
    if (v->seq == NULL) goto unopened;
    *kinds |= v->kinds;
    return bc_seq_ref(v->seq);
  }
  if (PyObject_TypeCheck(src, &bcpy_SeqBase_Type)) {
    if (((bcpy_seq *)src)->seq == NULL) goto unopened;
    *kinds |= VK_NATIVE;
    return bc_seq_ref(((bcpy_seq *)src)->seq);
  }
  if (PyCapsule_IsValid(src, "bagcache.bc_seq")) {
    bc_seq *s = PyCapsule_GetPointer(src, "bagcache.bc_seq");
    *kinds |= VK_NATIVE;
    if (PyCapsule_GetContext(src) == (void *)bcpy_waits_mark) *kinds |= VK_WAITS;
    return bc_seq_ref(s);
  }
  PyErr_Format(PyExc_TypeError,
               "__bagcache_seq__ must give a bagcache sequence or a "
               "'bagcache.bc_seq' capsule, not %.200s",
               Py_TYPE(src)->tp_name);
  return NULL;
unopened:
  PyErr_Format(PyExc_ValueError, "%.200s object is not initialised",
               Py_TYPE(src)->tp_name);
  return NULL;
}

/* The C sequence for a Python object (new reference), adding its kinds:
 *   a _View                      -> its tree
 *   obj.__bagcache_seq__()       -> a native source, or (source, decode)
 *   a Reader (unmodified items)  -> its records, read in C
 *   anything with len() and []   -> a python leaf. */
static bc_seq *adopt(PyObject *obj, unsigned *kinds) {
  if (is_view(obj) || is_record_seq(obj)) return native_source(obj, kinds);
  PyObject *hook = PyObject_GetAttrString((PyObject *)Py_TYPE(obj), "__bagcache_seq__");
  if (hook == NULL) {
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return NULL;
    PyErr_Clear();
  } else {
    Py_DECREF(hook);
    PyObject *r = PyObject_CallMethod(obj, "__bagcache_seq__", NULL);
    if (r == NULL) return NULL;
    bc_seq *s = NULL;
    if (PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 2) {
      PyObject *decode = PyTuple_GET_ITEM(r, 1);
      unsigned k = 0;
      bc_seq *inner = native_source(PyTuple_GET_ITEM(r, 0), &k);
      if (inner != NULL && decode != Py_None) {
        if (!PyCallable_Check(decode)) {
          PyErr_SetString(PyExc_TypeError,
                          "__bagcache_seq__: the decoder must be callable or None");
        } else {
          s = natleaf_new(inner, decode);
          k |= VK_DECODE;
        }
        bc_seq_unref(inner);
      } else {
        s = inner;
      }
      if (s != NULL) *kinds |= k;
    } else {
      s = native_source(r, kinds);
    }
    Py_DECREF(r);
    return s;
  }
  Py_ssize_t n = PyObject_Length(obj);
  if (n < 0) {
    if (PyErr_ExceptionMatches(PyExc_TypeError)) {
      PyErr_Clear();
      PyErr_Format(PyExc_TypeError,
                   "a view needs a sequence (len() and []), not %.200s",
                   Py_TYPE(obj)->tp_name);
    }
    return NULL;
  }
  if (!PySequence_Check(obj) && !PyMapping_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "a view needs a sequence (len() and []), not %.200s",
                 Py_TYPE(obj)->tp_name);
    return NULL;
  }
  *kinds |= VK_PYTHON;
  return pyleaf_new(obj, (uint64_t)n);
}

bc_seq *bcpy_record_seq(PyObject *obj) {
  unsigned kinds = 0;
  bc_seq *s = adopt(obj, &kinds);
  if (s != NULL && (kinds & (VK_PYTHON | VK_DECODE)) != 0) {
    bc_seq_unref(s);
    PyErr_Format(PyExc_TypeError,
                 "%.200s does not hold raw records (a Reader, a view of Readers, or a "
                 "LoadIt with serializer=\"raw\"); use a collate function",
                 Py_TYPE(obj)->tp_name);
    return NULL;
  }
  return s;
}

/* ---- construction -------------------------------------------------------------------- */

static int check_fresh(bcpy_view *self) {
  if (self->seq == NULL) return 0;
  PyErr_SetString(PyExc_RuntimeError, "the view is already initialised");
  return -1;
}

static int check_open(bcpy_view *self) {
  if (self->seq != NULL) return 0;
  PyErr_Format(PyExc_ValueError, "%.200s object is not initialised (its __init__ was not run)",
               Py_TYPE(self)->tp_name);
  return -1;
}

/* Sets the view's tree (steals `seq`). */
static PyObject *install(bcpy_view *self, bc_seq *seq, unsigned kinds) {
  self->seq = seq;
  self->kinds = kinds;
  Py_RETURN_NONE;
}

/* The length of a tree (with these kinds) as far as it is known without
 * blocking on I/O (with the GIL released when the tree may block). */
static int known_length(unsigned kinds, bc_seq *seq, bool exact, bc_len *out) {
  int rc;
  GIL_RELEASE_IF(kinds & VK_NATIVE)
  rc = bc_seq_length(seq, exact, out);
  GIL_RESTORE
  return rc;
}

/* Checks take indices against a child of exact length now, so a bad index
 * fails at construction (naming its position), not when read. */
static int check_indices(const bcpy_ivec *a, bc_seq *child, unsigned kinds) {
  bc_len l;
  int rc = known_length(kinds, child, false, &l);
  if (rc != 0) {
    view_raise(rc, NULL);
    return -1;
  }
  if (l.kind != BC_LEN_EXACT) return 0; /* checked when read */
  int64_t n = (int64_t)l.value;
  for (size_t k = 0; k < a->n; k++) {
    int64_t v = a->v[k];
    if (v >= n || v < -n) {
      PyErr_Format(PyExc_IndexError, "indices[%zu] = %lld out of range [-%lld, %lld)", k,
                   (long long)v, (long long)n, (long long)n);
      return -1;
    }
  }
  return 0;
}

/* take over an adopted child. */
static bc_seq *make_take(bc_seq *child, unsigned kinds, const bcpy_ivec *a) {
  if (check_indices(a, child, kinds) < 0) return NULL;
  bc_seq *out = NULL;
  int rc = bc_seq_take(&out, child, a->v, a->n);
  if (rc != 0) {
    view_raise(rc, NULL);
    return NULL;
  }
  return out;
}

/* _init_take(seq, indices): element k is seq[indices[k]]. */
static PyObject *view_init_take(bcpy_view *self, PyObject *args) {
  PyObject *obj, *indices;
  if (!PyArg_ParseTuple(args, "OO:_init_take", &obj, &indices)) return NULL;
  if (check_fresh(self) < 0) return NULL;
  unsigned kinds = 0;
  bcpy_ivec a = {0};
  bc_seq *child = adopt(obj, &kinds), *seq = NULL;
  if (child != NULL && bcpy_indices_from_object(indices, &a, NULL) == 0)
    seq = make_take(child, kinds, &a);
  bc_seq_unref(child);
  PyMem_RawFree(a.v);
  if (seq == NULL) return NULL;
  return install(self, seq, kinds);
}

/* _init_identity(seq): the sequence itself. */
static PyObject *view_init_identity(bcpy_view *self, PyObject *obj) {
  if (check_fresh(self) < 0) return NULL;
  unsigned kinds = 0;
  bc_seq *seq = adopt(obj, &kinds);
  if (seq == NULL) return NULL;
  return install(self, seq, kinds);
}

/* _init_map(seq, fn, length): element k is seq[fn(k)], k < length. */
static PyObject *view_init_map(bcpy_view *self, PyObject *args) {
  PyObject *obj, *fn;
  unsigned long long length;
  if (!PyArg_ParseTuple(args, "OOK:_init_map", &obj, &fn, &length)) return NULL;
  if (check_fresh(self) < 0) return NULL;
  if (!PyCallable_Check(fn)) {
    PyErr_SetString(PyExc_TypeError, "the index map must be callable");
    return NULL;
  }
  unsigned kinds = VK_PYTHON;
  bc_seq *child = adopt(obj, &kinds), *seq = NULL;
  if (child == NULL) return NULL;
  pymap *m = malloc(sizeof *m);
  if (m == NULL) {
    bc_seq_unref(child);
    return PyErr_NoMemory();
  }
  m->fn = Py_NewRef(fn);
  m->child = child;
  int rc = bc_seq_map(&seq, child, pymap_call, m, pymap_free,
                      (bc_len){BC_LEN_EXACT, (uint64_t)length});
  bc_seq_unref(child);
  if (rc != 0) {
    pymap_free(m);
    return view_raise(rc, NULL);
  }
  return install(self, seq, kinds);
}

/* Adopts every item of a tuple of sequences. */
static bc_seq **adopt_all(PyObject *parts, size_t *count, unsigned *kinds) {
  Py_ssize_t n = PyTuple_GET_SIZE(parts);
  bc_seq **seqs = PyMem_RawCalloc(n > 0 ? (size_t)n : 1, sizeof *seqs);
  if (seqs == NULL) {
    PyErr_NoMemory();
    return NULL;
  }
  for (Py_ssize_t k = 0; k < n; k++) {
    seqs[k] = adopt(PyTuple_GET_ITEM(parts, k), kinds);
    if (seqs[k] == NULL) {
      for (Py_ssize_t j = 0; j < k; j++) bc_seq_unref(seqs[j]);
      PyMem_RawFree(seqs);
      return NULL;
    }
  }
  *count = (size_t)n;
  return seqs;
}

static PyObject *init_parts(bcpy_view *self, PyObject *parts, bool interleave) {
  if (check_fresh(self) < 0) return NULL;
  if (!PyTuple_Check(parts)) {
    PyErr_SetString(PyExc_TypeError, "parts must be a tuple");
    return NULL;
  }
  unsigned kinds = 0;
  size_t n;
  bc_seq **seqs = adopt_all(parts, &n, &kinds), *seq = NULL;
  if (seqs == NULL) return NULL;
  int rc;
  if (interleave) {
    /* The interleave settles the parts' lengths on first use. */
    rc = bc_seq_interleave(&seq, seqs, n);
  } else {
    rc = bc_seq_concat(&seq, seqs, n);
  }
  for (size_t k = 0; k < n; k++) bc_seq_unref(seqs[k]);
  PyMem_RawFree(seqs);
  if (rc != 0) return view_raise(rc, NULL);
  return install(self, seq, kinds);
}

static PyObject *view_init_concat(bcpy_view *self, PyObject *parts) {
  return init_parts(self, parts, false);
}

static PyObject *view_init_interleave(bcpy_view *self, PyObject *parts) {
  return init_parts(self, parts, true);
}

/* _init_repeat(seq, times): times None repeats forever. */
static PyObject *view_init_repeat(bcpy_view *self, PyObject *args) {
  PyObject *obj, *times_obj;
  if (!PyArg_ParseTuple(args, "OO:_init_repeat", &obj, &times_obj)) return NULL;
  if (check_fresh(self) < 0) return NULL;
  uint64_t times = BC_REPEAT_FOREVER;
  if (times_obj != Py_None) {
    PyObject *num = PyNumber_Index(times_obj);
    if (num == NULL) return NULL;
    int overflow;
    long long t = PyLong_AsLongLongAndOverflow(num, &overflow);
    Py_DECREF(num);
    if (t == -1 && PyErr_Occurred()) return NULL;
    if (overflow < 0 || (overflow == 0 && t < 0)) {
      PyErr_SetString(PyExc_ValueError, "repeats must be >= 0 or None");
      return NULL;
    }
    /* More repeats than 2**63 cannot be told from forever. */
    times = overflow > 0 ? BC_REPEAT_FOREVER : (uint64_t)t;
  }
  unsigned kinds = 0;
  bc_seq *child = adopt(obj, &kinds), *seq = NULL;
  if (child == NULL) return NULL;
  int rc = bc_seq_repeat(&seq, child, times);
  bc_seq_unref(child);
  if (rc != 0) return view_raise(rc, NULL);
  return install(self, seq, kinds);
}

/* _init_chunk_shuffle(seq, chunk_size, length, seed): length None = all. */
static PyObject *view_init_chunk_shuffle(bcpy_view *self, PyObject *args) {
  PyObject *obj, *length_obj;
  unsigned long long chunk, seed;
  if (!PyArg_ParseTuple(args, "OKOK:_init_chunk_shuffle", &obj, &chunk, &length_obj,
                        &seed))
    return NULL;
  if (check_fresh(self) < 0) return NULL;
  uint64_t length = BC_LEN_ALL;
  if (length_obj != Py_None) {
    unsigned long long l = PyLong_AsUnsignedLongLong(length_obj);
    if (l == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    length = l;
  }
  unsigned kinds = 0;
  bc_seq *child = adopt(obj, &kinds), *seq = NULL;
  if (child == NULL) return NULL;
  int rc;
  GIL_RELEASE_IF(kinds & VK_NATIVE) /* may settle the child's length */
  rc = bc_seq_chunk_shuffle(&seq, child, chunk, length, seed);
  GIL_RESTORE
  bc_seq_unref(child);
  if (rc != 0) return view_raise(rc, NULL);
  return install(self, seq, kinds);
}

/* ---- reading ---------------------------------------------------------------------- */

static inline bool is_pyleaf(const bc_seq *leaf) { return leaf->ops == &pyleaf_ops; }

/* ---- reads that Ctrl-C can interrupt -------------------------------------------------- */

/* A read of a tree with a native leaf runs in this thread with the GIL
 * released; one with a LoadIt leaf may wait for a fill that runs the
 * user's iterator for minutes, and from the main thread Ctrl-C reaches
 * that wait through the interrupt handler (module.c): the read returns
 * BC_ECANCELED with KeyboardInterrupt set, as a LoadIt's own reads do.  A
 * tree of python leaves only is read with the GIL held (arithmetic and
 * Python code). */
static int read_waiting(bcpy_view *self, bcpy_call *c) {
  if (!(self->kinds & VK_NATIVE)) {
    bcpy_call_run(c);
    return 0;
  }
  return bcpy_wait_plain((bcpy_sobj *)self, c);
}

/* A native record as an element (GIL held). */
static PyObject *native_element(const bc_seq *leaf, const bc_buf *b) {
  PyObject *bytes = PyBytes_FromStringAndSize((const char *)b->data, (Py_ssize_t)b->size);
  if (bytes == NULL || leaf->ops != &natleaf_ops) return bytes;
  PyObject *obj = PyObject_CallOneArg(((const natleaf *)leaf)->decode, bytes);
  Py_DECREF(bytes);
  return obj;
}

/* view[i]: resolved, and read when its leaf is native, through read_waiting. */
typedef struct {
  bcpy_call base;
  bc_seq *seq;
  int64_t i;
  bc_seq *leaf;
  uint64_t li;
  bc_buf buf;
} one_read;

static int one_read_run(bcpy_call *c) {
  one_read *r = (one_read *)c;
  int rc = bc_seq_resolve(r->seq, r->i, &r->leaf, &r->li);
  if (rc == 0 && !is_pyleaf(r->leaf)) rc = bc_seq_get(r->leaf, (int64_t)r->li, &r->buf);
  return rc;
}

static PyObject *get_one(bcpy_view *self, int64_t i) {
  one_read r = {{one_read_run, NULL, 0}, self->seq, i, NULL, 0, BC_BUF_INIT};
  if (read_waiting(self, &r.base) < 0) return NULL;
  PyObject *result;
  if (r.base.rc != 0)
    result = view_raise(r.base.rc, NULL);
  else if (is_pyleaf(r.leaf))
    result = pyleaf_item((pyleaf *)r.leaf, r.li);
  else
    result = native_element(r.leaf, &r.buf);
  bc_buf_release(&r.buf);
  return result;
}

/* How a batch read stopped early. */
typedef struct {
  int rc;         /* the library's code, 0 if a Python exception is stored */
  char *message;  /* its message (malloc'd) */
  PyObject *type, *value, *tb; /* a Python exception */
} failure;

static void failure_clear(failure *f) {
  free(f->message);
  Py_XDECREF(f->type);
  Py_XDECREF(f->value);
  Py_XDECREF(f->tb);
  memset(f, 0, sizeof *f);
}

typedef struct {
  bc_seq *leaf;
  size_t k; /* position in the chunk */
} leaf_pos;

static int leaf_pos_cmp(const void *a, const void *b) {
  const leaf_pos *x = a, *y = b;
  if (x->leaf != y->leaf) return (uintptr_t)x->leaf < (uintptr_t)y->leaf ? -1 : 1;
  return x->k < y->k ? -1 : x->k > y->k;
}

/* The native elements of a resolved chunk, read through read_waiting:
 * leaf[k], li[k] for the positions k < m that are not python leaves,
 * grouped by leaf, one bc_seq_get_many per leaf (no second resolve: a
 * Python index map in the tree is called once per element).  `cut` is the
 * first position (in chunk order) whose read failed, or m, with its code
 * in base.rc and its message in `message`. */
typedef struct {
  bcpy_call base;
  bc_seq **leaf;
  const uint64_t *li;
  size_t m, cut;
  bc_buf *bufs, *scratch;
  leaf_pos *order;
  int64_t *idx;
  char *message;
} natives_read;

static int read_natives(bcpy_call *c) {
  natives_read *r = (natives_read *)c;
  bc_seq **leaf = r->leaf;
  const uint64_t *li = r->li;
  bc_buf *bufs = r->bufs, *scratch = r->scratch;
  leaf_pos *order = r->order;
  int64_t *idx = r->idx;
  size_t m = r->m, nn = 0, cut = m;
  int rc = 0;
  for (size_t k = 0; k < m; k++)
    if (!is_pyleaf(leaf[k])) order[nn++] = (leaf_pos){leaf[k], k};
  if (nn > 1) qsort(order, nn, sizeof *order, leaf_pos_cmp);
  for (size_t lo = 0; lo < nn;) {
    size_t hi = lo + 1;
    while (hi < nn && order[hi].leaf == order[lo].leaf) hi++;
    size_t cnt = hi - lo;
    for (size_t j = 0; j < cnt; j++) {
      idx[j] = (int64_t)li[order[lo + j].k];
      scratch[j] = bufs[order[lo + j].k];
    }
    int grc = bc_seq_get_many(order[lo].leaf, idx, cnt, scratch);
    for (size_t j = 0; j < cnt; j++) bufs[order[lo + j].k] = scratch[j];
    if (grc != 0) {
      /* The group's first failing element (its positions ascend). */
      for (size_t j = 0; j < cnt && order[lo + j].k < cut; j++) {
        size_t k = order[lo + j].k;
        int one = bc_seq_get(order[lo].leaf, (int64_t)li[k], &bufs[k]);
        if (one != 0) {
          cut = k;
          rc = one;
          free(r->message);
          r->message = strdup(bc_errmsg());
          break;
        }
      }
    }
    lo = hi;
  }
  r->cut = cut;
  return rc;
}

/* Reads the elements at positions pos[0..n) into out[].  Returns how many
 * were read (a prefix); when fewer than n, *fail says why. */
static size_t read_positions(bcpy_view *self, const int64_t *pos, size_t n, PyObject **out,
                             failure *fail) {
  size_t cap = n ? n : 1;
  bc_seq **leaf = PyMem_RawMalloc(cap * sizeof *leaf);
  uint64_t *li = PyMem_RawMalloc(cap * sizeof *li);
  leaf_pos *order = PyMem_RawMalloc(cap * sizeof *order);
  int64_t *idx = PyMem_RawMalloc(cap * sizeof *idx);
  bc_buf *bufs = PyMem_RawCalloc(cap, sizeof *bufs);
  bc_buf *scratch = PyMem_RawMalloc(cap * sizeof *scratch);
  size_t m = 0, done = 0;
  int rc = 0;
  memset(fail, 0, sizeof *fail);
  if (!leaf || !li || !order || !idx || !bufs || !scratch) {
    PyErr_NoMemory();
    PyErr_Fetch(&fail->type, &fail->value, &fail->tb);
    goto cleanup;
  }
  bool native = (self->kinds & VK_NATIVE) != 0;
  /* 1. resolve (Python index maps may run: their exception is kept) */
  GIL_RELEASE_IF(native)
  for (m = 0; m < n; m++)
    if ((rc = bc_seq_resolve(self->seq, pos[m], &leaf[m], &li[m])) != 0) break;
  if (rc != 0) fail->message = strdup(bc_errmsg());
  GIL_RESTORE
  if (rc != 0) {
    fail->rc = rc;
    if (PyErr_Occurred()) {
      PyErr_Fetch(&fail->type, &fail->value, &fail->tb);
      fail->rc = 0;
    }
  }
  /* 2. native records, in C (a Ctrl-C in a wait: nothing of this chunk is
   * returned) */
  if (self->kinds & (VK_NATIVE | VK_DECODE)) {
    natives_read r = {{read_natives, NULL, 0}, leaf, li, m, m, bufs, scratch, order, idx, NULL};
    read_waiting(self, &r.base);
    if (PyErr_Occurred()) {
      failure_clear(fail);
      PyErr_Fetch(&fail->type, &fail->value, &fail->tb);
      m = 0;
    } else if (r.cut < m) {
      failure_clear(fail);
      fail->rc = r.base.rc;
      fail->message = r.message;
      r.message = NULL;
      m = r.cut;
    }
    free(r.message);
  }
  /* 3. elements, in order */
  for (done = 0; done < m; done++) {
    PyObject *obj = is_pyleaf(leaf[done]) ? pyleaf_item((pyleaf *)leaf[done], li[done])
                                          : native_element(leaf[done], &bufs[done]);
    if (obj == NULL) {
      failure_clear(fail);
      PyErr_Fetch(&fail->type, &fail->value, &fail->tb);
      break;
    }
    out[done] = obj;
  }
  if (done == n) failure_clear(fail);
cleanup:
  if (bufs != NULL)
    for (size_t k = 0; k < n; k++) bc_buf_release(&bufs[k]);
  PyMem_RawFree(leaf);
  PyMem_RawFree(li);
  PyMem_RawFree(order);
  PyMem_RawFree(idx);
  PyMem_RawFree(bufs);
  PyMem_RawFree(scratch);
  return done;
}

/* ---- items, slices, keys ------------------------------------------------------------ */

static const bcpy_seq_kind view_kind;

static PyObject *getitem_fn(void);

/* self[key]: a new view of view_class over `seq` (stolen), with self's
 * kinds.  Pickling rebuilds it as operator.getitem(self, key), the recipe
 * kept in its _recipe (bagcache/views.py); without one (key NULL) it still
 * works, and pickling says it cannot. */
static PyObject *derived(bcpy_view *self, bc_seq *seq, PyObject *key) {
  PyTypeObject *cls = view_class != NULL ? (PyTypeObject *)view_class : &bcpy_View_Type;
  bcpy_view *v = (bcpy_view *)cls->tp_alloc(cls, 0);
  if (v == NULL) {
    bc_seq_unref(seq);
    return NULL;
  }
  v->kind = &view_kind;
  v->seq = seq;
  v->kinds = self->kinds;
  PyObject *fn = key != NULL ? getitem_fn() : NULL;
  PyObject *recipe = fn != NULL ? Py_BuildValue("(O(OO))", fn, self, key) : NULL;
  if (recipe == NULL || PyObject_SetAttrString((PyObject *)v, "_recipe", recipe) < 0)
    PyErr_Clear();
  Py_XDECREF(recipe);
  return (PyObject *)v;
}

static PyObject *getitem_fn(void) {
  static PyObject *fn;
  if (fn == NULL) {
    PyObject *op = PyImport_ImportModule("operator");
    if (op == NULL) return NULL;
    fn = PyObject_GetAttrString(op, "getitem");
    Py_DECREF(op);
  }
  return fn;
}

/* view[a:b:c] (core/sequence.c made `seq`). */
static PyObject *view_wrap(bcpy_sobj *base, bc_seq *seq, PyObject *key) {
  return derived((bcpy_view *)base, seq, key);
}

/* The indices as an array('q'): what pickling keeps of a take (a snapshot,
 * so a view does not follow later changes of a list it was given). */
static PyObject *indices_array(const bcpy_ivec *a) {
  PyObject *array_mod = PyImport_ImportModule("array");
  if (array_mod == NULL) return NULL;
  PyObject *bytes = PyBytes_FromStringAndSize((const char *)a->v,
                                              (Py_ssize_t)(a->n * sizeof *a->v));
  PyObject *arr = bytes != NULL ? PyObject_CallMethod(array_mod, "array", "sO", "q", bytes)
                                : NULL;
  Py_XDECREF(bytes);
  Py_DECREF(array_mod);
  return arr;
}

/* _indices_array(indices) -> array('q') of the integers of any sequence,
 * iterable or integer buffer of indices. */
static PyObject *view_indices_array(PyObject *unused, PyObject *indices) {
  (void)unused;
  bcpy_ivec a = {0};
  PyObject *r = bcpy_indices_from_object(indices, &a, NULL) == 0 ? indices_array(&a) : NULL;
  PyMem_RawFree(a.v);
  return r;
}

/* view[indices]: a take view. */
static PyObject *get_take(bcpy_sobj *base, PyObject *key) {
  bcpy_view *self = (bcpy_view *)base;
  bcpy_ivec a = {0};
  if (bcpy_key_indices(key, "view indices", true, &a) < 0) {
    PyMem_RawFree(a.v);
    return NULL;
  }
  bc_seq *seq = make_take(self->seq, self->kinds, &a);
  PyObject *snapshot = NULL, *r = NULL;
  if (seq != NULL) {
    snapshot = indices_array(&a); /* the key pickling keeps */
    if (snapshot == NULL) PyErr_Clear();
    r = derived(self, seq, snapshot);
  }
  Py_XDECREF(snapshot);
  PyMem_RawFree(a.v);
  return r;
}

static Py_ssize_t view_length(bcpy_view *self) {
  if (check_open(self) < 0) return -1;
  bc_len l;
  int rc = known_length(self->kinds, self->seq, true, &l);
  if (rc != 0) {
    view_raise(rc, NULL);
    return -1;
  }
  if (l.kind == BC_LEN_INFINITE) {
    PyErr_SetString(PyExc_TypeError, "an endless view has no len()");
    return -1;
  }
  if (l.value > (uint64_t)PY_SSIZE_T_MAX) {
    PyErr_SetString(PyExc_OverflowError, "view too long for len()");
    return -1;
  }
  return (Py_ssize_t)l.value;
}

static int view_bool(bcpy_view *self) {
  if (check_open(self) < 0) return -1;
  bc_len l;
  int rc = known_length(self->kinds, self->seq, false, &l);
  if (rc == 0 && l.kind == BC_LEN_AT_LEAST && l.value == 0)
    rc = known_length(self->kinds, self->seq, true, &l);
  if (rc != 0) {
    view_raise(rc, NULL);
    return -1;
  }
  return l.kind == BC_LEN_INFINITE || l.value > 0;
}

static int view_check(bcpy_sobj *self) { return check_open((bcpy_view *)self); }

static PyObject *view_item(bcpy_sobj *self, int64_t i) { return get_one((bcpy_view *)self, i); }

static PyObject *view_raise_errno(int rc, int sys_errno, const char *message) {
  (void)sys_errno;
  return view_raise(rc, message);
}

/* A slice that settles the length, a read-ahead refill. */
static int view_wait(bcpy_sobj *base, bcpy_call *c) { return read_waiting((bcpy_view *)base, c); }

static PyObject *view_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
  bcpy_view *self = (bcpy_view *)PyType_GenericNew(type, args, kwds);
  if (self != NULL) self->kind = &view_kind;
  return (PyObject *)self;
}

/* ---- iteration ------------------------------------------------------------------------ */

/* Elements handed out per refill: small first (next(iter(v)) reads little),
 * then growing. */
#define ITER_FIRST_CHUNK 8
#define ITER_MAX_CHUNK 1024
/* Read-ahead of trees read entirely in C. */
#define ITER_WINDOW 256
#define ITER_MAX_RA_CHUNK 64
#define ITER_THREADS 2

/* The iterator (core/iterator.c): trees without Python code are read ahead
 * in C; others a chunk of positions at a time (view_chunk). */
static PyObject *view_iter(bcpy_view *self) {
  if (check_open(self) < 0) return NULL;
  bool chunked = (self->kinds & VK_PYTHON) != 0;
  return bcpy_iter_open((bcpy_sobj *)self, &bcpy_ViewIterator_Type, self->seq, 0,
                        ITER_WINDOW, ITER_THREADS, ITER_FIRST_CHUNK,
                        chunked ? ITER_MAX_CHUNK : ITER_MAX_RA_CHUNK, false, chunked);
}

/* A record read ahead at position `index`, as an element: its leaf's
 * decoder, if any, makes it (the leaf found again by arithmetic). */
static PyObject *view_decode(bcpy_sobj *base, bc_buf *b, uint64_t index) {
  bcpy_view *self = (bcpy_view *)base;
  bc_seq *leaf = NULL;
  uint64_t li;
  if (!(self->kinds & VK_DECODE) ||
      bc_seq_resolve(self->seq, (int64_t)index, &leaf, &li) != 0)
    return PyBytes_FromStringAndSize((const char *)b->data, (Py_ssize_t)b->size);
  return native_element(leaf, b);
}

static bool view_waits(bcpy_sobj *self) { return (((bcpy_view *)self)->kinds & VK_WAITS) != 0; }

/* Refill by resolving a chunk of positions (trees with Python code). */
static void view_chunk(bcpy_sobj *base, bcpy_iter *it) {
  bcpy_view *view = (bcpy_view *)base;
  size_t want = it->batch;
  if (it->bounded) {
    if (it->next >= it->end) {
      it->done = true;
      it->head = it->count = 0;
      return;
    }
    if (it->end - it->next < want) want = (size_t)(it->end - it->next);
  }
  int64_t *pos = PyMem_RawMalloc(want * sizeof *pos);
  if (pos == NULL) {
    PyErr_NoMemory();
    PyErr_Fetch(&it->exc_type, &it->exc_value, &it->exc_tb);
    it->done = true;
    return;
  }
  for (size_t k = 0; k < want; k++) pos[k] = (int64_t)(it->next + k);
  failure f;
  size_t got = read_positions(view, pos, want, it->items, &f);
  PyMem_RawFree(pos);
  it->head = 0;
  it->count = got;
  it->next += got;
  if (got == want) return;
  it->done = true;
  if (f.type == NULL && f.rc == BC_ERANGE && !it->bounded) {
    /* Past the end of a sequence whose end was not known, or a real error? */
    bc_len l;
    if (known_length(view->kinds, view->seq, false, &l) == 0 && l.kind == BC_LEN_EXACT &&
        l.value <= it->next) {
      failure_clear(&f);
      return;
    }
    PyErr_Clear();
  }
  /* raised once the elements before it are out */
  it->exc_type = f.type;
  it->exc_value = f.value;
  it->exc_tb = f.tb;
  if (f.type == NULL && f.rc != 0) {
    /* This thread's error is still the failure's (with its payload, a
     * source's exception) unless a later call replaced it. */
    if (f.message == NULL || strcmp(bc_errmsg(), f.message) != 0)
      bc_set_errmsg(f.rc, "%s", f.message != NULL ? f.message : "");
    bc_error_save(&it->fail, f.rc);
    bc_error_clear();
  }
  free(f.message);
}

static const bcpy_seq_kind view_kind = {
    .check = view_check,
    .item = view_item,
    .take = get_take,
    .wait = view_wait,
    .wrap = view_wrap,
    .raise = view_raise_errno,
    .decode = view_decode,
    .waits = view_waits,
    .chunk = view_chunk,
};

PyTypeObject bcpy_ViewIterator_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bagcache.ViewIterator",
    .tp_basicsize = sizeof(bcpy_iter),
    .tp_flags = Py_TPFLAGS_DEFAULT, /* GC: inherited */
    .tp_doc = "Iterator over a view: elements read a chunk at a time (native\n"
              "records read ahead on worker threads).",
    .tp_base = &bcpy_Iterator_Type,
};

/* ---- membership ------------------------------------------------------------------------ */

static int view_contains(bcpy_view *self, PyObject *value) {
  PyObject *it = view_iter(self);
  if (it == NULL) return -1;
  PyObject *item;
  int found = 0;
  size_t seen = 0;
  while (found == 0 && (item = PyIter_Next(it)) != NULL) {
    found = PyObject_RichCompareBool(item, value, Py_EQ);
    Py_DECREF(item);
    /* endless views: let Ctrl-C through */
    if (found == 0 && (++seen & 4095) == 0 && PyErr_CheckSignals() < 0) found = -1;
  }
  Py_DECREF(it);
  if (found == 0 && PyErr_Occurred()) return -1;
  return found;
}

/* ---- introspection, pickling ------------------------------------------------------------ */

/* _describe() -> (tree type name, length kind, known length). */
static PyObject *view_describe(bcpy_view *self, PyObject *unused) {
  (void)unused;
  if (check_open(self) < 0) return NULL;
  bc_len l;
  int rc = bc_seq_length(self->seq, false, &l); /* never blocks */
  if (rc != 0) return view_raise(rc, NULL);
  const char *kind = l.kind == BC_LEN_EXACT     ? "exact"
                     : l.kind == BC_LEN_AT_LEAST ? "at_least"
                                                 : "infinite";
  return Py_BuildValue("(ssK)", bc_seq_type_name(self->seq), kind,
                       (unsigned long long)l.value);
}

/* _chunk_shuffle_indices(chunk_size, length, seed) -> bytearray of int64:
 * element k of a chunk shuffle of range(length), from the library's keyed
 * bijection. */
static PyObject *view_chunk_shuffle_indices(PyObject *unused, PyObject *args) {
  (void)unused;
  unsigned long long chunk, length, seed;
  if (!PyArg_ParseTuple(args, "KKK:_chunk_shuffle_indices", &chunk, &length, &seed))
    return NULL;
  if (length > (unsigned long long)(PY_SSIZE_T_MAX / 8)) return PyErr_NoMemory();
  bc_seq *base = pyleaf_new(Py_None, length), *shuffled = NULL;
  if (base == NULL) return NULL;
  int rc = bc_seq_chunk_shuffle(&shuffled, base, chunk, length, seed);
  bc_seq_unref(base);
  if (rc != 0) return view_raise(rc, NULL);
  PyObject *out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(length * 8));
  if (out == NULL) {
    bc_seq_unref(shuffled);
    return NULL;
  }
  int64_t *v = (int64_t *)PyByteArray_AS_STRING(out);
  Py_BEGIN_ALLOW_THREADS
  for (uint64_t k = 0; k < length && rc == 0; k++) {
    bc_seq *leaf;
    uint64_t li;
    rc = bc_seq_resolve(shuffled, (int64_t)k, &leaf, &li);
    v[k] = (int64_t)li;
  }
  Py_END_ALLOW_THREADS
  bc_seq_unref(shuffled);
  if (rc != 0) {
    Py_DECREF(out);
    return view_raise(rc, NULL);
  }
  return out;
}

static PyObject *view_set_view_class(PyObject *unused, PyObject *cls) {
  (void)unused;
  if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &bcpy_View_Type)) {
    PyErr_SetString(PyExc_TypeError, "the view class must subclass _View");
    return NULL;
  }
  Py_XSETREF(view_class, Py_NewRef(cls));
  Py_RETURN_NONE;
}

/* ---- type ------------------------------------------------------------------------------ */

/* Python subclasses: subtype_dealloc releases the heap type (and their
 * __dict__, which holds the recipe: the base type holds no Python object,
 * so it is no GC type). */
static void view_dealloc(bcpy_view *self) {
  if (self->weakrefs != NULL) PyObject_ClearWeakRefs((PyObject *)self);
  bc_seq *seq = self->seq;
  self->seq = NULL;
  /* The last reference to a tree of native leaves may close files. */
  bc_seq_unref(seq);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef view_methods[] = {
    {"_init_take", (PyCFunction)view_init_take, METH_VARARGS,
     "_init_take(seq, indices): element k is seq[indices[k]]."},
    {"_init_identity", (PyCFunction)view_init_identity, METH_O,
     "_init_identity(seq): the elements of seq."},
    {"_init_map", (PyCFunction)view_init_map, METH_VARARGS,
     "_init_map(seq, fn, length): element k is seq[fn(k)] for k < length."},
    {"_init_concat", (PyCFunction)view_init_concat, METH_O,
     "_init_concat(parts): the parts one after another."},
    {"_init_interleave", (PyCFunction)view_init_interleave, METH_O,
     "_init_interleave(parts): round-robin over the parts."},
    {"_init_repeat", (PyCFunction)view_init_repeat, METH_VARARGS,
     "_init_repeat(seq, times): seq times over (None: forever)."},
    {"_init_chunk_shuffle", (PyCFunction)view_init_chunk_shuffle, METH_VARARGS,
     "_init_chunk_shuffle(seq, chunk_size, length, seed)."},
    {"__reversed__", (PyCFunction)bcpy_sobj_reversed, METH_NOARGS,
     "__reversed__() -> the view in reverse order (a view)."},
    {"_describe", (PyCFunction)view_describe, METH_NOARGS,
     "_describe() -> (type name, length kind, known length)."},
    {"_chunk_shuffle_indices", (PyCFunction)view_chunk_shuffle_indices,
     METH_VARARGS | METH_STATIC,
     "_chunk_shuffle_indices(chunk_size, length, seed) -> bytearray of int64."},
    {"_indices_array", (PyCFunction)view_indices_array, METH_O | METH_STATIC,
     "_indices_array(indices) -> array('q') of the indices."},
    {"_set_view_class", (PyCFunction)view_set_view_class, METH_O | METH_STATIC,
     "_set_view_class(cls): the class of views made by slicing and indexing."},
    {NULL, NULL, 0, NULL}};

static PyMemberDef view_members[] = {
    {"_kinds", T_UINT, offsetof(bcpy_view, kinds), READONLY,
     "The kinds of leaves and maps in the tree: 1 python, 2 native, 4 decoded, 8 a LoadIt's."},
    {NULL, 0, 0, 0, NULL}};

static PySequenceMethods view_as_sequence = {
    .sq_length = (lenfunc)view_length,
    .sq_contains = (objobjproc)view_contains,
};

static PyMappingMethods view_as_mapping = {
    .mp_length = (lenfunc)view_length,
};

static PyNumberMethods view_as_number = {
    .nb_bool = (inquiry)view_bool,
};

PyTypeObject bcpy_View_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bagcache._bagcache._View",
    .tp_basicsize = sizeof(bcpy_view),
    .tp_dealloc = (destructor)view_dealloc,
    .tp_as_number = &view_as_number,
    .tp_as_sequence = &view_as_sequence,
    .tp_as_mapping = &view_as_mapping,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_SEQUENCE,
    .tp_doc = "A lazy view (index map) over sequences; see bagcache.views.",
    .tp_weaklistoffset = offsetof(bcpy_view, weakrefs),
    .tp_iter = (getiterfunc)view_iter,
    .tp_methods = view_methods,
    .tp_members = view_members,
    .tp_base = &bcpy_Sequence_Type,
    .tp_new = view_new,
};
