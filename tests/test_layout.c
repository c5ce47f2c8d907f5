/*
 * test_layout: how global indices map onto the shards of a set.
 *
 * CONCATENATED: shard 0's records, then shard 1's, ... (empty shards are
 * skipped).  INTERLEAVED: global g is record g / S of shard g % S, and a set
 * opens only when its shard sizes are non-increasing and all within one of
 * shard 0 (what round-robin writing produces).  Every case is checked
 * against a table computed here, by bc_bag_locate and by reading.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

typedef struct set {
  char *dir;
  char *spec; /* DIR/set@N.bag */
  size_t nshards;
  tu_records *shards; /* records of each shard: "s<shard>-r<i>" */
} set;

/* Writes a shard set with the given sizes into a fresh temporary dir. */
static void make_set(set *s, const size_t *sizes, size_t n) {
  s->dir = tu_tempdir();
  s->nshards = n;
  s->spec = tu_format("%s/set@%zu.bag", s->dir, n);
  s->shards = calloc(n, sizeof *s->shards);
  assert_non_null(s->shards);
  for (size_t k = 0; k < n; k++) {
    char label[32];
    snprintf(label, sizeof label, "s%zu", k);
    tu_records_labelled(&s->shards[k], label, sizes[k]);
    char *path = tu_format("%s/set-%05zu-of-%05zu.bag", s->dir, k, n);
    tu_write_bag(path, NULL, &s->shards[k]);
    free(path);
  }
}

static void free_set(set *s) {
  for (size_t k = 0; k < s->nshards; k++) tu_records_free(&s->shards[k]);
  free(s->shards);
  tu_rmtree(s->dir);
  free(s->dir);
  free(s->spec);
}

/* Checks that global index g is (want_shard, want_index) for locate, get,
 * get_view and get_many. */
static void check_entry(const bc_bag *bag, const set *s, uint64_t g,
                        size_t want_shard, uint64_t want_index) {
  size_t shard = 999;
  uint64_t index = 999;
  TU_OK(bc_bag_locate(bag, g, &shard, &index));
  if (shard != want_shard || index != want_index)
    fail_msg("global %llu located at (%zu, %llu), expected (%zu, %llu)",
             (unsigned long long)g, shard, (unsigned long long)index,
             want_shard, (unsigned long long)want_index);
  /* Either output may be NULL. */
  shard = 999;
  TU_OK(bc_bag_locate(bag, g, &shard, NULL));
  assert_int_equal(shard, want_shard);
  index = 999;
  TU_OK(bc_bag_locate(bag, g, NULL, &index));
  assert_int_equal(index, want_index);
  TU_OK(bc_bag_locate(bag, g, NULL, NULL));

  const tu_records *r = &s->shards[want_shard];
  bc_buf buf = BC_BUF_INIT;
  TU_OK(bc_bag_get(bag, g, &buf));
  TU_BUF_EQ(&buf, r->data[want_index], r->size[want_index]);
  bc_buf_release(&buf);

  const void *view = NULL;
  size_t size = 0;
  TU_OK(bc_bag_get_view(bag, g, &view, &size));
  tu_assert_bytes(view, size, r->data[want_index], r->size[want_index],
                  "get_view");
}

/* Reads every index with one bc_bag_get_many in reverse order and compares
 * with the table. */
static void check_many(const bc_bag *bag, const set *s, const size_t *shard_of,
                       const uint64_t *index_of, uint64_t len) {
  uint64_t *idx = calloc(len + 1, sizeof *idx);
  bc_buf *outs = calloc(len + 1, sizeof *outs);
  assert_true(idx != NULL && outs != NULL);
  for (uint64_t i = 0; i < len; i++) idx[i] = len - 1 - i;
  TU_OK(bc_bag_get_many(bag, idx, len, outs));
  for (uint64_t i = 0; i < len; i++) {
    const tu_records *r = &s->shards[shard_of[idx[i]]];
    tu_assert_bytes(outs[i].data, outs[i].size, r->data[index_of[idx[i]]],
                    r->size[index_of[idx[i]]], "get_many");
    bc_buf_release(&outs[i]);
  }
  free(outs);
  free(idx);
}

