/*
 * src/archive/tree.c - the directory operations of the public API:
 * bc_archive_add_dir, bc_archive_rename (files and directories),
 * bc_archive_rmdir, bc_archive_remove_tree, plus bc_archive_list_files and
 * bc_archive_read_at for the bindings.
 *
 * Aggregates.  barecat's triggers are not used for these operations: its
 * move_subdir and del_subdir subtract the moved directory's own num_files
 * from its parent's num_files (which counts direct files only), so a
 * non-empty directory moved or deleted through them leaves wrong counts.
 * Each operation runs in one savepoint with config use_triggers set to 0
 * for its duration (restored before the savepoint is released, so no
 * commit ever holds 0 where the archive had 1), and adjusts the ancestors
 * itself with adjust(): the entry's parent gets its direct count changed,
 * every ancestor its num_files_tree and size_tree.  A failure rolls the
 * savepoint back: rows, aggregates and the config row together.
 *
 * Foreign keys (files.parent and dirs.parent reference dirs.path, ON
 * DELETE RESTRICT, checked at once for RESTRICT): a moved subtree is
 * copied to its new paths first, the files are moved into the copies, and
 * the old directory rows are deleted deepest first, so no statement ever
 * leaves a row whose parent is missing.
 *
 * The caller holds bc_archive.lock around every index call here.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "archive/internal.h"
#include "common/crc32c.h"

/* Runs `sql` with ?1 = t1[0..l1), ?2 = t2 (may be NULL), ?3 = i3, ?4 = i4
 * (each only where the statement has that many parameters). */
static int sqlrun(bc__index *ix, const char *sql, const char *t1, size_t l1,
                  const char *t2, int64_t i3, int64_t i4, int *changes) {
  sqlite3_stmt *st = NULL;
  int rc = 0, n, src = sqlite3_prepare_v2(ix->db, sql, -1, &st, NULL);
  if (src == SQLITE_OK) {
    n = sqlite3_bind_parameter_count(st);
    if (n >= 1) sqlite3_bind_text(st, 1, t1, (int)l1, SQLITE_STATIC);
    if (n >= 2) sqlite3_bind_text(st, 2, t2, -1, SQLITE_STATIC);
    if (n >= 3) sqlite3_bind_int64(st, 3, i3);
    if (n >= 4) sqlite3_bind_int64(st, 4, i4);
    src = sqlite3_step(st);
  }
  if (src != SQLITE_DONE && src != SQLITE_OK && src != SQLITE_ROW)
    rc = bc__index_error(ix, src, "update the index");
  else if (changes != NULL)
    *changes = sqlite3_changes(ix->db);
  sqlite3_finalize(st);
  return rc;
}

static int sqlrun_s(bc__index *ix, const char *sql, const char *t1) {
  return sqlrun(ix, sql, t1, strlen(t1), NULL, 0, 0, NULL);
}

/* The length of the parent of path[0..len) (0 at the top level). */
static size_t parent_of(const char *path, size_t len) {
  while (len > 0 && path[len - 1] != '/') len--;
  return len > 0 ? len - 1 : 0;
}

/* For entry `path` (a file when !is_dir) holding nft files of `size` bytes
 * in all, entering (delta +1) or leaving (delta -1) the tree: for +1 its
 * missing ancestors are created first, top down, each counted in its
 * parent's num_subdirs; then the parent's direct count changes, and every
 * ancestor's num_files_tree and size_tree. */
static int adjust(bc__index *ix, const char *path, bool is_dir, uint64_t nft,
                  uint64_t size, int delta) {
  int rc = 0, changes = 0;
  size_t plen = bc__archive_parent_len(path);
  for (size_t i = 1; delta > 0 && i <= plen && rc == 0; i++) {
    if (i < plen && path[i] != '/') continue;
    rc = sqlrun(ix, "INSERT OR IGNORE INTO dirs (path) VALUES (?1)", path, i,
                NULL, 0, 0, &changes);
    if (rc == 0 && changes > 0)
      rc = sqlrun(ix, "UPDATE dirs SET num_subdirs = num_subdirs + 1 WHERE "
                  "path = ?1", path, parent_of(path, i), NULL, 0, 0, NULL);
  }
  if (rc != 0) return rc;
  rc = sqlrun(ix, is_dir ? "UPDATE dirs SET num_subdirs = num_subdirs + ?3 "
                           "WHERE path = ?1"
                         : "UPDATE dirs SET num_files = num_files + ?3 "
                           "WHERE path = ?1",
              path, plen, NULL, delta, 0, NULL);
  for (size_t len = plen; rc == 0; len = parent_of(path, len)) {
    rc = sqlrun(ix, "UPDATE dirs SET num_files_tree = num_files_tree + ?3, "
                "size_tree = size_tree + ?4 WHERE path = ?1", path, len, NULL,
                delta * (int64_t)nft, delta * (int64_t)size, NULL);
    if (len == 0) break;
  }
  return rc;
}

