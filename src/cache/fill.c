/*
 * The life of a shard: claim, fill, publish (evicting), or wait for another
 * filler, or take over a dead one's claim.
 *
 * Claim: a write transaction finds no state (or a FILLING state whose owner
 * died) and stores FILLING with this process's identity.  Only the claimant
 * fills; other processes poll the state, other threads of this process wait
 * on its in-process record of the fill.
 *
 * Fill: a source pass positioned at or before the shard's first record is
 * leased from the pool (or a new pass opened), moved forward with skip() or
 * by reading and dropping records, and the shard's records are written with
 * the crash-safe Bagz writer into scratch/.  Its checksum is computed on the
 * way.  No lock is held while the source runs.
 *
 * Publish, in ONE write transaction (one at a time across processes):
 *   1. the claim must still be ours;
 *   2. a checksum recorded at an earlier publish must match (else the
 *      source is not deterministic: nothing is published);
 *   3. while bytes + new > disk limit: the least recently used PRESENT
 *      shard is unlinked and its state dropped;
 *   4. the scratch file is renamed into shards/ and the directory fsynced;
 *   5. the state becomes PRESENT; bytes, clock, length are updated (and
 *      metadata.json when the length grows or becomes final);
 *   6. commit.
 * Victims are unlinked before the new file appears, so the bytes in
 * shards/ never exceed the limit, at any instant, across processes.  A crash
 * before the commit leaves the new file in shards/ with a dead claim: the
 * next claimant removes it and fills again; victims already unlinked are
 * found missing on open and refilled.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bag/internal.h"
#include "cache/internal.h"
#include "common/crc32c.h"

/* ---- the pass pool ------------------------------------------------------------ */

/* A seekable source reuses a parked pass only when it stands at most this
 * many records (of a shard of R) before the target; farther, opening a pass
 * at the target with open_at costs less than skipping. */
static uint64_t seek_reuse_max(const bc_cache *c) { return c->R / 16; }

/* Leases a pass positioned at or before `target` (the shard's first record)
 * and returns its slot; the pass's position is then <= target.
 *
 * The policy (doc/cache.md, "Parked passes"):
 *  1. the idle open pass standing furthest at or before target (a seekable
 *     source: only if it is at most seek_reuse_max() before it);
 *  2. else a new pass in an empty slot, opened at record 0 (at target with
 *     open_at, when target is not 0);
 *  3. else an idle pass is closed and its slot reopened as in 2: one
 *     standing where another pass stands too (it serves no target the
 *     other does not), else the one standing furthest past the target (the
 *     pass least likely to be the nearest one before a future target),
 *     else (a seekable source) the nearest one before it.
 * At most max_running passes are leased at once (1 for a source that is not
 * thread-safe); beyond that, or with every slot leased, it waits for a
 * pass to come back, or (BC__NO_WAIT) returns BC_EAGAIN.  The source is
 * called with no lock held. */
static int pass_lease(bc_cache *c, uint64_t target, bc__wait_mode mode,
                      size_t *slot) {
  bool seekable = c->src.open_at != NULL;
  pthread_mutex_lock(&c->lock);
  for (;;) {
    size_t best = SIZE_MAX, empty = SIZE_MAX, past = SIZE_MAX, busy = 0;
    for (size_t i = 0; i < c->max_passes; i++) {
      bc__pass *p = &c->passes[i];
      if (p->busy) {
        busy++;
        continue;
      }
      if (!p->open) {
        if (empty == SIZE_MAX) empty = i;
      } else if (p->pos <= target) {
        if (best == SIZE_MAX || p->pos > c->passes[best].pos) best = i;
      } else if (past == SIZE_MAX || p->pos > c->passes[past].pos) {
        past = i;
      }
    }
    /* With no slot free, a duplicate is the first to go (the pass of the
     * lower slot among those standing at one position stays). */
    size_t dup = SIZE_MAX;
    for (size_t i = 0; empty == SIZE_MAX && dup == SIZE_MAX && i < c->max_passes; i++)
      for (size_t j = 0; j < i && dup == SIZE_MAX; j++)
        if (!c->passes[i].busy && c->passes[i].open && i != best &&
            !c->passes[j].busy && c->passes[j].open &&
            c->passes[j].pos == c->passes[i].pos)
          dup = i;
    bool reuse = best != SIZE_MAX &&
                 (!seekable || target - c->passes[best].pos <= seek_reuse_max(c));
    size_t pick = reuse ? best
                  : empty != SIZE_MAX ? empty
                  : dup != SIZE_MAX   ? dup
                  : past != SIZE_MAX  ? past
                                      : best; /* seekable: the far one before */
    if (busy >= c->max_running || pick == SIZE_MAX) { /* wait for a pass */
      if (c->abandon) {
        /* A pass may be held by a fill stuck in the source for good. */
        pthread_mutex_unlock(&c->lock);
        return bc__error(BC_ECLOSED, "%s: the cache is closing", c->root);
      }
      if (mode == BC__NO_WAIT) {
        pthread_mutex_unlock(&c->lock);
        return bc__error(BC_EAGAIN, "%s: every pass over the source is in use by "
                         "another fill", c->root);
      }
      int wrc = bc__cond_wait(&c->cond, &c->lock);
      if (wrc != 0) { /* interrupted: nothing leased */
        pthread_mutex_unlock(&c->lock);
        return wrc;
      }
      continue;
    }
    bc__pass *p = &c->passes[pick];
    p->busy = true;
    pthread_mutex_unlock(&c->lock);
    if (!reuse) {
      /* No usable pass before the target: a new one, from the beginning or
       * (seekable) from the target itself. */
      if (p->open) c->src.close(c->src.payload, p->handle);
      p->open = false;
      void *handle = NULL;
      uint64_t at = seekable ? target : 0;
      int rc = at > 0 ? c->src.open_at(c->src.payload, at, &handle)
                      : c->src.open(c->src.payload, &handle);
      if (rc != 0) {
        if (rc > 0)
          rc = bc__error(BC_ESOURCE, "the source's %s failed",
                         at > 0 ? "open_at" : "open");
        pthread_mutex_lock(&c->lock);
        p->busy = false;
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->lock);
        return rc;
      }
      atomic_fetch_add(&c->stats.passes_opened, 1);
      pthread_mutex_lock(&c->lock);
      p->handle = handle;
      p->pos = at;
      p->opened_at = at;
      p->open = true;
      pthread_mutex_unlock(&c->lock);
    }
    *slot = pick;
    return 0;
  }
}

/* Returns a pass to the pool; a pass that failed or ended is closed. */
static void pass_return(bc_cache *c, size_t slot, bool keep) {
  bc__pass *p = &c->passes[slot];
  if (!keep && p->open) {
    c->src.close(c->src.payload, p->handle);
    pthread_mutex_lock(&c->lock);
    p->open = false;
  } else {
    pthread_mutex_lock(&c->lock);
  }
  p->busy = false;
  pthread_cond_broadcast(&c->cond);
  pthread_mutex_unlock(&c->lock);
}

