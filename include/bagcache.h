/*
 * bagcache.h - the umbrella header: include this one.
 *
 * bagcache turns a slow sequential iterator into a persistent random-access
 * sequence stored as Bagz shards.  The modules:
 *   bagcache/error.h   error codes, messages, notices
 *   bagcache/bag.h     the Bagz format: writer and sharded reader
 *   bagcache/index.h   record-bytes -> positions lookup
 *   bagcache/seq.h     the sequence interface, views, read-ahead iteration
 *   bagcache/cache.h   the cache engine: a slow source as a random-access
 *                      sequence on disk
 */
#ifndef BAGCACHE_H
#define BAGCACHE_H

#define BAGCACHE_VERSION_MAJOR 0
#define BAGCACHE_VERSION_MINOR 1
#define BAGCACHE_VERSION_PATCH 0

#include "bagcache/error.h"
#include "bagcache/bag.h"
#include "bagcache/index.h"
#include "bagcache/seq.h"
#include "bagcache/cache.h"
#include "bagcache/archive.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version string ("0.1.0"), which may differ from the
 * header's when linked against another build. */
const char *bc_version(void);

/* Parses a byte size as people write it: a number (decimals allowed:
 * "1.5"), optional spaces, an optional unit, case-insensitive: none or b
 * (bytes), k, kb, kib (1024), m, mb, mib (1024^2), g, gb, gib, t, tb, tib,
 * p, pb, pib.  Every unit is a power of 1024, whichever spelling ("kb" is
 * KiB).  Surrounding spaces are ignored; a fraction of a byte is rounded
 * down.  0 and *out, or BC_EINVAL (not a size, or more than 2^64 - 1
 * bytes) with *out unchanged.  The CLI's sizes and Python's size strings
 * are this function's. */
int bc_parse_size(const char *text, uint64_t *out);

#ifdef __cplusplus
}
#endif
#endif /* BAGCACHE_H */