static void check_out_of_range(const bc_bag *bag) {
  uint64_t len = bc_bag_len(bag);
  bc_buf buf = BC_BUF_INIT;
  TU_RC(bc_bag_locate(bag, len, NULL, NULL), BC_ERANGE);
  TU_RC(bc_bag_locate(bag, UINT64_MAX, NULL, NULL), BC_ERANGE);
  TU_RC(bc_bag_get(bag, len, &buf), BC_ERANGE);
  bc_buf_release(&buf);
}

/* Opens `sizes` CONCATENATED and checks the whole table. */
static void check_concatenated(const size_t *sizes, size_t n) {
  set s;
  make_set(&s, sizes, n);
  bc_bag *bag = NULL;
  TU_OK(bc_bag_open(&bag, s.spec, NULL));
  assert_int_equal(bc_bag_shard_count(bag), n);

  uint64_t total = 0;
  for (size_t k = 0; k < n; k++) {
    bc_shard_info info;
    TU_OK(bc_bag_shard_info(bag, k, &info));
    assert_int_equal(info.records, sizes[k]);
    assert_null(info.limits_path);
    total += sizes[k];
  }
  assert_int_equal(bc_bag_len(bag), total);

  size_t *shard_of = calloc(total + 1, sizeof *shard_of);
  uint64_t *index_of = calloc(total + 1, sizeof *index_of);
  assert_true(shard_of != NULL && index_of != NULL);
  uint64_t g = 0;
  for (size_t k = 0; k < n; k++)
    for (size_t i = 0; i < sizes[k]; i++, g++) {
      shard_of[g] = k;
      index_of[g] = i;
    }
  for (g = 0; g < total; g++) check_entry(bag, &s, g, shard_of[g], index_of[g]);
  check_many(bag, &s, shard_of, index_of, total);
  check_out_of_range(bag);
  free(index_of);
  free(shard_of);
  bc_bag_close(bag);
  free_set(&s);
}

static void check_interleaved(const size_t *sizes, size_t n) {
  set s;
  make_set(&s, sizes, n);
  bc_reader_options ro = BC_READER_OPTIONS_INIT;
  ro.sharding_layout = BC_LAYOUT_INTERLEAVED;
  bc_bag *bag = NULL;
  TU_OK(bc_bag_open(&bag, s.spec, &ro));
  uint64_t total = 0;
  for (size_t k = 0; k < n; k++) total += sizes[k];
  assert_int_equal(bc_bag_len(bag), total);
  size_t *shard_of = calloc(total + 1, sizeof *shard_of);
  uint64_t *index_of = calloc(total + 1, sizeof *index_of);
  assert_true(shard_of != NULL && index_of != NULL);
  for (uint64_t g = 0; g < total; g++) {
    shard_of[g] = (size_t)(g % n);
    index_of[g] = g / n;
    check_entry(bag, &s, g, shard_of[g], index_of[g]);
  }
  check_many(bag, &s, shard_of, index_of, total);
  check_out_of_range(bag);
  free(index_of);
  free(shard_of);
  bc_bag_close(bag);
  free_set(&s);
}

static void check_interleaved_rejected(const size_t *sizes, size_t n) {
  set s;
  make_set(&s, sizes, n);
  bc_reader_options ro = BC_READER_OPTIONS_INIT;
  ro.sharding_layout = BC_LAYOUT_INTERLEAVED;
  bc_bag *bag = NULL;
  TU_RC(bc_bag_open(&bag, s.spec, &ro), BC_ECORRUPT);
  assert_null(bag);
  /* The same files are fine concatenated. */
  TU_OK(bc_bag_open(&bag, s.spec, NULL));
  bc_bag_close(bag);
  free_set(&s);
}

/* ---- tests ------------------------------------------------------------------ */

