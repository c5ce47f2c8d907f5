/*
 * bc_bag_read_into and bc_seq_read_into: records straight into the rows of
 * caller memory, checked byte for byte against the model that wrote them.
 *
 * The model: record i of a bag holds ROW bytes, byte j = (i * 31 + j * 7 +
 * 1) & 0xff, except the records a test makes of another size.  Every
 * destination has CANARY bytes of a fixed pattern before and after its
 * rows, checked after every call: nothing outside the rows is ever
 * written, on success or failure; rows a call must not touch (all of them
 * when an index is out of range, a wrong-size record's own row when its
 * size is known before the copy) are checked to still hold their filling.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <zstd.h>

#include "../cache/source.h"
#include "../testutil.h"
#include "bag/internal.h"
#include "common/crc32c.h"

#define ROW 48
#define CANARY 64
#define FILL 0xA5

static void model_row(uint64_t i, size_t size, unsigned char *out) {
  for (size_t j = 0; j < size; j++)
    out[j] = (unsigned char)((i * 31 + j * 7 + 1) & 0xff);
}

/* n records of ROW bytes, but record `odd` (if < n) has odd_size bytes. */
static void model_records(tu_records *recs, size_t n, size_t odd,
                          size_t odd_size) {
  unsigned char buf[4 * ROW];
  for (size_t i = 0; i < n; i++) {
    size_t size = i == odd ? odd_size : ROW;
    model_row(i, size, buf);
    tu_records_add(recs, buf, size);
  }
}

/* ---- destinations with canaries ----------------------------------------- */

typedef struct {
  unsigned char *mem; /* CANARY | rows * size | CANARY */
  unsigned char *rows;
  size_t count, size;
} dest;

static dest dest_new(size_t count, size_t size) {
  dest d = {malloc(2 * CANARY + count * size + 1), NULL, count, size};
  assert_non_null(d.mem);
  d.rows = d.mem + CANARY;
  for (size_t k = 0; k < CANARY; k++) {
    d.mem[k] = (unsigned char)(0xC0 + k);
    d.rows[count * size + k] = (unsigned char)(0x3C + k);
  }
  memset(d.rows, FILL, count * size);
  return d;
}

static void dest_check_canaries(const dest *d) {
  for (size_t k = 0; k < CANARY; k++) {
    if (d->mem[k] != (unsigned char)(0xC0 + k))
      fail_msg("a byte before the rows was written (offset -%zu)", CANARY - k);
    if (d->rows[d->count * d->size + k] != (unsigned char)(0x3C + k))
      fail_msg("a byte after the rows was written (offset +%zu)", k);
  }
}

/* Row k still holds its filling. */
static void dest_check_untouched(const dest *d, size_t k) {
  for (size_t j = 0; j < d->size; j++)
    if (d->rows[k * d->size + j] != FILL)
      fail_msg("row %zu was written (byte %zu)", k, j);
}

/* Row k holds record `index` of the model. */
static void dest_check_row(const dest *d, size_t k, uint64_t index) {
  unsigned char want[ROW + 64];
  model_row(index, d->size, want);
  tu_assert_bytes(d->rows + k * d->size, d->size, want, d->size, "a row");
}

static void dest_free(dest *d) { free(d->mem); }

/* ---- files -------------------------------------------------------------- */

typedef struct {
  char *dir;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  f->dir = tu_tempdir();
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  tu_rmtree(f->dir);
  free(f->dir);
  free(f);
  return 0;
}

/* Writes the model's n records as `shards` shard files NAME-0000s-of-0000S
 * (concatenated layout, equal parts but the last), returning the spec. */
static char *write_shards(fixture *f, const char *name, const char *ext,
                          size_t n, size_t shards, size_t odd, size_t odd_size) {
  tu_records all = {0};
  model_records(&all, n, odd, odd_size);
  size_t per = (n + shards - 1) / shards;
  for (size_t s = 0; s < shards; s++) {
    tu_records part = {0};
    for (size_t i = s * per; i < n && i < (s + 1) * per; i++)
      tu_records_add(&part, all.data[i], all.size[i]);
    char *path = tu_format("%s/%s-%05zu-of-%05zu%s", f->dir, name, s, shards, ext);
    tu_write_bag(path, NULL, &part);
    free(path);
    tu_records_free(&part);
  }
  tu_records_free(&all);
  return tu_format("%s/%s@%zu%s", f->dir, name, shards, ext);
}

static bc_bag *open_bag(const char *spec, const bc_reader_options *ro) {
  bc_bag *bag = NULL;
  TU_OK(bc_bag_open(&bag, spec, ro));
  return bag;
}

/* A batch with repeats, in no order, over [0, n). */
static size_t batch_of(uint64_t *idx, size_t max, size_t n, uint64_t seed) {
  tu_rng r;
  tu_rng_seed(&r, seed);
  size_t count = max;
  for (size_t k = 0; k < count; k++) idx[k] = tu_rng_below(&r, n);
  idx[count / 2] = idx[0]; /* a repeat */
  idx[1] = n - 1;          /* the last record */
  return count;
}

/* bc_bag_read_into of a batch, at every parallelism, checked. */
static void check_bag_batch(bc_bag *bag, size_t n) {
  uint64_t idx[300];
  size_t count = batch_of(idx, 300, n, 7);
  dest d = dest_new(count, ROW);
  TU_OK(bc_bag_read_into(bag, idx, count, d.rows, ROW));
  dest_check_canaries(&d);
  for (size_t k = 0; k < count; k++) dest_check_row(&d, k, idx[k]);
  dest_free(&d);
  /* Through the sequence of the bag, at parallelism 0 (the bag's), 1, 2,
   * with negative indices counting from the end. */
  bc_seq *seq = NULL;
  TU_OK(bc_seq_wrap_bag(&seq, bag));
  int64_t sidx[300];
  for (size_t k = 0; k < count; k++)
    sidx[k] = k % 3 == 2 ? (int64_t)idx[k] - (int64_t)n : (int64_t)idx[k];
  for (int par = 0; par <= 2; par++) {
    dest e = dest_new(count, ROW);
    TU_OK(bc_seq_read_into(seq, sidx, count, e.rows, ROW, par));
    dest_check_canaries(&e);
    for (size_t k = 0; k < count; k++) dest_check_row(&e, k, idx[k]);
    dest_free(&e);
  }
  bc_seq_unref(seq); /* closes the bag */
}

/* ---- exact bytes ------------------------------------------------------- */

static void test_bag_one_shard(void **state) {
  fixture *f = *state;
  char *spec = write_shards(f, "one", ".bag", 500, 1, SIZE_MAX, 0);
  check_bag_batch(open_bag(spec, NULL), 500);
  free(spec);
}

static void test_bag_many_shards(void **state) {
  fixture *f = *state;
  char *spec = write_shards(f, "many", ".bag", 500, 7, SIZE_MAX, 0);
  check_bag_batch(open_bag(spec, NULL), 500);
  free(spec);
}

/* Shards of uneven sizes (an empty one among them, the last the largest):
 * indices are located by the shards' ends, not by division. */
