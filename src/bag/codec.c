/*
 * Per-record zstd, exactly as bagz does it.
 *
 * Encoding: one ZSTD_CDict per writer, made with ZSTD_createCDict(dict, len,
 * level) (also with no dictionary), and ZSTD_compress_usingCDict per
 * non-empty record.  The CDict fixes the compression parameters, which is
 * what makes the bytes identical to bagz's (plain ZSTD_compress tunes them by
 * record size and differs).
 *
 * Decoding: exactly one frame per stored record, with or without a content
 * size.  The decompressed size is capped twice: by the reader's
 * max_record_size and by what the input could possibly expand to, so a
 * hostile header can never demand an absurd allocation.  DCtx objects are
 * recycled through a small array of atomic slots (take = exchange with
 * NULL, give = compare-and-swap into an empty slot), so one decoder serves
 * any number of threads without a lock on the per-record path.
 */
#include "config.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>
#include <zstd_errors.h>

#include "bag/internal.h"

/* Upper bound of the content of one zstd frame of `size` bytes: every block
 * has a 3-byte header and yields at most 128 KiB (an RLE block needs 4 bytes,
 * so this over-estimates), and the frame header takes at least 6 bytes. */
static uint64_t expansion_bound(size_t size) {
  return ((uint64_t)size / 3 + 1) * ZSTD_BLOCKSIZE_MAX;
}

/* want <= min(cap, expansion_bound(size)) without the division when want
 * fits in one block (expansion_bound is never below a block's maximum). */
static inline bool within_bound(size_t want, size_t size, uint64_t max) {
  return want <= max &&
         (want <= ZSTD_BLOCKSIZE_MAX || want <= expansion_bound(size));
}

/* ---- decoder ------------------------------------------------------------ */

#define SPARE_DCTX 64

struct bc__decoder {
  ZSTD_DDict *ddict; /* NULL without a dictionary */
  uint64_t max_record_size;
  _Atomic(ZSTD_DCtx *) spare[SPARE_DCTX]; /* NULL = empty slot */
};

int bc__decoder_new(bc__decoder **out, const void *dict, size_t dict_size,
                    uint64_t max_record_size) {
  bc__decoder *d = calloc(1, sizeof *d);
  if (d == NULL) return bc__error(BC_ENOMEM, "out of memory");
  if (dict_size > 0) {
    d->ddict = ZSTD_createDDict(dict, dict_size);
    if (d->ddict == NULL) {
      free(d);
      return bc__error(BC_EINVAL, "zstd rejected the dictionary (%zu bytes)",
                       dict_size);
    }
  }
  d->max_record_size = max_record_size;
  for (size_t i = 0; i < SPARE_DCTX; i++) atomic_init(&d->spare[i], NULL);
  *out = d;
  return 0;
}

void bc__decoder_free(bc__decoder *d) {
  if (d == NULL) return;
  for (size_t i = 0; i < SPARE_DCTX; i++) ZSTD_freeDCtx(atomic_load(&d->spare[i]));
  ZSTD_freeDDict(d->ddict);
  free(d);
}

/* Threads start looking at different slots so they rarely meet. */
static size_t home_slot(void) {
  static _Thread_local size_t home = SIZE_MAX;
  static atomic_size_t next_home;
  if (home == SIZE_MAX) home = atomic_fetch_add(&next_home, 1) % SPARE_DCTX;
  return home;
}

static ZSTD_DCtx *dctx_take(bc__decoder *d) {
  size_t h = home_slot();
  for (size_t k = 0; k < SPARE_DCTX; k++) {
    ZSTD_DCtx *c = atomic_exchange(&d->spare[(h + k) % SPARE_DCTX], NULL);
    if (c != NULL) return c;
  }
  ZSTD_DCtx *c = ZSTD_createDCtx();
  if (c != NULL && d->ddict != NULL &&
      ZSTD_isError(ZSTD_DCtx_refDDict(c, d->ddict))) {
    ZSTD_freeDCtx(c);
    c = NULL;
  }
  return c;
}

