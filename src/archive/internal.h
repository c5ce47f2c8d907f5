/*
 * src/archive/internal.h - the keyed-archive layer (doc/archive.md).
 *
 * index.c owns the SQLite connection (schema, settings, statements,
 * aggregates), shards.c the data files, path.c path normalization and
 * archive.c the public API that joins them.
 *
 * Locking: bc_archive.lock guards the connection, its statements and the
 * shard table (fds, sizes, count).  It is never held across a shard read
 * (pread) or a commit's fsync of another process's data: readers copy the fd
 * and bounds under it, then read without it.  Shard fds are closed only by
 * bc_archive_close, so a copied fd stays valid for the archive's life.
 */
#ifndef BC_ARCHIVE_INTERNAL_H
#define BC_ARCHIVE_INTERNAL_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>

#include "bagcache/archive.h"
#include "bagcache/error.h"
#include "common/internal.h"

extern const char bc__archive_schema_sql[];

/* A new archive's shard_size_limit: CAST(power(2, 63) - 1 AS INTEGER). */
#define BC__ARCHIVE_NO_LIMIT ((uint64_t)INT64_MAX)
/* add commits by itself after this many files or bytes. */
#define BC__ARCHIVE_COMMIT_FILES 4096
#define BC__ARCHIVE_COMMIT_BYTES (64u << 20)

typedef struct bc__shard {
  int fd;
  uint64_t size; /* bytes known to be in the file (fstat, or written) */
  bool dirty;    /* written since the last commit: fsync before it */
} bc__shard;

typedef struct bc__shards {
  char *base;     /* the archive path: shard i is base-shard-%05d */
  bool readonly;
  bc__shard *v;
  size_t n, cap;
  bool created;   /* a shard file was created since the last commit */
} bc__shards;

typedef enum {
  BC__ST_LOOKUP_FILE,
  BC__ST_LOOKUP_DIR,
  BC__ST_INSERT_FILE,
  BC__ST_DELETE_FILE,
  BC__ST_LIST_DIRS,
  BC__ST_LIST_FILES,
  BC__ST_COUNT
} bc__stmt_id;

typedef struct bc__index {
  sqlite3 *db;
  char *path;
  bool readonly;
  bool in_txn;       /* a write transaction is open */
  bool use_triggers; /* config use_triggers = 1, read at open */
  uint64_t shard_size_limit;
  sqlite3_stmt *st[BC__ST_COUNT];
} bc__index;

struct bc_archive {
  pthread_mutex_t lock; /* see the top of this file */
  char *path;
  bool readonly;
  int lock_fd;          /* the writer's flock on the index file, or -1 */
  bc__index ix;
  bc__shards sh;
  uint64_t pending_files, pending_bytes; /* since the last commit */
};

/* ---- path.c --------------------------------------------------------------- */

/* barecat's normalize_path: *out is malloc'd.  BC_EINVAL for a ".." above
 * the root or an embedded NUL-free but otherwise invalid path. */
int bc__archive_normalize(const char *path, char **out);
/* The parent of a normalized non-root path, as the generated column
 * computes it (the text before the last '/', "" when there is none):
 * returns its length in `path`. */
size_t bc__archive_parent_len(const char *path);

/* ---- index.c -------------------------------------------------------------- */

/* Opens an index that exists (readonly or not) and checks its schema. */
int bc__index_open(bc__index *ix, const char *path, bool readonly);
/* Creates a new index at `path` atomically: the schema and the root
 * directory are written to a temporary file, fsynced and linked into
 * place.  1 (and nothing changed) when `path` exists by then. */
int bc__index_create(const char *path);
void bc__index_close(bc__index *ix);
int bc__index_set_limit(bc__index *ix, uint64_t limit, uint64_t largest_shard);
/* A write transaction is open after this (BEGIN if none). */
int bc__index_begin(bc__index *ix);
int bc__index_commit(bc__index *ix);
int bc__index_rollback(bc__index *ix);

/* 1 and *out filled, 0 when absent, or an error. */
int bc__index_lookup_file(bc__index *ix, const char *path,
                          bc_archive_file_info *out);
int bc__index_lookup_dir(bc__index *ix, const char *path,
                         bc_archive_dir_info *out);
int bc__index_insert_file(bc__index *ix, const char *path,
                          const bc_archive_file_info *fi);
/* 1 when removed, 0 when there is no such file. */
int bc__index_delete_file(bc__index *ix, const char *path);
/* The end of the last byte any row puts in shard `shard` (0 if none). */
int bc__index_shard_end(bc__index *ix, uint64_t shard, uint64_t *end);
/* The largest shard number any row uses, or -1 when there are no files. */
int bc__index_max_shard(bc__index *ix, int64_t *out);
int bc__index_listdir(bc__index *ix, const char *dir, bc_archive_dirent **out,
                      size_t *count);
/* Every file in path order: calls fn(arg, path, info) until it returns
 * non-zero (which is returned). */
int bc__index_each_file(bc__index *ix,
                        int (*fn)(void *arg, const char *path,
                                  const bc_archive_file_info *fi),
                        void *arg);
/* Checks each directory's aggregates against the files and dirs tables;
 * BC_ECORRUPT naming the first wrong directory. */
int bc__index_check_aggregates(bc__index *ix);
/* BC_ECORRUPT/BC_EIO/... for an SQLite result code, naming `what`. */
int bc__index_error(bc__index *ix, int rc, const char *what);

/* ---- shards.c ------------------------------------------------------------- */

/* Opens base-shard-00000 ... (contiguous from 0); a gap followed by a later
 * shard is BC_ECORRUPT.  For writing, creates shard 0 when there is none. */
int bc__shards_open(bc__shards *sh, const char *base, bool readonly);
void bc__shards_close(bc__shards *sh);
/* Removes every base-shard-NNNNN file (for overwrite). */
int bc__shards_remove_all(const char *base);
/* Appends a new empty shard (O_EXCL). */
int bc__shards_add(bc__shards *sh);
/* Truncates shard i to `size` (dropping bytes no row points at). */
int bc__shards_truncate(bc__shards *sh, size_t i, uint64_t size);
int bc__shards_write(bc__shards *sh, size_t i, uint64_t offset,
                     const void *data, size_t size);
/* fsyncs the dirty shards, and the directory when a shard was created. */
int bc__shards_sync(bc__shards *sh);
/* For a read of [offset, offset+size) of shard i: *fd, after checking the
 * range lies inside the file (refreshing its size by fstat and opening a
 * shard another process created, when needed).  BC_ECORRUPT otherwise. */
int bc__shards_locate(bc__shards *sh, uint64_t i, uint64_t offset,
                      uint64_t size, int *fd, const char *path);

#endif /* BC_ARCHIVE_INTERNAL_H */