static void test_uneven_shards(void **state) {
  fixture *f = *state;
  static const size_t sizes[] = {40, 0, 25, 40, 60};
  const char *exts[] = {".bag", ".bagz"};
  tu_records all = {0};
  model_records(&all, 165, SIZE_MAX, 0);
  for (size_t e = 0; e < 2; e++) {
    size_t first = 0;
    for (size_t s = 0; s < 5; s++) {
      tu_records part = {0};
      for (size_t i = first; i < first + sizes[s]; i++)
        tu_records_add(&part, all.data[i], all.size[i]);
      char *path = tu_format("%s/uneven-%05zu-of-00005%s", f->dir, s, exts[e]);
      tu_write_bag(path, NULL, &part);
      free(path);
      tu_records_free(&part);
      first += sizes[s];
    }
    char *spec = tu_format("%s/uneven@5%s", f->dir, exts[e]);
    check_bag_batch(open_bag(spec, NULL), 165);
    free(spec);
  }
  tu_records_free(&all);
}

static void test_bagz(void **state) {
  fixture *f = *state;
  char *spec = write_shards(f, "z", ".bagz", 500, 3, SIZE_MAX, 0);
  check_bag_batch(open_bag(spec, NULL), 500);
  free(spec);
}

/* Every backend and limits storage: pread and O_DIRECT reads, limits in
 * memory, separate limits, the interleaved layout (the general path). */
static void test_other_backends(void **state) {
  fixture *f = *state;
  char *bag = write_shards(f, "b", ".bag", 300, 2, SIZE_MAX, 0);
  char *bagz = write_shards(f, "bz", ".bagz", 300, 2, SIZE_MAX, 0);
  tu_capture_notices(); /* O_DIRECT may fall back with a notice */
  bc_cache_policy policies[] = {BC_CACHE_SYSTEM, BC_CACHE_DROP_AFTER_READ,
                                BC_CACHE_DIRECT_IO};
  for (size_t p = 0; p < 3; p++)
    for (int mem = 0; mem <= 1; mem++) {
      bc_reader_options ro = BC_READER_OPTIONS_INIT;
      ro.cache_policy = policies[p];
      ro.limits_storage = mem ? BC_LIMITS_IN_MEMORY : BC_LIMITS_ON_DISK;
      check_bag_batch(open_bag(bag, &ro), 300);
      check_bag_batch(open_bag(bagz, &ro), 300);
    }
  free(bag);
  free(bagz);
  /* Separate limits. */
  tu_records recs = {0};
  model_records(&recs, 100, SIZE_MAX, 0);
  bc_writer_options wo = BC_WRITER_OPTIONS_INIT;
  wo.limits_placement = BC_LIMITS_SEPARATE;
  char *sep = tu_join(f->dir, "sep.bagz");
  tu_write_bag(sep, &wo, &recs);
  bc_reader_options ro = BC_READER_OPTIONS_INIT;
  ro.limits_placement = BC_LIMITS_SEPARATE;
  check_bag_batch(open_bag(sep, &ro), 100);
  free(sep);
  /* Interleaved: record i in shard i % 2. */
  for (size_t s = 0; s < 2; s++) {
    tu_records part = {0};
    for (size_t i = s; i < 100; i += 2) tu_records_add(&part, recs.data[i], recs.size[i]);
    char *path = tu_format("%s/il-%05zu-of-00002.bag", f->dir, s);
    tu_write_bag(path, NULL, &part);
    free(path);
    tu_records_free(&part);
  }
  char *il = tu_format("%s/il@2.bag", f->dir);
  ro = (bc_reader_options)BC_READER_OPTIONS_INIT;
  ro.sharding_layout = BC_LAYOUT_INTERLEAVED;
  check_bag_batch(open_bag(il, &ro), 100);
  free(il);
  tu_records_free(&recs);
}

/* Rows of 0 bytes: empty records read, anything else is the wrong size. */
static void test_empty_rows(void **state) {
  fixture *f = *state;
  tu_records recs = {0};
  for (int i = 0; i < 5; i++) tu_records_add(&recs, "", 0);
  tu_records_add(&recs, "x", 1);
  for (int z = 0; z <= 1; z++) {
    char *path = tu_join(f->dir, z ? "e.bagz" : "e.bag");
    tu_write_bag(path, NULL, &recs);
    bc_bag *bag = open_bag(path, NULL);
    uint64_t idx[] = {4, 0, 2};
    unsigned char one;
    TU_OK(bc_bag_read_into(bag, idx, 3, &one, 0));
    TU_OK(bc_bag_read_into(bag, idx, 3, NULL, 0));
    uint64_t bad[] = {1, 5};
    TU_RC(bc_bag_read_into(bag, bad, 2, NULL, 0), BC_EINVAL);
    assert_non_null(strstr(bc_errmsg(), "record 5 (indices[1]) has 1 bytes, not the row size 0"));
    bc_bag_close(bag);
    free(path);
  }
  tu_records_free(&recs);
}

/* ---- wrong sizes -------------------------------------------------------- */

/* Record 37 has `odd_size` bytes: reading it is BC_EINVAL naming it, its
 * row is not written (the size is known from the limits or the frame
 * header first), and nothing outside the rows ever is. */
static void check_wrong_size(fixture *f, const char *ext, size_t shards,
                             size_t odd_size) {
  char *name = tu_format("odd%zu", odd_size);
  char *spec = write_shards(f, name, ext, 120, shards, 37, odd_size);
  bc_bag *bag = open_bag(spec, NULL);
  uint64_t idx[] = {3, 119, 37, 5, 37};
  dest d = dest_new(5, ROW);
  TU_RC(bc_bag_read_into(bag, idx, 5, d.rows, ROW), BC_EINVAL);
  char *want = tu_format("record 37 (indices[2]) has %zu bytes, not the row size %d",
                         odd_size, ROW);
  if (strstr(bc_errmsg(), want) == NULL) fail_msg("message: %s", bc_errmsg());
  dest_check_canaries(&d);
  dest_check_untouched(&d, 2);
  dest_check_untouched(&d, 4);
  dest_free(&d);
  /* The sequence names the index as given, at its position. */
  bc_seq *seq = NULL;
  TU_OK(bc_seq_wrap_bag(&seq, bag));
  int64_t sidx[] = {3, -1, 0, -83, 37};
  dest e = dest_new(5, ROW);
  TU_RC(bc_seq_read_into(seq, sidx, 5, e.rows, ROW, 1), BC_EINVAL);
  free(want);
  want = tu_format("record -83 (indices[3]) has %zu bytes, not the row size %d", odd_size,
                   ROW);
  if (strstr(bc_errmsg(), want) == NULL) fail_msg("message: %s", bc_errmsg());
  dest_check_canaries(&e);
  dest_check_untouched(&e, 3);
  dest_check_untouched(&e, 4);
  dest_free(&e);
  /* Without the odd record, the batch reads. */
  int64_t good[] = {3, -1, 0, 36, 38};
  dest g = dest_new(5, ROW);
  TU_OK(bc_seq_read_into(seq, good, 5, g.rows, ROW, 0));
  uint64_t want_rows[] = {3, 119, 0, 36, 38};
  for (size_t k = 0; k < 5; k++) dest_check_row(&g, k, want_rows[k]);
  dest_check_canaries(&g);
  dest_free(&g);
  bc_seq_unref(seq);
  free(want);
  free(spec);
  free(name);
}

