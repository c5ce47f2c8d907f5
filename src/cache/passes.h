/*
 * src/cache/passes.h - the pass pool: the source passes this process keeps
 * open for a cache, parked between fills or leased to one (fill.c leases
 * and returns them; doc/cache.md, "Parked passes").
 *
 * Lock: `lock` guards `busy` and, while a pass is not leased, its other
 * fields; it is taken alone (internal.h states the order of all the
 * cache's locks), never across a source call, LMDB or file I/O.
 */
#ifndef BC_CACHE_PASSES_H
#define BC_CACHE_PASSES_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A source pass owned by this process.  `busy` is read and written under
 * the pool's lock; while it is set the other fields belong to the filler
 * that leased the pass (read them under the lock only when !busy), except
 * `pos`, which introspection reads at any time (atomic). */
typedef struct {
  void *handle;
  _Atomic uint64_t pos; /* index of the next record it will produce */
  uint64_t opened_at; /* the record it was opened at (0, or open_at's) */
  bool open;     /* handle is a live pass */
  bool busy;     /* leased to a filler */
} bc__pass;

typedef struct bc__pass_pool {
  pthread_mutex_t lock;
  pthread_cond_t cond; /* a pass came back, or fills were abandoned */
  bc__pass *passes;
  size_t max_passes;  /* slots: passes kept open (parked or leased) */
  size_t max_running; /* passes leased at once (1: not thread-safe) */
  /* Bit s of `checked`: shard s's records came from a pass of this
   * process (filled, or crossed and matched with its recorded checksum),
   * so a pass crossing it need not compare them again; of `nokeep`: a
   * pass failed to keep it on its way, so later ones skip it (fill.c,
   * "the shards a pass crosses").  Both arrays have checked_words words. */
  uint64_t *checked, *nokeep;
  size_t checked_words;
} bc__pass_pool;

#endif /* BC_CACHE_PASSES_H */