static void test_concatenated_8_4_0_5(void **state) {
  (void)state;
  const size_t sizes[] = {8, 4, 0, 5};
  set s;
  make_set(&s, sizes, 4);
  bc_bag *bag = NULL;
  TU_OK(bc_bag_open(&bag, s.spec, NULL));
  assert_int_equal(bc_bag_len(bag), 17);
  /* The spec's table: 0..7 -> shard 0, 8..11 -> shard 1, 12..16 -> shard 3. */
  for (uint64_t g = 0; g < 8; g++) check_entry(bag, &s, g, 0, g);
  for (uint64_t g = 8; g < 12; g++) check_entry(bag, &s, g, 1, g - 8);
  for (uint64_t g = 12; g < 17; g++) check_entry(bag, &s, g, 3, g - 12);
  check_out_of_range(bag);
  /* Records sections: "sK-rI" is 5 bytes each. */
  assert_true(bc_bag_bytes_per_record(bag) == 5.0);
  uint64_t file_bytes = 0;
  for (size_t k = 0; k < 4; k++) {
    bc_shard_info info;
    TU_OK(bc_bag_shard_info(bag, k, &info));
    char *want = tu_format("%s/set-%05zu-of-00004.bag", s.dir, k);
    assert_string_equal(info.path, want);
    free(want);
    assert_int_equal(info.records_bytes, 5 * sizes[k]);
    assert_int_equal(info.file_bytes, 13 * sizes[k]);
    assert_int_equal(info.compression, BC_COMPRESSION_NONE);
    file_bytes += info.file_bytes;
  }
  assert_int_equal(file_bytes, 17 * 13);
  bc_shard_info info;
  TU_RC(bc_bag_shard_info(bag, 4, &info), BC_ERANGE);
  bc_bag_close(bag);
  free_set(&s);
  check_concatenated(sizes, 4);

  /* An empty bag has 0 bytes per record. */
  TU_OK(bc_bag_open(&bag, "", NULL));
  assert_true(bc_bag_bytes_per_record(bag) == 0.0);
  bc_bag_close(bag);
}

static void test_concatenated_more(void **state) {
  (void)state;
  const size_t a[] = {0, 3, 0, 2};
  const size_t b[] = {0, 0, 0};
  const size_t c[] = {1};
  const size_t d[] = {5, 0, 0, 0, 1, 7};
  check_concatenated(a, 4);
  check_concatenated(b, 3);
  check_concatenated(c, 1);
  check_concatenated(d, 6);
}

static void test_interleaved_6_6_5(void **state) {
  (void)state;
  const size_t sizes[] = {6, 6, 5};
  set s;
  make_set(&s, sizes, 3);
  bc_reader_options ro = BC_READER_OPTIONS_INIT;
  ro.sharding_layout = BC_LAYOUT_INTERLEAVED;
  bc_bag *bag = NULL;
  TU_OK(bc_bag_open(&bag, s.spec, &ro));
  assert_int_equal(bc_bag_len(bag), 17);
  check_entry(bag, &s, 16, 1, 5);
  check_entry(bag, &s, 14, 2, 4);
  /* The full table, written out. */
  static const struct {
    size_t shard;
    uint64_t index;
  } table[17] = {{0, 0}, {1, 0}, {2, 0}, {0, 1}, {1, 1}, {2, 1},
                 {0, 2}, {1, 2}, {2, 2}, {0, 3}, {1, 3}, {2, 3},
                 {0, 4}, {1, 4}, {2, 4}, {0, 5}, {1, 5}};
  for (uint64_t g = 0; g < 17; g++)
    check_entry(bag, &s, g, table[g].shard, table[g].index);
  check_out_of_range(bag);
  bc_bag_close(bag);
  free_set(&s);
  check_interleaved(sizes, 3);
}

static void test_interleaved_accepted(void **state) {
  (void)state;
  const size_t a[] = {3, 3, 3};
  const size_t b[] = {1, 0, 0};
  const size_t c[] = {2, 2, 1, 1};
  const size_t d[] = {0, 0};
  const size_t e[] = {4};
  check_interleaved(a, 3);
  check_interleaved(b, 3);
  check_interleaved(c, 4);
  check_interleaved(d, 2);
  check_interleaved(e, 1);
}

static void test_interleaved_rejected(void **state) {
  (void)state;
  const size_t a[] = {8, 4, 0, 5};
  const size_t b[] = {5, 6};
  const size_t c[] = {6, 4};
  const size_t d[] = {2, 1, 2};
  const size_t e[] = {0, 1};
  const size_t f[] = {3, 3, 1};
  check_interleaved_rejected(a, 4);
  check_interleaved_rejected(b, 2);
  check_interleaved_rejected(c, 2);
  check_interleaved_rejected(d, 3);
  check_interleaved_rejected(e, 2);
  check_interleaved_rejected(f, 3);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_concatenated_8_4_0_5),
      cmocka_unit_test(test_concatenated_more),
      cmocka_unit_test(test_interleaved_6_6_5),
      cmocka_unit_test(test_interleaved_accepted),
      cmocka_unit_test(test_interleaved_rejected),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
