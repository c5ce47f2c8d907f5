/*
 * src/bag/internal.h - the Bagz layer's private interfaces: file specs,
 * shard files (mmap / pread / O_DIRECT backends), the zstd codec, and a
 * single shard's limits and records.
 *
 * Invariants every reader path keeps: a record is served only after its
 * limits were checked (limits[i-1] <= limits[i] <= records_size), and every
 * byte range handed to a backend lies inside the file, so a hostile file can
 * cause an error but never an out-of-bounds access.
 */
#ifndef BC_BAG_INTERNAL_H
#define BC_BAG_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/internal.h"

/* ---- file specs (spec.c) ---------------------------------------------- */

typedef struct bc__shard_path {
  char *records; /* path of the records file */
  char *limits;  /* path of the separate limits file, NULL for tail limits */
} bc__shard_path;

/* Expands a spec (comma list of PATH, PREFIX@N SUFFIX, PREFIX@* SUFFIX, each
 * optionally "posix:"-prefixed) into shard paths in order.  With `separate`
 * every records path DIR/NAME gets limits DIR/limits.NAME.  "@*" is resolved
 * per element by globbing PREFIX-00000-of-?????SUFFIX (lexicographically
 * last match); no match is BC_ENOTFOUND.  An empty spec gives zero paths
 * (*paths may then be NULL). */
int bc__spec_expand(const char *spec, bool separate, bc__shard_path **paths,
                    size_t *count);
void bc__spec_free(bc__shard_path *paths, size_t count);

/* True when `path` ends in ".bagz" (the AUTO compression rule). */
bool bc__path_is_bagz(const char *path);

/* ---- file backends (file.c, direct_io.c) -------------------------------- */

/* One open file, read through one of three backends chosen by cache policy.
 * Immutable after open (except the direct-I/O fallback flag, set at open). */
typedef struct bc__file {
  char *path;
  uint64_t size;
  bc_cache_policy policy;   /* the backend really in use */
  const unsigned char *map; /* BC_CACHE_SYSTEM: whole-file mapping (NULL if size 0) */
  int fd;                   /* plain descriptor (pread backends); -1 for mmap */
  int dio_fd;               /* O_DIRECT descriptor (BC_CACHE_DIRECT_IO), else -1 */
  size_t dio_align;         /* BC_CACHE_DIRECT_IO: offset/length/memory alignment */
  uint64_t dev, ino;        /* the file opened (fstat at open) */
} bc__file;

int bc__file_open(bc__file *f, const char *path, bc_cache_policy policy,
                  bc_access_pattern pattern);
void bc__file_close(bc__file *f);

/* Copies file bytes [offset, offset+size) into dst through the file's
 * backend.  The range must lie inside the file (callers check); a file that
 * shrank gives BC_ECORRUPT. */
int bc__file_read(const bc__file *f, uint64_t offset, void *dst, size_t size);

/* Like bc__file_read for small metadata (limits): never dropped from the
 * page cache and never through O_DIRECT. */
int bc__file_read_meta(const bc__file *f, uint64_t offset, void *dst,
                       size_t size);

/* Direct-I/O helpers (direct_io.c).  Probes the alignment O_DIRECT needs on
 * `fd` (statx STATX_DIOALIGN, else trial reads); 0 when unsupported. */
size_t bc__dio_alignment(int fd, uint64_t file_size);
int bc__dio_read(const bc__file *f, uint64_t offset, void *dst, size_t size);

/* ---- zstd codec (codec.c) ------------------------------------------------ */

typedef struct bc__decoder bc__decoder; /* thread-safe: pools DCtx objects */

int bc__decoder_new(bc__decoder **out, const void *dict, size_t dict_size,
                    uint64_t max_record_size);
void bc__decoder_free(bc__decoder *d);

/* Decompresses one stored record (exactly one zstd frame, with or without a
 * content size) into out.  An empty input is an empty record.  Frames that
 * claim more than max_record_size (or more than the input could possibly
 * expand to) are BC_ECORRUPT.  Messages name "path: record N". */
