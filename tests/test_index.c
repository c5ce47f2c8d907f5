/*
 * test_index: bc_index_build / first / all / distinct against a model.
 *
 * The model answers by linear scan: the positions p (ascending) whose
 * record - bag record positions[p], or record p without a view - equals the
 * key.  Hash collisions cannot be forced through the public API, so the
 * byte comparison is exercised with many near-identical keys instead
 * (single-bit flips and prefixes of one base record).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* The records the index sees: view position p -> model record. */
typedef struct view_model {
  const tu_records *recs;
  const uint64_t *positions; /* NULL: identity */
  uint64_t count;
} view_model;

static const unsigned char *vm_data(const view_model *m, uint64_t p, size_t *n) {
  uint64_t r = m->positions ? m->positions[p] : p;
  *n = m->recs->size[r];
  return m->recs->data[r];
}

/* Positions of `key` by linear scan, ascending (malloc'd; *count may be 0). */
static uint64_t *vm_find(const view_model *m, const void *key, size_t size,
                         uint64_t *count) {
  uint64_t *out = calloc(m->count + 1, sizeof *out);
  assert_non_null(out);
  *count = 0;
  for (uint64_t p = 0; p < m->count; p++) {
    size_t n;
    const unsigned char *d = vm_data(m, p, &n);
    if (n == size && (size == 0 || memcmp(d, key, size) == 0)) out[(*count)++] = p;
  }
  return out;
}

static uint64_t vm_distinct(const view_model *m) {
  uint64_t distinct = 0;
  for (uint64_t p = 0; p < m->count; p++) {
    size_t n;
    const unsigned char *d = vm_data(m, p, &n);
    uint64_t c;
    uint64_t *pos = vm_find(m, d, n, &c);
    if (pos[0] == p) distinct++; /* p is the first of its kind */
    free(pos);
  }
  return distinct;
}

/* Checks first/all for one key against the model. */
static void check_key(const bc_index *ix, const view_model *m, const void *key,
                      size_t size) {
  uint64_t want_count;
  uint64_t *want = vm_find(m, key, size, &want_count);
  uint64_t first = 777;
  const uint64_t *all = NULL;
  uint64_t count = 777;
  if (want_count == 0) {
    TU_RC(bc_index_first(ix, key, size, &first), BC_ENOTFOUND);
    TU_RC(bc_index_all(ix, key, size, &all, &count), BC_ENOTFOUND);
  } else {
    TU_OK(bc_index_first(ix, key, size, &first));
    assert_int_equal(first, want[0]);
    TU_OK(bc_index_all(ix, key, size, &all, &count));
    assert_int_equal(count, want_count);
    for (uint64_t i = 0; i < count; i++) assert_int_equal(all[i], want[i]);
  }
  free(want);
}

/* Every record of the view as a key, plus keys that are near misses. */
static void check_all_keys(const bc_index *ix, const view_model *m) {
  assert_int_equal(bc_index_distinct(ix), vm_distinct(m));
  size_t longest = 0;
  for (uint64_t p = 0; p < m->count; p++) {
    size_t n;
    vm_data(m, p, &n);
    if (n > longest) longest = n;
  }
  unsigned char *tmp = malloc(longest + 1);
  assert_non_null(tmp);
  for (uint64_t p = 0; p < m->count; p++) {
    size_t n;
    const unsigned char *d = vm_data(m, p, &n);
    check_key(ix, m, d, n);
    /* One byte longer, one byte shorter, last byte changed. */
    memcpy(tmp, d, n);
    tmp[n] = 'Z';
    check_key(ix, m, tmp, n + 1);
    if (n > 0) {
      check_key(ix, m, tmp, n - 1);
      tmp[n - 1] ^= 0x40;
      check_key(ix, m, tmp, n);
    }
  }
  check_key(ix, m, "never stored", 12);
  check_key(ix, m, "", 0);
  free(tmp);
}

/* A set with duplicates and empty records: values drawn from a small pool. */
static void dup_records(tu_records *out, size_t count, uint64_t seed) {
  tu_rng rng;
  tu_rng_seed(&rng, seed);
  tu_records pool = {0};
  tu_records_add(&pool, "", 0);
  unsigned char buf[3000];
  for (int i = 0; i < 40; i++) {
    size_t n = 1 + (size_t)tu_rng_below(&rng, i % 5 == 0 ? sizeof buf : 40);
    tu_rng_fill(&rng, buf, n);
    tu_records_add(&pool, buf, n);
  }
  for (size_t i = 0; i < count; i++) {
    size_t j = (size_t)tu_rng_below(&rng, pool.count);
    tu_records_add(out, pool.data[j], pool.size[j]);
  }
  tu_records_free(&pool);
}

