/*
 * The store's typed calls: the engine's policy over the shared state,
 * written once over bc__store_ops (store.h), so that it runs the same over
 * LMDB (store_lmdb.c) and over the in-memory fake of the policy test.
 *
 * A publish (bc__store_publish), in ONE write transaction:
 *   1. the claim must still be ours;
 *   2. a checksum recorded at an earlier publish must match;
 *   3. the length must agree with what earlier passes saw;
 *   4. the disk limit must hold the shards at work;
 *   5. dead claims are reaped and, while bytes + new > limit, victims are
 *      evicted (their files removed first);
 *   6. in a nested transaction: the file is installed, its state becomes
 *      PRESENT, and bytes, clock, checksum and length are updated;
 *   7. commit.
 * A failure after evictions still commits them (their files are gone);
 * when that commit fails too, both failures are reported.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/internal.h"

void bc__victims_free(bc__victims *v) {
  free(v->shards);
  *v = (bc__victims){0};
}

/* Appends shard to v (room is made first, so an evicted shard is always
 * recorded once its file is gone: call before removing it). */
static int victims_reserve(bc__victims *v) {
  if (v->n < v->cap) return 0;
  size_t cap = v->cap ? 2 * v->cap : 16;
  uint64_t *grown = realloc(v->shards, cap * sizeof *grown);
  if (grown == NULL) return bc__error(BC_ENOMEM, "out of memory");
  v->shards = grown;
  v->cap = cap;
  return 0;
}

/* Commits t when rc is 0, else aborts it; returns the outcome. */
static int finish(const bc__store *s, bc__store_txn *t, int rc) {
  if (rc == 0) return s->ops->commit(t);
  s->ops->abort(t);
  return rc;
}

/* ---- reading ---------------------------------------------------------------- */

int bc__store_read(const bc__store *s, uint64_t shard, bc__shard_rec *rec,
                   bool *found, uint64_t *length, bool *final) {
  const bc__store_ops *o = s->ops;
  bc__store_txn *t;
  int rc = o->begin(s->impl, false, &t);
  if (rc != 0) return rc;
  uint64_t len = 0, fin = 0;
  bool f1 = false, f2 = false;
  rc = o->get(t, shard, rec, found);
  if (rc == 0 && length != NULL) rc = o->u64_get(t, BC__KEY_LENGTH, &len, &f1);
  if (rc == 0 && length != NULL) rc = o->u64_get(t, BC__KEY_FINAL, &fin, &f2);
  o->abort(t);
  if (rc == 0 && length != NULL) {
    *length = f1 ? len : 0;
    *final = f2 && fin;
  }
  return rc;
}

/* ---- claims ----------------------------------------------------------------- */

/* True when `rec` is the claim of fill `token` of this process. */
static bool claim_is(const bc__store *s, const bc__shard_rec *rec, uint64_t token) {
  return rec->state == SHARD_FILLING && rec->owner.pid == s->self.pid &&
         rec->owner.start_time == s->self.start_time && rec->bytes == token;
}

/* Forward: the limit, reaping and eviction of a publish (below). */
typedef struct {
  uint64_t bytes, clock, length, limit;
  bool final, have_sum;
} pub_state;
static int read_limit(const bc__store *s, bc__store_txn *t,
                      const bc__publish_req *q, pub_state *st);
static int make_room(const bc__store *s, bc__store_txn *t,
                     const bc__publish_req *q, size_t nkeep, pub_state *st,
                     uint64_t size, bc__victims *victims, bool *full);

int bc__store_claim(const bc__store *s, uint64_t shard, uint64_t token,
                    bc__shard_rec *rec, bool *claimed) {
  bc__publish_req q = {.shard = shard, .token = token};
  uint64_t room = 0;
  return bc__store_claim_room(s, &q, rec, claimed, &room, NULL);
}

/* Reserves q->size bytes for the claim being made in t (see
 * bc__store_claim_room): *room the bytes reserved, UINT64_MAX without a
 * limit, 0 when the limit cannot make room (nothing is evicted then). */
