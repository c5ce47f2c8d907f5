/*
 * slice(start, stop, step): element k is child[start + k * step], for
 * k < bound.  Python's slice rules are applied once, at construction, when
 * the child's length is known; over a child whose end is not known yet,
 * non-negative bounds with a positive step stay lazy (bound may be
 * UNBOUNDED and the leaf decides where the sequence ends).
 *
 * A slice of a slice is built directly over the grandchild: the two
 * progressions compose into one (start' = s1 + s2 * st1, step' = st1 * st2).
 */
#include "config.h"

#include <stdlib.h>

#include "seq/internal.h"

#define UNBOUNDED UINT64_MAX

typedef struct {
  bc_seq base;
  bc_seq *child;
  uint64_t start; /* child index of element 0 */
  int64_t step;   /* non-zero; negative only when bound is exact */
  uint64_t bound; /* elements, at most; UNBOUNDED when lazy */
} slice_seq;

static const bc_seq_ops slice_ops;

/* Number of elements of range(a, b, step>0) for a <= b, rounded up. */
static uint64_t ceil_div(uint64_t n, uint64_t d) { return n / d + (n % d != 0); }

/* For a bounded lazy slice: whether the child holds our last element,
 * found by reading that one element (a filling cache fills one shard)
 * instead of settling the child's whole length.  1 yes, 0 no, or an error. */
static int probe_last(slice_seq *s) {
  uint64_t last = s->start + (s->bound - 1) * (uint64_t)s->step;
  bc_buf buf = BC_BUF_INIT;
  int rc = bc__seq_read(s->child, last, &buf);
  bc_buf_release(&buf);
  if (rc == 0) return 1;
  return rc == BC_ERANGE ? 0 : rc;
}

static int slice_length(bc_seq *self, bool exact, bc_len *out) {
  slice_seq *s = (slice_seq *)self;
  if (s->step < 0) {
    *out = (bc_len){BC_LEN_EXACT, s->bound};
    return 0;
  }
  bc_len c;
  int rc;
  if (exact && s->bound != UNBOUNDED && s->bound > 0 &&
      (rc = s->child->ops->length(s->child, false, &c)) == 0 &&
      c.kind == BC_LEN_AT_LEAST) {
    uint64_t last = s->start + (s->bound - 1) * (uint64_t)s->step;
    int has_last = c.value > last ? 1 : probe_last(s);
    if (has_last < 0) return has_last;
    if (has_last) { /* every element up to the bound exists */
      *out = (bc_len){BC_LEN_EXACT, s->bound};
      return 0;
    }
  }
  rc = s->child->ops->length(s->child, exact, &c);
  if (rc != 0) return rc;
  uint64_t step = (uint64_t)s->step;
  if (c.kind == BC_LEN_INFINITE) {
    *out = s->bound == UNBOUNDED ? (bc_len){BC_LEN_INFINITE, 0}
                                 : (bc_len){BC_LEN_EXACT, s->bound};
    return 0;
  }
  uint64_t n = c.value > s->start ? ceil_div(c.value - s->start, step) : 0;
  if (c.kind == BC_LEN_EXACT || (s->bound != UNBOUNDED && n >= s->bound))
    *out = (bc_len){BC_LEN_EXACT, n < s->bound ? n : s->bound};
  else
    *out = (bc_len){BC_LEN_AT_LEAST, n};
  return 0;
}

static int slice_resolve(bc_seq *self, uint64_t index, bc_seq **child,
                         uint64_t *child_index) {
  slice_seq *s = (slice_seq *)self;
  if (index >= s->bound) return bc__seq_range_error(self, index, s->bound);
  uint64_t offset;
  if (s->step > 0) {
    if (__builtin_mul_overflow(index, (uint64_t)s->step, &offset) ||
        __builtin_add_overflow(s->start, offset, child_index))
      return bc__error(BC_ERANGE, "slice: index %llu overflows",
                       (unsigned long long)index);
  } else {
    /* Exact bound: start - index * |step| >= 0 by construction. */
    *child_index = s->start - index * (uint64_t)(-s->step);
  }
  *child = s->child;
  return 0;
}

/* The run of our elements inside the child's partition [a, b) that holds
 * element `index`: with step > 0, the k with a <= start + k step < b;
 * with step < 0 (m = -step), the k with a <= start - k m < b. */
static int slice_partition(bc_seq *self, uint64_t index, uint64_t *start,
                           uint64_t *end) {
  slice_seq *s = (slice_seq *)self;
  bc_seq *child = NULL;
  uint64_t ci = 0, a, b, lo, hi;
  int rc = slice_resolve(self, index, &child, &ci);
  if (rc == 0) rc = bc__seq_partition(child, ci, &a, &b);
  if (rc != 0) return rc;
  if (s->step > 0) {
    uint64_t step = (uint64_t)s->step; /* b > ci >= s->start */
    lo = a <= s->start ? 0 : ceil_div(a - s->start, step);
    hi = ceil_div(b - s->start, step);
  } else {
    uint64_t m = (uint64_t)(-s->step); /* a <= ci <= s->start */
    lo = b > s->start ? 0 : (s->start - b) / m + 1;
    hi = (s->start - a) / m + 1;
  }
  *start = lo;
  *end = hi < s->bound ? hi : s->bound;
  return 0;
}

