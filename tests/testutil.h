/*
 * tests/testutil.h - helpers shared by the cmocka test programs: temporary
 * directories, whole-file I/O, the golden-vector data directory and its
 * manifest, record rules, a seeded random generator and an in-memory record
 * model.
 *
 * Every helper that can fail calls cmocka's fail_msg(), so it may only be
 * used from inside a running cmocka test (or a setup/teardown function).
 * Include this header after <cmocka.h>'s prerequisites: it includes them
 * itself in the order cmocka needs.
 */
#ifndef BC_TESTS_TESTUTIL_H
#define BC_TESTS_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <jansson.h>

#include "bagcache.h"

/* Sanitizer detection (clang spells it __has_feature, gcc a macro). */
#if defined(__SANITIZE_ADDRESS__)
#define TU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TU_ASAN 1
#endif
#endif

#if defined(__SANITIZE_THREAD__)
#define TU_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TU_TSAN 1
#endif
#endif

/* ---- assertions on bagcache return codes ------------------------------ */

/* Fails the test unless `expr` returns `want`; the failure names both codes
 * and the library's detail message. */
#define TU_RC(expr, want)                                                   \
  do {                                                                      \
    int tu_rc_ = (expr);                                                    \
    int tu_want_ = (want);                                                  \
    if (tu_rc_ != tu_want_)                                                 \
      fail_msg("%s returned %s (%s), expected %s", #expr,                   \
               bc_error_name(tu_rc_), bc_errmsg(), bc_error_name(tu_want_)); \
  } while (0)

#define TU_OK(expr) TU_RC(expr, BC_OK)

/* Fails unless buf holds exactly data[0..size). */
#define TU_STR_(x) #x
#define TU_STR(x) TU_STR_(x)
#define TU_BUF_EQ(buf, want, want_size)                        \
  tu_assert_bytes((buf)->data, (buf)->size, (want), (want_size), \
                  __FILE__ ":" TU_STR(__LINE__))

/* Fails unless got[0..got_size) == want[0..want_size); `what` names the
 * comparison in the failure message. */
void tu_assert_bytes(const void *got, size_t got_size, const void *want,
                     size_t want_size, const char *what);

/* ---- paths and files ---------------------------------------------------- */

/* A fresh directory under $TMPDIR (or /tmp), malloc'd path. */
char *tu_tempdir(void);

/* Removes a directory tree (no error when it is already gone). */
void tu_rmtree(const char *dir);

/* "dir/name", malloc'd. */
char *tu_join(const char *dir, const char *name);

/* printf into a malloc'd string. */
char *tu_format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Reads a whole file into a malloc'd buffer (NULL-terminated one past the
 * end, not counted in *size).  Fails the test when it cannot. */
unsigned char *tu_read_file(const char *path, size_t *size);

/* Like tu_read_file but returns NULL when the file does not exist. */
unsigned char *tu_read_file_opt(const char *path, size_t *size);

/* Writes data[0..size) to path (created or truncated). */
void tu_write_file(const char *path, const void *data, size_t size);

bool tu_exists(const char *path);

/* Number of directory entries of `dir` (not . or ..) whose names start with
 * `prefix` ("" counts everything). */
size_t tu_count_entries(const char *dir, const char *prefix);

/* Removes every entry of `dir` whose name starts with `prefix`; returns how
 * many it removed. */
size_t tu_remove_entries(const char *dir, const char *prefix);

/* The golden-vector directory: $BC_SRCDIR/tests/data/bagz (malloc'd). */
char *tu_data_dir(void);

/* tu_data_dir()/name (malloc'd). */
char *tu_data_path(const char *name);

/* ---- golden-vector manifest -------------------------------------------- */

/* Loads tests/data/bagz/manifest.json (caller json_decref()s it). */
json_t *tu_manifest_load(void);

/* The bytes of one manifest record object ({len, sha256, hex|text|rule}),
 * checked against its len and sha256; malloc'd (never NULL). */
unsigned char *tu_manifest_record(const json_t *record, size_t *size);

/* The record rules of the testdata README (malloc'd, never NULL).
 * Unknown names fail the test. */
unsigned char *tu_rule_bytes(const char *rule, size_t *size);

/* Decodes lowercase or uppercase hex; malloc'd (never NULL). */
unsigned char *tu_hex_decode(const char *hex, size_t *size);

/* SHA-256 of data as 64 lowercase hex digits into out[65]. */
void tu_sha256_hex(const void *data, size_t size, char out[65]);

/* ---- a seeded generator ------------------------------------------------- */

typedef struct tu_rng {
  uint64_t state;
} tu_rng;

void tu_rng_seed(tu_rng *r, uint64_t seed);
uint64_t tu_rng_next(tu_rng *r);
/* Uniform in [0, n) (n > 0). */
uint64_t tu_rng_below(tu_rng *r, uint64_t n);
void tu_rng_fill(tu_rng *r, void *dst, size_t size);

/* ---- the in-memory model: an array of records -------------------------- */

typedef struct tu_records {
  size_t count;
  unsigned char **data; /* data[i] malloc'd (non-NULL even when empty) */
  size_t *size;
} tu_records;

/* Appends a copy of data[0..size). */
void tu_records_add(tu_records *recs, const void *data, size_t size);
void tu_records_free(tu_records *recs);

/* Appends the records (global order) of manifest vector `id` to `out`. */
void tu_manifest_vector_records(const char *id, tu_records *out);

/* Writes every record of `recs` to one file with bc_writer and closes it. */
void tu_write_bag(const char *path, const bc_writer_options *opts,
                  const tu_records *recs);

/* Checks that `bag` holds exactly `recs`: its length, every record by
 * bc_bag_get, and all of them at once by bc_bag_get_many. */
void tu_check_bag(const bc_bag *bag, const tu_records *recs);

/* Checks every record by bc_bag_get only. */
void tu_check_bag_get(const bc_bag *bag, const tu_records *recs);

/* Opens `spec`, checks it holds exactly `want` (tu_check_bag) and that
 * bc_bag_verify passes, and closes it. */
void tu_check_file(const char *spec, const bc_reader_options *ro,
                   const tu_records *want);

/* ---- the bytes a writer must produce ------------------------------------ */

/* The records section and the limits of a file holding `recs`: records
 * stored as given (level == NULL) or as one zstd frame each, made the way
 * bagz makes them (ZSTD_createCDict(dict, dict_size, *level) once, then
 * ZSTD_compress_usingCDict per non-empty record). */
typedef struct tu_image {
  unsigned char *records;
  size_t records_size;
  unsigned char *limits;
  size_t limits_size;
} tu_image;

tu_image tu_image_build(const tu_records *recs, const int *level,
                        const void *dict, size_t dict_size);
void tu_image_free(tu_image *im);

/* Fails unless the file(s) at `path` (and limits.NAME for SEPARATE) hold
 * exactly the image. */
void tu_image_compare(const char *path, bc_limits_placement place,
                      const tu_image *im);

/* The "s<shard>-r<index>" style records used by the layout tests. */
void tu_records_labelled(tu_records *recs, const char *label, size_t count);

/* A process-wide notice counter: installs a handler that counts notices
 * (thread-safe) instead of printing them. */
void tu_capture_notices(void);
unsigned tu_notice_count(void);

#endif /* BC_TESTS_TESTUTIL_H */