void bc__passes_close_all(bc_cache *c) {
  for (size_t i = 0; c->passes && i < c->max_passes; i++)
    if (c->passes[i].open) {
      c->src.close(c->src.payload, c->passes[i].handle);
      c->passes[i].open = false;
    }
}

/* Records the error of a source callback (positive or zero codes are the
 * source misbehaving: make them BC_ESOURCE). */
static int source_error(int rc, const char *what) {
  if (rc < 0) return rc;
  return bc__error(BC_ESOURCE, "the source's %s returned %d", what, rc);
}

/* Moves the leased pass forward to `target`.  *ended when the source ended
 * first (the pass then sits at the end). */
static int pass_advance(bc_cache *c, bc__pass *p, uint64_t target, bc_buf *buf,
                        bool *ended) {
  *ended = false;
  while (p->pos < target) {
    uint64_t want = target - p->pos, got = 0;
    int rc = bc__interrupt_poll(); /* between records, as the fill loop */
    if (rc != 0) return rc;
    if (c->src.skip != NULL) {
      rc = c->src.skip(c->src.payload, p->handle, want, &got);
      if (rc < 0) return rc;
      if (got > want) return bc__error(BC_ESOURCE, "the source's skip skipped too many");
    } else {
      rc = c->src.next(c->src.payload, p->handle, buf);
      if (rc < 0) return rc;
      if (rc > 1) return source_error(rc, "next");
      got = (uint64_t)rc;
    }
    p->pos += got;
    atomic_fetch_add(&c->stats.records_skipped, got);
    if (got < (c->src.skip ? want : 1)) {
      *ended = true;
      return 0;
    }
  }
  return 0;
}

/* ---- claims -------------------------------------------------------------------- */

static bc__filling *filling_find(bc__fill_registry *r, uint64_t shard) {
  for (bc__filling *f = r->list; f; f = f->next)
    if (f->shard == shard && !f->done) return f;
  return NULL;
}

static void filling_put(bc__fill_registry *r, bc__filling *f) {
  if (--f->refs > 0) return;
  for (bc__filling **p = &r->list; *p; p = &(*p)->next)
    if (*p == f) {
      *p = f->next;
      break;
    }
  bc_error_state_clear(&f->err);
  free(f);
}

/* True when `rec` is the claim of fill `token` of this process. */
static bool claim_is(const bc_cache *c, const bc__shard_rec *rec, uint64_t token) {
  return rec->state == SHARD_FILLING && rec->owner.pid == c->self.pid &&
         rec->owner.start_time == c->self.start_time && rec->bytes == token;
}

/* Drops the FILLING claim of fill `token` on a shard (after a failed or
 * abandoned fill); a newer claim is left alone.  The message of the
 * failure being reported is kept. */
static void release_claim(bc_cache *c, uint64_t shard, uint64_t token, int code) {
  bc_error_state failure = BC_ERROR_STATE_INIT;
  bc_error_save(&failure, code);
  MDB_txn *t;
  if (bc__txn_begin(c->env, true, &t) != 0) goto cleanup;
  bc__shard_rec rec;
  bool found;
  if (bc__rec_get(t, bc__dbi_shard(c->env), shard, &rec, &found) == 0 && found &&
      claim_is(c, &rec, token) && bc__rec_del(t, bc__dbi_shard(c->env), shard) == 0) {
    bc__txn_commit(t);
  } else {
    mdb_txn_abort(t);
  }
cleanup:
  bc_error_restore(&failure);
  bc_error_state_clear(&failure);
}

/* Updates metadata.json's length (under the caller's write transaction). */
static int meta_update_length(bc_cache *c, uint64_t length, bool final) {
  bc__meta m;
  int rc = bc__meta_read(c->meta_path, &m);
  if (rc != 0) return rc;
  if (m.length != length || m.length_final != final) {
    m.length = length;
    m.length_final = final;
    rc = bc__meta_write(c->meta_path, &m, c->mode);
  }
  bc__meta_free(&m);
  return rc;
}

/* Makes the length final at `end` in the shared state and metadata.json
 * (under the caller's write transaction t). */
static int put_final_length(bc_cache *c, MDB_txn *t, uint64_t end) {
  MDB_dbi meta = bc__dbi_meta(c->env);
  int rc = bc__u64_put(t, meta, "length", end);
  if (rc == 0) rc = bc__u64_put(t, meta, "final", 1);
  if (rc == 0) rc = meta_update_length(c, end, true);
  return rc;
}

/* Commits t (aborts it when rc != 0); once the final length `end` is
 * committed, this process knows it too. */
static int commit_final_length(bc_cache *c, MDB_txn *t, int rc, uint64_t end) {
  if (rc == 0) {
    rc = bc__txn_commit(t);
  } else {
    mdb_txn_abort(t);
  }
  if (rc == 0) {
    atomic_store(&c->known_length, end);
    atomic_store(&c->final, true);
  }
  return rc;
}

/* Records that the source ends at `end` (no records from there on). */
static int record_end(bc_cache *c, uint64_t shard, uint64_t end) {
  MDB_txn *t;
  int rc = bc__txn_begin(c->env, true, &t);
  if (rc != 0) return rc;
  MDB_dbi meta = bc__dbi_meta(c->env);
  uint64_t known = 0;
  bool found;
  rc = bc__u64_get(t, meta, "length", &known, &found);
  if (rc == 0 && known > end)
    rc = bc__error(BC_ENONDET,
                   "%s: the source ended after %llu records, but %llu were "
                   "seen before: the iterator is not deterministic", c->root,
                   (unsigned long long)end, (unsigned long long)known);
  if (rc == 0) rc = put_final_length(c, t, end);
  if (rc == 0) rc = bc__rec_del(t, bc__dbi_shard(c->env), shard);
  return commit_final_length(c, t, rc, end);
}

int bc_cache_finalize(bc_cache *c) {
  if (atomic_load(&c->final)) return 0;
  MDB_txn *t;
  int rc = bc__txn_begin(c->env, true, &t); /* serialises length writers */
  if (rc != 0) return rc;
  MDB_dbi meta = bc__dbi_meta(c->env);
  uint64_t fin = 0, end = 0;
  bool found;
  rc = bc__u64_get(t, meta, "final", &fin, &found);
  if (rc == 0 && !(found && fin)) {
    MDB_cursor *cur;
    int mrc = mdb_cursor_open(t, bc__dbi_shard(c->env), &cur);
    if (mrc != 0) rc = bc__mdb_error(mrc, "cache state");
    MDB_val k, v;
    for (int op = MDB_FIRST; rc == 0 && mdb_cursor_get(cur, &k, &v, op) == 0;
         op = MDB_NEXT) {
      bc__shard_rec r;
      uint64_t shard;
      if (bc__rec_decode(&k, &v, &shard, &r) && r.state == SHARD_PRESENT &&
          shard * c->R + r.records > end)
        end = shard * c->R + r.records;
    }
    if (mrc == 0) mdb_cursor_close(cur);
    if (rc == 0) rc = put_final_length(c, t, end);
  } else if (rc == 0) {
    rc = bc__u64_get(t, meta, "length", &end, &found);
  }
  return commit_final_length(c, t, rc, end);
}

