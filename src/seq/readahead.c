/*
 * Read-ahead iteration: a window of slots, filled by worker threads in
 * stream order, drained in stream order by one consumer.
 *
 * Sequence numbers: `queued` counts indices taken from the stream (slot
 * queued % window), `claimed` counts slots handed to workers, `delivered`
 * counts records given to the consumer.  delivered <= claimed <= queued <=
 * delivered + window, so a slot is never reused before it was delivered.
 *
 * The stream is pulled only by the consumer, in bc_readahead_next (never
 * under a lock: it may call user code), as many indices as the window has
 * room for, then published with one lock and one wake-up.  Workers claim
 * several slots at a time and read without the lock.
 *
 * Readiness is a per-slot atomic flag, so the consumer takes the lock only
 * when it has to wait.  When it must, it waits for a slot a quarter window
 * ahead (`wake_at`), not the next one: it then sleeps once per batch instead
 * of once per record (a futex round trip per record cost more CPU than the
 * reads of small records).  No lost wake-up: the consumer publishes
 * `wake_at` and `waiting`, then re-checks that slot's flag while holding the
 * lock; a worker sets a slot's flag and then reads `waiting` and `wake_at`
 * (all sequentially consistent), and if the slot it finished is at or past
 * `wake_at` it broadcasts under the lock, which it can only take once the
 * consumer is inside pthread_cond_wait.
 *
 * Locks: it->lock guards the counters; it->serial is held around a read
 * from a leaf that is not thread-safe.  They are never held together, and
 * neither is held while the stream is pulled.  A stream failure is stored
 * as the end of the stream and surfaces once every record before it was
 * delivered.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "seq/internal.h"

typedef struct {
  uint64_t index;
  bc_buf data;
  int rc;           /* read result */
  atomic_int ready; /* the worker finished this slot */
  bc_error_state *err; /* the read's error (detail, errno, payload) when
                          rc != 0; NULL if it could not be saved */
} slot;

struct bc_readahead {
  bc_seq *seq;
  bc_index_stream_fn fn;
  void *payload;
  size_t window;
  slot *slots;
  uint64_t queued, claimed, delivered;
  bool stream_done;   /* the stream ended or failed */
  int stream_rc;      /* its failure, 0 for a clean end */
  bc_error_state *stream_err;
  bool finished;      /* everything (incl. a failure) was delivered */
  bool stopping;      /* workers must exit */
  atomic_int waiting; /* the consumer sleeps on `ready` */
  _Atomic uint64_t wake_at; /* ...until the slot of this sequence number */
  size_t batch;       /* slots a worker claims at once */
  pthread_mutex_t lock;
  pthread_cond_t work;  /* a slot was queued, or stopping */
  pthread_cond_t ready; /* a slot became ready */
  pthread_t *threads;
  int nthreads;
  /* Held around reads from leaves that are not thread-safe (foreign
   * sequences that must be called from one thread at a time). */
  pthread_mutex_t serial;
  /* bc_seq_iterate's own stream */
  uint64_t next_index;
  bool range_mode; /* a read past the end (BC_ERANGE) ends the iteration */
};

/* A copy of this thread's error (NULL when out of memory), which is
 * cleared: the copy holds the payload now. */
static bc_error_state *save_error(int code) {
  bc_error_state *e = malloc(sizeof *e);
  if (e != NULL) {
    *e = (bc_error_state)BC_ERROR_STATE_INIT;
    bc_error_save(e, code);
  }
  bc_error_clear();
  return e;
}

/* Restores a saved error and frees it; `code` when none was saved. */
static int restore_error(bc_error_state **e, int code) {
  if (*e == NULL) return bc_set_errmsg(code, "%s", bc_strerror(code));
  int rc = bc_error_restore(*e);
  bc_error_state_clear(*e);
  free(*e);
  *e = NULL;
  return rc;
}

/* Reads one slot, sequence number `seq` (the slot is the worker's until it
 * is marked ready). */
static void fill_slot(bc_readahead *it, slot *s, uint64_t seq) {
  bc_seq *leaf;
  uint64_t li;
  s->rc = bc__seq_resolve_leaf(it->seq, s->index, &leaf, &li);
  if (s->rc == 0 && (leaf->flags & BC_SEQ_F_THREAD_SAFE)) {
    s->rc = leaf->ops->get(leaf, li, &s->data);
  } else if (s->rc == 0) {
    pthread_mutex_lock(&it->serial);
    s->rc = leaf->ops->get(leaf, li, &s->data);
    pthread_mutex_unlock(&it->serial);
  }
  if (s->rc != 0) s->err = save_error(s->rc);
  atomic_store(&s->ready, 1);
  if (atomic_load(&it->waiting) && seq >= atomic_load(&it->wake_at)) {
    pthread_mutex_lock(&it->lock);
    pthread_cond_broadcast(&it->ready);
    pthread_mutex_unlock(&it->lock);
  }
}

