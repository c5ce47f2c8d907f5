/*
 * The Bagz writer: one shard, published atomically.
 *
 * While open, records go to a hidden temporary file beside the final path
 * and limits to a second one; both are buffered here.  close() appends the
 * limits to the records (tail) or keeps them apart (separate), fsyncs,
 * renames into place and fsyncs the directory.  So nothing appears under the
 * final name before it is complete, and a crash leaves at most hidden
 * ".NAME.tmp-*" files behind.
 *
 * Separate limits are two files, and two renames cannot be one atomic step.
 * The order keeps readers from ever pairing files of different writes: an
 * existing NAME is removed first, then limits.NAME is replaced, then NAME
 * appears.  A reader sees the old pair, no NAME (not found), or the new pair.
 *
 * Any failure puts the writer in the failed state: temporary files are
 * removed and every later call returns the same error.
 *
 * With the limits at the tail, their temporary file is created only when
 * the limits outgrow their buffer (LIMITS_BUFFER: 8,192 records) or at
 * bc_writer_flush: a smaller file costs one temporary file, not two.
 *
 * A scratch writer (bc__writer_scratch: the cache's fills) renames its
 * file into place without fsyncing the directory: the name is itself a
 * temporary one, which the cache renames again into a directory it does
 * fsync.  The file's data is still fsynced at close.
 *
 * Early writeback: every WRITEBACK_EVERY bytes written, the kernel is asked
 * to start writing them to the device (sync_file_range, SYNC_FILE_RANGE_WRITE:
 * it does not wait for the device), so that the disk works while records
 * are still coming and the fsync at close waits only for the tail.  It is
 * advice: its failures are ignored, and the fsync reports what matters.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h> /* rename */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bag/internal.h"

#define RECORDS_BUFFER ((size_t)1 << 20)
#define LIMITS_BUFFER ((size_t)1 << 16) /* 8192 limits */
#define WRITEBACK_EVERY ((uint64_t)1 << 20)

enum writer_state { WRITER_OPEN, WRITER_CLOSED, WRITER_FAILED };

struct bc_writer {
  enum writer_state state;
  int result;        /* close() result, or the failure code */
  char *result_msg;  /* its message, repeated on later calls */
  int result_errno;  /* and its bc_errno() */
  char *path;        /* final records path */
  char *limits_path; /* final limits path (separate only) */
  bool separate;
  bool scratch; /* no directory fsync at close (bc__writer_scratch) */
  bool nosync;  /* no fsync of the data at close either (bc__writer_nosync) */
  unsigned file_mode;
  char *tmp_records, *tmp_limits;
  int fd_records, fd_limits;
  bc__encoder *encoder; /* NULL: records stored as given */
  bc_buf compressed;
  unsigned char *buf; /* records not yet written; buf_len bytes */
  size_t buf_len;
  unsigned char *lbuf; /* limits not yet written; lbuf_len bytes */
  size_t lbuf_len;
  uint64_t limits_flushed; /* bytes of limits already in tmp_limits */
  uint64_t count, offset;
  uint64_t written;     /* bytes of records in tmp_records */
  uint64_t writeback;   /* ... of which writeback was started */
};

/* Removes the temporary files (if any) and closes their descriptors. */
static void discard_temps(bc_writer *w) {
  if (w->fd_records >= 0) close(w->fd_records);
  if (w->fd_limits >= 0) close(w->fd_limits);
  w->fd_records = w->fd_limits = -1;
  if (w->tmp_records) unlink(w->tmp_records);
  if (w->tmp_limits) unlink(w->tmp_limits);
  free(w->tmp_records);
  free(w->tmp_limits);
  w->tmp_records = w->tmp_limits = NULL;
}

/* Enters the failed state with `rc` and the current message. */
static int fail(bc_writer *w, int rc) {
  w->state = WRITER_FAILED;
  w->result = rc;
  free(w->result_msg);
  w->result_msg = strdup(bc_errmsg());
  w->result_errno = bc_errno();
  discard_temps(w);
  return rc;
}

/* Checks the writer accepts writes; re-reports a failure. */
static int check_open(bc_writer *w, const char *op) {
  if (w->state == WRITER_OPEN) return 0;
  if (w->state == WRITER_FAILED)
    return bc_set_error(w->result, w->result_errno, "%s",
                        w->result_msg ? w->result_msg : "");
  return bc__error(BC_ECLOSED, "%s: %s after close", w->path, op);
}

static int resolve_compression(const bc_writer_options *o, const char *path,
                               bool *zstd) {
  if ((unsigned)o->limits_placement > BC_LIMITS_SEPARATE ||
      (unsigned)o->compression > BC_COMPRESSION_ZSTD)
    return bc__error(BC_EINVAL, "writer options: an enum field is out of range");
  if (o->dictionary_size > 0 && o->dictionary == NULL)
    return bc__error(BC_EINVAL, "writer options: dictionary_size without dictionary");
  *zstd = o->compression == BC_COMPRESSION_ZSTD ||
          (o->compression == BC_COMPRESSION_AUTO && bc__path_is_bagz(path));
  if (!*zstd && (o->zstd_level != 0 || o->dictionary_size > 0))
    return bc__error(BC_EINVAL,
                     "%s: a zstd level or dictionary was given but records are "
                     "stored uncompressed (%s)", path,
                     o->compression == BC_COMPRESSION_NONE
                         ? "compression is none"
                         : "the name does not end in .bagz");
  return 0;
}

