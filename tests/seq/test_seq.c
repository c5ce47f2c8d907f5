/*
 * The sequence layer against a plain reference model.
 *
 * Random compositions of every view (depth up to 6, random parameters,
 * empty and length-1 sequences included) over array leaves are checked
 * element by element, by get_many and by iteration against a model list
 * computed independently here.  Then exact tables (interleave with unequal
 * lengths, chunk_shuffle, repeat), lengths that are unknown or endless,
 * errors, a bag leaf, and concurrent readers.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <pthread.h>
#include <cmocka.h>

#include "model.h"

static uint64_t rng_state = 0x1234567;
static uint64_t rnd(uint64_t n) { /* uniform-ish in [0, n), n > 0 */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (rng_state * 0x2545F4914F6CDD1DULL) % n;
}
static int64_t rnd_range(int64_t lo, int64_t hi) { /* [lo, hi] */
  return lo + (int64_t)rnd((uint64_t)(hi - lo + 1));
}

typedef struct {
  bc_seq *seq;
  model m;
} node;

/* ---- the model's own definitions of each view -------------------------- */

/* Python: range(*slice(start, stop, step).indices(len)) */
static model model_slice(const model *c, int64_t start, int64_t stop,
                         int64_t step) {
  int64_t len = (int64_t)c->len;
  if (step == BC_NONE) step = 1;
  int64_t lower = step > 0 ? 0 : -1, upper = step > 0 ? len : len - 1;
  int64_t a, b;
  if (start == BC_NONE) a = step > 0 ? lower : upper;
  else if (start < 0) a = start + len < lower ? lower : start + len;
  else a = start > upper ? upper : start;
  if (stop == BC_NONE) b = step > 0 ? upper : lower;
  else if (stop < 0) b = stop + len < lower ? lower : stop + len;
  else b = stop > upper ? upper : stop;
  model m = {malloc((c->len + 1) * sizeof(uint64_t)), 0};
  for (int64_t i = a; step > 0 ? i < b : i > b; i += step) m.ids[m.len++] = c->ids[i];
  return m;
}

static model model_concat(const model *parts, size_t n) {
  size_t total = 0;
  for (size_t j = 0; j < n; j++) total += parts[j].len;
  model m = {malloc((total + 1) * sizeof(uint64_t)), 0};
  for (size_t j = 0; j < n; j++)
    for (size_t i = 0; i < parts[j].len; i++) m.ids[m.len++] = parts[j].ids[i];
  return m;
}

/* Round-robin simulation: take one from each part that still has some. */
static model model_interleave(const model *parts, size_t n) {
  size_t total = 0;
  for (size_t j = 0; j < n; j++) total += parts[j].len;
  model m = {malloc((total + 1) * sizeof(uint64_t)), 0};
  for (size_t round = 0; m.len < total; round++)
    for (size_t j = 0; j < n; j++)
      if (round < parts[j].len) m.ids[m.len++] = parts[j].ids[round];
  return m;
}

/* The permutation a chunk_shuffle applies, read off a shuffle of an
 * identity leaf, after checking it permutes each run within itself. */
static uint64_t *shuffle_perm(uint64_t len, uint64_t chunk, uint64_t length,
                              uint64_t seed) {
  bc_seq *ident = array_leaf(99, (size_t)len, 1), *sh;
  assert_int_equal(bc_seq_chunk_shuffle(&sh, ident, chunk, length, seed), 0);
  uint64_t n;
  assert_int_equal(bc_seq_len(sh, &n), 0);
  uint64_t run = chunk == 0 || chunk > n ? (n ? n : 1) : chunk;
  uint64_t *perm = malloc((n + 1) * sizeof *perm);
  unsigned char *seen = calloc(n + 1, 1);
  for (uint64_t k = 0; k < n; k++) {
    bc_seq *leaf;
    assert_int_equal(bc_seq_resolve(sh, (int64_t)k, &leaf, &perm[k]), 0);
    assert_ptr_equal(leaf, ident);
    assert_true(perm[k] / run == k / run); /* stays within its run */
    assert_false(seen[perm[k]]);
    seen[perm[k]] = 1;
  }
  free(seen);
  bc_seq_unref(sh);
  bc_seq_unref(ident);
  return perm;
}

typedef struct {
  uint64_t a, b, mod;
} affine;

static int affine_map(void *payload, uint64_t k, uint64_t *child) {
  affine *f = payload;
  *child = (f->a * k + f->b) % f->mod;
  return 0;
}

/* ---- random compositions ------------------------------------------------ */

static node gen(int depth);

static node gen_leaf(void) {
  static unsigned next_leaf = 1;
  size_t len = rnd(4) == 0 ? rnd(2) : rnd(40); /* empty, 1, or larger */
  unsigned id = next_leaf++ % 1000 + 1;
  node n = {NULL, model_leaf(id, len)};
  n.seq = rnd(5) == 0 ? growing_leaf(id, len, rnd(len + 1)) : array_leaf(id, len, 1);
  return n;
}

