/*
 * tests/seq/model.h - leaves and a plain reference model for the sequence
 * tests.  A model is an array of element ids; element id e of leaf L reads
 * as the record "L<L>:<e>", so every record says where it came from.
 */
#ifndef BC_TEST_SEQ_MODEL_H
#define BC_TEST_SEQ_MODEL_H

#include <bagcache.h>
#include <stdint.h>

/* A reference list: what a sequence must read as, element by element. */
typedef struct {
  uint64_t *ids; /* leaf number << 40 | element index in that leaf */
  size_t len;
} model;

#define MODEL_ID(leaf, index) (((uint64_t)(leaf) << 40) | (uint64_t)(index))

void model_free(model *m);
model model_leaf(unsigned leaf, size_t len);
/* The record text of an id, into buf (>= 32 bytes). */
void model_record(uint64_t id, char *buf);

/* An array leaf of `len` elements numbered `leaf`.  `thread_safe` as in
 * bc_callback_seq_options.  Counts its get calls in *gets if not NULL. */
bc_seq *array_leaf(unsigned leaf, size_t len, int thread_safe);

/* A leaf that pretends to be a cache still filling: it reports at least
 * `known` elements (growing as elements are read) and its full `len` only
 * when asked to settle. */
bc_seq *growing_leaf(unsigned leaf, size_t len, size_t known);

/* Checks that seq reads exactly as m: length, every element by get (and by
 * negative index), get_many of a shuffled list with repeats, iteration, and
 * out-of-range errors on both sides.  Fails the cmocka test otherwise. */
void check_against_model(bc_seq *seq, const model *m, uint64_t seed);

#endif
