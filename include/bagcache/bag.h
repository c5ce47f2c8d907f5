/*
 * bagcache/bag.h - the Bagz record format: writing one shard, reading a
 * sharded set.
 *
 * A Bagz file holds records (opaque byte strings) followed by, or beside, a
 * table of 64-bit little-endian end offsets ("limits").  doc/format.md
 * describes the bytes; this header is the C API over them.
 *
 * Ownership: bc_*_open(&out, ...) creates an object the caller owns and
 * releases with the matching close/free function (which accept NULL).
 * Buffers (bc_buf) belong to the caller; bagcache grows them with realloc.
 *
 * Thread safety:
 *   bc_bag     - immutable after open: any number of threads may read from
 *                one bag at once.  Close it only when no call is running.
 *   bc_writer  - one thread at a time (no internal lock).
 */
#ifndef BAGCACHE_BAG_H
#define BAGCACHE_BAG_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- options shared by readers and writers -------------------------- */

typedef enum bc_limits_placement {
  BC_LIMITS_TAIL = 0,    /* limits appended to the records file (default) */
  BC_LIMITS_SEPARATE = 1 /* limits in DIR/limits.NAME beside DIR/NAME */
} bc_limits_placement;

typedef enum bc_compression {
  BC_COMPRESSION_AUTO = 0, /* zstd if the file name ends in ".bagz", else none */
  BC_COMPRESSION_NONE = 1, /* records stored as given */
  BC_COMPRESSION_ZSTD = 2  /* one zstd frame per non-empty record */
} bc_compression;

/* ---- caller-owned byte buffer ----------------------------------------- */

typedef struct bc_buf {
  unsigned char *data; /* malloc'd; NULL when capacity is 0 */
  size_t size;         /* bytes of the current contents */
  size_t capacity;     /* bytes allocated */
} bc_buf;

#define BC_BUF_INIT {NULL, 0, 0}

/* Frees the buffer's memory and resets it to BC_BUF_INIT.  NULL is fine. */
void bc_buf_release(bc_buf *buf);

/* ---- writer ------------------------------------------------------------- */

typedef struct bc_writer bc_writer;

typedef struct bc_writer_options {
  bc_limits_placement limits_placement; /* default BC_LIMITS_TAIL */
  bc_compression compression;           /* default BC_COMPRESSION_AUTO */
  int zstd_level;            /* 0 = zstd's default level (3); may be negative */
  const void *dictionary;    /* zstd dictionary (trained or raw content), or NULL */
  size_t dictionary_size;
  unsigned file_mode;        /* mode of the published file(s); 0 = 0666 & ~umask */
} bc_writer_options;

#define BC_WRITER_OPTIONS_INIT \
  {BC_LIMITS_TAIL, BC_COMPRESSION_AUTO, 0, NULL, 0, 0}

/* Starts writing one Bagz file at `path` (no '@' expansion).  Nothing appears
 * under `path` (or limits.NAME) until bc_writer_close() succeeds: records go
 * to hidden temporary files in the same directory, which close() fsyncs and
 * renames into place.  An existing file at `path` is replaced only then.
 * `opts` may be NULL for the defaults.  The dictionary is copied.
 * Errors: BC_EINVAL (bad option), BC_ENOTFOUND (directory missing), BC_EPERM,
 * BC_EIO, BC_ENOSPC, BC_ENOMEM. */
int bc_writer_open(bc_writer **out, const char *path,
                   const bc_writer_options *opts);

/* Appends one record (`size` may be 0; `data` may then be NULL).
 * After a failure of the writer itself (I/O, no space, memory) the writer is
 * failed: every later write, flush and close returns that same error and
 * nothing is ever published.  Misuse (BC_EINVAL: NULL data with a non-zero
 * size; BC_ECLOSED after close) is reported without failing the writer. */
int bc_writer_write(bc_writer *w, const void *data, size_t size);

/* Hands buffered bytes to the operating system (no fsync).  The data stays in
 * the temporary files: it is not visible under the final name. */
int bc_writer_flush(bc_writer *w);

/* Finishes the file: writes the limits, fsyncs, renames into place, fsyncs
 * the directory.  Idempotent: a second call returns the first call's result.
 * A failure before the rename publishes nothing and removes the temporary
 * files.  Only the last step can fail after the rename: if fsync of the
 * directory fails, the complete file is in place but its durability is not
 * guaranteed, and close reports the error.  With separate limits an existing
 * NAME is removed just before the new pair is renamed in, so a failure in
 * those last steps can leave NAME absent (never a mismatched pair). */