static node gen(int depth) {
  if (depth == 0 || rnd(5) == 0) return gen_leaf();
  node c = gen(depth - 1), n = {NULL, {NULL, 0}};
  int64_t len = (int64_t)c.m.len;
  int op = (int)rnd(8);
  if (c.m.len > 400 && op != 0) op = 1; /* keep models small: shrink */
  switch (op) {
    case 0: { /* slice */
      static const int64_t steps[] = {1, 2, 3, 7, -1, -2, -3, BC_NONE};
      int64_t start = rnd(4) == 0 ? BC_NONE : rnd_range(-len - 3, len + 3);
      int64_t stop = rnd(4) == 0 ? BC_NONE : rnd_range(-len - 3, len + 3);
      int64_t step = steps[rnd(8)];
      if (c.m.len > 400) step = 3;
      assert_int_equal(bc_seq_slice(&n.seq, c.seq, start, stop, step), 0);
      n.m = model_slice(&c.m, start, stop, step);
      break;
    }
    case 1: { /* take, with repeats and negative indices */
      size_t count = len == 0 ? 0 : (size_t)rnd(c.m.len > 400 ? 50 : 2 * (uint64_t)len + 2);
      int64_t *idx = malloc((count + 1) * sizeof *idx);
      n.m = (model){malloc((count + 1) * sizeof(uint64_t)), count};
      for (size_t k = 0; k < count; k++) {
        idx[k] = rnd_range(-len, len - 1);
        n.m.ids[k] = c.m.ids[idx[k] < 0 ? idx[k] + len : idx[k]];
      }
      assert_int_equal(bc_seq_take(&n.seq, c.seq, idx, count), 0);
      free(idx);
      break;
    }
    case 2: { /* map by an affine function */
      affine *f = malloc(sizeof *f);
      *f = (affine){rnd(7) + 1, rnd(100), len ? (uint64_t)len : 1};
      size_t count = len == 0 ? 0 : (size_t)rnd(2 * (uint64_t)len + 1);
      n.m = (model){malloc((count + 1) * sizeof(uint64_t)), count};
      for (size_t k = 0; k < count; k++) n.m.ids[k] = c.m.ids[(f->a * k + f->b) % f->mod];
      assert_int_equal(bc_seq_map(&n.seq, c.seq, affine_map, f, free,
                                  (bc_len){BC_LEN_EXACT, count}), 0);
      break;
    }
    case 3:
    case 4: { /* concat / interleave of 1-4 parts */
      size_t parts = 1 + rnd(4);
      bc_seq *seqs[4];
      model models[4];
      seqs[0] = c.seq;
      models[0] = c.m;
      for (size_t j = 1; j < parts; j++) {
        node p = gen(depth - 1);
        seqs[j] = p.seq;
        models[j] = p.m;
      }
      if (op == 3) {
        assert_int_equal(bc_seq_concat(&n.seq, seqs, parts), 0);
        n.m = model_concat(models, parts);
      } else {
        assert_int_equal(bc_seq_interleave(&n.seq, seqs, parts), 0);
        n.m = model_interleave(models, parts);
      }
      for (size_t j = 1; j < parts; j++) {
        bc_seq_unref(seqs[j]);
        model_free(&models[j]);
      }
      break;
    }
    case 5: { /* repeat 0-3 times */
      uint64_t times = rnd(4);
      assert_int_equal(bc_seq_repeat(&n.seq, c.seq, times), 0);
      n.m = (model){malloc((c.m.len * times + 1) * sizeof(uint64_t)), 0};
      for (uint64_t t = 0; t < times; t++)
        for (size_t i = 0; i < c.m.len; i++) n.m.ids[n.m.len++] = c.m.ids[i];
      break;
    }
    default: { /* chunk_shuffle / shuffle */
      uint64_t chunk = op == 6 ? rnd((uint64_t)len + 2) : 0;
      uint64_t length = op == 6 && rnd(2) ? rnd((uint64_t)len + 1) : BC_LEN_ALL;
      uint64_t seed = rnd(1000);
      assert_int_equal(bc_seq_chunk_shuffle(&n.seq, c.seq, chunk, length, seed), 0);
      uint64_t *perm = shuffle_perm((uint64_t)len, chunk, length, seed);
      size_t count = length == BC_LEN_ALL ? c.m.len : (size_t)length;
      n.m = (model){malloc((count + 1) * sizeof(uint64_t)), count};
      for (size_t k = 0; k < count; k++) n.m.ids[k] = c.m.ids[perm[k]];
      free(perm);
      break;
    }
  }
  bc_seq_unref(c.seq);
  model_free(&c.m);
  return n;
}

static void test_random_compositions(void **state) {
  (void)state;
  for (int trial = 0; trial < 400; trial++) {
    node n = gen(1 + trial % 6);
    check_against_model(n.seq, &n.m, (uint64_t)trial);
    bc_seq_unref(n.seq);
    model_free(&n.m);
  }
}