static int claim_reserve(const bc__store *s, bc__store_txn *t,
                         const bc__publish_req *q, uint64_t *room,
                         bc__victims *victims) {
  pub_state st = {0};
  bool f = false, full = false;
  int rc = read_limit(s, t, q, &st);
  *room = 0;
  if (rc == 0 && st.limit == 0) {
    *room = UINT64_MAX;
    return 0;
  }
  if (q->size == 0) return rc; /* no size known: nothing to reserve */
  /* A limit too small for the shard: the synchronous publish reports it. */
  if (rc == 0 && (q->size > st.limit ||
                  (q->need > 0 && st.limit / q->need < q->size)))
    return 0;
  if (rc == 0) rc = s->ops->u64_get(t, BC__KEY_BYTES, &st.bytes, &f);
  if (rc == 0) rc = s->ops->u64_get(t, BC__KEY_CLOCK, &st.clock, &f);
  if (rc == 0) rc = make_room(s, t, q, 1, &st, q->size, victims, &full);
  if (rc == 0 && !full) *room = q->size;
  if (rc == 0) rc = s->ops->u64_put(t, BC__KEY_BYTES, st.bytes);
  if (rc == 0) rc = s->ops->u64_put(t, BC__KEY_CLOCK, st.clock);
  return rc;
}

int bc__store_claim_room(const bc__store *s, const bc__publish_req *q,
                         bc__shard_rec *rec, bool *claimed, uint64_t *room,
                         bc__victims *victims) {
  const bc__store_ops *o = s->ops;
  bc__store_txn *t;
  int rc = o->begin(s->impl, true, &t);
  if (rc != 0) return rc;
  bool found = false;
  *claimed = false;
  *room = 0;
  rc = o->get(t, q->shard, rec, &found);
  bool ours = found && rec->owner.pid == s->self.pid &&
              rec->owner.start_time == s->self.start_time;
  bool free_to_take =
      rc == 0 && (!found || (rec->state == SHARD_FILLING &&
                             (ours || !o->owner_alive(s->impl, rec->owner))));
  if (!free_to_take) {
    o->abort(t);
    return rc;
  }
  /* A dead claimant may have left its file in shards/ (a crash between
   * install and commit): it is unknown to the state, so it goes. */
  if (found) o->purge(s->impl, q->shard);
  bc__shard_rec mine = {.state = SHARD_FILLING, .bytes = q->token, .owner = s->self};
  rc = o->put(t, q->shard, &mine); /* first: make_room counts it as ours */
  uint64_t got = 0;
  size_t before = victims ? victims->n : 0;
  if (rc == 0 && victims != NULL) rc = claim_reserve(s, t, q, &got, victims);
  if (rc == 0 && got != UINT64_MAX && got > 0) {
    mine.records = got;
    rc = o->put(t, q->shard, &mine);
  }
  /* A failure after evictions leaves the victims listed with their files
   * gone: a read finds them missing and refills them (as after a crash
   * inside a publish). */
  (void)before;
  rc = finish(s, t, rc);
  if (rc == 0) {
    *claimed = true;
    *room = got;
  }
  return rc;
}

void bc__store_release(const bc__store *s, uint64_t shard, uint64_t token) {
  const bc__store_ops *o = s->ops;
  bc__store_txn *t;
  if (o->begin(s->impl, true, &t) != 0) return;
  bc__shard_rec rec;
  bool found = false;
  if (o->get(t, shard, &rec, &found) == 0 && found && claim_is(s, &rec, token))
    finish(s, t, o->del(t, shard));
  else
    o->abort(t); /* not ours (any more): nothing to drop */
}

/* ---- the length ------------------------------------------------------------- */

/* Makes the length final at `end` (under write transaction t). */
static int put_final_length(const bc__store *s, bc__store_txn *t, uint64_t end) {
  int rc = s->ops->u64_put(t, BC__KEY_LENGTH, end);
  if (rc == 0) rc = s->ops->u64_put(t, BC__KEY_FINAL, 1);
  if (rc == 0) rc = s->ops->end(s->impl, end);
  return rc;
}

int bc__store_record_end(const bc__store *s, uint64_t shard, uint64_t end) {
  const bc__store_ops *o = s->ops;
  bc__store_txn *t;
  int rc = o->begin(s->impl, true, &t);
  if (rc != 0) return rc;
  uint64_t known = 0;
  bool found;
  rc = o->u64_get(t, BC__KEY_LENGTH, &known, &found);
  if (rc == 0 && known > end)
    rc = bc__error(BC_ENONDET,
                   "%s: the source ended after %llu records, but %llu were "
                   "seen before: the source changed since the cache was "
                   "filled (or it is not deterministic); to start over, clear "
                   "the cache (bagcache cache clear %s) or use a new root",
                   s->root, (unsigned long long)end, (unsigned long long)known,
                   s->root);
  if (rc == 0) rc = put_final_length(s, t, end);
  if (rc == 0) rc = o->del(t, shard);
  return finish(s, t, rc);
}

typedef struct {
  uint64_t R, end;
} highest_end;

static int note_end(void *arg, uint64_t shard, const bc__shard_rec *r) {
  highest_end *h = arg;
  if (r->state == SHARD_PRESENT && shard * h->R + r->records > h->end)
    h->end = shard * h->R + r->records;
  return 0;
}

