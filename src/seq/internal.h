/*
 * src/seq/internal.h - the sequence layer's private helpers.
 */
#ifndef BC_SEQ_INTERNAL_H
#define BC_SEQ_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "common/internal.h"

/* Follows resolve() from `seq` down to a leaf.  `index` must be >= 0. */
int bc__seq_resolve_leaf(bc_seq *seq, uint64_t index, bc_seq **leaf,
                         uint64_t *leaf_index);

/* Reads element `index` (>= 0) of seq: resolves, then the leaf's get. */
int bc__seq_read(bc_seq *seq, uint64_t index, bc_buf *out);

/* Turns a signed index into a position, counting negatives from the end
 * (settling the length) and rejecting positions past a known end. */
int bc__seq_position(bc_seq *seq, int64_t index, uint64_t *position);

/* The error for an index past the end of `seq`. */
int bc__seq_range_error(const bc_seq *seq, uint64_t index, uint64_t len);

/* The exact length of a child, settled; INFINITE reported as such. */
static inline int bc__seq_settle(bc_seq *seq, bc_len *len) {
  return seq->ops->length(seq, true, len);
}

/* The positions of a batch resolved down to their leaves and grouped by
 * leaf (batch.c): leaf g's positions are order[start[g] .. start[g + 1]),
 * ascending within the group; position p reads leaf_index[p] of
 * leaves[leaf_id[p]].  Leaves are borrowed from the sequence. */
typedef struct bc__seq_groups {
  size_t count;   /* positions */
  size_t nleaves; /* leaves (groups) */
  bc_seq **leaves;
  size_t *start;  /* nleaves + 1 entries */
  size_t *order;
  uint64_t *leaf_index;
  size_t *leaf_id;
} bc__seq_groups;

/* Resolves and groups indices[0..count) of seq (signed, as bc_seq_get).
 * Fails, naming "indices[P] = I", at the first index that does not
 * resolve; *out is set only on success.  Release with
 * bc__seq_groups_free. */
int bc__seq_group(bc_seq *seq, const int64_t *indices, size_t count,
                  bc__seq_groups *out);
void bc__seq_groups_free(bc__seq_groups *g);

/* Reads one record of `obj` (a leaf's get, bc_cache_try_get...). */
typedef int (*bc__get_fn)(void *obj, int64_t index, bc_buf *out);

/* The task loop of every batch that reads records one by one on the
 * worker pool: outs[p] = get(obj, indices[p]) for p < count (buffers
 * reused), in tasks of BC__GET_TASK records, on at most max_parallelism
 * threads (bc__parallel_for).  The error is the first failing position's;
 * `name` prefixes its message with "indices[P] = I: ". */
#define BC__GET_TASK 32

/* Errors of a batch after which nothing is read again to find its first
 * failing position: an interrupt, or a failure of a cache's source (its
 * exception as the payload).  A re-read would run the source again, for
 * as long as the interrupt had just ended (issue 25). */
static inline bool bc__seq_final_error(int rc) {
  return rc == BC_ECANCELED || rc == BC_ESOURCE;
}
int bc__get_each(void *obj, bc__get_fn get, const int64_t *indices, size_t count,
                 bc_buf *outs, int max_parallelism, bool name);

/* A leaf's read_into operation, or NULL (absent, or a version-1 table that
 * ends before it). */
typedef int (*bc__read_into_fn)(bc_seq *self, const uint64_t *indices,
                                const size_t *rows, size_t count, void *dst,
                                size_t size, int max_parallelism);
static inline bc__read_into_fn bc__seq_read_into_op(const bc_seq *leaf) {
  return leaf->ops->version >= 2 ? leaf->ops->read_into : NULL;
}

/* Allocates an implementation struct of `size` bytes (zeroed) with its
 * header initialised (one reference). */
void *bc__seq_alloc(size_t size, const bc_seq_ops *ops, unsigned flags);

/* ---- partitions (partition.c) ------------------------------------------- */

/* The partition holding `index` (>= 0) by seq's own op: [*start, *end)
 * with *start <= index < *end, not cut to the length (*end may be
 * UINT64_MAX).  A sequence without the op (or with a table older than
 * version 3) is one partition: [0, UINT64_MAX).  BC_EINVAL when the op
 * answers a range that does not hold the index. */
int bc__seq_partition(bc_seq *seq, uint64_t index, uint64_t *start,
                      uint64_t *end);

/* ---- keyed bijections (perm.c) ------------------------------------------ */

/* A permutation of [0, n) chosen by a 64-bit key: a balanced Feistel
 * network over the smallest even-bit power of two >= n, restricted to
 * [0, n) by cycle walking (expected < 4 steps since the domain is < 4n). */
typedef struct bc__perm {
  uint64_t n;
  unsigned half_bits;
  uint64_t half_mask;
  uint64_t keys[4];
} bc__perm;

void bc__perm_init(bc__perm *p, uint64_t n, uint64_t key);
uint64_t bc__perm_apply(const bc__perm *p, uint64_t x);

/* splitmix64's finaliser: a bijective 64-bit mixer. */
static inline uint64_t bc__mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

#endif /* BC_SEQ_INTERNAL_H */