int bc_writer_close(bc_writer *w);

/* Releases the writer.  If it was not closed, the unfinished temporary files
 * are deleted and nothing is published.  NULL is fine. */
void bc_writer_free(bc_writer *w);

/* Records written so far. */
uint64_t bc_writer_count(const bc_writer *w);

/* Bytes of the records section written so far (after compression). */
uint64_t bc_writer_records_bytes(const bc_writer *w);

/* ---- reader ------------------------------------------------------------- */

typedef struct bc_bag bc_bag;

typedef enum bc_sharding_layout {
  BC_LAYOUT_CONCATENATED = 0, /* shard 0's records, then shard 1's, ... */
  BC_LAYOUT_INTERLEAVED = 1   /* global i -> shard i % S, record i / S */
} bc_sharding_layout;

typedef enum bc_limits_storage {
  BC_LIMITS_ON_DISK = 0,  /* read the two limits of a record on each access */
  BC_LIMITS_IN_MEMORY = 1 /* load (and validate) each shard's limits once */
} bc_limits_storage;

typedef enum bc_access_pattern {
  BC_ACCESS_SYSTEM = 0,    /* no hint */
  BC_ACCESS_RANDOM = 1,    /* madvise/posix_fadvise RANDOM */
  BC_ACCESS_SEQUENTIAL = 2 /* madvise/posix_fadvise SEQUENTIAL */
} bc_access_pattern;

typedef enum bc_cache_policy {
  BC_CACHE_SYSTEM = 0,          /* mmap; the page cache keeps what was read */
  BC_CACHE_DROP_AFTER_READ = 1, /* pread, then posix_fadvise(DONTNEED) */
  BC_CACHE_DIRECT_IO = 2        /* O_DIRECT with aligned bounce buffers;
                                   falls back to DROP_AFTER_READ with a
                                   notice where the file system refuses */
} bc_cache_policy;

typedef struct bc_reader_options {
  bc_sharding_layout sharding_layout;   /* default CONCATENATED */
  bc_limits_placement limits_placement; /* default TAIL */
  bc_limits_storage limits_storage;     /* default ON_DISK */
  bc_compression compression;           /* default AUTO, decided per file */
  const void *dictionary;               /* zstd dictionary, or NULL (copied) */
  size_t dictionary_size;
  bc_access_pattern access_pattern;     /* default SYSTEM */
  bc_cache_policy cache_policy;         /* default SYSTEM */
  int max_parallelism;   /* threads per batch call; 0 = online CPUs, 1 = inline */
  uint64_t max_record_size; /* largest decompressed record accepted;
                               0 = default (BC_DEFAULT_MAX_RECORD_SIZE) */
} bc_reader_options;

#define BC_DEFAULT_MAX_RECORD_SIZE ((uint64_t)1 << 32)

#define BC_READER_OPTIONS_INIT                                             \
  {BC_LAYOUT_CONCATENATED, BC_LIMITS_TAIL, BC_LIMITS_ON_DISK,              \
   BC_COMPRESSION_AUTO, NULL, 0, BC_ACCESS_SYSTEM, BC_CACHE_SYSTEM, 0, 0}

/* Opens a file spec: a comma-separated list (empty elements skipped) of
 *   PATH                one file
 *   PREFIX@N SUFFIX     N shards PREFIX-00000-of-0000N SUFFIX ... (1..99999)
 *   PREFIX@* SUFFIX     the same, N taken from the files that exist
 * each optionally prefixed by "posix:".  With BC_LIMITS_SEPARATE every
 * records file DIR/NAME gets its limits from DIR/limits.NAME.
 * An empty spec opens zero shards (an empty bag).  `opts` may be NULL.
 * Errors: BC_ENOTFOUND (a file is missing), BC_ECORRUPT (a tail is malformed,
 * interleaved sizes break the rule), BC_EINVAL (bad option, not a regular
 * file), BC_EPERM, BC_EIO, BC_ENOMEM.  (Direct I/O that the file system
 * refuses is not an error: the bag falls back with a notice.) */
int bc_bag_open(bc_bag **out, const char *spec, const bc_reader_options *opts);

/* Closes the bag: unmaps files, frees memory.  NULL is fine. */
void bc_bag_close(bc_bag *bag);

/* Total number of records. */
uint64_t bc_bag_len(const bc_bag *bag);

/* Number of shard files (empty shards included). */
size_t bc_bag_shard_count(const bc_bag *bag);

