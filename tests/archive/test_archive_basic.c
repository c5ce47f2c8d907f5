/*
 * tests/archive/test_archive_basic.c - round trips, paths, sharding,
 * read-only archives, open options and threaded reads of bc_archive.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "../testutil.h"
#include "common.h"
#include "common/crc32c.h"

#define NFILES 300

static char *name_of(int i) {
  switch (i % 5) {
    case 0: return tu_format("top-%d", i);
    case 1: return tu_format("d%d/e%d/f-%d.bin", i % 3, i % 4, i);
    case 2: return tu_format("ünï/日本語/файл-%d", i);
    case 3: return tu_format("deep/a/b/c/d/e/f/g/h/%d", i);
    default: return tu_format("sp ace/%d with space", i);
  }
}

static void check_file(bc_archive *a, const char *name) {
  size_t size = ta_size(name, 5000), got = 0;
  unsigned char *want = malloc(size + 1), *buf = malloc(size + 1);
  void *alloc = NULL;
  bc_archive_file_info fi;
  ta_content(name, size, want);
  assert_int_equal(bc_archive_read(a, name, buf, size, &got), 0);
  tu_assert_bytes(buf, got, want, size, name);
  assert_int_equal(bc_archive_read_alloc(a, name, &alloc, &got), 0);
  tu_assert_bytes(alloc, got, want, size, name);
  assert_int_equal(bc_archive_stat(a, name, &fi), 0);
  assert_int_equal(fi.size, size);
  assert_true(fi.has_crc32c);
  assert_int_equal(fi.crc32c, bc__crc32c(0, want, size));
  assert_int_equal(fi.mode, 0100644);
  assert_int_equal(fi.mtime_ns, (int64_t)size * 1000 + 7);
  assert_int_equal(fi.uid, BC_ARCHIVE_UNSET);
  if (size > 0) {
    assert_int_equal(bc_archive_read(a, name, buf, size - 1, &got), BC_ERANGE);
    assert_int_equal(got, size);
  }
  assert_int_equal(bc_archive_isfile(a, name), 1);
  assert_int_equal(bc_archive_isdir(a, name), 0);
  free(alloc);
  free(want);
  free(buf);
}

static void add_file(bc_archive *a, const char *name) {
  size_t size = ta_size(name, 5000);
  unsigned char *data = malloc(size + 1);
  bc_archive_file_meta m = BC_ARCHIVE_FILE_META_INIT;
  ta_content(name, size, data);
  m.mode = 0100644;
  m.mtime_ns = (int64_t)size * 1000 + 7;
  if (bc_archive_add(a, name, data, size, &m) != 0)
    fail_msg("add %s: %s", name, bc_errmsg());
  free(data);
}

static int cmp_str(const void *x, const void *y) {
  return strcmp(*(char *const *)x, *(char *const *)y);
}

static void test_round_trip(void **state) {
  char *dir = tu_tempdir(), *path = tu_join(dir, "arch");
  bc_archive *a = ta_open_rw(path, 0);
  uint64_t total = 0, empties = 0;
  (void)state;
  for (int i = 0; i < NFILES; i++) {
    char *n = name_of(i);
    add_file(a, n);
    total += ta_size(n, 5000);
    empties += ta_size(n, 5000) == 0;
    free(n);
  }
  assert_true(empties > 0);
  /* Visible to the writer before any commit. */
  for (int i = 0; i < NFILES; i += 17) {
    char *n = name_of(i);
    check_file(a, n);
    free(n);
  }
  assert_int_equal(bc_archive_close(a), 0);
  a = ta_open_ro(path);
  assert_int_equal(bc_archive_num_files(a), NFILES);
  assert_int_equal(bc_archive_total_size(a), (int64_t)total);
  for (int i = 0; i < NFILES; i++) {
    char *n = name_of(i);
    check_file(a, n);
    free(n);
  }
  assert_int_equal(bc_archive_isdir(a, "ünï/日本語"), 1);
  assert_int_equal(bc_archive_isdir(a, ""), 1);
  assert_int_equal(bc_archive_exists(a, "deep/a/b"), 1);
  assert_int_equal(bc_archive_exists(a, "deep/a/bb"), 0);
  assert_int_equal(bc_archive_read(a, "nope", NULL, 0, NULL), BC_ENOTFOUND);
  assert_int_equal(bc_archive_read(a, "deep", NULL, 0, NULL), BC_ENOTFOUND);
  /* listdir of the root against the reference. */
  {
    bc_archive_dirent *e = NULL;
    size_t n = 0, nf = 0;
    const char *dirs[] = {"d0", "d1", "d2", "deep", "sp ace", "ünï"};
    char *files[NFILES];
    assert_int_equal(bc_archive_listdir(a, "/", &e, &n), 0);
    for (int i = 0; i < NFILES; i += 5) files[nf++] = name_of(i);
    qsort(files, nf, sizeof files[0], cmp_str);
    assert_int_equal(n, 6 + nf);
    for (size_t i = 0; i < 6; i++) {
      assert_string_equal(e[i].name, dirs[i]);
      assert_true(e[i].is_dir);
    }
    for (size_t i = 0; i < nf; i++) {
      assert_string_equal(e[6 + i].name, files[i]);
      assert_false(e[6 + i].is_dir);
      free(files[i]);
    }
    free(e);
    assert_int_equal(bc_archive_listdir(a, "deep/a/b/c/d/e/f/g", &e, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(e[0].name, "h");
    assert_true(e[0].is_dir);
    free(e);
    assert_int_equal(bc_archive_listdir(a, "top-0", &e, &n), BC_ENOTFOUND);
  }
  assert_int_equal(bc_archive_verify(a), 0);
  assert_int_equal(bc_archive_verify(a), 0); /* barecat's second call fails */
  assert_int_equal(bc_archive_close(a), 0);
  /* Appending to the archive keeps what it had. */
  a = ta_open_rw(path, 0);
  add_file(a, "later/one");
  assert_int_equal(bc_archive_num_files(a), NFILES + 1);
  assert_int_equal(bc_archive_close(a), 0);
  a = ta_open_ro(path);
  check_file(a, "later/one");
  check_file(a, "top-0");
  assert_int_equal(bc_archive_close(a), 0);
  /* The files barecat has: no bare NAME. */
  assert_false(tu_exists(path));
  tu_rmtree(dir);
  free(path);
  free(dir);
}

static void test_paths(void **state) {
  char *dir = tu_tempdir(), *path = tu_join(dir, "arch");
  bc_archive *a = ta_open_rw(path, 0);
  char *s0 = ta_shard_path(path, 0);
  size_t before, after;
  unsigned char *b;
  (void)state;
  assert_int_equal(bc_archive_add(a, "/a//b/./c", "xyz", 3, NULL), 0);
  assert_int_equal(bc_archive_isfile(a, "a/b/c"), 1);
  assert_int_equal(bc_archive_isdir(a, "/a/b/"), 1);
  assert_int_equal(bc_archive_isfile(a, "a/x/../b/c"), 1);
  assert_int_equal(bc_archive_add(a, "../up", "x", 1, NULL), BC_EINVAL);
  assert_int_equal(bc_archive_add(a, "", "x", 1, NULL), BC_EINVAL);
  assert_int_equal(bc_archive_add(a, "/", "x", 1, NULL), BC_EINVAL);
  assert_int_equal(bc_archive_commit(a), 0);
  b = tu_read_file(s0, &before);
  free(b);
  /* Refusals leave no stray bytes in the shard. */
  assert_int_equal(bc_archive_add(a, "a/b/c", "new", 3, NULL), BC_EINVAL);
  assert_non_null(strstr(bc_errmsg(), "exists"));
  assert_int_equal(bc_archive_add(a, "a/b", "new", 3, NULL), BC_EINVAL);
  assert_int_equal(bc_archive_add(a, "a/b/c/d", "new", 3, NULL), BC_EINVAL);
  assert_non_null(strstr(bc_errmsg(), "is a file"));
  assert_int_equal(bc_archive_commit(a), 0);
  b = tu_read_file(s0, &after);
  free(b);
  assert_int_equal(before, after);
  assert_int_equal(bc_archive_remove(a, "a/b"), BC_ENOTFOUND);
  assert_int_equal(bc_archive_remove(a, "/a/b/c"), 0);
  assert_int_equal(bc_archive_isfile(a, "a/b/c"), 0);
  assert_int_equal(bc_archive_isdir(a, "a/b"), 1);
  assert_int_equal(bc_archive_remove(a, "a/b/c"), BC_ENOTFOUND);
  assert_int_equal(bc_archive_num_files(a), 0);
  assert_int_equal(bc_archive_close(a), 0);
  tu_rmtree(dir);
  free(s0);
  free(path);
  free(dir);
}

static size_t file_size(const char *p) {
  struct stat st;
  if (stat(p, &st) != 0) fail_msg("stat %s", p);
  return (size_t)st.st_size;
}

static void expect_at(bc_archive *a, const char *name, uint64_t shard,
                      uint64_t offset) {
  bc_archive_file_info fi;
  assert_int_equal(bc_archive_stat(a, name, &fi), 0);
  assert_int_equal(fi.shard, shard);
  assert_int_equal(fi.offset, offset);
}

static void test_sharding(void **state) {
  char *dir = tu_tempdir(), *path = tu_join(dir, "arch");
  bc_archive *a = ta_open_rw(path, 100);
  unsigned char data[101];
  (void)state;
  memset(data, 'x', sizeof data);
  assert_int_equal(bc_archive_add(a, "a", data, 60, NULL), 0);
  assert_int_equal(bc_archive_add(a, "b", data, 40, NULL), 0); /* 60+40 = 100 fits */
  assert_int_equal(bc_archive_add(a, "c", data, 1, NULL), 0);  /* 100+1 > 100 */
  assert_int_equal(bc_archive_add(a, "d", data, 100, NULL), 0); /* equal to the limit */
  assert_int_equal(bc_archive_add(a, "e", data, 0, NULL), 0);  /* 100+0 fits */
  assert_int_equal(bc_archive_add(a, "f", data, 101, NULL), BC_EINVAL);
  assert_non_null(strstr(bc_errmsg(), "larger than the shard_size_limit"));
  expect_at(a, "a", 0, 0);
  expect_at(a, "b", 0, 60);
  expect_at(a, "c", 1, 0);
  expect_at(a, "d", 2, 0);
  expect_at(a, "e", 2, 100);
  assert_int_equal(bc_archive_close(a), 0);
  {
    char *s0 = ta_shard_path(path, 0), *s1 = ta_shard_path(path, 1),
         *s2 = ta_shard_path(path, 2), *s3 = ta_shard_path(path, 3);
    assert_int_equal(file_size(s0), 100);
    assert_int_equal(file_size(s1), 1);
    assert_int_equal(file_size(s2), 100);
    assert_false(tu_exists(s3));
    free(s0);
    free(s1);
    free(s2);
    free(s3);
  }
  /* The limit is the archive's: reopened without one, it still holds. */
  a = ta_open_rw(path, 0);
  assert_int_equal(bc_archive_add(a, "g", data, 101, NULL), BC_EINVAL);
  assert_int_equal(bc_archive_add(a, "g", data, 1, NULL), 0);
  expect_at(a, "g", 3, 0);
  assert_int_equal(bc_archive_close(a), 0);
  /* A limit below the largest shard is refused. */
  {
    bc_archive_options o = BC_ARCHIVE_OPTIONS_INIT;
    o.readonly = false;
    o.shard_size_limit = 99;
    assert_int_equal(bc_archive_open(&a, path, &o), BC_EINVAL);
  }
  a = ta_open_ro(path);
  assert_int_equal(bc_archive_verify(a), 0);
  assert_int_equal(bc_archive_num_files(a), 6);
  assert_int_equal(bc_archive_total_size(a), 202);
  assert_int_equal(bc_archive_close(a), 0);
  tu_rmtree(dir);
  free(path);
  free(dir);
}

/* Every file of the directory, as name + bytes, for byte-identity checks. */
static char *snapshot(const char *dir) {
  char *cmd = tu_format("cd '%s' && for f in *; do echo \"$f\"; od -An -tx1 \"$f\"; done",
                        dir);
  FILE *p = popen(cmd, "r");
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  size_t r;
  while ((r = fread(buf + n, 1, cap - n - 1, p)) > 0) {
    n += r;
    if (cap - n < 2) buf = realloc(buf, cap *= 2);
  }
  buf[n] = '\0';
  pclose(p);
  free(cmd);
  return buf;
}

static void test_readonly(void **state) {
  char *dir = tu_tempdir(), *path = tu_join(dir, "arch");
  bc_archive *a = ta_open_rw(path, 50);
  char *before, *after, *missing = tu_join(dir, "missing");
  bc_archive_options o = BC_ARCHIVE_OPTIONS_INIT;
  (void)state;
  for (int i = 0; i < 20; i++) {
    char *n = name_of(i);
    size_t size = ta_size(n, 40);
    unsigned char d[64];
    ta_content(n, size, d);
    assert_int_equal(bc_archive_add(a, n, d, size, NULL), 0);
    free(n);
  }
  assert_int_equal(bc_archive_close(a), 0);
  before = snapshot(dir);
  a = ta_open_ro(path);
  assert_int_equal(bc_archive_add(a, "new", "x", 1, NULL), BC_EPERM);
  assert_non_null(strstr(bc_errmsg(), "read-only"));
  assert_int_equal(bc_archive_remove(a, "top-0"), BC_EPERM);
  assert_int_equal(bc_archive_commit(a), 0);
  assert_int_equal(bc_archive_verify(a), 0);
  assert_int_equal(bc_archive_num_files(a), 20);
  assert_int_equal(bc_archive_close(a), 0);
  after = snapshot(dir);
  assert_string_equal(before, after);
  /* Reading an archive that is not there. */
  assert_int_equal(bc_archive_open(&a, missing, &o), BC_ENOTFOUND);
  assert_null(a);
  assert_false(tu_exists(missing));
  free(before);
  free(after);
  free(missing);
  tu_rmtree(dir);
  free(path);
  free(dir);
}

static void test_open_options(void **state) {
  char *dir = tu_tempdir(), *path = tu_join(dir, "arch");
  bc_archive *a = ta_open_rw(path, 0), *b = NULL;
  bc_archive_options o = BC_ARCHIVE_OPTIONS_INIT;
  (void)state;
  assert_int_equal(bc_archive_add(a, "x", "abc", 3, NULL), 0);
  /* One writer at a time. */
  o.readonly = false;
  assert_int_equal(bc_archive_open(&b, path, &o), BC_EAGAIN);
  assert_non_null(strstr(bc_errmsg(), "open for writing"));
  /* Not even overwrite replaces an archive under a live writer. */
  o.overwrite = true;
  assert_int_equal(bc_archive_open(&b, path, &o), BC_EAGAIN);
  o.overwrite = false;
  assert_int_equal(bc_archive_isfile(a, "x"), 1);
  assert_int_equal(bc_archive_close(a), 0);
  o.exist_ok = false;
  assert_int_equal(bc_archive_open(&b, path, &o), BC_EINVAL);
  o.exist_ok = true;
  o.overwrite = true;
  assert_int_equal(bc_archive_open(&b, path, &o), 0);
  assert_int_equal(bc_archive_num_files(b), 0);
  assert_int_equal(bc_archive_isfile(b, "x"), 0);
  assert_int_equal(bc_archive_close(b), 0);
  /* Shards without an index (a creator killed before it linked its index
   * in): a reader finds no archive, a writer starts afresh. */
  {
    char *ip = ta_index_path(path), *s0 = ta_shard_path(path, 0);
    size_t n;
    unsigned char *bytes;
    tu_write_file(s0, "stale bytes", 11);
    assert_int_equal(unlink(ip), 0);
    o.overwrite = false;
    o.readonly = true;
    assert_int_equal(bc_archive_open(&b, path, &o), BC_ENOTFOUND);
    assert_non_null(strstr(bc_errmsg(), "no such archive"));
    o.readonly = false;
    assert_int_equal(bc_archive_open(&b, path, &o), 0);
    assert_int_equal(bc_archive_num_files(b), 0);
    assert_int_equal(bc_archive_add(b, "y", "12", 2, NULL), 0);
    assert_int_equal(bc_archive_close(b), 0);
    bytes = tu_read_file(s0, &n);
    tu_assert_bytes(bytes, n, "12", 2, "shard 0 started afresh");
    free(bytes);
    free(ip);
    free(s0);
  }
  o.version = 99;
  assert_int_equal(bc_archive_open(&b, path, &o), BC_EINVAL);
  assert_int_equal(bc_archive_options_init(&o, BC_ARCHIVE_OPTIONS_VERSION), 0);
  assert_true(o.readonly);
  assert_true(o.exist_ok);
  assert_int_equal(bc_archive_options_init(&o, 7), BC_EINVAL);
  tu_rmtree(dir);
  free(path);
  free(dir);
}

/* A reader open while a writer goes on sees each commit, including files
 * in shards created after the reader opened and bytes appended to a shard
 * it had already measured. */
static void test_live_reader(void **state) {
  char *dir = tu_tempdir(), *path = tu_join(dir, "arch");
  bc_archive *w = ta_open_rw(path, 100), *r;
  unsigned char got[64];
  size_t g = 0;
  (void)state;
  assert_int_equal(bc_archive_add(w, "a", "0123456789", 10, NULL), 0);
  assert_int_equal(bc_archive_commit(w), 0);
  r = ta_open_ro(path);
  assert_int_equal(bc_archive_read(r, "a", got, sizeof got, &g), 0);
  tu_assert_bytes(got, g, "0123456789", 10, "a");
  assert_int_equal(bc_archive_add(w, "b", "abcdefghij", 10, NULL), 0);
  /* Not committed: not visible to the other connection. */
  assert_int_equal(bc_archive_isfile(r, "b"), 0);
  for (int i = 0; i < 5; i++) {
    char *n = tu_format("big/%d", i);
    unsigned char d[60];
    memset(d, 'A' + i, sizeof d);
    assert_int_equal(bc_archive_add(w, n, d, sizeof d, NULL), 0);
    free(n);
  }
  assert_int_equal(bc_archive_commit(w), 0);
  assert_int_equal(bc_archive_read(r, "b", got, sizeof got, &g), 0);
  tu_assert_bytes(got, g, "abcdefghij", 10, "b");
  for (int i = 0; i < 5; i++) {
    char *n = tu_format("big/%d", i);
    unsigned char d[60];
    bc_archive_file_info fi;
    memset(d, 'A' + i, sizeof d);
    assert_int_equal(bc_archive_read(r, n, got, sizeof got, &g), 0);
    tu_assert_bytes(got, g, d, sizeof d, n);
    assert_int_equal(bc_archive_stat(r, n, &fi), 0);
    /* big/0 fits after a and b in shard 0 (20 + 60 <= 100), the rest
     * take a new shard each (80 + 60 > 100). */
    assert_int_equal(fi.shard, (uint64_t)i);
    free(n);
  }
  assert_int_equal(bc_archive_num_files(r), 7);
  assert_int_equal(bc_archive_verify(r), 0);
  assert_int_equal(bc_archive_close(r), 0);
  assert_int_equal(bc_archive_close(w), 0);
  tu_rmtree(dir);
  free(path);
  free(dir);
}

typedef struct reader_arg {
  bc_archive *a;
  int seed;
  int bad;
} reader_arg;

static void *reader(void *p) {
  reader_arg *r = p;
  unsigned char want[5001], got[5001];
  for (int k = 0; k < 600; k++) {
    int i = (k * 7919 + r->seed * 104729) % NFILES;
    char *n = name_of(i);
    size_t size = ta_size(n, 5000), g = 0;
    ta_content(n, size, want);
    if (bc_archive_read(r->a, n, got, sizeof got, &g) != 0 || g != size ||
        memcmp(got, want, size) != 0)
      r->bad++;
    free(n);
  }
  return NULL;
}

static void test_threads(void **state) {
  char *dir = tu_tempdir(), *path = tu_join(dir, "arch");
  bc_archive *a = ta_open_rw(path, 64 << 10);
  pthread_t t[4];
  reader_arg r[4];
  (void)state;
  for (int i = 0; i < NFILES; i++) {
    char *n = name_of(i);
    add_file(a, n);
    free(n);
  }
  assert_int_equal(bc_archive_close(a), 0);
  a = ta_open_ro(path);
  for (int i = 0; i < 4; i++) {
    r[i].a = a;
    r[i].seed = i;
    r[i].bad = 0;
    pthread_create(&t[i], NULL, reader, &r[i]);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    assert_int_equal(r[i].bad, 0);
  }
  assert_int_equal(bc_archive_close(a), 0);
  tu_rmtree(dir);
  free(path);
  free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),   cmocka_unit_test(test_paths),
      cmocka_unit_test(test_sharding),     cmocka_unit_test(test_readonly),
      cmocka_unit_test(test_open_options), cmocka_unit_test(test_threads),
      cmocka_unit_test(test_live_reader),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