static void slice_destroy(bc_seq *self) {
  bc_seq_unref(((slice_seq *)self)->child);
  free(self);
}

static const bc_seq_ops slice_ops = {
    .version = BC_SEQ_OPS_VERSION,
    .type_name = "slice",
    .length = slice_length,
    .resolve = slice_resolve,
    .destroy = slice_destroy,
    .partition = slice_partition,
};

/* Python's slice.indices(len) + len(range(...)): the first child index, the
 * step and the element count for a sequence of exactly `len` elements. */
static void python_slice(int64_t len, int64_t start, int64_t stop, int64_t step,
                         uint64_t *first, uint64_t *count) {
  if (step > 0) {
    int64_t a = start == BC_NONE ? 0 : start < 0 ? start + len : start;
    int64_t b = stop == BC_NONE ? len : stop < 0 ? stop + len : stop;
    a = a < 0 ? 0 : a > len ? len : a;
    b = b < 0 ? 0 : b > len ? len : b;
    *first = (uint64_t)a;
    *count = b > a ? ceil_div((uint64_t)(b - a), (uint64_t)step) : 0;
  } else {
    int64_t a = start == BC_NONE ? len - 1 : start < 0 ? start + len : start;
    int64_t b = stop == BC_NONE ? -1 : stop < 0 ? stop + len : stop;
    a = a < 0 ? -1 : a >= len ? len - 1 : a;
    b = b < 0 ? -1 : b >= len ? len - 1 : b;
    *count = a > b ? ceil_div((uint64_t)(a - b), (uint64_t)(-step)) : 0;
    *first = *count ? (uint64_t)a : 0;
  }
}

int bc_seq_slice(bc_seq **out, bc_seq *seq, int64_t start, int64_t stop,
                 int64_t step) {
  if (out == NULL || seq == NULL)
    return bc__error(BC_EINVAL, "bc_seq_slice: NULL argument");
  if (step == BC_NONE) step = 1;
  if (step == 0) return bc__error(BC_EINVAL, "slice step cannot be zero");

  uint64_t first, bound;
  bc_len c;
  int rc = seq->ops->length(seq, false, &c);
  if (rc != 0) return rc;
  bool lazy_ok = step > 0 && (start == BC_NONE || start >= 0) &&
                 (stop == BC_NONE || stop >= 0);
  if (c.kind != BC_LEN_EXACT && !lazy_ok) {
    /* Negative bounds or steps need the end: settle it. */
    if ((rc = bc__seq_settle(seq, &c)) != 0) return rc;
    if (c.kind == BC_LEN_INFINITE)
      return bc__error(BC_EINVAL,
                       "slice [%lld:%lld:%lld] of a sequence with no end: "
                       "negative bounds or step need a length",
                       (long long)start, (long long)stop, (long long)step);
  }
  if (c.kind == BC_LEN_EXACT) {
    if (c.value > (uint64_t)INT64_MAX)
      return bc__error(BC_EINVAL, "slice: length %llu too large",
                       (unsigned long long)c.value);
    python_slice((int64_t)c.value, start, stop, step, &first, &bound);
  } else {
    first = start == BC_NONE ? 0 : (uint64_t)start;
    bound = stop == BC_NONE ? UNBOUNDED
            : (uint64_t)stop > first ? ceil_div((uint64_t)stop - first, (uint64_t)step)
                                     : 0;
  }

  /* Collapse slice-of-slice: compose the two progressions. */
  bc_seq *child = seq;
  int64_t new_step = step;
  if (seq->ops == &slice_ops) {
    slice_seq *inner = (slice_seq *)seq;
    uint64_t base, scaled;
    int64_t composed;
    bool overflow =
        __builtin_mul_overflow(inner->step, step, &composed) ||
        __builtin_mul_overflow(first, (uint64_t)(inner->step < 0 ? -inner->step : inner->step), &scaled);
    if (!overflow) {
      if (inner->step > 0)
        overflow = __builtin_add_overflow(inner->start, scaled, &base);
      else
        base = inner->start - scaled; /* exact inner bound: no underflow */
    }
    if (!overflow && composed != BC_NONE) {
      /* Elements of ours that stay inside the inner slice's bound. */
      if (inner->bound != UNBOUNDED && step > 0) {
        uint64_t room = inner->bound > first
                            ? ceil_div(inner->bound - first, (uint64_t)step)
                            : 0;
        if (room < bound) bound = room;
      }
      child = inner->child;
      first = base;
      new_step = composed;
    }
  }
  if (bound == 0) first = 0;

  slice_seq *s = bc__seq_alloc(sizeof *s, &slice_ops, 0);
  if (s == NULL) return BC_ENOMEM;
  s->child = bc_seq_ref(child);
  s->start = first;
  s->step = new_step;
  s->bound = bound;
  *out = &s->base;
  return 0;
}