typedef struct bc_shard_info {
  const char *path;         /* records file; valid while the bag is open */
  const char *limits_path;  /* separate limits file, or NULL for tail */
  uint64_t records;         /* number of records */
  uint64_t records_bytes;   /* size of the records section */
  uint64_t file_bytes;      /* bytes on disk (both files for separate) */
  bc_compression compression; /* NONE or ZSTD as decided at open */
} bc_shard_info;

/* Describes shard `shard` (< bc_bag_shard_count).  BC_ERANGE otherwise. */
int bc_bag_shard_info(const bc_bag *bag, size_t shard, bc_shard_info *info);

/* Maps a global index to (shard, index within the shard) by the layout.
 * Either output may be NULL.  BC_ERANGE when index >= len. */
int bc_bag_locate(const bc_bag *bag, uint64_t index, size_t *shard,
                  uint64_t *index_in_shard);

/* Reads record `index` into `out` (decompressed; out->size = its length).
 * Errors: BC_ERANGE, BC_ECORRUPT (bad limits, bad zstd frame, too large),
 * BC_EIO, BC_ENOMEM. */
int bc_bag_get(const bc_bag *bag, uint64_t index, bc_buf *out);

/* Zero-copy read: points *data at the record's bytes inside the file mapping,
 * valid while the bag is open.  Only for uncompressed shards opened with
 * BC_CACHE_SYSTEM; BC_EUNSUPPORTED otherwise.  An empty record gives
 * size 0 and a non-NULL pointer.  Copying reads turn a file truncated while
 * open into BC_ECORRUPT; memory handed out here cannot be protected that
 * way: reading it after the file shrank raises SIGBUS in the caller.  Use a
 * copying read (or a pread cache policy) for files that may shrink. */
int bc_bag_get_view(const bc_bag *bag, uint64_t index, const void **data,
                    size_t *size);

/* Zero-copy reads of `count` records at once: data[i], sizes[i] for
 * indices[i], with the same rules as bc_bag_get_view (the per-call cost is
 * paid once for the batch).  All indices are checked first (BC_ERANGE);
 * on failure the contents of data/sizes are unspecified. */
int bc_bag_get_views(const bc_bag *bag, const uint64_t *indices, size_t count,
                     const void **data, size_t *sizes);

/* Reads `count` records into outs[0..count-1] (in request order; indices may
 * repeat), spread over the process's worker pool, at most max_parallelism
 * threads (the caller's included).  All indices are checked before any read.
 * On failure returns the error of the lowest failing position, with its
 * message; the contents of `outs` are then unspecified (but still owned by
 * the caller and safe to release). */
int bc_bag_get_many(const bc_bag *bag, const uint64_t *indices, size_t count,
                    bc_buf *outs);

/* Reads `count` records straight into caller memory: record indices[k]
 * into dst[k * size .. (k + 1) * size), copied from the mapping (or read)
 * or zstd-decoded in place, with no intermediate buffer; spread over the
 * worker pool as bc_bag_get_many.  Every record must have exactly `size`
 * bytes: one of another size is BC_EINVAL ("record I (indices[K]) has N
 * bytes, not the row size S"), found before any of its bytes is written
 * when its size is known from the limits or the zstd frame header.  Nothing
 * outside dst[0 .. count * size) is ever written.  All indices are checked
 * before any read (BC_ERANGE).  Also BC_EINVAL for NULL dst with
 * count * size > 0 or an overflowing count * size.  On failure returns the
 * error of the lowest failing position, its message naming indices[K];
 * dst's contents are then unspecified. */
int bc_bag_read_into(const bc_bag *bag, const uint64_t *indices, size_t count,
                     void *dst, size_t size);

/* Reads every record (in parallel) to check limits and zstd frames.  Returns
 * 0 when all are valid; else the first error in index order, and its index
 * in *bad_index (if not NULL). */
int bc_bag_verify(const bc_bag *bag, uint64_t *bad_index);

/* Sum of records-section bytes over all shards divided by the number of
 * records (0 for an empty bag). */
double bc_bag_bytes_per_record(const bc_bag *bag);

/* The options the bag was opened with (defaults filled in). */
const bc_reader_options *bc_bag_options(const bc_bag *bag);

/* Limits file name for a records path: "a/b/x.bag" -> "a/b/limits.x.bag".
 * Returns a malloc'd string (free() it) or NULL when out of memory. */
char *bc_limits_path(const char *records_path);

#ifdef __cplusplus
}
#endif
#endif /* BAGCACHE_BAG_H */
