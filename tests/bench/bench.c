/* Helpers of the benchmark programs (see bench.h). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

uint64_t bench_rng_next(bench_rng *r) {
  uint64_t z = (r->state += 0x9E3779B97F4A7C15u);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
  return z ^ (z >> 31);
}

uint64_t bench_rng_below(bench_rng *r, uint64_t n) {
  return (uint64_t)(((unsigned __int128)bench_rng_next(r) * n) >> 64);
}

/* A small vocabulary, picked uniformly: 32 words give text that zstd
 * compresses about 2.7x in independent 1 KiB records, like the data of the
 * design's reference measurements (entropy coding gains most of it, words
 * repeated within a record the rest). */
static const char *const words[] = {
    "the",        "record",    "between",   "through",  "because",
    "another",    "example",   "important", "different", "following",
    "without",    "against",   "government", "information", "number",
    "problem",    "sequence",  "iterator",  "dataset",  "training",
    "storage",    "memory",    "random",    "access",   "reader",
    "writer",     "stream",    "people",    "world",    "water",
    "place",      "group",
};

void bench_word_salad(bench_rng *r, unsigned char *dst, size_t size) {
  size_t nwords = sizeof words / sizeof words[0];
  size_t pos = 0;
  while (pos < size) {
    const char *w = words[bench_rng_below(r, nwords)];
    size_t len = strlen(w);
    for (size_t i = 0; i < len && pos < size; i++) dst[pos++] = (unsigned char)w[i];
    if (pos >= size) break;
    uint64_t p = bench_rng_below(r, 64);
    if (p == 0 && pos + 1 < size) {
      dst[pos++] = '.';
      dst[pos++] = '\n';
    } else if (p < 4) {
      dst[pos++] = ',';
      if (pos < size) dst[pos++] = ' ';
    } else {
      dst[pos++] = ' ';
    }
  }
}

double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double bench_median(double *v, size_t n) {
  if (n == 0) return 0;
  qsort(v, n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void format_time(char *buf, size_t size, double t) {
  if (t >= 1)
    snprintf(buf, size, "%.3f s", t);
  else if (t >= 1e-3)
    snprintf(buf, size, "%.1f ms", t * 1e3);
  else
    snprintf(buf, size, "%.1f us", t * 1e6);
}

static void format_rate(char *buf, size_t size, double units, bool bytes,
                        double t) {
  if (t <= 0)
    snprintf(buf, size, "-");
  else if (bytes)
    snprintf(buf, size, "%.0f MB/s", units / t / 1e6);
  else
    snprintf(buf, size, "%.3f M rec/s", units / t / 1e6);
}

void bench_print_header(void) {
  printf("| %-32s | %-9s | %-15s | %-36s | %-9s | %-15s | %-5s | %-6s | %-5s |\n",
         "operation", "median", "rate", "baseline", "median", "rate", "ratio",
         "target", "ok");
  printf("|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n", "----------------------------------",
         "-----------", "-----------------", "--------------------------------------",
         "-----------", "-----------------", "-------", "--------", "-------");
}

void bench_print_row(const bench_row *row) {
  char t[32], rate[32], bt[32] = "", brate[32] = "", ratio[16] = "",
       target[16] = "", verdict[16] = "";
  format_time(t, sizeof t, row->time);
  format_rate(rate, sizeof rate, row->units, row->bytes, row->time);
  if (row->base != NULL) {
    format_time(bt, sizeof bt, row->base_time);
    format_rate(brate, sizeof brate, row->units, row->bytes, row->base_time);
    double r = row->time > 0 ? row->base_time / row->time : 0;
    snprintf(ratio, sizeof ratio, "%.2f", r);
    if (row->target > 0) {
      snprintf(target, sizeof target, ">= %.2g", row->target);
      snprintf(verdict, sizeof verdict, "%s", r >= row->target ? "ok" : "below");
    }
  }
  printf("| %-32s | %9s | %15s | %-36s | %9s | %15s | %5s | %6s | %-5s |\n",
         row->op, t, rate, row->base ? row->base : "", bt, brate, ratio, target,
         verdict);
  fflush(stdout);
}
