/* train/order.h - the sampler's order in C (train/order.c): the steps of
 * bagcache.train.Sampler (its _plan) and each rank's indices of a step (its
 * _indices), so that C worker threads compute exactly the indices the
 * Python sampler does, with no GIL.  Plain C: nothing here touches Python. */
#ifndef BCPY_TRAIN_ORDER_H
#define BCPY_TRAIN_ORDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <bagcache.h>

/* The sampler's fixed parameters (Sampler's attributes of the same names;
 * seed already reduced modulo 2**64). */
typedef struct bcpy_order {
  uint64_t length, batch_size, world_size, rank;
  uint64_t seed;
  int mode; /* 0 SEQUENTIAL, 1 IID, 2 EPOCH */
  bool drop_last;
  bool finite; /* num_epochs given */
  uint64_t num_epochs;
} bcpy_order;

/* One step: positions start .. start + take - 1 (of epoch `epoch` in
 * EPOCH mode, of the endless stream otherwise), and the state after it. */
typedef struct bcpy_step {
  uint64_t start, take, epoch;
  uint64_t epoch_after, consumed_after;
} bcpy_step;

/* Sampler._plan: the step at state (epoch, consumed) into *out; 1 when
 * there is one, 0 at the end of a finite order, or a negative BC_E* code
 * (BC_ERANGE) when a position would not fit in 64 bits. */
int bcpy_order_plan(const bcpy_order *o, uint64_t epoch, uint64_t consumed,
                    bcpy_step *out);

/* The number of this rank's indices in a step (Sampler._indices' count). */
size_t bcpy_order_count(const bcpy_order *o, const bcpy_step *s);

/* An index-only shuffle of range(n) for one EPOCH seed, kept between steps
 * of the same epoch.  Zero-initialised; bcpy_order_cache_free releases it. */
typedef struct bcpy_order_cache {
  bc_seq *leaf, *shuffled;
  uint64_t n, seed;
} bcpy_order_cache;
void bcpy_order_cache_free(bcpy_order_cache *c);

/* Sampler._indices: this rank's bcpy_order_count(o, s) indices of step s
 * into out.  0 or a negative BC_E* code (with the thread's message). */
int bcpy_order_indices(const bcpy_order *o, const bcpy_step *s, bcpy_order_cache *c,
                       int64_t *out);

/* Sampler.epoch_seed (mod 2**64). */
uint64_t bcpy_epoch_seed(uint64_t seed, uint64_t epoch);

/* out[k] = a uniform draw from [0, n) (n > 0) at stream position
 * start + k * stride (bagcache.train's IID stream). */
void bcpy_iid_indices(uint64_t n, uint64_t seed, uint64_t start, uint64_t stride,
                      size_t count, int64_t *out);

/* out[k] = element start + k * stride of shuffle(range(n), seed), every one
 * of them inside the epoch (checked by the caller); with a cache (or NULL). */
int bcpy_epoch_indices(uint64_t n, uint64_t seed, uint64_t start, uint64_t stride,
                       size_t count, bcpy_order_cache *c, int64_t *out);

#endif
