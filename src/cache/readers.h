/*
 * src/cache/readers.h - this process's open shard readers of a cache: the
 * slot table (slots.h; hits take no lock) and the open list trimmed by a
 * CLOCK hand (readers.c).
 *
 * Lock: `lock` guards the open list, the hand, installs into slots and
 * the growth of the slot table; taken alone (internal.h states the order
 * of all the cache's locks), never across LMDB or file I/O.
 */
#ifndef BC_CACHE_READERS_H
#define BC_CACHE_READERS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/slots.h"

/* A shard reader in use: held by the thread's hazard (reg set), pinned in
 * its slot (slot set, reg NULL), or opened for one read and closed by
 * bc__reader_release (both NULL). */
typedef struct bc__reader {
  bc_bag *bag;
  uint64_t start; /* the shard's first record */
  bc__slot *slot;
  bc__treg *reg;
} bc__reader;

typedef struct bc__reader_list {
  pthread_mutex_t lock;
  bc__slot_table slots; /* lookups lock-free; growth under lock */
  bc__slot **open;      /* slots with OPEN set (their readers count
                           against max_open_shards) */
  size_t nopen, open_cap, hand; /* hand: the CLOCK trim position */
} bc__reader_list;

#endif /* BC_CACHE_READERS_H */