/* The sidecar of a scratch file: SCRATCH.crc, in scratch/ (removed with
 * the scratch files of dead processes). */
static void scratch_crc_file(const char *scratch, char *out, size_t size) {
  size_t n = strlen(scratch);
  if (n + 5 > size) n = size - 5; /* never: paths are shorter than PATH_MAX */
  memcpy(out, scratch, n);
  memcpy(out + n, ".crc", 5);
}

/* ---- publishing ------------------------------------------------------------------- */

/* Where this process's passes stand, for the eviction's cost model:
 * ascending positions of the passes kept open, plus `next` (where the
 * publishing fill's own pass is returned), UINT64_MAX for none. */
typedef struct {
  uint64_t pos[256];
  size_t n;
} pass_snapshot;

static int u64_cmp(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static void pass_snapshot_take(bc_cache *c, uint64_t next, pass_snapshot *ps) {
  ps->n = 0;
  if (c->src.open_at == NULL) { /* a seekable source rebuilds from anywhere */
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->max_passes && ps->n < 255; i++)
      if (!c->passes[i].busy && c->passes[i].open) ps->pos[ps->n++] = c->passes[i].pos;
    pthread_mutex_unlock(&c->lock);
    if (next != UINT64_MAX) ps->pos[ps->n++] = next;
    qsort(ps->pos, ps->n, sizeof *ps->pos, u64_cmp);
  }
}

/* Records a pass must read and drop before it can rebuild a shard starting
 * at `start`: the distance from the nearest pass at or before it (from
 * record 0 when there is none); 0 for a seekable source. */
static uint64_t rebuild_skip(const bc_cache *c, const pass_snapshot *ps,
                             uint64_t start) {
  if (c->src.open_at != NULL) return 0;
  uint64_t from = 0;
  for (size_t i = 0; i < ps->n && ps->pos[i] <= start; i++) from = ps->pos[i];
  return start - from;
}

/* Picks the victim among the PRESENT shards other than `keep`: the lowest
 * last_access + present * skip / R, where skip is rebuild_skip(): least
 * recently used, except that a shard which costs k more shards of records
 * to rebuild (from this process's passes) is kept as if it had been read
 * k * present accesses later (a GreedyDual-style weighing of recency and
 * cost; doc/cache.md, "Eviction").  Plain LRU when every shard costs the
 * same (a seekable source, or passes at every shard). */
static int find_victim(bc_cache *c, MDB_txn *t, uint64_t keep,
                       const pass_snapshot *ps, uint64_t *victim,
                       bc__shard_rec *vrec, bool *found) {
  MDB_cursor *cur;
  int mrc = mdb_cursor_open(t, bc__dbi_shard(c->env), &cur);
  if (mrc != 0) return bc__mdb_error(mrc, "cache state");
  *found = false;
  MDB_val k, v;
  double present = 0, best = 0;
  for (int op = MDB_FIRST; mdb_cursor_get(cur, &k, &v, op) == 0; op = MDB_NEXT) {
    bc__shard_rec r;
    uint64_t s;
    if (bc__rec_decode(&k, &v, &s, &r) && r.state == SHARD_PRESENT) present++;
  }
  for (int op = MDB_FIRST; mdb_cursor_get(cur, &k, &v, op) == 0; op = MDB_NEXT) {
    bc__shard_rec r;
    uint64_t s;
    if (!bc__rec_decode(&k, &v, &s, &r)) continue;
    if (r.state != SHARD_PRESENT || s == keep) continue;
    double score = (double)r.last_access +
                   present * (double)rebuild_skip(c, ps, s * c->R) / (double)c->R;
    if (!*found || score < best) {
      *victim = s;
      *vrec = r;
      *found = true;
      best = score;
    }
  }
  mdb_cursor_close(cur);
  return 0;
}

/* Removes the claims (and any files) of dead fillers: a claimant killed
 * between its rename and its commit leaves a complete file in shards/ that
 * the state does not count.  Called in publish's transaction, before the
 * eviction decisions, so the limit also covers such files. */
static int reap_dead_claims(bc_cache *c, MDB_txn *t, uint64_t keep) {
  MDB_cursor *cur;
  int mrc = mdb_cursor_open(t, bc__dbi_shard(c->env), &cur);
  if (mrc != 0) return bc__mdb_error(mrc, "cache state");
  uint64_t dead[64];
  size_t n = 0;
  MDB_val k, v;
  for (int op = MDB_FIRST; n < 64 && mdb_cursor_get(cur, &k, &v, op) == 0;
       op = MDB_NEXT) {
    bc__shard_rec r;
    uint64_t s;
    if (!bc__rec_decode(&k, &v, &s, &r)) continue;
    if (r.state == SHARD_FILLING && s != keep && !bc__owner_alive(r.owner))
      dead[n++] = s;
  }
  mdb_cursor_close(cur);
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < n; i++) {
    bc__unlink_shard_files(c, dead[i]);
    rc = bc__rec_del(t, bc__dbi_shard(c->env), dead[i]);
  }
  return rc;
}

/* The part of a publish that may fail after victims were unlinked, in a
 * nested transaction: if it fails only it is rolled back, and the
 * evictions (whose files are gone) are still committed by the caller. */