int bc__decoder_decode(bc__decoder *d, const void *src, size_t size,
                       bc_buf *out, const char *path, uint64_t record);

/* A decompression context of the decoder's pool, for a thread decoding
 * many records: take it once, give it back when done.  NULL (BC_ENOMEM
 * set) when none can be made. */
typedef struct bc__dctx bc__dctx;
bc__dctx *bc__decoder_take(bc__decoder *d);
void bc__decoder_give(bc__decoder *d, bc__dctx *ctx); /* NULL is fine */

/* Decompresses one stored record straight into dst[0..want), for a caller
 * that knows the size every record must have, with `ctx` (NULL: one of
 * the pool's for this call).  Returns 0 when the record has exactly `want`
 * bytes (all written), 1 with its size in *actual when it has another
 * size (nothing outside dst[0..want) is written, and nothing at all when
 * the frame states its content size), or a BC_E* code (as
 * bc__decoder_decode).  A frame without a content size is decoded into
 * `scratch` first (bagz and bagcache always write one). */
int bc__decoder_decode_into(bc__decoder *d, bc__dctx *ctx, const void *src,
                            size_t size, void *dst, size_t want,
                            bc_buf *scratch, uint64_t *actual,
                            const char *path, uint64_t record);

typedef struct bc__encoder bc__encoder; /* one thread at a time */

int bc__encoder_new(bc__encoder **out, int level, const void *dict,
                    size_t dict_size);
void bc__encoder_free(bc__encoder *e);

/* From now on frames carry zstd's 32-bit content checksum (XXH64), which
 * every zstd decoder, bagz's included, verifies: the frames stay standard,
 * bagz's bytes but for the checksum flag and 4 bytes at the end of each.
 * The cache's shards only. */
int bc__encoder_checksum(bc__encoder *e);

/* Compresses one non-empty record as a single frame, as bagz does
 * (ZSTD_compress_usingCDict with a CDict made once per writer). */
int bc__encoder_encode(bc__encoder *e, const void *src, size_t size,
                       bc_buf *out);


/* ---- one shard (shard.c) -------------------------------------------------- */

/* A shard: a records section and a limits table, in one file (tail) or two
 * (separate).  Invariants after a successful open:
 *   records_size <= records.size, and
 *   limits_offset + 8 * count <= size of the file holding the limits,
 * so every limit index < count and every range checked against records_size
 * can be read without going out of bounds. */
typedef struct bc__shard {
  bc__file records;        /* the records file (for tail: the whole file) */
  bc__file limits_file;    /* separate limits file (path NULL for tail) */
  bool separate;
  bool zstd;               /* records are zstd frames */
  uint64_t count;          /* number of records */
  uint64_t records_size;   /* bytes of the records section */
  uint64_t limits_offset;  /* offset of limits[0] in its file */
  /* BC_LIMITS_IN_MEMORY: all limits, loaded on first use.  loaded_limits is
   * published with release order after the array is filled, so a reader that
   * sees it non-NULL (acquire) sees the whole array. */
  bool limits_in_memory;
  _Atomic(uint64_t *) loaded_limits;
  uint64_t valid_prefix;   /* limits[0..valid_prefix) are monotonic and
                              within records_size (set with loaded_limits) */
  pthread_mutex_t load_lock; /* serialises the one-time load */
} bc__shard;

/* Opens a shard: records file `records_path` and, when `limits_path` is not
 * NULL, separate limits there.  Splits a tail file, checking its last limit
 * and alignment.  `zstd` is recorded for the reader. */
int bc__shard_open(bc__shard *s, const char *records_path,
                   const char *limits_path, bool zstd,
                   const bc_reader_options *opts);
void bc__shard_close(bc__shard *s);

/* The byte range [*start, *end) of record i (< count) in the records
 * section, with both limits validated (BC_ECORRUPT naming the file and
 * record otherwise). */
int bc__shard_range(bc__shard *s, uint64_t i, uint64_t *start, uint64_t *end);

