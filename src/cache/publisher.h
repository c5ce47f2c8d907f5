/*
 * src/cache/publisher.h - publish-behind: a cache's background publisher.
 *
 * A fill whose scratch file is complete (records written, writer closed
 * without an fsync, the determinism checks passed against the state)
 * makes the shard readable to this process from that file at once (its
 * fill record in the root's registry, fills.h, becomes `readable`) and
 * queues it here.  The publisher thread takes everything queued at once
 * (a batch): fsyncs each file's data and sidecar, then publishes the whole
 * batch in ONE write transaction with one fsync of sums/ and one of
 * shards/ (bc__store_publish_batch: group commit).  The claim stays held
 * until then, so other processes wait for the shard as for a synchronous
 * fill.  A shard whose publish fails loses its claim and its scratch file;
 * the first such error is kept and returned by the next call that can
 * return it (bc__publisher_take_error: a read that misses, a drain,
 * bc_cache_sync; close reports it in a notice).
 *
 * The thread starts with the first queued shard and runs until the cache
 * closes (bc__publisher_stop) or, in a child after fork(), never: the
 * child forgets the parent's queue (the parent publishes it; the child
 * waits for those claims like any other process's).
 *
 * Lock: `lock` is taken alone (never with another lock of the cache or the
 * fill registry's held, never across LMDB, file I/O or a source call).
 */
#ifndef BC_CACHE_PUBLISHER_H
#define BC_CACHE_PUBLISHER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "bagcache/error.h"

struct bc_cache;
struct bc__filling;

/* The most shards queued at once; a fill that finds the queue full
 * publishes synchronously. */
#define BC__PUBLISH_QUEUE_MAX 256

/* How long a publish waits for room under the disk limit held by claims
 * in progress (other processes' fills), in seconds, before its shard is
 * bypassed: served from its scratch file, not kept (doc/cache.md, "Room
 * under load"). */
#define BC__ROOM_WAIT_S 1.0

/* A shard waiting for its publish. */
typedef struct bc__pub_entry {
  struct bc__pub_entry *next;
  struct bc__filling *f; /* its fill record (a reference): f->scratch is
                            the file, f->rec its size and records */
  uint64_t checksum;
  uint64_t skipped;      /* records dropped on the way to it (counters) */
  bool ended;            /* the source ended after its records */
  char note[160];        /* for determinism errors (fill.c) */
} bc__pub_entry;

typedef struct {
  pthread_mutex_t lock;
  pthread_cond_t work; /* something queued, or stop */
  pthread_cond_t idle; /* a batch was published */
  bc__pub_entry *head, *tail;
  size_t queued;   /* entries in the queue */
  size_t inflight; /* entries of the batch being published */
  bool running;    /* the thread exists (this process started it) */
  bool stop;       /* the thread ends once the queue is empty */
  atomic_bool closed; /* nothing more is queued (close); read unlocked */
  atomic_bool abandon; /* what is queued fails (BC_ECLOSED) instead */
  pthread_t thread;
  atomic_bool failed; /* err holds a failure not returned yet (written
                         under lock, read without it first) */
  bc_error_state err;
  /* Counters (bc_cache_stats). */
  atomic_uint_fast64_t queued_total, batches, largest, failures;
} bc__publisher;

void bc__publisher_init(bc__publisher *p);
void bc__publisher_destroy(bc__publisher *p);

/* Queues entry e (its fill record already readable); starts the thread
 * if needed.  BC_EAGAIN when the queue is full or closed (or the thread
 * cannot start): the caller publishes synchronously and frees e. */
int bc__publisher_enqueue(struct bc_cache *c, bc__pub_entry *e);

/* The failure of a publish not reported yet (its code, the thread's
 * message set to it), once; 0 when none. */
int bc__publisher_take_error(struct bc_cache *c);

/* Waits until nothing is queued or being published.  With `report`,
 * returns bc__publisher_take_error after it.  The wait polls the
 * interrupt handler (its code is returned, the queue left as it is). */
int bc__publisher_wait(struct bc_cache *c, bool report);

/* bc_cache_close: publishes what is queued (an interrupt of the wait
 * abandons the rest: claims released, scratch files deleted), stops the
 * thread and reports a failure not returned yet in a notice.  Later fills
 * (through views that outlive the handle) publish synchronously. */
void bc__publisher_stop(struct bc_cache *c);

/* fork(): the parent's lock is held across it (cache.c's handlers); the
 * child forgets the queue and the thread. */
void bc__publisher_after_fork_child(bc__publisher *p);

/* Opens scratch file `scratch` of a readable fill as a shard reader, with
 * its scratch sidecar attached when the root has them. */
int bc__cache_open_scratch(struct bc_cache *c, const char *scratch,
                           struct bc_bag **out);

#endif /* BC_CACHE_PUBLISHER_H */