int bc__store_finalize(const bc__store *s, uint64_t *length) {
  const bc__store_ops *o = s->ops;
  bc__store_txn *t;
  int rc = o->begin(s->impl, true, &t); /* serialises length writers */
  if (rc != 0) return rc;
  uint64_t fin = 0;
  highest_end h = {s->R, 0};
  bool found = false;
  rc = o->u64_get(t, BC__KEY_FINAL, &fin, &found);
  if (rc == 0 && !(found && fin)) {
    rc = o->each(t, note_end, &h);
    if (rc == 0) rc = put_final_length(s, t, h.end);
  } else if (rc == 0) {
    rc = o->u64_get(t, BC__KEY_LENGTH, &h.end, &found);
  }
  rc = finish(s, t, rc);
  if (rc == 0) *length = h.end;
  return rc;
}

/* ---- forgetting --------------------------------------------------------------- */

/* Takes `bytes` off the bytes counter (under write transaction t). */
static int bytes_less(const bc__store *s, bc__store_txn *t, uint64_t bytes) {
  uint64_t total = 0;
  bool found;
  int rc = s->ops->u64_get(t, BC__KEY_BYTES, &total, &found);
  if (rc == 0)
    rc = s->ops->u64_put(t, BC__KEY_BYTES, total > bytes ? total - bytes : 0);
  return rc;
}

int bc__store_forget(const bc__store *s, uint64_t shard, const bc__file_id *bad) {
  const bc__store_ops *o = s->ops;
  bc__store_txn *t;
  int rc = o->begin(s->impl, true, &t);
  if (rc != 0) return rc;
  bc__shard_rec rec;
  bool found = false;
  rc = o->get(t, shard, &rec, &found);
  if (rc == 0 && found && rec.state == SHARD_PRESENT &&
      o->same_file(s->impl, shard, &rec, bad)) {
    /* The file is damaged or gone: its state goes whether or not it can be
     * removed (a file left behind is replaced by the refill's). */
    (void)o->evict(s->impl, shard, &rec);
    rc = bytes_less(s, t, rec.bytes);
    if (rc == 0) rc = o->del(t, shard);
  }
  return finish(s, t, rc);
}

/* ---- clearing ----------------------------------------------------------------- */

typedef struct {
  const bc__store *s;
  bc__victims go; /* the shards whose entries go */
} clear_walk;

static int note_clear(void *arg, uint64_t shard, const bc__shard_rec *r) {
  clear_walk *w = arg;
  if (r->state == SHARD_FILLING && w->s->ops->owner_alive(w->s->impl, r->owner))
    return 0; /* a live fill: its shard is published as a new one */
  int rc = victims_reserve(&w->go);
  if (rc == 0) w->go.shards[w->go.n++] = shard;
  return rc;
}

int bc__store_clear(const bc__store *s, uint64_t *removed) {
  const bc__store_ops *o = s->ops;
  bc__store_txn *t;
  int rc = o->begin(s->impl, true, &t);
  if (rc != 0) return rc;
  clear_walk w = {.s = s};
  rc = o->each(t, note_clear, &w);
  for (size_t i = 0; rc == 0 && i < w.go.n; i++) {
    bc__shard_rec rec;
    bool found = false;
    rc = o->get(t, w.go.shards[i], &rec, &found);
    if (rc != 0 || !found) continue;
    /* A PRESENT shard's files go first (evict); a dead claimant's, of any
     * length (purge).  Then its entry. */
    if (rec.state == SHARD_PRESENT) rc = o->evict(s->impl, w.go.shards[i], &rec);
    else o->purge(s->impl, w.go.shards[i]);
    if (rc == 0) rc = o->del(t, w.go.shards[i]);
  }
  if (rc == 0) rc = o->u64_put(t, BC__KEY_BYTES, 0);
  rc = finish(s, t, rc);
  if (rc == 0) *removed = w.go.n;
  bc__victims_free(&w.go);
  return rc;
}

/* ---- eviction's policy --------------------------------------------------------- */

/* Records a pass must read and drop before it can rebuild a shard starting
 * at `start`: the distance from the nearest pass at or before it (from
 * record 0 when there is none); 0 for a seekable source. */
static uint64_t rebuild_skip(const bc__publish_req *q, uint64_t start) {
  if (q->seekable) return 0;
  uint64_t from = 0;
  for (size_t i = 0; i < q->npasses && q->passes[i] <= start; i++) from = q->passes[i];
  return start - from;
}

/* The most shards of skipped records a rebuild's cost is credited with. */
#define COST_CAP 1.0

