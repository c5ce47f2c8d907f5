/*
 * Record-bytes -> positions, without keeping records in memory.
 *
 * Build: every position's record is read once on the worker pool and reduced
 * to a 64-bit hash.  (hash, position) pairs are sorted; each run of equal
 * hashes is split into groups of byte-identical records (reading the records
 * again: only duplicates and true collisions cost this).  The result is
 *   entries[]   one per distinct record, sorted by hash, each with the slice
 *               of positions[] that holds its positions (ascending)
 *   positions[] every position, grouped by entry.
 * Lookup: binary search of the key's hash, then a byte comparison against the
 * record at each candidate's first position.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "bag/internal.h"

#define HASH_SEED 0x62616763616368ULL /* "bagcach" */

typedef struct {
  uint64_t hash;
  uint64_t first; /* offset of its positions in index->positions */
  uint64_t count;
} entry;

struct bc_index {
  const bc_bag *bag;
  bool zero_copy;      /* records can be compared in place (no copy) */
  uint64_t *view;      /* position -> bag record (NULL: identity) */
  entry *entries;
  uint64_t nentries;
  uint64_t *positions;
};

typedef struct {
  uint64_t hash, pos;
} pair;

static inline uint64_t record_of(const bc_index *ix, uint64_t pos) {
  return ix->view ? ix->view[pos] : pos;
}

/* Reads the record at view position `pos`: zero-copy when the bag allows. */
static int read_at(const bc_index *ix, uint64_t pos, bc_buf *buf,
                   const void **data, size_t *size) {
  uint64_t r = record_of(ix, pos);
  if (ix->zero_copy) return bc_bag_get_view(ix->bag, r, data, size);
  int rc = bc_bag_get(ix->bag, r, buf);
  if (rc != 0) return rc;
  *data = buf->data;
  *size = buf->size;
  return 0;
}

typedef struct {
  const bc_index *ix;
  pair *pairs;
  uint64_t count, chunk;
} hash_job;

typedef struct {
  const bc_index *ix;
  uint64_t pos;
  bc_buf *buf;
  uint64_t hash;
} hash_args;

/* Hashes one record (guarded: it may read a mapping in place). */
static int hash_one(void *arg) {
  hash_args *a = arg;
  const void *data;
  size_t size;
  int rc = read_at(a->ix, a->pos, a->buf, &data, &size);
  if (rc == 0) a->hash = bc__hash64(data, size, HASH_SEED);
  return rc;
}

static int hash_task(void *arg, size_t task) {
  hash_job *j = arg;
  uint64_t lo = (uint64_t)task * j->chunk;
  uint64_t hi = lo + j->chunk < j->count ? lo + j->chunk : j->count;
  bc_buf buf = BC_BUF_INIT;
  int rc = 0;
  for (uint64_t p = lo; p < hi && rc == 0; p++) {
    hash_args a = {j->ix, p, &buf, 0};
    rc = j->ix->zero_copy ? bc__guarded(hash_one, &a, "index") : hash_one(&a);
    if (rc == 0) j->pairs[p] = (pair){a.hash, p};
  }
  bc_buf_release(&buf);
  return rc;
}

static int pair_cmp(const void *a, const void *b) {
  const pair *x = a, *y = b;
  if (x->hash != y->hash) return x->hash < y->hash ? -1 : 1;
  return x->pos < y->pos ? -1 : x->pos > y->pos;
}

typedef struct {
  const bc_index *ix;
  uint64_t a, b;
  const void *key; /* compare record a with key when b is unused */
  size_t key_size;
  bc_buf *ba, *bb;
  bool equal;
} compare_args;

/* Compares record a with record b, or with a key (guarded: in place). */
static int compare_one(void *arg) {
  compare_args *c = arg;
  const void *da, *db = c->key;
  size_t na, nb = c->key_size;
  int rc = read_at(c->ix, c->a, c->ba, &da, &na);
  if (rc == 0 && c->key == NULL) rc = read_at(c->ix, c->b, c->bb, &db, &nb);
  if (rc == 0) c->equal = na == nb && (na == 0 || memcmp(da, db, na) == 0);
  return rc;
}