/* ---- exact tables --------------------------------------------------------- */

static void expect_ids(bc_seq *seq, const uint64_t *ids, size_t n) {
  model m = {(uint64_t *)ids, n};
  check_against_model(seq, &m, 7);
}

static void test_interleave_tables(void **state) {
  (void)state;
  /* ([0..4], [x], [y, z]) -> 0 x y 1 z 2 3 4 */
  bc_seq *p[5] = {array_leaf(1, 5, 1), array_leaf(2, 1, 1), array_leaf(3, 2, 1)};
  bc_seq *il;
  assert_int_equal(bc_seq_interleave(&il, p, 3), 0);
  const uint64_t want[] = {MODEL_ID(1, 0), MODEL_ID(2, 0), MODEL_ID(3, 0),
                           MODEL_ID(1, 1), MODEL_ID(3, 1), MODEL_ID(1, 2),
                           MODEL_ID(1, 3), MODEL_ID(1, 4)};
  expect_ids(il, want, 8);
  bc_seq_unref(il);
  for (int j = 0; j < 3; j++) bc_seq_unref(p[j]);

  /* lengths [2, 0, 3, 1, 3]: rounds 0: A B' C D E  1: A C E  2: C E */
  size_t lens[5] = {2, 0, 3, 1, 3};
  for (int j = 0; j < 5; j++) p[j] = array_leaf((unsigned)j + 1, lens[j], 1);
  assert_int_equal(bc_seq_interleave(&il, p, 5), 0);
  const uint64_t want2[] = {MODEL_ID(1, 0), MODEL_ID(3, 0), MODEL_ID(4, 0),
                            MODEL_ID(5, 0), MODEL_ID(1, 1), MODEL_ID(3, 1),
                            MODEL_ID(5, 1), MODEL_ID(3, 2), MODEL_ID(5, 2)};
  expect_ids(il, want2, 9);
  bc_seq_unref(il);
  for (int j = 0; j < 5; j++) bc_seq_unref(p[j]);

  /* no parts, and only empty parts: empty */
  assert_int_equal(bc_seq_interleave(&il, NULL, 0), 0);
  expect_ids(il, NULL, 0);
  bc_seq_unref(il);
  p[0] = array_leaf(1, 0, 1);
  assert_int_equal(bc_seq_interleave(&il, p, 1), 0);
  expect_ids(il, NULL, 0);
  bc_seq_unref(il);
  bc_seq_unref(p[0]);

  /* many parts of all different lengths against the simulation */
  enum { P = 300 };
  bc_seq *many[P];
  model models[P];
  for (int j = 0; j < P; j++) {
    size_t len = (size_t)((j * 7919) % 23);
    many[j] = array_leaf((unsigned)j + 1, len, 1);
    models[j] = model_leaf((unsigned)j + 1, len);
  }
  assert_int_equal(bc_seq_interleave(&il, many, P), 0);
  model m = model_interleave(models, P);
  check_against_model(il, &m, 3);
  model_free(&m);
  bc_seq_unref(il);
  for (int j = 0; j < P; j++) {
    bc_seq_unref(many[j]);
    model_free(&models[j]);
  }
}

static void test_chunk_shuffle_tables(void **state) {
  (void)state;
  /* chunk 4 over 10: runs [0,4) [4,8) [8,10), each permuted in itself */
  uint64_t *perm = shuffle_perm(10, 4, BC_LEN_ALL, 42);
  uint64_t *again = shuffle_perm(10, 4, BC_LEN_ALL, 42);
  assert_memory_equal(perm, again, 10 * sizeof *perm); /* deterministic */
  free(perm);
  free(again);
  /* A full shuffle of 1000 moves elements and depends on the seed. */
  uint64_t *a = shuffle_perm(1000, 0, BC_LEN_ALL, 1);
  uint64_t *b = shuffle_perm(1000, 0, BC_LEN_ALL, 2);
  size_t fixed = 0, same = 0;
  for (int k = 0; k < 1000; k++) {
    fixed += a[k] == (uint64_t)k;
    same += a[k] == b[k];
  }
  assert_true(fixed < 20); /* a random permutation fixes ~1 point */
  assert_true(same < 20);
  free(a);
  free(b);
  /* length below the child's: only the first `length` elements, shuffled */
  uint64_t *c = shuffle_perm(100, 8, 30, 5);
  for (int k = 0; k < 30; k++) assert_true(c[k] < 30);
  free(c);
  /* every chunk size from 1 to 12 over 37 elements */
  for (uint64_t chunk = 1; chunk <= 12; chunk++) free(shuffle_perm(37, chunk, BC_LEN_ALL, chunk));
  /* a billion elements cost no memory: spot-check a few indices */
  bc_seq *big = array_leaf(7, (size_t)1000000000, 1), *sh;
  assert_int_equal(bc_seq_shuffle(&sh, big, 9), 0);
  for (int64_t k = 0; k < 1000000000; k += 99999989) {
    bc_seq *leaf;
    uint64_t li;
    assert_int_equal(bc_seq_resolve(sh, k, &leaf, &li), 0);
    assert_true(li < 1000000000);
  }
  bc_seq_unref(sh);
  bc_seq_unref(big);
  /* length beyond the sequence is an error, not a silent short view */
  bc_seq *small = array_leaf(1, 5, 1);
  assert_int_equal(bc_seq_chunk_shuffle(&sh, small, 2, 6, 1), BC_EINVAL);
  bc_seq_unref(small);
}

