/*
 * core/bulk.c - reads of many records: read, read_range, read_indices, and the
 * linear scans behind `in`, count and index.
 *
 * Reads of records (read, read_range, read_indices) go in rounds through
 * the thread's staging area (scratch.c): the GIL is released while
 * bc_seq_get_many reads a round on the worker pool, then taken back to turn
 * the round into bytes objects.  A round holds about BCPY_STAGE_BYTES of
 * records, so they are still in the CPU cache when copied out, and the
 * area's buffers are reused from round to round and call to call, so a
 * bulk read allocates nothing per record but its bytes objects.  The linear
 * scans go in chunks of BCPY_CHUNK records, compared without the GIL.
 *
 * Indices are checked and made non-negative before anything is read, so an
 * IndexError names the first bad position and returns no records.
 */
#include "core/bcpy.h"

#include <stdlib.h>
#include <string.h>

/* ---- the bulk read loop ------------------------------------------------------ */

/* A round of bc_seq_get_many, run through the sequence's wait policy. */
typedef struct {
  bcpy_call base;
  bc_seq *seq;
  const int64_t *idx;
  bc_buf *bufs;
  size_t n;
} round_call;

_Thread_local size_t bcpy_wait_records;

static int round_run(bcpy_call *c) {
  round_call *r = (round_call *)c;
  return bc_seq_get_many(r->seq, r->idx, r->n, r->bufs);
}

/* Raises a failed round's error.  The library names the failing position
 * "indices[P] = I: ..." (bc_seq_get_many), P counted in the round: renamed
 * here by the round's offset `off` in the caller's list (SIZE_MAX: the
 * round is not in the caller's order). */
static void raise_round(bcpy_sobj *self, int rc, int sys_errno, const char *message,
                        size_t off) {
  size_t p;
  int at = 0;
  char msg[1200];
  if (off != SIZE_MAX && sscanf(message, "indices[%zu] = %n", &p, &at) == 1 && at > 0) {
    snprintf(msg, sizeof msg, "indices[%zu] = %s", off + p, message + at);
    message = msg;
  }
  self->kind->raise(rc, sys_errno, message);
}

/* Reads idx[0..n), positions off.. of the caller's list, into bufs through
 * the sequence's wait policy (the GIL released).  Sets the Python
 * exception and returns -1 on failure.  Where reads never wait for a fill,
 * the failing records are then looked up one by one (on this error path
 * only) and the first one's own error is raised, naming its index.  A
 * read that may wait (a LoadIt's) raises the batch's error, naming its
 * position: its payload is the source's exception, and a second read
 * would run the source again. */
static int round_read(bcpy_sobj *self, const int64_t *idx, bc_buf *bufs, size_t n,
                      size_t off) {
  const bcpy_seq_kind *kind = self->kind;
  round_call c = {{round_run, NULL, 0}, self->seq, idx, bufs, n};
  bcpy_wait_records = n;
  int waited = kind->wait(self, &c.base);
  bcpy_wait_records = 0;
  if (waited < 0) return -1;
  int rc = c.base.rc;
  if (rc == 0) return 0;
  if (kind->waits != NULL && kind->waits(self)) {
    raise_round(self, rc, bc_errno(), bc_errmsg(), off);
    return -1;
  }
  char *batch_msg = strdup(bc_errmsg());
  int batch_errno = bc_errno();
  int one = 0;
  size_t k = 0;
  Py_BEGIN_ALLOW_THREADS
  for (k = 0; k < n && one == 0; k++) one = bc_seq_get(self->seq, idx[k], &bufs[k]);
  Py_END_ALLOW_THREADS
  if (one != 0) {
    /* bc_errmsg is this thread's: still the single read's message. */
    char msg[1100];
    snprintf(msg, sizeof msg, "index %lld: %s", (long long)idx[k - 1], bc_errmsg());
    kind->raise(one, bc_errno(), msg);
  } else {
    raise_round(self, rc, batch_errno, batch_msg != NULL ? batch_msg : "", off);
  }
  free(batch_msg);
  return -1;
}

