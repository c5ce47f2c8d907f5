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

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version string ("0.1.0"), which may differ from the
 * header's when linked against another build. */
const char *bc_version(void);

#ifdef __cplusplus
}
#endif
#endif /* BAGCACHE_H */
