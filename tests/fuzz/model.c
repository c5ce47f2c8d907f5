/* The fuzzer's independent model of a Bagz shard (see model.h). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_getFrameHeader: test code only */
#include <zstd.h>

#include "fuzz.h"
#include "model.h"

/* Streams beyond this window need more memory than the library is expected
 * to grant a frame that does not state its size (zstd's own default). */
#define FZ_WINDOW_LIMIT ((uint64_t)1 << ZSTD_WINDOWLOG_LIMIT_DEFAULT)

static void set_bad(fz_record *r, const char *why) {
  free(r->bytes);
  r->bytes = NULL;
  r->size = 0;
  r->expect = FZ_BAD;
  r->why = why;
}

/* Streams the single frame src[0..size) into r->bytes, allowing at most
 * FZ_MAX_RECORD_SIZE bytes of output.  zstd itself checks a stated content
 * size against what the frame really holds. */
static void decode_stream(fz_record *r, const unsigned char *src, size_t size,
                          unsigned window_log_max) {
  static ZSTD_DCtx *dctx;
  if (dctx == NULL) {
    dctx = ZSTD_createDCtx();
    FZ_CHECK(dctx != NULL, "ZSTD_createDCtx failed");
  }
  ZSTD_DCtx_reset(dctx, ZSTD_reset_session_and_parameters);
  size_t pr = ZSTD_DCtx_setParameter(dctx, ZSTD_d_windowLogMax,
                                     (int)window_log_max);
  FZ_CHECK(!ZSTD_isError(pr), "ZSTD_d_windowLogMax: %s",
           ZSTD_getErrorName(pr));

  size_t cap = 4096;
  unsigned char *out = malloc(cap);
  FZ_CHECK(out != NULL, "out of memory");
  ZSTD_inBuffer in = {src, size, 0};
  ZSTD_outBuffer o = {out, cap, 0};
  r->expect = FZ_OK;
  for (;;) {
    size_t ret = ZSTD_decompressStream(dctx, &o, &in);
    if (ZSTD_isError(ret)) {
      r->bytes = out;
      set_bad(r, "zstd rejects the frame");
      return;
    }
    if (o.pos > FZ_MAX_RECORD_SIZE) {
      r->bytes = out;
      set_bad(r, "frame decodes to more than max_record_size");
      return;
    }
    if (ret == 0) break; /* frame complete and flushed */
    if (o.pos == o.size) {
      /* Grow to one byte past the cap at most: enough to see an excess. */
      size_t ncap = cap * 2;
      if (ncap > FZ_MAX_RECORD_SIZE + 1) ncap = FZ_MAX_RECORD_SIZE + 1;
      unsigned char *p = realloc(out, ncap);
      FZ_CHECK(p != NULL, "out of memory");
      out = p;
      cap = ncap;
      o.dst = out;
      o.size = cap;
    } else if (in.pos == in.size) {
      r->bytes = out;
      set_bad(r, "truncated zstd frame");
      return;
    }
  }
  if (o.pos == 0) {
    free(out);
    out = NULL;
  }
  r->bytes = out;
  r->size = o.pos;
}