static void *worker_main(void *arg) {
  bc_readahead *it = arg;
  pthread_mutex_lock(&it->lock);
  for (;;) {
    while (!it->stopping && it->claimed == it->queued)
      pthread_cond_wait(&it->work, &it->lock);
    if (it->stopping) break;
    uint64_t first = it->claimed, avail = it->queued - it->claimed;
    uint64_t take = avail < it->batch ? avail : it->batch;
    it->claimed += take;
    pthread_mutex_unlock(&it->lock);
    for (uint64_t k = 0; k < take; k++)
      fill_slot(it, &it->slots[(first + k) % it->window], first + k);
    pthread_mutex_lock(&it->lock);
  }
  pthread_mutex_unlock(&it->lock);
  return NULL;
}

int bc_readahead_open(bc_readahead **out, bc_seq *seq, bc_index_stream_fn fn,
                      void *payload, const bc_readahead_options *opts) {
  static const bc_readahead_options defaults = BC_READAHEAD_OPTIONS_INIT;
  if (out == NULL || seq == NULL || fn == NULL)
    return bc__error(BC_EINVAL, "bc_readahead_open: NULL argument");
  if (opts == NULL) opts = &defaults;
  if (opts->window < 1 || opts->threads < 1 || opts->threads > 256)
    return bc__error(BC_EINVAL,
                     "read-ahead: window %zu and threads %d (need window >= 1, "
                     "1 <= threads <= 256)", opts->window, opts->threads);
  bc_readahead *it = calloc(1, sizeof *it);
  if (it == NULL) return bc__error(BC_ENOMEM, "out of memory");
  it->slots = calloc(opts->window, sizeof *it->slots);
  it->threads = calloc((size_t)opts->threads, sizeof *it->threads);
  if (it->slots == NULL || it->threads == NULL) {
    free(it->slots);
    free(it->threads);
    free(it);
    return bc__error(BC_ENOMEM, "out of memory for a window of %zu", opts->window);
  }
  it->seq = bc_seq_ref(seq);
  it->fn = fn;
  it->payload = payload;
  it->window = opts->window;
  /* Small claims keep the head of the window moving; larger ones save
   * lock traffic.  A quarter of each thread's share balances the two. */
  it->batch = opts->window / (4 * (size_t)opts->threads);
  if (it->batch < 1) it->batch = 1;
  if (it->batch > 32) it->batch = 32;
  atomic_init(&it->waiting, 0);
  atomic_init(&it->wake_at, 0);
  pthread_mutex_init(&it->lock, NULL);
  pthread_mutex_init(&it->serial, NULL);
  pthread_cond_init(&it->work, NULL);
  pthread_cond_init(&it->ready, NULL);
  for (int t = 0; t < opts->threads; t++) {
    if (pthread_create(&it->threads[t], NULL, worker_main, it) != 0) {
      int rc = bc__error(BC_ENOMEM, "read-ahead: cannot start worker thread %d", t);
      bc_readahead_close(it);
      return rc;
    }
    it->nthreads++;
  }
  *out = it;
  return 0;
}

/* Pulls indices from the stream until the window is full or it ends, then
 * hands them to the workers at once. */
static void top_up(bc_readahead *it) {
  uint64_t added = 0;
  while (!it->stream_done && it->queued + added - it->delivered < it->window) {
    uint64_t index;
    int rc = it->fn(it->payload, &index); /* user code: no lock held */
    if (rc <= 0) {
      it->stream_done = true;
      it->stream_rc = rc < 0 ? rc : 0;
      if (rc < 0) it->stream_err = save_error(rc);
      break;
    }
    /* Slots past `queued` are not visible to workers until published. */
    slot *s = &it->slots[(it->queued + added) % it->window];
    s->index = index;
    s->rc = 0;
    atomic_store_explicit(&s->ready, 0, memory_order_relaxed);
    added++;
  }
  if (added == 0) return;
  pthread_mutex_lock(&it->lock);
  it->queued += added;
  pthread_cond_broadcast(&it->work);
  pthread_mutex_unlock(&it->lock);
}

bool bc_readahead_ready(bc_readahead *it) {
  if (it->finished) return true;
  /* Nothing queued: the next call asks the stream and waits for a read. */
  if (it->delivered == it->queued) return false;
  return atomic_load(&it->slots[it->delivered % it->window].ready);
}

