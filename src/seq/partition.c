/*
 * Partitions (seq.h, "partitions"): the natural partition of an index,
 * through the sequences' partition ops, and bc_seq_partitions, which cuts
 * a sequence into about a target number of ranges along them.
 */
#include "config.h"

#include <stdlib.h>

#include "seq/internal.h"

int bc__seq_partition(bc_seq *seq, uint64_t index, uint64_t *start,
                      uint64_t *end) {
  int rc = 0;
  if (seq->ops->version < 3 || seq->ops->partition == NULL) {
    *start = 0;
    *end = UINT64_MAX;
    goto cleanup;
  }
  rc = seq->ops->partition(seq, index, start, end);
  if (rc == 0 && !(*start <= index && index < *end))
    rc = bc__error(BC_EINVAL,
                   "%s: the partition of index %llu is [%llu, %llu), which "
                   "does not hold it", bc_seq_type_name(seq),
                   (unsigned long long)index, (unsigned long long)*start,
                   (unsigned long long)*end);
cleanup:
  return rc;
}

int bc_seq_partition(bc_seq *seq, int64_t index, uint64_t *start,
                     uint64_t *stop) {
  uint64_t pos, a, b;
  bc_len l;
  int rc;
  if (seq == NULL || start == NULL || stop == NULL) {
    rc = bc__error(BC_EINVAL, "bc_seq_partition: NULL argument");
    goto cleanup;
  }
  if ((rc = bc__seq_position(seq, index, &pos)) != 0) goto cleanup;
  if ((rc = bc__seq_partition(seq, pos, &a, &b)) != 0) goto cleanup;
  if ((rc = seq->ops->length(seq, false, &l)) != 0) goto cleanup;
  if (l.kind == BC_LEN_EXACT && b > l.value) b = l.value;
  *start = a;
  *stop = b;
cleanup:
  return rc;
}

void bc_partitions_free(bc_partitions *p) {
  if (p == NULL) return;
  free(p->bounds);
  p->bounds = NULL;
  p->count = 0;
}

/* A growing array of bounds. */
typedef struct {
  uint64_t *v;
  size_t n, cap;
} bounds_vec;

static int push(bounds_vec *b, uint64_t x) {
  if (b->n == b->cap) {
    size_t cap = b->cap ? 2 * b->cap : 16;
    uint64_t *v = cap > SIZE_MAX / sizeof *v ? NULL : realloc(b->v, cap * sizeof *v);
    if (v == NULL) return bc__error(BC_ENOMEM, "out of memory");
    b->v = v;
    b->cap = cap;
  }
  b->v[b->n++] = x;
  return 0;
}

/* The natural partitions of [0, n): one lookup per partition. */
static int natural(bc_seq *seq, uint64_t n, bounds_vec *out) {
  int rc = push(out, 0);
  for (uint64_t pos = 0; rc == 0 && pos < n;) {
    uint64_t a, b;
    if ((rc = bc__seq_partition(seq, pos, &a, &b)) != 0) break;
    pos = b < n ? b : n;
    rc = push(out, pos);
  }
  return rc;
}

/* floor(k * n / t) for k <= t (t > 0). */
static int cut_point(uint64_t k, uint64_t n, uint64_t t, uint64_t *out) {
#ifdef __SIZEOF_INT128__
  *out = (uint64_t)((unsigned __int128)k * n / t);
  return 0;
#else
  uint64_t q = n / t, r = n % t; /* k * n / t = k q + k r / t */
  if (t > UINT32_MAX)
    return bc__error(BC_EINVAL, "bc_seq_partitions: target count %llu too large",
                     (unsigned long long)t);
  *out = k * q + k * r / t;
  return 0;
#endif
}

static int cmp_u64(const void *x, const void *y) {
  uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
  return (a > b) - (a < b);
}

/* The cuts of the target_count rule (seq.h) over [0, n), n > 0. */
static int split(bc_seq *seq, uint64_t n, uint64_t t, bounds_vec *out) {
  if (t > n) t = n; /* the same ranges: every cut of a larger t is an index */
  /* Snap when 2 t d < n, i.e. d <= floor((n - 1) / (2 t)). */
  uint64_t limit = (n - 1) / t / 2;
  int rc = push(out, 0);
  for (uint64_t k = 1; rc == 0 && k < t; k++) {
    uint64_t c, a, b;
    if ((rc = cut_point(k, n, t, &c)) != 0) break;
    if ((rc = bc__seq_partition(seq, c, &a, &b)) != 0) break;
    if (b > n) b = n;
    uint64_t da = c - a, db = b - c;
    if (da <= limit && da <= db) c = a;
    else if (db <= limit) c = b;
    rc = push(out, c);
  }
  if (rc == 0) rc = push(out, n);
  if (rc != 0) return rc;
  /* Snapped cuts are monotone already; sorting keeps that a fact. */
  qsort(out->v, out->n, sizeof *out->v, cmp_u64);
  size_t m = 1;
  for (size_t i = 1; i < out->n; i++)
    if (out->v[i] != out->v[m - 1]) out->v[m++] = out->v[i];
  out->n = m;
  return 0;
}

int bc_seq_partitions(bc_seq *seq, size_t target_count, bc_partitions *out) {
  bounds_vec b = {0};
  uint64_t n = 0;
  int rc;
  if (out != NULL) *out = (bc_partitions){0, NULL};
  if (seq == NULL || out == NULL) {
    rc = bc__error(BC_EINVAL, "bc_seq_partitions: NULL argument");
    goto cleanup;
  }
  if ((rc = bc_seq_len(seq, &n)) != 0) goto cleanup;
  if (n == 0)
    rc = push(&b, 0);
  else if (target_count == 0)
    rc = natural(seq, n, &b);
  else
    rc = split(seq, n, (uint64_t)target_count, &b);
  if (rc != 0) goto cleanup;
  out->count = b.n - 1;
  out->bounds = b.v;
  b.v = NULL;
cleanup:
  free(b.v);
  return rc;
}
