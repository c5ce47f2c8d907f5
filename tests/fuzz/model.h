/*
 * tests/fuzz/model.h - an independent model of one Bagz shard, computed from
 * the raw file bytes without the library, against which the fuzzer checks
 * what bagcache returns.
 *
 * The model follows doc/format.md (and bagz): a tail file of 1-7 bytes, a
 * last limit past size-8, or a limits section whose length is not a multiple
 * of 8 cannot be opened; record i is records[limits[i-1], limits[i]) and
 * exists only when limits[i-1] <= limits[i] <= records size; a zstd record is
 * exactly one frame whose content is at most FZ_MAX_RECORD_SIZE bytes (an
 * empty stored record is an empty record).
 */
#ifndef BC_TESTS_FUZZ_MODEL_H
#define BC_TESTS_FUZZ_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What the reader may return for one record. */
typedef enum fz_expect {
  FZ_BAD,     /* must fail with BC_ECORRUPT */
  FZ_OK,      /* if it succeeds, it returns exactly bytes[0..size) */
  FZ_UNKNOWN  /* the model cannot tell (e.g. a frame needing a > 128 MiB
                 window without a content size): any outcome, size capped */
} fz_expect;

typedef struct fz_record {
  fz_expect expect;
  const char *why;      /* for FZ_BAD / FZ_UNKNOWN: the reason, for reports */
  unsigned char *bytes; /* FZ_OK: the record (malloc'd; NULL when size 0) */
  size_t size;
} fz_record;

typedef struct fz_model {
  bool malformed;          /* tail split impossible: open must fail */
  uint64_t count;          /* number of records */
  uint64_t records_size;   /* size of the records section */
  bool limits_valid;       /* every limit is monotonic and within records */
  size_t modelled;         /* records[0..modelled) are filled in */
  fz_record *records;
} fz_model;

/* Models a tail shard (file = records || limits) or a separate one
 * (records file + limits file).  Records beyond FZ_MAX_CHECKED are counted
 * but not modelled. */
void fz_model_tail(fz_model *m, const unsigned char *file, size_t size,
                   bool zstd);
void fz_model_separate(fz_model *m, const unsigned char *records,
                       size_t records_size, const unsigned char *limits,
                       size_t limits_size, bool zstd);
void fz_model_free(fz_model *m);

/* True when the reader must succeed on record i: the whole limits table is
 * valid and the record itself is a well-formed (or empty) record. */
bool fz_model_must_read(const fz_model *m, uint64_t i);

/* Reference zstd decoding of one stored record (see the rules above). */
void fz_model_decode(fz_record *out, const unsigned char *src, size_t size);

#endif /* BC_TESTS_FUZZ_MODEL_H */
