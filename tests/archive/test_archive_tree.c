/*
 * tests/archive/test_archive_tree.c - the directory operations
 * (src/archive/tree.c): add_dir, rename of files and directories, rmdir,
 * remove_tree, list_files and read_at.  Each is checked by exact reads of
 * every file, exact aggregates (bc_archive_verify compares every
 * directory's counts with its contents), and, for random sequences of
 * operations, against a plain model of paths and contents, with barecat's
 * triggers on and off.  Cases barecat 0.2.7 gets wrong are named.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../testutil.h"
#include "common.h"

static void put(bc_archive *a, const char *path, size_t size) {
  unsigned char buf[4096];
  ta_content(path, size, buf);
  if (bc_archive_add(a, path, buf, size, NULL) != 0)
    fail_msg("add '%s': %s", path, bc_errmsg());
}

/* File `path` reads back as the content generated for `seed_name`. */
static void expect(bc_archive *a, const char *path, const char *seed_name,
                   size_t size) {
  unsigned char want[4096];
  void *got = NULL;
  size_t n = 0;
  ta_content(seed_name, size, want);
  if (bc_archive_read_alloc(a, path, &got, &n) != 0)
    fail_msg("read '%s': %s", path, bc_errmsg());
  assert_int_equal(n, size);
  assert_memory_equal(got, want, size);
  free(got);
}

static void expect_dir(bc_archive *a, const char *path, uint64_t subdirs,
                       uint64_t files, uint64_t files_tree, uint64_t size_tree) {
  bc_archive_dir_info di;
  if (bc_archive_stat_dir(a, path, &di) != 0)
    fail_msg("stat_dir '%s': %s", path, bc_errmsg());
  if (di.num_subdirs != subdirs || di.num_files != files ||
      di.num_files_tree != files_tree || di.size_tree != size_tree)
    fail_msg("dir '%s': %llu %llu %llu %llu, expected %llu %llu %llu %llu", path,
             (unsigned long long)di.num_subdirs, (unsigned long long)di.num_files,
             (unsigned long long)di.num_files_tree,
             (unsigned long long)di.size_tree, (unsigned long long)subdirs,
             (unsigned long long)files, (unsigned long long)files_tree,
             (unsigned long long)size_tree);
}

static char *fresh(char **dir) {
  *dir = tu_tempdir();
  return tu_join(*dir, "t");
}

static void done(char *dir, char *path) {
  tu_rmtree(dir);
  free(path);
  free(dir);
}

/* barecat 0.2.7: renaming a non-empty directory of a reopened archive
 * fails; and its move_subdir trigger miscounts num_files. */
static void test_rename_dir_after_reopen(void **state) {
  char *dir, *path = fresh(&dir);
  bc_archive *a = ta_open_rw(path, 0);
  (void)state;
  put(a, "a/b/c.txt", 10);
  put(a, "a/b/d/e.txt", 20);
  put(a, "a/f.txt", 5);
  put(a, "a/b/g.txt", 7);
  assert_int_equal(bc_archive_close(a), 0);
  a = ta_open_rw(path, 0);
  /* Into a directory that does not exist yet: x is created. */
  assert_int_equal(bc_archive_rename(a, "a/b", "x/y"), 0);
  assert_int_equal(bc_archive_verify(a), 0);
  expect(a, "x/y/c.txt", "a/b/c.txt", 10);
  expect(a, "x/y/d/e.txt", "a/b/d/e.txt", 20);
  expect(a, "x/y/g.txt", "a/b/g.txt", 7);
  assert_int_equal(bc_archive_isdir(a, "a/b"), 0);
  assert_int_equal(bc_archive_isdir(a, "a/b/d"), 0);
  assert_int_equal(bc_archive_isfile(a, "a/b/c.txt"), 0);
  expect_dir(a, "", 2, 0, 4, 42);
  expect_dir(a, "a", 0, 1, 1, 5);
  expect_dir(a, "x", 1, 0, 3, 37);
  expect_dir(a, "x/y", 1, 2, 3, 37);
  expect_dir(a, "x/y/d", 0, 1, 1, 20);
  assert_int_equal(bc_archive_num_files(a), 4);
  assert_int_equal(bc_archive_close(a), 0);
  a = ta_open_ro(path);
  assert_int_equal(bc_archive_verify(a), 0);
  expect(a, "x/y/d/e.txt", "a/b/d/e.txt", 20);
  assert_int_equal(bc_archive_close(a), 0);
  done(dir, path);
}