static void dctx_give(bc__decoder *d, ZSTD_DCtx *c) {
  size_t h = home_slot();
  for (size_t k = 0; k < SPARE_DCTX; k++) {
    ZSTD_DCtx *empty = NULL;
    if (atomic_compare_exchange_strong(&d->spare[(h + k) % SPARE_DCTX], &empty, c))
      return;
  }
  ZSTD_freeDCtx(c); /* every slot taken: more threads than slots */
}

/* Streams a frame without a content size into out, enforcing `cap`. */
static int decode_streaming(ZSTD_DCtx *c, const void *src, size_t size,
                            uint64_t cap, bc_buf *out, const char *what) {
  ZSTD_inBuffer in = {src, size, 0};
  size_t produced = 0;
  for (;;) {
    size_t room = ZSTD_DStreamOutSize();
    if (produced + room > cap) room = (size_t)(cap - produced) + 1;
    int rc = bc__buf_reserve(out, produced + room);
    if (rc != 0) return rc;
    ZSTD_outBuffer o = {out->data + produced, room, 0};
    size_t r = ZSTD_decompressStream(c, &o, &in);
    if (ZSTD_isError(r))
      return bc__error(BC_ECORRUPT, "%s: invalid zstd data: %s", what,
                       ZSTD_getErrorName(r));
    produced += o.pos;
    if (produced > cap)
      return bc__error(BC_ECORRUPT,
                       "%s: zstd frame decompresses to more than %llu bytes",
                       what, (unsigned long long)cap);
    if (r == 0) break; /* frame complete */
    if (in.pos == in.size && o.pos < o.size)
      return bc__error(BC_ECORRUPT, "%s: truncated zstd frame", what);
  }
  out->size = produced;
  return 0;
}

/* Checks that src[0..size) is exactly one complete zstd frame and reads
 * its content size (ZSTD_CONTENTSIZE_UNKNOWN when the header has none),
 * which must not exceed `cap`.  Messages name "PATH: record N". */
static int frame_content(const void *src, size_t size, uint64_t cap,
                         unsigned long long *content, const char *path,
                         uint64_t record) {
  size_t frame = ZSTD_findFrameCompressedSize(src, size);
  if (ZSTD_isError(frame))
    return bc__error(BC_ECORRUPT,
                     "%s: record %llu: invalid zstd frame (%zu bytes): %s",
                     path, (unsigned long long)record, size,
                     ZSTD_getErrorName(frame));
  if (frame != size)
    return bc__error(BC_ECORRUPT,
                     "%s: record %llu: %zu bytes follow the zstd frame (one "
                     "frame per record expected)",
                     path, (unsigned long long)record, size - frame);
  unsigned long long c = ZSTD_getFrameContentSize(src, size);
  if (c == ZSTD_CONTENTSIZE_ERROR)
    return bc__error(BC_ECORRUPT, "%s: record %llu: invalid zstd frame header",
                     path, (unsigned long long)record);
  if (c != ZSTD_CONTENTSIZE_UNKNOWN && c > cap)
    return bc__error(BC_ECORRUPT,
                     "%s: record %llu: zstd frame claims %llu bytes (limit %llu)",
                     path, (unsigned long long)record, c,
                     (unsigned long long)cap);
  *content = c;
  return 0;
}

int bc__decoder_decode(bc__decoder *d, const void *src, size_t size,
                       bc_buf *out, const char *path, uint64_t record) {
  /* Messages name "PATH: record N"; formatted only when something fails. */
  char what[4200];
  what[0] = '\0';
#define WHAT() (snprintf(what, sizeof what, "%s: record %llu", path, \
                         (unsigned long long)record), what)
  if (size == 0) {
    out->size = 0;
    return 0;
  }
  /* Exactly one frame, and it must be complete: this also rejects trailing
   * bytes and truncated frames before any allocation. */
  uint64_t cap = expansion_bound(size);
  if (cap > d->max_record_size) cap = d->max_record_size;
  unsigned long long content;
  int rc = frame_content(src, size, cap, &content, path, record);
  if (rc != 0) return rc;

  ZSTD_DCtx *c = dctx_take(d);
  if (c == NULL) return bc__error(BC_ENOMEM, "cannot create a zstd context");
  if (content == ZSTD_CONTENTSIZE_UNKNOWN) {
    ZSTD_DCtx_reset(c, ZSTD_reset_session_only);
    rc = decode_streaming(c, src, size, cap, out, WHAT());
  } else {
    rc = bc__buf_reserve(out, (size_t)content);
    if (rc == 0) {
      size_t r = ZSTD_decompressDCtx(c, out->data, (size_t)content, src, size);
      if (ZSTD_isError(r))
        rc = bc__error(BC_ECORRUPT, "%s: invalid zstd data: %s", WHAT(),
                       ZSTD_getErrorName(r));
      else if (r != content)
        rc = bc__error(BC_ECORRUPT,
                       "%s: zstd frame holds %zu bytes, header says %llu",
                       WHAT(), r, content);
      else
        out->size = r;
    }
  }
  dctx_give(d, c);
  return rc;