static int publish_nested(bc_cache *c, MDB_txn *parent, uint64_t shard,
                          const char *scratch, const char *final_path,
                          const bc__shard_rec *rec, uint64_t bytes,
                          uint64_t clock, bool write_sum, uint64_t checksum,
                          bool grow, uint64_t new_length, bool ended) {
  MDB_txn *t;
  int mrc = mdb_txn_begin(mdb_txn_env(parent), parent, 0, &t);
  if (mrc != 0) return bc__mdb_error(mrc, "cache state");
  MDB_dbi meta = bc__dbi_meta(c->env);
  int rc = 0;
  bool renamed = false, crc_renamed = false;
  char scratch_crc[4200], final_crc[4200];
  scratch_crc_file(scratch, scratch_crc, sizeof scratch_crc);
  bc__cache_crc_file(c, final_path, final_crc, sizeof final_crc);
  /* The sidecar first, durably: whenever the shard is under its name, so
   * are its checksums.  A crash before the commit leaves files the state
   * does not list, removed with the dead claim (bc__unlink_shard_files);
   * a sidecar alone is replaced by the shard's next publish. */
  if (c->crc) {
    if (rename(scratch_crc, final_crc) != 0)
      rc = bc__error_errno(errno, "%s: rename from %s", final_crc, scratch_crc);
    else
      crc_renamed = true;
    if (rc == 0) rc = bc__fsync_parent_dir(final_crc);
  }
  if (rc == 0 && rename(scratch, final_path) != 0)
    rc = bc__error_errno(errno, "%s: rename from %s", final_path, scratch);
  else if (rc == 0)
    renamed = true;
  if (rc == 0) rc = bc__fsync_parent_dir(final_path);
  if (rc == 0) rc = bc__rec_put(t, bc__dbi_shard(c->env), shard, rec);
  if (rc == 0) rc = bc__u64_put(t, meta, "bytes", bytes + rec->bytes);
  if (rc == 0) rc = bc__u64_put(t, meta, "clock", clock);
  if (rc == 0 && write_sum) rc = bc__sum_put(t, bc__dbi_sum(c->env), shard, checksum);
  if (rc == 0 && grow) {
    rc = bc__u64_put(t, meta, "length", new_length);
    if (rc == 0 && ended) rc = bc__u64_put(t, meta, "final", 1);
    /* metadata.json records the end once it is known; the growing lower
     * bound lives in the shared state (and a rebuild recovers it from the
     * shard files), which saves a file rewrite and two fsyncs per shard. */
    if (rc == 0 && ended) rc = meta_update_length(c, new_length, true);
  }
  if (rc == 0) {
    mrc = mdb_txn_commit(t); /* into the parent */
    if (mrc != 0) rc = bc__mdb_error(mrc, "cache state");
  } else {
    mdb_txn_abort(t);
  }
  /* A file the state does not know must not stay in shards/. */
  if (rc != 0 && renamed) unlink(final_path);
  if (rc != 0 && crc_renamed) unlink(final_crc);
  return rc;
}

/* `note`: appended to determinism errors (the start a seekable source's
 * pass was opened at), "" when none. */
static int publish(bc_cache *c, uint64_t shard, uint64_t token,
                   const char *scratch, uint64_t records, uint64_t checksum,
                   bool ended, const char *note, bool *regenerated) {
  struct stat st;
  if (stat(scratch, &st) != 0) return bc__error_errno(errno, "%s", scratch);
  pass_snapshot ps; /* taken before the transaction: no lock inside it */
  pass_snapshot_take(c, ended ? UINT64_MAX : shard * c->R + records, &ps);
  uint64_t size = (uint64_t)st.st_size;
  MDB_dbi sdb = bc__dbi_shard(c->env), meta = bc__dbi_meta(c->env),
          sums = bc__dbi_sum(c->env);
  MDB_txn *t;
  int rc = bc__txn_begin(c->env, true, &t);
  if (rc != 0) return rc;
  bc__shard_rec rec;
  bool found, have_sum;
  uint64_t old_sum = 0, bytes = 0, clock = 0, length = 0, final_flag = 0;
  bool f1 = false, f2 = false, f3 = false, f4 = false, f5 = false;
  uint64_t start = shard * c->R, end = start + records;
  char final_path[4200];
  bc__cache_shard_file(c, shard, records, c->zstd, final_path, sizeof final_path);

  rc = bc__rec_get(t, sdb, shard, &rec, &found);
  if (rc == 0 && (!found || !claim_is(c, &rec, token)))
    rc = bc__error(BC_EIO, "%s: shard %llu: our claim was taken over while "
                   "filling it", c->root, (unsigned long long)shard);
  if (rc == 0) rc = bc__sum_get(t, sums, shard, &old_sum, &have_sum);
  if (rc == 0 && have_sum && old_sum != checksum)
    rc = bc__error(BC_ENONDET,
                   "%s: shard %llu (records %llu..%llu) came out different "
                   "when regenerated: the iterator is not deterministic%s",
                   c->root, (unsigned long long)shard, (unsigned long long)start,
                   (unsigned long long)end, note);
  if (rc == 0) rc = bc__u64_get(t, meta, "bytes", &bytes, &f1);
  if (rc == 0) rc = bc__u64_get(t, meta, "clock", &clock, &f2);
  if (rc == 0) rc = bc__u64_get(t, meta, "length", &length, &f3);
  if (rc == 0) rc = bc__u64_get(t, meta, "final", &final_flag, &f5);
  bool is_final = f5 && final_flag;
  /* A pass that ends where earlier passes went on, or goes past a known
   * end, means the source is not deterministic. */
  if (rc == 0 && ((ended && length > end) || (is_final && end > length) ||
                  (is_final && ended && end != length)))
    rc = bc__error(BC_ENONDET,
                   "%s: shard %llu: the source now %s after %llu records "
                   "(%s %llu before): the iterator is not deterministic%s",
                   c->root, (unsigned long long)shard,
                   ended ? "ends" : "goes on", (unsigned long long)end,
                   is_final ? "length" : "at least", (unsigned long long)length,
                   note);
  /* The limit is shared: the one last set by any process opening the root
   * with a limit (see bc_cache_open). */
  uint64_t limit = c->opts.disk_limit;
  if (rc == 0) rc = bc__u64_get(t, meta, "limit", &limit, &f4);
  if (rc == 0 && !f4) limit = c->opts.disk_limit;
  /* A limit that cannot hold the shards at work would thrash: refused
   * (checked at open already when a shard's size was known then). */
  unsigned prefetched, need = bc__limit_shards(&c->opts, &prefetched);
  if (rc == 0 && limit != 0 && (size > limit || (records == c->R && limit / need < size)))
    rc = bc__limit_error(c->root, limit, need, prefetched, size,
                         "the size of this shard");
  if (rc == 0 && limit != 0) rc = reap_dead_claims(c, t, shard);
  /* This process's recent opens count before victims are picked. */
  if (rc == 0 && limit != 0) rc = bc__access_apply(c, t, &clock);
  uint64_t victims[32];
  size_t nvictims = 0;
  while (rc == 0 && limit != 0 && bytes + size > limit) {
    uint64_t victim = 0;
    bc__shard_rec vrec = {0};
    bool any = false;
    rc = find_victim(c, t, shard, &ps, &victim, &vrec, &any);
    if (rc != 0) break;
    if (!any) {
      rc = bc__error(BC_ENOSPC, "%s: %llu bytes in use and nothing left to "
                     "evict under the disk limit %llu", c->root,
                     (unsigned long long)bytes, (unsigned long long)limit);
      break;
    }
    char vpath[4200];
    bc__cache_shard_file(c, victim, vrec.records, vrec.zstd, vpath, sizeof vpath);
    if (unlink(vpath) != 0 && errno != ENOENT) {
      rc = bc__error_errno(errno, "%s: evict", vpath);
      break;
    }
    if (!vrec.zstd) { /* its checksums, if the root has them */
      char vcrc[4200];
      bc__cache_crc_file(c, vpath, vcrc, sizeof vcrc);
      unlink(vcrc);
    }
    rc = bc__rec_del(t, sdb, victim);
    bytes = vrec.bytes > bytes ? 0 : bytes - vrec.bytes;
    atomic_fetch_add(&c->stats.evictions, 1);
    if (nvictims < 32) victims[nvictims++] = victim;
  }
  if (rc != 0) {
    /* Nothing unlinked yet, or the unlinks are recorded: commit those. */
    if (nvictims > 0 && bc__u64_put(t, meta, "bytes", bytes) == 0 &&
        bc__u64_put(t, meta, "clock", clock) == 0 && bc__txn_commit(t) == 0)
      t = NULL;
    if (t) mdb_txn_abort(t);
    return rc;
  }
  rec = (bc__shard_rec){.state = SHARD_PRESENT, .zstd = c->zstd,
                        .records = records, .bytes = size,
                        .last_access = ++clock};
  bool grow = end > length || ended;
  uint64_t new_length = ended ? end : (end > length ? end : length);
  int prc = publish_nested(c, t, shard, scratch, final_path, &rec, bytes, clock,
                           !have_sum, checksum, grow, new_length, ended);
  if (prc != 0) {
    bc_error_state failure = BC_ERROR_STATE_INIT;
    bc_error_save(&failure, prc);
    /* Keep the evictions (their files are gone) even though the publish
     * failed: the state then matches shards/. */
    bc__u64_put(t, meta, "bytes", bytes);
    bc__u64_put(t, meta, "clock", clock); /* the bumps applied above */
    if (bc__txn_commit(t) != 0) { /* the state now lists lost files:
                                     readers find them missing and refill */
    }
    bc__readers_forget(c, victims, nvictims);
    bc_error_restore(&failure);
    bc_error_state_clear(&failure);
    return prc;
  }
  rc = bc__txn_commit(t);
  if (rc != 0) { /* unknown to the state: take them back */
    char final_crc[4200];
    bc__cache_crc_file(c, final_path, final_crc, sizeof final_crc);
    unlink(final_path);
    if (c->crc) unlink(final_crc);
  }
  bc__readers_forget(c, victims, nvictims);
  if (rc == 0) {
    if (end > atomic_load(&c->known_length)) atomic_store(&c->known_length, end);
    if (ended) atomic_store(&c->final, true);
    *regenerated = have_sum;
  }
  return rc;
}