typedef struct {
  int64_t index;
  size_t pos;
} pair;

/* What a bulk read reads: records start, start + 1, ... (idx and pairs
 * NULL), idx[0..), or the distinct indices of sorted pairs, the j-th being
 * pairs[group[j]].index and its element shared by the positions
 * pairs[group[j] .. group[j + 1]).pos. */
typedef struct {
  int64_t start;
  const int64_t *idx;
  const pair *pairs;
  const size_t *group;
} plan;

/* The one bulk read loop of every sequence (Reader, LoadIt, and their
 * slices and views): `n` records as `plan` says, into a list of `len`
 * elements.  Records go in rounds through the thread's staging area
 * (scratch.c): each round is one bc_seq_get_many through the sequence's
 * wait policy (round_read), then the GIL is taken back to make its
 * elements (kind->decode, or bytes).  A round holds about
 * BCPY_STAGE_BYTES of records, so they are still in the CPU cache when
 * decoded, and the area's buffers are reused from round to round and call
 * to call, so a bulk read allocates nothing per record but its elements.
 * A round after the first checks the object (kind->check): a LoadIt may
 * have been closed while a round waited. */
static PyObject *read_plan(bcpy_sobj *self, const plan *p, size_t n, size_t len) {
  const bcpy_seq_kind *kind = self->kind;
  PyObject *list = PyList_New((Py_ssize_t)len);
  if (list == NULL) return NULL;
  bcpy_stage *st = bcpy_stage_take();
  if (st == NULL) goto fail;
  for (size_t off = 0; off < n;) {
    if (off > 0 && kind->check(self) < 0) goto fail;
    size_t m = bcpy_stage_next(st, n - off, false);
    for (size_t k = 0; k < m; k++)
      st->idx[k] = p->idx != NULL     ? p->idx[off + k]
                   : p->pairs != NULL ? p->pairs[p->group[off + k]].index
                                      : p->start + (int64_t)(off + k);
    if (round_read(self, st->idx, st->bufs, m, p->pairs != NULL ? SIZE_MAX : off) < 0)
      goto fail;
    for (size_t k = 0; k < m; k++) {
      bc_buf *b = &st->bufs[k];
      PyObject *e = kind->decode != NULL
                        ? kind->decode(self, b, (uint64_t)st->idx[k])
                        : PyBytes_FromStringAndSize((const char *)b->data, (Py_ssize_t)b->size);
      if (e == NULL) goto fail;
      if (p->pairs == NULL) {
        PyList_SET_ITEM(list, (Py_ssize_t)(off + k), e);
        continue;
      }
      size_t first = p->group[off + k], end = p->group[off + k + 1];
      for (size_t q = first + 1; q < end; q++)
        PyList_SET_ITEM(list, (Py_ssize_t)p->pairs[q].pos, Py_NewRef(e));
      PyList_SET_ITEM(list, (Py_ssize_t)p->pairs[first].pos, e);
    }
    bcpy_stage_done(st, m);
    off += m;
  }
  bcpy_stage_give(st);
  return list;
fail: /* unset list items are NULL, which list_dealloc skips */
  bcpy_stage_give(st);
  Py_DECREF(list);
  return NULL;
}

PyObject *bcpy_read_list(bcpy_sobj *self, const int64_t *idx, size_t n) {
  plan p = {0, idx, NULL, NULL};
  return read_plan(self, &p, n, n);
}

/* list(view[start : start + n]). */
static PyObject *read_span(bcpy_seq *self, uint64_t start, size_t n) {
  plan p = {(int64_t)start, NULL, NULL, NULL};
  return read_plan((bcpy_sobj *)self, &p, n, n);
}

static bool pair_less(pair x, pair y) {
  return x.index < y.index || (x.index == y.index && x.pos < y.pos);
}

