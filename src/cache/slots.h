/*
 * src/cache/slots.h - this process's per-shard slots: where an open shard
 * reader lives, found and used by a hit without a lock and without an
 * atomic read-modify-write.
 *
 * A slot is created the first time this process opens its shard and stays
 * until the cache is destroyed (type-stable memory: a pointer to a slot
 * never dangles, whatever happens to the reader in it).  It is found
 * through a radix table that only grows; readers walk it with acquire
 * loads, writers extend it under the readers' lock (readers.h).
 *
 * The slot's `word` holds its state, changed only by atomic
 * read-modify-writes, never by a hit:
 *
 *   bits  0..31  pins: holders counted in the word (a slow-path open, or a
 *                thread whose hazard is busy), plus threads that
 *                incremented speculatively and are about to back out
 *   bit  32      OPEN: the bag may be taken (by a pin or a hazard)
 *   bit  33      HASBAG: `bag` is an open bc_bag somebody must close
 *   bits 34..63  generation, +1 at every install (no ABA on close)
 *
 * A hit uses a hazard instead of a pin: each thread has a record per cache
 * (bc__treg) whose `hazard` names the slot it is reading.  Entering stores
 * the hazard, then loads the word: OPEN seen -> the bag is the thread's
 * until it clears the hazard.  A closer clears OPEN, then makes sure every
 * thread's hazard store is visible (an asymmetric barrier: membarrier(2)
 * when the kernel has it, so the hit pays only a compiler barrier; else a
 * full fence on both sides), then scans the hazards: a thread that entered
 * before OPEN was cleared is seen and the close is left to it (it retries
 * when it clears its hazard and finds OPEN clear); a thread that entered
 * after sees OPEN clear and backs out.
 *
 * Transitions:
 *   install (readers' lock held, HASBAG clear): store bag, then CAS the word
 *     to generation+1 | OPEN | HASBAG, keeping the pins (release);
 *   pin: fetch_add 1 (acquire); OPEN seen -> the bag is ours until unpin;
 *     OPEN not seen -> unpin at once;
 *   drop (readers' lock held): fetch_and ~OPEN; nobody takes the bag after;
 *   unpin / hazard exit: whoever finds pins 0, OPEN clear and HASBAG set
 *     tries to close;
 *   close: with no hazard naming the slot, CAS the exact word (HASBAG,
 *     pins 0, generation g) to HASBAG clear; the one winner closes the bag
 *     of generation g.  The bag is read before the CAS; a new bag is
 *     stored only after HASBAG is clear, with a new generation, so a stale
 *     close fails its CAS.
 * So a bag is closed exactly once, only after its last user is done, and a
 * thread using it never sees it closed.
 */
#ifndef BC_CACHE_SLOTS_H
#define BC_CACHE_SLOTS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bagcache/bag.h"

#define BC__SLOT_PINS ((uint64_t)0xffffffffu)
#define BC__SLOT_OPEN ((uint64_t)1 << 32)
#define BC__SLOT_HASBAG ((uint64_t)1 << 33)
#define BC__SLOT_GEN_SHIFT 34

typedef struct bc__slot {
  _Alignas(64) _Atomic uint64_t word; /* see above */
  _Atomic(bc_bag *) bag;              /* valid while HASBAG */
  _Atomic int64_t touched_ms;         /* last shared access-clock bump */
  atomic_bool referenced;             /* used since the trim hand passed */
  uint64_t shard;
  size_t open_index; /* index in the cache's open list, or SIZE_MAX (lock) */
  struct bc__slot *next_all; /* every slot, for teardown (lock) */
} bc__slot;

/* A thread's record in one cache: its hazard, its hit count and its clock
 * tick.  Only the owner writes it (the hazard is also cleared by fork in
 * the child); it lives until the cache is destroyed. */
typedef struct bc__treg {
  _Alignas(64) _Atomic(bc__slot *) hazard; /* the slot read without a pin */
  _Atomic uint64_t hits; /* reads served from open readers (owner writes) */
  unsigned countdown;    /* hits until the next clock read */
  int64_t ms;            /* the coarse time at the last clock read */
  pthread_t owner;
  struct bc__treg *next; /* the table's list (append at the head) */
} bc__treg;

/* The radix table: shard number -> slot, 8 bits a level.  A root is never
 * changed once published; growing publishes a new, taller root. */
typedef struct bc__slot_root {
  unsigned height;           /* levels; covers shards < 256^height */
  void *node;                /* bc__slot_node, or NULL when empty */
  struct bc__slot_root *old; /* the root it replaced (freed at teardown) */
} bc__slot_root;

typedef struct bc__slot_node {
  _Atomic(void *) child[256];
} bc__slot_node;

typedef struct bc__slot_table {
  _Atomic(bc__slot_root *) root;
  bc__slot *all;           /* every slot (writer's lock) */
  _Atomic(bc__treg *) regs; /* every thread record; read lock-free */
} bc__slot_table;

