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
 * Publish: the store (store.c) makes the shard PRESENT in ONE write
 * transaction (one at a time across processes), checking the claim, the
 * checksum and the length, evicting least-recently-used shards first when
 * the disk limit would be exceeded.  Victims are unlinked before the new
 * file appears, so the bytes in shards/ never exceed the limit, at any
 * instant, across processes.  A crash before the commit leaves the new
 * file in shards/ with a dead claim: the next claimant removes it and
 * fills again; victims already unlinked are found missing on open and
 * refilled.  This process's readers of every victim are then dropped.
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
#include "cache/fill_append.h"
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
  pthread_mutex_lock(&c->pool.lock);
  for (;;) {
    size_t best = SIZE_MAX, empty = SIZE_MAX, past = SIZE_MAX, busy = 0;
    for (size_t i = 0; i < c->pool.max_passes; i++) {
      bc__pass *p = &c->pool.passes[i];
      if (p->busy) {
        busy++;
        continue;
      }
      if (!p->open) {
        if (empty == SIZE_MAX) empty = i;
      } else if (p->pos <= target) {
        if (best == SIZE_MAX || p->pos > c->pool.passes[best].pos) best = i;
      } else if (past == SIZE_MAX || p->pos > c->pool.passes[past].pos) {
        past = i;
      }
    }
    /* With no slot free, a duplicate is the first to go (the pass of the
     * lower slot among those standing at one position stays). */
    size_t dup = SIZE_MAX;
    for (size_t i = 0; empty == SIZE_MAX && dup == SIZE_MAX && i < c->pool.max_passes; i++)
      for (size_t j = 0; j < i && dup == SIZE_MAX; j++)
        if (!c->pool.passes[i].busy && c->pool.passes[i].open && i != best &&
            !c->pool.passes[j].busy && c->pool.passes[j].open &&
            c->pool.passes[j].pos == c->pool.passes[i].pos)
          dup = i;
    bool reuse = best != SIZE_MAX &&
                 (!seekable || target - c->pool.passes[best].pos <= seek_reuse_max(c));
    size_t pick = reuse ? best
                  : empty != SIZE_MAX ? empty
                  : dup != SIZE_MAX   ? dup
                  : past != SIZE_MAX  ? past
                                      : best; /* seekable: the far one before */
    if (busy >= c->pool.max_running || pick == SIZE_MAX) { /* wait for a pass */
      if (atomic_load(&c->abandon)) {
        /* A pass may be held by a fill stuck in the source for good. */
        pthread_mutex_unlock(&c->pool.lock);
        return bc__error(BC_ECLOSED, "%s: the cache is closing", c->root);
      }
      if (mode == BC__NO_WAIT) {
        pthread_mutex_unlock(&c->pool.lock);
        return bc__error(BC_EAGAIN, "%s: every pass over the source is in use by "
                         "another fill", c->root);
      }
      int wrc = bc__cond_wait(&c->pool.cond, &c->pool.lock);
      if (wrc != 0) { /* interrupted: nothing leased */
        pthread_mutex_unlock(&c->pool.lock);
        return wrc;
      }
      continue;
    }
    bc__pass *p = &c->pool.passes[pick];
    p->busy = true;
    pthread_mutex_unlock(&c->pool.lock);
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
        pthread_mutex_lock(&c->pool.lock);
        p->busy = false;
        pthread_cond_broadcast(&c->pool.cond);
        pthread_mutex_unlock(&c->pool.lock);
        return rc;
      }
      atomic_fetch_add(&c->stats.passes_opened, 1);
      pthread_mutex_lock(&c->pool.lock);
      p->handle = handle;
      p->pos = at;
      p->opened_at = at;
      p->open = true;
      pthread_mutex_unlock(&c->pool.lock);
    }
    *slot = pick;
    return 0;
  }
}

/* Returns a pass to the pool; a pass that failed or ended is closed. */
static void pass_return(bc_cache *c, size_t slot, bool keep) {
  bc__pass *p = &c->pool.passes[slot];
  if (!keep && p->open) {
    c->src.close(c->src.payload, p->handle);
    pthread_mutex_lock(&c->pool.lock);
    p->open = false;
  } else {
    pthread_mutex_lock(&c->pool.lock);
  }
  p->busy = false;
  pthread_cond_broadcast(&c->pool.cond);
  pthread_mutex_unlock(&c->pool.lock);
}

void bc__passes_close_all(bc_cache *c) {
  for (size_t i = 0; c->pool.passes && i < c->pool.max_passes; i++)
    if (c->pool.passes[i].open) {
      c->src.close(c->src.payload, c->pool.passes[i].handle);
      c->pool.passes[i].open = false;
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
  free(f->scratch);
  free(f);
}

/* Drops the FILLING claim of fill `token` on a shard (after a failed or
 * abandoned fill); a newer claim is left alone.  The message of the
 * failure being reported is kept. */
static void release_claim(bc_cache *c, uint64_t shard, uint64_t token, int code) {
  bc_error_state failure = BC_ERROR_STATE_INIT;
  bc_error_save(&failure, code);
  bc__store_release(&c->store, shard, token);
  bc_error_restore(&failure);
  bc_error_state_clear(&failure);
}

/* Once the final length `end` is committed, this process knows it too. */
static void know_final_length(bc_cache *c, uint64_t end) {
  atomic_store(&c->known_length, end);
  atomic_store(&c->final, true);
}

/* Records that the source ends at `end` (no records from there on), and
 * drops the claim on `shard` (UINT64_MAX: none). */
static int record_end(bc_cache *c, uint64_t shard, uint64_t end) {
  int rc = bc__store_record_end(&c->store, shard, end);
  if (rc == 0) know_final_length(c, end);
  return rc;
}

int bc_cache_finalize(bc_cache *c) {
  bc__publisher_wait(c, false); /* the shards queued count */
  if (atomic_load(&c->final)) return 0;
  uint64_t end = 0;
  int rc = bc__store_finalize(&c->store, &end);
  if (rc == 0) know_final_length(c, end);
  return rc;
}

static void checked_set(bc_cache *c, uint64_t shard); /* (below) */

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
    pthread_mutex_lock(&c->pool.lock);
    for (size_t i = 0; i < c->pool.max_passes && ps->n < 255; i++)
      if (!c->pool.passes[i].busy && c->pool.passes[i].open) ps->pos[ps->n++] = c->pool.passes[i].pos;
    pthread_mutex_unlock(&c->pool.lock);
    if (next != UINT64_MAX) ps->pos[ps->n++] = next;
    qsort(ps->pos, ps->n, sizeof *ps->pos, u64_cmp);
  }
}

size_t bc__pass_positions(bc_cache *c, uint64_t *pos, size_t max) {
  pass_snapshot ps;
  pass_snapshot_take(c, UINT64_MAX, &ps);
  size_t n = ps.n < max ? ps.n : max;
  memcpy(pos, ps.pos, n * sizeof *pos);
  return n;
}

