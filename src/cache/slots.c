/*
 * The per-shard slot table, the threads' records and the slot state
 * machine (slots.h explains the word, the hazards and the transitions).
 */
#include "config.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cache/slots.h"
#include "common/internal.h"

/* ThreadSanitizer does not see the ordering membarrier(2) gives, so its
 * builds use the fences (which it models as seq_cst atomics) instead. */
#if defined(__SANITIZE_THREAD__)
#define BC__NO_MEMBARRIER 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define BC__NO_MEMBARRIER 1
#endif
#endif

atomic_bool bc__slots_asymmetric;

static int membarrier(int cmd) {
#if defined(SYS_membarrier) && !defined(BC__NO_MEMBARRIER)
  return (int)syscall(SYS_membarrier, cmd, 0, 0);
#else
  (void)cmd;
  errno = ENOSYS;
  return -1;
#endif
}

/* Registers for private expedited membarrier(2); the hits' side of the
 * barrier pair is chosen from the result. */
static void choose_barriers(void) {
  int cmds = membarrier(MEMBARRIER_CMD_QUERY);
  bool ok = cmds >= 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
            membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
  atomic_store(&bc__slots_asymmetric, ok);
}

static pthread_once_t barriers_once = PTHREAD_ONCE_INIT;

void bc__slots_init(void) { pthread_once(&barriers_once, choose_barriers); }

void bc__slots_after_fork_child(bc__slot_table *t) {
  /* The child has one thread: the other threads' hazards name slots no
   * thread is reading any more. */
  pthread_t self = pthread_self();
  for (bc__treg *g = atomic_load(&t->regs); g != NULL; g = g->next)
    if (!pthread_equal(g->owner, self)) atomic_store(&g->hazard, NULL);
  if (atomic_load(&bc__slots_asymmetric) &&
      membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) != 0)
    atomic_store(&bc__slots_asymmetric, false); /* no thread is in a hit */
}

/* Makes every thread's earlier hazard store visible to the caller (the
 * closer's half of the barrier pair).  false: it could not (the bag must
 * then stay open). */
static bool heavy_fence(void) {
  if (!atomic_load_explicit(&bc__slots_asymmetric, memory_order_relaxed)) {
    atomic_thread_fence(memory_order_seq_cst);
    return true;
  }
  if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return true;
  static atomic_flag told = ATOMIC_FLAG_INIT;
  if (!atomic_flag_test_and_set(&told))
    bc__notice("membarrier(2) failed (%s): shard readers dropped from now on "
               "stay open until the cache is closed", strerror(errno));
  return false;
}

static bc__slot_node *node_new(void) {
  bc__slot_node *n = malloc(sizeof *n);
  if (n != NULL)
    for (size_t i = 0; i < 256; i++) atomic_init(&n->child[i], NULL);
  return n;
}

/* Publishes a root one level taller whose first child is the old root's
 * node (shards below 256^height keep their paths' lower digits). */
static bool grow(bc__slot_table *t, bc__slot_root *old) {
  bc__slot_root *r = malloc(sizeof *r);
  bc__slot_node *n = old->node ? node_new() : NULL;
  if (r == NULL || (old->node && n == NULL)) {
    free(r);
    free(n);
    return false;
  }
  if (n) atomic_store_explicit(&n->child[0], old->node, memory_order_relaxed);
  *r = (bc__slot_root){old->height + 1, n, old};
  atomic_store_explicit(&t->root, r, memory_order_release);
  return true;
}

bc__slot *bc__slots_get(bc__slot_table *t, uint64_t shard) {
  bc__slot_root *root = atomic_load_explicit(&t->root, memory_order_relaxed);
  if (root == NULL) {
    if ((root = calloc(1, sizeof *root)) == NULL) return NULL;
    root->height = 1;
    atomic_store_explicit(&t->root, root, memory_order_release);
  }
  while (root->height < 8 && shard >> (8 * root->height) != 0) {
    if (!grow(t, root)) return NULL;
    root = atomic_load_explicit(&t->root, memory_order_relaxed);
  }
  if (root->node == NULL) {
    /* An empty root gets its node through a new root (roots never change
     * once published). */
    bc__slot_root *r = malloc(sizeof *r);
    bc__slot_node *n = node_new();
    if (r == NULL || n == NULL) {
      free(r);
      free(n);
      return NULL;
    }
    *r = (bc__slot_root){root->height, n, root};
    atomic_store_explicit(&t->root, r, memory_order_release);
    root = r;
  }
  bc__slot_node *n = root->node;
  for (unsigned level = root->height; level > 1; level--) {
    _Atomic(void *) *link = &n->child[(shard >> (8 * (level - 1))) & 255];
    bc__slot_node *child = atomic_load_explicit(link, memory_order_relaxed);
    if (child == NULL) {
      if ((child = node_new()) == NULL) return NULL;
      atomic_store_explicit(link, child, memory_order_release);
    }
    n = child;
  }
  _Atomic(void *) *link = &n->child[shard & 255];
  bc__slot *s = atomic_load_explicit(link, memory_order_relaxed);
  if (s != NULL) return s;
  if ((s = aligned_alloc(64, sizeof *s)) == NULL) return NULL;
  memset(s, 0, sizeof *s);
  atomic_init(&s->word, 0);
  atomic_init(&s->bag, NULL);
  atomic_init(&s->touched_ms, 0);
  atomic_init(&s->referenced, false);
  s->shard = shard;
  s->open_index = SIZE_MAX;
  s->next_all = t->all;
  t->all = s;
  atomic_store_explicit(link, s, memory_order_release);
  return s;
}

