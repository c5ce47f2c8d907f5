/*
 * tests/archive/test_archive_schema.c - an archive bagcache creates has
 * barecat 0.2.7's index: the same sqlite_master, the generated parent
 * columns, the config rows and the root directory row.
 *
 * tests/archive/barecat-0.2.7-sqlite_master.txt was generated once from
 * barecat's own file, src/barecat/sql/schema.sql at tag v0.2.7, applied to
 * an empty database with Python's sqlite3 module:
 *
 *   c = sqlite3.connect(':memory:'); c.executescript(schema_sql)
 *   for r in c.execute('SELECT type,name,tbl_name,sql FROM sqlite_master'
 *                      ' ORDER BY rowid'):
 *       out.write('%s|%s|%s|%s\n---\n' % r)
 *
 * (None for a NULL sql, as Python prints it).
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
#include <sqlite3.h>

#include "../testutil.h"
#include "common.h"

typedef struct strbuf {
  char *s;
  size_t n, cap;
} strbuf;

static void put(strbuf *b, const char *s) {
  size_t l = strlen(s);
  if (b->n + l + 1 > b->cap) {
    b->cap = (b->n + l + 1) * 2;
    b->s = realloc(b->s, b->cap);
  }
  memcpy(b->s + b->n, s, l + 1);
  b->n += l;
}

/* The rows of `sql`, columns joined by '|', each row followed by
 * "\n---\n"; NULL as "None". */
static char *dump(const char *archive, const char *sql) {
  char *ip = ta_index_path(archive);
  sqlite3 *db = NULL;
  sqlite3_stmt *st = NULL;
  strbuf b = {NULL, 0, 0};
  put(&b, "");
  assert_int_equal(sqlite3_open_v2(ip, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
  while (sqlite3_step(st) == SQLITE_ROW) {
    for (int i = 0; i < sqlite3_column_count(st); i++) {
      const char *t = (const char *)sqlite3_column_text(st, i);
      if (i > 0) put(&b, "|");
      put(&b, t != NULL ? t : "None");
    }
    put(&b, "\n---\n");
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  free(ip);
  return b.s;
}

static void test_sqlite_master(void **state) {
  char *dir = tu_tempdir(), *path = tu_join(dir, "arch");
  char *src = getenv("BC_SRCDIR");
  char *want_path = tu_format("%s/tests/archive/barecat-0.2.7-sqlite_master.txt",
                              src != NULL ? src : ".");
  size_t wsize;
  unsigned char *want = tu_read_file(want_path, &wsize);
  bc_archive *a = ta_open_rw(path, 0);
  char *got;
  (void)state;
  assert_int_equal(bc_archive_add(a, "a/b/c", "x", 1, NULL), 0);
  assert_int_equal(bc_archive_close(a), 0);
  /* Without sqlite_stat1: SQLite's own table, which the PRAGMA optimize
   * barecat and bagcache both run at close may create. */
  got = dump(path, "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE "
                   "name NOT LIKE 'sqlite_stat%' ORDER BY rowid");
  assert_string_equal(got, (const char *)want);
  free(got);
  /* The generated columns (hidden = 2: virtual generated). */
  got = dump(path, "SELECT name, type, \"notnull\", dflt_value, pk, hidden "
                   "FROM pragma_table_xinfo('files')");
  assert_string_equal(got,
      "path|TEXT|1|None|1|0\n---\nparent|TEXT|1|None|0|2\n---\n"
      "shard|INTEGER|1|None|0|0\n---\noffset|INTEGER|1|None|0|0\n---\n"
      "size|INTEGER|0|0|0|0\n---\ncrc32c|INTEGER|0|NULL|0|0\n---\n"
      "mode|INTEGER|0|NULL|0|0\n---\nuid|INTEGER|0|NULL|0|0\n---\n"
      "gid|INTEGER|0|NULL|0|0\n---\nmtime_ns|INTEGER|0|NULL|0|0\n---\n");
  free(got);
  got = dump(path, "SELECT key, value_text, value_int FROM config ORDER BY key");
  assert_string_equal(got,
      "schema_version_major|None|0\n---\nschema_version_minor|None|2\n---\n"
      "shard_size_limit|None|9223372036854775807\n---\nuse_triggers|None|1\n---\n");
  free(got);
  {
    char *want_dirs = tu_format(
        "|None|1|0|1|1|%d|%d\n---\na||1|0|1|1|None|None\n---\n"
        "a/b|a|0|1|1|1|None|None\n---\n", (int)getuid(), (int)getgid());
    got = dump(path, "SELECT path, parent, num_subdirs, num_files, num_files_tree, "
                     "size_tree, uid, gid FROM dirs ORDER BY path");
    assert_string_equal(got, want_dirs);
    free(got);
    free(want_dirs);
  }
  got = dump(path, "SELECT path, parent, shard, offset, size FROM files");
  assert_string_equal(got, "a/b/c|a/b|0|0|1\n---\n");
  free(got);
  free(want);
  free(want_path);
  tu_rmtree(dir);
  free(path);
  free(dir);
}

/* A limit given at creation is the config row barecat reads. */
static void test_limit_row(void **state) {
  char *dir = tu_tempdir(), *path = tu_join(dir, "arch");
  bc_archive *a = ta_open_rw(path, 12345);
  char *got;
  (void)state;
  assert_int_equal(bc_archive_close(a), 0);
  got = dump(path, "SELECT value_int FROM config WHERE key = 'shard_size_limit'");
  assert_string_equal(got, "12345\n---\n");
  free(got);
  tu_rmtree(dir);
  free(path);
  free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sqlite_master),
      cmocka_unit_test(test_limit_row),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
