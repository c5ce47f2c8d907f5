/*
 * A cache's read_into (src/cache/read_into.c, issue 17): bc_seq_read_into
 * over a cache reads each shard's rows through one reader, straight into
 * the caller's rows.  (On the build before it, test_rows_exact fails: the
 * cache had no read_into; the other tests held there too, through `get`.)  Checked against the generator's model: exact bytes
 * for indices across shards in any order (repeats, shards not filled yet,
 * the short last shard, raw and zstd shards, through the worker pool), the
 * same errors as single reads (past the end, a record of another size, a
 * failing source), a damaged shard regenerated as a single read does, and
 * the hits counter as single reads count it.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "seq/internal.h"
#include "fixture.h"

#define N 95 /* shards of 10: the last one (90..95) is short */
#define R 10
#define ROW 32 /* a fixed record of the model: "rec-%08llu" + 20 bytes */

/* The model's fixed-size records, N of them. */
static ts_config model(void) {
  ts_config cfg = ts_config_default(N);
  cfg.fixed = true;
  return cfg;
}

/* Shards of R records, every fill in the reading thread. */
static bc_cache_options options(bc_compression compression) {
  bc_cache_options o = fx_quiet_options(R);
  o.compression = compression;
  return o;
}

/* Fails unless rows[k] is model record idx[k] (indices counted from the
 * end when negative). */
static void check_rows(const unsigned char *rows, const int64_t *idx, size_t n) {
  unsigned char want[TS_MAX_RECORD];
  for (size_t k = 0; k < n; k++) {
    uint64_t i = idx[k] < 0 ? (uint64_t)(N + idx[k]) : (uint64_t)idx[k];
    assert_int_equal(ts_record(i, true, 0, want), ROW);
    if (memcmp(rows + k * ROW, want, ROW) != 0)
      fail_msg("row %zu (record %llu) is not the model's", k, (unsigned long long)i);
  }
}

/* The cache leaf has a read_into of its own, and it reads rows exactly:
 * shards filled by the read itself, repeats, any order, the short last
 * shard, negative indices, at parallelism 1 and 4. */
static void rows_exact(fixture *f, bc_compression compression) {
  ts_config cfg = model();
  bc_cache_options o = options(compression);
  fx_open(f, &cfg, &o);
  bc_seq *seq = bc_cache_seq(f->c);
  assert_non_null(bc__seq_read_into_op(seq));
  int64_t idx[] = {94, 3, 57, 3, 0, 90, 41, 42, 19, -1, 20, 88, 57, 9, 10};
  size_t n = sizeof idx / sizeof *idx;
  unsigned char *rows = malloc(n * ROW);
  assert_non_null(rows);
  for (int par = 1; par <= 4; par += 3) {
    memset(rows, 0xAA, n * ROW);
    CU_OK(bc_seq_read_into(seq, idx, n, rows, ROW, par));
    check_rows(rows, idx, n);
  }
  /* Every index of the cache, in one batch. */
  int64_t all[N];
  unsigned char *every = malloc(N * ROW);
  assert_non_null(every);
  for (int64_t i = 0; i < N; i++) all[i] = (i * 37) % N;
  CU_OK(bc_seq_read_into(seq, all, N, every, ROW, 0));
  check_rows(every, all, N);
  bc_cache_stats st;
  CU_OK(bc_cache_stats_get(f->c, &st));
  assert_int_equal(st.fills, (N + R - 1) / R); /* each shard filled once */
  free(every);
  free(rows);
}

static void test_rows_exact(void **state) { rows_exact(*state, BC_COMPRESSION_NONE); }
static void test_rows_exact_zstd(void **state) {
  rows_exact(*state, BC_COMPRESSION_ZSTD);
}

/* Shards of one record: a batch spread over more shards than twice its
 * size is grouped by a comparison sort instead of a counting sort; the
 * rows are the same. */
static void test_rows_over_many_shards(void **state) {
  fixture *f = *state;
  ts_config cfg = model();
  bc_cache_options o = fx_quiet_options(1);
  fx_open(f, &cfg, &o);
  int64_t idx[] = {94, 0, 50, 94, 1};
  unsigned char rows[5 * ROW];
  CU_OK(bc_seq_read_into(bc_cache_seq(f->c), idx, 5, rows, ROW, 1));
  check_rows(rows, idx, 5);
  int64_t near[] = {3, 2, 3};
  CU_OK(bc_seq_read_into(bc_cache_seq(f->c), near, 3, rows, ROW, 1));
  check_rows(rows, near, 3);
}

/* The hits counter counts a batch's records as single reads would: the
 * same batch read singly on a second cache of the same source counts the
 * same hits (and opens the same shards). */
