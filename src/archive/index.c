/*
 * src/archive/index.c - the SQLite index NAME-sqlite-index: barecat
 * 0.2.7's schema (schema.c) and connection settings, the prepared
 * statements of the read and write paths, and the directory aggregates
 * where the index has its triggers off (config use_triggers = 0).
 *
 * The caller (archive.c) holds bc_archive.lock around every call here.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "archive/internal.h"

static const char *const stmt_sql[BC__ST_COUNT] = {
    [BC__ST_LOOKUP_FILE] = "SELECT shard, offset, size, crc32c, mode, uid, gid, "
                           "mtime_ns FROM files WHERE path = ?1",
    [BC__ST_LOOKUP_DIR] = "SELECT num_subdirs, num_files, num_files_tree, "
                          "size_tree, mode, uid, gid, mtime_ns FROM dirs "
                          "WHERE path = ?1",
    [BC__ST_INSERT_FILE] = "INSERT INTO files (path, shard, offset, size, "
                           "crc32c, mode, uid, gid, mtime_ns) VALUES "
                           "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    [BC__ST_DELETE_FILE] = "DELETE FROM files WHERE path = ?1",
    [BC__ST_LIST_DIRS] = "SELECT path FROM dirs WHERE parent = ?1 ORDER BY path",
    [BC__ST_LIST_FILES] = "SELECT path FROM files WHERE parent = ?1 ORDER BY path",
};

int bc__index_error(bc__index *ix, int rc, const char *what) {
  int code;
  const char *msg = ix != NULL && ix->db != NULL ? sqlite3_errmsg(ix->db)
                                                  : sqlite3_errstr(rc);
  switch (rc & 0xff) {
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
    case SQLITE_SCHEMA: code = BC_ECORRUPT; break;
    case SQLITE_BUSY:
    case SQLITE_LOCKED: code = BC_EAGAIN; break;
    case SQLITE_NOMEM: code = BC_ENOMEM; break;
    case SQLITE_FULL: code = BC_ENOSPC; break;
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH: code = BC_EPERM; break;
    case SQLITE_CONSTRAINT: code = BC_EINVAL; break;
    default: code = BC_EIO; break;
  }
  return bc__error(code, "%s: %s: %s", ix != NULL && ix->path != NULL ? ix->path
                                                                      : "archive index",
                   what, msg);
}

/* An SQL error while reading the schema means the file is not a barecat
 * index (a missing table or column): BC_ECORRUPT, whatever SQLite's code. */
static int not_an_index(bc__index *ix, int rc) {
  int code;
  if (rc == SQLITE_READONLY && ix->readonly)
    return bc__error(BC_EPERM, "%s: a writer was killed during its commit and "
                     "left a journal that only a writer can roll back: open the "
                     "archive for writing once (%s)", ix->path,
                     sqlite3_errmsg(ix->db));
  code = bc__index_error(ix, rc, "not a barecat index");
  if (code == BC_EIO) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", bc_errmsg());
    code = bc__error(BC_ECORRUPT, "%s", msg);
  }
  return code;
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int exec(bc__index *ix, const char *sql, const char *what) {
  int rc = sqlite3_exec(ix->db, sql, NULL, NULL, NULL);
  return rc == SQLITE_OK ? 0 : bc__index_error(ix, rc, what);
}

/* Runs a one-row query of one integer column; *found is 0 when no row. */
static int query_int(bc__index *ix, const char *sql, const char *text_arg,
                     int64_t *out, bool *found) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(ix->db, sql, -1, &st, NULL);
  int res = 0;
  *found = false;
  if (rc != SQLITE_OK) {
    res = not_an_index(ix, rc);
    goto cleanup;
  }
  if (text_arg != NULL) sqlite3_bind_text(st, 1, text_arg, -1, SQLITE_STATIC);
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    *found = sqlite3_column_type(st, 0) != SQLITE_NULL;
    *out = sqlite3_column_int64(st, 0);
  } else if (rc != SQLITE_DONE) {
    res = bc__index_error(ix, rc, "query");
  }
cleanup:
  sqlite3_finalize(st);
  return res;
}