#undef WHAT
}

bc__dctx *bc__decoder_take(bc__decoder *d) {
  bc__dctx *c = (bc__dctx *)dctx_take(d);
  if (c == NULL) bc__error(BC_ENOMEM, "cannot create a zstd context");
  return c;
}

void bc__decoder_give(bc__decoder *d, bc__dctx *c) {
  if (c != NULL) dctx_give(d, (ZSTD_DCtx *)c);
}

/* The common case of frame_content for a row, at a fraction of its cost
 * (it parses the header three times, and ZSTD_findFrameCompressedSize
 * walks the blocks through zstd's general code: together most of a row's
 * cost above the decompression itself).  True when src[0..size) is exactly
 * one complete zstd frame whose header states a content size of exactly
 * `want` bytes, at most the cap of decode_into (max_record_size and
 * expansion_bound(size)): then frame_content would accept it with that
 * content size.  False for anything else (a skippable frame, a
 * reserved bit, no content size, another size, a short or long input),
 * when frame_content decides and words the error.
 *
 * The header is parsed by the frame format (RFC 8878, 3.1.1.1; zstd's
 * ZSTD_getFrameHeader is not in its stable API): magic number, descriptor
 * (bits 7-6 the content size field's code, 5 single segment, 3 reserved,
 * 2 checksum, 1-0 the dictionary ID field's code), window byte unless
 * single segment (exponent in bits 7-3, plus 10, is the window log),
 * dictionary ID (0, 1, 2 or 4 bytes), content size (code
 * 0: 1 byte if single segment, else none; 1: 2 bytes + 256; 2: 4; 3: 8,
 * little-endian).  The block walk is ZSTD_findFrameCompressedSize's: 3-byte
 * headers (bit 0 last block, bits 1-2 type, the rest the size), an RLE
 * block stores 1 byte, type 3 is reserved; then 4 bytes of checksum when
 * the descriptor says so. */