static void test_wrong_sizes(void **state) {
  fixture *f = *state;
  size_t sizes[] = {ROW - 1, ROW + 1, 0, 3 * ROW};
  for (size_t s = 0; s < 4; s++) {
    check_wrong_size(f, ".bag", 1, sizes[s]);
    check_wrong_size(f, ".bag", 4, sizes[s]);
    check_wrong_size(f, ".bagz", 1, sizes[s]);
    check_wrong_size(f, ".bagz", 3, sizes[s]);
  }
}

/* zstd frames without a content size (bagz's writer always writes one;
 * another writer may not): decoded aside, then checked and copied. */
static void test_frames_without_content_size(void **state) {
  fixture *f = *state;
  ZSTD_CCtx *c = ZSTD_createCCtx();
  assert_int_equal(ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 0)), 0);
  tu_records frames = {0};
  for (size_t i = 0; i < 40; i++) {
    unsigned char raw[ROW + 8], z[256];
    size_t size = i == 9 ? ROW + 8 : ROW;
    model_row(i, size, raw);
    ZSTD_inBuffer in = {raw, size, 0};
    ZSTD_outBuffer out = {z, sizeof z, 0};
    assert_int_equal(ZSTD_compressStream2(c, &out, &in, ZSTD_e_end), 0);
    assert_true(ZSTD_getFrameContentSize(z, out.pos) == ZSTD_CONTENTSIZE_UNKNOWN);
    tu_records_add(&frames, z, out.pos);
  }
  ZSTD_freeCCtx(c);
  /* Stored as given, in a file whose name says zstd. */
  bc_writer_options wo = BC_WRITER_OPTIONS_INIT;
  wo.compression = BC_COMPRESSION_NONE;
  char *path = tu_join(f->dir, "nosize.bagz");
  tu_write_bag(path, &wo, &frames);
  bc_bag *bag = open_bag(path, NULL);
  uint64_t idx[] = {0, 39, 8, 10, 8};
  dest d = dest_new(5, ROW);
  TU_OK(bc_bag_read_into(bag, idx, 5, d.rows, ROW));
  for (size_t k = 0; k < 5; k++) dest_check_row(&d, k, idx[k]);
  dest_check_canaries(&d);
  uint64_t bad[] = {1, 9};
  TU_RC(bc_bag_read_into(bag, bad, 2, d.rows, ROW), BC_EINVAL);
  char *want = tu_format("record 9 (indices[1]) has %d bytes, not the row size %d", ROW + 8,
                         ROW);
  if (strstr(bc_errmsg(), want) == NULL) fail_msg("message: %s", bc_errmsg());
  dest_check_canaries(&d);
  free(want);
  dest_free(&d);
  bc_bag_close(bag);
  free(path);
  tu_records_free(&frames);
}

/* ---- frame shapes ------------------------------------------------------ */

#define FROW 4096 /* 2-byte content size fields (+256), and room for blocks */

/* A frame by hand (RFC 8878): magic, descriptor `desc`, the window byte
 * `window` when not single segment, `did` bytes of dictionary ID 0, the
 * content size in the field width the descriptor says, then the row as one
 * raw last block.  Returns its size. */
static size_t hand_frame(unsigned char *out, unsigned desc, unsigned window,
                         size_t did, uint64_t content, const unsigned char *row) {
  static const size_t fcs_bytes[4] = {0, 2, 4, 8};
  size_t n = 0;
  uint32_t magic = ZSTD_MAGICNUMBER;
  for (int b = 0; b < 4; b++) out[n++] = (unsigned char)(magic >> (8 * b));
  out[n++] = (unsigned char)desc;
  if (!(desc & 0x20)) out[n++] = (unsigned char)window;
  for (size_t b = 0; b < did; b++) out[n++] = 0;
  size_t fcs = (desc >> 6) == 0 ? (desc >> 5 & 1) : fcs_bytes[desc >> 6];
  uint64_t v = (desc >> 6) == 1 ? content - 256 : content;
  for (size_t b = 0; b < fcs; b++) out[n++] = (unsigned char)(v >> (8 * b));
  uint32_t bh = (uint32_t)FROW << 3 | 1; /* raw, last */
  for (int b = 0; b < 3; b++) out[n++] = (unsigned char)(bh >> (8 * b));
  memcpy(out + n, row, FROW);
  return n + FROW;
}

/* A skippable frame of `size` bytes of content, by hand. */
static size_t skippable_frame(unsigned char *out, const void *content, size_t size) {
  uint32_t magic = 0x184D2A50, n = (uint32_t)size;
  for (int b = 0; b < 4; b++) out[b] = (unsigned char)(magic >> (8 * b));
  for (int b = 0; b < 4; b++) out[4 + b] = (unsigned char)(n >> (8 * b));
  memcpy(out + 8, content, size);
  return 8 + size;
}

/* Record i of `bag` read both ways: bc_bag_get, and bc_bag_read_into as
 * row 1 of two (row 0 is record 0, a valid one read alongside). */
typedef struct {
  bc_buf got;
  int get_rc, rc;
  char get_msg[512]; /* get's message when it failed */
  dest d;
} both_reads;

static void read_both(bc_bag *bag, uint64_t i, both_reads *b) {
  b->got = (bc_buf)BC_BUF_INIT;
  b->get_rc = bc_bag_get(bag, i, &b->got);
  snprintf(b->get_msg, sizeof b->get_msg, "%s", b->get_rc != 0 ? bc_errmsg() : "");
  b->d = dest_new(2, FROW);
  uint64_t idx[2] = {0, i};
  b->rc = bc_bag_read_into(bag, idx, 2, b->d.rows, FROW);
  dest_check_canaries(&b->d);
}

/* Both reads gave rows[i] (and read_into row 0 too). */
static void expect_row(const both_reads *b, const unsigned char *rows, uint64_t i) {
  TU_OK(b->get_rc);
  assert_int_equal(b->got.size, FROW);
  assert_memory_equal(b->got.data, rows + i * FROW, FROW);
  TU_OK(b->rc);
  assert_memory_equal(b->d.rows, rows, FROW);
  assert_memory_equal(b->d.rows + FROW, rows + i * FROW, FROW);
}

/* Both reads failed with BC_ECORRUPT, read_into with the general decoder's
 * words after "indices[1] = i: ".  Returns those words (in b->get_msg). */