/* The file holding the limits (the records file for tail limits). */
static inline const bc__file *bc__shard_limits_file(const bc__shard *s) {
  return s->separate ? &s->limits_file : &s->records;
}

/* bc_bag_open of exactly one file, named by its literal path: no spec
 * syntax (a ',' or '@' in the path is part of the name, a "posix:" prefix
 * too).  With BC_LIMITS_SEPARATE its limits are DIR/limits.NAME. */
int bc__bag_open_file(bc_bag **out, const char *path,
                      const bc_reader_options *opts);

/* ---- record checksums (crc_table.c) --------------------------------------- */

/* A sidecar of CRC-32C values, one per record, mapped (layout in
 * crc_table.c). */
#define BC__CRC_HEADER 24
typedef struct bc__crc_table {
  bc__file file;
  uint64_t count;
} bc__crc_table;

/* Opens and checks a sidecar for `count` records whose records section has
 * `records_bytes` bytes: BC_ECORRUPT if it does not match. */
int bc__crc_table_open(bc__crc_table *t, const char *path, uint64_t count,
                       uint64_t records_bytes);
void bc__crc_table_close(bc__crc_table *t);
/* BC_ECORRUPT (naming `records_path` and record i) unless data[0..size)
 * has record i's checksum.  Reads the mapping: run guarded. */
int bc__crc_table_check(const bc__crc_table *t, uint64_t i, const void *data,
                        size_t size, const char *records_path);
/* Copies record i's bytes from src[0..size) to dst and checks them, in one
 * pass (bc__crc32c_copy): what is checked is what was copied. */
int bc__crc_table_copy(const bc__crc_table *t, uint64_t i, void *dst,
                       const void *src, size_t size, const char *records_path);
/* The sidecar's header for `count` records of `records_bytes` bytes. */
void bc__crc_table_header(unsigned char out[BC__CRC_HEADER], uint64_t count,
                          uint64_t records_bytes);

/* Attaches the sidecar at `path` to a one-shard bag: from then on every
 * read through bc_bag_get, bc_bag_get_many and bc_bag_verify checks the
 * record's checksum, and zero-copy reads are BC_EUNSUPPORTED (their bytes
 * would go unchecked).  Not thread-safe with reads: call it right after
 * bc_bag_open. */
int bc__bag_attach_crcs(bc_bag *bag, const char *path);

/* Makes a zstd writer's frames carry content checksums
 * (bc__encoder_checksum); no effect on an uncompressed one.  Before the
 * first write.  Plain bc_writer_open never does this: its files stay
 * byte-identical to bagz's. */
int bc__writer_checksum_frames(bc_writer *w);

/* Makes the writer's close rename its file into place without fsyncing
 * the directory (its data is still fsynced): for a file under a temporary
 * name that is renamed again, and that directory fsynced, before anything
 * relies on it (the cache's scratch files).  Before close. */
int bc__writer_scratch(bc_writer *w);
/* A scratch writer whose close does not fsync the data either (a tail
 * file): the cache's publish-behind fsyncs it later, on its publisher
 * thread, before renaming it into shards/.  After bc__writer_scratch,
 * before close. */
int bc__writer_nosync(bc_writer *w);

/* The device and inode of shard 0's records file as it was opened: which
 * file a bag reads even after its name was replaced or removed. */
void bc__bag_file_id(const bc_bag *bag, uint64_t *dev, uint64_t *ino);

/* bc_bag_read_into with rows: record indices[k] into the `size` bytes at
 * dst + rows[k] * size (rows NULL: at dst + k * size), on at most
 * max_parallelism threads (0: the bag's option).  The rows a caller gives
 * must be distinct and below the rows of dst (not checked). */
int bc__bag_read_rows(const bc_bag *bag, const uint64_t *indices,
                      const size_t *rows, size_t count, void *dst,
                      size_t size, int max_parallelism);

/* True when every shard can serve zero-copy views (uncompressed and
 * mapped), so bc_bag_get_view never fails with BC_EUNSUPPORTED. */
bool bc__bag_can_view(const bc_bag *bag);

#endif /* BC_BAG_INTERNAL_H */