/* barecat 0.2.7: a rename into a missing directory orphans the file. */
static void test_rename_file_into_missing_dir(void **state) {
  char *dir, *path = fresh(&dir);
  bc_archive *a = ta_open_rw(path, 0);
  bc_archive_dirent *ents = NULL;
  size_t n = 0;
  (void)state;
  put(a, "f.txt", 9);
  assert_int_equal(bc_archive_rename(a, "f.txt", "new/deep/g.txt"), 0);
  assert_int_equal(bc_archive_verify(a), 0);
  expect(a, "new/deep/g.txt", "f.txt", 9);
  assert_int_equal(bc_archive_listdir(a, "new/deep", &ents, &n), 0);
  assert_int_equal(n, 1);
  assert_string_equal(ents[0].name, "g.txt");
  free(ents);
  expect_dir(a, "", 1, 0, 1, 9);
  expect_dir(a, "new", 1, 0, 1, 9);
  expect_dir(a, "new/deep", 0, 1, 1, 9);
  /* Within one directory, and to itself. */
  assert_int_equal(bc_archive_rename(a, "new/deep/g.txt", "new/deep/h.txt"), 0);
  assert_int_equal(bc_archive_rename(a, "new/deep/h.txt", "new//deep/./h.txt"), 0);
  expect(a, "new/deep/h.txt", "f.txt", 9);
  assert_int_equal(bc_archive_verify(a), 0);
  assert_int_equal(bc_archive_close(a), 0);
  done(dir, path);
}

static void test_rename_refusals(void **state) {
  char *dir, *path = fresh(&dir);
  bc_archive *a = ta_open_rw(path, 0);
  (void)state;
  put(a, "d/a.txt", 3);
  put(a, "d/s/b.txt", 4);
  put(a, "e.txt", 5);
  assert_int_equal(bc_archive_rename(a, "nope", "x"), BC_ENOTFOUND);
  assert_int_equal(bc_archive_rename(a, "e.txt", "d/a.txt"), BC_EINVAL);
  assert_int_equal(bc_archive_rename(a, "e.txt", "d"), BC_EINVAL);
  assert_int_equal(bc_archive_rename(a, "d", "e.txt"), BC_EINVAL);
  assert_int_equal(bc_archive_rename(a, "d", "d/s/t"), BC_EINVAL);
  assert_non_null(strstr(bc_errmsg(), "into itself"));
  assert_int_equal(bc_archive_rename(a, "d", ""), BC_EINVAL);
  assert_int_equal(bc_archive_rename(a, "", "z"), BC_EINVAL);
  assert_int_equal(bc_archive_rename(a, "d/a.txt", "e.txt/x"), BC_EINVAL);
  assert_non_null(strstr(bc_errmsg(), "is a file"));
  /* A sibling whose name extends the directory's is not inside it. */
  assert_int_equal(bc_archive_rename(a, "d", "d2"), 0);
  assert_int_equal(bc_archive_rename(a, "d2", "d"), 0);
  assert_int_equal(bc_archive_verify(a), 0);
  expect(a, "d/s/b.txt", "d/s/b.txt", 4);
  assert_int_equal(bc_archive_num_files(a), 3);
  assert_int_equal(bc_archive_close(a), 0);
  done(dir, path);
}

