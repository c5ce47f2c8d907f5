/*
 * interleave(parts): round-robin in argument order; a part that runs out
 * drops out of the rotation and the rest continue, so every element of
 * every part appears exactly once.
 *
 * With the parts' lengths sorted into distinct values d_0 < d_1 < ...,
 * rounds [d_{q-1}, d_q) form phase q, in which the a_q parts of length >= d_q
 * take turns.  Element i: binary search for its phase q, then
 *   round = d_{q-1} + (i - start_q) / a_q,   r = (i - start_q) % a_q,
 * and the part is the r-th active one in argument order.  The active sets
 * shrink phase by phase, so they are kept as versions of one persistent
 * segment tree over argument positions (each removal copies one path):
 * O(log parts) per element, O(parts log parts) memory.
 *
 * The tables need every part's exact length (endless parts are fine: their
 * phase never ends); they are built once, on first use.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "seq/internal.h"

#define NO_END UINT64_MAX /* the length of an endless part */

typedef struct {
  uint32_t left, right; /* node numbers; 0 is the empty tree */
  uint32_t active;      /* active parts below this node */
} node;

typedef struct {
  size_t nphases;
  uint64_t *start;  /* first element of phase q (nphases + 1 entries) */
  uint64_t *round;  /* first round of phase q */
  uint64_t *active; /* parts taking turns in phase q */
  uint32_t *root;   /* segment tree version of phase q */
  node *nodes;
  uint64_t total;   /* elements; NO_END when a part is endless */
} tables;

typedef struct {
  bc_seq base;
  size_t count;
  bc_seq **parts;
  _Atomic(tables *) ready; /* published (release) once built */
  pthread_mutex_t lock;    /* serialises the one-time build */
} interleave_seq;

static void tables_free(tables *t) {
  if (t == NULL) return;
  free(t->start);
  free(t->round);
  free(t->active);
  free(t->root);
  free(t->nodes);
  free(t);
}

typedef struct {
  node *nodes;
  uint32_t used;
} forest;

/* Builds the full tree over positions [lo, hi) with len[] > 0 active. */
static uint32_t build(forest *f, const uint64_t *len, size_t lo, size_t hi) {
  uint32_t me = f->used++;
  if (hi - lo == 1) {
    f->nodes[me] = (node){0, 0, len[lo] > 0};
    return me;
  }
  size_t mid = lo + (hi - lo) / 2;
  uint32_t l = build(f, len, lo, mid), r = build(f, len, mid, hi);
  f->nodes[me] = (node){l, r, f->nodes[l].active + f->nodes[r].active};
  return me;
}

/* A new version of `root` with position pos inactive (path copy). */
static uint32_t remove_pos(forest *f, uint32_t root, size_t lo, size_t hi,
                           size_t pos) {
  uint32_t me = f->used++;
  f->nodes[me] = f->nodes[root];
  f->nodes[me].active--;
  if (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    if (pos < mid)
      f->nodes[me].left = remove_pos(f, f->nodes[root].left, lo, mid, pos);
    else
      f->nodes[me].right = remove_pos(f, f->nodes[root].right, mid, hi, pos);
  }
  return me;
}

/* The position of the r-th active part (0-based) in version `root`. */
static size_t kth_active(const node *nodes, uint32_t root, size_t count,
                         uint64_t r) {
  size_t lo = 0, hi = count;
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    const node *n = &nodes[root];
    if (r < nodes[n->left].active) {
      root = n->left;
      hi = mid;
    } else {
      r -= nodes[n->left].active;
      root = n->right;
      lo = mid;
    }
  }
  return lo;
}

typedef struct {
  uint64_t len;
  size_t pos;
} part_len;

