/*
 * Publish-behind (publisher.h): a cache's background publisher thread and
 * its queue.
 *
 * A batch is everything queued when the thread looks: for each shard its
 * scratch file's data and sidecar are fsynced (outside any lock), then
 * bc__store_publish_batch publishes all of them in one write transaction
 * with one fsync per directory.  Afterwards, for each shard: published
 * (counted as a fill or regeneration), or failed (its claim released, its
 * scratch files deleted, the failure kept for the next call that can
 * return it); its fill record is marked done either way, so this process
 * reads it from shards/ (or fills it again) from then on.
 *
 * Locks: the publisher's lock alone; the fill registry's lock alone, after
 * it is released.  Never one across the fsyncs or the transaction.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bag/internal.h"
#include "cache/internal.h"

void bc__publisher_init(bc__publisher *p) {
  memset(p, 0, sizeof *p);
  pthread_mutex_init(&p->lock, NULL);
  pthread_cond_init(&p->work, NULL);
  pthread_cond_init(&p->idle, NULL);
  atomic_init(&p->abandon, false);
  atomic_init(&p->failed, false);
}

void bc__publisher_destroy(bc__publisher *p) {
  bc_error_state_clear(&p->err);
  pthread_cond_destroy(&p->idle);
  pthread_cond_destroy(&p->work);
  pthread_mutex_destroy(&p->lock);
}

int bc__cache_open_scratch(bc_cache *c, const char *scratch, bc_bag **out) {
  bc_reader_options o = BC_READER_OPTIONS_INIT;
  o.max_parallelism = 1;
  bc_bag *bag = NULL;
  char *crc = NULL;
  int rc = bc__bag_open_file(&bag, scratch, &o);
  if (rc == 0 && c->crc && !c->zstd) {
    crc = bc__scratch_crc_path(scratch);
    rc = crc ? bc__bag_attach_crcs(bag, crc) : bc__error(BC_ENOMEM, "out of memory");
  }
  free(crc);
  if (rc != 0) {
    bc_bag_close(bag);
    return rc;
  }
  *out = bag;
  return 0;
}

/* Keeps the first failure not returned yet (the thread's message for rc). */
static void keep_failure(bc_cache *c, int rc) {
  bc__publisher *p = &c->publisher;
  atomic_fetch_add(&p->failures, 1);
  pthread_mutex_lock(&p->lock);
  if (!atomic_load(&p->failed)) {
    bc_error_state_clear(&p->err);
    bc_error_save(&p->err, rc);
    atomic_store(&p->failed, true);
  }
  pthread_mutex_unlock(&p->lock);
}

/* Shard e failed to publish with errs (its claim goes, its files too) or
 * was published (errs->code 0); either way its fill record is done. */
static void finish_entry(bc_cache *c, bc__pub_entry *e, bc_error_state *err) {
  bc__filling *f = e->f;
  if (err->code != 0) {
    bc_error_restore(err);
    bc__store_release(&c->store, f->shard, f->token);
    char *crc = bc__scratch_crc_path(f->scratch);
    unlink(f->scratch);
    if (crc != NULL) unlink(crc);
    free(crc);
    bc_error_restore(err); /* (the release may have set another) */
    keep_failure(c, err->code);
  }
  bc__fill_done(c, f, err->code); /* (the thread's message is err's) */
  free(e);
}

/* Shard e failed to publish with rc (the thread's message). */
static void fail_entry(bc_cache *c, bc__pub_entry *e, int rc) {
  bc_error_state err = BC_ERROR_STATE_INIT;
  bc_error_save(&err, rc);
  finish_entry(c, e, &err);
  bc_error_state_clear(&err);
}

/* Shard e's publish found no room under the limit within the wait: it is
 * not kept (as if evicted at once): its files go (installed: taken back
 * out of shards/), its claim too, and its fill record is done without a
 * failure; what it served (from its scratch file) was right, and this
 * process fills it again when it is read again. */
