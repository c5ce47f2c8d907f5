/*
 * src/cache/read_into.c - a cache's read_into (bc_seq_ops.read_into): raw
 * records straight into caller rows, one shard at a time.
 *
 * The positions are grouped by shard (a stable sort of their order by
 * index / R).  Each group's shard reader is acquired once (filling the
 * shard when it is missing: bc__reader_acquire with BC__WAIT, the path of
 * a single read), its records are read into their rows by
 * bc__bag_read_rows (one copy, or one zstd decode, from the mapping per
 * row), and the reader is released.
 *
 * Anything unusual in a group (no shard size yet, a position past the
 * known end or the shard's records, a read of the rows that fails) makes
 * that group be read again record by record through the cache's own `get`, the path of a
 * single read: it reports what a single read reports (an index out of
 * range, a record that is not one row) and it recovers what a single read
 * recovers (a damaged shard regenerated).  A failed acquire (a fill whose
 * source failed) is the group's error as it is, as a single read's would
 * be, without running the source again.
 * Rows already written by the failed attempt are written again; a caller
 * sees either every row or an error.
 *
 * Threads: as a single read; the reader is held only across its group's
 * read.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "bag/internal.h"
#include "cache/internal.h"
#include "seq/internal.h"

/* Row p of dst. */
static unsigned char *row_of(unsigned char *dst, const size_t *rows, size_t p,
                             size_t size) {
  return dst + (rows != NULL ? rows[p] : p) * size;
}

/* The group read one record at a time through get (the order's positions
 * order[0..n)). */
static int read_singly(bc_seq *self, const uint64_t *indices, const size_t *rows,
                       const size_t *order, size_t n, unsigned char *dst, size_t size) {
  bc_buf buf = BC_BUF_INIT;
  int rc = 0;
  for (size_t k = 0; k < n && rc == 0; k++) {
    size_t p = order[k];
    rc = self->ops->get(self, indices[p], &buf);
    if (rc == 0 && buf.size != size) /* bc_seq_read_into words the message */
      rc = bc__error(BC_EINVAL, "a record has %zu bytes, not the row size %zu", buf.size,
                     size);
    else if (rc == 0 && size > 0)
      memcpy(row_of(dst, rows, p, size), buf.data, size);
  }
  bc_buf_release(&buf);
  return rc;
}

/* The group of shard `shard` (positions order[0..n)) through its reader:
 * 0 when every row was read; 1 when the group is to be read singly (a
 * position past the known end or past the shard's records, a failed read
 * of the mapped rows); or the negative code of a failed acquire (a fill's
 * failure: a single read reports just that, and it is not run twice). */
static int read_group(bc_cache *c, uint64_t shard, const uint64_t *indices,
                      const size_t *rows, const size_t *order, size_t n,
                      unsigned char *dst, size_t size, int max_parallelism,
                      uint64_t *local, size_t *lrows) {
  if (atomic_load(&c->final)) { /* get_record's range check comes first */
    uint64_t end = atomic_load(&c->known_length);
    for (size_t k = 0; k < n; k++)
      if (indices[order[k]] >= end) return 1;
  }
  bc__reader r;
  int rc = bc__reader_acquire(c, shard, BC__WAIT, &r);
  if (rc != 0) return rc;
  uint64_t len = bc_bag_len(r.bag);
  for (size_t k = 0; k < n && rc == 0; k++) {
    size_t p = order[k];
    local[k] = indices[p] - r.start;
    lrows[k] = rows != NULL ? rows[p] : p;
    if (local[k] >= len) rc = 1; /* past a short last shard */
  }
  if (rc == 0 && bc__bag_read_rows(r.bag, local, lrows, n, dst, size, max_parallelism) != 0)
    rc = 1;
  bc__reader_release(c, &r);
  /* As n single reads: the first may open the shard, the others hit it. */
  if (rc == 0) bc__reader_count_hits(c, n - 1);
  return rc;
}

/* qsort's comparison of positions by (shard, position): stable groups. */
typedef struct {
  uint64_t shard;
  size_t p;
} keyed;

static int by_shard(const void *a, const void *b) {
  const keyed *x = a, *y = b;
  if (x->shard != y->shard) return x->shard < y->shard ? -1 : 1;
  return (x->p > y->p) - (x->p < y->p);
}

int bc__cache_read_into(bc_seq *self, const uint64_t *indices, const size_t *rows,
                        size_t count, void *dst, size_t size, int max_parallelism) {
  bc_cache *c = (bc_cache *)self;
  keyed *keys = NULL;
  size_t *order = NULL, *lrows = NULL;
  uint64_t *local = NULL;
  int rc = 0;
  uint64_t R = c->R; /* 0 until the first shard is made: then all singly */
  if (count == 0) goto cleanup;
  keys = malloc(count * sizeof *keys);
  order = malloc(count * sizeof *order);
  local = malloc(count * sizeof *local);
  lrows = malloc(count * sizeof *lrows);
  if (keys == NULL || order == NULL || local == NULL || lrows == NULL) {
    rc = bc__error(BC_ENOMEM, "out of memory for a batch of %zu", count);
    goto cleanup;
  }
  uint64_t lo_shard = UINT64_MAX, hi_shard = 0;
  for (size_t p = 0; p < count; p++) {
    keys[p] = (keyed){R > 0 ? indices[p] / R : 0, p};
    if (keys[p].shard < lo_shard) lo_shard = keys[p].shard;
    if (keys[p].shard > hi_shard) hi_shard = keys[p].shard;
  }
  if (hi_shard - lo_shard < 2 * (uint64_t)count + 64) {
    /* Few shards for the batch (the usual case): a counting sort, stable,
     * in O(count + shards) (qsort cost ~300 instructions a row). */
    size_t span = (size_t)(hi_shard - lo_shard) + 1;
    size_t *start = calloc(span + 1, sizeof *start);
    if (start == NULL) {
      rc = bc__error(BC_ENOMEM, "out of memory for a batch of %zu", count);
      goto cleanup;
    }
    for (size_t p = 0; p < count; p++) start[keys[p].shard - lo_shard + 1]++;
    for (size_t k = 1; k <= span; k++) start[k] += start[k - 1];
    for (size_t p = 0; p < count; p++) order[start[keys[p].shard - lo_shard]++] = p;
    free(start);
    for (size_t k = 0; k < count; k++) keys[k].shard = R > 0 ? indices[order[k]] / R : 0;
  } else {
    qsort(keys, count, sizeof *keys, by_shard);
    for (size_t p = 0; p < count; p++) order[p] = keys[p].p;
  }
  for (size_t lo = 0, hi; lo < count && rc == 0; lo = hi) {
    for (hi = lo + 1; hi < count && keys[hi].shard == keys[lo].shard;) hi++;
    rc = R == 0 ? 1
                : read_group(c, keys[lo].shard, indices, rows, order + lo, hi - lo, dst,
                             size, max_parallelism, local, lrows);
    if (rc == 1) {
      bc_error_clear();
      rc = read_singly(self, indices, rows, order + lo, hi - lo, dst, size);
    }
  }
cleanup:
  free(keys);
  free(order);
  free(local);
  free(lrows);
  return rc;
}
