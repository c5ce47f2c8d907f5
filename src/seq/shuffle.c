/*
 * chunk_shuffle and shuffle: element k of run c (the run of chunk_size
 * consecutive indices holding k) is child[c * chunk + perm_c(k - c * chunk)],
 * where perm_c is the keyed bijection of the run's size chosen by
 * (seed, c).  A global shuffle is one run over the whole length.
 */
#include "config.h"

#include <stdlib.h>

#include "seq/internal.h"

typedef struct {
  bc_seq base;
  bc_seq *child;
  uint64_t chunk;  /* run length (>= 1) */
  uint64_t length; /* elements */
  uint64_t seed;
} shuffle_seq;

static int shuffle_length(bc_seq *self, bool exact, bc_len *out) {
  BC__UNUSED(exact);
  *out = (bc_len){BC_LEN_EXACT, ((shuffle_seq *)self)->length};
  return 0;
}

static int shuffle_resolve(bc_seq *self, uint64_t index, bc_seq **child,
                           uint64_t *child_index) {
  shuffle_seq *s = (shuffle_seq *)self;
  if (index >= s->length) return bc__seq_range_error(self, index, s->length);
  uint64_t run = index / s->chunk, base = run * s->chunk;
  uint64_t size = s->length - base < s->chunk ? s->length - base : s->chunk;
  bc__perm p;
  bc__perm_init(&p, size, bc__mix64(s->seed) ^ bc__mix64(run + 1));
  *child = s->child;
  *child_index = base + bc__perm_apply(&p, index - base);
  return 0;
}

/* x rounded up to a run boundary (a multiple of chunk), at most length. */
static uint64_t run_up(const shuffle_seq *s, uint64_t x) {
  if (x >= s->length) return s->length;
  uint64_t r = x % s->chunk;
  return r == 0 ? x : x + (s->chunk - r); /* < length + chunk: no overflow */
}

/* The child's boundaries moved up to run boundaries: for index in run c
 * (base = c chunk), the partition is [up(a), up(b)) for the child's
 * partition [a, b) holding base, since up(x) <= index exactly when
 * x <= base, and up(x) > index exactly when x > base. */
static int shuffle_partition(bc_seq *self, uint64_t index, uint64_t *start,
                             uint64_t *end) {
  shuffle_seq *s = (shuffle_seq *)self;
  uint64_t a, b;
  if (index >= s->length) return bc__seq_range_error(self, index, s->length);
  uint64_t base = index / s->chunk * s->chunk;
  int rc = bc__seq_partition(s->child, base, &a, &b);
  if (rc != 0) return rc;
  *start = run_up(s, a);
  *end = run_up(s, b);
  return 0;
}

static void shuffle_destroy(bc_seq *self) {
  bc_seq_unref(((shuffle_seq *)self)->child);
  free(self);
}

static const bc_seq_ops shuffle_ops = {
    .version = BC_SEQ_OPS_VERSION,
    .type_name = "chunk_shuffle",
    .length = shuffle_length,
    .resolve = shuffle_resolve,
    .destroy = shuffle_destroy,
    .partition = shuffle_partition,
};

int bc_seq_chunk_shuffle(bc_seq **out, bc_seq *seq, uint64_t chunk_size,
                         uint64_t length, uint64_t seed) {
  if (out == NULL || seq == NULL)
    return bc__error(BC_EINVAL, "bc_seq_chunk_shuffle: NULL argument");
  bc_len c;
  int rc = seq->ops->length(seq, false, &c);
  if (rc != 0) return rc;
  bool need_len = length == BC_LEN_ALL ||
                  (c.kind == BC_LEN_AT_LEAST && length > c.value);
  if (need_len && (rc = bc__seq_settle(seq, &c)) != 0) return rc;
  if (length == BC_LEN_ALL) {
    if (c.kind == BC_LEN_INFINITE)
      return bc__error(BC_EINVAL,
                       "chunk_shuffle of a sequence with no end needs a length");
    length = c.value;
  } else if (c.kind == BC_LEN_EXACT && length > c.value) {
    return bc__error(BC_EINVAL,
                     "chunk_shuffle: length %llu exceeds the sequence (%llu)",
                     (unsigned long long)length, (unsigned long long)c.value);
  }
  shuffle_seq *s = bc__seq_alloc(sizeof *s, &shuffle_ops, 0);
  if (s == NULL) return BC_ENOMEM;
  s->child = bc_seq_ref(seq);
  s->length = length;
  s->chunk = chunk_size == 0 || chunk_size > length ? (length ? length : 1)
                                                    : chunk_size;
  s->seed = seed;
  *out = &s->base;
  return 0;
}

int bc_seq_shuffle(bc_seq **out, bc_seq *seq, uint64_t seed) {
  return bc_seq_chunk_shuffle(out, seq, 0, BC_LEN_ALL, seed);
}