static void test_rmdir_and_remove_tree(void **state) {
  char *dir, *path = fresh(&dir);
  bc_archive *a = ta_open_rw(path, 0);
  (void)state;
  put(a, "p/q/r/1", 11);
  put(a, "p/q/2", 12);
  put(a, "p/3", 13);
  put(a, "p/q-x/4", 14); /* beside q, sorting between q and q/ */
  assert_int_equal(bc_archive_add_dir(a, "p/empty", NULL, false), 0);
  assert_int_equal(bc_archive_rmdir(a, "p/q"), BC_EINVAL);
  assert_non_null(strstr(bc_errmsg(), "not empty"));
  assert_int_equal(bc_archive_rmdir(a, "p/3"), BC_EINVAL);
  assert_int_equal(bc_archive_rmdir(a, "p/none"), BC_ENOTFOUND);
  assert_int_equal(bc_archive_rmdir(a, ""), BC_EINVAL);
  assert_int_equal(bc_archive_rmdir(a, "p/empty"), 0);
  assert_int_equal(bc_archive_isdir(a, "p/empty"), 0);
  expect_dir(a, "p", 2, 1, 4, 50);
  /* barecat 0.2.7's remove_recursively corrupts the parent's counts. */
  assert_int_equal(bc_archive_remove_tree(a, "p/q"), 0);
  assert_int_equal(bc_archive_verify(a), 0);
  expect_dir(a, "p", 1, 1, 2, 27);
  expect_dir(a, "", 1, 0, 2, 27);
  assert_int_equal(bc_archive_isfile(a, "p/q/r/1"), 0);
  assert_int_equal(bc_archive_isdir(a, "p/q/r"), 0);
  expect(a, "p/q-x/4", "p/q-x/4", 14);
  assert_int_equal(bc_archive_remove_tree(a, "p/3"), BC_EINVAL);
  assert_int_equal(bc_archive_remove_tree(a, ""), BC_EINVAL);
  assert_int_equal(bc_archive_close(a), 0);
  done(dir, path);
}

static void test_add_dir(void **state) {
  char *dir, *path = fresh(&dir);
  bc_archive *a = ta_open_rw(path, 0);
  bc_archive_file_meta meta = BC_ARCHIVE_FILE_META_INIT;
  bc_archive_dir_info di;
  (void)state;
  meta.mode = 0755;
  meta.mtime_ns = 123;
  assert_int_equal(bc_archive_add_dir(a, "m/n/o", &meta, false), 0);
  assert_int_equal(bc_archive_add_dir(a, "m/n/o", NULL, false), BC_EINVAL);
  expect_dir(a, "", 1, 0, 0, 0);
  expect_dir(a, "m", 1, 0, 0, 0);
  expect_dir(a, "m/n/o", 0, 0, 0, 0);
  assert_int_equal(bc_archive_stat_dir(a, "m/n/o", &di), 0);
  assert_int_equal(di.mode, 0755);
  assert_int_equal(di.mtime_ns, 123);
  meta.mode = 0700;
  assert_int_equal(bc_archive_add_dir(a, "m/n/o", &meta, true), 0);
  assert_int_equal(bc_archive_stat_dir(a, "m/n/o", &di), 0);
  assert_int_equal(di.mode, 0700);
  put(a, "m/n/o/f", 6);
  assert_int_equal(bc_archive_add_dir(a, "m/n/o/f", NULL, true), BC_EINVAL);
  assert_int_equal(bc_archive_add_dir(a, "m/n/o/f/g", NULL, false), BC_EINVAL);
  assert_int_equal(bc_archive_add_dir(a, "m/n/o", NULL, true), 0);
  expect_dir(a, "m/n/o", 0, 1, 1, 6);
  assert_int_equal(bc_archive_verify(a), 0);
  assert_int_equal(bc_archive_close(a), 0);
  done(dir, path);
}

static void test_readonly_refuses(void **state) {
  char *dir, *path = fresh(&dir);
  bc_archive *a = ta_open_rw(path, 0);
  char *ipath = ta_index_path(path);
  unsigned char *before, *after;
  size_t nb = 0, na = 0;
  (void)state;
  put(a, "k/f", 3);
  assert_int_equal(bc_archive_close(a), 0);
  before = tu_read_file(ipath, &nb);
  a = ta_open_ro(path);
  assert_int_equal(bc_archive_add_dir(a, "z", NULL, false), BC_EPERM);
  assert_int_equal(bc_archive_rename(a, "k/f", "k/g"), BC_EPERM);
  assert_int_equal(bc_archive_rmdir(a, "k"), BC_EPERM);
  assert_int_equal(bc_archive_remove_tree(a, "k"), BC_EPERM);
  assert_int_equal(bc_archive_close(a), 0);
  after = tu_read_file(ipath, &na);
  assert_int_equal(na, nb);
  assert_memory_equal(after, before, nb);
  free(before);
  free(after);
  free(ipath);
  done(dir, path);
}

