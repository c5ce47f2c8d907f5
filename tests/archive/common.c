/* tests/archive/common.c - see common.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "common.h"
#include "../testutil.h"

static uint64_t seed_of(const char *name) {
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char *p = (const unsigned char *)name; *p; p++)
    h = (h ^ *p) * 1099511628211ull;
  return h;
}

void ta_content(const char *name, size_t size, unsigned char *out) {
  uint64_t x = seed_of(name) | 1;
  for (size_t i = 0; i < size; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    out[i] = (unsigned char)(x >> 24);
  }
}

size_t ta_size(const char *name, size_t max) {
  uint64_t s = seed_of(name);
  if (s % 7 == 0) return 0;
  return (size_t)((s >> 8) % (max + 1));
}

static bc_archive *open_with(const char *path, bool ro, uint64_t limit) {
  bc_archive_options o = BC_ARCHIVE_OPTIONS_INIT;
  bc_archive *a = NULL;
  int rc;
  o.readonly = ro;
  o.shard_size_limit = limit;
  rc = bc_archive_open(&a, path, &o);
  if (rc != 0) fail_msg("bc_archive_open(%s): %s", path, bc_errmsg());
  return a;
}

bc_archive *ta_open_rw(const char *path, uint64_t limit) {
  return open_with(path, false, limit);
}

bc_archive *ta_open_ro(const char *path) { return open_with(path, true, 0); }

char *ta_index_path(const char *archive) {
  return tu_format("%s-sqlite-index", archive);
}

char *ta_shard_path(const char *archive, unsigned shard) {
  return tu_format("%s-shard-%05u", archive, shard);
}

void ta_sql(const char *archive, const char *sql) {
  char *ip = ta_index_path(archive);
  sqlite3 *db = NULL;
  char *err = NULL;
  if (sqlite3_open_v2(ip, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) != SQLITE_OK)
    fail_msg("open %s: %s", ip, sqlite3_errmsg(db));
  if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK)
    fail_msg("%s: %s", sql, err);
  sqlite3_close(db);
  free(ip);
}