/* ---- filling ------------------------------------------------------------------------ */

/* Appends the CRC-32C of a record (little-endian) to the sidecar's table,
 * after room for its header. */
static int crc_append(bc_buf *crcs, const void *data, size_t size) {
  size_t at = crcs->size ? crcs->size : BC__CRC_HEADER;
  int rc = bc__buf_reserve(crcs, at + 4);
  if (rc != 0) return rc;
  uint32_t v = bc__crc32c(0, data, size);
  for (int i = 0; i < 4; i++) crcs->data[at + i] = (unsigned char)(v >> (8 * i));
  crcs->size = at + 4;
  return 0;
}

/* Writes the shard's checksums to SCRATCH.crc and fsyncs it; publish
 * renames it into sums/ with the shard. */
static int write_sidecar(bc_cache *c, const char *scratch, bc_buf *crcs,
                         uint64_t records, uint64_t records_bytes) {
  char path[4200];
  scratch_crc_file(scratch, path, sizeof path);
  int rc = bc__buf_reserve(crcs, BC__CRC_HEADER + 4 * records);
  if (rc != 0) return rc;
  crcs->size = BC__CRC_HEADER + 4 * records;
  bc__crc_table_header((unsigned char *)crcs->data, records, records_bytes);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, (mode_t)c->mode);
  if (fd < 0) return bc__error_errno(errno, "%s: create", path);
  rc = bc__write_all(fd, crcs->data, crcs->size, path);
  if (rc == 0) rc = bc__fsync(fd, path);
  close(fd);
  return rc;
}

/* BC_ECLOSED when fill `f` was abandoned (bc_cache_abandon_fills). */
static int check_abandoned(bc_cache *c, const bc__filling *f) {
  if (!atomic_load_explicit(&f->abandoned, memory_order_relaxed)) return 0;
  return bc__error(BC_ECLOSED, "%s: shard %llu: the fill was abandoned", c->root,
                   (unsigned long long)f->shard);
}

/* A seekable source's pass opened at `start` ended at once, with `start`
 * beyond the records known to exist: where the source ends is still
 * unknown (anywhere from the known length to start).  Reopens the pass at
 * the known length and moves it to `start`: *ended when the source ends
 * first (the pass then stands at the end).  A pass that reaches `start`
 * shows the source's open_at was wrong: BC_ENONDET. */
static int pass_find_end(bc_cache *c, bc__pass *p, uint64_t start, bc_buf *buf,
                         bool *ended) {
  uint64_t from = atomic_load(&c->known_length);
  c->src.close(c->src.payload, p->handle);
  void *handle = NULL;
  int rc = c->src.open_at(c->src.payload, from, &handle);
  pthread_mutex_lock(&c->lock);
  p->open = rc == 0;
  if (rc == 0) {
    p->handle = handle;
    p->pos = p->opened_at = from;
  }
  pthread_mutex_unlock(&c->lock);
  if (rc != 0) return rc > 0 ? bc__error(BC_ESOURCE, "the source's open_at failed") : rc;
  atomic_fetch_add(&c->stats.passes_opened, 1);
  if ((rc = pass_advance(c, p, start, buf, ended)) != 0) return rc;
  if (!*ended)
    rc = bc__error(BC_ENONDET,
                   "%s: the source's open_at(%llu) gave no record, but a pass "
                   "opened at %llu goes on to record %llu: the source does not "
                   "seek correctly", c->root, (unsigned long long)start,
                   (unsigned long long)from, (unsigned long long)start);
  return rc;
}