/* Opens the operation's savepoint with the triggers off. */
static int op_begin(bc__index *ix) {
  int rc;
  if ((rc = bc__index_begin(ix)) != 0) return rc;
  rc = sqlrun_s(ix, "SAVEPOINT bc_tree", "");
  if (rc == 0 && ix->use_triggers)
    rc = sqlrun_s(ix, "UPDATE config SET value_int = 0 WHERE key = "
                  "'use_triggers'", "");
  return rc;
}

/* Restores the triggers and releases the savepoint (rc == 0), or rolls it
 * back, keeping the error rc. */
static int op_end(bc__index *ix, int rc) {
  if (rc == 0 && ix->use_triggers)
    rc = sqlrun_s(ix, "UPDATE config SET value_int = 1 WHERE key = "
                  "'use_triggers'", "");
  if (rc == 0) rc = sqlrun_s(ix, "RELEASE bc_tree", "");
  if (rc != 0) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", bc_errmsg());
    sqlite3_exec(ix->db, "ROLLBACK TO bc_tree; RELEASE bc_tree", NULL, NULL, NULL);
    bc__error(rc, "%s", msg);
  }
  return rc;
}

/* Deletes directory `path` and every directory below it, deepest first
 * (descending path order puts each directory after everything below it). */
static int delete_dirs(bc__index *ix, const char *path) {
  sqlite3_stmt *st = NULL;
  char **v = NULL;
  size_t n = 0, cap = 0;
  int rc = 0, src = sqlite3_prepare_v2(
      ix->db, "SELECT path FROM dirs WHERE path = ?1 OR (path > ?1 || '/' AND "
      "path < ?1 || '0') ORDER BY path DESC", -1, &st, NULL);
  if (src != SQLITE_OK) return bc__index_error(ix, src, "list directories");
  sqlite3_bind_text(st, 1, path, -1, SQLITE_STATIC);
  while (rc == 0 && (src = sqlite3_step(st)) == SQLITE_ROW) {
    const char *p = (const char *)sqlite3_column_text(st, 0);
    if (n == cap) {
      size_t nc = cap ? cap * 2 : 16;
      char **nv = realloc(v, nc * sizeof *nv);
      if (nv == NULL) {
        rc = bc__error(BC_ENOMEM, "archive: out of memory");
        break;
      }
      v = nv;
      cap = nc;
    }
    if ((v[n] = strdup(p != NULL ? p : "")) == NULL)
      rc = bc__error(BC_ENOMEM, "archive: out of memory");
    else
      n++;
  }
  if (rc == 0 && src != SQLITE_DONE) rc = bc__index_error(ix, src, "list directories");
  sqlite3_finalize(st);
  for (size_t i = 0; i < n && rc == 0; i++)
    rc = sqlrun_s(ix, "DELETE FROM dirs WHERE path = ?1", v[i]);
  for (size_t i = 0; i < n; i++) free(v[i]);
  free(v);
  return rc;
}

/* 1 (and *bad, malloc'd) when an ancestor of `path` is a file. */
static int ancestor_file(bc__index *ix, const char *path, char **bad) {
  char *p = strdup(path);
  int rc = 0;
  *bad = NULL;
  if (p == NULL) return bc__error(BC_ENOMEM, "archive: out of memory");
  for (size_t len = bc__archive_parent_len(p); len > 0 && rc == 0;
       len = bc__archive_parent_len(p)) {
    bc_archive_file_info fi;
    p[len] = '\0';
    if ((rc = bc__index_lookup_file(ix, p, &fi)) == 1) {
      *bad = p;
      return 1;
    }
  }
  free(p);
  return rc;
}

/* 1 when `path` is a file or a directory, 0 if not, or an error. */
static int entry_exists(bc__index *ix, const char *path) {
  bc_archive_file_info fi;
  bc_archive_dir_info di;
  int rc = bc__index_lookup_file(ix, path, &fi);
  return rc != 0 ? rc : bc__index_lookup_dir(ix, path, &di);
}