/* The pending access-clock bumps of this process's opens, applied in the
 * publish's transaction before victims are picked. */
int bc__access_bump(void *arg, const bc__store *s, bc__store_txn *t,
                    uint64_t *clock) {
  (void)s;
  return bc__access_apply(arg, t, clock);
}

/* Notes a shard file's size: a publish-behind claim reserves the largest. */
static void note_shard_bytes(bc_cache *c, uint64_t bytes) {
  uint64_t seen = atomic_load(&c->shard_bytes_seen);
  while (bytes > seen &&
         !atomic_compare_exchange_weak(&c->shard_bytes_seen, &seen, bytes)) {
  }
}

/* How long a synchronous publish waits for room reserved by others. */
#define PUBLISH_WAIT_MAX_S 30.0

/* Publishes the finished shard through the store (store.c has the steps)
 * and drops this process's readers of every shard it evicted.  `note`:
 * appended to determinism errors (the start a seekable source's pass was
 * opened at), "" when none.  `skipped`: records the pass produced on its
 * way to it and dropped (the root's records_generated counts them).
 * `no_evict`: a shard kept on a pass's way (BC_ENOSPC without room). */
static int publish(bc_cache *c, uint64_t shard, uint64_t token,
                   const char *scratch, uint64_t records, uint64_t skipped,
                   uint64_t checksum, bool ended, const char *note, bool no_evict,
                   double wait_s, bool *regenerated) {
  struct stat st;
  if (stat(scratch, &st) != 0) return bc__error_errno(errno, "%s", scratch);
  pass_snapshot ps; /* taken before the transaction: no lock inside it */
  pass_snapshot_take(c, ended ? UINT64_MAX : shard * c->R + records, &ps);
  bc__publish_req q = {
      .shard = shard, .token = token, .scratch = scratch, .records = records,
      .skipped = skipped, .size = (uint64_t)st.st_size, .checksum = checksum,
      .ended = ended,
      .zstd = c->zstd, .note = note, .default_limit = c->opts.disk_limit,
      .passes = ps.pos, .npasses = ps.n, .seekable = c->src.open_at != NULL,
      .no_evict = no_evict, .kept = no_evict, .bump = bc__access_bump, .bump_arg = c};
  q.spare = no_evict ? q.size : 0;
  q.need = bc__limit_shards(&c->opts, &q.prefetched);
  note_shard_bytes(c, q.size);
  bc__victims victims = {0};
  int rc = bc__store_publish(&c->store, &q, &victims, regenerated);
  /* BC_EAGAIN: the room is reserved by claims in progress (publish-behind
   * reserves at the claim).  This process's queued shards are published
   * first (then they are evictable); claims of other threads and
   * processes end within a fill: wait for them, wait_s at most (BC_EAGAIN
   * then, for the caller), polling the interrupt handler every
   * BC__POLL_MS at most. */
  double backoff = 0.001, waited = 0;
  while (rc == BC_EAGAIN && waited < wait_s) {
    int wrc = bc__publisher_wait(c, false);
    if (wrc == 0) wrc = bc__interrupt_poll();
    if (wrc != 0) {
      rc = wrc;
      break;
    }
    double pause = bc__interrupt_fn != NULL && backoff > BC__POLL_MS * 1e-3
                       ? BC__POLL_MS * 1e-3 : backoff;
    struct timespec ts = {0, (long)(pause * 1e9)};
    nanosleep(&ts, NULL);
    waited += pause;
    if (backoff < 0.064) backoff *= 2;
    rc = bc__store_publish(&c->store, &q, &victims, regenerated);
  }
  atomic_fetch_add(&c->stats.evictions, victims.n);
  bc__readers_forget(c, victims.shards, victims.n);
  bc__victims_free(&victims);
  if (rc == 0) {
    uint64_t end = shard * c->R + records;
    if (end > atomic_load(&c->known_length)) atomic_store(&c->known_length, end);
    if (ended) atomic_store(&c->final, true);
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
                         uint64_t records, uint64_t records_bytes, bool sync) {
  char *path = bc__scratch_crc_path(scratch);
  int rc = path ? bc__buf_reserve(crcs, BC__CRC_HEADER + 4 * records)
                : bc__error(BC_ENOMEM, "out of memory");
  int fd = -1;
  if (rc != 0) goto cleanup;
  crcs->size = BC__CRC_HEADER + 4 * records;
  bc__crc_table_header((unsigned char *)crcs->data, records, records_bytes);
  fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, (mode_t)c->mode);
  if (fd < 0) {
    rc = bc__error_errno(errno, "%s: create", path);
    goto cleanup;
  }
  rc = bc__write_all(fd, crcs->data, crcs->size, path);
  if (rc == 0 && sync) rc = bc__fsync(fd, path);
cleanup:
  if (fd >= 0) close(fd);
  free(path);
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
  pthread_mutex_lock(&c->pool.lock);
  p->open = rc == 0;
  if (rc == 0) {
    p->handle = handle;
    p->pos = p->opened_at = from;
  }
  pthread_mutex_unlock(&c->pool.lock);
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

/* bc__fill_open_scratch; `nosync`: the writer's close does not fsync
 * (publish-behind: the publisher does, later). */
static int open_scratch(bc_cache *c, uint64_t shard, uint64_t token,
                        bool nosync, char **path, bc_writer **writer) {
  bc_writer *w = NULL;
  int rc = 0;
  /* SHARD-PID-START.TOKEN.EXT: the owner for bc__clean_scratch, the token
   * so that two fills of a shard in one process never share a file. */
  char *name = bc__path_printf("%s/%llu-%d-%llu.%llu.%s", c->scratch_dir,
                               (unsigned long long)shard, (int)c->self.pid,
                               (unsigned long long)c->self.start_time,
                               (unsigned long long)token, c->zstd ? "bagz" : "bag");
  if (name == NULL) {
    rc = bc__error(BC_ENOMEM, "out of memory");
    goto cleanup;
  }
  bc_writer_options wo = BC_WRITER_OPTIONS_INIT;
  wo.compression = c->zstd ? BC_COMPRESSION_ZSTD : BC_COMPRESSION_NONE;
  wo.zstd_level = c->zstd ? c->level : 0;
  wo.file_mode = c->mode;
  if ((rc = bc_writer_open(&w, name, &wo)) != 0) goto cleanup;
  /* zstd frames carry zstd's content checksum; records of .bag shards get
   * a CRC-32C each, in the sidecar (format version 2). */
  if (c->zstd && (rc = bc__writer_checksum_frames(w)) != 0) goto cleanup;
  /* scratch/ is never fsynced: the publish renames the file into shards/
   * and fsyncs that (doc/cache.md, "The sync budget of a miss"). */
  if ((rc = bc__writer_scratch(w)) != 0) goto cleanup;
  if (nosync && (rc = bc__writer_nosync(w)) != 0) goto cleanup;
  *path = name;
  *writer = w;
  name = NULL;
  w = NULL;
cleanup:
  bc_writer_free(w); /* (an open writer removes its temporary files) */
  free(name);
  return rc;
}

int bc__fill_open_scratch(bc_cache *c, uint64_t shard, uint64_t token,
                          char **path, bc_writer **writer) {
  return open_scratch(c, shard, token, false, path, writer);
}

/* fsync of a file this process wrote without one. */
static int fsync_path(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return bc__error_errno(errno, "%s: open", path);
  int rc = bc__fsync(fd, path);
  close(fd);
  return rc;
}

int bc__fill_sync_scratch(bc_cache *c, const char *scratch) {
  int rc = fsync_path(scratch);
  if (rc == 0 && c->crc) { /* (c->crc: a .bag root, which has sidecars) */
    char *crc = bc__scratch_crc_path(scratch);
    rc = crc ? fsync_path(crc) : bc__error(BC_ENOMEM, "out of memory");
    free(crc);
  }
  return rc;
}

/* Publish-behind of the complete scratch file of fill f (n records, its
 * checksum, `ended`): checked against the state as its publish will be
 * (claim, determinism checksum, length), made readable to this process
 * (f->readable) and queued for the publisher.  *queued: it was; else
 * (the claim reserved less room than the file needs, or the queue is
 * full or closed) the caller publishes it synchronously.  A failed check
 * is returned as it would be by the publish. */
static int publish_behind(bc_cache *c, bc__filling *f, const char *scratch,
                          uint64_t n, uint64_t skipped, uint64_t sum, bool ended,
                          const char *note, bool *queued, bc_bag **bag) {
  *queued = false;
  struct stat st;
  if (stat(scratch, &st) != 0) return bc__error_errno(errno, "%s", scratch);
  uint64_t size = (uint64_t)st.st_size;
  note_shard_bytes(c, size);
  if (size > f->room) return 0;
  bc__publish_req q = {
      .shard = f->shard, .token = f->token, .scratch = scratch, .records = n,
      .size = size, .checksum = sum, .ended = ended, .zstd = c->zstd,
      .note = note, .default_limit = c->opts.disk_limit};
  q.need = bc__limit_shards(&c->opts, &q.prefetched);
  int rc = bc__store_check(&c->store, &q);
  /* The filler's reader, opened before the publisher may touch the file:
   * its records are served even if the publish fails. */
  bc_bag *mine = NULL;
  if (rc == 0 && bag != NULL) rc = bc__cache_open_scratch(c, scratch, &mine);
  bc__pub_entry *e = rc == 0 ? calloc(1, sizeof *e) : NULL;
  char *path = e ? strdup(scratch) : NULL;
  if (rc == 0 && path == NULL) rc = bc__error(BC_ENOMEM, "out of memory");
  if (rc != 0) {
    free(e);
    bc_bag_close(mine);
    return rc;
  }
  e->f = f;
  e->checksum = sum;
  e->skipped = skipped;
  e->ended = ended;
  snprintf(e->note, sizeof e->note, "%s", note);
  /* Readable first (a reference for the entry), then queued; a queue that
   * refuses it makes it unreadable again (a thread that opened the file
   * meanwhile keeps a good reader: the synchronous publish renames it). */
  bc__fill_registry *reg = bc__env_fills(c->env);
  pthread_mutex_lock(&reg->lock);
  f->scratch = path;
  f->rec = (bc__shard_rec){.state = SHARD_PRESENT, .zstd = c->zstd,
                           .records = n, .bytes = size};
  f->readable = true;
  f->refs++;
  pthread_cond_broadcast(&reg->cond); /* waiters of this fill read it now */
  pthread_mutex_unlock(&reg->lock);
  if (bc__publisher_enqueue(c, e) == 0) {
    /* The records exist (and the source ends after them when `ended`: it
     * is deterministic), published or not. */
    uint64_t end = f->shard * c->R + n;
    if (end > atomic_load(&c->known_length)) atomic_store(&c->known_length, end);
    if (ended) atomic_store(&c->final, true);
    *queued = true;
    if (bag != NULL) *bag = mine;
    return 0;
  }
  bc_bag_close(mine);
  free(e);
  pthread_mutex_lock(&reg->lock);
  f->readable = false;
  filling_put(reg, f); /* (the filler's reference remains) */
  pthread_mutex_unlock(&reg->lock);
  return 0;
}

/* A synchronous publish found no room under the limit within its wait
 * (BC_EAGAIN: room held by other processes' fills): the reader that asked
 * gets the shard from its scratch file (*bag, opened before the file is
 * unlinked by fill's cleanup), and the shard is not kept, as if evicted
 * at once; the claim goes.  Without a reader to give it to (bag NULL: a
 * prefetch, a drain, a shard kept on a pass's way) that is BC_ENOSPC, as
 * before. */
static int bypass(bc_cache *c, bc__filling *f, const char *scratch, uint64_t n,
                  bc_bag **bag) {
  if (bag == NULL) return bc__error_wrap(BC_ENOSPC, "%s", bc_errmsg());
  struct stat st;
  if (stat(scratch, &st) != 0) return bc__error_errno(errno, "%s", scratch);
  int rc = bc__cache_open_scratch(c, scratch, bag);
  if (rc != 0) return rc;
  f->rec = (bc__shard_rec){.state = SHARD_PRESENT, .zstd = c->zstd,
                           .records = n, .bytes = (uint64_t)st.st_size};
  release_claim(c, f->shard, f->token, 0);
  bc_error_clear();
  atomic_fetch_add(&c->stats.bypassed, 1);
  /* The records exist (the source is deterministic), kept or not. */
  uint64_t end = f->shard * c->R + n;
  if (end > atomic_load(&c->known_length)) atomic_store(&c->known_length, end);
  return 0;
}

/* Writes the records of shard f->shard (claimed: f->token) from leased
 * pass p, standing at its first record, into a scratch file, and
 * publishes it, or with room reserved (f->room) queues its publish
 * (*queued: the shard is readable from its scratch file, f->readable, and
 * the claim stays until the publisher is done with it).  *ended: the
 * source ended in it (a short last shard, published; or none at all:
 * BC_ERANGE, the end recorded).  f->kept: a shard kept on the way, whose
 * synchronous publish evicts nothing and waits for no room (BC_ENOSPC
 * without it).  *served: not published for lack of room (bypass): *bag is
 * the only reader of its records, the claim is gone.  `skipped`: records
 * the pass produced on its way here and dropped. */
static int fill_records(bc_cache *c, bc__filling *f, bc__pass *p, bc_buf *buf,
                        const char *note, uint64_t skipped, bool *queued,
                        bool *served, bc_bag **bag, bool *ended) {
  uint64_t shard = f->shard, start = shard * c->R, n = 0;
  bc_buf crcs = BC_BUF_INIT;
  bc_writer *w = NULL;
  char *scratch = NULL;
  int rc = 0;
  *queued = false;
  *served = false;
  *ended = false;
  /* Publish-behind: nothing is fsynced on this path (the publisher does
   * it, or the synchronous fallback below). */
  bool behind = f->room > 0;
  if ((rc = open_scratch(c, shard, f->token, behind, &scratch, &w)) != 0)
    goto cleanup;
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
    int r = c->src.next(c->src.payload, p->handle, buf);
    if (r < 0) {
      rc = r;
      goto cleanup;
    }
    if (r > 1) {
      rc = source_error(r, "next");
      goto cleanup;
    }
    if (r == 0) {
      *ended = true;
      break;
    }
    p->pos++;
    sum = bc__sum_add(sum, buf->data, buf->size);
    if ((rc = bc_writer_write(w, buf->data, buf->size)) != 0) goto cleanup;
    if (c->crc && (rc = crc_append(&crcs, buf->data, buf->size)) != 0)
      goto cleanup;
    n++;
  }
  if (n == 0) { /* ended exactly at the shard's start */
    uint64_t end = start;
    if (c->src.open_at != NULL && p->opened_at == start &&
        start > atomic_load(&c->known_length)) {
      /* Seeked past the end: find where the source really ends. */
      *ended = false;
      if ((rc = pass_find_end(c, p, start, buf, ended)) != 0) goto cleanup;
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
  if (c->crc && (rc = write_sidecar(c, scratch, &crcs, n,
                                    bc_writer_records_bytes(w), !behind)) != 0)
    goto cleanup;
  if (behind) {
    if ((rc = publish_behind(c, f, scratch, n, skipped, sum, *ended, note, queued,
                             bag)) != 0)
      goto cleanup;
    if (!*queued) {
      /* Synchronously after all: the data first, as the writer would
       * have; and this process's queued shards published, so that their
       * room (reserved, not yet evictable) is evictable again. */
      rc = bc__fill_sync_scratch(c, scratch);
      if (rc == 0 && f->room != UINT64_MAX) bc__publisher_wait(c, false);
      if (rc != 0) goto cleanup;
    }
  }
  if (!*queued) {
    bool regenerated = false;
    /* A read waits BC__ROOM_WAIT_S for room, then is served without it; a
     * prefetch or drain (no reader to serve) as long as before; a shard
     * kept on the way not at all. */
    double wait_s = f->kept ? 0 : bag != NULL ? BC__ROOM_WAIT_S : PUBLISH_WAIT_MAX_S;
    rc = publish(c, shard, f->token, scratch, n, skipped, sum, *ended, note, f->kept,
                 wait_s, &regenerated);
    if (rc == BC_EAGAIN && (rc = bypass(c, f, scratch, n, bag)) == 0)
      *served = true;
    else if (rc == 0)
      atomic_fetch_add(f->kept ? &c->stats.shards_kept
                       : regenerated ? &c->stats.regenerations : &c->stats.fills, 1);
  }
  if (rc == 0) checked_set(c, shard); /* this process's pass produced it */
cleanup:
  atomic_fetch_add(&c->stats.records_written, n);
  if (((rc != 0 && rc != BC_ERANGE) || *served) && scratch != NULL) {
    /* Nothing partial survives: the writer discards, the scratch file goes. */
    char *scratch_crc = bc__scratch_crc_path(scratch);
    unlink(scratch);
    if (c->crc && scratch_crc) unlink(scratch_crc);
    free(scratch_crc);
  }
  free(scratch);
  bc_writer_free(w);
  bc_buf_release(&crcs);
  return rc;
}

/* A fill token: unique in the process, so a claim names one fill. */
static uint64_t fill_token(void) {
  static _Atomic uint64_t next_token = 1;
  return atomic_fetch_add(&next_token, 1);
}

/* ---- the shards a pass crosses ------------------------------------------------------
 *
 * A fill's pass moves from where it stands to the target's first record
 * (doc/cache.md, "Shards on the way").  For a source that cannot seek,
 * each whole shard it crosses is
 *   - kept when no process has it (no state: not cached, not claimed):
 *     claimed and filled from the pass like any fill (checksum, sidecar,
 *     publish or publish-behind, its room reserved at its claim), except
 *     that nothing is evicted for it: under a disk limit it is kept only
 *     if the limit has room for it and for one more shard (the next
 *     miss's claim) as it is;
 *   - else, when the state holds a checksum of its records (recorded at
 *     its first publish, kept after eviction) that no pass of this
 *     process has matched or produced yet, read (next(), not skip(): its
 *     records' bytes are needed) and compared with it: a source that
 *     changed since the cache was filled is BC_ENONDET before the pass
 *     goes on;
 *   - else skipped as before (skip(), or read and dropped).
 * Records kept count in records_written (the shards in shards_kept), the
 * others in records_skipped. */

/* The pool's per-shard bits (passes.h): `checked` (its records matched,
 * or produced by this process's passes) and `nokeep` (keeping it on a
 * pass's way failed: later passes skip it).  The pool's lock, alone. */
typedef enum { BIT_CHECKED, BIT_NOKEEP } shard_bit;

static bool bit_get(bc_cache *c, shard_bit which, uint64_t shard) {
  bool on = false;
  pthread_mutex_lock(&c->pool.lock);
  uint64_t *bits = which == BIT_CHECKED ? c->pool.checked : c->pool.nokeep;
  if (shard / 64 < c->pool.checked_words)
    on = (bits[shard / 64] >> (shard % 64)) & 1;
  pthread_mutex_unlock(&c->pool.lock);
  return on;
}

static void bit_set(bc_cache *c, shard_bit which, uint64_t shard) {
  pthread_mutex_lock(&c->pool.lock);
  if (shard / 64 >= c->pool.checked_words && shard / 64 < SIZE_MAX / 16) {
    size_t words = (size_t)(shard / 64) * 2 + 1, old = c->pool.checked_words;
    uint64_t *a = realloc(c->pool.checked, words * sizeof *a);
    if (a != NULL) c->pool.checked = a;
    uint64_t *b = a ? realloc(c->pool.nokeep, words * sizeof *b) : NULL;
    if (b != NULL) c->pool.nokeep = b;
    if (a != NULL && b != NULL) { /* (out of memory: not recorded) */
      memset(a + old, 0, (words - old) * sizeof *a);
      memset(b + old, 0, (words - old) * sizeof *b);
      c->pool.checked_words = words;
    }
  }
  uint64_t *bits = which == BIT_CHECKED ? c->pool.checked : c->pool.nokeep;
  if (shard / 64 < c->pool.checked_words)
    bits[shard / 64] |= (uint64_t)1 << (shard % 64);
  pthread_mutex_unlock(&c->pool.lock);
}

static bool checked_get(bc_cache *c, uint64_t shard) {
  return bit_get(c, BIT_CHECKED, shard);
}

static void checked_set(bc_cache *c, uint64_t shard) { bit_set(c, BIT_CHECKED, shard); }

/* What the state says of shard `shard` crossed by a pass (one read
 * transaction): whether it has an entry (PRESENT or claimed), and the
 * checksum recorded at its first publish, if any. */
typedef struct {
  bool found, have_sum;
  uint64_t sum;
} crossing;

static int crossing_read(bc_cache *c, uint64_t shard, crossing *x) {
  const bc__store *s = &c->store;
  bc__store_txn *t;
  *x = (crossing){0};
  int rc = s->ops->begin(s->impl, false, &t);
  if (rc != 0) return rc;
  bc__shard_rec rec;
  rc = s->ops->get(t, shard, &rec, &x->found);
  if (rc == 0) rc = s->ops->sum_get(t, shard, &x->sum, &x->have_sum);
  s->ops->abort(t);
  return rc;
}

/* BC_ENONDET: the records a pass gives are not the ones stored. */
static int source_changed(bc_cache *c, const char *what) {
  return bc__error(BC_ENONDET,
                   "%s: %s: the source changed since the cache was filled (or "
                   "it is not deterministic); to start over, clear the cache "
                   "(bagcache cache clear %s) or use a new root", c->root, what,
                   c->root);
}

/* Reads the records of stored shard `shard` from pass p (at its first
 * record) and compares their checksum with the one recorded, `sum`.
 * *ended: the source ended in it (then its records must be the last ones
 * known, else BC_ENONDET too). */
static int cross_check(bc_cache *c, const bc__filling *f, bc__pass *p,
                       uint64_t shard, uint64_t sum, bc_buf *buf, bool *ended) {
  uint64_t start = shard * c->R, n = 0, h = BC__SUM_INIT;
  int rc = 0;
  while (rc == 0 && n < c->R) {
    if (atomic_load(&c->stop_fills)) {
      rc = bc__error(BC_ECLOSED, "%s: the cache is closing", c->root);
      break;
    }
    if ((rc = check_abandoned(c, f)) != 0 || (rc = bc__interrupt_poll()) != 0) break;
    int r = c->src.next(c->src.payload, p->handle, buf);
    if (r < 0 || r > 1) {
      rc = r < 0 ? r : source_error(r, "next");
      break;
    }
    if (r == 0) {
      *ended = true;
      break;
    }
    p->pos++;
    n++;
    h = bc__sum_add(h, buf->data, buf->size);
  }
  atomic_fetch_add(&c->stats.records_skipped, n);
  if (rc != 0) return rc;
  char what[200];
  if (*ended && start + n < atomic_load(&c->known_length)) {
    snprintf(what, sizeof what, "the source now ends after %llu records, but "
             "%llu are known", (unsigned long long)(start + n),
             (unsigned long long)atomic_load(&c->known_length));
    return source_changed(c, what);
  }
  if (h != sum) {
    snprintf(what, sizeof what, "records %llu..%llu (shard %llu) came out "
             "different from the ones stored", (unsigned long long)start,
             (unsigned long long)(start + c->R), (unsigned long long)shard);
    return source_changed(c, what);
  }
  checked_set(c, shard);
  return 0;
}

/* Claims crossed shard `shard` to keep it (fill `token`): under a disk
 * limit the claim reserves the largest shard size seen, evicting nothing,
 * and only where the limit holds that and as much again (the next miss's
 * claim); with no size seen yet the synchronous publish decides the same
 * way.  *room: what the fill may publish behind it (0 without
 * publish-behind: it publishes synchronously); *no_room: claimed but not
 * to be kept (the caller releases the claim). */
static int claim_to_keep(bc_cache *c, uint64_t shard, uint64_t token,
                         bc__shard_rec *rec, bool *claimed, uint64_t *room,
                         bool *no_room) {
  *room = 0;
  *no_room = false;
  uint64_t estimate = atomic_load(&c->shard_bytes_seen);
  bc__publish_req q = {
      .shard = shard, .token = token, .size = estimate, .records = c->R,
      .default_limit = c->opts.disk_limit, .seekable = false,
      .no_evict = true, .spare = estimate, .bump = bc__access_bump,
      .bump_arg = c};
  q.need = bc__limit_shards(&c->opts, &q.prefetched);
  bc__victims victims = {0};
  int rc = bc__store_claim_room(&c->store, &q, rec, claimed, room, &victims);
  bc__victims_free(&victims); /* (none: nothing is evicted) */
  /* Under a limit a known size that found no room: not kept. */
  if (rc == 0 && *claimed && *room == 0 && estimate > 0) *no_room = true;
  /* The reservation stays in the claim until its publish; without
   * publish-behind that publish is synchronous. */
  if (!c->opts.publish_behind || atomic_load(&c->publisher.closed)) *room = 0;
  return rc;
}

/* Keeps crossed shard `shard` (no process has it): becomes this process's
 * filler of it, claims it and fills it from pass p as any fill (its
 * publish queued or made).  *tried: the pass read its records (else the
 * shard is not kept and the caller crosses it otherwise).  A shard the
 * limit has no room for is dropped after all (its records read).
 * *kept: the records it published (or queued), 0 when it kept none. */
static int cross_keep(bc_cache *c, bc__pass *p, uint64_t shard, bc_buf *buf,
                      bool *tried, bool *ended, uint64_t *kept) {
  bc__filling *g = NULL, *other = NULL;
  uint64_t token = fill_token();
  *tried = false;
  *kept = 0;
  int rc = bc__fill_enter(c, shard, token, &g, &other);
  if (rc != 0) return rc;
  if (other != NULL) { /* a thread of ours fills it */
    bc__fill_put(c, other);
    return 0;
  }
  bc__shard_rec rec;
  bool claimed = false, queued = false, no_room = false;
  uint64_t room = 0;
  rc = claim_to_keep(c, shard, token, &rec, &claimed, &room, &no_room);
  if (rc == 0 && claimed && no_room) {
    release_claim(c, shard, token, 0);
  } else if (rc == 0 && claimed) {
    *tried = true;
    g->room = room;
    g->kept = true;
    bool served = false; /* (never: no reader to serve, bag NULL) */
    uint64_t pos0 = p->pos;
    rc = fill_records(c, g, p, buf, "", 0, &queued, &served, NULL, ended);
    if (rc == 0) *kept = p->pos - pos0;
    if (rc != 0 && rc != BC_ERANGE) release_claim(c, shard, token, rc);
    /* No room after all (or the disk full): the records were read. */
    if (rc == BC_ENOSPC && p->pos == (shard + 1) * c->R) rc = 0;
    /* Any other failure fails the pass and the fill it was on its way to;
     * after one of the source or the disk (not an interruption or a
     * close), later passes skip this shard rather than keep it (a record
     * the source cannot produce but can skip stays out of their way). */
    if (rc != 0 && rc != BC_ERANGE && rc != BC_ECANCELED && rc != BC_ECLOSED)
      bit_set(c, BIT_NOKEEP, shard);
  }
  bc__fill_registry *reg = bc__env_fills(c->env);
  pthread_mutex_lock(&reg->lock);
  if (!queued && !g->done) { /* (queued: the publisher marks it done) */
    g->done = true;
    if (rc != 0 && rc != BC_ERANGE) bc_error_save(&g->err, rc);
  }
  pthread_cond_broadcast(&reg->cond);
  filling_put(reg, g);
  pthread_mutex_unlock(&reg->lock);
  return rc;
}

/* Moves leased pass p to `target` (a shard's first record), keeping or
 * checking the whole shards it crosses (above).  *ended: the source ended
 * first (the pass then sits at the end; a kept shard that found the end
 * recorded it).  *kept: the records of the shards it kept. */
static int pass_cross(bc_cache *c, const bc__filling *f, bc__pass *p,
                      uint64_t target, bc_buf *buf, bool *ended, uint64_t *kept) {
  *ended = false;
  *kept = 0;
  /* A seekable source opens its pass at the target (or close before it):
   * nothing whole is crossed. */
  if (c->src.open_at != NULL) return pass_advance(c, p, target, buf, ended);
  int rc = 0;
  while (rc == 0 && !*ended && p->pos < target) {
    uint64_t shard = p->pos / c->R, next = (shard + 1) * c->R;
    if (p->pos % c->R != 0 || next > target) {
      rc = pass_advance(c, p, next < target ? next : target, buf, ended);
      continue;
    }
    crossing x;
    if ((rc = crossing_read(c, shard, &x)) != 0) break;
    if (!x.found && !bit_get(c, BIT_NOKEEP, shard)) {
      bool tried = false;
      uint64_t k = 0;
      rc = cross_keep(c, p, shard, buf, &tried, ended, &k);
      *kept += k;
      if (rc == BC_ERANGE) { /* the end, at its first record: recorded */
        rc = 0;
        *ended = true;
      }
      if (tried || rc != 0) continue;
    }
    if (x.have_sum && !checked_get(c, shard))
      rc = cross_check(c, f, p, shard, x.sum, buf, ended);
    else
      rc = pass_advance(c, p, next, buf, ended);
  }
  return rc;
}

/* Fills shard f->shard, which this process has claimed (claim f->token).
 * *queued: its publish was queued (publish-behind): the shard is readable
 * from its scratch file (f->readable) and the claim stays until the
 * publisher is done with it.  *served: not published for lack of room
 * (bypass): *bag is the only reader of its records, the claim is gone. */
static int fill(bc_cache *c, bc__filling *f, bc__wait_mode mode, bool *queued,
                bool *served, bc_bag **bag) {
  *queued = false;
  *served = false;
  uint64_t shard = f->shard;
  uint64_t start = shard * c->R;
  size_t slot = 0;
  int rc = pass_lease(c, start, mode, &slot);
  if (rc != 0) return rc;
  bc__pass *p = &c->pool.passes[slot];
  bc_buf buf = BC_BUF_INIT;
  bool ended = false, keep = false;
  char note[160] = "";
  if (c->src.open_at != NULL && p->opened_at > 0) /* a pass from 0 is open()'s */
    snprintf(note, sizeof note, " (its pass was opened at record %llu with the "
             "source's open_at)", (unsigned long long)p->opened_at);
  uint64_t pos0 = p->pos, kept = 0;
  if ((rc = pass_cross(c, f, p, start, &buf, &ended, &kept)) != 0) goto cleanup;
  uint64_t skipped = p->pos - pos0 - kept; /* produced on the way, dropped */
  if (ended) { /* the source has no record `start` */
    rc = record_end(c, shard, p->pos);
    if (rc == 0)
      rc = bc__error(BC_ERANGE, "%s: the source ends after %llu records",
                     c->root, (unsigned long long)p->pos);
    goto cleanup;
  }
  rc = fill_records(c, f, p, &buf, note, skipped, queued, served, bag, &ended);
  keep = rc == 0 && !ended;
cleanup:
  bc_buf_release(&buf);
  /* A pass that failed cannot be trusted to continue; one that ended is
   * useless; otherwise it now sits at the next shard's start. */
  pass_return(c, slot, keep);
  return rc;
}

/* Claims shard `shard` in the shared state.  *claimed: we own it now.
 * Otherwise *rec is its state (PRESENT, or FILLING by a live owner).  A
 * claim of our own process with no thread of ours filling it (the caller
 * holds the process's filling record for this root and shard) is stale:
 * taken like a dead one's. */
static int try_claim(bc_cache *c, uint64_t shard, uint64_t token,
                     bc__shard_rec *rec, bool *claimed) {
  return bc__store_claim(&c->store, shard, token, rec, claimed);
}

/* try_claim for a fill that may publish behind (publish_behind on, the
 * publisher accepting): under a disk limit the claim reserves the largest
 * shard size this process has seen (none seen yet, or a shard not known
 * to exist: no room, so the fill publishes synchronously).  *room: what
 * the fill may queue (UINT64_MAX without a limit). */
static int claim_with_room(bc_cache *c, uint64_t shard, uint64_t token,
                           bc__shard_rec *rec, bool *claimed, uint64_t *room) {
  *room = 0;
  uint64_t estimate = atomic_load(&c->shard_bytes_seen);
  /* A shard past the records known to exist may be the source's end: no
   * room is reserved (nor evicted for) then, so under a limit it
   * publishes synchronously (a first pass, a drain).  Records below the
   * length hint count as known here: a wrong hint costs one reservation
   * (an eviction at most), the fill itself finds the end. */
  uint64_t known = atomic_load(&c->known_length);
  if (!atomic_load(&c->final) && c->length_hint > 0 && (uint64_t)c->length_hint > known)
    known = (uint64_t)c->length_hint;
  if (shard * c->R >= known) estimate = 0;
  if (!c->opts.publish_behind || atomic_load(&c->publisher.closed))
    return try_claim(c, shard, token, rec, claimed);
  uint64_t passes[256];
  bc__publish_req q = {
      .shard = shard, .token = token, .size = estimate,
      .records = c->R, .default_limit = c->opts.disk_limit,
      .passes = passes, .npasses = bc__pass_positions(c, passes, 256),
      .seekable = c->src.open_at != NULL, .bump = bc__access_bump,
      .bump_arg = c};
  q.need = bc__limit_shards(&c->opts, &q.prefetched);
  bc__victims victims = {0};
  int rc = bc__store_claim_room(&c->store, &q, rec, claimed, room, &victims);
  atomic_fetch_add(&c->stats.evictions, victims.n);
  bc__readers_forget(c, victims.shards, victims.n);
  bc__victims_free(&victims);
  return rc;
}

int bc__obtain(bc_cache *c, uint64_t shard, bc__wait_mode mode, bc__shard_rec *out) {
  return bc__obtain_scratch(c, shard, mode, out, NULL, NULL);
}

/* A fill record that is readable: the shard is obtained (*scratch: a copy
 * of its file's name, when wanted).  Registry lock held. */
static int obtained_behind(const bc__filling *f, bc__shard_rec *out,
                           char **scratch) {
  if (scratch != NULL && (*scratch = strdup(f->scratch)) == NULL)
    return bc__error(BC_ENOMEM, "out of memory");
  *out = f->rec;
  return 0;
}

int bc__obtain_scratch(bc_cache *c, uint64_t shard, bc__wait_mode mode,
                       bc__shard_rec *out, char **scratch, bc_bag **bag) {
  double backoff = 0.001;
  if (scratch != NULL) *scratch = NULL;
  if (bag != NULL) *bag = NULL;
  /* A publish that failed since the last look (publish-behind): the
   * records served were right, their durability failed: say so. */
  int prc = mode == BC__PREFETCH ? 0 : bc__publisher_take_error(c);
  if (prc != 0) return prc;
  for (;;) {
    bc__shard_rec rec;
    bool found = false, final = false;
    /* A final length never changes: then its two lookups are skipped. */
    bool known = atomic_load(&c->final);
    uint64_t length = 0;
    int rc = bc__store_read(&c->store, shard, &rec, &found,
                            known ? NULL : &length, &final);
    if (rc != 0) return rc;
    if (!known && length > 0) atomic_store(&c->known_length, length);
    if (!known && final) atomic_store(&c->final, true);
    if (found && rec.state == SHARD_PRESENT) {
      note_shard_bytes(c, rec.bytes);
      *out = rec;
      return 0;
    }
    uint64_t start = shard * c->R;
    if (atomic_load(&c->final) && start >= atomic_load(&c->known_length))
      return bc__error(BC_ERANGE, "%s: index %llu out of range [0, %llu)",
                       c->root, (unsigned long long)start,
                       (unsigned long long)atomic_load(&c->known_length));
    /* A thread of this process filling it (through any cache object on
     * this root): wait for that fill, or read it from its scratch file
     * while its publish is queued (any cache object, with a source or
     * not). */
    bc__fill_registry *reg = bc__env_fills(c->env);
    pthread_mutex_lock(&reg->lock);
    bc__filling *f = filling_find(reg, shard);
    if (f != NULL && f->readable) { /* queued for its publish: read it */
      rc = obtained_behind(f, out, scratch);
      pthread_mutex_unlock(&reg->lock);
      return rc;
    }
    if (!c->has_source) {
      pthread_mutex_unlock(&reg->lock);
      return bc__error(BC_ENOTCACHED,
                       "%s: records %llu..%llu are not cached and the cache "
                       "has no source", c->root, (unsigned long long)start,
                       (unsigned long long)(start + c->R));
    }
    if (f != NULL) {
      if (mode != BC__WAIT) {
        pthread_mutex_unlock(&reg->lock);
        return bc__error(BC_EAGAIN, "%s: records %llu..%llu are being filled by "
                         "another thread", c->root, (unsigned long long)start,
                         (unsigned long long)(start + c->R));
      }
      f->refs++;
      rc = 0;
      while (!f->done && !f->readable && rc == 0)
        rc = bc__cond_wait(&reg->cond, &reg->lock);
      if (rc == 0 && !f->done) { /* readable: looked up again above */
        filling_put(reg, f);
        pthread_mutex_unlock(&reg->lock);
        continue;
      }
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
    /* A pool thread helping with another thread's batch fills nothing:
     * the source may block for good where no interrupt reaches it, and
     * the batch's caller would wait for it (pool.c). */
    if (bc__pool_helper()) {
      pthread_mutex_unlock(&reg->lock);
      return bc__pool_give_back(c->root);
    }
    /* Become this process's filler of the shard (others wait above). */
    f = calloc(1, sizeof *f);
    if (f == NULL) {
      pthread_mutex_unlock(&reg->lock);
      return bc__error(BC_ENOMEM, "out of memory");
    }
    f->shard = shard;
    f->cache = c;
    f->token = fill_token();
    atomic_init(&f->abandoned, false);
    f->refs = 1;
    f->next = reg->list;
    reg->list = f;
    pthread_mutex_unlock(&reg->lock);

    bool claimed = false, queued = false, served = false;
    uint64_t room = 0;
    rc = claim_with_room(c, shard, f->token, &rec, &claimed, &room);
    if (rc == 0 && claimed) {
      f->room = room; /* (only this thread reads it) */
      rc = fill(c, f, mode, &queued, &served, bag);
      if (rc != 0) release_claim(c, shard, f->token, rc);
    }
    bc__shard_rec behind = queued || served ? f->rec : rec; /* (reg lock not
                                         needed: set by this thread) */
    pthread_mutex_lock(&reg->lock);
    /* Queued: the publisher marks it done.  (An abandoned fill was
     * reported done already.) */
    if (!queued && !f->done) {
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
    if ((queued || served) && (bag == NULL || *bag != NULL)) { /* served
                                                                   from scratch */
      *out = behind;
      return 0;
    }
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

int bc__forget_shard(bc_cache *c, uint64_t shard, const bc__file_id *bad) {
  return bc__store_forget(&c->store, shard, bad);
}

/* Takes shards from the shared drain counter until the source's end.  The
 * caller and every fill worker may run this at once: each shard number is
 * taken once, so with a thread-safe source (and a cheap skip) shards are
 * filled in parallel by different passes. */
int bc__drain_loop(bc_cache *c, bool worker) {
  for (;;) {
    if (atomic_load(&c->stop_fills))
      return bc__error(BC_ECLOSED, "%s: the cache is closing", c->root);
    uint64_t shard = atomic_fetch_add(&c->prefetch.drain_next, 1);
    if (atomic_load(&c->final) && shard * c->R >= atomic_load(&c->known_length))
      return 0;
    bc__shard_rec rec;
    int rc = bc__obtain(c, shard, BC__WAIT, &rec);
    if (rc == BC_ERANGE && atomic_load(&c->final)) return 0;
    if (rc != 0) {
      if (worker) {
        /* The shard number is taken: leave it for the drain's caller to
         * retry and report, so no hole goes unnoticed. */
        pthread_mutex_lock(&c->prefetch.lock);
        if (c->prefetch.nfailed < sizeof c->prefetch.failed_shards / sizeof *c->prefetch.failed_shards)
          c->prefetch.failed_shards[c->prefetch.nfailed++] = shard;
        else
          c->prefetch.drain_incomplete = true;
        pthread_mutex_unlock(&c->prefetch.lock);
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
  pthread_mutex_lock(&c->prefetch.lock);
  if (join) {
    if (c->prefetch.drainers == 0 || atomic_load(&c->prefetch.drain_next) > first)
      atomic_store(&c->prefetch.drain_next, first);
    c->prefetch.drainers++;
  } else {
    c->prefetch.drainers--;
  }
  pthread_mutex_unlock(&c->prefetch.lock);
}

void bc__drain_join(bc_cache *c, bool join) {
  /* Workers join at the first shard not known to exist. */
  drain_join_at(c, join, c->R ? atomic_load(&c->known_length) / c->R : 0);
}

int bc__drain(bc_cache *c, bool from_start) {
  if (c->R == 0) return bc__error(BC_EIO, "%s: no shard length", c->root);
  pthread_mutex_lock(&c->prefetch.lock);
  c->prefetch.nfailed = 0;
  c->prefetch.drain_incomplete = false;
  pthread_mutex_unlock(&c->prefetch.lock);
  uint64_t first = from_start ? 0 : atomic_load(&c->known_length) / c->R;
  drain_join_at(c, true, first);
  if (c->prefetch.nworkers > 1) {
    pthread_mutex_lock(&c->prefetch.lock);
    c->prefetch.drain_requested = true; /* the workers join in */
    pthread_cond_broadcast(&c->prefetch.cond);
    pthread_mutex_unlock(&c->prefetch.lock);
  }
  int rc = bc__drain_loop(c, false);
  drain_join_at(c, false, 0);
  if (rc != 0) return rc;
  uint64_t end_shard = (atomic_load(&c->known_length) + c->R - 1) / c->R;
  if ((rc = wait_fills_below(c, end_shard)) != 0) return rc;
  /* Shards queued by the drain are published by now (their fill records
   * were done at their publish): a failure among them is the drain's. */
  if ((rc = bc__publisher_take_error(c)) != 0) return rc;
  /* Shards a worker took but failed to fill: retry them here, so their
   * error (if it persists) reaches the caller. */
  pthread_mutex_lock(&c->prefetch.lock);
  uint64_t failed[32];
  size_t nfailed = c->prefetch.nfailed;
  bool incomplete = c->prefetch.drain_incomplete;
  memcpy(failed, c->prefetch.failed_shards, nfailed * sizeof *failed);
  c->prefetch.nfailed = 0;
  c->prefetch.drain_incomplete = false;
  pthread_mutex_unlock(&c->prefetch.lock);
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
    if (f->cache == c && !f->done && !f->readable && !atomic_load(&f->abandoned))
      return true;
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
  pthread_mutex_unlock(&reg->lock);
  /* Steps 1-3 in rounds of up to 64 fills: a fill marked in one round is
   * skipped by the next, so the rounds end when every fill this object had
   * in progress (and any begun since) is abandoned. */
  size_t total = 0;
  do {
    n = 0;
    pthread_mutex_lock(&reg->lock);
    for (bc__filling *f = reg->list; f != NULL && n < 64; f = f->next) {
      /* (A readable fill waits for its publish, not for the source.) */
      if (f->cache != c || f->done || f->readable || atomic_load(&f->abandoned))
        continue;
      atomic_store(&f->abandoned, true);
      f->refs++;
      mine[n++] = f;
    }
    pthread_mutex_unlock(&reg->lock);
    for (size_t i = 0; i < n; i++)
      release_claim(c, mine[i]->shard, mine[i]->token, 0);
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
    total += n;
  } while (n == 64);
  /* A close waiting for a worker stuck in the source stops waiting; fills
   * waiting for a pass such a worker holds give up. */
  atomic_store(&c->abandon, true);
  pthread_mutex_lock(&c->pool.lock);
  pthread_cond_broadcast(&c->pool.cond);
  pthread_mutex_unlock(&c->pool.lock);
  pthread_mutex_lock(&c->prefetch.lock);
  pthread_cond_broadcast(&c->prefetch.cond);
  pthread_mutex_unlock(&c->prefetch.lock);
  return (int)total;
}

void bc__fill_done(bc_cache *c, bc__filling *f, int rc) {
  bc__fill_registry *reg = bc__env_fills(c->env);
  pthread_mutex_lock(&reg->lock);
  f->readable = false; /* this process reads shards/ now (or refills) */
  if (!f->done) {
    f->done = true;
    if (rc != 0) bc_error_save(&f->err, rc);
  }
  pthread_cond_broadcast(&reg->cond);
  filling_put(reg, f);
  pthread_mutex_unlock(&reg->lock);
}

/* ---- the appender's entry points (append.c) --------------------------------------- */

int bc__fill_claim(bc_cache *c, uint64_t shard, uint64_t token,
                   bc__shard_rec *rec, bool *claimed) {
  return try_claim(c, shard, token, rec, claimed);
}

void bc__fill_release_claim(bc_cache *c, uint64_t shard, uint64_t token,
                            int code) {
  release_claim(c, shard, token, code);
}

int bc__fill_publish(bc_cache *c, uint64_t shard, uint64_t token,
                     const char *scratch, uint64_t records, uint64_t checksum,
                     bool ended, bool *regenerated) {
  /* (an appender's shard: nothing can regenerate it, so it waits as long
   * as before and is BC_ENOSPC then) */
  int rc = publish(c, shard, token, scratch, records, 0, checksum, ended, "", false,
                   PUBLISH_WAIT_MAX_S, regenerated);
  return rc == BC_EAGAIN ? bc__error_wrap(BC_ENOSPC, "%s", bc_errmsg()) : rc;
}

int bc__fill_record_end(bc_cache *c, uint64_t end) {
  return record_end(c, UINT64_MAX, end);
}

int bc__fill_enter(bc_cache *c, uint64_t shard, uint64_t token,
                   bc__filling **mine, bc__filling **other) {
  bc__fill_registry *reg = bc__env_fills(c->env);
  int rc = 0;
  *mine = *other = NULL;
  pthread_mutex_lock(&reg->lock);
  bc__filling *f = filling_find(reg, shard);
  if (f != NULL) {
    f->refs++;
    *other = f;
  } else if ((f = calloc(1, sizeof *f)) == NULL) {
    rc = bc__error(BC_ENOMEM, "out of memory");
  } else {
    f->shard = shard;
    f->cache = c;
    f->token = token;
    atomic_init(&f->abandoned, false);
    f->refs = 1;
    f->next = reg->list;
    reg->list = f;
    *mine = f;
  }
  pthread_mutex_unlock(&reg->lock);
  return rc;
}

void bc__fill_put(bc_cache *c, bc__filling *f) {
  bc__fill_registry *reg = bc__env_fills(c->env);
  pthread_mutex_lock(&reg->lock);
  filling_put(reg, f);
  pthread_mutex_unlock(&reg->lock);
}

int bc__fill_wait(bc_cache *c, bc__filling *f) {
  bc__fill_registry *reg = bc__env_fills(c->env);
  int rc = 0;
  pthread_mutex_lock(&reg->lock);
  while (!f->done && rc == 0) rc = bc__cond_wait(&reg->cond, &reg->lock);
  filling_put(reg, f);
  pthread_mutex_unlock(&reg->lock);
  return rc; /* (the fill's own result: the caller looks again) */
}

int bc__fill_crc_append(bc_buf *crcs, const void *data, size_t size) {
  return crc_append(crcs, data, size);
}

int bc__fill_write_sidecar(bc_cache *c, const char *scratch, bc_buf *crcs,
                           uint64_t records, uint64_t records_bytes) {
  return write_sidecar(c, scratch, crcs, records, records_bytes, true);
}