/* Fills shard f->shard, which this process has claimed (claim f->token). */
static int fill(bc_cache *c, bc__filling *f, bc__wait_mode mode) {
  uint64_t shard = f->shard;
  uint64_t start = shard * c->R;
  size_t slot = 0;
  int rc = pass_lease(c, start, mode, &slot);
  if (rc != 0) return rc;
  bc__pass *p = &c->passes[slot];
  bc_buf buf = BC_BUF_INIT, crcs = BC_BUF_INIT;
  bc_writer *w = NULL;
  bool ended = false, keep = false;
  uint64_t n = 0;
  char note[160] = "";
  if (c->src.open_at != NULL && p->opened_at > 0) /* a pass from 0 is open()'s */
    snprintf(note, sizeof note, " (its pass was opened at record %llu with the "
             "source's open_at)", (unsigned long long)p->opened_at);
  char scratch[4200];
  /* SHARD-PID-START.TOKEN: the owner for bc__clean_scratch, the token so
   * that two fills of a shard in one process never share a file. */
  snprintf(scratch, sizeof scratch, "%s/%llu-%d-%llu.%llu.%s", c->scratch_dir,
           (unsigned long long)shard, (int)c->self.pid,
           (unsigned long long)c->self.start_time, (unsigned long long)f->token,
           c->zstd ? "bagz" : "bag");

  if ((rc = pass_advance(c, p, start, &buf, &ended)) != 0) goto cleanup;
  if (ended) { /* the source has no record `start` */
    rc = record_end(c, shard, p->pos);
    if (rc == 0)
      rc = bc__error(BC_ERANGE, "%s: the source ends after %llu records",
                     c->root, (unsigned long long)p->pos);
    goto cleanup;
  }
  bc_writer_options wo = BC_WRITER_OPTIONS_INIT;
  wo.compression = c->zstd ? BC_COMPRESSION_ZSTD : BC_COMPRESSION_NONE;
  wo.zstd_level = c->zstd ? c->level : 0;
  wo.file_mode = c->mode;
  if ((rc = bc_writer_open(&w, scratch, &wo)) != 0) goto cleanup;
  /* zstd frames carry zstd's content checksum; records of .bag shards get
   * a CRC-32C each, in the sidecar (format version 2). */
  if (c->zstd && (rc = bc__writer_checksum_frames(w)) != 0) goto cleanup;
  uint64_t sum = BC__SUM_INIT;
  while (n < c->R) {
    if (atomic_load(&c->stop_fills)) { /* closing: abandon, publish nothing */
      rc = bc__error(BC_ECLOSED, "%s: the cache is closing", c->root);
      goto cleanup;
    }
    if ((rc = check_abandoned(c, f)) != 0) goto cleanup;
    /* This thread's interrupt handler: the fill is abandoned like a
     * failed one (claim released, scratch removed). */
    if ((rc = bc__interrupt_poll()) != 0) goto cleanup;
    int r = c->src.next(c->src.payload, p->handle, &buf);
    if (r < 0) {
      rc = r;
      goto cleanup;
    }
    if (r > 1) {
      rc = source_error(r, "next");
      goto cleanup;
    }
    if (r == 0) {
      ended = true;
      break;
    }
    p->pos++;
    sum = bc__sum_add(sum, buf.data, buf.size);
    if ((rc = bc_writer_write(w, buf.data, buf.size)) != 0) goto cleanup;
    if (c->crc && (rc = crc_append(&crcs, buf.data, buf.size)) != 0)
      goto cleanup;
    n++;
  }
  if (n == 0) { /* ended exactly at the shard's start */
    uint64_t end = start;
    if (c->src.open_at != NULL && p->opened_at == start &&
        start > atomic_load(&c->known_length)) {
      /* Seeked past the end: find where the source really ends. */
      ended = false;
      if ((rc = pass_find_end(c, p, start, &buf, &ended)) != 0) goto cleanup;
      end = p->pos;
    }
    rc = record_end(c, shard, end);
    if (rc == 0)
      rc = bc__error(BC_ERANGE, "%s: the source ends after %llu records",
                     c->root, (unsigned long long)end);
    goto cleanup;
  }
  /* The last record may have been the one stuck in the source. */
  if ((rc = check_abandoned(c, f)) != 0) goto cleanup;
  if ((rc = bc_writer_close(w)) != 0) goto cleanup;
  if (c->crc &&
      (rc = write_sidecar(c, scratch, &crcs, n, bc_writer_records_bytes(w))) != 0)
    goto cleanup;
  bool regenerated = false;
  rc = publish(c, shard, f->token, scratch, n, sum, ended, note, &regenerated);
  if (rc == 0)
    atomic_fetch_add(regenerated ? &c->stats.regenerations : &c->stats.fills, 1);
  keep = rc == 0 && !ended;
cleanup:
  atomic_fetch_add(&c->stats.records_written, n);
  if (rc != 0 && rc != BC_ERANGE) {
    /* Nothing partial survives: the writer discards, the scratch file goes. */
    char scratch_crc[4200];
    scratch_crc_file(scratch, scratch_crc, sizeof scratch_crc);
    unlink(scratch);
    if (c->crc) unlink(scratch_crc);
  }
  bc_writer_free(w);
  bc_buf_release(&buf);
  bc_buf_release(&crcs);
  /* A pass that failed cannot be trusted to continue; one that ended is
   * useless; otherwise it now sits at the next shard's start. */
  pass_return(c, slot, keep);
  return rc;
}

/* Claims shard `shard` in the shared state.  *claimed: we own it now.
 * Otherwise *rec is its state (PRESENT, or FILLING by a live owner). */
static int try_claim(bc_cache *c, uint64_t shard, uint64_t token,
                     bc__shard_rec *rec, bool *claimed) {
  MDB_txn *t;
  int rc = bc__txn_begin(c->env, true, &t);
  if (rc != 0) return rc;
  bool found;
  *claimed = false;
  rc = bc__rec_get(t, bc__dbi_shard(c->env), shard, rec, &found);
  /* A claim of our own process with no thread of ours filling it (the
   * caller holds the process's filling record for this root and shard) is
   * stale: take it like a dead one's. */
  bool ours = found && rec->owner.pid == c->self.pid &&
              rec->owner.start_time == c->self.start_time;
  bool free_to_take =
      rc == 0 && (!found || (rec->state == SHARD_FILLING &&
                             (ours || !bc__owner_alive(rec->owner))));
  if (free_to_take) {
    /* A dead claimant may have left its file in shards/ (a crash between
     * rename and commit): it is unknown to the state, so remove it. */
    if (found) bc__unlink_shard_files(c, shard);
    bc__shard_rec mine = {.state = SHARD_FILLING, .bytes = token, .owner = c->self};
    rc = bc__rec_put(t, bc__dbi_shard(c->env), shard, &mine);
    if (rc == 0) rc = bc__txn_commit(t);
    else mdb_txn_abort(t);
    if (rc == 0) *claimed = true;
    return rc;
  }
  mdb_txn_abort(t);
  return rc;
}

