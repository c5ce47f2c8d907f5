/*
 * tests/archive/test_archive_corrupt.c - damaged archives give clear
 * errors, never wrong bytes or a crash: a flipped byte, a truncated shard,
 * index rows past a shard's end or at a missing shard, garbage as the
 * index, an SQLite file that is not a barecat index, another schema major
 * version, a missing middle shard.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "../testutil.h"
#include "common.h"

#define N 40

static char *make(const char *dir, uint64_t limit) {
  char *path = tu_join(dir, "arch");
  bc_archive *a = ta_open_rw(path, limit);
  for (int i = 0; i < N; i++) {
    char *n = tu_format("f/%02d", i);
    unsigned char d[300];
    size_t size = 100 + (size_t)i;
    ta_content(n, size, d);
    assert_int_equal(bc_archive_add(a, n, d, size, NULL), 0);
    free(n);
  }
  assert_int_equal(bc_archive_close(a), 0);
  return path;
}

static void expect_ok(bc_archive *a, int i) {
  char *n = tu_format("f/%02d", i);
  unsigned char want[300], got[300];
  size_t size = 100 + (size_t)i, g = 0;
  ta_content(n, size, want);
  assert_int_equal(bc_archive_read(a, n, got, sizeof got, &g), 0);
  tu_assert_bytes(got, g, want, size, n);
  free(n);
}

/* Reads of file i fail with `code` and a message containing `msg`, and the
 * caller's buffer gets no wrong bytes reported as good. */
static void expect_bad(bc_archive *a, int i, int code, const char *msg) {
  char *n = tu_format("f/%02d", i);
  unsigned char got[300];
  void *p = (void *)1;
  size_t g = 0;
  assert_int_equal(bc_archive_read(a, n, got, sizeof got, &g), code);
  if (strstr(bc_errmsg(), msg) == NULL) fail_msg("'%s' lacks '%s'", bc_errmsg(), msg);
  assert_non_null(strstr(bc_errmsg(), n));
  assert_int_equal(bc_archive_read_alloc(a, n, &p, &g), code);
  assert_null(p);
  free(n);
}

static void test_flipped_byte(void **state) {
  char *dir = tu_tempdir(), *path = make(dir, 0), *s0 = ta_shard_path(path, 0);
  size_t size;
  unsigned char *b = tu_read_file(s0, &size);
  bc_archive *a;
  bc_archive_file_info fi;
  (void)state;
  a = ta_open_ro(path);
  assert_int_equal(bc_archive_stat(a, "f/07", &fi), 0);
  assert_int_equal(bc_archive_close(a), 0);
  b[fi.offset + 50] ^= 0x10;
  tu_write_file(s0, b, size);
  a = ta_open_ro(path);
  expect_bad(a, 7, BC_ECORRUPT, "CRC-32C mismatch");
  expect_ok(a, 6);
  expect_ok(a, 8);
  assert_int_equal(bc_archive_verify(a), BC_ECORRUPT);
  assert_non_null(strstr(bc_errmsg(), "'f/07'"));
  assert_int_equal(bc_archive_verify(a), BC_ECORRUPT);
  assert_int_equal(bc_archive_close(a), 0);
  free(b);
  free(s0);
  tu_rmtree(dir);
  free(path);
  free(dir);
}

static void test_truncated_shard(void **state) {
  char *dir = tu_tempdir(), *path = make(dir, 0), *s0 = ta_shard_path(path, 0);
  size_t size;
  unsigned char *b = tu_read_file(s0, &size);
  bc_archive *a;
  bc_archive_options o = BC_ARCHIVE_OPTIONS_INIT;
  (void)state;
  tu_write_file(s0, b, size - 10); /* cuts the last file, f/39 */
  a = ta_open_ro(path);
  expect_bad(a, N - 1, BC_ECORRUPT, "truncated shard or bad index row");
  expect_ok(a, N - 2);
  assert_int_equal(bc_archive_verify(a), BC_ECORRUPT);
  assert_non_null(strstr(bc_errmsg(), "'f/39'"));
  assert_int_equal(bc_archive_close(a), 0);
  /* A writer refuses it rather than append over the missing bytes. */
  o.readonly = false;
  assert_int_equal(bc_archive_open(&a, path, &o), BC_ECORRUPT);
  assert_non_null(strstr(bc_errmsg(), "index points at bytes up to"));
  free(b);
  free(s0);
  tu_rmtree(dir);
  free(path);
  free(dir);
}