static int config_int(bc__index *ix, const char *key, int64_t *out) {
  bool found;
  int rc = query_int(ix, "SELECT value_int FROM config WHERE key = ?1", key,
                     out, &found);
  if (rc == 0 && !found)
    rc = bc__error(BC_ECORRUPT, "%s: not a barecat index: config has no %s",
                   ix->path, key);
  return rc;
}

/* A writer killed inside a write transaction leaves a hot rollback journal
 * (PATH-journal) that a read-only connection cannot roll back (SQLite then
 * fails every read with SQLITE_READONLY).  So before a read-only open, where
 * a journal exists and we may write the index, one short read-write
 * connection reads the schema: SQLite rolls a hot journal back under its
 * own locks (and leaves a live writer's journal alone, since that writer
 * holds its lock).  The index then holds its last commit, as it would for
 * any SQLite reader with write access.  Without write access, the open
 * fails later with the BC_EPERM of not_an_index. */
static void roll_back_hot_journal(const char *path) {
  size_t n = strlen(path) + sizeof "-journal";
  char *j = malloc(n);
  struct stat st;
  sqlite3 *db = NULL;
  if (j == NULL) return;
  snprintf(j, n, "%s-journal", path);
  if (stat(j, &st) == 0 && access(path, W_OK) == 0 &&
      sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK) {
    sqlite3_busy_timeout(db, 60000);
    sqlite3_exec(db, "SELECT COUNT(*) FROM sqlite_master", NULL, NULL, NULL);
  }
  if (db != NULL) sqlite3_close(db);
  free(j);
}

int bc__index_open(bc__index *ix, const char *path, bool readonly) {
  int rc = 0, src;
  int64_t major = 0, limit = 0, trig = 0;
  memset(ix, 0, sizeof *ix);
  ix->readonly = readonly;
  ix->path = strdup(path);
  if (ix->path == NULL) return bc__error(BC_ENOMEM, "archive: out of memory");
  /* One connection is used by many threads (under bc_archive.lock), which
   * an SQLite built single-threaded does not allow. */
  if (sqlite3_threadsafe() == 0) {
    rc = bc__error(BC_EUNSUPPORTED, "%s: this SQLite library was built without "
                   "thread support (SQLITE_THREADSAFE=0)", path);
    goto cleanup;
  }
  if (readonly) roll_back_hot_journal(path);
  src = sqlite3_open_v2(path, &ix->db,
                        readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE,
                        NULL);
  if (src != SQLITE_OK) {
    rc = bc__index_error(ix, src, "cannot open");
    goto cleanup;
  }
  sqlite3_extended_result_codes(ix->db, 0);
  sqlite3_busy_timeout(ix->db, 60000);
  /* barecat 0.2.7's connection settings (Index.__init__). */
  if (!readonly) {
    rc = exec(ix, "PRAGMA recursive_triggers = ON; PRAGMA foreign_keys = ON",
              "settings");
    if (rc != 0) goto cleanup;
  }
  rc = exec(ix, "PRAGMA temp_store = memory; PRAGMA mmap_size = 30000000000",
            "settings");
  if (rc != 0) goto cleanup;
  /* The first read of the file: garbage is SQLITE_NOTADB here. */
  rc = config_int(ix, "schema_version_major", &major);
  if (rc != 0) goto cleanup;
  if (major != 0) {
    rc = bc__error(BC_EVERSION, "%s: barecat schema version %lld.x; this "
                   "bagcache reads version 0.x", path, (long long)major);
    goto cleanup;
  }
  if ((rc = config_int(ix, "shard_size_limit", &limit)) != 0 ||
      (rc = config_int(ix, "use_triggers", &trig)) != 0)
    goto cleanup;
  if (limit <= 0) {
    rc = bc__error(BC_ECORRUPT, "%s: shard_size_limit %lld", path,
                   (long long)limit);
    goto cleanup;
  }
  ix->shard_size_limit = (uint64_t)limit;
  ix->use_triggers = trig == 1;
  for (int i = 0; i < BC__ST_COUNT; i++) {
    src = sqlite3_prepare_v3(ix->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
                             &ix->st[i], NULL);
    if (src != SQLITE_OK) {
      rc = not_an_index(ix, src);
      goto cleanup;
    }
  }
cleanup:
  if (rc != 0) bc__index_close(ix);
  return rc;
}