/* Chooses the barrier pair (membarrier or fences) once per process and
 * registers with membarrier(2); again in a forked child. */
void bc__slots_init(void);
void bc__slots_after_fork_child(bc__slot_table *t);

/* true: hits pay a compiler barrier and closers call membarrier(2). */
extern atomic_bool bc__slots_asymmetric;

static inline void bc__slots_light_fence(void) {
  if (atomic_load_explicit(&bc__slots_asymmetric, memory_order_relaxed))
    atomic_signal_fence(memory_order_seq_cst);
  else
    atomic_thread_fence(memory_order_seq_cst);
}

/* Finds shard's slot, or NULL if this process never opened the shard.
 * Lock-free; safe against a concurrent bc__slots_get. */
static inline bc__slot *bc__slots_find(bc__slot_table *t, uint64_t shard) {
  bc__slot_root *root = atomic_load_explicit(&t->root, memory_order_acquire);
  if (root == NULL || (root->height < 8 && shard >> (8 * root->height) != 0))
    return NULL;
  void *p = root->node;
  for (unsigned level = root->height; p != NULL && level > 0; level--) {
    bc__slot_node *n = p;
    p = atomic_load_explicit(&n->child[(shard >> (8 * (level - 1))) & 255],
                             memory_order_acquire);
  }
  return p;
}

/* Finds or creates shard's slot.  The caller holds the cache lock (one
 * writer at a time).  NULL: out of memory. */
bc__slot *bc__slots_get(bc__slot_table *t, uint64_t shard);
/* Finds or creates the calling thread's record.  The caller holds the
 * cache lock.  NULL: out of memory. */
bc__treg *bc__treg_get(bc__slot_table *t);
/* Frees the table, every slot and record; the bags must be closed
 * already.  No other thread may use the table. */
void bc__slots_free(bc__slot_table *t);

/* Closes the slot's bag if nobody can use it any more (OPEN clear, no
 * pins, no hazard, HASBAG set); safe to call at any time, from any
 * thread, without the cache lock. */
void bc__slot_try_close(bc__slot_table *t, bc__slot *s);

static inline bool bc__slot_closable(uint64_t v) {
  return (v & (BC__SLOT_PINS | BC__SLOT_OPEN | BC__SLOT_HASBAG)) ==
         BC__SLOT_HASBAG;
}

/* Takes the slot's bag through the thread's hazard (which must be NULL);
 * true: the bag is valid until bc__slot_exit. */
static inline bool bc__slot_enter(bc__treg *g, bc__slot *s) {
  if (atomic_load_explicit(&bc__slots_asymmetric, memory_order_relaxed)) {
    atomic_store_explicit(&g->hazard, s, memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst); /* the closer's membarrier
                                                  orders it */
  } else {
    atomic_store_explicit(&g->hazard, s, memory_order_seq_cst);
  }
  if (atomic_load_explicit(&s->word, memory_order_seq_cst) & BC__SLOT_OPEN)
    return true;
  atomic_store_explicit(&g->hazard, NULL, memory_order_release);
  return false;
}

static inline void bc__slot_exit(bc__slot_table *t, bc__treg *g, bc__slot *s) {
  atomic_store_explicit(&g->hazard, NULL, memory_order_release);
  bc__slots_light_fence();
  if (bc__slot_closable(atomic_load_explicit(&s->word, memory_order_relaxed)))
    bc__slot_try_close(t, s);
}

/* Tries a pin; true: the slot's bag is valid until bc__slot_unpin. */
static inline bool bc__slot_pin(bc__slot *s) {
  uint64_t v = atomic_fetch_add_explicit(&s->word, 1, memory_order_acquire);
  return (v & BC__SLOT_OPEN) != 0;
}

static inline void bc__slot_unpin(bc__slot_table *t, bc__slot *s) {
  uint64_t v = atomic_fetch_sub_explicit(&s->word, 1, memory_order_release) - 1;
  if (bc__slot_closable(v)) bc__slot_try_close(t, s);
}

/* Installs an open bag with one pin for the caller.  The cache lock is
 * held.  false: the slot still holds an older bag in use (HASBAG set), so
 * nothing was installed. */
bool bc__slot_install(bc__slot *s, bc_bag *bag);

/* Clears OPEN (the cache lock is held); the bag is closed by its last
 * user, or by the caller's bc__slot_try_close (after unlocking). */
static inline void bc__slot_drop(bc__slot *s) {
  atomic_fetch_and_explicit(&s->word, ~BC__SLOT_OPEN, memory_order_seq_cst);
}

static inline uint64_t bc__slot_pins(bc__slot *s) {
  return atomic_load_explicit(&s->word, memory_order_relaxed) & BC__SLOT_PINS;
}

#endif
