/*
 * Batch reads through any stack of views.
 *
 * 1. Every requested index is turned into a position and resolved down to
 *    (leaf, leaf index).  Nothing is read yet, so a bad index fails before
 *    any I/O.
 * 2. Positions are grouped by leaf (a counting sort on small leaf numbers).
 * 3. Each leaf's group is read as one batch: the leaf's own get_many (a bag
 *    spreads it over the worker pool), else its get on the pool (or inline
 *    when the leaf is not thread-safe).  Buffers are moved, not copied,
 *    between the caller's array and the batch, so results land in request
 *    order and the caller's buffer capacity is reused.
 * On failure the error reported is that of the first failing position in
 * request order: failing groups are re-read one by one to find it.  Not
 * after an interrupt or a failure of a cache's source (bc__seq_final_error): a
 * re-read would run the source again (an hour's sleep that the interrupt
 * had just ended), so the batch's own error is returned at once.
 * A leaf asked directly skips steps 1 and 2 (until something fails).
 * Steps 1 and 2 (bc__seq_group) serve bc_seq_read_into too.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "seq/internal.h"

typedef struct {
  void *obj;
  bc__get_fn get;
  const int64_t *indices;
  bc_buf *outs;
  size_t count;
  bool name;
} get_job;

static int get_task(void *arg, size_t task) {
  get_job *j = arg;
  size_t lo = task * BC__GET_TASK;
  size_t hi = lo + BC__GET_TASK < j->count ? lo + BC__GET_TASK : j->count;
  for (size_t p = lo; p < hi; p++) {
    int rc = j->get(j->obj, j->indices[p], &j->outs[p]);
    if (rc != 0 && j->name)
      return bc__error_wrap(rc, "indices[%zu] = %lld: %s", p, (long long)j->indices[p],
                            bc_errmsg());
    if (rc != 0) return rc;
  }
  return 0;
}

int bc__get_each(void *obj, bc__get_fn get, const int64_t *indices, size_t count,
                 bc_buf *outs, int max_parallelism, bool name) {
  get_job j = {obj, get, indices, outs, count, name};
  return bc__parallel_for((count + BC__GET_TASK - 1) / BC__GET_TASK, max_parallelism,
                          get_task, &j);
}

static int leaf_get(void *leaf, int64_t index, bc_buf *out) {
  return ((bc_seq *)leaf)->ops->get(leaf, (uint64_t)index, out);
}

/* Reads a leaf's group: its get_many, or get on the pool.  (Positions are
 * below 2^63: the cast to int64_t and back in leaf_get keeps them.) */
static int leaf_get_many(bc_seq *leaf, const uint64_t *indices, size_t count,
                         bc_buf *outs, bool name) {
  if (leaf->ops->get_many != NULL)
    return leaf->ops->get_many(leaf, indices, count, outs);
  int par = (leaf->flags & BC_SEQ_F_THREAD_SAFE) ? 0 : 1;
  return bc__get_each(leaf, leaf_get, (const int64_t *)indices, count, outs, par, name);
}

/* Leaf pointer -> small number, by open addressing (few leaves usually). */
typedef struct {
  bc_seq **keys;
  size_t *ids;
  size_t mask, count;
  bc_seq **leaves; /* id -> leaf */
} leaf_table;

static int table_init(leaf_table *t, size_t expected) {
  size_t cap = 16;
  while (cap < 2 * expected && cap < ((size_t)1 << 40)) cap *= 2;
  t->keys = calloc(cap, sizeof *t->keys);
  t->ids = malloc(cap * sizeof *t->ids);
  t->leaves = malloc(cap * sizeof *t->leaves);
  t->mask = cap - 1;
  t->count = 0;
  if (t->keys == NULL || t->ids == NULL || t->leaves == NULL)
    return bc__error(BC_ENOMEM, "out of memory");
  return 0;
}

static size_t table_id(leaf_table *t, bc_seq *leaf) {
  size_t h = (size_t)bc__mix64((uint64_t)(uintptr_t)leaf) & t->mask;
  while (t->keys[h] != NULL && t->keys[h] != leaf) h = (h + 1) & t->mask;
  if (t->keys[h] == NULL) {
    t->keys[h] = leaf;
    t->ids[h] = t->count;
    t->leaves[t->count++] = leaf;
  }
  return t->ids[h];
}

static void table_free(leaf_table *t) {
  free(t->keys);
  free(t->ids);
  free(t->leaves);
}

/* A leaf read directly: its positions are its indices, one group in
 * request order.  Returns 1 (nothing reported) when anything fails: the
 * general path then finds and reports the first failing position; but a
 * final error is returned as it is, naming the position where it
 * happened (the pool keeps the lowest failing task's). */
static int leaf_direct(bc_seq *leaf, const int64_t *indices, size_t count,
                       bc_buf *outs) {
  uint64_t *pos = malloc((count ? count : 1) * sizeof *pos);
  if (pos == NULL) return 1;
  int rc = 0;
  for (size_t p = 0; p < count && rc == 0; p++)
    rc = bc__seq_position(leaf, indices[p], &pos[p]);
  if (rc == 0) rc = leaf_get_many(leaf, pos, count, outs, true);
  free(pos);
  return rc == 0 ? 0 : bc__seq_final_error(rc) ? rc : 1;
}

void bc__seq_groups_free(bc__seq_groups *g) {
  free(g->leaves);
  free(g->start);
  free(g->order);
  free(g->leaf_index);
  free(g->leaf_id);
  memset(g, 0, sizeof *g);
}

