/*
 * bc_seq_read_into: elements straight into the rows of caller memory.
 *
 * 1. A leaf asked directly: its positions are its indices.  Through views,
 *    every index is resolved and the positions grouped by leaf
 *    (bc__seq_group, as a batch read does); nothing is read before every
 *    index resolved.
 * 2. Each leaf's group goes into its rows: the leaf's read_into (a bag
 *    copies or decodes each record into its row, on the worker pool), else
 *    `get` into a buffer, a size check and a copy (on the pool when the
 *    leaf is thread-safe).
 * 3. On failure the elements are read again one by one in request order up
 *    to the first that fails, so the error reported is that of the first
 *    failing position, naming indices[K], however the leaves were grouped.
 *    (Only the error path pays for it.)
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "seq/internal.h"

/* ---- leaves without read_into ------------------------------------------- */

typedef struct {
  bc_seq *leaf;
  const uint64_t *indices;
  const size_t *rows;
  size_t count, chunk, size;
  unsigned char *dst;
} copy_job;

static int copy_task(void *arg, size_t task) {
  copy_job *j = arg;
  size_t lo = task * j->chunk;
  size_t hi = lo + j->chunk < j->count ? lo + j->chunk : j->count;
  bc_buf buf = BC_BUF_INIT;
  int rc = 0;
  for (size_t p = lo; p < hi && rc == 0; p++) {
    rc = j->leaf->ops->get(j->leaf, j->indices[p], &buf);
    if (rc == 0 && buf.size != j->size) /* step 3 words the message */
      rc = bc__error(BC_EINVAL, "a record has %zu bytes, not the row size %zu",
                     buf.size, j->size);
    else if (rc == 0 && j->size > 0)
      memcpy(j->dst + (j->rows != NULL ? j->rows[p] : p) * j->size, buf.data,
             j->size);
  }
  bc_buf_release(&buf);
  return rc;
}

/* Reads a leaf's group into its rows (step 2). */
static int leaf_read_into(bc_seq *leaf, const uint64_t *indices,
                          const size_t *rows, size_t count, void *dst,
                          size_t size, int max_parallelism) {
  bc__read_into_fn op = bc__seq_read_into_op(leaf);
  if (op != NULL)
    return op(leaf, indices, rows, count, dst, size, max_parallelism);
  copy_job j = {leaf, indices, rows, count, 64, size, dst};
  int par = (leaf->flags & BC_SEQ_F_THREAD_SAFE) ? max_parallelism : 1;
  return bc__parallel_for((count + j.chunk - 1) / j.chunk, par, copy_task, &j);
}

/* ---- the error of the first failing position (step 3) ------------------- */

static int first_failure(bc_seq *seq, const int64_t *indices, size_t count,
                         size_t size, int batch_rc) {
  /* The batch's error, its payload included (a source's exception), for
   * when every element alone reads fine. */
  bc_error_state batch = BC_ERROR_STATE_INIT;
  bc_error_save(&batch, batch_rc);
  bc_buf buf = BC_BUF_INIT;
  int rc = 0;
  bool wrong_size = false;
  size_t p = 0;
  for (; p < count && rc == 0 && !wrong_size; p++) {
    rc = bc_seq_get(seq, indices[p], &buf);
    wrong_size = rc == 0 && buf.size != size;
  }
  p--; /* the position that failed, when one did */
  if (rc == 0 && !wrong_size) { /* each alone reads fine: the batch's error */
    rc = bc_error_restore(&batch);
  } else if (wrong_size) {
    rc = bc__error(BC_EINVAL,
                   "record %lld (indices[%zu]) has %zu bytes, not the row "
                   "size %zu",
                   (long long)indices[p], p, buf.size, size);
  } else {
    rc = bc__error_wrap(rc, "indices[%zu] = %lld: %s", p,
                        (long long)indices[p], bc_errmsg());
  }
  bc_error_state_clear(&batch);
  bc_buf_release(&buf);
  return rc;
}

/* ---- the public call ------------------------------------------------------ */

/* Step 1 for a leaf: positions, then one group. */
static int read_leaf(bc_seq *leaf, const int64_t *indices, size_t count,
                     void *dst, size_t size, int max_parallelism) {
  uint64_t *pos = malloc(count * sizeof *pos);
  if (pos == NULL)
    return bc__error(BC_ENOMEM, "out of memory for a batch of %zu", count);
  /* Indices inside a known length are their positions; the others (a
   * negative one, a leaf whose end is not known yet) ask the leaf. */
  bc_len len;
  int rc = leaf->ops->length(leaf, false, &len);
  uint64_t known = rc == 0 && len.kind == BC_LEN_EXACT ? len.value : 0;
  for (size_t p = 0; p < count && rc == 0; p++) {
    if (indices[p] >= 0 && (uint64_t)indices[p] < known)
      pos[p] = (uint64_t)indices[p];
    else
      rc = bc__seq_position(leaf, indices[p], &pos[p]);
  }
  if (rc == 0)
    rc = leaf_read_into(leaf, pos, NULL, count, dst, size, max_parallelism);
  free(pos);
  return rc;
}

/* Step 1 through views: resolve, group, then one read per leaf. */
static int read_groups(bc_seq *seq, const int64_t *indices, size_t count,
                       void *dst, size_t size, int max_parallelism) {
  bc__seq_groups g = {0};
  uint64_t *group_indices = NULL;
  size_t *rows = NULL;
  int rc = bc__seq_group(seq, indices, count, &g);
  if (rc != 0) goto cleanup;
  group_indices = malloc(count * sizeof *group_indices);
  rows = malloc(count * sizeof *rows);
  if (group_indices == NULL || rows == NULL) {
    rc = bc__error(BC_ENOMEM, "out of memory for a batch of %zu", count);
    goto cleanup;
  }
  for (size_t id = 0; id < g.nleaves && rc == 0; id++) {
    size_t lo = g.start[id], n = g.start[id + 1] - lo;
    for (size_t k = lo; k < lo + n; k++) {
      group_indices[k] = g.leaf_index[g.order[k]];
      rows[k] = g.order[k];
    }
    rc = leaf_read_into(g.leaves[id], group_indices + lo, rows + lo, n, dst,
                        size, max_parallelism);
  }
cleanup:
  bc__seq_groups_free(&g);
  free(group_indices);
  free(rows);
  return rc;
}

int bc_seq_read_into(bc_seq *seq, const int64_t *indices, size_t count,
                     void *dst, size_t size, int max_parallelism) {
  if (seq == NULL || (indices == NULL && count > 0))
    return bc__error(BC_EINVAL, "bc_seq_read_into: NULL argument");
  if (max_parallelism < 0)
    return bc__error(BC_EINVAL, "bc_seq_read_into: max_parallelism %d < 0",
                     max_parallelism);
  if (size > 0 && count > SIZE_MAX / size)
    return bc__error(BC_EINVAL, "bc_seq_read_into: %zu rows of %zu bytes "
                     "overflow", count, size);
  if (dst == NULL && count * size > 0)
    return bc__error(BC_EINVAL, "bc_seq_read_into: NULL dst");
  if (count == 0) return 0;
  int rc = seq->ops->resolve == NULL
               ? read_leaf(seq, indices, count, dst, size, max_parallelism)
               : read_groups(seq, indices, count, dst, size, max_parallelism);
  if (rc != 0 && !bc__seq_final_error(rc)) rc = first_failure(seq, indices, count, size, rc);
  return rc;
}
