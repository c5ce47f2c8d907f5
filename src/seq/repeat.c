/*
 * repeat(seq, times): element k is child[k % L], for k < L * times (or
 * without end for BC_REPEAT_FOREVER), where L is the child's exact length,
 * settled on first use and kept (exact lengths never change).
 */
#include "config.h"

#include <stdlib.h>

#include "seq/internal.h"

typedef struct {
  bc_seq base;
  bc_seq *child;
  uint64_t times;
  /* The child's length + 1 once settled, 0 before (written once; a racing
   * second writer stores the same value). */
  _Atomic uint64_t settled;
} repeat_seq;

static int child_len(repeat_seq *s, uint64_t *len) {
  uint64_t v = atomic_load_explicit(&s->settled, memory_order_acquire);
  if (v == 0) {
    bc_len c;
    int rc = bc__seq_settle(s->child, &c);
    if (rc != 0) return rc;
    if (c.kind == BC_LEN_INFINITE)
      return bc__error(BC_EINFINITE,
                       "repeat: the repeated sequence has no end");
    v = c.value + 1;
    atomic_store_explicit(&s->settled, v, memory_order_release);
  }
  *len = v - 1;
  return 0;
}

static bc_len repeated(uint64_t len, uint64_t times) {
  uint64_t n;
  if (len == 0 || times == 0) return (bc_len){BC_LEN_EXACT, 0};
  if (times == BC_REPEAT_FOREVER || __builtin_mul_overflow(len, times, &n))
    return (bc_len){BC_LEN_INFINITE, 0};
  return (bc_len){BC_LEN_EXACT, n};
}

static int repeat_length(bc_seq *self, bool exact, bc_len *out) {
  repeat_seq *s = (repeat_seq *)self;
  uint64_t len;
  if (exact || atomic_load(&s->settled) != 0) {
    int rc = child_len(s, &len);
    if (rc != 0) return rc;
    *out = repeated(len, s->times);
    return 0;
  }
  bc_len c;
  int rc = s->child->ops->length(s->child, false, &c);
  if (rc != 0) return rc;
  if (c.kind == BC_LEN_EXACT) {
    *out = repeated(c.value, s->times);
  } else if (c.kind == BC_LEN_INFINITE ||
             (c.value > 0 && s->times == BC_REPEAT_FOREVER)) {
    /* An endless child, or a non-empty one repeated forever. */
    *out = s->times == 0 ? (bc_len){BC_LEN_EXACT, 0}
                         : (bc_len){BC_LEN_INFINITE, 0};
  } else {
    bc_len lower = repeated(c.value, s->times);
    *out = (bc_len){BC_LEN_AT_LEAST,
                    lower.kind == BC_LEN_INFINITE ? UINT64_MAX : lower.value};
  }
  return 0;
}

static int repeat_resolve(bc_seq *self, uint64_t index, bc_seq **child,
                          uint64_t *child_index) {
  repeat_seq *s = (repeat_seq *)self;
  uint64_t len;
  int rc = child_len(s, &len);
  if (rc != 0) return rc;
  bc_len total = repeated(len, s->times);
  if (total.kind == BC_LEN_EXACT && index >= total.value)
    return bc__seq_range_error(self, index, total.value);
  *child = s->child;
  *child_index = index % len;
  return 0;
}

/* The child's partition of index % L, in repetition index / L. */
static int repeat_partition(bc_seq *self, uint64_t index, uint64_t *start,
                            uint64_t *end) {
  repeat_seq *s = (repeat_seq *)self;
  bc_seq *child;
  uint64_t ci, a, b;
  int rc = repeat_resolve(self, index, &child, &ci);
  if (rc == 0) rc = bc__seq_partition(child, ci, &a, &b);
  if (rc != 0) return rc;
  uint64_t len = atomic_load_explicit(&s->settled, memory_order_acquire) - 1;
  uint64_t base = index - ci; /* (index / len) * len */
  if (b > len) b = len;
  *start = base + a;
  *end = b - ci > UINT64_MAX - index ? UINT64_MAX : index + (b - ci);
  return 0;
}

static void repeat_destroy(bc_seq *self) {
  bc_seq_unref(((repeat_seq *)self)->child);
  free(self);
}

static const bc_seq_ops repeat_ops = {
    .version = BC_SEQ_OPS_VERSION,
    .type_name = "repeat",
    .length = repeat_length,
    .resolve = repeat_resolve,
    .destroy = repeat_destroy,
    .partition = repeat_partition,
};

int bc_seq_repeat(bc_seq **out, bc_seq *seq, uint64_t times) {
  if (out == NULL || seq == NULL)
    return bc__error(BC_EINVAL, "bc_seq_repeat: NULL argument");
  repeat_seq *s = bc__seq_alloc(sizeof *s, &repeat_ops, 0);
  if (s == NULL) return BC_ENOMEM;
  s->child = bc_seq_ref(seq);
  s->times = times;
  atomic_init(&s->settled, 0);
  *out = &s->base;
  return 0;
}