typedef struct {
  const bc__publish_req *q;
  uint64_t R;
  double present, best;
  uint64_t victim;
  bc__shard_rec vrec;
  bool found;
} victim_walk;

static int count_present(void *arg, uint64_t shard, const bc__shard_rec *r) {
  (void)shard;
  ((victim_walk *)arg)->present += r->state == SHARD_PRESENT;
  return 0;
}

static int score_victim(void *arg, uint64_t s, const bc__shard_rec *r) {
  victim_walk *w = arg;
  if (r->state != SHARD_PRESENT || s == w->q->shard) return 0;
  /* The credit of a rebuild's cost, in shards of records beyond the R
   * written, is capped at one (COST_CAP): see bc__store_pick_victim. */
  double k = (double)rebuild_skip(w->q, s * w->R) / (double)w->R;
  if (k > COST_CAP) k = COST_CAP;
  double score = (double)r->last_access + w->present * k;
  if (!w->found || score < w->best) {
    w->victim = s;
    w->vrec = *r;
    w->found = true;
    w->best = score;
  }
  return 0;
}

/* The lowest last_access + present * min(skip / R, COST_CAP), where skip
 * is rebuild_skip(): least recently used, except that a shard which costs
 * k more shards of records to rebuild (from this process's passes) is kept
 * as if it had been read min(k, 1) * present accesses later (a
 * GreedyDual-style weighing of recency and cost).  The cap is the aging
 * bound: a shard nobody reads goes at most one turnover of the cache
 * (present clock ticks, each publish and each open a tick at least) after
 * LRU would have evicted it, whatever its rebuild costs, so a working set
 * that fits the limit stops missing after a bounded number of misses
 * (uncapped, a shard costing k shards outlived k turnovers: issue 26's
 * 4-shard working set beside 9 expensive cold shards missed 217 times in
 * 2,000 reads, against 4 under LRU and 9 capped).  Plain LRU when every
 * shard costs the same (a seekable source, or passes at every shard).
 * Ties: the lowest shard. */
int bc__store_pick_victim(const bc__store *s, bc__store_txn *t,
                          const bc__publish_req *q, uint64_t *victim,
                          bc__shard_rec *vrec, bool *found) {
  victim_walk w = {.q = q, .R = s->R};
  int rc = s->ops->each(t, count_present, &w);
  if (rc == 0) rc = s->ops->each(t, score_victim, &w);
  if (rc != 0) return rc;
  *found = w.found;
  if (w.found) {
    *victim = w.victim;
    *vrec = w.vrec;
  }
  return 0;
}

/* ---- publishing ------------------------------------------------------------------ */

/* Steps 1 to 3: the claim, the checksum, the length. */
static int publish_checks(const bc__store *s, bc__store_txn *t,
                          const bc__publish_req *q, pub_state *st) {
  const bc__store_ops *o = s->ops;
  uint64_t start = q->shard * s->R, end = start + q->records;
  bc__shard_rec rec;
  bool found = false, f = false;
  uint64_t old_sum = 0, fin = 0;
  int rc = o->get(t, q->shard, &rec, &found);
  if (rc == 0 && (!found || !claim_is(s, &rec, q->token)))
    rc = bc__error(BC_EIO, "%s: shard %llu: our claim was taken over while "
                   "filling it", s->root, (unsigned long long)q->shard);
  if (rc == 0) rc = o->sum_get(t, q->shard, &old_sum, &st->have_sum);
  if (rc == 0 && st->have_sum && old_sum != q->checksum)
    rc = bc__error(BC_ENONDET,
                   "%s: shard %llu (records %llu..%llu) came out different "
                   "when regenerated: the iterator is not deterministic%s",
                   s->root, (unsigned long long)q->shard,
                   (unsigned long long)start, (unsigned long long)end, q->note);
  if (rc == 0) rc = o->u64_get(t, BC__KEY_BYTES, &st->bytes, &f);
  if (rc == 0) rc = o->u64_get(t, BC__KEY_CLOCK, &st->clock, &f);
  if (rc == 0) rc = o->u64_get(t, BC__KEY_LENGTH, &st->length, &f);
  if (rc == 0) rc = o->u64_get(t, BC__KEY_FINAL, &fin, &f);
  st->final = f && fin;
  /* A pass that ends where earlier passes went on, or goes past a known
   * end, means the source is not deterministic. */
  if (rc == 0 && ((q->ended && st->length > end) || (st->final && end > st->length) ||
                  (st->final && q->ended && end != st->length)))
    rc = bc__error(BC_ENONDET,
                   "%s: shard %llu: the source now %s after %llu records "
                   "(%s %llu before): the iterator is not deterministic%s",
                   s->root, (unsigned long long)q->shard,
                   q->ended ? "ends" : "goes on", (unsigned long long)end,
                   st->final ? "length" : "at least",
                   (unsigned long long)st->length, q->note);
  return rc;
}