/* Normalizes `path` into *key and takes the lock: the common start of the
 * write operations.  On success the caller unlocks. */
static int write_start(bc_archive *a, const char *path, const char *what,
                       char **key) {
  int rc;
  *key = NULL;
  if (a == NULL || path == NULL)
    return bc__error(BC_EINVAL, "%s: NULL argument", what);
  if (a->readonly)
    return bc__error(BC_EPERM, "%s: %s: the archive is open read-only", a->path,
                     what);
  if ((rc = bc__archive_normalize(path, key)) != 0) return rc;
  pthread_mutex_lock(&a->lock);
  return 0;
}

int bc_archive_add_dir(bc_archive *a, const char *path,
                       const bc_archive_file_meta *meta, bool exist_ok) {
  static const bc_archive_file_meta no_meta = BC_ARCHIVE_FILE_META_INIT;
  bc_archive_file_info fi;
  bc_archive_dir_info di;
  char *key = NULL, *bad = NULL;
  sqlite3_stmt *st = NULL;
  int rc, found;
  if ((rc = write_start(a, path, "add_dir", &key)) != 0) return rc;
  if (meta == NULL) meta = &no_meta;
  if ((rc = bc__index_lookup_file(&a->ix, key, &fi)) != 0) {
    if (rc > 0)
      rc = bc__error(BC_EINVAL, "%s: add_dir '%s': exists as a file", a->path, key);
    goto cleanup;
  }
  if ((found = bc__index_lookup_dir(&a->ix, key, &di)) < 0) {
    rc = found;
    goto cleanup;
  }
  if (found && !exist_ok) {
    rc = bc__error(BC_EINVAL, "%s: add_dir '%s': exists", a->path, key);
    goto cleanup;
  }
  if (!found && (rc = ancestor_file(&a->ix, key, &bad)) != 0) {
    if (rc > 0)
      rc = bc__error(BC_EINVAL, "%s: add_dir '%s': '%s' is a file", a->path, key,
                     bad);
    goto cleanup;
  }
  if ((rc = op_begin(&a->ix)) != 0) goto end;
  if (!found && (rc = adjust(&a->ix, key, true, 0, 0, 1)) == 0)
    rc = sqlrun_s(&a->ix, "INSERT INTO dirs (path) VALUES (?1)", key);
  if (rc == 0) {
    /* The metadata as given (NULL for unset), as barecat's add_dir. */
    int src = sqlite3_prepare_v2(a->ix.db, "UPDATE dirs SET mode = ?2, uid = ?3, "
                                 "gid = ?4, mtime_ns = ?5 WHERE path = ?1", -1,
                                 &st, NULL);
    const int64_t v[4] = {meta->mode, meta->uid, meta->gid, meta->mtime_ns};
    if (src == SQLITE_OK) {
      sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
      for (int i = 0; i < 4; i++) {
        if (v[i] == BC_ARCHIVE_UNSET)
          sqlite3_bind_null(st, 2 + i);
        else
          sqlite3_bind_int64(st, 2 + i, v[i]);
      }
      src = sqlite3_step(st);
    }
    if (src != SQLITE_DONE) rc = bc__index_error(&a->ix, src, key);
    sqlite3_finalize(st);
  }
end:
  rc = op_end(&a->ix, rc);
cleanup:
  pthread_mutex_unlock(&a->lock);
  free(bad);
  free(key);
  return rc;
}

