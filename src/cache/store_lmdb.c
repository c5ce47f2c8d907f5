/*
 * The store's primitive operations (store.h) over LMDB and the root's
 * directories: the production implementation of bc__store_ops.  impl is
 * the bc_cache (its environment, directories, shard length, file mode).
 *
 * Two environments hold the state (doc/cache.md, "Leases"): the main one,
 * synced at every commit that changes it (shard records, checksums, the
 * length, the limit, bytes and the root-wide counters), and the lease one,
 * never synced (lease.h: claims, and access-clock bumps).  A transaction
 * handle holds one transaction on each, and the record calls route:
 *
 *   - get: the main record when it is PRESENT (its last_access the newer
 *     of the main record's and the lease "access" entry's); else the
 *     lease claim; else the main record (a claim made by an older version
 *     of the library, in the main environment);
 *   - put FILLING: the lease claim (a main record of an older claim goes);
 *     put PRESENT: when the main record is the same PRESENT record but for
 *     last_access, only the lease "access" entry (an access bump);
 *     otherwise the main record, the lease claim and access entry going;
 *   - del: all three;
 *   - each: both walked in step, in ascending order, merged as get;
 *   - the clock: the larger of the two environments' "clock"; written to
 *     the lease one, and a main PRESENT record written with a larger
 *     last_access raises the main one's (so that after a reboot, with the
 *     lease state void, the main clock is still ahead of every main
 *     record); every other counter: the main environment's, and a value
 *     written unchanged is not written (no page dirtied: no sync).
 *
 * So a transaction that changes only claims, reservations or access
 * times commits the main environment with nothing dirty (LMDB then
 * writes and syncs nothing) and the lease one without a sync.
 *
 * Atomicity across the two: a write transaction takes the main
 * environment's write lock first (its begin), then the lease one's (lock
 * order: main, then lease, everywhere); every writer of the lease
 * environment holds both, and every writer of PRESENT records and bytes
 * holds the main one, so a claim's room check (bytes of PRESENT shards in
 * the main environment plus reservations in the lease one) is made under
 * both locks and no other process can change either meanwhile.  Commit:
 * the main transaction first, then the lease one (a publish's PRESENT
 * record is durable before its claim goes; a crash between leaves a claim
 * of a dead process beside a PRESENT record, and get prefers the record).
 * A process taking the main lock after our main commit waits in its lease
 * begin until our lease commit, so it sees both.  A read transaction
 * begins on the lease environment first, then the main one: a publish
 * seen gone from the lease snapshot is in the later main snapshot.
 * Nested transactions nest on both.
 *
 * Commit and abort free the handle (LMDB frees the MDB_txns either way).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/internal.h"

struct bc__store_txn {
  MDB_txn *txn;   /* main */
  MDB_txn *lease; /* lease */
  bc__env *env;
  const bc__lease *l;
  bool nested;
};

static int wrap(bc__env *env, MDB_txn *txn, MDB_txn *lease, bool nested,
                bc__store_txn **out) {
  bc__store_txn *t = malloc(sizeof *t);
  if (t == NULL) {
    if (lease) mdb_txn_abort(lease);
    mdb_txn_abort(txn);
    return bc__error(BC_ENOMEM, "out of memory");
  }
  *t = (bc__store_txn){txn, lease, env, bc__env_lease(env), nested};
  *out = t;
  return 0;
}

static int s_begin(void *impl, bool write, bc__store_txn **t) {
  bc_cache *c = impl;
  MDB_txn *txn = NULL, *lease = NULL;
  int rc;
  if (write) { /* the main write lock first (lock order) */
    rc = bc__txn_begin(c->env, true, &txn);
    if (rc == 0 && (rc = bc__lease_txn_begin(c->env, true, &lease)) != 0)
      mdb_txn_abort(txn);
  } else { /* the lease snapshot first (see the header) */
    rc = bc__lease_txn_begin(c->env, false, &lease);
    if (rc == 0 && (rc = bc__txn_begin(c->env, false, &txn)) != 0)
      mdb_txn_abort(lease);
  }
  return rc != 0 ? rc : wrap(c->env, txn, lease, false, t);
}

static int s_nest(bc__store_txn *parent, bc__store_txn **t) {
  MDB_txn *txn, *lease;
  int mrc = mdb_txn_begin(mdb_txn_env(parent->txn), parent->txn, 0, &txn);
  if (mrc != 0) return bc__mdb_error(mrc, "cache state");
  mrc = mdb_txn_begin(mdb_txn_env(parent->lease), parent->lease, 0, &lease);
  if (mrc != 0) {
    mdb_txn_abort(txn);
    return bc__mdb_error(mrc, "lease state");
  }
  return wrap(parent->env, txn, lease, true, t);
}