static int compare(compare_args *c) {
  return c->ix->zero_copy ? bc__guarded(compare_one, c, "index") : compare_one(c);
}

static int records_equal(const bc_index *ix, uint64_t a, uint64_t b,
                         bc_buf *ba, bc_buf *bb, bool *equal) {
  compare_args c = {ix, a, b, NULL, 0, ba, bb, false};
  int rc = compare(&c);
  *equal = c.equal;
  return rc;
}

/* Turns the sorted run pairs[lo..hi) of one hash into entries: repeatedly
 * takes the first unassigned pair and gathers every pair equal to it.
 * `taken` marks pairs already assigned (scratch, length hi - lo). */
static int split_run(bc_index *ix, pair *pairs, size_t lo, size_t hi,
                     bool *taken, bc_buf *ba, bc_buf *bb) {
  memset(taken, 0, hi - lo);
  for (size_t a = lo; a < hi; a++) {
    if (taken[a - lo]) continue;
    entry *e = &ix->entries[ix->nentries++];
    e->hash = pairs[a].hash;
    e->first = 0; /* filled when positions are laid out */
    e->count = 0;
    for (size_t b = a; b < hi; b++) {
      if (taken[b - lo]) continue;
      bool eq = b == a;
      if (!eq) {
        int rc = records_equal(ix, pairs[a].pos, pairs[b].pos, ba, bb, &eq);
        if (rc != 0) return rc;
      }
      if (eq) {
        taken[b - lo] = true;
        /* Reuse pair.hash as the entry number for the layout pass. */
        pairs[b].hash = ix->nentries - 1;
        e->count++;
      }
    }
  }
  return 0;
}

int bc_index_build(bc_index **out, const bc_bag *bag, const uint64_t *positions,
                   uint64_t count) {
  bc_index *ix = calloc(1, sizeof *ix);
  pair *pairs = NULL;
  bool *taken = NULL;
  bc_buf ba = BC_BUF_INIT, bb = BC_BUF_INIT;
  int rc = 0;
  if (ix == NULL) return bc__error(BC_ENOMEM, "out of memory");
  ix->bag = bag;
  ix->zero_copy = bc__bag_can_view(bag);
  uint64_t len = bc_bag_len(bag);
  if (positions == NULL && count != len) {
    rc = bc__error(BC_EINVAL, "index: count %llu != bag length %llu",
                   (unsigned long long)count, (unsigned long long)len);
    goto cleanup;
  }
  if (positions != NULL) {
    for (uint64_t p = 0; p < count; p++)
      if (positions[p] >= len) {
        rc = bc__error(BC_ERANGE, "index: positions[%llu] = %llu out of range "
                       "[0, %llu)", (unsigned long long)p,
                       (unsigned long long)positions[p], (unsigned long long)len);
        goto cleanup;
      }
    ix->view = malloc(count ? count * sizeof *ix->view : 1);
    if (ix->view == NULL) goto nomem;
    memcpy(ix->view, positions, count * sizeof *ix->view);
  }
  pairs = malloc(count ? count * sizeof *pairs : 1);
  ix->entries = malloc(count ? count * sizeof *ix->entries : 1);
  ix->positions = malloc(count ? count * sizeof *ix->positions : 1);
  if (pairs == NULL || ix->entries == NULL || ix->positions == NULL) goto nomem;

  hash_job hj = {ix, pairs, count, 1024};
  rc = bc__parallel_for((size_t)((count + hj.chunk - 1) / hj.chunk),
                        bc_bag_options(bag)->max_parallelism, hash_task, &hj);
  if (rc != 0) goto cleanup;
  qsort(pairs, (size_t)count, sizeof *pairs, pair_cmp);

  /* Group runs of equal hashes into entries (ordered by hash, then by first
   * position, since runs are sorted by position). */
  size_t longest = 0;
  for (size_t lo = 0, hi; lo < count; lo = hi) {
    for (hi = lo + 1; hi < count && pairs[hi].hash == pairs[lo].hash; hi++) {
    }
    if (hi - lo > longest) longest = hi - lo;
  }
  taken = malloc(longest ? longest : 1);
  if (taken == NULL) goto nomem;
  for (size_t lo = 0, hi; lo < count; lo = hi) {
    uint64_t h = pairs[lo].hash;
    for (hi = lo + 1; hi < count && pairs[hi].hash == h; hi++) {
    }
    if (hi - lo == 1) {
      ix->entries[ix->nentries] = (entry){h, 0, 1};
      pairs[lo].hash = ix->nentries++;
    } else if ((rc = split_run(ix, pairs, lo, hi, taken, &ba, &bb)) != 0) {
      goto cleanup;
    }
  }
  /* Lay out positions entry by entry; within an entry they stay ascending
   * because pairs of one run are in position order. */
  uint64_t next = 0;
  for (uint64_t e = 0; e < ix->nentries; e++) {
    ix->entries[e].first = next;
    next += ix->entries[e].count;
    ix->entries[e].count = 0; /* recounted while filling */
  }
  for (size_t p = 0; p < count; p++) {
    entry *e = &ix->entries[pairs[p].hash];
    ix->positions[e->first + e->count++] = pairs[p].pos;
  }
  /* Entries were sized for one per position; keep only the distinct. */
  entry *shrunk = realloc(ix->entries, (ix->nentries ? ix->nentries : 1) *
                                           sizeof *ix->entries);
  if (shrunk != NULL) ix->entries = shrunk;
  *out = ix;
  ix = NULL;
  goto cleanup;
nomem:
  rc = bc__error(BC_ENOMEM, "index: out of memory for %llu records",
                 (unsigned long long)count);
cleanup:
  bc_index_free(ix);
  free(pairs);
  free(taken);
  bc_buf_release(&ba);
  bc_buf_release(&bb);
  return rc;
}