static void test_repeat_tables(void **state) {
  (void)state;
  bc_seq *abc = array_leaf(1, 3, 1), *r;
  assert_int_equal(bc_seq_repeat(&r, abc, 2), 0);
  const uint64_t want[] = {MODEL_ID(1, 0), MODEL_ID(1, 1), MODEL_ID(1, 2),
                           MODEL_ID(1, 0), MODEL_ID(1, 1), MODEL_ID(1, 2)};
  expect_ids(r, want, 6);
  bc_seq_unref(r);
  assert_int_equal(bc_seq_repeat(&r, abc, 0), 0);
  expect_ids(r, NULL, 0);
  bc_seq_unref(r);

  /* forever: no length, any non-negative index, no negative ones */
  assert_int_equal(bc_seq_repeat(&r, abc, BC_REPEAT_FOREVER), 0);
  uint64_t n;
  bc_len l;
  assert_int_equal(bc_seq_len(r, &n), BC_EINFINITE);
  assert_int_equal(bc_seq_length(r, false, &l), 0);
  assert_int_equal(l.kind, BC_LEN_INFINITE);
  bc_buf b = BC_BUF_INIT;
  assert_int_equal(bc_seq_get(r, 1000000000007LL, &b), 0);
  assert_int_equal(b.size, 4);
  assert_memory_equal(b.data, "L1:2", 4); /* 10^12 + 7 = 2 mod 3 */
  assert_int_equal(bc_seq_get(r, -1, &b), BC_EINFINITE);
  bc_seq_unref(r);

  bc_seq *empty = array_leaf(2, 0, 1);
  assert_int_equal(bc_seq_repeat(&r, empty, BC_REPEAT_FOREVER), 0);
  assert_int_equal(bc_seq_len(r, &n), 0);
  assert_int_equal(n, 0);
  assert_int_equal(bc_seq_get(r, 0, &b), BC_ERANGE);
  bc_seq_unref(r);
  bc_seq_unref(empty);
  bc_seq_unref(abc);
  bc_buf_release(&b);
}

/* ---- unknown and endless lengths ------------------------------------------ */

static void test_unknown_length(void **state) {
  (void)state;
  bc_seq *g = growing_leaf(5, 20, 5), *a = array_leaf(1, 3, 1), *v;
  bc_len l;
  assert_int_equal(bc_seq_length(g, false, &l), 0);
  assert_int_equal(l.kind, BC_LEN_AT_LEAST);
  assert_int_equal(l.value, 5);

  /* concat with the unknown part last: lookups do not settle it */
  bc_seq *parts[2] = {a, g};
  assert_int_equal(bc_seq_concat(&v, parts, 2), 0);
  assert_int_equal(bc_seq_length(v, false, &l), 0);
  assert_int_equal(l.kind, BC_LEN_AT_LEAST);
  assert_int_equal(l.value, 8);
  bc_buf b = BC_BUF_INIT;
  assert_int_equal(bc_seq_get(v, 10, &b), 0); /* past the bound: leaf decides */
  assert_memory_equal(b.data, "L5:7", 4);
  assert_int_equal(bc_seq_get(v, 23, &b), BC_ERANGE);
  uint64_t n;
  assert_int_equal(bc_seq_len(v, &n), 0);
  assert_int_equal(n, 23);
  bc_seq_unref(v);
  bc_seq_unref(g);

  /* lazy slice with positive bounds; iteration finds the end */
  g = growing_leaf(5, 20, 2);
  assert_int_equal(bc_seq_slice(&v, g, 2, BC_NONE, 3), 0);
  assert_int_equal(bc_seq_length(v, false, &l), 0);
  assert_int_equal(l.kind, BC_LEN_AT_LEAST);
  bc_readahead *it;
  assert_int_equal(bc_seq_iterate(&it, v, 0, NULL), 0);
  const char *want[] = {"L5:2", "L5:5", "L5:8", "L5:11", "L5:14", "L5:17"};
  int count = 0, rc;
  while ((rc = bc_readahead_next(it, &b, NULL)) == 1) {
    assert_true(count < 6);
    assert_int_equal(b.size, strlen(want[count]));
    assert_memory_equal(b.data, want[count], b.size);
    count++;
  }
  assert_int_equal(rc, 0);
  assert_int_equal(count, 6);
  bc_readahead_close(it);
  bc_seq_unref(v);
  bc_seq_unref(g);

  /* negative bounds settle the length */
  g = growing_leaf(5, 20, 1);
  assert_int_equal(bc_seq_slice(&v, g, -3, BC_NONE, 1), 0);
  const uint64_t tail[] = {MODEL_ID(5, 17), MODEL_ID(5, 18), MODEL_ID(5, 19)};
  expect_ids(v, tail, 3);
  bc_seq_unref(v);
  bc_seq_unref(g);

  /* an unknown part before others is settled only when needed */
  g = growing_leaf(5, 4, 1);
  bc_seq *parts2[2] = {g, a};
  assert_int_equal(bc_seq_concat(&v, parts2, 2), 0);
  assert_int_equal(bc_seq_get(v, 0, &b), 0);
  assert_memory_equal(b.data, "L5:0", 4);
  assert_int_equal(bc_seq_get(v, 5, &b), 0);
  assert_memory_equal(b.data, "L1:1", 4);
  bc_seq_unref(v);
  bc_seq_unref(g);
  bc_seq_unref(a);
  bc_buf_release(&b);
}