void bc__index_close(bc__index *ix) {
  for (int i = 0; i < BC__ST_COUNT; i++) sqlite3_finalize(ix->st[i]);
  if (ix->db != NULL) {
    if (ix->in_txn) sqlite3_exec(ix->db, "ROLLBACK", NULL, NULL, NULL);
    if (!ix->readonly) sqlite3_exec(ix->db, "PRAGMA optimize", NULL, NULL, NULL);
    sqlite3_close(ix->db);
  }
  free(ix->path);
  memset(ix, 0, sizeof *ix);
}

int bc__index_create(const char *path) {
  int rc = 0, src, fd = -1;
  char *tmp = NULL;
  bool linked = false;
  char root[512];
  bc__index tix;
  memset(&tix, 0, sizeof tix);
  tix.path = (char *)path;
  rc = bc__tmp_create(path, 0666, &tmp, &fd);
  if (rc != 0) goto cleanup;
  src = sqlite3_open_v2(tmp, &tix.db, SQLITE_OPEN_READWRITE, NULL);
  if (src != SQLITE_OK) {
    rc = bc__index_error(&tix, src, "cannot create");
    goto cleanup;
  }
  /* As barecat: the schema, then the root with triggers off (so it gets no
   * parent row), all in one transaction. */
  snprintf(root, sizeof root,
           "UPDATE config SET value_int = 0 WHERE key = 'use_triggers';"
           "INSERT INTO dirs (path, uid, gid, mtime_ns) VALUES ('', %lld, %lld, %lld);"
           "UPDATE config SET value_int = 1 WHERE key = 'use_triggers';",
           (long long)getuid(), (long long)getgid(), (long long)now_ns());
  if ((rc = exec(&tix, "BEGIN", "create")) != 0 ||
      (rc = exec(&tix, bc__archive_schema_sql, "create the schema")) != 0 ||
      (rc = exec(&tix, root, "create the root")) != 0 ||
      (rc = exec(&tix, "COMMIT", "create")) != 0)
    goto cleanup;
  src = sqlite3_close(tix.db);
  tix.db = NULL;
  if (src != SQLITE_OK) {
    rc = bc__index_error(&tix, src, "close");
    goto cleanup;
  }
  if ((rc = bc__fsync(fd, tmp)) != 0) goto cleanup;
  /* link refuses an existing index: another creator won the race. */
  if (link(tmp, path) != 0) {
    rc = errno == EEXIST ? 1 : bc__error_errno(errno, "%s: link", path);
    goto cleanup;
  }
  linked = true;
  rc = bc__fsync_parent_dir(path);
cleanup:
  if (tix.db != NULL) sqlite3_close(tix.db);
  if (fd >= 0) close(fd);
  if (tmp != NULL) {
    unlink(tmp);
    free(tmp);
  }
  BC__UNUSED(linked);
  return rc;
}

int bc__index_set_limit(bc__index *ix, uint64_t limit, uint64_t largest_shard) {
  sqlite3_stmt *st = NULL;
  int rc = 0, src;
  if (limit == ix->shard_size_limit) return 0;
  if (limit > BC__ARCHIVE_NO_LIMIT || limit < largest_shard)
    return bc__error(BC_EINVAL, "%s: shard_size_limit %llu is %s", ix->path,
                     (unsigned long long)limit,
                     limit < largest_shard ? "smaller than the largest shard"
                                           : "above 2^63 - 1");
  if ((rc = bc__index_begin(ix)) != 0) return rc;
  src = sqlite3_prepare_v2(ix->db, "UPDATE config SET value_int = ?1 WHERE "
                           "key = 'shard_size_limit'", -1, &st, NULL);
  if (src == SQLITE_OK) {
    sqlite3_bind_int64(st, 1, (int64_t)limit);
    src = sqlite3_step(st);
  }
  if (src != SQLITE_DONE && src != SQLITE_OK)
    rc = bc__index_error(ix, src, "set shard_size_limit");
  else
    ix->shard_size_limit = limit;
  sqlite3_finalize(st);
  return rc;
}

int bc__index_begin(bc__index *ix) {
  int rc;
  if (ix->in_txn) return 0;
  rc = exec(ix, "BEGIN IMMEDIATE", "begin");
  if (rc == 0) ix->in_txn = true;
  return rc;
}