/* The limit in force: the one last stored by any process opening the
 * root with a limit, else the opener's. */
static int read_limit(const bc__store *s, bc__store_txn *t,
                      const bc__publish_req *q, pub_state *st) {
  bool stored = false;
  int rc = s->ops->u64_get(t, BC__KEY_LIMIT, &st->limit, &stored);
  if (rc == 0 && !stored) st->limit = q->default_limit;
  return rc;
}

/* Step 4: a limit that cannot hold the shards at work would thrash, and
 * is refused. */
static int publish_limit(const bc__store *s, bc__store_txn *t,
                         const bc__publish_req *q, pub_state *st) {
  int rc = read_limit(s, t, q, st);
  if (rc == 0 && st->limit != 0 &&
      (q->size > st->limit ||
       (q->records == s->R && st->limit / q->need < q->size)))
    rc = bc__limit_error(s->root, st->limit, q->need, q->prefetched, q->size,
                         "the size of this shard");
  return rc;
}

/* Adds `n` to the root-wide counter `key` (absent: 0) in transaction t. */
static int count_root(const bc__store *s, bc__store_txn *t, bc__store_key key,
                      uint64_t n) {
  uint64_t v = 0;
  bool found = false;
  int rc = n == 0 ? 0 : s->ops->u64_get(t, key, &v, &found);
  if (rc == 0 && n != 0) rc = s->ops->u64_put(t, key, v + n);
  return rc;
}

typedef struct {
  const bc__store *s;
  const bc__publish_req *keep;
  size_t nkeep;
  bc__victims dead;
  int rc;
} dead_walk;

static int note_dead(void *arg, uint64_t shard, const bc__shard_rec *r) {
  dead_walk *w = arg;
  if (r->state != SHARD_FILLING || w->s->ops->owner_alive(w->s->impl, r->owner))
    return 0;
  for (size_t i = 0; i < w->nkeep; i++)
    if (w->keep[i].shard == shard) return 0;
  int rc = victims_reserve(&w->dead);
  if (rc == 0) w->dead.shards[w->dead.n++] = shard;
  return rc;
}

/* Removes the claims (and any files) of dead fillers: a claimant killed
 * between its install and its commit leaves a complete file that the
 * state does not count.  Before the eviction decisions, so the limit also
 * covers such files. */
static int reap_dead_claims(const bc__store *s, bc__store_txn *t,
                            const bc__publish_req *keep, size_t nkeep) {
  dead_walk w = {.s = s, .keep = keep, .nkeep = nkeep};
  int rc = s->ops->each(t, note_dead, &w);
  for (size_t i = 0; rc == 0 && i < w.dead.n; i++) {
    s->ops->purge(s->impl, w.dead.shards[i]);
    rc = s->ops->del(t, w.dead.shards[i]);
  }
  bc__victims_free(&w.dead);
  return rc;
}

/* The bytes reserved by claims (FILLING records' `records`), except
 * those of the shards q[0..nkeep) (whose reservations become their
 * files). */
typedef struct {
  const bc__publish_req *q;
  size_t nkeep;
  uint64_t reserved;
} reserve_walk;

static int note_reserved(void *arg, uint64_t shard, const bc__shard_rec *r) {
  reserve_walk *w = arg;
  if (r->state != SHARD_FILLING) return 0;
  for (size_t i = 0; i < w->nkeep; i++)
    if (w->q[i].shard == shard) return 0;
  w->reserved += r->records;
  return 0;
}

/* Step 5: evicts until `size` more bytes fit under the limit, counting
 * the reservations of claims other than q[0..nkeep)'s:
 *   bytes + reserved + size <= limit.
 * Victims' files go before any new file appears, so the bytes in shards/
 * and in the scratch files reserved for never exceed the limit, at any
 * instant, across processes.  *full (when non-NULL): nothing left to
 * evict, and the room is not there (else that is BC_ENOSPC). */