static int s_commit(bc__store_txn *t) {
  int rc;
  if (t->nested) { /* into the parents */
    int mrc = mdb_txn_commit(t->txn);
    if (mrc != 0) {
      mdb_txn_abort(t->lease);
      rc = bc__mdb_error(mrc, "cache state");
    } else {
      mrc = mdb_txn_commit(t->lease);
      rc = mrc ? bc__mdb_error(mrc, "lease state") : 0;
    }
  } else {
    /* The main state first (durable when it changed), then the leases;
     * a main commit that fails drops the leases' changes with it. */
    rc = bc__txn_commit(t->txn);
    if (rc != 0) {
      mdb_txn_abort(t->lease);
    } else {
      int mrc = mdb_txn_commit(t->lease);
      /* The main state is committed: a lease write lost (a claim not
       * dropped, an access time) is a claim of this live process that its
       * shard's PRESENT record hides, or an older access time. */
      rc = mrc ? bc__mdb_error(mrc, "commit the lease state") : 0;
    }
  }
  free(t);
  return rc;
}

static void s_abort(bc__store_txn *t) {
  mdb_txn_abort(t->lease);
  mdb_txn_abort(t->txn);
  free(t);
}

/* ---- records, routed between the environments --------------------------- */

static void key8(uint64_t shard, unsigned char k[8]) {
  for (int i = 0; i < 8; i++) k[i] = (unsigned char)(shard >> (56 - 8 * i));
}

/* The lease access time of `shard` into *v (0: none). */
static int access_get(bc__store_txn *t, uint64_t shard, uint64_t *v) {
  unsigned char k[8];
  key8(shard, k);
  MDB_val key = {8, k}, val;
  *v = 0;
  int mrc = mdb_get(t->lease, t->l->access, &key, &val);
  if (mrc == MDB_NOTFOUND) return 0;
  if (mrc != 0) return bc__mdb_error(mrc, "read an access time");
  if (val.mv_size == 8) memcpy(v, val.mv_data, 8); /* (else: none) */
  return 0;
}

static int access_put(bc__store_txn *t, uint64_t shard, uint64_t v) {
  unsigned char k[8];
  key8(shard, k);
  MDB_val key = {8, k}, val = {8, &v};
  int mrc = mdb_put(t->lease, t->l->access, &key, &val, 0);
  return mrc ? bc__mdb_error(mrc, "write an access time") : 0;
}

static int access_del(bc__store_txn *t, uint64_t shard) {
  unsigned char k[8];
  key8(shard, k);
  MDB_val key = {8, k};
  int mrc = mdb_del(t->lease, t->l->access, &key, NULL);
  return mrc && mrc != MDB_NOTFOUND ? bc__mdb_error(mrc, "drop an access time") : 0;
}

/* A main PRESENT record with the lease access time merged in. */
static int merge_access(bc__store_txn *t, uint64_t shard, bc__shard_rec *rec) {
  uint64_t v;
  int rc = access_get(t, shard, &v);
  if (rc == 0 && v > rec->last_access) rec->last_access = v;
  return rc;
}

static int s_get(bc__store_txn *t, uint64_t shard, bc__shard_rec *rec, bool *found) {
  bc__shard_rec m;
  bool fm = false;
  int rc = bc__rec_get(t->txn, bc__dbi_shard(t->env), shard, &m, &fm);
  if (rc == 0 && fm && m.state == SHARD_PRESENT) {
    rc = merge_access(t, shard, &m);
    *rec = m;
    *found = true;
    return rc;
  }
  if (rc == 0) rc = bc__rec_get(t->lease, t->l->claim, shard, rec, found);
  if (rc == 0 && !*found && fm) { /* an older version's claim */
    *rec = m;
    *found = true;
  }
  return rc;
}

static int u64_main_get(bc__store_txn *t, const char *name, uint64_t *v) {
  bool found;
  *v = 0;
  int rc = bc__u64_get(t->txn, bc__dbi_meta(t->env), name, v, &found);
  if (rc == 0 && !found) *v = 0;
  return rc;
}

/* Writes main counter `name` unless it holds v already (a page written is
 * a sync at commit). */
static int u64_main_put(bc__store_txn *t, const char *name, uint64_t v) {
  uint64_t old = 0;
  bool found = false;
  int rc = bc__u64_get(t->txn, bc__dbi_meta(t->env), name, &old, &found);
  if (rc == 0 && !(found && old == v)) rc = bc__u64_put(t->txn, bc__dbi_meta(t->env), name, v);
  return rc;
}