static void bypass_entry(bc_cache *c, bc__pub_entry *e) {
  bc__filling *f = e->f;
  c->store.ops->uninstall(c->store.impl, f->shard, f->rec.records);
  bc__store_release(&c->store, f->shard, f->token);
  bc_error_clear();
  atomic_fetch_add(&c->stats.bypassed, 1);
  bc__fill_done(c, f, 0);
  free(e);
}

/* Publishes again those of q[0..m) whose errs[i] is BC_EAGAIN (no room),
 * as one batch, their outcomes moved into errs[] and regen[]: the batch's
 * return code (BC_EAGAIN: still no room).  Shards that failed their own
 * checks are not tried again (their files were taken out already). */
static int retry_no_room(bc_cache *c, const bc__publish_req *q, size_t m,
                         uint64_t headroom, bc__victims *victims,
                         bc_error_state *errs, bool *regen) {
  size_t *ix = malloc(m * sizeof *ix);
  bc__publish_req *qq = malloc(m * sizeof *qq);
  bc_error_state *ee = calloc(m, sizeof *ee);
  bool *rr = calloc(m, sizeof *rr);
  int rc = BC_EAGAIN; /* (out of memory: as no room, they are bypassed) */
  size_t k = 0;
  for (size_t i = 0; ix != NULL && qq != NULL && i < m; i++)
    if (errs[i].code == BC_EAGAIN) {
      ix[k] = i;
      qq[k++] = q[i];
    }
  if (k > 0 && ee != NULL && rr != NULL) {
    rc = bc__store_publish_batch(&c->store, qq, k, headroom, victims, ee, rr);
    for (size_t j = 0; j < k; j++) {
      bc_error_state_clear(&errs[ix[j]]);
      errs[ix[j]] = ee[j]; /* moved */
      ee[j] = (bc_error_state)BC_ERROR_STATE_INIT;
      regen[ix[j]] = rr[j];
    }
  }
  free(rr);
  free(ee);
  free(qq);
  free(ix);
  return rc;
}

/* bc__store_publish_batch, waiting while the limit has no room for the
 * batch (BC_EAGAIN: room reserved by fills of other processes, which
 * publish or end within a fill), BC__ROOM_WAIT_S at most; then each shard
 * still without room is tried alone once, and those that still find none
 * are bypassed (bypass_entry: their errs[i] become 0, bypassed[i] true).
 * The publisher has no interrupt handler: close's abandon stops the wait. */
static void publish_with_room(bc_cache *c, bc__publish_req *q, size_t m,
                              uint64_t headroom, bc__victims *victims,
                              bc_error_state *errs, bool *regen, bool *bypassed) {
  double waited = 0, pause = 0.001;
  int rc = bc__store_publish_batch(&c->store, q, m, headroom, victims, errs, regen);
  while (rc == BC_EAGAIN && waited < BC__ROOM_WAIT_S && !atomic_load(&c->publisher.abandon)) {
    struct timespec ts = {0, (long)(pause * 1e9)};
    nanosleep(&ts, NULL);
    waited += pause;
    if (pause < BC__POLL_MS * 1e-3) pause *= 2;
    rc = retry_no_room(c, q, m, headroom, victims, errs, regen);
  }
  if (rc != BC_EAGAIN) return;
  for (size_t i = 0; i < m; i++) {
    if (errs[i].code != BC_EAGAIN) continue; /* published, or failed alone */
    int one = bc__store_publish_batch(&c->store, &q[i], 1, 0, victims, &errs[i], &regen[i]);
    if (one == BC_EAGAIN) {
      bc_error_state_clear(&errs[i]);
      bypassed[i] = true;
    }
  }
}