/* A leaf of 4 records whose reads of index >= `gate_from` wait until the
 * gate opens. */
typedef struct {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  bool open;
  uint64_t gate_from;
} gate;

static int gated_get(void *payload, uint64_t index, bc_buf *out) {
  gate *g = payload;
  if (index >= 4) return bc_set_errmsg(BC_ERANGE, "past the end");
  if (index >= g->gate_from) {
    pthread_mutex_lock(&g->lock);
    while (!g->open) pthread_cond_wait(&g->cond, &g->lock);
    pthread_mutex_unlock(&g->lock);
  }
  if (out->capacity < 1) {
    unsigned char *d = realloc(out->data, 1);
    if (d == NULL) return BC_ENOMEM;
    out->data = d;
    out->capacity = 1;
  }
  out->data[0] = (unsigned char)('a' + index);
  out->size = 1;
  return 0;
}

/* bc_readahead_ready says whether the next record is there without
 * waiting for it, and never blocks itself. */
static void test_readahead_ready(void **state) {
  (void)state;
  gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 2};
  bc_callback_seq_options o = BC_CALLBACK_SEQ_OPTIONS_INIT;
  o.fixed_length = (bc_len){BC_LEN_EXACT, 4};
  o.get = gated_get;
  o.payload = &g;
  o.thread_safe = true;
  bc_seq *leaf;
  assert_int_equal(bc_seq_new_callbacks(&leaf, &o), 0);
  bc_readahead *it;
  bc_readahead_options ro = {BC_READAHEAD_OPTIONS_VERSION, 4, 2};
  assert_int_equal(bc_seq_iterate(&it, leaf, 0, &ro), 0);
  assert_false(bc_readahead_ready(it)); /* nothing asked for yet */
  bc_buf b = BC_BUF_INIT;
  assert_int_equal(bc_readahead_next(it, &b, NULL), 1); /* queues all four */
  assert_memory_equal(b.data, "a", 1);
  for (int k = 0; k < 1000 && !bc_readahead_ready(it); k++) usleep(1000);
  assert_true(bc_readahead_ready(it)); /* record 1 is not gated */
  assert_int_equal(bc_readahead_next(it, &b, NULL), 1);
  assert_memory_equal(b.data, "b", 1);
  usleep(20000);
  assert_false(bc_readahead_ready(it)); /* record 2 waits for the gate */
  pthread_mutex_lock(&g.lock);
  g.open = true;
  pthread_cond_broadcast(&g.cond);
  pthread_mutex_unlock(&g.lock);
  assert_int_equal(bc_readahead_next(it, &b, NULL), 1);
  assert_memory_equal(b.data, "c", 1);
  assert_int_equal(bc_readahead_next(it, &b, NULL), 1);
  assert_memory_equal(b.data, "d", 1);
  assert_int_equal(bc_readahead_next(it, &b, NULL), 0);
  assert_true(bc_readahead_ready(it)); /* finished: returns at once */
  bc_readahead_close(it);
  bc_seq_unref(leaf);
  bc_buf_release(&b);
}

/* Neither iterating nor measuring a bounded slice settles an unknown
 * length (for a filling cache, settling means draining the source). */