int bc_archive_rename(bc_archive *a, const char *old_path, const char *new_path) {
  bc_archive_file_info fi;
  bc_archive_dir_info di;
  char *from = NULL, *to = NULL, *bad = NULL;
  int rc, is_file, is_dir = 0, dst;
  size_t fl;
  if (new_path == NULL) return bc__error(BC_EINVAL, "rename: NULL argument");
  if ((rc = bc__archive_normalize(new_path, &to)) != 0) return rc;
  if ((rc = write_start(a, old_path, "rename", &from)) != 0) {
    free(to);
    return rc;
  }
  if ((is_file = bc__index_lookup_file(&a->ix, from, &fi)) < 0 ||
      (!is_file && (is_dir = bc__index_lookup_dir(&a->ix, from, &di)) < 0)) {
    rc = is_file < 0 ? is_file : is_dir;
    goto cleanup;
  }
  if (!is_file && !is_dir) {
    rc = bc__error(BC_ENOTFOUND, "%s: rename '%s': no such file or directory",
                   a->path, from);
    goto cleanup;
  }
  if (strcmp(from, to) == 0) goto cleanup; /* as os.rename: nothing to do */
  if (from[0] == '\0' || to[0] == '\0') {
    rc = bc__error(BC_EINVAL, "%s: rename '%s' to '%s': the root cannot be "
                   "renamed or replaced", a->path, from, to);
    goto cleanup;
  }
  fl = strlen(from);
  if (is_dir && strncmp(to, from, fl) == 0 && to[fl] == '/') {
    rc = bc__error(BC_EINVAL, "%s: rename '%s' to '%s': a directory cannot "
                   "move into itself", a->path, from, to);
    goto cleanup;
  }
  if ((dst = entry_exists(&a->ix, to)) != 0) {
    rc = dst < 0 ? dst
                 : bc__error(BC_EINVAL, "%s: rename '%s' to '%s': exists",
                             a->path, from, to);
    goto cleanup;
  }
  if ((rc = ancestor_file(&a->ix, to, &bad)) != 0) {
    if (rc > 0)
      rc = bc__error(BC_EINVAL, "%s: rename '%s' to '%s': '%s' is a file",
                     a->path, from, to, bad);
    goto cleanup;
  }
  if ((rc = op_begin(&a->ix)) != 0) goto end;
  if (is_file) {
    if ((rc = adjust(&a->ix, from, false, 1, fi.size, -1)) == 0 &&
        (rc = adjust(&a->ix, to, false, 1, fi.size, 1)) == 0)
      rc = sqlrun(&a->ix, "UPDATE files SET path = ?2 WHERE path = ?1", from,
                  fl, to, 0, 0, NULL);
  } else {
    /* Copy the subtree's directory rows, move the files, drop the old rows. */
    if ((rc = adjust(&a->ix, from, true, di.num_files_tree, di.size_tree, -1)) == 0 &&
        (rc = adjust(&a->ix, to, true, di.num_files_tree, di.size_tree, 1)) == 0 &&
        (rc = sqlrun(&a->ix,
                     "INSERT INTO dirs (path, num_subdirs, num_files, "
                     "num_files_tree, size_tree, mode, uid, gid, mtime_ns) "
                     "SELECT ?2 || substr(path, length(?1) + 1), num_subdirs, "
                     "num_files, num_files_tree, size_tree, mode, uid, gid, "
                     "mtime_ns FROM dirs WHERE path = ?1 OR (path > ?1 || '/' "
                     "AND path < ?1 || '0') ORDER BY path",
                     from, fl, to, 0, 0, NULL)) == 0 &&
        (rc = sqlrun(&a->ix,
                     "UPDATE files SET path = ?2 || substr(path, length(?1) + 1) "
                     "WHERE path > ?1 || '/' AND path < ?1 || '0'",
                     from, fl, to, 0, 0, NULL)) == 0)
      rc = delete_dirs(&a->ix, from);
  }
end:
  rc = op_end(&a->ix, rc);
cleanup:
  pthread_mutex_unlock(&a->lock);
  free(bad);
  free(from);
  free(to);
  return rc;
}

/* rmdir (whole = false: the directory must be empty) or remove_tree. */
static int remove_dir(bc_archive *a, const char *path, bool whole) {
  const char *what = whole ? "remove_tree" : "rmdir";
  bc_archive_dir_info di;
  bc_archive_file_info fi;
  char *key = NULL;
  int rc, found;
  if ((rc = write_start(a, path, what, &key)) != 0) return rc;
  if ((found = bc__index_lookup_dir(&a->ix, key, &di)) <= 0) {
    if (found == 0 && (found = bc__index_lookup_file(&a->ix, key, &fi)) >= 0)
      rc = found ? bc__error(BC_EINVAL, "%s: %s '%s': not a directory", a->path,
                             what, key)
                 : bc__error(BC_ENOTFOUND, "%s: %s '%s': no such directory",
                             a->path, what, key);
    else
      rc = found;
    goto cleanup;
  }
  if (key[0] == '\0') {
    rc = bc__error(BC_EINVAL, "%s: %s: the root cannot be removed", a->path, what);
    goto cleanup;
  }
  if (!whole && (di.num_subdirs > 0 || di.num_files > 0)) {
    rc = bc__error(BC_EINVAL, "%s: rmdir '%s': directory not empty", a->path, key);
    goto cleanup;
  }
  if ((rc = op_begin(&a->ix)) != 0) goto end;
  if ((rc = adjust(&a->ix, key, true, di.num_files_tree, di.size_tree, -1)) == 0 &&
      (rc = sqlrun_s(&a->ix, "DELETE FROM files WHERE path > ?1 || '/' AND "
                     "path < ?1 || '0'", key)) == 0)
    rc = delete_dirs(&a->ix, key);
end:
  rc = op_end(&a->ix, rc);
cleanup:
  pthread_mutex_unlock(&a->lock);
  free(key);
  return rc;
}