/* Sorts pairs by index, keeping request order among equal indices.  Below
 * SORT_RADIX_MIN pairs: an insertion sort (qsort's calls through a compare
 * function were a third of read_indices of 32 indices).  From
 * SORT_RADIX_MIN pairs on: an LSD radix sort (stable), on 8-bit digits
 * below 2^16 pairs and 16-bit digits above (the count table must stay small
 * next to n), as many passes as the largest index needs: linear, where
 * qsort's n log n compare calls were a tenth of read_indices of 10,000
 * indices and dominated a million.  `tmp` holds n pairs; indices are
 * non-negative (checked on conversion).  Returns -1 when out of memory.
 * Runs without the GIL: no shared state. */
#define SORT_RADIX_MIN 64
static int sort_pairs(pair *pairs, pair *tmp, size_t n, uint64_t max_index) {
  if (n < SORT_RADIX_MIN) {
    for (size_t k = 1; k < n; k++) {
      pair p = pairs[k];
      size_t j = k;
      for (; j > 0 && pair_less(p, pairs[j - 1]); j--) pairs[j] = pairs[j - 1];
      pairs[j] = p;
    }
    return 0;
  }
  unsigned bits = n < ((size_t)1 << 16) ? 8 : 16;
  size_t radix = (size_t)1 << bits, mask = radix - 1;
  size_t *count = PyMem_RawMalloc(radix * sizeof *count);
  if (count == NULL) return -1;
  pair *from = pairs, *to = tmp;
  for (unsigned shift = 0; shift < 64 && (max_index >> shift) != 0; shift += bits) {
    memset(count, 0, radix * sizeof *count);
    for (size_t k = 0; k < n; k++) count[((uint64_t)from[k].index >> shift) & mask]++;
    size_t sum = 0;
    for (size_t d = 0; d < radix; d++) {
      size_t c = count[d];
      count[d] = sum;
      sum += c;
    }
    for (size_t k = 0; k < n; k++)
      to[count[((uint64_t)from[k].index >> shift) & mask]++] = from[k];
    pair *t = from;
    from = to;
    to = t;
  }
  if (from != pairs) memcpy(pairs, from, n * sizeof *pairs);
  PyMem_RawFree(count);
  return 0;
}

/* [view[i] for i in idx] for checked, non-negative idx.  Each distinct index
 * is read once, in ascending order, and its bytes object is shared by every
 * position that asked for it. */
static PyObject *read_list(bcpy_seq *self, const int64_t *idx, size_t n) {
  bool increasing = true;
  for (size_t k = 1; k < n && increasing; k++) increasing = idx[k - 1] < idx[k];
  if (increasing) return bcpy_read_list((bcpy_sobj *)self, idx, n);
  PyObject *list = NULL;
  pair *pairs = PyMem_RawMalloc(n * sizeof *pairs);
  size_t *group = PyMem_RawMalloc((n + 1) * sizeof *group);
  pair *tmp = PyMem_RawMalloc(n * sizeof *tmp);
  if (pairs == NULL || group == NULL || tmp == NULL) {
    PyErr_NoMemory();
    goto cleanup;
  }
  uint64_t max_index = 0;
  for (size_t k = 0; k < n; k++) {
    pairs[k] = (pair){idx[k], k};
    if ((uint64_t)idx[k] > max_index) max_index = (uint64_t)idx[k];
  }
  int sorted;
  Py_BEGIN_ALLOW_THREADS
  sorted = sort_pairs(pairs, tmp, n, max_index);
  Py_END_ALLOW_THREADS
  if (sorted < 0) {
    PyErr_NoMemory();
    goto cleanup;
  }
  size_t distinct = 0;
  for (size_t k = 0; k < n; k++)
    if (k == 0 || pairs[k].index != pairs[k - 1].index) group[distinct++] = k;
  group[distinct] = n;
  plan p = {0, NULL, pairs, group};
  list = read_plan((bcpy_sobj *)self, &p, distinct, n);
cleanup:
  PyMem_RawFree(tmp);
  PyMem_RawFree(pairs);
  PyMem_RawFree(group);
  return list;
}