static void test_hits_as_single_reads(void **state) {
  fixture *f = *state;
  int64_t idx[] = {5, 6, 15, 5, 25, 26, 27, 7, 16};
  size_t n = sizeof idx / sizeof *idx;
  unsigned char rows[sizeof idx / sizeof *idx * ROW];
  ts_config cfg = model();
  bc_cache_options o = options(BC_COMPRESSION_NONE);
  fx_open(f, &cfg, &o);
  CU_OK(bc_cache_fill_all(f->c));
  fx_reopen(f, &cfg, &o); /* fresh counters, every shard present */
  CU_OK(bc_seq_read_into(bc_cache_seq(f->c), idx, n, rows, ROW, 1));
  CU_OK(bc_seq_read_into(bc_cache_seq(f->c), idx, n, rows, ROW, 1));
  bc_cache_stats batch;
  CU_OK(bc_cache_stats_get(f->c, &batch));
  fx_reopen(f, &cfg, &o);
  bc_buf b = BC_BUF_INIT;
  for (int round = 0; round < 2; round++)
    for (size_t k = 0; k < n; k++) CU_OK(bc_cache_get(f->c, idx[k], &b));
  bc_buf_release(&b);
  bc_cache_stats single;
  CU_OK(bc_cache_stats_get(f->c, &single));
  assert_int_equal(batch.hits, single.hits);
  assert_int_equal(batch.shard_opens, single.shard_opens);
  check_rows(rows, idx, n);
}

/* Errors are those of the first failing position, as single reads give
 * them: past the end (after the source ended), a record of another size. */
static void test_errors_as_single_reads(void **state) {
  fixture *f = *state;
  ts_config cfg = model();
  bc_cache_options o = options(BC_COMPRESSION_NONE);
  fx_open(f, &cfg, &o);
  bc_seq *seq = bc_cache_seq(f->c);
  unsigned char rows[4 * ROW];
  int64_t past[] = {1, 94, 95, 2};
  CU_RC(bc_seq_read_into(seq, past, 4, rows, ROW, 1), BC_ERANGE);
  assert_non_null(strstr(bc_errmsg(), "indices[2] = 95"));
  /* Known final now: the same again, and far past the end too. */
  CU_RC(bc_seq_read_into(seq, past, 4, rows, ROW, 1), BC_ERANGE);
  int64_t far[] = {3, 1000};
  CU_RC(bc_seq_read_into(seq, far, 2, rows, ROW, 1), BC_ERANGE);
  assert_non_null(strstr(bc_errmsg(), "indices[1] = 1000"));
  /* Rows of 31 bytes: the first position's record is named. */
  int64_t some[] = {12, 4};
  CU_RC(bc_seq_read_into(seq, some, 2, rows, ROW - 1, 1), BC_EINVAL);
  assert_non_null(strstr(bc_errmsg(), "record 12 (indices[0]) has 32 bytes"));
}

/* A source failing while a batch fills its shard: the batch fails with the
 * source's code, and succeeds once the source does. */
static void test_source_failure(void **state) {
  fixture *f = *state;
  ts_config cfg = model();
  cfg.fail_at = 33;
  cfg.fail_times = 1;
  cfg.fail_code = BC_EIO;
  bc_cache_options o = options(BC_COMPRESSION_NONE);
  fx_open(f, &cfg, &o);
  unsigned char rows[3 * ROW];
  int64_t idx[] = {2, 35, 4};
  int rc = bc_seq_read_into(bc_cache_seq(f->c), idx, 3, rows, ROW, 1);
  CU_RC(rc, BC_EIO);
  CU_OK(bc_seq_read_into(bc_cache_seq(f->c), idx, 3, rows, ROW, 1));
  check_rows(rows, idx, 3);
}

/* A shard whose bytes changed on disk under the mapping: the batch
 * regenerates it, as a single read does, and serves the model's bytes. */
static void test_damaged_shard_regenerated(void **state) {
  fixture *f = *state;
  ts_config cfg = model();
  bc_cache_options o = options(BC_COMPRESSION_NONE);
  cu_notices_capture();
  fx_open(f, &cfg, &o);
  CU_OK(bc_cache_fill_all(f->c));
  int64_t idx[] = {21, 3, 28, 22};
  unsigned char rows[4 * ROW];
  CU_OK(bc_seq_read_into(bc_cache_seq(f->c), idx, 4, rows, ROW, 1)); /* mapped */
  char *shards = fx_shards_dir(f);
  char *path = cu_path(shards, "20.30.bag");
  int fd = open(path, O_RDWR);
  assert_true(fd >= 0);
  unsigned char c = 0;
  assert_int_equal(pread(fd, &c, 1, 8 * ROW + 5), 1); /* record 28 */
  c ^= 0x10;
  assert_int_equal(pwrite(fd, &c, 1, 8 * ROW + 5), 1);
  close(fd);
  memset(rows, 0, sizeof rows);
  CU_OK(bc_seq_read_into(bc_cache_seq(f->c), idx, 4, rows, ROW, 1));
  check_rows(rows, idx, 4);
  bc_cache_stats st;
  CU_OK(bc_cache_stats_get(f->c, &st));
  assert_int_equal(st.regenerations, 1);
  assert_true(cu_notice_seen("regenerating"));
  free(path);
  free(shards);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_rows_exact, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_rows_exact_zstd, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_rows_over_many_shards, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_hits_as_single_reads, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_errors_as_single_reads, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_source_failure, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_damaged_shard_regenerated, fx_setup, fx_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