static void test_list_files_and_read_at(void **state) {
  char *dir, *path = fresh(&dir);
  bc_archive *a = ta_open_rw(path, 0);
  bc_archive_file_info fi;
  unsigned char want[100], got[100];
  char **v = NULL;
  size_t n = 0;
  (void)state;
  assert_int_equal(bc_archive_list_files(a, &v, &n), 0);
  assert_int_equal(n, 0);
  assert_null(v);
  put(a, "b/x", 100);
  put(a, "a", 1);
  put(a, "b!", 2);
  put(a, "b/a", 0);
  assert_int_equal(bc_archive_list_files(a, &v, &n), 0);
  assert_int_equal(n, 4);
  assert_string_equal(v[0], "a");
  assert_string_equal(v[1], "b!");
  assert_string_equal(v[2], "b/a");
  assert_string_equal(v[3], "b/x");
  free(v);
  ta_content("b/x", 100, want);
  assert_int_equal(bc_archive_stat(a, "b/x", &fi), 0);
  assert_int_equal(bc_archive_read_at(a, &fi, 30, got, 70), 0);
  assert_memory_equal(got, want + 30, 70);
  assert_int_equal(bc_archive_read_at(a, &fi, 30, got, 71), BC_ERANGE);
  assert_int_equal(bc_archive_read_at(a, &fi, 100, got, 0), 0);
  assert_int_equal(bc_archive_crc32c(bc_archive_crc32c(0, want, 30), want + 30, 70),
                   fi.crc32c);
  /* The C vector of CRC-32C. */
  assert_int_equal(bc_archive_crc32c(0, "123456789", 9), 0xe3069283u);
  /* A row past its shard's end is refused before any read. */
  fi.offset = 1u << 20;
  assert_int_equal(bc_archive_read_at(a, &fi, 0, got, 1), BC_ECORRUPT);
  assert_int_equal(bc_archive_close(a), 0);
  done(dir, path);
}

/* ---- random operations against a model ---------------------------------- */

#define NF 40
typedef struct mfile {
  char *path;  /* NULL: not live */
  char *seed;  /* the name its content was generated from */
  size_t size;
} mfile;

static bool under(const char *p, const char *d) {
  size_t n = strlen(d);
  return strncmp(p, d, n) == 0 && p[n] == '/';
}

static char *pick_dir(const mfile *m, unsigned r) {
  /* An ancestor of a live file. */
  for (int k = 0; k < NF; k++) {
    const mfile *f = &m[(r + (unsigned)k) % NF];
    char *s, *p;
    if (f->path == NULL || strchr(f->path, '/') == NULL) continue;
    p = strdup(f->path);
    s = strrchr(p, '/');
    *s = '\0';
    if (r % 3 == 0 && (s = strchr(p, '/')) != NULL) *s = '\0';
    return p;
  }
  return NULL;
}