/* ---- entry points ------------------------------------------------------------ */

PyObject *bcpy_seq_read(bcpy_seq *self, PyObject *unused) {
  (void)unused;
  if (bcpy_seq_check_bulk(self) < 0) return NULL;
  return read_span(self, 0, (size_t)self->len);
}

int bcpy_seq_check_range(bcpy_seq *self, Py_ssize_t *start, Py_ssize_t num) {
  Py_ssize_t s = *start;
  if (num < 0) {
    PyErr_Format(PyExc_ValueError, "num_records must be >= 0, not %zd", num);
    return -1;
  }
  if (s < 0) s += (Py_ssize_t)self->len;
  if (s < 0 || (uint64_t)s > self->len || (uint64_t)num > self->len - (uint64_t)s) {
    PyErr_Format(PyExc_IndexError, "Range [%zd, %lld) out of range [0, %llu]", *start,
                 (long long)*start + (long long)num, (unsigned long long)self->len);
    return -1;
  }
  *start = s;
  return 0;
}

PyObject *bcpy_seq_read_range(bcpy_seq *self, PyObject *args) {
  Py_ssize_t start, num;
  if (!PyArg_ParseTuple(args, "nn:read_range", &start, &num)) return NULL;
  if (bcpy_seq_check_bulk(self) < 0 || bcpy_seq_check_range(self, &start, num) < 0)
    return NULL;
  return read_span(self, (uint64_t)start, (size_t)num);
}

PyObject *bcpy_seq_read_indices(bcpy_seq *self, PyObject *indices) {
  if (bcpy_seq_check_bulk(self) < 0) return NULL;
  if (PySlice_Check(indices)) {
    Py_ssize_t start, step;
    Py_ssize_t n = bcpy_slice_indices(indices, (Py_ssize_t)self->len, &start, &step);
    if (n < 0) return NULL;
    if (step == 1) return read_span(self, (uint64_t)start, (size_t)n);
    int64_t *idx = PyMem_RawMalloc((n > 0 ? (size_t)n : 1) * sizeof *idx);
    if (idx == NULL) return PyErr_NoMemory();
    for (Py_ssize_t k = 0; k < n; k++) idx[k] = (int64_t)(start + k * step);
    PyObject *list = read_list(self, idx, (size_t)n);
    PyMem_RawFree(idx);
    return list;
  }
  bcpy_ivec a = {NULL, 0, 0};
  PyObject *list = NULL;
  if (bcpy_indices_from_object(indices, &a, &self->len) == 0) list = read_list(self, a.v, a.n);
  PyMem_RawFree(a.v);
  return list;
}

/* ---- linear scans ------------------------------------------------------------ */

enum scan_mode { SCAN_FIRST, SCAN_COUNT };

/* Compares view[start:stop] with the value, a chunk at a time (GIL
 * released for each chunk's read and comparison, taken back in between to
 * let signal handlers run).  SCAN_FIRST: *result = position of the first
 * match or -1.  SCAN_COUNT: *result = number of matches. */