int bc__index_commit(bc__index *ix) {
  int rc;
  if (!ix->in_txn) return 0;
  rc = exec(ix, "COMMIT", "commit");
  if (rc == 0) ix->in_txn = false;
  return rc;
}

int bc__index_rollback(bc__index *ix) {
  int rc;
  if (!ix->in_txn) return 0;
  rc = exec(ix, "ROLLBACK", "rollback");
  ix->in_txn = false;
  return rc;
}

static int64_t col_meta(sqlite3_stmt *st, int i) {
  return sqlite3_column_type(st, i) == SQLITE_NULL ? BC_ARCHIVE_UNSET
                                                   : sqlite3_column_int64(st, i);
}

static void bind_meta(sqlite3_stmt *st, int i, int64_t v) {
  if (v == BC_ARCHIVE_UNSET)
    sqlite3_bind_null(st, i);
  else
    sqlite3_bind_int64(st, i, v);
}

/* A column that must be a non-negative integer (shard, offset, size...). */
static int col_u64(bc__index *ix, sqlite3_stmt *st, int i, const char *path,
                   uint64_t *out) {
  int64_t v = sqlite3_column_int64(st, i);
  if (sqlite3_column_type(st, i) != SQLITE_INTEGER || v < 0)
    return bc__error(BC_ECORRUPT, "%s: '%s': %s is not a non-negative integer",
                     ix->path, path, sqlite3_column_name(st, i));
  *out = (uint64_t)v;
  return 0;
}

int bc__index_lookup_file(bc__index *ix, const char *path,
                          bc_archive_file_info *out) {
  sqlite3_stmt *st = ix->st[BC__ST_LOOKUP_FILE];
  int rc = 0, src;
  sqlite3_bind_text(st, 1, path, -1, SQLITE_STATIC);
  src = sqlite3_step(st);
  if (src == SQLITE_DONE) goto cleanup;
  if (src != SQLITE_ROW) {
    rc = bc__index_error(ix, src, "lookup");
    goto cleanup;
  }
  memset(out, 0, sizeof *out);
  if ((rc = col_u64(ix, st, 0, path, &out->shard)) != 0 ||
      (rc = col_u64(ix, st, 1, path, &out->offset)) != 0 ||
      (rc = col_u64(ix, st, 2, path, &out->size)) != 0)
    goto cleanup;
  out->has_crc32c = sqlite3_column_type(st, 3) != SQLITE_NULL;
  out->crc32c = (uint32_t)sqlite3_column_int64(st, 3);
  out->mode = col_meta(st, 4);
  out->uid = col_meta(st, 5);
  out->gid = col_meta(st, 6);
  out->mtime_ns = col_meta(st, 7);
  rc = 1;
cleanup:
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  return rc;
}

int bc__index_lookup_dir(bc__index *ix, const char *path,
                         bc_archive_dir_info *out) {
  sqlite3_stmt *st = ix->st[BC__ST_LOOKUP_DIR];
  int rc = 0, src;
  uint64_t *agg[4];
  sqlite3_bind_text(st, 1, path, -1, SQLITE_STATIC);
  src = sqlite3_step(st);
  if (src == SQLITE_DONE) goto cleanup;
  if (src != SQLITE_ROW) {
    rc = bc__index_error(ix, src, "lookup");
    goto cleanup;
  }
  memset(out, 0, sizeof *out);
  agg[0] = &out->num_subdirs;
  agg[1] = &out->num_files;
  agg[2] = &out->num_files_tree;
  agg[3] = &out->size_tree;
  for (int i = 0; i < 4; i++)
    if ((rc = col_u64(ix, st, i, path, agg[i])) != 0) goto cleanup;
  out->mode = col_meta(st, 4);
  out->uid = col_meta(st, 5);
  out->gid = col_meta(st, 6);
  out->mtime_ns = col_meta(st, 7);
  rc = 1;
cleanup:
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  return rc;
}

/* Runs `sql` with ?1 = text[0..len), ?2 = a, ?3 = b; *changes (may be
 * NULL) gets the rows changed. */
