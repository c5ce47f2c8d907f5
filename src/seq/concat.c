/*
 * concat(parts): the parts one after another.
 *
 * ends[j] is the index just past part j, known for the settled prefix
 * j < settled.  A lookup inside the prefix is a binary search (O(log
 * parts)); a lookup past it extends the prefix, asking each part for its
 * length only as far as needed: a part known to hold at least the wanted
 * offset is used without settling its length, and the last part is never
 * settled (the leaf says where it ends).
 *
 * Lengths are computed without the lock (they may call into the user's
 * code, and they never change once exact); the lock only orders the
 * publication of ends[], and `settled` is stored with release order after
 * ends[settled - 1] is written, so lock-free readers that load it with
 * acquire order see every end below it.
 */
#include "config.h"

#include <stdlib.h>

#include "seq/internal.h"

typedef struct {
  bc_seq base;
  size_t count;
  bc_seq **parts;
  uint64_t *ends;
  atomic_size_t settled;
  pthread_mutex_t lock; /* serialises writers of ends[] and settled */
} concat_seq;

static uint64_t add_sat(uint64_t a, uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static int concat_length(bc_seq *self, bool exact, bc_len *out) {
  concat_seq *s = (concat_seq *)self;
  bc_len total = {BC_LEN_EXACT, 0};
  for (size_t j = 0; j < s->count; j++) {
    bc_len c;
    int rc = s->parts[j]->ops->length(s->parts[j], exact, &c);
    if (rc != 0) return rc;
    if (c.kind == BC_LEN_INFINITE) {
      *out = (bc_len){BC_LEN_INFINITE, 0};
      return 0;
    }
    if (c.kind == BC_LEN_AT_LEAST) total.kind = BC_LEN_AT_LEAST;
    total.value = add_sat(total.value, c.value);
  }
  *out = total;
  return 0;
}

/* Records that part j ends at `end` (if nobody did already). */
static void publish_end(concat_seq *s, size_t j, uint64_t end) {
  pthread_mutex_lock(&s->lock);
  if (atomic_load_explicit(&s->settled, memory_order_relaxed) == j) {
    s->ends[j] = end;
    atomic_store_explicit(&s->settled, j + 1, memory_order_release);
  }
  pthread_mutex_unlock(&s->lock);
}

/* The part holding `index` (its number in *part) and the index in it. */
static int locate(bc_seq *self, uint64_t index, size_t *which,
                  uint64_t *child_index) {
  concat_seq *s = (concat_seq *)self;
  size_t ns = atomic_load_explicit(&s->settled, memory_order_acquire);
  if (ns > 0 && index < s->ends[ns - 1]) {
    size_t lo = 0, hi = ns - 1;
    while (lo < hi) { /* first part whose end exceeds index */
      size_t mid = lo + (hi - lo) / 2;
      if (s->ends[mid] > index) hi = mid; else lo = mid + 1;
    }
    *which = lo;
    *child_index = index - (lo ? s->ends[lo - 1] : 0);
    return 0;
  }
  uint64_t prev = ns ? s->ends[ns - 1] : 0;
  for (size_t j = ns; j < s->count; j++) {
    bc_seq *part = s->parts[j];
    uint64_t offset = index - prev;
    bc_len c;
    int rc = part->ops->length(part, false, &c);
    if (rc != 0) return rc;
    if (c.kind == BC_LEN_AT_LEAST) {
      if (offset < c.value || j + 1 == s->count) goto found;
      if ((rc = bc__seq_settle(part, &c)) != 0) return rc;
    }
    if (c.kind == BC_LEN_INFINITE) goto found;
    publish_end(s, j, prev + c.value);
    if (offset < c.value) goto found;
    prev += c.value;
    continue;
  found:
    *which = j;
    *child_index = offset;
    return 0;
  }
  return bc__seq_range_error(self, index, prev);
}

static int concat_resolve(bc_seq *self, uint64_t index, bc_seq **child,
                          uint64_t *child_index) {
  size_t j;
  int rc = locate(self, index, &j, child_index);
  if (rc == 0) *child = ((concat_seq *)self)->parts[j];
  return rc;
}

/* The part's partition, shifted to the part's offset and cut at the
 * part's end: a part boundary is always a partition boundary, so the end
 * of every part but the last is settled (the last one's end is where the
 * concat ends). */
static int concat_partition(bc_seq *self, uint64_t index, uint64_t *start,
                            uint64_t *end) {
  concat_seq *s = (concat_seq *)self;
  size_t j;
  uint64_t ci, a, b;
  bc_len c;
  int rc = locate(self, index, &j, &ci);
  if (rc == 0) rc = bc__seq_partition(s->parts[j], ci, &a, &b);
  if (rc == 0 && j + 1 < s->count) rc = bc__seq_settle(s->parts[j], &c);
  if (rc != 0) return rc;
  if (j + 1 < s->count && c.kind == BC_LEN_EXACT && b > c.value) b = c.value;
  uint64_t offset = index - ci;
  *start = offset + a;
  *end = b - ci > UINT64_MAX - index ? UINT64_MAX : index + (b - ci);
  return 0;
}

static void concat_destroy(bc_seq *self) {
  concat_seq *s = (concat_seq *)self;
  for (size_t j = 0; j < s->count; j++) bc_seq_unref(s->parts[j]);
  free(s->parts);
  free(s->ends);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

static const bc_seq_ops concat_ops = {
    .version = BC_SEQ_OPS_VERSION,
    .type_name = "concat",
    .length = concat_length,
    .resolve = concat_resolve,
    .destroy = concat_destroy,
    .partition = concat_partition,
};

int bc_seq_concat(bc_seq **out, bc_seq *const *parts, size_t count) {
  if (out == NULL || (parts == NULL && count > 0))
    return bc__error(BC_EINVAL, "bc_seq_concat: NULL argument");
  for (size_t j = 0; j < count; j++)
    if (parts[j] == NULL)
      return bc__error(BC_EINVAL, "bc_seq_concat: part %zu is NULL", j);
  concat_seq *s = bc__seq_alloc(sizeof *s, &concat_ops, 0);
  if (s == NULL) return BC_ENOMEM;
  s->parts = malloc((count ? count : 1) * sizeof *s->parts);
  s->ends = malloc((count ? count : 1) * sizeof *s->ends);
  if (s->parts == NULL || s->ends == NULL) {
    free(s->parts);
    free(s->ends);
    free(s);
    return bc__error(BC_ENOMEM, "out of memory");
  }
  for (size_t j = 0; j < count; j++) s->parts[j] = bc_seq_ref(parts[j]);
  s->count = count;
  atomic_init(&s->settled, 0);
  pthread_mutex_init(&s->lock, NULL);
  *out = &s->base;
  return 0;
}
