/*
 * fuzz_writer.c - the writer round-trip property of the bag fuzzer.
 *
 * The input's first byte is a separator; the rest, split at every separator,
 * is a list of records (empty ones included).  Writing them with bc_writer
 * must publish exactly the bytes bagz would write - records (or, for zstd,
 * one ZSTD_compress_usingCDict frame per non-empty record) followed by, or
 * beside, the u64 LE end offsets - leave no temporary file behind, and read
 * back record for record.
 */
#include "config.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#include "fuzz.h"

#define FZ_MAX_WRITTEN 2048

typedef struct fz_bytes {
  unsigned char *data;
  size_t size, cap;
} fz_bytes;

static void bytes_append(fz_bytes *b, const void *data, size_t size) {
  if (size == 0) return;
  if (b->size + size > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->size + size) cap *= 2;
    unsigned char *p = realloc(b->data, cap);
    FZ_CHECK(p != NULL, "out of memory");
    b->data = p;
    b->cap = cap;
  }
  memcpy(b->data + b->size, data, size);
  b->size += size;
}

/* The frame bagz writes for a non-empty record at `level`: a CDict made
 * from no dictionary, then ZSTD_compress_usingCDict. */
static void reference_frame(fz_bytes *out, const void *src, size_t size,
                            int level) {
  static ZSTD_CCtx *cctx;
  static ZSTD_CDict *cdicts[2];
  FZ_CHECK(level == 0 || level == 1, "level %d", level);
  if (cctx == NULL) {
    cctx = ZSTD_createCCtx();
    FZ_CHECK(cctx != NULL, "ZSTD_createCCtx failed");
  }
  if (cdicts[level] == NULL) {
    cdicts[level] = ZSTD_createCDict(NULL, 0, level);
    FZ_CHECK(cdicts[level] != NULL, "ZSTD_createCDict failed");
  }
  size_t bound = ZSTD_compressBound(size);
  unsigned char *dst = malloc(bound);
  FZ_CHECK(dst != NULL, "out of memory");
  size_t n = ZSTD_compress_usingCDict(cctx, dst, bound, src, size,
                                      cdicts[level]);
  FZ_CHECK(!ZSTD_isError(n), "ZSTD_compress_usingCDict: %s",
           ZSTD_getErrorName(n));
  bytes_append(out, dst, n);
  free(dst);
}

/* Only the reader's two files and the writer's published ones may exist. */
static void check_no_strays(bool separate) {
  DIR *d = opendir(fz_dir());
  FZ_CHECK(d != NULL, "opendir(%s)", fz_dir());
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    const char *name = e->d_name;
    bool known = strcmp(name, ".") == 0 || strcmp(name, "..") == 0 ||
                 strcmp(name, "x.bag") == 0 ||
                 strcmp(name, "limits.x.bag") == 0 ||
                 strcmp(name, "w.bag") == 0 ||
                 (separate && strcmp(name, "limits.w.bag") == 0);
    FZ_CHECK(known, "after bc_writer_close the directory holds \"%s\"", name);
  }
  closedir(d);
}

static void check_file(const char *path, const fz_bytes *want) {
  unsigned char *got = NULL;
  size_t size = 0;
  FZ_CHECK(fz_read_file(path, &got, &size), "%s was not published", path);
  FZ_CHECK(size == want->size &&
               (size == 0 || memcmp(got, want->data, size) == 0),
           "%s: %zu bytes differ from the %zu bytes bagz would write", path,
           size, want->size);
  free(got);
}