int bc_writer_options_init(bc_writer_options *opts, unsigned version) {
  return BC__OPTIONS_INIT(bc_writer_options, BC_WRITER_OPTIONS, opts, version);
}

int bc_writer_open(bc_writer **out, const char *path,
                   const bc_writer_options *opts) {
  static const bc_writer_options defaults = BC_WRITER_OPTIONS_INIT;
  if (out == NULL || path == NULL)
    return bc__error(BC_EINVAL, "bc_writer_open: NULL argument");
  if (opts == NULL) opts = &defaults;
  int rc = bc__options_version("bc_writer_options", "BC_WRITER_OPTIONS",
                               opts->version, BC_WRITER_OPTIONS_VERSION);
  if (rc != 0) return rc;
  bool zstd;
  rc = resolve_compression(opts, path, &zstd);
  if (rc != 0) return rc;

  bc_writer *w = calloc(1, sizeof *w);
  if (w == NULL) return bc__error(BC_ENOMEM, "out of memory");
  w->fd_records = w->fd_limits = -1;
  w->separate = opts->limits_placement == BC_LIMITS_SEPARATE;
  w->path = strdup(path);
  w->buf = malloc(RECORDS_BUFFER);
  w->lbuf = malloc(LIMITS_BUFFER);
  if (w->path == NULL || w->buf == NULL || w->lbuf == NULL ||
      (w->separate && (w->limits_path = bc_limits_path(path)) == NULL)) {
    rc = bc__error(BC_ENOMEM, "out of memory");
    goto cleanup;
  }
  if (zstd && (rc = bc__encoder_new(&w->encoder, opts->zstd_level,
                                    opts->dictionary, opts->dictionary_size)) != 0)
    goto cleanup;
  w->file_mode = opts->file_mode;
  rc = bc__tmp_create(path, opts->file_mode, &w->tmp_records, &w->fd_records);
  /* Tail limits: their temporary file waits until it is needed. */
  if (rc == 0 && w->separate)
    rc = bc__tmp_create(w->limits_path, opts->file_mode, &w->tmp_limits,
                        &w->fd_limits);
  if (rc != 0) goto cleanup;
  *out = w;
  w = NULL;
cleanup:
  if (w != NULL) bc_writer_free(w);
  return rc;
}

/* `size` more bytes of records were written: starts their writeback once
 * WRITEBACK_EVERY bytes have gathered (see the header). */
static void wrote_records(bc_writer *w, size_t size) {
  w->written += size;
#ifdef HAVE_SYNC_FILE_RANGE
  if (w->written - w->writeback >= WRITEBACK_EVERY) {
    (void)sync_file_range(w->fd_records, (off_t)w->writeback,
                          (off_t)(w->written - w->writeback), SYNC_FILE_RANGE_WRITE);
    w->writeback = w->written;
  }
#endif
}

static int flush_records(bc_writer *w) {
  int rc = bc__write_all(w->fd_records, w->buf, w->buf_len, w->tmp_records);
  if (rc == 0) wrote_records(w, w->buf_len);
  w->buf_len = 0;
  return rc;
}

static int flush_limits(bc_writer *w) {
  int rc = 0;
  if (w->fd_limits < 0) /* the first flush of tail limits */
    rc = bc__tmp_create(w->path, w->file_mode, &w->tmp_limits, &w->fd_limits);
  if (rc != 0) return rc;
  rc = bc__write_all(w->fd_limits, w->lbuf, w->lbuf_len, w->tmp_limits);
  w->limits_flushed += w->lbuf_len;
  w->lbuf_len = 0;
  return rc;
}

int bc_writer_write(bc_writer *w, const void *data, size_t size) {
  int rc = check_open(w, "write");
  if (rc != 0) return rc;
  if (size > 0 && data == NULL)
    return bc__error(BC_EINVAL, "%s: write of %zu bytes from NULL", w->path, size);
  const unsigned char *bytes = data;
  if (w->encoder != NULL && size > 0) { /* empty records stay 0 bytes */
    if ((rc = bc__encoder_encode(w->encoder, data, size, &w->compressed)) != 0)
      return fail(w, rc);
    bytes = w->compressed.data;
    size = w->compressed.size;
  }
  if (size > RECORDS_BUFFER - w->buf_len) {
    if ((rc = flush_records(w)) != 0) return fail(w, rc);
  }
  if (size >= RECORDS_BUFFER) { /* too big to buffer: straight through */
    rc = bc__write_all(w->fd_records, bytes, size, w->tmp_records);
    if (rc != 0) return fail(w, rc);
    wrote_records(w, size);
  } else if (size > 0) {
    memcpy(w->buf + w->buf_len, bytes, size);
    w->buf_len += size;
  }
  w->offset += size;
  if (w->lbuf_len == LIMITS_BUFFER && (rc = flush_limits(w)) != 0)
    return fail(w, rc);
  bc__store_u64le(w->lbuf + w->lbuf_len, w->offset);
  w->lbuf_len += 8;
  w->count++;
  return 0;
}

