/*
 * append_ring.c - the bounded record queue of a write-behind appender
 * (append_ring.h says how it is laid out and synchronised).
 *
 * Lock order: r->lock is a leaf (nothing else is taken while it is held).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "common/internal.h"
#include "cache/append_ring.h"

/* The header of a skip to the start of the next lap. */
#define RING_WRAP UINT64_MAX

static size_t pad8(size_t n) { return (n + 7) & ~(size_t)7; }

int bc__ring_init(bc__ring *r, size_t cap) {
  memset(r, 0, sizeof *r);
  cap = cap < 64 ? 64 : pad8(cap);
  if (cap == 0 || (r->buf = malloc(cap)) == NULL)
    return bc__error(BC_ENOMEM, "out of memory (a write-behind queue of %zu bytes)", cap);
  r->cap = cap;
  r->wake_bytes = cap / 8;
  pthread_mutex_init(&r->lock, NULL);
  pthread_cond_init(&r->more, NULL);
  pthread_cond_init(&r->room, NULL);
  atomic_init(&r->wpos, 0);
  atomic_init(&r->rpos, 0);
  r->rseen = r->checked = 0;
  atomic_init(&r->consumer_waiting, false);
  atomic_init(&r->producer_waiting, false);
  return 0;
}

void bc__ring_destroy(bc__ring *r) {
  pthread_cond_destroy(&r->room);
  pthread_cond_destroy(&r->more);
  pthread_mutex_destroy(&r->lock);
  free(r->buf);
  r->buf = NULL;
}

/* Waits (lock not held) until `total` bytes from wpos on are free: 0, or
 * BC_ECANCELED.  Wakes the consumer first: it may be asleep below its
 * threshold. */
static int wait_room(bc__ring *r, uint64_t w, size_t total) {
  int rc = 0;
  pthread_mutex_lock(&r->lock);
  atomic_store(&r->producer_waiting, true);
  pthread_cond_signal(&r->more);
  while (rc == 0 && r->cap - (w - (r->rseen = atomic_load(&r->rpos))) < total)
    rc = bc__cond_wait(&r->room, &r->lock);
  atomic_store(&r->producer_waiting, false);
  pthread_mutex_unlock(&r->lock);
  return rc;
}

/* Waits (wait) until the ring is empty: 0, BC_EAGAIN or BC_ECANCELED. */
static int wait_empty(bc__ring *r, uint64_t w, bool wait) {
  if ((r->rseen = atomic_load_explicit(&r->rpos, memory_order_acquire)) == w) return 0;
  if (!wait) return BC_EAGAIN;
  return wait_room(r, w, r->cap); /* all of it */
}

/* The ring is empty: both positions move to the start of the next lap
 * (of a ring of `cap` bytes in `buf`, when buf is not NULL), where the
 * next record fits whatever its size (up to cap).  The consumer touches
 * buf only after a take (under the lock).  Returns the new wpos. */
static uint64_t restart(bc__ring *r, unsigned char *buf, size_t cap) {
  uint64_t w = atomic_load_explicit(&r->wpos, memory_order_relaxed);
  pthread_mutex_lock(&r->lock);
  if (buf != NULL) {
    free(r->buf);
    r->buf = buf;
    r->cap = cap;
    r->wake_bytes = cap / 8;
  }
  w = (w / r->cap + 1) * r->cap;
  atomic_store(&r->rpos, w);
  atomic_store(&r->wpos, w);
  r->rseen = r->checked = w;
  pthread_mutex_unlock(&r->lock);
  return w;
}

