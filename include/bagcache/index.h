/*
 * bagcache/index.h - look records up by their bytes.
 *
 * An index maps record contents to positions: bc_index_first() gives the
 * first position holding a record, bc_index_all() every position (ascending).
 * It is built by reading every record once on the worker pool and keeping
 * only 64-bit hashes and position arrays: records are not copied into
 * memory.  A lookup hashes the key, then reads candidate records back from
 * the bag to compare bytes, so hash collisions never give a wrong answer.
 *
 * Ownership: the index borrows the bag, which must stay open while the index
 * is used.  Thread safety: immutable after build; lookups from any number of
 * threads at once are fine.
 */
#ifndef BAGCACHE_INDEX_H
#define BAGCACHE_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "bag.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bc_index bc_index;

/* Builds an index over the positions 0..count-1 of a view of `bag`:
 * position p holds bag record positions[p], or record p when `positions` is
 * NULL (then `count` must be bc_bag_len(bag)).  `positions` is copied.
 * Errors: BC_ERANGE (a position >= len), BC_EINVAL (positions NULL and
 * count != bc_bag_len), BC_ENOMEM, any read error of the bag. */
int bc_index_build(bc_index **out, const bc_bag *bag, const uint64_t *positions,
                   uint64_t count);

/* Number of distinct records. */
uint64_t bc_index_distinct(const bc_index *index);

/* First position whose record equals key[0..size).  BC_ENOTFOUND when none;
 * read errors of the bag otherwise. */
int bc_index_first(const bc_index *index, const void *key, size_t size,
                   uint64_t *position);

/* Every position whose record equals the key, ascending: *positions points
 * into the index (valid while it lives), *count >= 1.  BC_ENOTFOUND when none. */
int bc_index_all(const bc_index *index, const void *key, size_t size,
                 const uint64_t **positions, uint64_t *count);

/* Releases the index.  NULL is fine. */
void bc_index_free(bc_index *index);

#ifdef __cplusplus
}
#endif
#endif /* BAGCACHE_INDEX_H */