static const char *expect_same_corruption(const both_reads *b, uint64_t i) {
  if (b->get_rc != BC_ECORRUPT) fail_msg("record %d: get rc %d", (int)i, b->get_rc);
  if (b->rc != BC_ECORRUPT) fail_msg("record %d: read_into rc %d", (int)i, b->rc);
  const char *detail = strstr(b->get_msg, "record");
  assert_non_null(detail);
  if (strstr(bc_errmsg(), detail) == NULL || strstr(bc_errmsg(), "indices[1]") == NULL)
    fail_msg("record %d: read_into says \"%s\", get \"%s\"", (int)i, bc_errmsg(),
             b->get_msg);
  return detail;
}

static void both_reads_free(both_reads *b) {
  bc_error_clear();
  dest_free(&b->d);
  bc_buf_release(&b->got);
}

/* Records of every shape a frame header and its blocks can take, each read
 * into a row alone and through bc_bag_get (the general decoder): a frame
 * that is exactly one frame of FROW bytes of content reads into its row
 * byte for byte; anything else (bytes after the frame, a skippable frame
 * after it, a truncated one, a reserved bit or block type, a window too
 * large) is BC_ECORRUPT with the general decoder's message, and a
 * skippable frame alone is a record of 0 bytes, as bc_bag_get reads it,
 * and a header saying 65 bytes a record of 65 bytes, not the row size.  (read_into checks the common shapes itself before handing
 * the frame to zstd, and leaves the rest to the general checks.) */
static void test_frame_shapes(void **state) {
  fixture *f = *state;
  enum { NREC = 20 };
  unsigned char *rows = malloc((size_t)NREC * FROW);
  unsigned char *z = malloc(3 * FROW);
  assert_non_null(rows);
  assert_non_null(z);
  tu_rng r;
  tu_rng_seed(&r, 3);
  for (size_t i = 0; i < NREC; i++)
    for (size_t j = 0; j < FROW; j++)
      rows[i * FROW + j] = i % 3 == 0 ? (unsigned char)tu_rng_below(&r, 256)
                           : i % 3 == 1 ? (unsigned char)(j / 64 + i)
                                        : (unsigned char)(0x41 + i);
  bool valid[NREC];
  size_t empty = NREC; /* the record the general decoder reads as 0 bytes */
  size_t says65 = NREC; /* the record whose header says 65 bytes */
  tu_records recs = {0};
  ZSTD_CCtx *c = ZSTD_createCCtx();
  for (size_t i = 0; i < NREC; i++) {
    const unsigned char *row = rows + i * FROW;
    size_t n = 0;
    valid[i] = true;
    ZSTD_CCtx_reset(c, ZSTD_reset_session_and_parameters);
    switch (i) {
      case 0: /* raw block (random bytes) */
      case 1: /* compressed */
      case 2: /* RLE */
        n = ZSTD_compressCCtx(c, z, 3 * FROW, row, FROW, 3);
        break;
      case 3: /* checksum, window byte (window 1 KiB < content), 2 blocks */
      case 4:
      case 5: {
        assert_false(ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 1)));
        assert_false(ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_windowLog, 10)));
        assert_false(ZSTD_isError(ZSTD_CCtx_setPledgedSrcSize(c, FROW)));
        ZSTD_outBuffer o = {z, 3 * FROW, 0};
        ZSTD_inBuffer in = {row, FROW / 2, 0};
        assert_int_equal(ZSTD_compressStream2(c, &o, &in, ZSTD_e_flush), 0);
        ZSTD_inBuffer rest = {row + FROW / 2, FROW / 2, 0};
        assert_int_equal(ZSTD_compressStream2(c, &o, &rest, ZSTD_e_end), 0);
        n = o.pos;
        assert_true(ZSTD_getFrameContentSize(z, n) == FROW);
        assert_int_equal(z[4] & 0x24, 0x04); /* checksum, not single segment */
        break;
      }
      case 6: /* 4-byte content size, single segment */
        n = hand_frame(z, 0x80 | 0x20, 0, 0, FROW, row);
        break;
      case 7: /* 8-byte content size, window byte, 4-byte dictionary ID 0 */
        n = hand_frame(z, 0xC0 | 0x03, 12 << 3 /* log 22 */, 4, FROW, row);
        break;
      case 8: /* 2-byte content size, 1-byte dictionary ID 0, window byte */
        n = hand_frame(z, 0x40 | 0x01, 2 << 3, 1, FROW, row);
        break;
      case 9: /* a frame then an empty frame */
        n = ZSTD_compressCCtx(c, z, 3 * FROW, row, FROW, 3);
        n += ZSTD_compressCCtx(c, z + n, 3 * FROW - n, row, 0, 3);
        valid[i] = false;
        break;
      case 10: /* a frame then a skippable frame */
        n = ZSTD_compressCCtx(c, z, 3 * FROW, row, FROW, 3);
        n += skippable_frame(z + n, "skip", 4);
        valid[i] = false;
        break;
      case 11: /* a frame then one stray byte */
        n = hand_frame(z, 0x40 | 0x20, 0, 0, FROW, row);
        z[n++] = 0;
        valid[i] = false;
        break;
      case 12: /* truncated by one byte */
        n = hand_frame(z, 0x40 | 0x20, 0, 0, FROW, row) - 1;
        valid[i] = false;
        break;
      case 13: /* the reserved descriptor bit */
        n = hand_frame(z, 0x40 | 0x20 | 0x08, 0, 0, FROW, row);
        valid[i] = false;
        break;
      case 14: /* a window log of 41 */
        n = hand_frame(z, 0x40, 31 << 3, 0, FROW, row);
        valid[i] = false;
        break;
      case 15: /* the reserved block type */
        n = hand_frame(z, 0x40 | 0x20, 0, 0, FROW, row);
        z[7] |= 0x06;
        valid[i] = false;
        break;
      case 16: /* a skippable frame alone: no content, 0 bytes (as zstd) */
        n = skippable_frame(z, row, FROW);
        valid[i] = false;
        empty = i;
        break;
      case 17: /* a last-block bit missing: the frame runs past the record */
        n = hand_frame(z, 0x40 | 0x20, 0, 0, FROW, row);
        z[7] &= 0xFE;
        valid[i] = false;
        break;
      case 18: /* checksum flag without its 4 bytes */
        n = hand_frame(z, 0x40 | 0x20 | 0x04, 0, 0, FROW, row);
        valid[i] = false;
        break;
      default: /* a 1-byte content size field (single segment) saying 65:
                * the row check goes by the header, before decoding */
        n = hand_frame(z, 0x20, 0, 0, 65, row);
        valid[i] = false;
        says65 = i;
        break;
    }
    assert_false(ZSTD_isError(n));
    tu_records_add(&recs, z, n);
  }
  ZSTD_freeCCtx(c);
  bc_writer_options wo = BC_WRITER_OPTIONS_INIT;
  wo.compression = BC_COMPRESSION_NONE; /* the frames as they are */
  char *path = tu_join(f->dir, "shapes.bagz");
  tu_write_bag(path, &wo, &recs);
  bc_bag *bag = open_bag(path, NULL);
  for (uint64_t i = 0; i < NREC; i++) {
    both_reads b;
    read_both(bag, i, &b);
    if (valid[i]) {
      expect_row(&b, rows, i);
    } else if (i == says65) {
      TU_RC(b.rc, BC_EINVAL);
      assert_non_null(strstr(bc_errmsg(), "has 65 bytes, not the row size"));
    } else if (i == empty) {
      TU_OK(b.get_rc);
      assert_int_equal(b.got.size, 0);
      TU_RC(b.rc, BC_EINVAL);
      assert_non_null(strstr(bc_errmsg(), "has 0 bytes, not the row size"));
    } else {
      expect_same_corruption(&b, i);
    }
    both_reads_free(&b);
  }
  bc_bag_close(bag);
  free(path);
  tu_records_free(&recs);
  free(rows);
  free(z);
}

