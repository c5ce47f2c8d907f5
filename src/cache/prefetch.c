/*
 * Fill workers: background threads that fill the shards a prefetch policy
 * names after each request, or drain the whole source (preload_all).
 * Prefetching is advice: a shard another process is filling is skipped,
 * and errors are dropped (the request that needs the shard will meet them).
 * The queue lives under cache->lock; the fills themselves run without it.
 */
#include "config.h"

#include <stdlib.h>

#include "cache/internal.h"

static void *worker_main(void *arg) {
  bc__worker *self = arg;
  bc_cache *c = self->cache;
  pthread_mutex_lock(&c->lock);
  for (;;) {
    while (!c->stopping && c->qlen == 0 && !c->drain_requested)
      pthread_cond_wait(&c->cond, &c->lock);
    if (c->stopping) break;
    if (c->drain_requested) {
      /* Every worker joins; the request stays up until one finds the end,
       * so workers woken later join too. */
      pthread_mutex_unlock(&c->lock);
      bc__drain_join(c, true);
      bc__drain_loop(c, true); /* failures are left for the drain's caller */
      bc__drain_join(c, false);
      bc_error_clear(); /* and a source's payload with them */
      pthread_mutex_lock(&c->lock);
      c->drain_requested = false;
      continue;
    }
    uint64_t shard = c->queue[0];
    for (size_t i = 1; i < c->qlen; i++) c->queue[i - 1] = c->queue[i];
    c->qlen--;
    pthread_mutex_unlock(&c->lock);
    bc__shard_rec rec;
    bc__obtain(c, shard, BC__PREFETCH, &rec);
    bc_error_clear(); /* advice: its failure (and payload) is dropped */
    pthread_mutex_lock(&c->lock);
  }
  self->exited = true; /* `self` may be freed once this is seen */
  pthread_cond_broadcast(&c->cond);
  pthread_mutex_unlock(&c->lock);
  bc_seq_unref(&c->base); /* may be the last reference (an abandoned worker) */
  return NULL;
}

int bc__workers_start(bc_cache *c) {
  int n = c->opts.fill_workers > 0 ? c->opts.fill_workers : 1;
  if (c->opts.prefetch_shards < 0 && c->opts.prefetch == NULL &&
      !c->opts.preload_all)
    return 0; /* nothing would ever be queued */
  c->workers = calloc((size_t)n, sizeof *c->workers);
  if (c->workers == NULL) return bc__error(BC_ENOMEM, "out of memory");
  for (int i = 0; i < n; i++) {
    bc__worker *w = &c->workers[i];
    w->cache = c;
    w->exited = false;
    bc_seq_ref(&c->base); /* the worker's, dropped when it returns */
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
      bc_seq_unref(&c->base); /* not the last: the caller holds one */
      break;
    }
    c->nworkers++;
    c->nstarted++;
  }
  if (c->opts.preload_all) {
    pthread_mutex_lock(&c->lock);
    c->drain_requested = true;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
  }
  return 0;
}

void bc__workers_stop(bc_cache *c) {
  pthread_mutex_lock(&c->lock);
  c->stopping = true;
  c->qlen = 0;
  pthread_cond_broadcast(&c->cond);
  int n = c->nworkers;
  c->nworkers = 0;
  pthread_mutex_unlock(&c->lock);
  if (n == 0) return;
  /* The workers' fills and drains end at the next record (no caller may
   * be inside the cache during close, so every fill now is a worker's);
   * then reads through views that outlive the close fill on demand again.
   * A worker stuck in the source never gets to its next record: the wait
   * ends when bc_cache_abandon_fills is called (from another thread, or
   * here when this thread's interrupt handler fires), and such a worker
   * is left to return on its own (detached: its reference keeps the cache
   * alive until then). */
  atomic_store(&c->stop_fills, true);
  pthread_mutex_lock(&c->lock);
  for (;;) {
    bool all = true;
    for (int i = 0; i < n && all; i++) all = c->workers[i].exited;
    if (all || c->abandon) break;
    if (bc__cond_wait(&c->cond, &c->lock) != 0) {
      /* Interrupted: the close completes without the stuck workers.
       * bc_cache_abandon_fills takes the registry lock, then this one. */
      pthread_mutex_unlock(&c->lock);
      bc_cache_abandon_fills(c, 0);
      pthread_mutex_lock(&c->lock);
    }
  }
  bool exited[BC_CACHE_MAX_FILL_WORKERS];
  for (int i = 0; i < n; i++) exited[i] = c->workers[i].exited;
  pthread_mutex_unlock(&c->lock);
  for (int i = 0; i < n; i++) {
    if (exited[i]) pthread_join(c->workers[i].thread, NULL);
    else pthread_detach(c->workers[i].thread);
  }
  atomic_store(&c->stop_fills, false);
}

/* Notes that this process opened shard s; true when the open looks like
 * part of a sequential read: s is the first shard, or the shard before it
 * is among the last BC__RECENT_OPENS shards opened.  Under c->lock. */
static bool note_open(bc_cache *c, uint64_t s) {
  bool sequential = s == 0;
  for (size_t i = 0; i < BC__RECENT_OPENS && !sequential; i++)
    sequential = c->recent_opens[i] == s; /* stored as shard + 1 */
  c->recent_opens[c->recent_next] = s + 1;
  c->recent_next = (c->recent_next + 1) % BC__RECENT_OPENS;
  return sequential;
}

/* The next prefetch_shards shards after index's, when the open of its shard
 * continues a sequential read (note_open).  Under random access, filling
 * the next shard would cost a shard of records and evict a shard a reader
 * is about as likely to need: doc/cache.md, "Prefetching". */
static size_t default_policy(bc_cache *c, uint64_t index, uint64_t *shards,
                             size_t max) {
  int ahead = c->opts.prefetch_shards == 0 ? 1 : c->opts.prefetch_shards;
  size_t n = 0;
  uint64_t s = index / c->R;
  pthread_mutex_lock(&c->lock);
  bool sequential = note_open(c, s);
  pthread_mutex_unlock(&c->lock);
  if (!sequential) return 0;
  for (int k = 1; k <= ahead && n < max; k++) shards[n++] = s + (uint64_t)k;
  return n;
}

void bc__prefetch_after(bc_cache *c, uint64_t index) {
  if (!c->has_source || c->nworkers == 0 || c->R == 0) return;
  if (c->opts.prefetch_shards < 0 && c->opts.prefetch == NULL) return;
  uint64_t want[16];
  size_t n = c->opts.prefetch
                 ? c->opts.prefetch(c->opts.prefetch_payload, index, c->R, want, 16)
                 : default_policy(c, index, want, 16);
  if (n > 16) n = 16;
  uint64_t known = atomic_load(&c->known_length);
  bool fin = atomic_load(&c->final);
  pthread_mutex_lock(&c->lock);
  for (size_t i = 0; i < n; i++) {
    if (fin && want[i] * c->R >= known) continue;
    bool queued = false;
    for (size_t q = 0; q < c->qlen && !queued; q++) queued = c->queue[q] == want[i];
    if (!queued && c->qlen < sizeof c->queue / sizeof *c->queue)
      c->queue[c->qlen++] = want[i];
  }
  pthread_cond_broadcast(&c->cond);
  pthread_mutex_unlock(&c->lock);
}