uint64_t bc_index_distinct(const bc_index *ix) { return ix->nentries; }

static int find(const bc_index *ix, const void *key, size_t size,
                const entry **found) {
  uint64_t h = bc__hash64(key, size, HASH_SEED);
  uint64_t lo = 0, hi = ix->nentries;
  while (lo < hi) {
    uint64_t mid = lo + (hi - lo) / 2;
    if (ix->entries[mid].hash < h) lo = mid + 1; else hi = mid;
  }
  bc_buf buf = BC_BUF_INIT;
  int rc = BC_ENOTFOUND;
  for (; lo < ix->nentries && ix->entries[lo].hash == h; lo++) {
    const entry *e = &ix->entries[lo];
    /* A non-NULL key pointer even for size 0 marks "compare with key". */
    compare_args c = {ix, ix->positions[e->first], 0, key ? key : (const void *)"",
                      size, &buf, NULL, false};
    int r = compare(&c);
    if (r != 0) {
      rc = r;
      break;
    }
    if (c.equal) {
      *found = e;
      rc = 0;
      break;
    }
  }
  bc_buf_release(&buf);
  if (rc == BC_ENOTFOUND)
    bc__error(rc, "index: no record of %zu bytes equals the key", size);
  return rc;
}

int bc_index_first(const bc_index *ix, const void *key, size_t size,
                   uint64_t *position) {
  const entry *e;
  int rc = find(ix, key, size, &e);
  if (rc == 0) *position = ix->positions[e->first];
  return rc;
}

int bc_index_all(const bc_index *ix, const void *key, size_t size,
                 const uint64_t **positions, uint64_t *count) {
  const entry *e;
  int rc = find(ix, key, size, &e);
  if (rc == 0) {
    *positions = ix->positions + e->first;
    *count = e->count;
  }
  return rc;
}

void bc_index_free(bc_index *ix) {
  if (ix == NULL) return;
  free(ix->view);
  free(ix->entries);
  free(ix->positions);
  free(ix);
}