int bc__obtain(bc_cache *c, uint64_t shard, bc__wait_mode mode, bc__shard_rec *out) {
  double backoff = 0.001;
  for (;;) {
    MDB_txn *t;
    bc__shard_rec rec;
    bool found;
    int rc = bc__txn_begin(c->env, false, &t);
    if (rc != 0) return rc;
    rc = bc__rec_get(t, bc__dbi_shard(c->env), shard, &rec, &found);
    if (rc == 0) rc = bc__cache_load_length(c, t);
    mdb_txn_abort(t);
    if (rc != 0) return rc;
    if (found && rec.state == SHARD_PRESENT) {
      *out = rec;
      return 0;
    }
    uint64_t start = shard * c->R;
    if (atomic_load(&c->final) && start >= atomic_load(&c->known_length))
      return bc__error(BC_ERANGE, "%s: index %llu out of range [0, %llu)",
                       c->root, (unsigned long long)start,
                       (unsigned long long)atomic_load(&c->known_length));
    if (!c->has_source)
      return bc__error(BC_ENOTCACHED,
                       "%s: records %llu..%llu are not cached and the cache "
                       "has no source", c->root, (unsigned long long)start,
                       (unsigned long long)(start + c->R));

    /* A thread of this process filling it (through any cache object on
     * this root): wait for that fill. */
    bc__fill_registry *reg = bc__env_fills(c->env);
    pthread_mutex_lock(&reg->lock);
    bc__filling *f = filling_find(reg, shard);
    if (f != NULL) {
      if (mode != BC__WAIT) {
        pthread_mutex_unlock(&reg->lock);
        return bc__error(BC_EAGAIN, "%s: records %llu..%llu are being filled by "
                         "another thread", c->root, (unsigned long long)start,
                         (unsigned long long)(start + c->R));
      }
      f->refs++;
      rc = 0;
      while (!f->done && rc == 0) rc = bc__cond_wait(&reg->cond, &reg->lock);
      /* Interrupted: the fill goes on without us. */
      int frc = rc != 0 ? rc : bc_error_restore(&f->err);
      filling_put(reg, f);
      pthread_mutex_unlock(&reg->lock);
      if (rc != 0) return rc;
      /* A fill abandoned because its cache object is closing (another
       * handle on this root), given up because it would have waited
       * (BC__NO_WAIT), or interrupted by its own thread's handler, says
       * nothing about this one: try again. */
      if (frc == BC_ECLOSED && !atomic_load(&c->stop_fills)) continue;
      if (frc == BC_EAGAIN || frc == BC_ECANCELED) continue;
      if (frc != 0) return frc;
      continue;
    }
    /* Become this process's filler of the shard (others wait above). */
    f = calloc(1, sizeof *f);
    if (f == NULL) {
      pthread_mutex_unlock(&reg->lock);
      return bc__error(BC_ENOMEM, "out of memory");
    }
    static _Atomic uint64_t next_token = 1;
    f->shard = shard;
    f->cache = c;
    f->token = atomic_fetch_add(&next_token, 1);
    atomic_init(&f->abandoned, false);
    f->refs = 1;
    f->next = reg->list;
    reg->list = f;
    pthread_mutex_unlock(&reg->lock);

    bool claimed = false;
    rc = try_claim(c, shard, f->token, &rec, &claimed);
    if (rc == 0 && claimed) {
      rc = fill(c, f, mode);
      if (rc != 0) release_claim(c, shard, f->token, rc);
    }
    pthread_mutex_lock(&reg->lock);
    if (!f->done) { /* (an abandoned fill was reported done already) */
      f->done = true;
      if (rc != 0) bc_error_save(&f->err, rc); /* the payload too */
    }
    pthread_cond_broadcast(&reg->cond);
    filling_put(reg, f);
    pthread_mutex_unlock(&reg->lock);
    /* A source whose pass cannot go on says BC_EAGAIN (only a source can,
     * when this call waits): filled again with a new pass. */
    if (rc == BC_EAGAIN && mode == BC__WAIT) continue;
    if (rc != 0) return rc;
    if (claimed) continue; /* published: read its state */
    if (rec.state == SHARD_PRESENT) {
      *out = rec;
      return 0;
    }
    /* FILLING by a live process: wait for it, polling the shared state. */
    if (mode != BC__WAIT)
      return bc__error(BC_EAGAIN, "%s: records %llu..%llu are being filled by "
                       "process %d", c->root, (unsigned long long)start,
                       (unsigned long long)(start + c->R), (int)rec.owner.pid);
    atomic_fetch_add(&c->stats.waits, 1);
    if ((rc = bc__interrupt_poll()) != 0) return rc;
    /* With an interrupt handler the poll comes every BC__POLL_MS. */
    double pause = bc__interrupt_fn != NULL && backoff > BC__POLL_MS * 1e-3
                       ? BC__POLL_MS * 1e-3 : backoff;
    struct timespec ts = {0, (long)(pause * 1e9)};
    nanosleep(&ts, NULL);
    if (backoff < 0.05) backoff *= 2;
  }
}

int bc__forget_shard(bc_cache *c, uint64_t shard, const bc__shard_rec *seen) {
  MDB_txn *t;
  int rc = bc__txn_begin(c->env, true, &t);
  if (rc != 0) return rc;
  bc__shard_rec rec;
  bool found;
  rc = bc__rec_get(t, bc__dbi_shard(c->env), shard, &rec, &found);
  if (rc == 0 && found && rec.state == SHARD_PRESENT &&
      rec.bytes == seen->bytes && rec.records == seen->records) {
    char path[4200], crc[4200];
    bc__cache_shard_file(c, shard, rec.records, rec.zstd, path, sizeof path);
    bc__cache_crc_file(c, path, crc, sizeof crc);
    unlink(path);
    if (!rec.zstd) unlink(crc);
    uint64_t bytes = 0;
    bool f;
    rc = bc__u64_get(t, bc__dbi_meta(c->env), "bytes", &bytes, &f);
    if (rc == 0)
      rc = bc__u64_put(t, bc__dbi_meta(c->env), "bytes",
                       bytes > rec.bytes ? bytes - rec.bytes : 0);
    if (rc == 0) rc = bc__rec_del(t, bc__dbi_shard(c->env), shard);
  }
  if (rc == 0) return bc__txn_commit(t);
  mdb_txn_abort(t);
  return rc;
}

int bc__forget_file(bc_cache *c, uint64_t shard, uint64_t dev, uint64_t ino) {
  MDB_txn *t;
  int rc = bc__txn_begin(c->env, true, &t); /* publishes wait: the file
                                               cannot change under us */
  if (rc != 0) return rc;
  bc__shard_rec rec;
  bool found;
  rc = bc__rec_get(t, bc__dbi_shard(c->env), shard, &rec, &found);
  bool drop = false;
  if (rc == 0 && found && rec.state == SHARD_PRESENT) {
    char path[4200], crc[4200];
    bc__cache_shard_file(c, shard, rec.records, rec.zstd, path, sizeof path);
    bc__cache_crc_file(c, path, crc, sizeof crc);
    struct stat st;
    bool lost = stat(path, &st) != 0; /* its state goes too */
    drop = lost || ((uint64_t)st.st_dev == dev && (uint64_t)st.st_ino == ino);
    if (drop && !lost) unlink(path);
    if (drop && !rec.zstd) unlink(crc); /* the shard first, as evictions do */
  }
  if (rc == 0 && drop) {
    uint64_t bytes = 0;
    bool f;
    rc = bc__u64_get(t, bc__dbi_meta(c->env), "bytes", &bytes, &f);
    if (rc == 0)
      rc = bc__u64_put(t, bc__dbi_meta(c->env), "bytes",
                       bytes > rec.bytes ? bytes - rec.bytes : 0);
    if (rc == 0) rc = bc__rec_del(t, bc__dbi_shard(c->env), shard);
  }
  if (rc == 0 && drop) return bc__txn_commit(t);
  mdb_txn_abort(t);
  return rc;
}

/* Takes shards from the shared drain counter until the source's end.  The
 * caller and every fill worker may run this at once: each shard number is
 * taken once, so with a thread-safe source (and a cheap skip) shards are
 * filled in parallel by different passes. */
