/*
 * The store's primitive operations (store.h) over LMDB and the root's
 * directories: the production implementation of bc__store_ops.  impl is
 * the bc_cache (its environment, directories, shard length, file mode).
 *
 * A transaction handle wraps an MDB_txn with the environment whose
 * databases it reads; commit and abort free it (LMDB frees the MDB_txn
 * either way).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/internal.h"

struct bc__store_txn {
  MDB_txn *txn;
  bc__env *env;
  bool nested;
};

static int wrap(bc__env *env, MDB_txn *txn, bool nested, bc__store_txn **out) {
  bc__store_txn *t = malloc(sizeof *t);
  if (t == NULL) {
    mdb_txn_abort(txn);
    return bc__error(BC_ENOMEM, "out of memory");
  }
  *t = (bc__store_txn){txn, env, nested};
  *out = t;
  return 0;
}

static int s_begin(void *impl, bool write, bc__store_txn **t) {
  bc_cache *c = impl;
  MDB_txn *txn;
  int rc = bc__txn_begin(c->env, write, &txn);
  return rc != 0 ? rc : wrap(c->env, txn, false, t);
}

static int s_nest(bc__store_txn *parent, bc__store_txn **t) {
  MDB_txn *txn;
  int mrc = mdb_txn_begin(mdb_txn_env(parent->txn), parent->txn, 0, &txn);
  if (mrc != 0) return bc__mdb_error(mrc, "cache state");
  return wrap(parent->env, txn, true, t);
}

static int s_commit(bc__store_txn *t) {
  int rc;
  if (t->nested) {
    int mrc = mdb_txn_commit(t->txn); /* into the parent */
    rc = mrc ? bc__mdb_error(mrc, "cache state") : 0;
  } else {
    rc = bc__txn_commit(t->txn);
  }
  free(t);
  return rc;
}

static void s_abort(bc__store_txn *t) {
  mdb_txn_abort(t->txn);
  free(t);
}

static int s_get(bc__store_txn *t, uint64_t shard, bc__shard_rec *rec, bool *found) {
  return bc__rec_get(t->txn, bc__dbi_shard(t->env), shard, rec, found);
}

static int s_put(bc__store_txn *t, uint64_t shard, const bc__shard_rec *rec) {
  return bc__rec_put(t->txn, bc__dbi_shard(t->env), shard, rec);
}

static int s_del(bc__store_txn *t, uint64_t shard) {
  return bc__rec_del(t->txn, bc__dbi_shard(t->env), shard);
}

static int s_each(bc__store_txn *t, bc__store_visit visit, void *arg) {
  MDB_cursor *cur;
  int mrc = mdb_cursor_open(t->txn, bc__dbi_shard(t->env), &cur);
  if (mrc != 0) return bc__mdb_error(mrc, "cache state");
  int rc = 0;
  MDB_val k, v;
  for (int op = MDB_FIRST; rc == 0 && mdb_cursor_get(cur, &k, &v, op) == 0;
       op = MDB_NEXT) {
    bc__shard_rec r;
    uint64_t shard;
    if (bc__rec_decode(&k, &v, &shard, &r)) rc = visit(arg, shard, &r);
  }
  mdb_cursor_close(cur);
  return rc;
}

static int s_sum_get(bc__store_txn *t, uint64_t shard, uint64_t *sum, bool *found) {
  return bc__sum_get(t->txn, bc__dbi_sum(t->env), shard, sum, found);
}

static int s_sum_put(bc__store_txn *t, uint64_t shard, uint64_t sum) {
  return bc__sum_put(t->txn, bc__dbi_sum(t->env), shard, sum);
}

static const char *const key_names[] = {
    [BC__KEY_BYTES] = "bytes", [BC__KEY_CLOCK] = "clock",
    [BC__KEY_LENGTH] = "length", [BC__KEY_FINAL] = "final",
    [BC__KEY_LIMIT] = "limit", [BC__KEY_N_FILLS] = "n_fills",
    [BC__KEY_N_REGENS] = "n_regenerations", [BC__KEY_N_EVICTIONS] = "n_evictions",
    [BC__KEY_N_RECORDS] = "n_records_generated", [BC__KEY_N_WRITTEN] = "n_bytes_written",
    [BC__KEY_N_KEPT] = "n_shards_kept"};

static int s_u64_get(bc__store_txn *t, bc__store_key key, uint64_t *v, bool *found) {
  return bc__u64_get(t->txn, bc__dbi_meta(t->env), key_names[key], v, found);
}

static int s_u64_put(bc__store_txn *t, bc__store_key key, uint64_t v) {
  return bc__u64_put(t->txn, bc__dbi_meta(t->env), key_names[key], v);
}

static bool s_owner_alive(void *impl, bc__owner o) {
  (void)impl;
  return bc__owner_alive(o);
}