/* Publishes one batch: the entries of list (n of them). */
static void publish_batch(bc_cache *c, bc__pub_entry *list, size_t n) {
  bc__pub_entry **es = calloc(n, sizeof *es);
  bc__publish_req *q = calloc(n, sizeof *q);
  bc_error_state *errs = calloc(n, sizeof *errs);
  bool *regen = calloc(n, 2 * sizeof *regen), *bypassed = regen ? regen + n : NULL;
  uint64_t passes[256];
  size_t npasses = bc__pass_positions(c, passes, 256);
  if (es == NULL || q == NULL || errs == NULL || regen == NULL) {
    bc_error_state oom = BC_ERROR_STATE_INIT;
    bc_error_save(&oom, bc__error(BC_ENOMEM, "out of memory"));
    for (bc__pub_entry *e = list, *next; e != NULL; e = next) {
      next = e->next;
      finish_entry(c, e, &oom);
    }
    bc_error_state_clear(&oom);
    goto cleanup;
  }
  size_t m = 0; /* entries whose data is durable */
  for (bc__pub_entry *e = list, *next; e != NULL; e = next) {
    next = e->next;
    bc__filling *f = e->f;
    int rc = atomic_load(&c->publisher.abandon)
                 ? bc__error(BC_ECLOSED, "%s: shard %llu: its publish was "
                             "abandoned (the cache was closed)", c->root,
                             (unsigned long long)f->shard)
                 : bc__fill_sync_scratch(c, f->scratch);
    if (rc != 0) {
      fail_entry(c, e, rc);
      continue;
    }
    /* Renamed into place outside the write lock (the claim's room holds
     * it: the limit already counts it), so that a claim of another miss
     * never waits for these renames and fsyncs. */
    rc = c->store.ops->install(c->store.impl, f->scratch, f->shard,
                               f->rec.records, false);
    if (rc != 0) {
      fail_entry(c, e, rc);
      continue;
    }
    es[m] = e;
    q[m] = (bc__publish_req){
        .shard = f->shard, .token = f->token, .scratch = f->scratch,
        .records = f->rec.records, .size = f->rec.bytes,
        .checksum = e->checksum, .skipped = e->skipped, .ended = e->ended,
        .kept = f->kept, .zstd = c->zstd,
        .note = e->note, .default_limit = c->opts.disk_limit,
        .passes = passes, .npasses = npasses,
        .seekable = c->src.open_at != NULL,
        .bump = bc__access_bump, .bump_arg = c};
    q[m].need = bc__limit_shards(&c->opts, &q[m].prefetched);
    q[m].installed = true;
    m++;
  }
  /* The new names durable, once per directory for the batch. */
  int drc = m > 0 ? c->store.ops->sync_dirs(c->store.impl) : 0;
  if (drc != 0) {
    bc_error_state err = BC_ERROR_STATE_INIT;
    bc_error_save(&err, drc);
    for (size_t i = 0; i < m; i++) {
      c->store.ops->uninstall(c->store.impl, es[i]->f->shard, es[i]->f->rec.records);
      finish_entry(c, es[i], &err);
    }
    bc_error_state_clear(&err);
    m = 0;
  }
  if (m > 0) {
    bc__victims victims = {0};
    /* Evicting ahead: room for the next claim, made in this transaction. */
    uint64_t headroom = c->evict_ahead ? atomic_load(&c->shard_bytes_seen) : 0;
    publish_with_room(c, q, m, headroom, &victims, errs, regen, bypassed);
    atomic_fetch_add(&c->stats.evictions, victims.n);
    bc__readers_forget(c, victims.shards, victims.n);
    bc__victims_free(&victims);
    for (size_t i = 0; i < m; i++) {
      if (bypassed[i]) {
        bypass_entry(c, es[i]);
        continue;
      }
      if (errs[i].code == 0) {
        bc__filling *f = es[i]->f;
        uint64_t end = f->shard * c->R + f->rec.records;
        if (end > atomic_load(&c->known_length)) atomic_store(&c->known_length, end);
        if (es[i]->ended) atomic_store(&c->final, true);
        atomic_fetch_add(f->kept ? &c->stats.shards_kept
                         : regen[i] ? &c->stats.regenerations : &c->stats.fills, 1);
      }
      finish_entry(c, es[i], &errs[i]);
      bc_error_state_clear(&errs[i]);
    }
  }
  atomic_fetch_add(&c->publisher.batches, 1);
  uint64_t big = atomic_load(&c->publisher.largest);
  while (n > big && !atomic_compare_exchange_weak(&c->publisher.largest, &big, n)) {
  }
cleanup:
  free(es);
  free(q);
  free(errs);
  free(regen);
}

