/*
 * tests/cache/source.h - a deterministic test source for the cache engine,
 * and the reference model it follows.
 *
 * Record i of the model is "rec-%08llu" followed by a padding of
 * (i * 37) % 61 bytes of a letter derived from i, except that every record
 * with i % 11 == 7 is empty.  Records therefore differ in length, a few are
 * empty, and every non-empty record names its own index.  With `fixed` the
 * padding is always 20 bytes and no record is empty, so every full shard of
 * a given length has the same size.
 *
 * The counters live in a shared anonymous mapping (MAP_SHARED), so the
 * counts made by forked children are visible to the parent.  All of them
 * are atomics and may be read at any time.
 */
#ifndef BC_TESTS_CACHE_SOURCE_H
#define BC_TESTS_CACHE_SOURCE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bagcache.h"

/* What a source does.  ts_config_default() gives a plain source of n
 * records; set the knobs after it. */
typedef struct ts_config {
  uint64_t n;             /* records in a normal pass */
  bool fixed;             /* fixed-size records (see above) */
  bool with_skip;         /* provide the skip callback */
  bool thread_safe;       /* declare the source thread-safe */
  int64_t fail_at;        /* next() producing this record fails (-1: never) */
  int fail_times;         /* failures left before it succeeds (< 0: always) */
  int fail_code;          /* code of the failure (a negative BC_E*) */
  bool fail_open;         /* open() fails instead (same budget and code) */
  int64_t nondet_pass;    /* passes numbered >= this (0-based, counted in the
                             shared opens counter) differ (-1: never) */
  uint64_t nondet_n;      /* 0: a differing pass has other bytes; else it
                             has the same bytes but ends after nondet_n */
  unsigned delay_us;      /* sleep before each record next() produces */
  int bad_next;           /* != 0: next() returns this (misbehaving source) */
  bool seekable;          /* provide open_at (a version-2 source) */
  uint64_t seek_off;      /* open_at(start) starts at start + seek_off: a
                             source that seeks wrongly (0: correctly) */
  bool version1;          /* declare version 1 (and no open_at) */
  int64_t block_at;       /* next() producing this record waits while
                             shared->hold is set (-1: never) */
  bool block_first;       /* the first next() of every pass waits while
                             shared->hold is set */
  void *fail_payload;     /* attached to each injected failure with
                             bc_error_set_payload (NULL: none) */
  void (*payload_retain)(void *);
  void (*payload_release)(void *);
} ts_config;

/* Counters shared across threads and forked processes. */
typedef struct ts_shared {
  _Atomic uint64_t opens;      /* passes opened (open_at included) */
  _Atomic uint64_t seeks;      /* of which by open_at */
  _Atomic uint64_t closes;     /* passes closed */
  _Atomic uint64_t produced;   /* records returned by next() */
  _Atomic uint64_t skip_calls; /* calls of skip() */
  _Atomic uint64_t skipped;    /* records skipped by skip() */
  _Atomic uint64_t failures;   /* failures injected */
  _Atomic int64_t fail_left;   /* the failure budget (from fail_times) */
  _Atomic uint64_t frees;      /* free_payload calls */
  _Atomic uint64_t overlaps;   /* callbacks of one source (one process) that
                                  ran concurrently although it is not
                                  thread-safe */
  _Atomic bool hold;           /* next() waits at cfg.block_at while set */
  _Atomic bool held;           /* a next() has waited at cfg.block_at */
  _Atomic bool no_delay;       /* set: delay_us is ignored from now on */
  uint64_t n;                  /* entries of per_record */
  _Atomic uint32_t per_record[]; /* times next() produced record i */
} ts_shared;

ts_config ts_config_default(uint64_t n);

/* A fresh shared counter block for `cfg` (n entries, budget fail_times);
 * NULL when the mapping fails.  Release with ts_shared_free. */
ts_shared *ts_shared_new(const ts_config *cfg);
void ts_shared_free(ts_shared *s);

/* A source following `cfg`, counting into `shared` (which must outlive
 * every cache using the source).  The payload is malloc'd; the cache frees
 * it through free_payload. */
bc_source ts_source(const ts_config *cfg, ts_shared *shared);

/* The model: record i of a normal pass (variant 0) or of a differing pass
 * (variant 1) into buf.  Returns its size.  buf needs TS_MAX_RECORD bytes. */
#define TS_MAX_RECORD 96
size_t ts_record(uint64_t i, bool fixed, int variant, unsigned char *buf);

/* True when out holds exactly model record i (variant 0). */
bool ts_matches(uint64_t i, bool fixed, const bc_buf *out);

/* Sum of the record sizes of [start, end) (variant 0). */
uint64_t ts_bytes(uint64_t start, uint64_t end, bool fixed);

#endif