static int make_room(const bc__store *s, bc__store_txn *t,
                     const bc__publish_req *q, size_t nkeep, pub_state *st,
                     uint64_t size, bc__victims *victims, bool *full) {
  if (st->limit == 0) return 0;
  int rc = reap_dead_claims(s, t, q, nkeep);
  /* This process's recent opens count before victims are picked. */
  if (rc == 0 && q->bump != NULL) rc = q->bump(q->bump_arg, s, t, &st->clock);
  reserve_walk rw = {.q = q, .nkeep = nkeep};
  if (rc == 0) rc = s->ops->each(t, note_reserved, &rw);
  if (q->no_evict) size += q->spare;
  while (rc == 0 && st->bytes + rw.reserved + size > st->limit) {
    uint64_t victim = 0;
    bc__shard_rec vrec = {0};
    bool any = false;
    if (q->no_evict) { /* room only if it is there already */
      if (full != NULL)
        *full = true;
      else
        rc = bc__error(BC_ENOSPC, "%s: no room under the disk limit %llu "
                       "without evicting", s->root, (unsigned long long)st->limit);
      break;
    }
    rc = bc__store_pick_victim(s, t, q, &victim, &vrec, &any);
    if (rc == 0 && !any && full != NULL) {
      *full = true;
      break;
    }
    /* Room reserved by claims in progress comes back when they publish
     * (their shards become evictable) or end: BC_EAGAIN, for the caller
     * to wait and try again. */
    if (rc == 0 && !any)
      rc = bc__error(rw.reserved > 0 ? BC_EAGAIN : BC_ENOSPC,
                     "%s: %llu bytes in use (%llu of them reserved by shards "
                     "being filled or published) and nothing left to evict "
                     "under the disk limit %llu", s->root,
                     (unsigned long long)(st->bytes + rw.reserved),
                     (unsigned long long)rw.reserved,
                     (unsigned long long)st->limit);
    if (rc == 0) rc = victims_reserve(victims);
    if (rc == 0) rc = s->ops->evict(s->impl, victim, &vrec);
    if (rc != 0) break;
    victims->shards[victims->n++] = victim;
    rc = s->ops->del(t, victim);
    if (rc == 0) rc = count_root(s, t, BC__KEY_N_EVICTIONS, 1);
    st->bytes = vrec.bytes > st->bytes ? 0 : st->bytes - vrec.bytes;
  }
  return rc;
}

static int publish_evict(const bc__store *s, bc__store_txn *t,
                         const bc__publish_req *q, pub_state *st,
                         bc__victims *victims) {
  return make_room(s, t, q, 1, st, q->size, victims, NULL);
}

/* Step 6, in a nested transaction: if it fails only it is rolled back (and
 * the file taken back out), so the evictions can still be committed. */
static int publish_install(const bc__store *s, bc__store_txn *parent,
                           const bc__publish_req *q, const pub_state *st,
                           bool sync_dirs) {
  const bc__store_ops *o = s->ops;
  bc__store_txn *t;
  int rc = o->nest(parent, &t);
  if (rc != 0) return rc;
  uint64_t end = q->shard * s->R + q->records;
  bool grow = end > st->length || q->ended;
  uint64_t new_length = q->ended ? end : (end > st->length ? end : st->length);
  bc__shard_rec rec = {.state = SHARD_PRESENT, .zstd = q->zstd,
                       .records = q->records, .bytes = q->size,
                       .last_access = st->clock};
  if (!q->installed) rc = o->install(s->impl, q->scratch, q->shard, q->records, sync_dirs);
  bool installed = rc == 0;
  if (rc == 0) rc = o->put(t, q->shard, &rec);
  if (rc == 0) rc = o->u64_put(t, BC__KEY_BYTES, st->bytes + q->size);
  if (rc == 0) rc = o->u64_put(t, BC__KEY_CLOCK, st->clock);
  if (rc == 0 && !st->have_sum) rc = o->sum_put(t, q->shard, q->checksum);
  if (rc == 0)
    rc = count_root(s, t, q->kept ? BC__KEY_N_KEPT
                          : st->have_sum ? BC__KEY_N_REGENS : BC__KEY_N_FILLS, 1);
  if (rc == 0) rc = count_root(s, t, BC__KEY_N_RECORDS, q->records + q->skipped);
  if (rc == 0) rc = count_root(s, t, BC__KEY_N_WRITTEN, q->size);
  if (rc == 0 && grow) {
    rc = o->u64_put(t, BC__KEY_LENGTH, new_length);
    if (rc == 0 && q->ended) rc = o->u64_put(t, BC__KEY_FINAL, 1);
    /* The human-readable metadata records the end once it is known; the
     * growing lower bound lives in the shared state (and a rebuild
     * recovers it from the shard files), which saves a file rewrite and
     * two fsyncs per shard. */
    if (rc == 0 && q->ended) rc = o->end(s->impl, new_length);
  }
  rc = finish(s, t, rc); /* into the parent */
  /* A file the state does not know must not stay in shards/. */
  if (rc != 0 && installed) o->uninstall(s->impl, q->shard, q->records);
  return rc;
}