int bc_writer_flush(bc_writer *w) {
  int rc = check_open(w, "flush");
  if (rc != 0) return rc;
  if ((rc = flush_records(w)) != 0 || (rc = flush_limits(w)) != 0)
    return fail(w, rc);
  return 0;
}

/* Appends the limits file's flushed bytes to the records file. */
static int append_flushed_limits(bc_writer *w) {
  uint64_t left = w->limits_flushed;
  off_t in_off = 0;
#ifdef HAVE_COPY_FILE_RANGE
  while (left > 0) {
    ssize_t n = copy_file_range(w->fd_limits, &in_off, w->fd_records, NULL,
                                (size_t)left, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break; /* unsupported here, or nothing copied: fall back */
    left -= (uint64_t)n;
  }
#endif
  unsigned char chunk[1 << 16];
  while (left > 0) {
    size_t want = left < sizeof chunk ? (size_t)left : sizeof chunk;
    int rc = bc__pread_all(w->fd_limits, chunk, want, (uint64_t)in_off,
                           w->tmp_limits);
    if (rc == 0) rc = bc__write_all(w->fd_records, chunk, want, w->tmp_records);
    if (rc != 0) return rc;
    in_off += (off_t)want;
    left -= want;
  }
  return 0;
}

static int finish(bc_writer *w) {
  int rc;
  if ((rc = flush_records(w)) != 0) return rc;
  if (!w->separate) {
    /* Tail: records, then the limits flushed earlier, then the buffered. */
    if ((rc = append_flushed_limits(w)) != 0) return rc;
    if ((rc = bc__write_all(w->fd_records, w->lbuf, w->lbuf_len,
                            w->tmp_records)) != 0)
      return rc;
    w->lbuf_len = 0;
    if (!w->nosync && (rc = bc__fsync(w->fd_records, w->tmp_records)) != 0)
      return rc;
    if (!w->scratch) return bc__publish(w->tmp_records, w->path);
    if (rename(w->tmp_records, w->path) != 0)
      return bc__error_errno(errno, "%s: rename from %s", w->path, w->tmp_records);
    return 0;
  }
  if ((rc = flush_limits(w)) != 0) return rc;
  if ((rc = bc__fsync(w->fd_records, w->tmp_records)) != 0 ||
      (rc = bc__fsync(w->fd_limits, w->tmp_limits)) != 0)
    return rc;
  /* Never let a reader pair an old NAME with a new limits.NAME. */
  if (unlink(w->path) != 0 && errno != ENOENT)
    return bc__error_errno(errno, "%s: cannot replace", w->path);
  if ((rc = bc__publish(w->tmp_limits, w->limits_path)) != 0) return rc;
  return bc__publish(w->tmp_records, w->path);
}

int bc_writer_close(bc_writer *w) {
  if (w->state == WRITER_CLOSED) return w->result;
  int rc = check_open(w, "close");
  if (rc != 0) return rc;
  if ((rc = finish(w)) != 0) return fail(w, rc);
  /* Published: the temporary names are gone (renamed or to be unlinked). */
  if (!w->separate && w->tmp_limits) unlink(w->tmp_limits);
  free(w->tmp_records);
  free(w->tmp_limits);
  w->tmp_records = w->tmp_limits = NULL;
  close(w->fd_records);
  if (w->fd_limits >= 0) close(w->fd_limits);
  w->fd_records = w->fd_limits = -1;
  w->state = WRITER_CLOSED;
  w->result = 0;
  bc__error_clear();
  return 0;
}

void bc_writer_free(bc_writer *w) {
  if (w == NULL) return;
  discard_temps(w);
  bc__encoder_free(w->encoder);
  bc_buf_release(&w->compressed);
  free(w->buf);
  free(w->lbuf);
  free(w->path);
  free(w->limits_path);
  free(w->result_msg);
  free(w);
}

int bc__writer_scratch(bc_writer *w) {
  int rc = check_open(w, "scratch");
  if (rc == 0) w->scratch = true;
  return rc;
}

int bc__writer_nosync(bc_writer *w) {
  int rc = check_open(w, "nosync");
  if (rc == 0 && w->scratch) w->nosync = true;
  return rc;
}

int bc__writer_checksum_frames(bc_writer *w) {
  int rc = check_open(w, "checksum_frames");
  if (rc == 0 && w->encoder != NULL) rc = bc__encoder_checksum(w->encoder);
  return rc;
}

uint64_t bc_writer_count(const bc_writer *w) { return w->count; }

uint64_t bc_writer_records_bytes(const bc_writer *w) { return w->offset; }