int bc__seq_group(bc_seq *seq, const int64_t *indices, size_t count,
                  bc__seq_groups *out) {
  bc__seq_groups g = {.count = count};
  g.leaf_index = malloc((count ? count : 1) * sizeof *g.leaf_index);
  g.leaf_id = malloc((count ? count : 1) * sizeof *g.leaf_id);
  g.order = malloc((count ? count : 1) * sizeof *g.order);
  leaf_table table = {0};
  int rc = 0;
  if (!g.leaf_index || !g.leaf_id || !g.order) {
    rc = bc__error(BC_ENOMEM, "out of memory for a batch of %zu", count);
    goto cleanup;
  }
  /* Leaves are few unless the user concatenated many sequences; the table
   * grows to the count only in that case. */
  if ((rc = table_init(&table, count < 1024 ? count : 1024)) != 0) goto cleanup;

  /* 1. resolve */
  for (size_t p = 0; p < count; p++) {
    uint64_t pos;
    bc_seq *leaf;
    rc = bc__seq_position(seq, indices[p], &pos);
    if (rc == 0) rc = bc__seq_resolve_leaf(seq, pos, &leaf, &g.leaf_index[p]);
    if (rc != 0) {
      rc = bc__error_wrap(rc, "indices[%zu] = %lld: %s", p,
                          (long long)indices[p], bc_errmsg());
      goto cleanup;
    }
    if (table.count * 2 > table.mask) { /* keep the load factor below 1/2 */
      leaf_table bigger;
      if ((rc = table_init(&bigger, table.count * 2)) != 0) {
        table_free(&bigger);
        goto cleanup;
      }
      for (size_t id = 0; id < table.count; id++) table_id(&bigger, table.leaves[id]);
      table_free(&table);
      table = bigger;
    }
    g.leaf_id[p] = table_id(&table, leaf);
  }

  /* 2. group: counting sort of positions by leaf id (stable). */
  g.nleaves = table.count;
  g.start = calloc(table.count + 1, sizeof *g.start);
  size_t *fill = malloc((table.count ? table.count : 1) * sizeof *fill);
  if (g.start == NULL || fill == NULL) {
    free(fill);
    rc = bc__error(BC_ENOMEM, "out of memory");
    goto cleanup;
  }
  for (size_t p = 0; p < count; p++) g.start[g.leaf_id[p] + 1]++;
  for (size_t id = 0; id < table.count; id++) g.start[id + 1] += g.start[id];
  memcpy(fill, g.start, table.count * sizeof *fill);
  for (size_t p = 0; p < count; p++) g.order[fill[g.leaf_id[p]]++] = p;
  free(fill);
  g.leaves = table.leaves; /* the id -> leaf array moves into g */
  table.leaves = NULL;
  *out = g;
  g = (bc__seq_groups){0};
cleanup:
  table_free(&table);
  bc__seq_groups_free(&g);
  return rc;
}

int bc_seq_get_many(bc_seq *seq, const int64_t *indices, size_t count,
                    bc_buf *outs) {
  /* A leaf needs no resolving nor grouping (a Reader's own batches). */
  if (seq->ops->resolve == NULL) {
    int drc = leaf_direct(seq, indices, count, outs);
    if (drc != 1) return drc;
  }
  bc__seq_groups g = {0};
  uint64_t *group_indices = NULL;
  bc_buf *group_bufs = NULL;
  int rc = bc__seq_group(seq, indices, count, &g);
  if (rc != 0) goto cleanup;
  group_indices = malloc((count ? count : 1) * sizeof *group_indices);
  group_bufs = malloc((count ? count : 1) * sizeof *group_bufs);
  if (!group_indices || !group_bufs) {
    rc = bc__error(BC_ENOMEM, "out of memory for a batch of %zu", count);
    goto cleanup;
  }

  /* 3. one batch per leaf */
  size_t first_failed = SIZE_MAX;
  for (size_t id = 0; id < g.nleaves; id++) {
    size_t lo = g.start[id], n = g.start[id + 1] - lo;
    for (size_t k = 0; k < n; k++) {
      group_indices[lo + k] = g.leaf_index[g.order[lo + k]];
      group_bufs[lo + k] = outs[g.order[lo + k]];
    }
    int grc = leaf_get_many(g.leaves[id], group_indices + lo, n,
                            group_bufs + lo, false);
    for (size_t k = 0; k < n; k++) outs[g.order[lo + k]] = group_bufs[lo + k];
    if (grc == 0) continue;
    if (bc__seq_final_error(grc)) {
      rc = grc;
      goto cleanup;
    }
    /* Find this group's first failing position (request order). */
    bool found = false;
    for (size_t k = 0; k < n && !found; k++) {
      size_t p = g.order[lo + k];
      if (p >= first_failed) break; /* positions ascend within a group */
      bc_seq *leaf = g.leaves[id];
      int one = leaf->ops->get(leaf, g.leaf_index[p], &outs[p]);
      if (bc__seq_final_error(one)) {
        rc = bc__error_wrap(one, "indices[%zu] = %lld: %s", p, (long long)indices[p],
                            bc_errmsg());
        goto cleanup;
      }
      if (one != 0) {
        first_failed = p;
        found = true;
      }
    }
    if (!found && first_failed == SIZE_MAX) first_failed = g.order[lo];
  }
  if (first_failed != SIZE_MAX) {
    size_t p = first_failed;
    bc_seq *leaf = g.leaves[g.leaf_id[p]];
    rc = leaf->ops->get(leaf, g.leaf_index[p], &outs[p]);
    if (rc == 0) /* the batch failed but the element alone reads fine */
      rc = bc__error(BC_EIO, "indices[%zu] = %lld: batch read failed", p,
                     (long long)indices[p]);
    else
      rc = bc__error_wrap(rc, "indices[%zu] = %lld: %s", p,
                          (long long)indices[p], bc_errmsg());
  }
cleanup:
  bc__seq_groups_free(&g);
  free(group_indices);
  free(group_bufs);
  return rc;
}