/* A publish failed with `rc` (the thread's message says why).  When
 * `save` (victims' files were removed, or clock bumps applied) the
 * evictions are committed anyway, with the bytes and the clock, so the
 * state matches the files.  Returns rc with its message; when that commit
 * fails too, its error, saying both: the state then still lists files
 * that are gone (readers find them missing and refill them) and counts
 * their bytes. */
static int keep_evictions(const bc__store *s, bc__store_txn *t,
                          const pub_state *st, bool save, size_t evicted, int rc) {
  if (!save) {
    s->ops->abort(t);
    return rc;
  }
  bc_error_state failure = BC_ERROR_STATE_INIT;
  bc_error_save(&failure, rc);
  int crc = s->ops->u64_put(t, BC__KEY_BYTES, st->bytes);
  if (crc == 0) crc = s->ops->u64_put(t, BC__KEY_CLOCK, st->clock);
  crc = finish(s, t, crc);
  if (crc == 0) {
    bc_error_restore(&failure);
  } else {
    char why[BC_ERRMSG_MAX];
    snprintf(why, sizeof why, "%s", bc_errmsg());
    rc = bc_set_error(crc, bc_errno(),
                      "%s; then saving the state after it failed too (%zu "
                      "evicted shards stay listed until a read refills "
                      "them): %s", failure.message, evicted, why);
  }
  bc_error_state_clear(&failure);
  return rc;
}

int bc__store_publish(const bc__store *s, const bc__publish_req *q,
                      bc__victims *victims, bool *regenerated) {
  bc__store_txn *t;
  int rc = s->ops->begin(s->impl, true, &t);
  if (rc != 0) return rc;
  pub_state st = {0};
  size_t before = victims->n;
  rc = publish_checks(s, t, q, &st);
  if (rc == 0) rc = publish_limit(s, t, q, &st);
  if (rc == 0) rc = publish_evict(s, t, q, &st, victims);
  size_t evicted = victims->n - before;
  if (rc != 0) return keep_evictions(s, t, &st, evicted > 0, evicted, rc);
  st.clock++; /* the new shard is the most recently used */
  rc = publish_install(s, t, q, &st, true);
  /* Its failure keeps the evictions and the bumps applied above. */
  if (rc != 0) return keep_evictions(s, t, &st, true, evicted, rc);
  rc = s->ops->commit(t);
  if (rc != 0) s->ops->uninstall(s->impl, q->shard, q->records);
  if (rc == 0) *regenerated = st.have_sum;
  return rc;
}

int bc__store_check(const bc__store *s, const bc__publish_req *q) {
  bc__store_txn *t;
  int rc = s->ops->begin(s->impl, false, &t);
  if (rc != 0) return rc;
  pub_state st = {0};
  rc = publish_checks(s, t, q, &st);
  if (rc == 0) rc = publish_limit(s, t, q, &st);
  s->ops->abort(t);
  return rc;
}

/* ---- group commit ---------------------------------------------------------------- */

/* Fails shard i of a batch with the thread's error rc. */
static void batch_fail(bc_error_state *errs, bool *ok, size_t i, int rc) {
  bc_error_state_clear(&errs[i]);
  bc_error_save(&errs[i], rc);
  ok[i] = false;
}

/* The batch's `total` bytes do not fit under the limit even with nothing
 * left to evict (others' reservations, or a limit lowered since the
 * batch's claims reserved their room): BC_EAGAIN, with the numbers. */
static int batch_no_room(const bc__store *s, const pub_state *st, uint64_t total) {
  return bc__error(BC_EAGAIN, "%s: no room for %llu bytes of shards being "
                   "published: %llu bytes of shards present and nothing left "
                   "to evict under the disk limit %llu", s->root,
                   (unsigned long long)total, (unsigned long long)st->bytes,
                   (unsigned long long)st->limit);
}