static void *publisher_main(void *arg) {
  bc_cache *c = arg;
  bc__publisher *p = &c->publisher;
  pthread_mutex_lock(&p->lock);
  for (;;) {
    while (p->head == NULL && !p->stop) pthread_cond_wait(&p->work, &p->lock);
    if (p->head == NULL) break; /* stopping, nothing left */
    bc__pub_entry *list = p->head;
    size_t n = p->queued;
    p->head = p->tail = NULL;
    p->queued = 0;
    p->inflight = n;
    pthread_mutex_unlock(&p->lock);
    publish_batch(c, list, n);
    pthread_mutex_lock(&p->lock);
    p->inflight = 0;
    pthread_cond_broadcast(&p->idle);
  }
  pthread_mutex_unlock(&p->lock);
  return NULL;
}

int bc__publisher_enqueue(bc_cache *c, bc__pub_entry *e) {
  bc__publisher *p = &c->publisher;
  int rc = 0;
  pthread_mutex_lock(&p->lock);
  if (p->closed || p->queued >= BC__PUBLISH_QUEUE_MAX) {
    rc = BC_EAGAIN;
  } else if (!p->running) {
    if (pthread_create(&p->thread, NULL, publisher_main, c) != 0)
      rc = BC_EAGAIN;
    else
      p->running = true;
  }
  if (rc == 0) {
    e->next = NULL;
    if (p->tail) p->tail->next = e;
    else p->head = e;
    p->tail = e;
    p->queued++;
    atomic_fetch_add(&p->queued_total, 1);
    pthread_cond_signal(&p->work);
  }
  pthread_mutex_unlock(&p->lock);
  return rc;
}

int bc__publisher_take_error(bc_cache *c) {
  bc__publisher *p = &c->publisher;
  /* The common case takes no lock (a failure is seen by the next call
   * that looks after it was kept). */
  if (!atomic_load(&p->failed)) return 0;
  int rc = 0;
  pthread_mutex_lock(&p->lock);
  if (atomic_load(&p->failed)) {
    rc = bc_error_restore(&p->err);
    bc_error_state_clear(&p->err);
    atomic_store(&p->failed, false);
  }
  pthread_mutex_unlock(&p->lock);
  return rc;
}

int bc__publisher_wait(bc_cache *c, bool report) {
  bc__publisher *p = &c->publisher;
  int rc = 0;
  pthread_mutex_lock(&p->lock);
  while (rc == 0 && p->running && (p->queued > 0 || p->inflight > 0))
    rc = bc__cond_wait(&p->idle, &p->lock);
  pthread_mutex_unlock(&p->lock);
  if (rc == 0 && report) rc = bc__publisher_take_error(c);
  return rc;
}

void bc__publisher_stop(bc_cache *c) {
  bc__publisher *p = &c->publisher;
  /* Publish what is queued; interrupted: abandon the rest. */
  if (bc__publisher_wait(c, false) != 0) atomic_store(&p->abandon, true);
  pthread_mutex_lock(&p->lock);
  p->closed = true;
  p->stop = true;
  bool running = p->running;
  p->running = false;
  pthread_cond_broadcast(&p->work);
  pthread_mutex_unlock(&p->lock);
  if (running) pthread_join(p->thread, NULL);
  if (bc__publisher_take_error(c) != 0)
    bc__notice("%s: closing: a shard could not be published: %s", c->root,
               bc_errmsg());
  /* Later fills (views outliving the handle) publish synchronously. */
}

void bc__publisher_after_fork_child(bc__publisher *p) {
  /* The parent's entries and thread are the parent's (its claims): the
   * child forgets them (the entries leak, as the fill records do). */
  p->head = p->tail = NULL;
  p->queued = p->inflight = 0;
  p->running = false;
  p->stop = false;
  p->closed = false;
  atomic_store(&p->failed, false);
  bc_error_state_clear(&p->err);
  pthread_cond_init(&p->work, NULL);
  pthread_cond_init(&p->idle, NULL);
  pthread_mutex_unlock(&p->lock);
}