/* ---- decoding errors and limits ---------------------------------------- */

/* The checks around zstd's own decoder on the compressed path: rows larger
 * than a block (up to 300 KiB) read byte for byte, bagcache writing them
 * (its bagz CDict) and a reader with the default limits; a damaged
 * compressed block and a frame whose header says more bytes than its
 * blocks hold are BC_ECORRUPT with the general decoder's words ("invalid
 * zstd data: ..."), the row untouched; and a row above the reader's
 * max_record_size is refused before decoding with "claims N bytes (limit
 * M)", as bc_bag_get says it. */
static void test_decode_errors_and_limits(void **state) {
  fixture *f = *state;
  enum { BIG = 300 * 1024, SMALL = 3072 };
  unsigned char *row = malloc(BIG), *z = malloc(ZSTD_compressBound(BIG));
  assert_non_null(row);
  assert_non_null(z);
  for (size_t j = 0; j < BIG; j++) row[j] = (unsigned char)(j / 97 + (j % 7 == 0 ? j : 0));
  /* Rows of BIG bytes, written compressed by bagcache. */
  tu_records big = {0};
  for (size_t i = 0; i < 3; i++) {
    row[i] ^= 0x5A;
    tu_records_add(&big, row, BIG);
    row[i] ^= 0x5A;
  }
  bc_writer_options wo = BC_WRITER_OPTIONS_INIT;
  wo.compression = BC_COMPRESSION_ZSTD;
  char *path = tu_join(f->dir, "big.bagz");
  tu_write_bag(path, &wo, &big);
  bc_bag *bag = open_bag(path, NULL);
  dest d = dest_new(2, BIG);
  uint64_t idx[2] = {2, 0};
  TU_OK(bc_bag_read_into(bag, idx, 2, d.rows, BIG));
  for (size_t k = 0; k < 2; k++) {
    row[idx[k]] ^= 0x5A;
    assert_memory_equal(d.rows + k * BIG, row, BIG);
    row[idx[k]] ^= 0x5A;
  }
  dest_check_canaries(&d);
  bc_bag_close(bag);
  /* The same file with a limit below the row. */
  bc_reader_options ro = BC_READER_OPTIONS_INIT;
  ro.max_record_size = BIG - 1;
  bag = open_bag(path, &ro);
  bc_buf got = BC_BUF_INIT;
  TU_RC(bc_bag_get(bag, 1, &got), BC_ECORRUPT);
  char *want = tu_format("record 1: zstd frame claims %d bytes (limit %d)", BIG, BIG - 1);
  if (strstr(bc_errmsg(), want) == NULL) fail_msg("get: %s", bc_errmsg());
  memset(d.rows, FILL, 2 * (size_t)BIG);
  idx[0] = 1;
  TU_RC(bc_bag_read_into(bag, idx, 1, d.rows, BIG), BC_ECORRUPT);
  if (strstr(bc_errmsg(), want) == NULL || strstr(bc_errmsg(), "indices[0] = 1") == NULL)
    fail_msg("read_into: %s", bc_errmsg());
  dest_check_untouched(&d, 0);
  dest_check_canaries(&d);
  free(want);
  bc_bag_close(bag);
  dest_free(&d);
  free(path);
  tu_records_free(&big);

  /* Rows of SMALL bytes: 0 valid, 1 a damaged block, 2 a header saying
   * one byte more than the blocks hold (raw blocks, so zstd decodes it). */
  tu_records recs = {0};
  size_t n = ZSTD_compress(z, ZSTD_compressBound(SMALL), row, SMALL, 3);
  assert_false(ZSTD_isError(n));
  assert_true(n < SMALL / 2); /* compressed blocks, not one raw block */
  tu_records_add(&recs, z, n);
  unsigned char *bad = malloc(n);
  assert_non_null(bad);
  memcpy(bad, z, n);
  for (size_t k = n / 2; k < n - 2; k++) bad[k] ^= 0xFF;
  tu_records_add(&recs, bad, n);
  free(bad);
  /* Single segment, 2-byte content size SMALL + 1, one raw last block of
   * SMALL bytes. */
  unsigned char h[10 + SMALL];
  size_t m = 0;
  for (int b = 0; b < 4; b++) h[m++] = (unsigned char)(ZSTD_MAGICNUMBER >> (8 * b));
  h[m++] = 0x40 | 0x20;
  h[m++] = (unsigned char)((SMALL + 1 - 256) & 0xFF);
  h[m++] = (unsigned char)((SMALL + 1 - 256) >> 8);
  uint32_t bh = (uint32_t)SMALL << 3 | 1;
  for (int b = 0; b < 3; b++) h[m++] = (unsigned char)(bh >> (8 * b));
  memcpy(h + m, row, SMALL);
  tu_records_add(&recs, h, m + SMALL);
  wo.compression = BC_COMPRESSION_NONE; /* the frames as they are */
  path = tu_join(f->dir, "damaged.bagz");
  tu_write_bag(path, &wo, &recs);
  bag = open_bag(path, NULL);
  d = dest_new(2, SMALL);
  idx[0] = 0;
  idx[1] = 0;
  TU_OK(bc_bag_read_into(bag, idx, 2, d.rows, SMALL));
  assert_memory_equal(d.rows, row, SMALL);
  assert_memory_equal(d.rows + SMALL, row, SMALL);
  uint64_t bad_idx[2] = {1, 2};
  size_t bad_size[2] = {SMALL, SMALL + 1};
  for (size_t k = 0; k < 2; k++) {
    TU_RC(bc_bag_get(bag, bad_idx[k], &got), BC_ECORRUPT);
    const char *detail = strstr(bc_errmsg(), "record");
    assert_non_null(detail);
    char *get_msg = tu_format("%s", detail);
    assert_non_null(strstr(get_msg, "invalid zstd data: "));
    dest e = dest_new(2, bad_size[k]);
    uint64_t two[2] = {0, bad_idx[k]};
    int rc = bc_bag_read_into(bag, two, 2, e.rows, bad_size[k]);
    if (k == 0) {
      TU_RC(rc, BC_ECORRUPT);
      if (strstr(bc_errmsg(), get_msg) == NULL || strstr(bc_errmsg(), "indices[1]") == NULL)
        fail_msg("read_into says \"%s\", get \"%s\"", bc_errmsg(), get_msg);
    } else { /* record 0 has SMALL bytes, not SMALL + 1: the first failure */
      TU_RC(rc, BC_EINVAL);
      assert_non_null(strstr(bc_errmsg(), "indices[0]"));
      uint64_t one = bad_idx[k];
      TU_RC(bc_bag_read_into(bag, &one, 1, e.rows, bad_size[k]), BC_ECORRUPT);
      if (strstr(bc_errmsg(), get_msg) == NULL)
        fail_msg("read_into says \"%s\", get \"%s\"", bc_errmsg(), get_msg);
    }
    dest_check_canaries(&e);
    free(get_msg);
    dest_free(&e);
    bc_error_clear();
  }
  bc_buf_release(&got);
  bc_bag_close(bag);
  dest_free(&d);
  free(path);
  tu_records_free(&recs);
  free(row);
  free(z);
}