static void test_model(void **state) {
  (void)state;
  tu_records recs = {0};
  dup_records(&recs, 600, 5);
  char *tmp = tu_tempdir();
  const char *names[] = {"i.bag", "i.bagz"};
  for (size_t f = 0; f < 2; f++) {
    char *path = tu_join(tmp, names[f]);
    tu_write_bag(path, NULL, &recs);
    bc_bag *bag = NULL;
    TU_OK(bc_bag_open(&bag, path, NULL));
    bc_index *ix = NULL;
    TU_OK(bc_index_build(&ix, bag, NULL, recs.count));
    view_model m = {&recs, NULL, recs.count};
    check_all_keys(ix, &m);
    bc_index_free(ix);

    /* A view with repeats and in no particular order. */
    tu_rng rng;
    tu_rng_seed(&rng, 99 + f);
    uint64_t nview = 900;
    uint64_t *view = calloc(nview, sizeof *view);
    assert_non_null(view);
    for (uint64_t p = 0; p < nview; p++)
      view[p] = p % 7 == 0 ? 3 : tu_rng_below(&rng, recs.count);
    TU_OK(bc_index_build(&ix, bag, view, nview));
    /* The positions are copied: scribbling on ours changes nothing. */
    uint64_t *saved = malloc(nview * sizeof *saved);
    assert_non_null(saved);
    memcpy(saved, view, nview * sizeof *view);
    memset(view, 0, nview * sizeof *view);
    view_model mv = {&recs, saved, nview};
    check_all_keys(ix, &mv);
    bc_index_free(ix);
    free(saved);
    free(view);

    bc_bag_close(bag);
    free(path);
  }
  tu_rmtree(tmp);
  free(tmp);
  tu_records_free(&recs);
}