int bc_readahead_next(bc_readahead *it, bc_buf *out, uint64_t *index) {
  if (it->finished) return 0;
  /* Refill once a quarter of the window is free: fewer, larger hand-offs. */
  if (it->queued - it->delivered <= it->window - (it->window + 3) / 4 ||
      it->queued == it->delivered)
    top_up(it);
  if (it->delivered == it->queued) { /* stream over and all delivered */
    it->finished = true;
    if (it->stream_rc != 0) return restore_error(&it->stream_err, it->stream_rc);
    return 0;
  }
  slot *s = &it->slots[it->delivered % it->window];
  if (!atomic_load(&s->ready)) {
    /* Sleep until a quarter window is ready (or what is queued, if less),
     * then until the head itself is (it usually is by then). */
    uint64_t ahead = it->window / 4 ? it->window / 4 : 1;
    uint64_t target = it->delivered + ahead < it->queued
                          ? it->delivered + ahead - 1 : it->queued - 1;
    int rc = 0;
    pthread_mutex_lock(&it->lock);
    for (uint64_t want = target; rc == 0;) {
      slot *w = &it->slots[want % it->window];
      atomic_store(&it->wake_at, want);
      atomic_store(&it->waiting, 1);
      while (!atomic_load(&w->ready) && rc == 0)
        rc = bc__cond_wait(&it->ready, &it->lock);
      if (atomic_load(&s->ready)) break;
      want = it->delivered; /* the head is late: wait for it alone */
    }
    atomic_store(&it->waiting, 0);
    pthread_mutex_unlock(&it->lock);
    /* Interrupted before the head was ready: nothing is delivered, and
     * the next call waits for it again. */
    if (rc != 0 && !atomic_load(&s->ready)) return rc;
  }
  it->delivered++;
  if (s->rc == BC_ERANGE && it->range_mode) {
    /* Iterating a sequence whose end was not known: this is the end. */
    it->finished = true;
    restore_error(&s->err, s->rc);
    bc_error_clear();
    return 0;
  }
  if (s->rc != 0) {
    it->finished = true;
    return restore_error(&s->err, s->rc);
  }
  /* Hand over the slot's buffer; the slot keeps the caller's old one. */
  bc_buf tmp = *out;
  *out = s->data;
  s->data = tmp;
  if (index) *index = s->index;
  return 1;
}

void bc_readahead_close(bc_readahead *it) {
  if (it == NULL) return;
  pthread_mutex_lock(&it->lock);
  it->stopping = true;
  pthread_cond_broadcast(&it->work);
  pthread_mutex_unlock(&it->lock);
  /* Workers finish the read they are in, then exit. */
  for (int t = 0; t < it->nthreads; t++) pthread_join(it->threads[t], NULL);
  for (size_t k = 0; k < it->window; k++) {
    bc_buf_release(&it->slots[k].data);
    if (it->slots[k].err != NULL) bc_error_state_clear(it->slots[k].err);
    free(it->slots[k].err);
  }
  free(it->slots);
  free(it->threads);
  if (it->stream_err != NULL) bc_error_state_clear(it->stream_err);
  free(it->stream_err);
  pthread_mutex_destroy(&it->lock);
  pthread_mutex_destroy(&it->serial);
  pthread_cond_destroy(&it->work);
  pthread_cond_destroy(&it->ready);
  bc_seq_unref(it->seq);
  free(it);
}

/* ---- iterating a range ----------------------------------------------------- */

/* The stream of bc_seq_iterate: start, start + 1, ..., up to the known end.
 * Past a lower bound it keeps going without settling the length (which
 * would drain a filling cache before the first record): the read of the
 * first missing index (BC_ERANGE) ends the iteration (range_mode). */
static int range_stream(void *payload, uint64_t *index) {
  bc_readahead *it = payload;
  bc_len len;
  int rc = it->seq->ops->length(it->seq, false, &len);
  if (rc != 0) return rc;
  if (len.kind == BC_LEN_EXACT && it->next_index >= len.value) return 0;
  *index = it->next_index++;
  return 1;
}

int bc_seq_iterate(bc_readahead **out, bc_seq *seq, uint64_t start,
                   const bc_readahead_options *opts) {
  bc_readahead *it;
  /* The stream's payload is the iterator itself, set right after open;
   * the stream is first pulled in bc_readahead_next. */
  int rc = bc_readahead_open(&it, seq, range_stream, NULL, opts);
  if (rc != 0) return rc;
  it->payload = it;
  it->next_index = start;
  it->range_mode = true;
  *out = it;
  return 0;
}