/* ---- bad indices and arguments ----------------------------------------- */

static void test_out_of_range(void **state) {
  fixture *f = *state;
  const char *exts[] = {".bag", ".bagz"};
  for (size_t e = 0; e < 2; e++) {
    char *name = tu_format("r%zu", e);
    char *spec = write_shards(f, name, exts[e], 50, 2, SIZE_MAX, 0);
    bc_bag *bag = open_bag(spec, NULL);
    uint64_t idx[] = {0, 49, 50, 3};
    dest d = dest_new(4, ROW);
    TU_RC(bc_bag_read_into(bag, idx, 4, d.rows, ROW), BC_ERANGE);
    assert_non_null(strstr(bc_errmsg(), "indices[2] = 50 out of range [0, 50)"));
    for (size_t k = 0; k < 4; k++) dest_check_untouched(&d, k); /* checked first */
    dest_check_canaries(&d);
    bc_seq *seq = NULL;
    TU_OK(bc_seq_wrap_bag(&seq, bag));
    int64_t sidx[] = {0, -50, -51, 3};
    TU_RC(bc_seq_read_into(seq, sidx, 4, d.rows, ROW, 0), BC_ERANGE);
    assert_non_null(strstr(bc_errmsg(), "indices[2] = -51"));
    int64_t big[] = {1, INT64_MAX};
    TU_RC(bc_seq_read_into(seq, big, 2, d.rows, ROW, 0), BC_ERANGE);
    assert_non_null(strstr(bc_errmsg(), "indices[1] = 9223372036854775807"));
    dest_check_canaries(&d);
    dest_free(&d);
    bc_seq_unref(seq);
    free(spec);
    free(name);
  }
}

static void test_arguments(void **state) {
  fixture *f = *state;
  char *spec = write_shards(f, "args", ".bag", 10, 1, SIZE_MAX, 0);
  bc_seq *seq = NULL;
  TU_OK(bc_seq_open_bag(&seq, spec, NULL));
  int64_t idx[] = {1, 2};
  uint64_t uidx[] = {1, 2};
  unsigned char row[2 * ROW];
  TU_RC(bc_seq_read_into(seq, idx, 2, NULL, ROW, 0), BC_EINVAL);
  TU_RC(bc_seq_read_into(seq, NULL, 2, row, ROW, 0), BC_EINVAL);
  TU_RC(bc_seq_read_into(seq, idx, 2, row, ROW, -1), BC_EINVAL);
  TU_RC(bc_seq_read_into(seq, idx, SIZE_MAX / 2, row, 3, 0), BC_EINVAL);
  assert_non_null(strstr(bc_errmsg(), "overflow"));
  TU_RC(bc_bag_read_into(bc_seq_bag(seq), uidx, 2, NULL, ROW), BC_EINVAL);
  TU_RC(bc_bag_read_into(bc_seq_bag(seq), uidx, SIZE_MAX / 2, row, 3), BC_EINVAL);
  TU_OK(bc_seq_read_into(seq, idx, 0, NULL, ROW, 0)); /* nothing to read */
  TU_OK(bc_bag_read_into(bc_seq_bag(seq), uidx, 0, NULL, ROW));
  bc_seq_unref(seq);
  free(spec);
}

/* ---- checksums and damage ----------------------------------------------- */

/* A one-shard bag with a CRC-32C sidecar (as the cache's .bag shards):
 * rows are checked as they are copied; a wrong checksum is BC_ECORRUPT
 * naming the request. */
static void test_checksums(void **state) {
  fixture *f = *state;
  char *spec = write_shards(f, "crc", ".bag", 30, 1, SIZE_MAX, 0);
  char *bagpath = tu_format("%s/crc-00000-of-00001.bag", f->dir);
  size_t records_bytes = 30 * ROW;
  unsigned char side[BC__CRC_HEADER + 4 * 30];
  bc__crc_table_header(side, 30, records_bytes);
  for (uint64_t i = 0; i < 30; i++) {
    unsigned char row[ROW];
    model_row(i, ROW, row);
    uint32_t c = bc__crc32c(0, row, ROW);
    if (i == 17) c ^= 1; /* damaged */
    for (int b = 0; b < 4; b++) side[BC__CRC_HEADER + 4 * i + b] = (unsigned char)(c >> (8 * b));
  }
  char *sidecar = tu_join(f->dir, "crc.crc");
  tu_write_file(sidecar, side, sizeof side);
  bc_bag *bag = open_bag(bagpath, NULL);
  TU_OK(bc__bag_attach_crcs(bag, sidecar));
  uint64_t idx[] = {0, 29, 16, 18};
  dest d = dest_new(4, ROW);
  TU_OK(bc_bag_read_into(bag, idx, 4, d.rows, ROW));
  for (size_t k = 0; k < 4; k++) dest_check_row(&d, k, idx[k]);
  uint64_t bad[] = {1, 17};
  TU_RC(bc_bag_read_into(bag, bad, 2, d.rows, ROW), BC_ECORRUPT);
  assert_non_null(strstr(bc_errmsg(), "indices[1] = 17"));
  dest_check_canaries(&d);
  dest_free(&d);
  bc_bag_close(bag);
  free(sidecar);
  free(bagpath);
  free(spec);
}

/* Frames of one stored (raw) block, which read_into copies itself instead
 * of calling zstd (codec.c's decode_into): with zstd's checksum, right or
 * wrong, the content changed under a right checksum, and the shapes it
 * leaves to zstd (a dictionary ID field, two stored blocks, no single
 * segment): each reads into its row exactly as bc_bag_get reads it, and
 * fails with the same words. */