int bc__ring_put(bc__ring *r, const void *data, size_t size, bool wait, bool wake) {
  if (size > SIZE_MAX - 16)
    return bc__error(BC_ENOMEM, "out of memory (a record of %zu bytes)", size);
  size_t need = 8 + pad8(size);
  int rc;
  /* buf, cap and wpos change only on this thread. */
  uint64_t w = atomic_load_explicit(&r->wpos, memory_order_relaxed);
  size_t off = (size_t)(w % r->cap), tail = r->cap - off;
  size_t skip = tail < need ? tail : 0;
  if (skip + need > r->cap) {
    /* Fits only at the start of an empty ring, or of a longer one. */
    if ((rc = wait_empty(r, w, wait)) != 0) return rc;
    unsigned char *buf = NULL;
    if (need > r->cap && (buf = malloc(need)) == NULL)
      return bc__error(BC_ENOMEM, "out of memory (a record of %zu bytes)", size);
    w = restart(r, buf, need);
    off = skip = 0;
  } else if (r->cap - (w - r->rseen) < skip + need &&
             r->cap - (w - (r->rseen = atomic_load_explicit(
                                &r->rpos, memory_order_acquire))) < skip + need) {
    if (!wait) return BC_EAGAIN;
    if ((rc = wait_room(r, w, skip + need)) != 0) return rc;
  }
  if (skip != 0) { /* (tail >= 8: all sizes are multiples of 8) */
    uint64_t h = RING_WRAP;
    memcpy(r->buf + off, &h, 8);
    w += skip;
    off = 0;
  }
  uint64_t h = size;
  memcpy(r->buf + off, &h, 8);
  if (size > 0) memcpy(r->buf + off + 8, data, size);
  w += need;
  atomic_store_explicit(&r->wpos, w, memory_order_release);
  if (wake || w - r->checked >= r->wake_bytes) {
    r->checked = w;
    atomic_thread_fence(memory_order_seq_cst); /* wpos, then the flag */
    if (atomic_load(&r->consumer_waiting)) {
      pthread_mutex_lock(&r->lock);
      pthread_cond_signal(&r->more);
      pthread_mutex_unlock(&r->lock);
    }
  }
  return 0;
}

void bc__ring_close(bc__ring *r) {
  pthread_mutex_lock(&r->lock);
  r->closed = true;
  pthread_cond_signal(&r->more);
  pthread_mutex_unlock(&r->lock);
}

int bc__ring_wait_finished(bc__ring *r, bool interruptible) {
  int rc = 0;
  pthread_mutex_lock(&r->lock);
  while (rc == 0 && !r->finished) {
    if (interruptible) rc = bc__cond_wait(&r->room, &r->lock);
    else pthread_cond_wait(&r->room, &r->lock);
  }
  pthread_mutex_unlock(&r->lock);
  return rc;
}

bool bc__ring_take(bc__ring *r, bc__ring_batch *b) {
  bool got = false;
  pthread_mutex_lock(&r->lock);
  for (;;) {
    /* (rpos is ours, but the producer may restart an empty ring while we
     * sleep) */
    uint64_t from = atomic_load_explicit(&r->rpos, memory_order_relaxed);
    uint64_t w = atomic_load_explicit(&r->wpos, memory_order_acquire);
    if (w == from && !r->closed) { /* about to sleep: say so, look again */
      atomic_store(&r->consumer_waiting, true);
      w = atomic_load(&r->wpos);
      if (w == from) pthread_cond_wait(&r->more, &r->lock);
      atomic_store_explicit(&r->consumer_waiting, false, memory_order_relaxed);
      continue;
    }
    if (w != from) {
      *b = (bc__ring_batch){r->buf, r->cap, from, w};
      got = true;
    }
    break;
  }
  pthread_mutex_unlock(&r->lock);
  return got;
}

void bc__ring_next(const bc__ring_batch *b, uint64_t *pos, const void **data,
                   size_t *size) {
  for (;;) {
    size_t off = (size_t)(*pos % b->cap);
    uint64_t h;
    memcpy(&h, b->buf + off, 8);
    if (h == RING_WRAP) { /* (a record follows in the batch) */
      *pos += b->cap - off;
      continue;
    }
    *data = b->buf + off + 8;
    *size = (size_t)h;
    *pos += 8 + pad8((size_t)h);
    return;
  }
}

void bc__ring_release(bc__ring *r, uint64_t pos) {
  atomic_store_explicit(&r->rpos, pos, memory_order_release);
  atomic_thread_fence(memory_order_seq_cst); /* rpos, then the flag */
  if (atomic_load(&r->producer_waiting)) {
    pthread_mutex_lock(&r->lock);
    pthread_cond_signal(&r->room);
    pthread_mutex_unlock(&r->lock);
  }
}

void bc__ring_finish(bc__ring *r) {
  pthread_mutex_lock(&r->lock);
  r->finished = true;
  pthread_cond_broadcast(&r->room);
  pthread_mutex_unlock(&r->lock);
}