static void test_unknown_length_not_settled(void **state) {
  (void)state;
  bc_seq *g = growing_leaf(5, 20, 0), *v;
  bc_len l;
  bc_buf b = BC_BUF_INIT;
  bc_readahead *it;
  bc_readahead_options one = {BC_READAHEAD_OPTIONS_VERSION, 1, 1};
  assert_int_equal(bc_seq_iterate(&it, g, 0, &one), 0);
  assert_int_equal(bc_readahead_next(it, &b, NULL), 1);
  assert_memory_equal(b.data, "L5:0", 4);
  assert_int_equal(bc_seq_length(g, false, &l), 0);
  assert_int_equal(l.kind, BC_LEN_AT_LEAST); /* not drained to 20 */
  assert_true(l.value <= 3);
  int count = 1, rc;
  while ((rc = bc_readahead_next(it, &b, NULL)) == 1) count++;
  assert_int_equal(rc, 0);
  assert_int_equal(count, 20); /* ends at the first missing index */
  bc_readahead_close(it);
  bc_seq_unref(g);

  g = growing_leaf(5, 20, 1);
  assert_int_equal(bc_seq_slice(&v, g, 0, 5, 1), 0);
  uint64_t n;
  assert_int_equal(bc_seq_len(v, &n), 0);
  assert_int_equal(n, 5);
  assert_int_equal(bc_seq_length(g, false, &l), 0);
  assert_int_equal(l.kind, BC_LEN_AT_LEAST);
  assert_int_equal(l.value, 5); /* only the slice's last element was read */
  bc_seq_unref(v);
  assert_int_equal(bc_seq_slice(&v, g, 10, 40, 2), 0); /* past the end */
  assert_int_equal(bc_seq_len(v, &n), 0);
  assert_int_equal(n, 5); /* 10, 12, ..., 18 */
  bc_seq_unref(v);
  bc_seq_unref(g);
  bc_buf_release(&b);
}

static void test_endless(void **state) {
  (void)state;
  bc_seq *abc = array_leaf(1, 3, 1), *two = array_leaf(2, 2, 1), *r, *v;
  assert_int_equal(bc_seq_repeat(&r, abc, BC_REPEAT_FOREVER), 0);
  bc_len l;
  bc_buf b = BC_BUF_INIT;

  assert_int_equal(bc_seq_slice(&v, r, 5, BC_NONE, 2), 0);
  assert_int_equal(bc_seq_length(v, true, &l), 0);
  assert_int_equal(l.kind, BC_LEN_INFINITE);
  assert_int_equal(bc_seq_get(v, 0, &b), 0); /* r[5] = abc[2] */
  assert_memory_equal(b.data, "L1:2", 4);
  bc_seq_unref(v);
  assert_int_equal(bc_seq_slice(&v, r, 1, 11, 1), 0);
  uint64_t n;
  assert_int_equal(bc_seq_len(v, &n), 0);
  assert_int_equal(n, 10);
  bc_seq_unref(v);
  assert_int_equal(bc_seq_slice(&v, r, -1, BC_NONE, 1), BC_EINVAL);
  assert_int_equal(bc_seq_slice(&v, r, 0, 10, -1), BC_EINVAL);

  /* an endless part hides what follows it */
  bc_seq *parts[3] = {two, r, abc};
  assert_int_equal(bc_seq_concat(&v, parts, 3), 0);
  assert_int_equal(bc_seq_length(v, false, &l), 0);
  assert_int_equal(l.kind, BC_LEN_INFINITE);
  assert_int_equal(bc_seq_get(v, 1002, &b), 0); /* r[1000] = abc[1] */
  assert_memory_equal(b.data, "L1:1", 4);
  bc_seq_unref(v);

  /* interleave with an endless part keeps rotating over it alone */
  bc_seq *parts2[2] = {two, r};
  assert_int_equal(bc_seq_interleave(&v, parts2, 2), 0);
  const char *want[] = {"L2:0", "L1:0", "L2:1", "L1:1", "L1:2", "L1:0", "L1:1"};
  for (int k = 0; k < 7; k++) {
    assert_int_equal(bc_seq_get(v, k, &b), 0);
    assert_memory_equal(b.data, want[k], 4);
  }
  assert_int_equal(bc_seq_get(v, -1, &b), BC_EINFINITE);
  bc_seq_unref(v);

  /* shuffles need a length */
  assert_int_equal(bc_seq_chunk_shuffle(&v, r, 4, BC_LEN_ALL, 1), BC_EINVAL);
  assert_int_equal(bc_seq_chunk_shuffle(&v, r, 4, 100, 1), 0);
  assert_int_equal(bc_seq_len(v, &n), 0);
  assert_int_equal(n, 100);
  bc_seq_unref(v);

  /* iterating an endless sequence: stop whenever */
  bc_readahead *it;
  assert_int_equal(bc_seq_iterate(&it, r, 0, NULL), 0);
  for (int k = 0; k < 100; k++) assert_int_equal(bc_readahead_next(it, &b, NULL), 1);
  bc_readahead_close(it);

  bc_seq_unref(r);
  bc_seq_unref(abc);
  bc_seq_unref(two);
  bc_buf_release(&b);
}

/* ---- errors ------------------------------------------------------------------ */

static int failing_get(void *payload, uint64_t index, bc_buf *out) {
  (void)payload;
  if (index == 7) return bc_set_errmsg(BC_EIO, "boom at %llu", (unsigned long long)index);
  out->size = 0;
  return 0;
}

typedef struct {
  uint64_t next, fail_at;
} stream_state;

static int failing_stream(void *payload, uint64_t *index) {
  stream_state *s = payload;
  if (s->next == s->fail_at) return bc_set_errmsg(BC_EIO, "stream broke");
  *index = s->next++;
  return 1;
}

