/* train/pool.h - _BatchPool, batch memory reused once no array holds it
 * (train/pool.c). */
#ifndef BCPY_TRAIN_POOL_H
#define BCPY_TRAIN_POOL_H

#include "core/bcpy.h"

/* Adds _BatchPool to the module; called by bcpy_train_init. */
int bcpy_train_pool_init(PyObject *mod);

/* True when obj is a _BatchPool (GIL held). */
bool bcpy_is_batch_pool(PyObject *obj);

/* Memory for a batch of `size` bytes: from the free list of `pool` (a
 * _BatchPool the caller keeps alive) when size is its nbytes and the list
 * has a block, else malloc'd (64-byte aligned); NULL when out of memory.
 * No GIL needed. */
void *bcpy_pool_take_mem(PyObject *pool, size_t size);

/* Gives back memory from bcpy_pool_take_mem that no block owns: to the free
 * list (size nbytes, room left) or to free().  No GIL needed; NULL is
 * ignored. */
void bcpy_pool_give_mem(PyObject *pool, void *mem, size_t size);

/* A _BatchBlock owning `mem` (size bytes, from bcpy_pool_take_mem): it
 * returns to the pool when the block dies.  GIL held.  NULL with an
 * exception (the memory is given back then). */
PyObject *bcpy_pool_wrap(PyObject *pool, void *mem, size_t size);

#endif
