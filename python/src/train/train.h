/* train/train.h - what the files of python/src/train share. */
#ifndef BCPY_TRAIN_TRAIN_H
#define BCPY_TRAIN_TRAIN_H

#include "core/bcpy.h"

/* Raises the exception of a failed gather of raw records into rows (rc and
 * this thread's error): BC_EINVAL is a record that is not one row, a
 * ValueError saying variable-size records need a collate function; any
 * other code as bcpy_raise.  Returns NULL. */
PyObject *bcpy_train_raise(int rc);

/* Adds _Loader (train/loader.c) to the module. */
int bcpy_train_loader_init(PyObject *mod);

#endif