static void test_errors(void **state) {
  (void)state;
  bc_seq *a = array_leaf(1, 10, 1), *v;
  assert_int_equal(bc_seq_slice(&v, a, 0, 5, 0), BC_EINVAL);
  assert_int_equal(bc_seq_map(&v, a, affine_map, NULL, NULL,
                              (bc_len){BC_LEN_AT_LEAST, 3}), BC_EINVAL);
  assert_int_equal(bc_seq_concat(&v, NULL, 2), BC_EINVAL);
  bc_callback_seq_options none = BC_CALLBACK_SEQ_OPTIONS_INIT;
  assert_int_equal(bc_seq_new_callbacks(&v, &none), BC_EINVAL);
  bc_seq fake;
  bc_seq_ops bad = {.version = 99, .type_name = "bad"};
  assert_int_equal(bc_seq_init(&fake, &bad, 0), BC_EINVAL);

  /* a failing leaf: batch and read-ahead report it at the right place */
  bc_callback_seq_options o = BC_CALLBACK_SEQ_OPTIONS_INIT;
  o.fixed_length = (bc_len){BC_LEN_EXACT, 20};
  o.get = failing_get;
  o.thread_safe = true;
  bc_seq *f;
  assert_int_equal(bc_seq_new_callbacks(&f, &o), 0);
  int64_t idx[4] = {1, 7, 3, 7};
  bc_buf outs[4] = {BC_BUF_INIT, BC_BUF_INIT, BC_BUF_INIT, BC_BUF_INIT};
  assert_int_equal(bc_seq_get_many(f, idx, 4, outs), BC_EIO);
  assert_non_null(strstr(bc_errmsg(), "indices[1]"));
  assert_non_null(strstr(bc_errmsg(), "boom at 7"));
  bc_readahead *it;
  assert_int_equal(bc_seq_iterate(&it, f, 0, NULL), 0);
  bc_buf b = BC_BUF_INIT;
  for (int k = 0; k < 7; k++) assert_int_equal(bc_readahead_next(it, &b, NULL), 1);
  assert_int_equal(bc_readahead_next(it, &b, NULL), BC_EIO);
  assert_int_equal(bc_readahead_next(it, &b, NULL), 0);
  bc_readahead_close(it);
  bc_seq_unref(f);

  /* a failing index stream: records before it first, then its error */
  stream_state ss = {0, 5};
  bc_readahead_options ro = {BC_READAHEAD_OPTIONS_VERSION, 4, 2};
  assert_int_equal(bc_readahead_open(&it, a, failing_stream, &ss, &ro), 0);
  for (int k = 0; k < 5; k++) {
    uint64_t at;
    assert_int_equal(bc_readahead_next(it, &b, &at), 1);
    assert_int_equal(at, (uint64_t)k);
  }
  assert_int_equal(bc_readahead_next(it, &b, NULL), BC_EIO);
  assert_string_equal(bc_errmsg(), "stream broke");
  assert_int_equal(bc_readahead_next(it, &b, NULL), 0);
  bc_readahead_close(it);

  /* an index past the end from the stream is a range error there */
  ss = (stream_state){8, 1000};
  assert_int_equal(bc_readahead_open(&it, a, failing_stream, &ss, &ro), 0);
  assert_int_equal(bc_readahead_next(it, &b, NULL), 1);
  assert_int_equal(bc_readahead_next(it, &b, NULL), 1);
  assert_int_equal(bc_readahead_next(it, &b, NULL), BC_ERANGE);
  bc_readahead_close(it);

  /* a take with an out-of-range entry fails when read, not before */
  int64_t far[2] = {2, 10};
  assert_int_equal(bc_seq_take(&v, a, far, 2), 0);
  assert_int_equal(bc_seq_get(v, 0, &b), 0);
  assert_int_equal(bc_seq_get(v, 1, &b), BC_ERANGE);
  bc_seq_unref(v);
  bc_seq_unref(a);
  bc_buf_release(&b);
}

/* ---- shared take arrays are released ------------------------------------- */

static int released;
static void count_release(void *payload) {
  released += payload == (void *)&released;
}

static void test_take_shared(void **state) {
  (void)state;
  bc_seq *a = array_leaf(1, 5, 1), *v;
  int64_t idx[3] = {4, -5, 4};
  released = 0;
  assert_int_equal(bc_seq_take_shared(&v, a, idx, 3, count_release, &released), 0);
  const uint64_t want[] = {MODEL_ID(1, 4), MODEL_ID(1, 0), MODEL_ID(1, 4)};
  expect_ids(v, want, 3);
  idx[1] = 1; /* shared: a change shows through */
  bc_buf b = BC_BUF_INIT;
  assert_int_equal(bc_seq_get(v, 1, &b), 0);
  assert_memory_equal(b.data, "L1:1", 4);
  assert_int_equal(released, 0);
  bc_seq_unref(v);
  assert_int_equal(released, 1);
  bc_seq_unref(a);
  bc_buf_release(&b);
}