int bc__store_publish_batch(const bc__store *s, const bc__publish_req *q,
                            size_t n, uint64_t headroom, bc__victims *victims,
                            bc_error_state *errs, bool *regenerated) {
  const bc__store_ops *o = s->ops;
  bool *ok = calloc(n ? n : 1, 2 * sizeof *ok), *installed = ok + n;
  bc__store_txn *t = NULL, *all = NULL;
  pub_state st = {0};
  size_t before = victims->n, passed = 0;
  uint64_t total = 0;
  int rc = ok ? 0 : bc__error(BC_ENOMEM, "out of memory");
  for (size_t i = 0; i < n; i++) {
    bc_error_state_clear(&errs[i]);
    regenerated[i] = false;
  }
  if (rc == 0) rc = o->begin(s->impl, true, &t);
  if (rc != 0) goto fail_all;
  /* 1. The checks of each shard against the state before the batch (they
   * run again below, against the state each earlier shard left). */
  for (size_t i = 0; i < n; i++) {
    pub_state one = {0};
    int irc = publish_checks(s, t, &q[i], &one);
    if (irc == 0) irc = publish_limit(s, t, &q[i], &one);
    if (irc != 0) {
      batch_fail(errs, ok, i, irc);
      if (q[i].installed) o->uninstall(s->impl, q[i].shard, q[i].records);
      continue;
    }
    ok[i] = true;
    passed++;
    total += q[i].size;
    if (passed == 1) st = one;
  }
  if (passed == 0) {
    o->abort(t);
    free(ok);
    return 0;
  }
  /* 2. Room for all of them (their reservations, made at their claims,
   * usually hold it already; not when the limit was lowered since). */
  bool no_room = false;
  rc = make_room(s, t, q, n, &st, total, victims, &no_room);
  if (rc == 0 && no_room) rc = batch_no_room(s, &st, total);
  /* 2b. Evicting ahead: room for the next claim too, best effort (nothing
   * evictable left is no failure), and only under a limit that holds one
   * shard more than the smallest workable one. */
  if (rc == 0 && headroom > 0 && st.limit / (q[0].need + 1) >= headroom) {
    bool full = false;
    rc = make_room(s, t, q, n, &st, total + headroom, victims, &full);
  }
  if (rc == BC_EAGAIN) {
    /* No room now: nothing is published, the files installed stay for
     * the caller to try again (or take out); the evictions are kept. */
    rc = keep_evictions(s, t, &st, victims->n > before, victims->n - before, rc);
    for (size_t i = 0; i < n; i++)
      if (ok[i]) batch_fail(errs, ok, i, rc);
    free(ok);
    return rc;
  }
  if (rc != 0) {
    rc = keep_evictions(s, t, &st, victims->n > before, victims->n - before, rc);
    t = NULL;
    goto fail_all;
  }
  /* 3. Every shard that passes is installed (renamed, no directory
   * fsync) in a transaction of its own inside `all`, so that one failing
   * is rolled back alone. */
  rc = o->nest(t, &all);
  if (rc != 0) {
    rc = keep_evictions(s, t, &st, true, victims->n - before, rc);
    t = NULL;
    goto fail_all;
  }
  size_t ninstalled = 0;
  const pub_state before_installs = st; /* what a failure below commits */
  for (size_t i = 0; i < n; i++) {
    if (!ok[i]) continue;
    pub_state one = {0};
    bool have_sum = false;
    int irc = publish_checks(s, all, &q[i], &one); /* after the earlier ones */
    have_sum = one.have_sum;
    one.clock = ++st.clock; /* the newest, in batch order */
    one.bytes = st.bytes;
    if (irc == 0) irc = publish_install(s, all, &q[i], &one, false);
    if (irc != 0) {
      batch_fail(errs, ok, i, irc);
      if (q[i].installed) o->uninstall(s->impl, q[i].shard, q[i].records);
      continue;
    }
    st.bytes += q[i].size;
    installed[i] = true;
    regenerated[i] = have_sum;
    ninstalled += !q[i].installed;
  }
  /* 4. The new names made durable, once per directory, before the state
   * says PRESENT (done already for files installed before the batch). */
  rc = ninstalled > 0 ? o->sync_dirs(s->impl) : 0;
  if (rc == 0) {
    rc = o->commit(all); /* into t */
    all = NULL;
  }
  if (rc != 0) {
    if (all != NULL) o->abort(all);
    for (size_t i = 0; i < n; i++)
      if (installed[i]) o->uninstall(s->impl, q[i].shard, q[i].records);
    memset(installed, 0, n * sizeof *installed);
    st = before_installs; /* the evictions and bumps only */
    rc = keep_evictions(s, t, &st, true, victims->n - before, rc);
    t = NULL;
    goto fail_all;
  }
  rc = o->commit(t);
  t = NULL;
  if (rc != 0) {
    for (size_t i = 0; i < n; i++)
      if (installed[i]) o->uninstall(s->impl, q[i].shard, q[i].records);
    goto fail_all;
  }
  free(ok);
  return 0;
fail_all:
  /* Every shard of the batch fails with rc (its message); files installed
   * before the batch are taken back out (those that failed alone were). */
  if (t != NULL) o->abort(t);
  for (size_t i = 0; i < n; i++) /* (again for some: nobody else puts a
                                     file under a name we hold the claim of) */
    if (q[i].installed) o->uninstall(s->impl, q[i].shard, q[i].records);
  for (size_t i = 0; i < n; i++) {
    bc_error_state_clear(&errs[i]);
    bc_error_save(&errs[i], rc);
    regenerated[i] = false;
  }
  free(ok);
  return rc;
}
