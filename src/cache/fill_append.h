/*
 * src/cache/fill_append.h - the parts of fill.c the appender (append.c)
 * uses, so that an appended shard goes through the same claim, publish,
 * determinism and limit rules as a filled one.  Each is a thin entry point
 * over fill.c's own function (see there for the details).
 */
#ifndef BC_CACHE_FILL_APPEND_H
#define BC_CACHE_FILL_APPEND_H

#include "internal.h"

/* Claims `shard` in the shared state for fill `token` (try_claim):
 * *claimed, or *rec is its state (PRESENT, or FILLING by a live owner). */
int bc__fill_claim(bc_cache *c, uint64_t shard, uint64_t token,
                   bc__shard_rec *rec, bool *claimed);
/* Drops the claim of fill `token` on `shard` (release_claim), keeping the
 * thread's error of the failure `code` being reported. */
void bc__fill_release_claim(bc_cache *c, uint64_t shard, uint64_t token,
                            int code);
/* Opens the writer of a fill of `shard` (claim `token`) on its scratch
 * file, in *path (malloc'd): the cache's compression, zstd frame
 * checksums, no fsync of scratch/.  Nothing is left behind on failure. */
int bc__fill_open_scratch(bc_cache *c, uint64_t shard, uint64_t token,
                          char **path, bc_writer **writer);
/* Publishes scratch file `scratch` (and its sidecar) as shard `shard`,
 * evicting under the disk limit and checking the checksum recorded at an
 * earlier publish (publish). */
int bc__fill_publish(bc_cache *c, uint64_t shard, uint64_t token,
                     const char *scratch, uint64_t records, uint64_t checksum,
                     bool ended, bool *regenerated);
/* Makes the length final at `end`, or BC_ENONDET when the shared state
 * knows more records (record_end, no claim dropped). */
int bc__fill_record_end(bc_cache *c, uint64_t end);

/* The root's in-process registry of fills (bc__fill_registry).  enter:
 * registers fill `token` of `shard` as *mine, unless another thread of
 * this process fills it: then *other gets a reference to that fill.
 * The appender ends *mine with bc__fill_done (internal.h): `rc` is saved
 * for the waiters (BC_EAGAIN makes them retry).  wait:
 * waits for `other` to be done and drops the reference: 0 (whatever the
 * fill's result: the caller looks at the shard again), or BC_ECANCELED
 * when this thread's interrupt hook stopped the wait.  put: drops a
 * reference without waiting. */
int bc__fill_enter(bc_cache *c, uint64_t shard, uint64_t token,
                   bc__filling **mine, bc__filling **other);
int bc__fill_wait(bc_cache *c, bc__filling *other);
void bc__fill_put(bc_cache *c, bc__filling *f);
/* The record checksums of .bag shards (format version 2): a record's CRC
 * appended to the table, the table written and fsynced next to the scratch
 * file (its sidecar path: bc__scratch_crc_path). */
int bc__fill_crc_append(bc_buf *crcs, const void *data, size_t size);
int bc__fill_write_sidecar(bc_cache *c, const char *scratch, bc_buf *crcs,
                           uint64_t records, uint64_t records_bytes);

#endif