static void free_nodes(bc__slot_node *n, unsigned level) {
  if (n == NULL) return;
  if (level > 1)
    for (size_t i = 0; i < 256; i++)
      free_nodes(atomic_load_explicit(&n->child[i], memory_order_relaxed),
                 level - 1);
  free(n);
}

bc__treg *bc__treg_get(bc__slot_table *t) {
  pthread_t self = pthread_self();
  for (bc__treg *g = atomic_load_explicit(&t->regs, memory_order_relaxed);
       g != NULL; g = g->next)
    if (pthread_equal(g->owner, self)) return g; /* a thread id is reused
                                                    only after its thread
                                                    ended */
  bc__treg *g = aligned_alloc(64, sizeof *g);
  if (g == NULL) return NULL;
  memset(g, 0, sizeof *g);
  atomic_init(&g->hazard, NULL);
  atomic_init(&g->hits, 0);
  g->owner = self;
  g->next = atomic_load_explicit(&t->regs, memory_order_relaxed);
  atomic_store_explicit(&t->regs, g, memory_order_release);
  return g;
}

void bc__slots_free(bc__slot_table *t) {
  bc__slot_root *root = atomic_load_explicit(&t->root, memory_order_relaxed);
  if (root != NULL) free_nodes(root->node, root->height);
  while (root != NULL) {
    bc__slot_root *old = root->old;
    free(root);
    root = old;
  }
  atomic_store_explicit(&t->root, NULL, memory_order_relaxed);
  while (t->all != NULL) {
    bc__slot *next = t->all->next_all;
    free(t->all);
    t->all = next;
  }
  for (bc__treg *g = atomic_load(&t->regs), *next; g != NULL; g = next) {
    next = g->next;
    free(g);
  }
  atomic_store(&t->regs, NULL);
}

bool bc__slot_install(bc__slot *s, bc_bag *bag) {
  uint64_t v = atomic_load_explicit(&s->word, memory_order_acquire);
  if (v & BC__SLOT_HASBAG) return false;
  /* Nobody reads `bag` before seeing HASBAG or OPEN, which the CAS below
   * publishes (release); only the lock holder installs. */
  atomic_store_explicit(&s->bag, bag, memory_order_relaxed);
  for (;;) {
    uint64_t gen = (v >> BC__SLOT_GEN_SHIFT) + 1;
    uint64_t pins = (v & BC__SLOT_PINS) + 1; /* our own pin */
    uint64_t nv = (gen << BC__SLOT_GEN_SHIFT) | BC__SLOT_OPEN |
                  BC__SLOT_HASBAG | pins;
    if (atomic_compare_exchange_weak_explicit(&s->word, &v, nv,
                                              memory_order_acq_rel,
                                              memory_order_acquire))
      return true;
    /* Only speculative pins come and go meanwhile; HASBAG stays clear
     * (only an install sets it, and we hold the lock). */
  }
}

void bc__slot_try_close(bc__slot_table *t, bc__slot *s) {
  uint64_t v = atomic_load_explicit(&s->word, memory_order_acquire);
  if (!bc__slot_closable(v)) return;
  /* OPEN is clear: whoever enters from now on backs out.  After the fence,
   * a thread that entered earlier and is still reading shows its hazard;
   * it retries this when it leaves. */
  if (!heavy_fence()) return;
  for (bc__treg *g = atomic_load_explicit(&t->regs, memory_order_acquire);
       g != NULL; g = g->next)
    if (atomic_load_explicit(&g->hazard, memory_order_seq_cst) == s) return;
  /* HASBAG is set with generation g in v: `bag` is g's bag until HASBAG is
   * cleared, and the CAS fails if anything changed meanwhile. */
  bc_bag *bag = atomic_load_explicit(&s->bag, memory_order_relaxed);
  if (atomic_compare_exchange_strong_explicit(&s->word, &v,
                                              v & ~BC__SLOT_HASBAG,
                                              memory_order_acq_rel,
                                              memory_order_relaxed))
    bc_bag_close(bag);
}