static int s_evict(void *impl, uint64_t shard, const bc__shard_rec *rec) {
  bc_cache *c = impl;
  char *path = bc__cache_shard_path(c, shard, rec->records, rec->zstd);
  char *crc = path ? bc__cache_crc_path(c, path) : NULL;
  int rc = 0;
  if (crc == NULL)
    rc = bc__error(BC_ENOMEM, "out of memory");
  else if (unlink(path) != 0 && errno != ENOENT)
    rc = bc__error_errno(errno, "%s: evict", path);
  else if (!rec->zstd) /* its checksums, if the root has them */
    unlink(crc);
  free(crc);
  free(path);
  return rc;
}

static bool s_same_file(void *impl, uint64_t shard, const bc__shard_rec *rec,
                        const bc__file_id *id) {
  char *path = bc__cache_shard_path(impl, shard, rec->records, rec->zstd);
  struct stat st;
  bool same = path != NULL && /* (out of memory: kept, the reader gives up) */
              (stat(path, &st) != 0 || /* lost */
               ((uint64_t)st.st_dev == id->dev && (uint64_t)st.st_ino == id->ino));
  free(path);
  return same;
}

static void s_purge(void *impl, uint64_t shard) {
  bc__unlink_shard_files(impl, shard);
  /* A dead claimant's scratch files go too: its reservation under the
   * limit goes with its claim. */
  bc__clean_scratch(impl);
}

static int s_install(void *impl, const char *scratch, uint64_t shard,
                     uint64_t records, bool sync_dirs) {
  bc_cache *c = impl;
  char *final_path = bc__cache_shard_path(c, shard, records, c->zstd);
  char *final_crc = final_path ? bc__cache_crc_path(c, final_path) : NULL;
  char *scratch_crc = bc__scratch_crc_path(scratch);
  int rc = final_crc && scratch_crc ? 0 : bc__error(BC_ENOMEM, "out of memory");
  bool crc_renamed = false;
  /* The sidecar first, durably: whenever the shard is under its name, so
   * are its checksums.  A crash before the commit leaves files the state
   * does not list, removed with the dead claim (bc__unlink_shard_files);
   * a sidecar alone is replaced by the shard's next publish. */
  if (rc == 0 && c->crc) {
    if (rename(scratch_crc, final_crc) != 0)
      rc = bc__error_errno(errno, "%s: rename from %s", final_crc, scratch_crc);
    else
      crc_renamed = true;
    if (rc == 0 && sync_dirs) rc = bc__fsync_parent_dir(final_crc);
  }
  if (rc == 0 && rename(scratch, final_path) != 0)
    rc = bc__error_errno(errno, "%s: rename from %s", final_path, scratch);
  else if (rc == 0 && sync_dirs && (rc = bc__fsync_parent_dir(final_path)) != 0)
    unlink(final_path);
  if (rc != 0 && crc_renamed) unlink(final_crc);
  free(scratch_crc);
  free(final_crc);
  free(final_path);
  return rc;
}

/* fsync of directory `dir`. */
static int fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return bc__error_errno(errno, "%s: open directory", dir);
  int rc = bc__fsync(fd, dir);
  close(fd);
  return rc;
}

/* A batch's renames made durable: sums/ first (never a shard under its
 * name without its checksums), then shards/. */
static int s_sync_dirs(void *impl) {
  bc_cache *c = impl;
  int rc = 0;
  if (c->crc) rc = fsync_dir(c->sums_dir);
  if (rc == 0) rc = fsync_dir(c->shards_dir);
  return rc;
}

static void s_uninstall(void *impl, uint64_t shard, uint64_t records) {
  bc_cache *c = impl;
  char *path = bc__cache_shard_path(c, shard, records, c->zstd);
  char *crc = path ? bc__cache_crc_path(c, path) : NULL;
  if (path) unlink(path);
  if (crc && c->crc) unlink(crc);
  free(crc);
  free(path);
}

/* metadata.json's length (under the caller's write transaction). */
static int s_end(void *impl, uint64_t length) {
  bc_cache *c = impl;
  bc__meta m;
  int rc = bc__meta_read(c->meta_path, &m);
  if (rc != 0) return rc;
  if (m.length != length || !m.length_final || m.length_hint >= 0) {
    m.length = length;
    m.length_final = true;
    m.length_hint = -1; /* the length is known: a hint has nothing more to say */
    rc = bc__meta_write(c->meta_path, &m, c->mode);
  }
  bc__meta_free(&m);
  return rc;
}

static const bc__store_ops lmdb_ops = {
    .begin = s_begin,
    .nest = s_nest,
    .commit = s_commit,
    .abort = s_abort,
    .get = s_get,
    .put = s_put,
    .del = s_del,
    .each = s_each,
    .sum_get = s_sum_get,
    .sum_put = s_sum_put,
    .u64_get = s_u64_get,
    .u64_put = s_u64_put,
    .owner_alive = s_owner_alive,
    .evict = s_evict,
    .same_file = s_same_file,
    .purge = s_purge,
    .install = s_install,
    .sync_dirs = s_sync_dirs,
    .uninstall = s_uninstall,
    .end = s_end,
};

void bc__store_lmdb_init(bc__store *s, bc_cache *c) {
  *s = (bc__store){.ops = &lmdb_ops, .impl = c, .root = c->root, .R = c->R,
                   .self = c->self};
}