/* ---- a bag leaf ----------------------------------------------------------- */

static void test_bag_leaf(void **state) {
  (void)state;
  char dir[] = "/tmp/bc-seq-XXXXXX", path[64], spec[80];
  assert_non_null(mkdtemp(dir));
  /* two shards whose records read like array leaves 1 and 2 */
  for (int s = 0; s < 2; s++) {
    snprintf(path, sizeof path, "%s/part-%05d-of-00002.bagz", dir, s);
    bc_writer *w;
    assert_int_equal(bc_writer_open(&w, path, NULL), 0);
    for (int i = 0; i < 300; i++) {
      char text[32];
      model_record(MODEL_ID(s + 1, i), text);
      assert_int_equal(bc_writer_write(w, text, strlen(text)), 0);
    }
    assert_int_equal(bc_writer_close(w), 0);
    bc_writer_free(w);
  }
  snprintf(spec, sizeof spec, "%s/part@2.bagz", dir);
  bc_seq *bag, *sl, *sh;
  assert_int_equal(bc_seq_open_bag(&bag, spec, NULL), 0);
  assert_non_null(bc_seq_bag(bag));
  assert_string_equal(bc_seq_type_name(bag), "bag");
  model m1 = model_leaf(1, 300), m2 = model_leaf(2, 300), parts[2] = {m1, m2};
  model all = model_concat(parts, 2);
  check_against_model(bag, &all, 1);
  /* a stack of views over it */
  assert_int_equal(bc_seq_slice(&sl, bag, 550, 20, -3), 0);
  assert_int_equal(bc_seq_shuffle(&sh, sl, 77), 0);
  model sm = model_slice(&all, 550, 20, -3);
  uint64_t *perm = shuffle_perm(sm.len, 0, BC_LEN_ALL, 77);
  model shm = {malloc(sm.len * sizeof(uint64_t)), sm.len};
  for (size_t k = 0; k < sm.len; k++) shm.ids[k] = sm.ids[perm[k]];
  check_against_model(sh, &shm, 2);
  free(perm);
  model_free(&shm);
  model_free(&sm);
  model_free(&all);
  model_free(&m1);
  model_free(&m2);
  bc_seq_unref(sh);
  bc_seq_unref(sl);
  bc_seq_unref(bag);
  for (int s = 0; s < 2; s++) {
    snprintf(path, sizeof path, "%s/part-%05d-of-00002.bagz", dir, s);
    unlink(path);
  }
  rmdir(dir);
}

/* ---- concurrency ------------------------------------------------------------ */

typedef struct {
  bc_seq *seq;
  const model *m;
  int id;
} reader_arg;

static void *reader_thread(void *p) {
  reader_arg *r = p;
  for (int round = 0; round < 5; round++)
    check_against_model(r->seq, r->m, (uint64_t)(r->id * 100 + round));
  return NULL;
}

static void test_concurrent_readers(void **state) {
  (void)state;
  bc_seq *a = array_leaf(1, 200, 1), *b = array_leaf(2, 150, 1);
  bc_seq *g = growing_leaf(3, 50, 0); /* not thread-safe: serialised */
  bc_seq *parts[3] = {a, b, g}, *il, *sh;
  assert_int_equal(bc_seq_interleave(&il, parts, 3), 0);
  assert_int_equal(bc_seq_chunk_shuffle(&sh, il, 16, BC_LEN_ALL, 3), 0);
  model ms[3] = {model_leaf(1, 200), model_leaf(2, 150), model_leaf(3, 50)};
  model im = model_interleave(ms, 3);
  uint64_t *perm = shuffle_perm(im.len, 16, BC_LEN_ALL, 3);
  model m = {malloc(im.len * sizeof(uint64_t)), im.len};
  for (size_t k = 0; k < im.len; k++) m.ids[k] = im.ids[perm[k]];
  pthread_t t[4];
  reader_arg args[4];
  for (int k = 0; k < 4; k++) {
    args[k] = (reader_arg){sh, &m, k};
    pthread_create(&t[k], NULL, reader_thread, &args[k]);
  }
  for (int k = 0; k < 4; k++) pthread_join(t[k], NULL);
  free(perm);
  model_free(&m);
  model_free(&im);
  for (int k = 0; k < 3; k++) model_free(&ms[k]);
  bc_seq_unref(sh);
  bc_seq_unref(il);
  bc_seq_unref(a);
  bc_seq_unref(b);
  bc_seq_unref(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random_compositions),
      cmocka_unit_test(test_interleave_tables),
      cmocka_unit_test(test_chunk_shuffle_tables),
      cmocka_unit_test(test_repeat_tables),
      cmocka_unit_test(test_unknown_length),
      cmocka_unit_test(test_unknown_length_not_settled),
      cmocka_unit_test(test_readahead_ready),
      cmocka_unit_test(test_endless),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_take_shared),
      cmocka_unit_test(test_bag_leaf),
      cmocka_unit_test(test_concurrent_readers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