int bc_archive_rmdir(bc_archive *a, const char *path) {
  return remove_dir(a, path, false);
}

int bc_archive_remove_tree(bc_archive *a, const char *path) {
  return remove_dir(a, path, true);
}

int bc_archive_list_files(bc_archive *a, char ***out, size_t *count) {
  sqlite3_stmt *st = NULL;
  char *block = NULL, **v;
  size_t n = 0, bytes = 0, cap = 1 << 16, used = 0;
  int rc = 0, src;
  if (a == NULL || out == NULL || count == NULL)
    return bc__error(BC_EINVAL, "bc_archive_list_files: NULL argument");
  *out = NULL;
  *count = 0;
  /* The strings first (grown as needed), then the pointer array in front. */
  if ((block = malloc(cap)) == NULL)
    return bc__error(BC_ENOMEM, "list_files: out of memory");
  pthread_mutex_lock(&a->lock);
  src = sqlite3_prepare_v2(a->ix.db, "SELECT path FROM files ORDER BY path", -1,
                           &st, NULL);
  if (src != SQLITE_OK) {
    rc = bc__index_error(&a->ix, src, "list files");
    goto cleanup;
  }
  while ((src = sqlite3_step(st)) == SQLITE_ROW) {
    const char *p = (const char *)sqlite3_column_text(st, 0);
    size_t l = (size_t)sqlite3_column_bytes(st, 0) + 1;
    if (used + l > cap) {
      char *nb;
      while (used + l > cap) cap *= 2;
      if ((nb = realloc(block, cap)) == NULL) {
        rc = bc__error(BC_ENOMEM, "list_files: out of memory");
        goto cleanup;
      }
      block = nb;
    }
    memcpy(block + used, p != NULL ? p : "", l);
    used += l;
    n++;
  }
  if (src != SQLITE_DONE) {
    rc = bc__index_error(&a->ix, src, "list files");
    goto cleanup;
  }
  bytes = n * sizeof(char *);
  if (n == 0) goto cleanup;
  if ((v = malloc(bytes + used + 1)) == NULL) {
    rc = bc__error(BC_ENOMEM, "list_files: out of memory");
    goto cleanup;
  }
  memcpy((char *)v + bytes, block, used);
  for (size_t i = 0, off = 0; i < n; i++) {
    v[i] = (char *)v + bytes + off;
    off += strlen(v[i]) + 1;
  }
  *out = v;
  *count = n;
cleanup:
  sqlite3_finalize(st);
  pthread_mutex_unlock(&a->lock);
  free(block);
  return rc;
}

int bc_archive_read_at(bc_archive *a, const bc_archive_file_info *fi,
                       uint64_t offset, void *buf, size_t n) {
  char what[64];
  int fd = -1, rc;
  if (a == NULL || fi == NULL || (buf == NULL && n > 0))
    return bc__error(BC_EINVAL, "bc_archive_read_at: NULL argument");
  if (offset > fi->size || n > fi->size - offset)
    return bc__error(BC_ERANGE, "%s: read_at: bytes %llu..%llu are past the "
                     "file's end (%llu bytes)", a->path,
                     (unsigned long long)offset,
                     (unsigned long long)(offset + n),
                     (unsigned long long)fi->size);
  if (n == 0) return 0;
  pthread_mutex_lock(&a->lock);
  /* The whole file's range, as reads by path check it. */
  rc = bc__shards_locate(&a->sh, fi->shard, fi->offset, fi->size, &fd, "read_at");
  pthread_mutex_unlock(&a->lock);
  if (rc != 0) return rc;
  snprintf(what, sizeof what, "%s", "archive read_at");
  return bc__pread_all(fd, buf, n, fi->offset + offset, what);
}

uint32_t bc_archive_crc32c(uint32_t crc, const void *data, size_t size) {
  return bc__crc32c(crc, data, size);
}
