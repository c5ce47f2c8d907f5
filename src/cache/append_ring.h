/*
 * src/cache/append_ring.h - the queue of a write-behind appender (append.c):
 * one producer thread copies records into a bounded ring of bytes, one
 * consumer thread takes them out in order, in batches.
 *
 * Layout: positions count bytes since the start and only grow; a position's
 * byte is at buf[pos % cap].  A record is an 8-byte header (its size)
 * followed by its bytes, padded to a multiple of 8, never split at the end
 * of buf: where it does not fit, a header of RING_WRAP (or the end of buf)
 * sends the reader to the start of the next lap.  cap is a multiple of 8,
 * so a record's header always fits.
 *
 * Concurrency: [rpos, wpos) is the consumer's to read, the rest the
 * producer's to write.  wpos and rpos are atomics: the producer stores wpos
 * (release) after writing the bytes, the consumer loads it (acquire)
 * before reading them, and the other way round for rpos; so a record
 * costs the producer no lock, and no read of the consumer's cache line
 * while the room it last saw (rseen) suffices.  The two sides' fields are
 * on cache lines of their own.  Who sleeps says so in an atomic flag
 * before checking its condition under `lock`; who wakes stores its
 * position, then (after a sequentially consistent fence) checks the flag
 * and signals under `lock`: one of the two sees the other.  The producer
 * checks only where a wake-up is due (below), so a consumer may sleep on
 * records queued since the last check until the next one.  buf and cap
 * change only while the ring is empty (a record that fits no lap of it),
 * under `lock`, where the consumer reads them.
 *
 * The consumer is woken when wake_bytes were queued since the last check,
 * when the producer asks for it (the end of a shard, so that it is
 * published without waiting for more records), when the producer must
 * wait for room, and at the end.
 */
#ifndef BC_CACHE_APPEND_RING_H
#define BC_CACHE_APPEND_RING_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct bc__ring {
  /* the producer's */
  _Alignas(64) _Atomic uint64_t wpos; /* bytes written */
  uint64_t rseen;            /* rpos as last loaded (producer only) */
  uint64_t checked;          /* wpos at the last wake-up check (ditto) */
  atomic_bool producer_waiting;
  /* the consumer's */
  _Alignas(64) _Atomic uint64_t rpos; /* bytes released */
  atomic_bool consumer_waiting;
  /* cold */
  _Alignas(64) pthread_mutex_t lock;
  pthread_cond_t more;       /* the consumer waits: records, or the end */
  pthread_cond_t room;       /* the producer waits: room, or `finished` */
  unsigned char *buf;        /* (lock to change, and for the consumer) */
  size_t cap;                /* bytes of buf, a multiple of 8 (as buf) */
  size_t wake_bytes;         /* queued bytes that wake the consumer */
  bool closed;               /* no more records (lock) */
  bool finished;             /* the consumer is done (lock) */
} bc__ring;

/* A batch of records the consumer took: [from, to) of buf. */
typedef struct bc__ring_batch {
  const unsigned char *buf;
  size_t cap;
  uint64_t from, to;
} bc__ring_batch;

/* A ring of `cap` bytes (rounded up to a multiple of 8, at least 64). */
int bc__ring_init(bc__ring *r, size_t cap);
void bc__ring_destroy(bc__ring *r);

/* Producer.  Copies a record in (wake: wake the consumer for it).  When
 * there is no room: with `wait`, waits for it (polling the thread's
 * interrupt handler: BC_ECANCELED, nothing copied), else BC_EAGAIN (no
 * message: not a failure).  A record longer than the ring waits for the
 * ring to be empty and grows it (BC_ENOMEM). */
int bc__ring_put(bc__ring *r, const void *data, size_t size, bool wait, bool wake);
/* Producer: no more records; the consumer takes what is queued, then
 * bc__ring_take returns false. */
void bc__ring_close(bc__ring *r);
/* Producer, after close: waits until the consumer called bc__ring_finish.
 * 0, or BC_ECANCELED when the thread's interrupt handler fired (without
 * one: not interruptible). */
int bc__ring_wait_finished(bc__ring *r, bool interruptible);

/* Consumer.  Waits for records: true with a batch of them, false once the
 * ring is closed and empty. */
bool bc__ring_take(bc__ring *r, bc__ring_batch *b);
/* The record at *pos (< b->to) of a batch: its bytes (valid until pos is
 * released), *pos moved past it. */
void bc__ring_next(const bc__ring_batch *b, uint64_t *pos, const void **data,
                   size_t *size);
/* Gives the bytes before pos back to the producer.  Release the batch's
 * `to` before the next take, and touch its bytes no more after that. */
void bc__ring_release(bc__ring *r, uint64_t pos);
/* The consumer is done (it takes nothing more). */
void bc__ring_finish(bc__ring *r);

#endif