static int s_put(bc__store_txn *t, uint64_t shard, const bc__shard_rec *rec) {
  bc__shard_rec m;
  bool fm = false;
  int rc = bc__rec_get(t->txn, bc__dbi_shard(t->env), shard, &m, &fm);
  if (rc != 0) return rc;
  if (rec->state != SHARD_PRESENT) { /* a claim: a lease */
    rc = bc__rec_put(t->lease, t->l->claim, shard, rec);
    if (rc == 0 && fm && m.state != SHARD_PRESENT)
      rc = bc__rec_del(t->txn, bc__dbi_shard(t->env), shard);
    return rc;
  }
  if (fm && m.state == SHARD_PRESENT && m.zstd == rec->zstd &&
      m.records == rec->records && m.bytes == rec->bytes &&
      m.owner.pid == rec->owner.pid && m.owner.start_time == rec->owner.start_time) {
    /* An access bump: a hint, in the lease state (or nothing, when the
     * main record is as recent). */
    if (rec->last_access <= m.last_access) return access_del(t, shard);
    return access_put(t, shard, rec->last_access);
  }
  rc = bc__rec_put(t->txn, bc__dbi_shard(t->env), shard, rec);
  if (rc == 0) rc = bc__rec_del(t->lease, t->l->claim, shard);
  if (rc == 0) rc = access_del(t, shard);
  uint64_t clock = 0;
  if (rc == 0) rc = u64_main_get(t, "clock", &clock);
  if (rc == 0 && rec->last_access > clock) rc = u64_main_put(t, "clock", rec->last_access);
  return rc;
}

static int s_del(bc__store_txn *t, uint64_t shard) {
  bc__shard_rec m;
  bool fm = false;
  int rc = bc__rec_get(t->txn, bc__dbi_shard(t->env), shard, &m, &fm);
  if (rc == 0 && fm) rc = bc__rec_del(t->txn, bc__dbi_shard(t->env), shard);
  if (rc == 0) rc = bc__rec_del(t->lease, t->l->claim, shard);
  if (rc == 0) rc = access_del(t, shard);
  return rc;
}

/* The next decodable record of cursor `cur` (op MDB_FIRST or MDB_NEXT):
 * *more false at the end. */
static int walk_next(MDB_cursor *cur, int op, uint64_t *shard, bc__shard_rec *r,
                     bool *more) {
  MDB_val k, v;
  int mrc;
  while ((mrc = mdb_cursor_get(cur, &k, &v, op)) == 0) {
    op = MDB_NEXT;
    if (bc__rec_decode(&k, &v, shard, r)) break;
  }
  *more = mrc == 0;
  return mrc == 0 || mrc == MDB_NOTFOUND ? 0 : bc__mdb_error(mrc, "cache state");
}

static int s_each(bc__store_txn *t, bc__store_visit visit, void *arg) {
  MDB_cursor *mc = NULL, *lc = NULL;
  int mrc = mdb_cursor_open(t->txn, bc__dbi_shard(t->env), &mc);
  if (mrc == 0 && (mrc = mdb_cursor_open(t->lease, t->l->claim, &lc)) != 0)
    mdb_cursor_close(mc);
  if (mrc != 0) return bc__mdb_error(mrc, "cache state");
  uint64_t ms = 0, ls = 0;
  bc__shard_rec mr, lr;
  bool mm = false, lm = false;
  int rc = walk_next(mc, MDB_FIRST, &ms, &mr, &mm);
  if (rc == 0) rc = walk_next(lc, MDB_FIRST, &ls, &lr, &lm);
  while (rc == 0 && (mm || lm)) {
    /* The lower shard first; one in both: as s_get. */
    bool take_main = mm && (!lm || ms <= ls);
    bool take_lease = lm && (!mm || ls <= ms);
    uint64_t shard = take_main ? ms : ls;
    bc__shard_rec r;
    if (take_main && mr.state == SHARD_PRESENT) {
      r = mr;
      rc = merge_access(t, shard, &r);
    } else {
      r = take_lease ? lr : mr;
    }
    if (rc == 0) rc = visit(arg, shard, &r);
    if (rc == 0 && take_main) rc = walk_next(mc, MDB_NEXT, &ms, &mr, &mm);
    if (rc == 0 && take_lease) rc = walk_next(lc, MDB_NEXT, &ls, &lr, &lm);
  }
  mdb_cursor_close(lc);
  mdb_cursor_close(mc);
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
  int rc = bc__u64_get(t->txn, bc__dbi_meta(t->env), key_names[key], v, found);
  if (rc == 0 && key == BC__KEY_CLOCK) { /* the larger of the two */
    uint64_t lv = 0;
    bool lf = false;
    rc = bc__u64_get(t->lease, t->l->meta, "clock", &lv, &lf);
    if (rc == 0 && lf && (!*found || lv > *v)) {
      *v = lv;
      *found = true;
    }
  }
  return rc;
}

static int s_u64_put(bc__store_txn *t, bc__store_key key, uint64_t v) {
  if (key == BC__KEY_CLOCK) return bc__u64_put(t->lease, t->l->meta, "clock", v);
  return u64_main_put(t, key_names[key], v);
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