static void test_stored_frames(void **state) {
  fixture *f = *state;
  enum { NREC = 7 };
  unsigned char *rows = malloc((size_t)NREC * FROW);
  unsigned char *z = malloc(3 * FROW);
  assert_non_null(rows);
  assert_non_null(z);
  tu_rng r;
  tu_rng_seed(&r, 9);
  for (size_t j = 0; j < (size_t)NREC * FROW; j++) rows[j] = (unsigned char)tu_rng_below(&r, 256);
  bool valid[NREC] = {true, false, false, true, true, true, true};
  tu_records recs = {0};
  ZSTD_CCtx *c = ZSTD_createCCtx();
  for (size_t i = 0; i < NREC; i++) {
    const unsigned char *row = rows + i * FROW;
    size_t n = 0;
    ZSTD_CCtx_reset(c, ZSTD_reset_session_and_parameters);
    if (i <= 2) { /* zstd's own stored frame, with its checksum */
      assert_false(ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 1)));
      n = ZSTD_compress2(c, z, 3 * FROW, row, FROW);
      assert_false(ZSTD_isError(n));
      assert_int_equal(z[4] & 0x27, 0x24); /* single segment, checksum, no dict ID */
      assert_int_equal(n, 4 + 1 + 2 + 3 + FROW + 4);
      assert_int_equal(z[7] & 7, 1); /* one last raw block */
      if (i == 1) z[n - 1] ^= 0x40;  /* the checksum wrong */
      if (i == 2) z[10 + 77] ^= 0x01; /* the content changed */
    } else if (i == 3) { /* a 1-byte dictionary ID field (0): zstd's to read */
      n = hand_frame(z, 0x40 | 0x20 | 0x01, 0, 1, FROW, row);
    } else if (i == 4) { /* not single segment (a window byte): zstd's */
      n = hand_frame(z, 0x40, 12 << 3, 0, FROW, row);
    } else if (i == 5) { /* two stored blocks: zstd's */
      n = hand_frame(z, 0x40 | 0x20, 0, 0, FROW, row);
      size_t at = 4 + 1 + 2; /* the block header */
      uint32_t first = (uint32_t)(FROW / 2) << 3, second = (uint32_t)(FROW / 2) << 3 | 1;
      memmove(z + at + 3 + FROW / 2 + 3, z + at + 3 + FROW / 2, FROW / 2);
      for (int b = 0; b < 3; b++) z[at + b] = (unsigned char)(first >> (8 * b));
      for (int b = 0; b < 3; b++) z[at + 3 + FROW / 2 + b] = (unsigned char)(second >> (8 * b));
      n += 3;
    } else { /* zstd's stored frame without a checksum */
      n = ZSTD_compress2(c, z, 3 * FROW, row, FROW);
      assert_false(ZSTD_isError(n));
      assert_int_equal(z[4] & 0x27, 0x20);
    }
    tu_records_add(&recs, z, n);
  }
  ZSTD_freeCCtx(c);
  bc_writer_options wo = BC_WRITER_OPTIONS_INIT;
  wo.compression = BC_COMPRESSION_NONE; /* the frames as they are */
  char *path = tu_join(f->dir, "stored.bagz");
  tu_write_bag(path, &wo, &recs);
  bc_bag *bag = open_bag(path, NULL);
  for (uint64_t i = 0; i < NREC; i++) {
    both_reads b;
    read_both(bag, i, &b);
    if (valid[i])
      expect_row(&b, rows, i);
    else
      assert_non_null(strstr(expect_same_corruption(&b, i), "checksum"));
    both_reads_free(&b);
  }
  bc_bag_close(bag);
  free(path);
  tu_records_free(&recs);
  free(z);
  free(rows);
}

/* A shard that shrinks under its mapping: BC_ECORRUPT naming that file,
 * not a crash. */
static void test_file_shrank(void **state) {
  fixture *f = *state;
  char *spec = write_shards(f, "shrink", ".bag", 200, 2, SIZE_MAX, 0);
  bc_bag *bag = open_bag(spec, NULL);
  char *second = tu_format("%s/shrink-00001-of-00002.bag", f->dir);
  assert_int_equal(truncate(second, 0), 0);
  uint64_t idx[] = {5, 150};
  dest d = dest_new(2, ROW);
  TU_RC(bc_bag_read_into(bag, idx, 2, d.rows, ROW), BC_ECORRUPT);
  assert_non_null(strstr(bc_errmsg(), "indices[1] = 150"));
  assert_non_null(strstr(bc_errmsg(), "shrink-00001-of-00002.bag"));
  dest_check_canaries(&d);
  /* The first shard still reads. */
  uint64_t first[] = {5, 99};
  TU_OK(bc_bag_read_into(bag, first, 2, d.rows, ROW));
  dest_check_row(&d, 0, 5);
  dest_check_row(&d, 1, 99);
  dest_free(&d);
  bc_bag_close(bag);
  free(second);
  free(spec);
}

/* ---- views and other leaves ---------------------------------------------- */

/* Through views over two bags (.bag and .bagz): positions grouped by leaf,
 * each row where its position says; compared with bc_seq_get. */
static void test_views(void **state) {
  fixture *f = *state;
  char *a = write_shards(f, "va", ".bag", 60, 2, SIZE_MAX, 0);
  char *b = write_shards(f, "vb", ".bagz", 60, 1, SIZE_MAX, 0);
  bc_seq *parts[2] = {NULL, NULL}, *cat = NULL, *shuf = NULL, *sl = NULL;
  TU_OK(bc_seq_open_bag(&parts[0], a, NULL));
  TU_OK(bc_seq_open_bag(&parts[1], b, NULL));
  TU_OK(bc_seq_concat(&cat, parts, 2));
  TU_OK(bc_seq_shuffle(&shuf, cat, 11));
  TU_OK(bc_seq_slice(&sl, shuf, 100, 10, -3));
  bc_seq *views[] = {cat, shuf, sl};
  for (size_t v = 0; v < 3; v++) {
    uint64_t len;
    TU_OK(bc_seq_len(views[v], &len));
    int64_t idx[64];
    for (size_t k = 0; k < 64; k++) idx[k] = (int64_t)((k * 37 + v) % len);
    idx[5] = -1;
    for (int par = 0; par <= 1; par++) {
      dest d = dest_new(64, ROW);
      TU_OK(bc_seq_read_into(views[v], idx, 64, d.rows, ROW, par));
      dest_check_canaries(&d);
      bc_buf one = BC_BUF_INIT;
      for (size_t k = 0; k < 64; k++) {
        TU_OK(bc_seq_get(views[v], idx[k], &one));
        tu_assert_bytes(d.rows + k * ROW, ROW, one.data, one.size, "a row through a view");
      }
      bc_buf_release(&one);
      dest_free(&d);
    }
  }
  /* A wrong row size through a view names the view's index. */
  int64_t idx[] = {3, 7};
  unsigned char rows[2 * (ROW - 1)];
  TU_RC(bc_seq_read_into(shuf, idx, 2, rows, ROW - 1, 0), BC_EINVAL);
  char *want = tu_format("record 3 (indices[0]) has %d bytes, not the row size %d", ROW,
                         ROW - 1);
  if (strstr(bc_errmsg(), want) == NULL) fail_msg("message: %s", bc_errmsg());
  free(want);
  for (size_t v = 0; v < 3; v++) bc_seq_unref(views[v]);
  bc_seq_unref(parts[0]);
  bc_seq_unref(parts[1]);
  free(a);
  free(b);
}

/* A foreign leaf with a version-1 operations table (no read_into): read
 * with get and copied. */
typedef struct {
  bc_seq base;
  size_t len;
} v1_leaf;

