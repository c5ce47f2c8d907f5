/*
 * src/cache/fills.h - the fill registry: the shards this process is filling
 * in a root, shared by every cache object open on it in the process (so
 * two caches on one root never take each other's claims for stale ones,
 * and a thread waits for another thread's fill instead of filling twice).
 * One per LMDB environment (state.c); fill.c adds, waits for and
 * abandons fills.
 *
 * Lock: `lock` is taken alone, or after none of a cache's own locks (see
 * internal.h); never across a source call, LMDB or file I/O.
 */
#ifndef BC_CACHE_FILLS_H
#define BC_CACHE_FILLS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "bagcache/error.h" /* bc_error_state */

/* (included by internal.h after the shard record) */

struct bc_cache;

/* A shard this process is filling, so its other threads wait for it.
 * `token` is unique in the process: the claim in the shared state and the
 * scratch file name carry it, so a fill that was abandoned
 * (bc_cache_abandon_fills) and comes back later touches neither a newer
 * fill's claim nor its file. */
typedef struct bc__filling {
  uint64_t shard;
  struct bc_cache *cache; /* the cache object whose thread fills it */
  uint64_t token;
  atomic_bool abandoned;  /* set by bc_cache_abandon_fills: the filler stops
                             at its next record and publishes nothing */
  bool done;
  /* Publish-behind: the scratch file is complete and checked, and queued
   * for its publish (publisher.h); until `done`, this process reads the
   * shard from `scratch` (rec: its size and records). */
  bool readable;
  char *scratch;
  bc__shard_rec rec;
  uint64_t room; /* bytes its claim reserved (UINT64_MAX: no limit) */
  bool kept;     /* a shard a pass kept on its way to another (fill.c):
                    counted in shards_kept, not fills (set by its filler
                    before its publish is queued) */
  bc_error_state err; /* the fill's result for its waiters: err.code 0, or
                         the failure (message, errno, payload) */
  int refs; /* the filler + waiters (registry lock) */
  struct bc__filling *next;
} bc__filling;

typedef struct {
  pthread_mutex_t lock;
  pthread_cond_t cond; /* a fill finished */
  bc__filling *list;
} bc__fill_registry;

#endif /* BC_CACHE_FILLS_H */
