/* train/pool.h - _BatchPool, batch memory reused once no array holds it
 * (train/pool.c). */
#ifndef BCPY_TRAIN_POOL_H
#define BCPY_TRAIN_POOL_H

#include "core/bcpy.h"

/* Adds _BatchPool to the module; called by bcpy_train_init. */
int bcpy_train_pool_init(PyObject *mod);

#endif
