/*
 * tests/bench/bench.h - helpers of the benchmark programs: a seeded PRNG,
 * word-salad records, a monotonic clock, medians and the result table.
 */
#ifndef BC_TESTS_BENCH_H
#define BC_TESTS_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* splitmix64: a tiny seeded generator, identical on every platform. */
typedef struct bench_rng {
  uint64_t state;
} bench_rng;

uint64_t bench_rng_next(bench_rng *r);

/* Uniform in [0, n) for n > 0 (multiply-shift; the bias is < n / 2^64). */
uint64_t bench_rng_below(bench_rng *r, uint64_t n);

/* Fills dst[0..size) with text-like bytes: words from a fixed list of
 * common English words, separated by spaces with occasional punctuation and
 * newlines.  Compresses about 2.5-3x with zstd per 1 KiB record. */
void bench_word_salad(bench_rng *r, unsigned char *dst, size_t size);

/* Seconds on the monotonic clock. */
double bench_now(void);

/* Median of v[0..n) (sorts v). */
double bench_median(double *v, size_t n);

/* One line of the result table.  `base` is the baseline's name (NULL: no
 * baseline); ratio = base_time / time, i.e. how fast bagcache is relative
 * to the baseline (for "get_many vs get loop" it is the speed-up). */
typedef struct bench_row {
  const char *op;
  double time;      /* median seconds */
  double units;     /* records or bytes processed per run */
  bool bytes;       /* rate in MB/s instead of M rec/s */
  const char *base;
  double base_time; /* median seconds of the baseline */
  double target;    /* wanted minimum ratio; 0 = none */
} bench_row;

void bench_print_header(void);
void bench_print_row(const bench_row *row);

#endif /* BC_TESTS_BENCH_H */