void fz_writer_round_trip(const uint8_t *data, size_t size, bool separate,
                          bool zstd, int level,
                          const bc_reader_options *read_opts) {
  if (size == 0) return;
  uint8_t sep = data[0];
  const uint8_t *p = data + 1, *end = data + size;

  /* Records: the pieces between separators (the last one may be empty). */
  const uint8_t *starts[FZ_MAX_WRITTEN];
  size_t lens[FZ_MAX_WRITTEN];
  size_t count = 0;
  while (count < FZ_MAX_WRITTEN) {
    const uint8_t *q = p;
    while (q < end && *q != sep) q++;
    starts[count] = p;
    lens[count] = (size_t)(q - p);
    count++;
    if (q == end) break;
    p = q + 1;
  }

  const char *path = fz_path(2, "w.bag");
  const char *lim_path = fz_path(3, "limits.w.bag");
  fz_unlink(path);
  fz_unlink(lim_path);

  bc_writer_options wo = BC_WRITER_OPTIONS_INIT;
  wo.limits_placement = separate ? BC_LIMITS_SEPARATE : BC_LIMITS_TAIL;
  wo.compression = zstd ? BC_COMPRESSION_ZSTD : BC_COMPRESSION_NONE;
  if (zstd) wo.zstd_level = level; /* a level without zstd is BC_EINVAL */
  bc_writer *w = NULL;
  int rc = bc_writer_open(&w, path, &wo);
  FZ_CHECK(rc == 0, "bc_writer_open: %s (%s)", bc_error_name(rc), bc_errmsg());

  fz_bytes records = {NULL, 0, 0}, limits = {NULL, 0, 0};
  for (size_t i = 0; i < count; i++) {
    rc = bc_writer_write(w, starts[i], lens[i]);
    FZ_CHECK(rc == 0, "bc_writer_write(%zu): %s (%s)", i, bc_error_name(rc),
             bc_errmsg());
    if (zstd && lens[i] > 0)
      reference_frame(&records, starts[i], lens[i], level);
    else if (!zstd)
      bytes_append(&records, starts[i], lens[i]);
    unsigned char lim[8];
    fz_store_u64le(lim, records.size);
    bytes_append(&limits, lim, 8);
  }
  FZ_CHECK(bc_writer_count(w) == count, "bc_writer_count = %llu, wrote %zu",
           (unsigned long long)bc_writer_count(w), count);
  FZ_CHECK(bc_writer_records_bytes(w) == records.size,
           "bc_writer_records_bytes = %llu, want %zu",
           (unsigned long long)bc_writer_records_bytes(w), records.size);
  FZ_CHECK(access(path, F_OK) != 0, "%s is visible before bc_writer_close",
           path);
  rc = bc_writer_close(w);
  FZ_CHECK(rc == 0, "bc_writer_close: %s (%s)", bc_error_name(rc),
           bc_errmsg());
  FZ_CHECK(bc_writer_close(w) == 0, "a second bc_writer_close must repeat 0");
  rc = bc_writer_write(w, "x", 1);
  FZ_CHECK(rc == BC_ECLOSED, "bc_writer_write after close gave %s",
           bc_error_name(rc));
  bc_writer_free(w);

  if (separate) {
    check_file(path, &records);
    check_file(lim_path, &limits);
  } else {
    fz_bytes file = {NULL, 0, 0};
    bytes_append(&file, records.data, records.size);
    bytes_append(&file, limits.data, limits.size);
    check_file(path, &file);
    free(file.data);
  }
  check_no_strays(separate);
  free(records.data);
  free(limits.data);

  /* Read back with the fuzzed reader options. */
  bc_reader_options ro = *read_opts;
  ro.limits_placement = wo.limits_placement;
  ro.compression = wo.compression;
  bc_bag *bag = NULL;
  rc = bc_bag_open(&bag, path, &ro);
  FZ_CHECK(rc == 0, "bc_bag_open of a written bag: %s (%s)", bc_error_name(rc),
           bc_errmsg());
  FZ_CHECK(bc_bag_len(bag) == count, "written %zu records, read back %llu",
           count, (unsigned long long)bc_bag_len(bag));
  bc_buf buf = BC_BUF_INIT;
  for (size_t i = 0; i < count; i++) {
    rc = bc_bag_get(bag, i, &buf);
    FZ_CHECK(rc == 0 && buf.size == lens[i] &&
                 (lens[i] == 0 || memcmp(buf.data, starts[i], lens[i]) == 0),
             "written record %zu reads back wrong (%s, %zu bytes, want %zu)",
             i, bc_error_name(rc), buf.size, lens[i]);
  }
  bc_buf_release(&buf);
  uint64_t bad = 0;
  rc = bc_bag_verify(bag, &bad);
  FZ_CHECK(rc == 0, "bc_bag_verify of a written bag: %s at %llu",
           bc_error_name(rc), (unsigned long long)bad);
  bc_bag_close(bag);
}