static bool one_frame_of(const void *src, size_t size, size_t want,
                         uint64_t max_record_size, size_t *stored_at,
                         size_t *sum_at) {
  const unsigned char *p = src;
  *stored_at = *sum_at = 0;
  if (size < 6 || !within_bound(want, size, max_record_size)) return false;
  uint32_t magic = (uint32_t)p[0] | (uint32_t)p[1] << 8 |
                   (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
  unsigned desc = p[4];
  if (magic != ZSTD_MAGICNUMBER || (desc & 0x08)) return false;
  unsigned fcs_code = desc >> 6, single = (desc >> 5) & 1;
  /* A window log above 30 (zstd's limit on 32-bit builds, 31 on 64-bit)
   * is an error of zstd's header parse: frame_content's to report. */
  if (!single && (p[5] >> 3) + 10 > 30) return false;
  static const size_t did_bytes[4] = {0, 1, 2, 4};
  static const size_t fcs_bytes[4] = {0, 2, 4, 8};
  size_t fcs_size = fcs_code == 0 ? single : fcs_bytes[fcs_code];
  if (fcs_size == 0) return false; /* no content size: frame_content's */
  size_t at = 5 + !single + did_bytes[desc & 3];
  if (size < at + fcs_size) return false;
  const unsigned char *f = p + at; /* fcs_size bytes, little-endian */
  uint64_t content;
  switch (fcs_code) {
  case 0: content = f[0]; break;
  case 1: content = ((uint64_t)f[0] | (uint64_t)f[1] << 8) + 256; break;
  case 2: content = (uint64_t)f[0] | (uint64_t)f[1] << 8 |
                    (uint64_t)f[2] << 16 | (uint64_t)f[3] << 24; break;
  default: content = bc__load_u64le(f); break;
  }
  if (content != want) return false;
  at += fcs_size;
  size_t first = at; /* the first block's header */
  for (;;) {
    if (size - at < 3) return false;
    uint32_t bh = (uint32_t)p[at] | (uint32_t)p[at + 1] << 8 |
                  (uint32_t)p[at + 2] << 16;
    unsigned type = (bh >> 1) & 3;
    size_t stored = type == 1 ? 1 : (size_t)(bh >> 3);
    if (type == 3 || size - at - 3 < stored) return false;
    at += 3 + stored;
    if (bh & 1) break;
  }
  /* The content as it is (decode_into copies it): a single-segment frame
   * (its window is its content size) with no dictionary ID, of one last
   * raw block holding the whole content, at most a block's maximum.  zstd
   * checks nothing more of such a frame than the checksum, which
   * decode_into checks too. */
  bool stored_only = single && (desc & 3) == 0 && at == first + 3 + want &&
                     (p[first] & 7) == 1 && want <= ZSTD_BLOCKSIZE_MAX;
  if (desc & 0x04) {
    if (size - at < 4) return false;
    at += 4;
  }
  if (at != size) return false;
  if (stored_only) {
    *stored_at = first + 3;
    *sum_at = desc & 0x04 ? at - 4 : 0;
  }
  return true;
}

/* The error of record `record` of `path`: "PATH: record N: " and the
 * message.  Out of line and cold, so that decode_into, called per row,
 * holds no message buffer. */
__attribute__((cold, noinline)) BC__PRINTF(3, 4) static int
record_error(const char *path, uint64_t record, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return bc__error(BC_ECORRUPT, "%s: record %llu: %s", path,
                   (unsigned long long)record, msg);
}

int bc__decoder_decode_into(bc__decoder *d, bc__dctx *ctx, const void *src,
                            size_t size, void *dst, size_t want,
                            bc_buf *scratch, uint64_t *actual,
                            const char *path, uint64_t record) {
  if (size == 0) { /* an empty record */
    *actual = 0;
    return want == 0 ? 0 : 1;
  }
  unsigned long long content = want;
  int rc = 0;
  size_t stored_at, sum_at;
  if (!one_frame_of(src, size, want, d->max_record_size, &stored_at, &sum_at)) {
    /* Anything but one frame of `want` bytes: frame_content decides (and
     * words the error) with the cap that decode uses. */
    uint64_t cap = expansion_bound(size);
    if (cap > d->max_record_size) cap = d->max_record_size;
    rc = frame_content(src, size, cap, &content, path, record);
    if (rc != 0) return rc;
  }
  if (stored_at != 0) {
    /* One raw block: zstd would copy it and check the checksum (the low 32
     * bits of XXH64 of the content), so this does, without its per-frame
     * set-up (about 500 instructions a row; incompressible records, such
     * as already compressed images, are all such frames).  The error is
     * zstd's own. */
    *actual = want;
    memcpy(dst, (const unsigned char *)src + stored_at, want);
    if (sum_at != 0) {
      const unsigned char *q = (const unsigned char *)src + sum_at;
      uint32_t sum = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 |
                     (uint32_t)q[3] << 24;
      if ((uint32_t)bc__xxh64(dst, want, 0) != sum)
        return record_error(path, record, "invalid zstd data: %s",
                            ZSTD_getErrorString(ZSTD_error_checksum_wrong));
    }
    return 0;
  }
  if (content == ZSTD_CONTENTSIZE_UNKNOWN) {
    /* Rare (bagz and bagcache write content sizes): the size is known only
     * once decoded, so decode in full, then compare. */
    if ((rc = bc__decoder_decode(d, src, size, scratch, path, record)) != 0)
      return rc;
    *actual = scratch->size;
    if (scratch->size != want) return 1;
    if (want > 0) memcpy(dst, scratch->data, want);
    return 0;
  }
  *actual = content;
  if (content != want) return 1; /* nothing written */
  ZSTD_DCtx *c = ctx != NULL ? (ZSTD_DCtx *)ctx : dctx_take(d);
  if (c == NULL) return bc__error(BC_ENOMEM, "cannot create a zstd context");
  /* dst holds exactly `want` bytes: zstd never writes past its capacity.
   * Success is r == want (an error code is never a size this small). */
  size_t r = ZSTD_decompressDCtx(c, dst, want, src, size);
  if (r != want) {
    if (ZSTD_isError(r))
      rc = record_error(path, record, "invalid zstd data: %s",
                        ZSTD_getErrorName(r));
    else
      rc = record_error(path, record, "zstd frame holds %zu bytes, header says %llu",
                        r, content);
  }
  if (ctx == NULL) dctx_give(d, c);
  return rc;
}

/* ---- encoder ------------------------------------------------------------ */

struct bc__encoder {
  ZSTD_CCtx *cctx;
  ZSTD_CDict *cdict;
  bool checksum; /* frames carry zstd's content checksum */
};

int bc__encoder_checksum(bc__encoder *e) {
  e->checksum = true;
  return 0;
}

/* Turns a frame from ZSTD_compress_usingCDict (no checksum) into the same
 * frame with zstd's content checksum: the Content_Checksum_flag (bit 2 of
 * the frame header descriptor, after the 4-byte magic number) set and the
 * low 32 bits of XXH64(content, 0) appended, little-endian.  Only those
 * bits change, so the compression stays exactly bagz's (asking zstd for
 * checksums goes through ZSTD_compress2, whose parameters for small
 * records differ).  `cap` is the room in out->data. */
static int add_checksum(bc_buf *out, size_t cap, const void *src, size_t size) {
  if (out->size < 5 || out->size + 4 > cap)
    return bc__error(BC_EIO, "zstd frame of %zu bytes: no room for its checksum",
                     out->size);
  out->data[4] |= 0x04;
  uint32_t sum = (uint32_t)bc__xxh64(src, size, 0);
  for (int i = 0; i < 4; i++) out->data[out->size + i] = (unsigned char)(sum >> (8 * i));
  out->size += 4;
  return 0;
}

int bc__encoder_new(bc__encoder **out, int level, const void *dict,
                    size_t dict_size) {
  if (level < ZSTD_minCLevel() || level > ZSTD_maxCLevel())
    return bc__error(BC_EINVAL, "zstd level %d outside [%d, %d]", level,
                     ZSTD_minCLevel(), ZSTD_maxCLevel());
  bc__encoder *e = calloc(1, sizeof *e);
  if (e == NULL) return bc__error(BC_ENOMEM, "out of memory");
  e->cctx = ZSTD_createCCtx();
  e->cdict = ZSTD_createCDict(dict, dict_size, level);
  if (e->cctx == NULL || e->cdict == NULL) {
    bc__encoder_free(e);
    return bc__error(BC_ENOMEM, "cannot create a zstd compression context");
  }
  *out = e;
  return 0;
}

void bc__encoder_free(bc__encoder *e) {
  if (e == NULL) return;
  ZSTD_freeCCtx(e->cctx);
  ZSTD_freeCDict(e->cdict);
  free(e);
}

int bc__encoder_encode(bc__encoder *e, const void *src, size_t size,
                       bc_buf *out) {
  size_t bound = ZSTD_compressBound(size);
  if (ZSTD_isError(bound))
    return bc__error(BC_EINVAL, "record of %zu bytes is too large for zstd",
                     size);
  int rc = bc__buf_reserve(out, bound + 4); /* + a content checksum */
  if (rc != 0) return rc;
  size_t n = ZSTD_compress_usingCDict(e->cctx, out->data, bound, src, size,
                                      e->cdict);
  if (ZSTD_isError(n))
    return bc__error(BC_EIO, "zstd compression failed: %s",
                     ZSTD_getErrorName(n));
  out->size = n;
  return e->checksum ? add_checksum(out, bound + 4, src, size) : 0;
}