static int run(bc__index *ix, const char *sql, const char *text, size_t len,
               int64_t a, int64_t b, int *changes) {
  sqlite3_stmt *st = NULL;
  int rc = 0, src = sqlite3_prepare_v2(ix->db, sql, -1, &st, NULL);
  if (src == SQLITE_OK) {
    sqlite3_bind_text(st, 1, text, (int)len, SQLITE_STATIC);
    if (sqlite3_bind_parameter_count(st) >= 2) sqlite3_bind_int64(st, 2, a);
    if (sqlite3_bind_parameter_count(st) >= 3) sqlite3_bind_int64(st, 3, b);
    src = sqlite3_step(st);
  }
  if (src != SQLITE_DONE && src != SQLITE_OK)
    rc = bc__index_error(ix, src, "update the directories");
  else if (changes != NULL)
    *changes = sqlite3_changes(ix->db);
  sqlite3_finalize(st);
  return rc;
}

/* The length of the parent of path[0..len) (0 for a top-level entry). */
static size_t prefix_parent(const char *path, size_t len) {
  while (len > 0 && path[len - 1] != '/') len--;
  return len > 0 ? len - 1 : 0;
}

/* Without triggers, what add_file with add_subdir (delta +1) or del_file
 * (delta -1) do for a file of `size` bytes at `path`: for +1 the missing
 * ancestors are created first, top down, each counted in its parent's
 * num_subdirs; then the parent's num_files and every ancestor's
 * num_files_tree and size_tree change. */
static int manual_aggregates(bc__index *ix, const char *path, uint64_t size,
                             int delta) {
  int rc = 0, changes = 0;
  size_t plen = bc__archive_parent_len(path);
  for (size_t i = 1; delta > 0 && i <= plen; i++) {
    if (i < plen && path[i] != '/') continue;
    rc = run(ix, "INSERT OR IGNORE INTO dirs (path) VALUES (?1)", path, i, 0, 0,
             &changes);
    if (rc == 0 && changes > 0)
      rc = run(ix, "UPDATE dirs SET num_subdirs = num_subdirs + 1 WHERE path = ?1",
               path, prefix_parent(path, i), 0, 0, NULL);
    if (rc != 0) return rc;
  }
  rc = run(ix, "UPDATE dirs SET num_files = num_files + ?2 WHERE path = ?1", path,
           plen, delta, 0, NULL);
  for (size_t len = plen; rc == 0; len = prefix_parent(path, len)) {
    rc = run(ix, "UPDATE dirs SET num_files_tree = num_files_tree + ?2, "
             "size_tree = size_tree + ?3 WHERE path = ?1", path, len, delta,
             delta * (int64_t)size, NULL);
    if (len == 0) break;
  }
  return rc;
}

int bc__index_insert_file(bc__index *ix, const char *path,
                          const bc_archive_file_info *fi) {
  sqlite3_stmt *st = ix->st[BC__ST_INSERT_FILE];
  int rc = 0, src;
  if ((rc = bc__index_begin(ix)) != 0) return rc;
  /* The directory rows and the file row change together or not at all. */
  if ((rc = exec(ix, "SAVEPOINT bc_add", "add")) != 0) return rc;
  if (!ix->use_triggers && (rc = manual_aggregates(ix, path, fi->size, 1)) != 0)
    goto cleanup;
  sqlite3_bind_text(st, 1, path, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 2, (int64_t)fi->shard);
  sqlite3_bind_int64(st, 3, (int64_t)fi->offset);
  sqlite3_bind_int64(st, 4, (int64_t)fi->size);
  sqlite3_bind_int64(st, 5, (int64_t)fi->crc32c);
  bind_meta(st, 6, fi->mode);
  bind_meta(st, 7, fi->uid);
  bind_meta(st, 8, fi->gid);
  bind_meta(st, 9, fi->mtime_ns);
  src = sqlite3_step(st);
  if (src != SQLITE_DONE) rc = bc__index_error(ix, src, path);
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
cleanup:
  if (rc != 0)
    sqlite3_exec(ix->db, "ROLLBACK TO bc_add; RELEASE bc_add", NULL, NULL, NULL);
  else
    rc = exec(ix, "RELEASE bc_add", "add");
  return rc;
}