static int scan(bcpy_seq *self, PyObject *value, uint64_t start, uint64_t stop,
                enum scan_mode mode, Py_ssize_t *result) {
  if (PyUnicode_Check(value)) {
    PyErr_SetString(PyExc_TypeError, "a bytes-like object is required, not 'str'");
    return -1;
  }
  Py_buffer v;
  if (PyObject_GetBuffer(value, &v, PyBUF_SIMPLE) < 0) return -1;
  bcpy_stage *c = bcpy_stage_take();
  if (c == NULL) {
    PyBuffer_Release(&v);
    return -1;
  }
  uint64_t n = stop > start ? stop - start : 0;
  int status = 0;
  Py_ssize_t found = mode == SCAN_FIRST ? -1 : 0;
  for (uint64_t off = 0; off < n && !(mode == SCAN_FIRST && found >= 0);) {
    size_t m = bcpy_stage_next(c, (size_t)(n - off < c->cap ? n - off : c->cap), true);
    for (size_t k = 0; k < m; k++) c->idx[k] = (int64_t)(start + off + k);
    int rc;
    int64_t bad = -1; /* the record that failed, when one did */
    Py_BEGIN_ALLOW_THREADS
    rc = bc_seq_get_many(self->seq, c->idx, m, c->bufs);
    /* After a failed batch, go record by record: a match before the bad
     * record still counts (as in a plain loop), and the error raised is
     * that record's own. */
    bool one_by_one = rc != 0;
    for (size_t k = 0; k < m; k++) {
      if (one_by_one && (rc = bc_seq_get(self->seq, c->idx[k], &c->bufs[k])) != 0) {
        bad = c->idx[k];
        break;
      }
      const bc_buf *b = &c->bufs[k];
      if (b->size != (size_t)v.len || (v.len > 0 && memcmp(b->data, v.buf, b->size) != 0))
        continue;
      if (mode == SCAN_COUNT) {
        found++;
      } else {
        found = (Py_ssize_t)(start + off + k);
        break;
      }
    }
    Py_END_ALLOW_THREADS
    if (bad >= 0) {
      char msg[1100];
      snprintf(msg, sizeof msg, "index %lld: %s", (long long)bad, bc_errmsg());
      bcpy_raise_errno(rc, bc_errno(), msg);
      status = -1;
      break;
    }
    if (PyErr_CheckSignals() < 0) {
      status = -1;
      break;
    }
    off += m;
  }
  bcpy_stage_give(c);
  PyBuffer_Release(&v);
  if (status == 0) *result = found;
  return status;
}

int bcpy_seq_contains(bcpy_seq *self, PyObject *value) {
  if (bcpy_seq_check_bulk(self) < 0) return -1;
  Py_ssize_t pos;
  if (scan(self, value, 0, self->len, SCAN_FIRST, &pos) < 0) return -1;
  return pos >= 0;
}

PyObject *bcpy_seq_count(bcpy_seq *self, PyObject *value) {
  if (bcpy_seq_check_bulk(self) < 0) return NULL;
  Py_ssize_t count;
  if (scan(self, value, 0, self->len, SCAN_COUNT, &count) < 0) return NULL;
  return PyLong_FromSsize_t(count);
}

/* A bound of index(): None keeps *out, an integer is clamped like a slice
 * bound (bcpy_slice_bound). */
static int index_bound(PyObject *obj, Py_ssize_t *out) {
  int64_t v;
  bool big = false;
  if (bcpy_slice_bound(obj, &v, &big) < 0) return -1;
  if (v != BC_NONE) *out = (Py_ssize_t)v;
  return 0;
}

PyObject *bcpy_seq_index(bcpy_seq *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"value", "start", "stop", NULL};
  PyObject *value, *start_obj = Py_None, *stop_obj = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|OO:index", kwlist, &value,
                                   &start_obj, &stop_obj))
    return NULL;
  if (bcpy_seq_check_bulk(self) < 0) return NULL;
  /* list.index semantics: bounds are clamped like slice bounds. */
  Py_ssize_t start = 0, stop = PY_SSIZE_T_MAX;
  if (index_bound(start_obj, &start) < 0 || index_bound(stop_obj, &stop) < 0)
    return NULL;
  PySlice_AdjustIndices((Py_ssize_t)self->len, &start, &stop, 1);
  Py_ssize_t pos;
  if (scan(self, value, (uint64_t)start, (uint64_t)(stop > start ? stop : start),
           SCAN_FIRST, &pos) < 0)
    return NULL;
  if (pos < 0) {
    PyErr_SetString(PyExc_ValueError, "value is not in the Reader");
    return NULL;
  }
  return PyLong_FromSsize_t(pos);
}
