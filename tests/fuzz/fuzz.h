/*
 * tests/fuzz/fuzz.h - shared declarations of the bag reader fuzzer.
 *
 * The fuzz target (fuzz_bag_reader.c) checks properties that must hold for
 * ANY input; a violated property calls fz_fail(), which prints what was
 * expected and aborts, so libFuzzer (or the replay driver) reports the input.
 */
#ifndef BC_TESTS_FUZZ_H
#define BC_TESTS_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bagcache.h"

/* The libFuzzer entry point (also called by replay.c). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Largest decompressed record the fuzzed readers accept: small, so frames
 * that expand enormously are rejected instead of exhausting memory. */
#define FZ_MAX_RECORD_SIZE ((uint64_t)1 << 20)

/* Records per bag that are read and compared one by one. */
#define FZ_MAX_CHECKED 8192

/* Prints "fuzz: FILE:LINE: message" to stderr and aborts. */
void fz_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));

#define FZ_CHECK(cond, ...)                                  \
  do {                                                       \
    if (!(cond)) fz_fail(__FILE__, __LINE__, __VA_ARGS__);   \
  } while (0)

/* A failing bagcache call must return one of the BC_E* codes and leave a
 * non-empty message.  `what` names the call in the failure report. */
void fz_check_failure(int rc, const char *what);

/* The per-process scratch directory (created on first use, removed at exit)
 * and paths of files inside it (static storage, one per `slot` 0..3). */
const char *fz_dir(void);
const char *fz_path(int slot, const char *name);

/* Replaces the file at `path` with data[0..size); aborts on I/O failure (a
 * harness problem, not a finding). */
void fz_write_file(const char *path, const void *data, size_t size);

/* Reads a whole file into a malloc'd buffer (*data may be NULL for size 0).
 * Returns false when it does not exist. */
bool fz_read_file(const char *path, unsigned char **data, size_t *size);

/* Removes `path` if it exists. */
void fz_unlink(const char *path);

/* Writer round trip of fuzz_writer.c: the input as records, split on a byte. */
void fz_writer_round_trip(const uint8_t *data, size_t size, bool separate,
                          bool zstd, int level,
                          const bc_reader_options *read_opts);

static inline uint64_t fz_load_u64le(const unsigned char *b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | b[i];
  return v;
}

static inline void fz_store_u64le(unsigned char *b, uint64_t v) {
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
}

#endif /* BC_TESTS_FUZZ_H */