int bc__drain_loop(bc_cache *c, bool worker) {
  for (;;) {
    if (atomic_load(&c->stop_fills))
      return bc__error(BC_ECLOSED, "%s: the cache is closing", c->root);
    uint64_t shard = atomic_fetch_add(&c->drain_next, 1);
    if (atomic_load(&c->final) && shard * c->R >= atomic_load(&c->known_length))
      return 0;
    bc__shard_rec rec;
    int rc = bc__obtain(c, shard, BC__WAIT, &rec);
    if (rc == BC_ERANGE && atomic_load(&c->final)) return 0;
    if (rc != 0) {
      if (worker) {
        /* The shard number is taken: leave it for the drain's caller to
         * retry and report, so no hole goes unnoticed. */
        pthread_mutex_lock(&c->lock);
        if (c->nfailed < sizeof c->failed_shards / sizeof *c->failed_shards)
          c->failed_shards[c->nfailed++] = shard;
        else
          c->drain_incomplete = true;
        pthread_mutex_unlock(&c->lock);
      }
      return rc;
    }
  }
}

/* Waits until no thread of this process is filling a shard below `end`
 * (drain participants may still be on shards before the one that found
 * the end).  Never fills anything itself: an evicted shard stays evicted. */
static int wait_fills_below(bc_cache *c, uint64_t end_shard) {
  bc__fill_registry *reg = bc__env_fills(c->env);
  int rc = 0;
  pthread_mutex_lock(&reg->lock);
  while (rc == 0) {
    bool busy = false;
    for (bc__filling *f = reg->list; f && !busy; f = f->next)
      busy = !f->done && f->shard < end_shard;
    if (!busy) break;
    rc = bc__cond_wait(&reg->cond, &reg->lock);
  }
  pthread_mutex_unlock(&reg->lock);
  return rc;
}

/* Joins (or leaves) the drain.  The first participant starts the counter
 * at `first`; later ones join its drain (lowering it if they need earlier
 * shards). */
static void drain_join_at(bc_cache *c, bool join, uint64_t first) {
  pthread_mutex_lock(&c->lock);
  if (join) {
    if (c->drainers == 0 || atomic_load(&c->drain_next) > first)
      atomic_store(&c->drain_next, first);
    c->drainers++;
  } else {
    c->drainers--;
  }
  pthread_mutex_unlock(&c->lock);
}

void bc__drain_join(bc_cache *c, bool join) {
  /* Workers join at the first shard not known to exist. */
  drain_join_at(c, join, c->R ? atomic_load(&c->known_length) / c->R : 0);
}

int bc__drain(bc_cache *c, bool from_start) {
  if (c->R == 0) return bc__error(BC_EIO, "%s: no shard length", c->root);
  pthread_mutex_lock(&c->lock);
  c->nfailed = 0;
  c->drain_incomplete = false;
  pthread_mutex_unlock(&c->lock);
  uint64_t first = from_start ? 0 : atomic_load(&c->known_length) / c->R;
  drain_join_at(c, true, first);
  if (c->nworkers > 1) {
    pthread_mutex_lock(&c->lock);
    c->drain_requested = true; /* the workers join in */
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
  }
  int rc = bc__drain_loop(c, false);
  drain_join_at(c, false, 0);
  if (rc != 0) return rc;
  uint64_t end_shard = (atomic_load(&c->known_length) + c->R - 1) / c->R;
  if ((rc = wait_fills_below(c, end_shard)) != 0) return rc;
  /* Shards a worker took but failed to fill: retry them here, so their
   * error (if it persists) reaches the caller. */
  pthread_mutex_lock(&c->lock);
  uint64_t failed[32];
  size_t nfailed = c->nfailed;
  bool incomplete = c->drain_incomplete;
  memcpy(failed, c->failed_shards, nfailed * sizeof *failed);
  c->nfailed = 0;
  c->drain_incomplete = false;
  pthread_mutex_unlock(&c->lock);
  for (size_t i = 0; rc == 0 && i < nfailed; i++) {
    bc__shard_rec rec;
    if (failed[i] < end_shard) rc = bc__obtain(c, failed[i], BC__WAIT, &rec);
  }
  for (uint64_t s = first; rc == 0 && incomplete && s < end_shard; s++) {
    bc__shard_rec rec;
    rc = bc__obtain(c, s, BC__WAIT, &rec);
  }
  return rc;
}

/* ---- abandoning ------------------------------------------------------------------- */

/* True when a fill of cache object `c` is in progress (registry lock). */
static bool fills_of(bc__fill_registry *reg, const bc_cache *c) {
  for (bc__filling *f = reg->list; f != NULL; f = f->next)
    if (f->cache == c && !f->done && !atomic_load(&f->abandoned)) return true;
  return false;
}

int bc_cache_abandon_fills(bc_cache *c, int wait_ms) {
  /* 0. Give the fills up to wait_ms to end on their own (registry cond).
   * 1. Mark this object's fills in progress (registry lock), keeping a
   *    reference to each; their fillers stop at the next record.
   * 2. Drop their claims in the shared state (a write transaction, no lock
   *    held), so other processes may fill the shards now.
   * 3. Report them done (registry lock): waiters in this process go on
   *    (retrying, or failing with BC_ECLOSED when their cache object is
   *    closing too).  In this order, a waiter that retries finds the old
   *    claim gone, and a claim it makes is never the one dropped in 2. */
  bc__fill_registry *reg = bc__env_fills(c->env);
  bc__filling *mine[64];
  size_t n = 0;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += wait_ms / 1000;
  until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&reg->lock);
  while (wait_ms > 0 && fills_of(reg, c) &&
         pthread_cond_timedwait(&reg->cond, &reg->lock, &until) == 0) {
  }
  for (bc__filling *f = reg->list; f != NULL && n < 64; f = f->next) {
    if (f->cache != c || f->done || atomic_load(&f->abandoned)) continue;
    atomic_store(&f->abandoned, true);
    f->refs++;
    mine[n++] = f;
  }
  pthread_mutex_unlock(&reg->lock);
  for (size_t i = 0; i < n; i++) release_claim(c, mine[i]->shard, mine[i]->token, 0);
  pthread_mutex_lock(&reg->lock);
  for (size_t i = 0; i < n; i++) {
    bc__filling *f = mine[i];
    if (!f->done) {
      f->done = true;
      bc_error_state_clear(&f->err);
      f->err.code = BC_ECLOSED;
      snprintf(f->err.message, sizeof f->err.message,
               "%s: shard %llu: the fill was abandoned", c->root,
               (unsigned long long)f->shard);
    }
    filling_put(reg, f);
  }
  pthread_cond_broadcast(&reg->cond);
  pthread_mutex_unlock(&reg->lock);
  /* A close waiting for a worker stuck in the source stops waiting; fills
   * waiting for a pass such a worker holds give up. */
  pthread_mutex_lock(&c->lock);
  c->abandon = true;
  pthread_cond_broadcast(&c->cond);
  pthread_mutex_unlock(&c->lock);
  return (int)n;
}