void fz_model_decode(fz_record *r, const unsigned char *src, size_t size) {
  memset(r, 0, sizeof *r);
  r->expect = FZ_OK;
  if (size == 0) return; /* empty records are stored as zero bytes */

  size_t fsize = ZSTD_findFrameCompressedSize(src, size);
  if (ZSTD_isError(fsize)) {
    set_bad(r, "not one complete zstd frame");
    return;
  }
  if (fsize != size) {
    set_bad(r, "bytes after the first zstd frame");
    return;
  }
  if (ZSTD_isSkippableFrame(src, size)) {
    /* Holds no content: a reader may reject it or return an empty record. */
    r->expect = FZ_UNKNOWN;
    r->why = "skippable frame";
    return;
  }
  ZSTD_frameHeader h;
  size_t hr = ZSTD_getFrameHeader(&h, src, size);
  if (ZSTD_isError(hr) || hr != 0) {
    r->expect = FZ_UNKNOWN; /* a legacy (pre-1.0) frame */
    r->why = "legacy zstd frame";
    return;
  }
  if (h.frameContentSize != ZSTD_CONTENTSIZE_UNKNOWN) {
    if (h.frameContentSize > FZ_MAX_RECORD_SIZE) {
      set_bad(r, "frame claims more than max_record_size");
      return;
    }
    /* The output size bounds the memory: any window is acceptable. */
    decode_stream(r, src, size, ZSTD_WINDOWLOG_MAX);
    return;
  }
  if (h.windowSize > FZ_WINDOW_LIMIT) {
    r->expect = FZ_UNKNOWN;
    r->why = "unsized frame with a window over 128 MiB";
    return;
  }
  decode_stream(r, src, size, ZSTD_WINDOWLOG_LIMIT_DEFAULT);
}

/* Fills m->records from the records section and the limits table. */
static void model_records(fz_model *m, const unsigned char *records,
                          const unsigned char *limits, bool zstd) {
  m->limits_valid = true;
  uint64_t prev = 0;
  for (uint64_t i = 0; i < m->count; i++) {
    uint64_t lim = fz_load_u64le(limits + 8 * i);
    if (lim < prev || lim > m->records_size) m->limits_valid = false;
    prev = lim;
  }
  m->modelled = m->count < FZ_MAX_CHECKED ? (size_t)m->count : FZ_MAX_CHECKED;
  if (m->modelled == 0) return;
  m->records = calloc(m->modelled, sizeof *m->records);
  FZ_CHECK(m->records != NULL, "out of memory");
  for (size_t i = 0; i < m->modelled; i++) {
    fz_record *r = &m->records[i];
    uint64_t lo = i == 0 ? 0 : fz_load_u64le(limits + 8 * (i - 1));
    uint64_t hi = fz_load_u64le(limits + 8 * i);
    if (lo > hi) {
      set_bad(r, "limits not monotonic");
      continue;
    }
    if (hi > m->records_size) {
      set_bad(r, "limit past the records section");
      continue;
    }
    const unsigned char *src = records + lo;
    size_t n = (size_t)(hi - lo);
    if (zstd) {
      fz_model_decode(r, src, n);
    } else {
      r->expect = FZ_OK;
      r->size = n;
      if (n > 0) {
        r->bytes = malloc(n);
        FZ_CHECK(r->bytes != NULL, "out of memory");
        memcpy(r->bytes, src, n);
      }
    }
  }
}

void fz_model_tail(fz_model *m, const unsigned char *file, size_t size,
                   bool zstd) {
  memset(m, 0, sizeof *m);
  if (size == 0) {
    m->limits_valid = true; /* zero records */
    return;
  }
  if (size < 8) {
    m->malformed = true;
    return;
  }
  uint64_t end = fz_load_u64le(file + size - 8);
  if (end > size - 8 || (size - end) % 8 != 0) {
    m->malformed = true;
    return;
  }
  m->records_size = end;
  m->count = (size - end) / 8;
  model_records(m, file, file + end, zstd);
}

void fz_model_separate(fz_model *m, const unsigned char *records,
                       size_t records_size, const unsigned char *limits,
                       size_t limits_size, bool zstd) {
  memset(m, 0, sizeof *m);
  m->records_size = records_size;
  m->count = limits_size / 8; /* 1-7 trailing bytes are ignored */
  model_records(m, records, limits, zstd);
}

void fz_model_free(fz_model *m) {
  for (size_t i = 0; i < m->modelled; i++) free(m->records[i].bytes);
  free(m->records);
  memset(m, 0, sizeof *m);
}

bool fz_model_must_read(const fz_model *m, uint64_t i) {
  return m->limits_valid && i < m->modelled &&
         m->records[i].expect == FZ_OK;
}