static int v1_length(bc_seq *self, bool exact, bc_len *out) {
  (void)exact;
  *out = (bc_len){BC_LEN_EXACT, ((v1_leaf *)self)->len};
  return 0;
}

static int v1_get(bc_seq *self, uint64_t index, bc_buf *out) {
  if (index >= ((v1_leaf *)self)->len) return bc_set_errmsg(BC_ERANGE, "v1: out of range");
  size_t size = index == 13 ? ROW + 2 : ROW;
  if (out->capacity < size) {
    unsigned char *p = realloc(out->data, size);
    if (p == NULL) return bc_set_errmsg(BC_ENOMEM, "out of memory");
    out->data = p;
    out->capacity = size;
  }
  model_row(index, size, out->data);
  out->size = size;
  return 0;
}

static void v1_destroy(bc_seq *self) { free(self); }

/* A table as a program built against version 1 declares it: it ends
 * before read_into, so read_into must not be looked at. */
typedef struct {
  unsigned version;
  const char *type_name;
  int (*length)(bc_seq *, bool, bc_len *);
  int (*resolve)(bc_seq *, uint64_t, bc_seq **, uint64_t *);
  int (*get)(bc_seq *, uint64_t, bc_buf *);
  int (*get_many)(bc_seq *, const uint64_t *, size_t, bc_buf *);
  void (*destroy)(bc_seq *);
} ops_v1;

static void test_foreign_leaf_version_1(void **state) {
  (void)state;
  /* The table followed by a poisoned word where version 2's read_into
   * would be: calling it would crash. */
  static struct {
    ops_v1 ops;
    void *poison;
  } table = {{1, "v1", v1_length, NULL, v1_get, NULL, v1_destroy}, (void *)0x1};
  v1_leaf *leaf = calloc(1, sizeof *leaf);
  leaf->len = 40;
  TU_OK(bc_seq_init(&leaf->base, (const bc_seq_ops *)&table.ops, BC_SEQ_F_THREAD_SAFE));
  int64_t idx[] = {0, 39, 12, 14, -2, 12};
  for (int par = 0; par <= 2; par++) {
    dest d = dest_new(6, ROW);
    TU_OK(bc_seq_read_into(&leaf->base, idx, 6, d.rows, ROW, par));
    uint64_t want[] = {0, 39, 12, 14, 38, 12};
    for (size_t k = 0; k < 6; k++) dest_check_row(&d, k, want[k]);
    dest_check_canaries(&d);
    int64_t bad[] = {0, 13, 40};
    TU_RC(bc_seq_read_into(&leaf->base, bad, 3, d.rows, ROW, par), BC_EINVAL);
    assert_non_null(strstr(bc_errmsg(), "record 13 (indices[1]) has 50 bytes, not the row size 48"));
    dest_check_canaries(&d);
    dest_free(&d);
  }
  bc_seq_unref(&leaf->base);
  /* Versions past the library's are refused. */
  ops_v1 future = {BC_SEQ_OPS_VERSION + 1, "future", v1_length, NULL, v1_get, NULL,
                   v1_destroy};
  v1_leaf other;
  TU_RC(bc_seq_init(&other.base, (const bc_seq_ops *)&future, 0), BC_EINVAL);
}

/* A cache-backed sequence (fixed-size records of the test source, 32
 * bytes): rows filled through the cache, each equal to the model. */
static void test_cache_backed(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(95);
  cfg.fixed = true;
  ts_shared *sh = ts_shared_new(&cfg);
  assert_non_null(sh);
  bc_source src = ts_source(&cfg, sh);
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = 10;
  o.prefetch_shards = -1;
  char *root = tu_join(f->dir, "cache");
  bc_cache *c = NULL;
  TU_OK(bc_cache_open(&c, root, &src, &o));
  bc_seq *seq = bc_cache_seq(c), *sl = NULL;
  TU_OK(bc_seq_slice(&sl, seq, 90, 2, -4));
  unsigned char rec[TS_MAX_RECORD];
  size_t row = ts_record(0, true, 0, rec);
  assert_int_equal(row, 32);
  int64_t idx[] = {94, 0, 57, 3, 57, 41};
  for (int par = 0; par <= 1; par++) {
    dest d = dest_new(6, row);
    TU_OK(bc_seq_read_into(seq, idx, 6, d.rows, row, par));
    for (size_t k = 0; k < 6; k++) {
      size_t n = ts_record((uint64_t)idx[k], true, 0, rec);
      tu_assert_bytes(d.rows + k * row, row, rec, n, "a cached row");
    }
    dest_check_canaries(&d);
    dest_free(&d);
  }
  /* Through a slice of it: element k is record 90 - 4k. */
  int64_t sidx[] = {0, 21, 7};
  dest d = dest_new(3, row);
  TU_OK(bc_seq_read_into(sl, sidx, 3, d.rows, row, 0));
  for (size_t k = 0; k < 3; k++) {
    size_t n = ts_record(90 - 4 * (uint64_t)sidx[k], true, 0, rec);
    tu_assert_bytes(d.rows + k * row, row, rec, n, "a cached row through a slice");
  }
  dest_check_canaries(&d);
  /* Past the source's end, and a row size the records do not have. */
  int64_t past[] = {1, 95};
  TU_RC(bc_seq_read_into(seq, past, 2, d.rows, row, 0), BC_ERANGE);
  assert_non_null(strstr(bc_errmsg(), "indices[1] = 95"));
  TU_RC(bc_seq_read_into(seq, idx, 2, d.rows, row - 1, 0), BC_EINVAL);
  assert_non_null(strstr(bc_errmsg(), "record 94 (indices[0]) has 32 bytes, not the row size 31"));
  dest_check_canaries(&d);
  dest_free(&d);
  bc_seq_unref(sl);
  bc_cache_close(c);
  ts_shared_free(sh);
  free(root);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_bag_one_shard, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bag_many_shards, setup, teardown),
      cmocka_unit_test_setup_teardown(test_uneven_shards, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bagz, setup, teardown),
      cmocka_unit_test_setup_teardown(test_other_backends, setup, teardown),
      cmocka_unit_test_setup_teardown(test_empty_rows, setup, teardown),
      cmocka_unit_test_setup_teardown(test_wrong_sizes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_frames_without_content_size, setup, teardown),
      cmocka_unit_test_setup_teardown(test_frame_shapes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_stored_frames, setup, teardown),
      cmocka_unit_test_setup_teardown(test_decode_errors_and_limits, setup, teardown),
      cmocka_unit_test_setup_teardown(test_out_of_range, setup, teardown),
      cmocka_unit_test_setup_teardown(test_arguments, setup, teardown),
      cmocka_unit_test_setup_teardown(test_checksums, setup, teardown),
      cmocka_unit_test_setup_teardown(test_file_shrank, setup, teardown),
      cmocka_unit_test_setup_teardown(test_views, setup, teardown),
      cmocka_unit_test_setup_teardown(test_foreign_leaf_version_1, setup, teardown),
      cmocka_unit_test_setup_teardown(test_cache_backed, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