static void test_rows_past_end(void **state) {
  char *dir = tu_tempdir(), *path = make(dir, 0);
  bc_archive *a;
  (void)state;
  ta_sql(path, "UPDATE files SET offset = 1000000 WHERE path = 'f/03';"
               "UPDATE files SET size = 4611686018427387904 WHERE path = 'f/04';"
               "UPDATE files SET shard = 7 WHERE path = 'f/05';"
               "UPDATE files SET offset = -5 WHERE path = 'f/06';"
               "UPDATE files SET offset = 9223372036854775807 WHERE path = 'f/09';");
  a = NULL;
  {
    bc_archive_options o = BC_ARCHIVE_OPTIONS_INIT;
    /* The index names shard 7 of 1: refused at open... */
    assert_int_equal(bc_archive_open(&a, path, &o), BC_ECORRUPT);
    assert_non_null(strstr(bc_errmsg(), "shard 00007"));
  }
  ta_sql(path, "UPDATE files SET shard = 0 WHERE path = 'f/05'");
  a = ta_open_ro(path);
  expect_bad(a, 3, BC_ECORRUPT, "truncated shard or bad index row");
  expect_bad(a, 4, BC_ECORRUPT, "truncated shard or bad index row");
  expect_bad(a, 6, BC_ECORRUPT, "not a non-negative integer");
  expect_bad(a, 9, BC_ECORRUPT, "f/09");
  expect_ok(a, 5);
  expect_ok(a, 10);
  assert_int_equal(bc_archive_verify(a), BC_ECORRUPT);
  assert_non_null(strstr(bc_errmsg(), "'f/03'"));
  assert_int_equal(bc_archive_close(a), 0);
  /* ...and a row at a missing shard added after the open is caught at the
   * read. */
  a = ta_open_ro(path);
  ta_sql(path, "UPDATE files SET shard = 3 WHERE path = 'f/05'");
  expect_bad(a, 5, BC_ECORRUPT, "does not exist");
  assert_int_equal(bc_archive_close(a), 0);
  tu_rmtree(dir);
  free(path);
  free(dir);
}

static void test_garbage_index(void **state) {
  char *dir = tu_tempdir(), *path = make(dir, 0), *ip = ta_index_path(path);
  unsigned char junk[8192];
  size_t size;
  unsigned char *after;
  bc_archive *a = NULL;
  bc_archive_options o = BC_ARCHIVE_OPTIONS_INIT;
  tu_rng r;
  (void)state;
  tu_rng_seed(&r, 5);
  tu_rng_fill(&r, junk, sizeof junk);
  tu_write_file(ip, junk, sizeof junk);
  assert_int_equal(bc_archive_open(&a, path, &o), BC_ECORRUPT);
  assert_non_null(strstr(bc_errmsg(), "not a database"));
  assert_null(a);
  o.readonly = false;
  assert_int_equal(bc_archive_open(&a, path, &o), BC_ECORRUPT);
  after = tu_read_file(ip, &size);
  tu_assert_bytes(after, size, junk, sizeof junk, "garbage index untouched");
  free(after);
  /* An SQLite database without barecat's tables. */
  unlink(ip);
  ta_sql(path, "CREATE TABLE t (x)");
  o.readonly = true;
  assert_int_equal(bc_archive_open(&a, path, &o), BC_ECORRUPT);
  assert_non_null(strstr(bc_errmsg(), "not a barecat index"));
  free(ip);
  tu_rmtree(dir);
  free(path);
  free(dir);
}

static void test_version_and_shards(void **state) {
  char *dir = tu_tempdir(), *path = make(dir, 1000), *s1 = ta_shard_path(path, 1);
  bc_archive *a = NULL;
  bc_archive_options o = BC_ARCHIVE_OPTIONS_INIT;
  (void)state;
  assert_true(tu_exists(s1));
  /* A missing middle shard is refused, not renumbered. */
  {
    char *tmp = tu_format("%s.away", s1);
    assert_int_equal(rename(s1, tmp), 0);
    assert_int_equal(bc_archive_open(&a, path, &o), BC_ECORRUPT);
    assert_non_null(strstr(bc_errmsg(), "arch-shard-00001 is missing"));
    o.readonly = false;
    assert_int_equal(bc_archive_open(&a, path, &o), BC_ECORRUPT);
    o.readonly = true;
    assert_int_equal(rename(tmp, s1), 0);
    free(tmp);
  }
  a = ta_open_ro(path);
  assert_int_equal(bc_archive_verify(a), 0);
  assert_int_equal(bc_archive_close(a), 0);
  ta_sql(path, "UPDATE config SET value_int = 1 WHERE key = 'schema_version_major'");
  assert_int_equal(bc_archive_open(&a, path, &o), BC_EVERSION);
  assert_non_null(strstr(bc_errmsg(), "version 1"));
  free(s1);
  tu_rmtree(dir);
  free(path);
  free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_flipped_byte),
      cmocka_unit_test(test_truncated_shard),
      cmocka_unit_test(test_rows_past_end),
      cmocka_unit_test(test_garbage_index),
      cmocka_unit_test(test_version_and_shards),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