int bc__index_delete_file(bc__index *ix, const char *path) {
  sqlite3_stmt *st = ix->st[BC__ST_DELETE_FILE];
  bc_archive_file_info fi;
  int rc, src;
  if ((rc = bc__index_lookup_file(ix, path, &fi)) <= 0) return rc;
  if ((rc = bc__index_begin(ix)) != 0) return rc;
  if ((rc = exec(ix, "SAVEPOINT bc_remove", "remove")) != 0) return rc;
  sqlite3_bind_text(st, 1, path, -1, SQLITE_STATIC);
  src = sqlite3_step(st);
  rc = src == SQLITE_DONE ? 1 : bc__index_error(ix, src, path);
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  if (rc == 1 && !ix->use_triggers) {
    int mrc = manual_aggregates(ix, path, fi.size, -1);
    if (mrc != 0) rc = mrc;
  }
  if (rc != 1) {
    sqlite3_exec(ix->db, "ROLLBACK TO bc_remove; RELEASE bc_remove", NULL, NULL,
                 NULL);
  } else {
    int rrc = exec(ix, "RELEASE bc_remove", "remove");
    if (rrc != 0) rc = rrc;
  }
  return rc;
}

int bc__index_shard_end(bc__index *ix, uint64_t shard, uint64_t *end) {
  sqlite3_stmt *st = NULL;
  int rc = 0, src = sqlite3_prepare_v2(
      ix->db, "SELECT MAX(offset + size) FROM files WHERE shard = ?1", -1, &st,
      NULL);
  *end = 0;
  if (src == SQLITE_OK) {
    sqlite3_bind_int64(st, 1, (int64_t)shard);
    src = sqlite3_step(st);
  }
  if (src == SQLITE_ROW) {
    int64_t v = sqlite3_column_int64(st, 0);
    if (v < 0)
      rc = bc__error(BC_ECORRUPT, "%s: shard %llu: a file ends at %lld",
                     ix->path, (unsigned long long)shard, (long long)v);
    else
      *end = (uint64_t)v;
  } else {
    rc = bc__index_error(ix, src, "shard end");
  }
  sqlite3_finalize(st);
  return rc;
}

int bc__index_max_shard(bc__index *ix, int64_t *out) {
  bool found;
  int rc = query_int(ix, "SELECT MAX(shard) FROM files", NULL, out, &found);
  if (rc == 0 && !found) *out = -1;
  return rc;
}

/* Collects the last path component of each row of `st` (bound to dir). */
typedef struct names {
  bc_archive_dirent *v;
  size_t n, cap, bytes;
  char **names;
} names;

static int collect(bc__index *ix, sqlite3_stmt *st, const char *dir, bool is_dir,
                   names *nm) {
  int rc = 0, src;
  sqlite3_bind_text(st, 1, dir, -1, SQLITE_STATIC);
  while ((src = sqlite3_step(st)) == SQLITE_ROW) {
    const char *p = (const char *)sqlite3_column_text(st, 0);
    const char *slash = p != NULL ? strrchr(p, '/') : NULL;
    const char *name = slash != NULL ? slash + 1 : (p != NULL ? p : "");
    if (nm->n == nm->cap) {
      size_t cap = nm->cap ? nm->cap * 2 : 16;
      bc_archive_dirent *v = realloc(nm->v, cap * sizeof *v);
      char **names2 = realloc(nm->names, cap * sizeof *names2);
      if (v != NULL) nm->v = v;
      if (names2 != NULL) nm->names = names2;
      if (v == NULL || names2 == NULL) {
        rc = bc__error(BC_ENOMEM, "listdir: out of memory");
        goto cleanup;
      }
      nm->cap = cap;
    }
    nm->names[nm->n] = strdup(name);
    if (nm->names[nm->n] == NULL) {
      rc = bc__error(BC_ENOMEM, "listdir: out of memory");
      goto cleanup;
    }
    nm->v[nm->n].is_dir = is_dir;
    nm->bytes += strlen(name) + 1;
    nm->n++;
  }
  if (src != SQLITE_DONE) rc = bc__index_error(ix, src, "listdir");
cleanup:
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  return rc;
}

