/*
 * tests/cache/util.h - helpers shared by the cache engine's test programs:
 * temporary roots, looking at shards/ and scratch/ directly, checking a
 * cache against the model, capturing notices, and a watchdog so that a
 * deadlock fails a test instead of hanging the suite.
 *
 * cu_tmp_dir, cu_path, cu_check_*, cu_write_text and cu_shard_sizes fail
 * the running cmocka test on their own (fail_msg), so they may only run
 * inside a test.  The others return values and are safe in forked children
 * and worker threads as well.
 */
#ifndef BC_TESTS_CACHE_UTIL_H
#define BC_TESTS_CACHE_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "bagcache.h"
#include "source.h"

/* These tests check the synchronous protocol step by step (a read that
 * misses returns with its shard published: the state, shards/ and the
 * counters are as the model says right after it), so their options start
 * with publish_behind off.  The tests of publish-behind
 * (test_cache_publisher.c) turn it on: its default. */
#undef BC_CACHE_OPTIONS_INIT
#define BC_CACHE_OPTIONS_INIT                                               \
  {BC_CACHE_OPTIONS_VERSION, 0, 0, 0, 0, 0, BC_COMPRESSION_AUTO, 0, NULL, \
   NULL, 0, false, NULL, -1, 0, false, 0, false, -1, NULL}

/* Fails the test unless expr returns want, naming both codes and the
 * library's message. */
#define CU_RC(expr, want)                                                  \
  do {                                                                     \
    int cu_rc_ = (expr), cu_want_ = (want);                                \
    if (cu_rc_ != cu_want_)                                                \
      fail_msg("%s returned %s (%s), expected %s", #expr,                  \
               bc_error_name(cu_rc_), bc_errmsg(), bc_error_name(cu_want_)); \
  } while (0)
#define CU_OK(expr) CU_RC(expr, BC_OK)

/* Sanitizer builds run slower: loops scale their sizes down with this. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CU_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define CU_SANITIZED 1
#endif
#endif
#ifndef CU_SANITIZED
#define CU_SANITIZED 0
#endif

/* A fresh empty directory under $TMPDIR (else /dev/shm if writable, else
 * /tmp), malloc'd.  The cache
 * root is usually ROOT/c so that the test also covers creating it. */
char *cu_tmp_dir(void);
/* Removes a directory tree (best effort). */
void cu_rm_rf(const char *path);
/* dir/name, malloc'd. */
char *cu_path(const char *dir, const char *name);

/* Sum of the sizes of the regular files in `dir`, their count in *files
 * (if not NULL).  Entries that vanish while scanning are skipped. */
uint64_t cu_dir_bytes(const char *dir, size_t *files);
/* Number of entries of `dir` (not . and ..); 0 when it does not exist. */
size_t cu_dir_count(const char *dir);

/* Checks every file of ROOT/shards: its name is START.END.bag[z] (the
 * extension matching `zstd`), it opens as a bag of END-START records, it
 * passes bc_bag_verify, and every record equals the model.  Returns 0 when
 * all hold (also when shards/ does not exist yet), else -1 with a
 * description in why[256].  *count gets the number of shard files (if not
 * NULL). */
int cu_shards_valid(const char *root, bool fixed, bool zstd, size_t *count,
                    char *why);
/* The same as a cmocka check. */
void cu_check_shards(const char *root, bool fixed, bool zstd);

/* Number of this process's mappings and open descriptors of files under
 * `dir` that were deleted (disk space an unlinked shard still holds). */
size_t cu_deleted_held(const char *dir);
/* The same for every file under `dir`, deleted or not (open shards). */
size_t cu_mapped(const char *dir);

/* Reads record i from the cache and compares it with the model: 0 when it
 * matches, the error code when the get failed, 1 when the bytes differ. */
int cu_get_cmp(bc_cache *c, int64_t i, bool fixed, bc_buf *buf);
/* Reads every record [0, n) and fails the test on the first difference. */
void cu_check_all(bc_cache *c, uint64_t n, bool fixed);

/* Opens a cache on `root` over a test source following `cfg` (no source
 * when cfg is NULL). */
int cu_open(bc_cache **out, const char *root, const ts_config *cfg,
            ts_shared *shared, const bc_cache_options *opts);

/* Notices: a process-wide handler storing their count and the text of the
 * last one (thread-safe). */
void cu_notices_capture(void);
unsigned cu_notice_count(void);
/* True when some notice since the last reset contained `needle`. */
bool cu_notice_seen(const char *needle);
void cu_notices_reset(void);

/* Kills the process (failing the test run) if a test takes longer than
 * `seconds`; 0 disarms it. */
void cu_watchdog(unsigned seconds);

/* A small deterministic generator. */
uint64_t cu_rand(uint64_t *state);

/* Writes `text` to path (created or truncated). */
void cu_write_text(const char *path, const char *text);

/* Sizes of the shards a complete cache of `n` records with `records` per
 * shard ends up with (measured by filling a scratch cache): an array of
 * ceil(n/records) sizes, malloc'd. */
uint64_t *cu_shard_sizes(uint64_t n, uint64_t records, bool fixed);

#endif