static int by_length(const void *a, const void *b) {
  const part_len *x = a, *y = b;
  if (x->len != y->len) return x->len < y->len ? -1 : 1;
  return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static int build_tables(size_t count, const uint64_t *len, tables **out) {
  tables *t = calloc(1, sizeof *t);
  part_len *order = malloc(count * sizeof *order);
  size_t levels = 1;
  while (((size_t)1 << levels) < count) levels++;
  size_t max_nodes = 2 * count + count * (levels + 1) + 1;
  forest f = {malloc(max_nodes * sizeof(node)), 1};
  int rc = 0;
  if (t == NULL || order == NULL || f.nodes == NULL) goto nomem;
  f.nodes[0] = (node){0, 0, 0};
  for (size_t j = 0; j < count; j++) order[j] = (part_len){len[j], j};
  qsort(order, count, sizeof *order, by_length);

  size_t first_active = 0;
  while (first_active < count && order[first_active].len == 0) first_active++;
  size_t distinct = 0;
  for (size_t k = first_active; k < count; k++)
    if (k == first_active || order[k].len != order[k - 1].len) distinct++;
  t->start = malloc((distinct + 1) * sizeof *t->start);
  t->round = malloc((distinct + 1) * sizeof *t->round);
  t->active = malloc((distinct + 1) * sizeof *t->active);
  t->root = malloc((distinct + 1) * sizeof *t->root);
  if (!t->start || !t->round || !t->active || !t->root) goto nomem;

  uint32_t root = build(&f, len, 0, count);
  uint64_t element = 0, prev_len = 0;
  size_t q = 0;
  for (size_t k = first_active; k < count;) {
    uint64_t d = order[k].len;
    t->start[q] = element;
    t->round[q] = prev_len;
    t->active[q] = f.nodes[root].active;
    t->root[q] = root;
    if (d == NO_END) {
      element = NO_END;
    } else {
      uint64_t rounds = d - prev_len, n;
      if (__builtin_mul_overflow(rounds, t->active[q], &n) ||
          __builtin_add_overflow(element, n, &element))
        element = NO_END - 1; /* beyond any addressable index */
    }
    q++;
    /* Parts of length d leave the rotation after this phase. */
    for (; k < count && order[k].len == d; k++)
      root = remove_pos(&f, root, 0, count, order[k].pos);
    prev_len = d;
    if (d == NO_END) break;
  }
  t->nphases = q;
  t->start[q] = element;
  t->total = element;
  t->nodes = f.nodes;
  f.nodes = NULL;
  *out = t;
  t = NULL;
  goto cleanup;
nomem:
  rc = bc__error(BC_ENOMEM, "interleave: out of memory for %zu parts", count);
cleanup:
  tables_free(t);
  free(f.nodes);
  free(order);
  return rc;
}

/* The tables, built on first use.  Part lengths are settled outside the
 * lock (that may call into the user's code); the lock only keeps two
 * threads from publishing twice. */
static int get_tables(interleave_seq *s, tables **out) {
  tables *t = atomic_load_explicit(&s->ready, memory_order_acquire);
  if (t != NULL) {
    *out = t;
    return 0;
  }
  uint64_t *len = malloc((s->count ? s->count : 1) * sizeof *len);
  if (len == NULL) return bc__error(BC_ENOMEM, "out of memory");
  int rc = 0;
  for (size_t j = 0; j < s->count && rc == 0; j++) {
    bc_len c;
    rc = bc__seq_settle(s->parts[j], &c);
    len[j] = c.kind == BC_LEN_INFINITE ? NO_END : c.value;
  }
  if (rc == 0 && s->count > 0) rc = build_tables(s->count, len, &t);
  if (rc == 0 && s->count == 0) {
    t = calloc(1, sizeof *t);
    if (t == NULL) rc = bc__error(BC_ENOMEM, "out of memory");
  }
  free(len);
  if (rc != 0) return rc;
  pthread_mutex_lock(&s->lock);
  tables *existing = atomic_load_explicit(&s->ready, memory_order_relaxed);
  if (existing == NULL)
    atomic_store_explicit(&s->ready, t, memory_order_release);
  pthread_mutex_unlock(&s->lock);
  if (existing != NULL) {
    tables_free(t);
    t = existing;
  }
  *out = t;
  return 0;
}

static int interleave_length(bc_seq *self, bool exact, bc_len *out) {
  interleave_seq *s = (interleave_seq *)self;
  tables *t = atomic_load_explicit(&s->ready, memory_order_acquire);
  if (t == NULL && exact) {
    int rc = get_tables(s, &t);
    if (rc != 0) return rc;
  }
  if (t != NULL) {
    *out = t->total == NO_END ? (bc_len){BC_LEN_INFINITE, 0}
                              : (bc_len){BC_LEN_EXACT, t->total};
    return 0;
  }
  bc_len total = {BC_LEN_EXACT, 0};
  for (size_t j = 0; j < s->count; j++) {
    bc_len c;
    int rc = s->parts[j]->ops->length(s->parts[j], false, &c);
    if (rc != 0) return rc;
    if (c.kind == BC_LEN_INFINITE) {
      *out = c;
      return 0;
    }
    if (c.kind == BC_LEN_AT_LEAST) total.kind = BC_LEN_AT_LEAST;
    total.value += c.value;
  }
  *out = total;
  return 0;
}

static int interleave_resolve(bc_seq *self, uint64_t index, bc_seq **child,
                              uint64_t *child_index) {
  interleave_seq *s = (interleave_seq *)self;
  tables *t;
  int rc = get_tables(s, &t);
  if (rc != 0) return rc;
  if (t->total != NO_END && index >= t->total)
    return bc__seq_range_error(self, index, t->total);
  size_t lo = 0, hi = t->nphases - 1; /* last phase starting at or before */
  while (lo < hi) {
    size_t mid = lo + (hi - lo + 1) / 2;
    if (t->start[mid] <= index) lo = mid; else hi = mid - 1;
  }
  uint64_t offset = index - t->start[lo];
  uint64_t r = offset % t->active[lo];
  size_t part = kth_active(t->nodes, t->root[lo], s->count, r);
  *child = s->parts[part];
  *child_index = t->round[lo] + offset / t->active[lo];
  return 0;
}

static void interleave_destroy(bc_seq *self) {
  interleave_seq *s = (interleave_seq *)self;
  for (size_t j = 0; j < s->count; j++) bc_seq_unref(s->parts[j]);
  free(s->parts);
  tables_free(atomic_load(&s->ready));
  pthread_mutex_destroy(&s->lock);
  free(s);
}

static const bc_seq_ops interleave_ops = {
    .version = BC_SEQ_OPS_VERSION,
    .type_name = "interleave",
    .length = interleave_length,
    .resolve = interleave_resolve,
    .destroy = interleave_destroy,
};

int bc_seq_interleave(bc_seq **out, bc_seq *const *parts, size_t count) {
  if (out == NULL || (parts == NULL && count > 0))
    return bc__error(BC_EINVAL, "bc_seq_interleave: NULL argument");
  if (count > (size_t)1 << 26)
    return bc__error(BC_EINVAL, "bc_seq_interleave: %zu parts is too many", count);
  for (size_t j = 0; j < count; j++)
    if (parts[j] == NULL)
      return bc__error(BC_EINVAL, "bc_seq_interleave: part %zu is NULL", j);
  interleave_seq *s = bc__seq_alloc(sizeof *s, &interleave_ops, 0);
  if (s == NULL) return BC_ENOMEM;
  s->parts = malloc((count ? count : 1) * sizeof *s->parts);
  if (s->parts == NULL) {
    free(s);
    return bc__error(BC_ENOMEM, "out of memory");
  }
  for (size_t j = 0; j < count; j++) s->parts[j] = bc_seq_ref(parts[j]);
  s->count = count;
  atomic_init(&s->ready, NULL);
  pthread_mutex_init(&s->lock, NULL);
  *out = &s->base;
  return 0;
}