static void test_near_identical_keys(void **state) {
  (void)state;
  tu_rng rng;
  tu_rng_seed(&rng, 17);
  enum { BASE = 300, FLIPS = 2000 };
  unsigned char base[BASE], key[BASE];
  tu_rng_fill(&rng, base, BASE);
  tu_records recs = {0};
  for (size_t bit = 0; bit < FLIPS; bit++) {
    memcpy(key, base, BASE);
    key[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    tu_records_add(&recs, key, BASE);
  }
  for (size_t len = 0; len <= BASE; len++) tu_records_add(&recs, base, len);

  char *tmp = tu_tempdir();
  char *path = tu_join(tmp, "near.bag");
  tu_write_bag(path, NULL, &recs);
  bc_bag *bag = NULL;
  TU_OK(bc_bag_open(&bag, path, NULL));
  bc_index *ix = NULL;
  TU_OK(bc_index_build(&ix, bag, NULL, recs.count));
  assert_int_equal(bc_index_distinct(ix), FLIPS + BASE + 1);
  for (uint64_t p = 0; p < recs.count; p++) {
    uint64_t got = 0;
    TU_OK(bc_index_first(ix, recs.data[p], recs.size[p], &got));
    assert_int_equal(got, p);
    const uint64_t *all;
    uint64_t count;
    TU_OK(bc_index_all(ix, recs.data[p], recs.size[p], &all, &count));
    assert_int_equal(count, 1);
    assert_int_equal(all[0], p);
  }
  /* Two flipped bits: never stored. */
  for (size_t bit = 0; bit + 1 < FLIPS; bit += 97) {
    memcpy(key, base, BASE);
    key[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    key[(bit + 1) / 8] ^= (unsigned char)(1u << ((bit + 1) % 8));
    uint64_t got;
    TU_RC(bc_index_first(ix, key, BASE, &got), BC_ENOTFOUND);
  }
  bc_index_free(ix);
  bc_bag_close(bag);
  free(path);
  tu_rmtree(tmp);
  free(tmp);
  tu_records_free(&recs);
}

static void test_errors_and_edges(void **state) {
  (void)state;
  char *dir = tu_data_dir();
  char *mixed = tu_join(dir, "mixed.bag");
  bc_bag *bag = NULL;
  TU_OK(bc_bag_open(&bag, mixed, NULL));
  bc_index *ix = NULL;

  /* A position past the end. */
  const uint64_t bad[] = {0, 3, 8};
  TU_RC(bc_index_build(&ix, bag, bad, 3), BC_ERANGE);
  assert_null(ix);
  const uint64_t huge[] = {UINT64_MAX};
  TU_RC(bc_index_build(&ix, bag, huge, 1), BC_ERANGE);
  assert_null(ix);
  /* Without a view, count must be the bag's length. */
  TU_RC(bc_index_build(&ix, bag, NULL, 5), BC_EINVAL);
  assert_null(ix);

  /* An empty view over a non-empty bag. */
  TU_OK(bc_index_build(&ix, bag, bad, 0));
  assert_int_equal(bc_index_distinct(ix), 0);
  uint64_t pos;
  TU_RC(bc_index_first(ix, "", 0, &pos), BC_ENOTFOUND);
  bc_index_free(ix);
  bc_index_free(NULL);
  bc_bag_close(bag);

  /* An empty bag. */
  TU_OK(bc_bag_open(&bag, "", NULL));
  TU_OK(bc_index_build(&ix, bag, NULL, 0));
  assert_int_equal(bc_index_distinct(ix), 0);
  TU_RC(bc_index_first(ix, "a", 1, &pos), BC_ENOTFOUND);
  bc_index_free(ix);
  bc_bag_close(bag);

  /* A read error during the build is the build's error ... */
  const char *corrupt[] = {"corrupt/bad_frame.bagz", "corrupt/truncated_frame.bagz",
                           "corrupt/non_monotonic.bag", "corrupt/separate_past_eof.bag"};
  for (size_t c = 0; c < 4; c++) {
    char *p = tu_join(dir, corrupt[c]);
    bc_reader_options ro = BC_READER_OPTIONS_INIT;
    if (c == 3) ro.limits_placement = BC_LIMITS_SEPARATE;
    TU_OK(bc_bag_open(&bag, p, &ro));
    ix = NULL;
    TU_RC(bc_index_build(&ix, bag, NULL, bc_bag_len(bag)), BC_ECORRUPT);
    assert_null(ix);
    bc_bag_close(bag);
    free(p);
  }
  /* ... but a view that avoids the bad record builds and finds. */
  char *p = tu_join(dir, "corrupt/bad_frame.bagz");
  TU_OK(bc_bag_open(&bag, p, NULL));
  const uint64_t good[] = {1, 1};
  TU_OK(bc_index_build(&ix, bag, good, 2));
  assert_int_equal(bc_index_distinct(ix), 1);
  TU_OK(bc_index_first(ix, "hello world", 11, &pos));
  assert_int_equal(pos, 0);
  const uint64_t *all;
  uint64_t count;
  TU_OK(bc_index_all(ix, "hello world", 11, &all, &count));
  assert_int_equal(count, 2);
  assert_int_equal(all[0], 0);
  assert_int_equal(all[1], 1);
  bc_index_free(ix);
  bc_bag_close(bag);
  free(p);

  free(mixed);
  free(dir);
}

static void test_golden_mixed(void **state) {
  (void)state;
  tu_records recs = {0};
  tu_manifest_vector_records("mixed_zstd", &recs);
  char *dir = tu_data_dir();
  char *p = tu_join(dir, "mixed.bagz");
  bc_bag *bag = NULL;
  TU_OK(bc_bag_open(&bag, p, NULL));
  bc_index *ix = NULL;
  TU_OK(bc_index_build(&ix, bag, NULL, bc_bag_len(bag)));
  /* 8 records, the empty one three times (0, 3, 7). */
  assert_int_equal(bc_index_distinct(ix), 6);
  const uint64_t *all;
  uint64_t count;
  TU_OK(bc_index_all(ix, "", 0, &all, &count));
  assert_int_equal(count, 3);
  assert_int_equal(all[0], 0);
  assert_int_equal(all[1], 3);
  assert_int_equal(all[2], 7);
  view_model m = {&recs, NULL, recs.count};
  check_all_keys(ix, &m);
  bc_index_free(ix);
  bc_bag_close(bag);
  free(p);
  free(dir);
  tu_records_free(&recs);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_model),
      cmocka_unit_test(test_near_identical_keys),
      cmocka_unit_test(test_errors_and_edges),
      cmocka_unit_test(test_golden_mixed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