int bc__index_listdir(bc__index *ix, const char *dir, bc_archive_dirent **out,
                      size_t *count) {
  names nm;
  int rc;
  memset(&nm, 0, sizeof nm);
  *out = NULL;
  *count = 0;
  if ((rc = collect(ix, ix->st[BC__ST_LIST_DIRS], dir, true, &nm)) != 0 ||
      (rc = collect(ix, ix->st[BC__ST_LIST_FILES], dir, false, &nm)) != 0)
    goto cleanup;
  if (nm.n > 0) {
    /* One block: the entries, then their names. */
    bc_archive_dirent *block = malloc(nm.n * sizeof *block + nm.bytes);
    char *s;
    if (block == NULL) {
      rc = bc__error(BC_ENOMEM, "listdir: out of memory");
      goto cleanup;
    }
    s = (char *)(block + nm.n);
    for (size_t i = 0; i < nm.n; i++) {
      size_t l = strlen(nm.names[i]) + 1;
      memcpy(s, nm.names[i], l);
      block[i].name = s;
      block[i].is_dir = nm.v[i].is_dir;
      s += l;
    }
    *out = block;
    *count = nm.n;
  }
cleanup:
  for (size_t i = 0; i < nm.n; i++) free(nm.names[i]);
  free(nm.names);
  free(nm.v);
  return rc;
}

int bc__index_each_file(bc__index *ix,
                        int (*fn)(void *arg, const char *path,
                                  const bc_archive_file_info *fi),
                        void *arg) {
  sqlite3_stmt *st = NULL;
  int rc = 0, src = sqlite3_prepare_v2(
      ix->db, "SELECT path, shard, offset, size, crc32c FROM files ORDER BY path",
      -1, &st, NULL);
  if (src != SQLITE_OK) return bc__index_error(ix, src, "verify");
  while (rc == 0 && (src = sqlite3_step(st)) == SQLITE_ROW) {
    bc_archive_file_info fi;
    const char *path = (const char *)sqlite3_column_text(st, 0);
    memset(&fi, 0, sizeof fi);
    if (path == NULL) path = "";
    if ((rc = col_u64(ix, st, 1, path, &fi.shard)) != 0 ||
        (rc = col_u64(ix, st, 2, path, &fi.offset)) != 0 ||
        (rc = col_u64(ix, st, 3, path, &fi.size)) != 0)
      break;
    fi.has_crc32c = sqlite3_column_type(st, 4) != SQLITE_NULL;
    fi.crc32c = (uint32_t)sqlite3_column_int64(st, 4);
    rc = fn(arg, path, &fi);
  }
  if (rc == 0 && src != SQLITE_DONE) rc = bc__index_error(ix, src, "verify");
  sqlite3_finalize(st);
  return rc;
}

int bc__index_check_aggregates(bc__index *ix) {
  /* Each directory against its children; '0' is the byte after '/', so
   * the range is exactly the paths below d.  Path order, so the first
   * wrong one is reported. */
  static const char sql[] =
      "SELECT d.path, d.num_subdirs, d.num_files, d.num_files_tree, d.size_tree,"
      " (SELECT COUNT(*) FROM dirs c WHERE c.parent = d.path),"
      " (SELECT COUNT(*) FROM files f WHERE f.parent = d.path),"
      " (SELECT COUNT(*) FROM files f WHERE d.path = '' OR"
      "   (f.path > d.path || '/' AND f.path < d.path || '0')),"
      " (SELECT COALESCE(SUM(size), 0) FROM files f WHERE d.path = '' OR"
      "   (f.path > d.path || '/' AND f.path < d.path || '0'))"
      " FROM dirs d ORDER BY d.path";
  static const char *const what[4] = {"num_subdirs", "num_files",
                                      "num_files_tree", "size_tree"};
  sqlite3_stmt *st = NULL;
  int rc = 0, src = sqlite3_prepare_v2(ix->db, sql, -1, &st, NULL);
  if (src != SQLITE_OK) return bc__index_error(ix, src, "verify");
  while (rc == 0 && (src = sqlite3_step(st)) == SQLITE_ROW) {
    const char *path = (const char *)sqlite3_column_text(st, 0);
    for (int i = 0; i < 4 && rc == 0; i++) {
      int64_t have = sqlite3_column_int64(st, 1 + i);
      int64_t want = sqlite3_column_int64(st, 5 + i);
      if (have != want)
        rc = bc__error(BC_ECORRUPT, "%s: directory '%s': %s is %lld, its "
                       "contents give %lld", ix->path, path ? path : "",
                       what[i], (long long)have, (long long)want);
    }
  }
  if (rc == 0 && src != SQLITE_DONE) rc = bc__index_error(ix, src, "verify");
  sqlite3_finalize(st);
  return rc;
}
