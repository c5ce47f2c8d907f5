/*
 * src/cache/prefetch.h - the prefetch queue and the fill workers that
 * serve it (prefetch.c), with the bookkeeping of drains the workers join
 * (fill.c's bc__drain).
 *
 * Lock: `lock` guards every field but drain_next (atomic); taken alone
 * (internal.h states the order of all the cache's locks), never across a
 * source call, LMDB or file I/O.  `cond`: the queue changed, a drain was
 * requested, a worker exited, or fills were abandoned.
 */
#ifndef BC_CACHE_PREFETCH_H
#define BC_CACHE_PREFETCH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct bc_cache;

/* A worker holds a reference to the cache while it runs, so a worker
 * abandoned while stuck in the source (bc_cache_abandon_fills) finds the
 * cache still there when the source returns. */
typedef struct bc__worker {
  struct bc_cache *cache;
  pthread_t thread;
  bool exited; /* the thread is about to return (queue lock) */
} bc__worker;

/* The default prefetch policy's memory: the last shards opened. */
#define BC__RECENT_OPENS 4

typedef struct bc__prefetch_queue {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  uint64_t queue[64]; /* shards to prefetch, oldest first */
  size_t qlen;
  /* The last shards opened, as shard + 1 (0: none), to tell a sequential
   * read from random ones. */
  uint64_t recent_opens[BC__RECENT_OPENS];
  size_t recent_next;
  bool drain_requested, stopping;
  struct bc__worker *workers;
  int nworkers; /* workers to stop (0 once stopped) */
  int nstarted; /* entries of workers[] (threads ever started) */
  /* Drains. */
  uint64_t failed_shards[32]; /* shards a drain worker failed to fill */
  size_t nfailed;             /* more than 32: drain_incomplete */
  bool drain_incomplete;
  _Atomic uint64_t drain_next; /* next shard a drain participant takes */
  int drainers;                /* threads in a drain now */
} bc__prefetch_queue;

#endif /* BC_CACHE_PREFETCH_H */