static void run_random(bool triggers) {
  char *dir, *path = fresh(&dir);
  bc_archive *a = ta_open_rw(path, 0);
  mfile m[NF];
  unsigned r = 12345;
  (void)triggers;
  memset(m, 0, sizeof m);
  if (!triggers) {
    assert_int_equal(bc_archive_close(a), 0);
    ta_sql(path, "UPDATE config SET value_int = 0 WHERE key = 'use_triggers'");
    a = ta_open_rw(path, 0);
  }
  for (int step = 0; step < 400; step++) {
    int i;
    r = r * 1103515245u + 12345u;
    i = (int)((r >> 8) % NF);
    switch ((r >> 16) % 5) {
      case 0:
      case 1:
        if (m[i].path == NULL) {
          char *p = tu_format("%c/%c/%c/f%d", 'a' + (int)(r % 3),
                              'k' + (int)((r >> 4) % 3), 'u' + (int)((r >> 6) % 2),
                              step);
          if (r % 4 == 0) p[5] = '\0', p[4] = 'g'; /* shallower */
          if (bc_archive_isdir(a, p) == 1 || bc_archive_isfile(a, p) == 1) {
            free(p);
            break;
          }
          /* A path below a live file is refused, in model and archive. */
          bool below = false;
          for (int k = 0; k < NF; k++)
            below |= m[k].path != NULL && under(p, m[k].path);
          if (below) {
            unsigned char x = 0;
            assert_int_equal(bc_archive_add(a, p, &x, 1, NULL), BC_EINVAL);
            free(p);
            break;
          }
          m[i].path = p;
          m[i].seed = strdup(p);
          m[i].size = (r >> 3) % 200;
          put(a, p, m[i].size);
        }
        break;
      case 2: { /* rename a directory */
        char *d = pick_dir(m, r), *to;
        if (d == NULL) break;
        to = tu_format("%c%d/%s", 'r' + (int)(r % 2), step % 3, d);
        if (bc_archive_exists(a, to) == 1) {
          assert_int_equal(bc_archive_rename(a, d, to), BC_EINVAL);
        } else if (bc_archive_rename(a, d, to) == 0) {
          for (int k = 0; k < NF; k++)
            if (m[k].path != NULL && under(m[k].path, d)) {
              char *np = tu_format("%s%s", to, m[k].path + strlen(d));
              free(m[k].path);
              m[k].path = np;
            }
        } else {
          /* Only an ancestor that is a file, or a target inside d, may
           * refuse it. */
          if (strstr(bc_errmsg(), under(to, d) ? "into itself" : "is a file") == NULL)
            fail_msg("rename '%s' to '%s': %s", d, to, bc_errmsg());
        }
        free(d);
        free(to);
        break;
      }
      case 3: /* rename or remove a file */
        if (m[i].path != NULL) {
          if (r & 0x100000) {
            assert_int_equal(bc_archive_remove(a, m[i].path), 0);
            free(m[i].path);
            free(m[i].seed);
            m[i].path = m[i].seed = NULL;
          } else {
            char *to = tu_format("z/%d/%s", step % 4, m[i].path);
            if (bc_archive_exists(a, to) == 0 && bc_archive_rename(a, m[i].path, to) == 0) {
              free(m[i].path);
              m[i].path = to;
            } else {
              free(to);
            }
          }
        }
        break;
      default: { /* remove a whole directory */
        char *d = pick_dir(m, r);
        if (d == NULL || (r & 0x300000) != 0) {
          free(d);
          break;
        }
        assert_int_equal(bc_archive_remove_tree(a, d), 0);
        for (int k = 0; k < NF; k++)
          if (m[k].path != NULL && under(m[k].path, d)) {
            free(m[k].path);
            free(m[k].seed);
            m[k].path = m[k].seed = NULL;
          }
        free(d);
        break;
      }
    }
    if (step % 40 == 39) {
      uint64_t live = 0;
      if (bc_archive_verify(a) != 0) fail_msg("step %d: %s", step, bc_errmsg());
      for (int k = 0; k < NF; k++)
        if (m[k].path != NULL) {
          expect(a, m[k].path, m[k].seed, m[k].size);
          live++;
        }
      assert_int_equal(bc_archive_num_files(a), (int64_t)live);
      assert_int_equal(bc_archive_close(a), 0);
      a = ta_open_rw(path, 0);
    }
  }
  assert_int_equal(bc_archive_close(a), 0);
  /* The triggers' switch is what it was. */
  a = ta_open_ro(path);
  assert_int_equal(bc_archive_verify(a), 0);
  assert_int_equal(bc_archive_close(a), 0);
  for (int k = 0; k < NF; k++) {
    free(m[k].path);
    free(m[k].seed);
  }
  done(dir, path);
}

static void test_random_with_triggers(void **state) {
  (void)state;
  run_random(true);
}

static void test_random_without_triggers(void **state) {
  (void)state;
  run_random(false);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rename_dir_after_reopen),
      cmocka_unit_test(test_rename_file_into_missing_dir),
      cmocka_unit_test(test_rename_refusals),
      cmocka_unit_test(test_rmdir_and_remove_tree),
      cmocka_unit_test(test_add_dir),
      cmocka_unit_test(test_readonly_refuses),
      cmocka_unit_test(test_list_files_and_read_at),
      cmocka_unit_test(test_random_with_triggers),
      cmocka_unit_test(test_random_without_triggers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
