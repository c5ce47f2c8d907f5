/*
 * bagcache/archive.h - keyed archives in barecat 0.2.7's format.
 *
 * An archive NAME is the SQLite index NAME-sqlite-index plus the data
 * shards NAME-shard-00000, NAME-shard-00001, ... (doc/archive.md gives the
 * format).  Files are added by path and read back by path; each file's
 * CRC-32C is stored on add and checked on every read.
 *
 * Built only where configure found SQLite (libsqlite3-dev): without it
 * these functions are not in the library and BC_HAVE_ARCHIVE in
 * bagcache's config.h is not defined (configure prints "archive: no").
 *
 * Threads: every function may be called from any thread.  Reads (read,
 * read_alloc, stat, exists, listdir, num_files, total_size, verify) may run
 * at the same time as each other; the index lookups are serialized by one
 * mutex around the connection's prepared statements and the shard reads
 * (pread) run outside it.  Writes (add, remove, commit) take the same
 * mutex.  close must not overlap any other call on the archive.
 *
 * Processes: one writer at a time (an exclusive flock on the index file,
 * held while the archive is open for writing); readers follow SQLite's
 * rules and see what the writer has committed.
 */
#ifndef BAGCACHE_ARCHIVE_H
#define BAGCACHE_ARCHIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bc_archive bc_archive;

/* A metadata field (mode, uid, gid, mtime_ns) with no value (SQL NULL). */
#define BC_ARCHIVE_UNSET INT64_MIN

/* Versioned: initialize with BC_ARCHIVE_OPTIONS_INIT or
 * bc_archive_options_init(); NULL options mean the defaults. */
#define BC_ARCHIVE_OPTIONS_VERSION 1

typedef struct bc_archive_options {
  /* BC_ARCHIVE_OPTIONS_VERSION; another version is BC_EINVAL. */
  unsigned version;
  /* Open for reading only (the default, as barecat's readonly=True): every
   * write is BC_EPERM and no file of the archive is changed. */
  bool readonly;
  /* For writing: the largest shard, in bytes (barecat's shard_size_limit).
   * 0 keeps the archive's own (a new archive's is 2^63 - 1).  A limit below
   * the largest existing shard is BC_EINVAL. */
  uint64_t shard_size_limit;
  /* For writing an archive that exists: overwrite removes it (index and
   * every shard) and creates a new one; otherwise, with exist_ok (the
   * default), files are added to it, and without exist_ok opening is
   * BC_EINVAL.  Both are ignored when readonly. */
  bool overwrite;
  bool exist_ok;
} bc_archive_options;

#define BC_ARCHIVE_OPTIONS_INIT {BC_ARCHIVE_OPTIONS_VERSION, true, 0, false, true}

/* Sets *opts to BC_ARCHIVE_OPTIONS_INIT; BC_EINVAL unless `version` is
 * BC_ARCHIVE_OPTIONS_VERSION. */
int bc_archive_options_init(bc_archive_options *opts, unsigned version);

/* A file's metadata as its row in the files table holds it.  The four
 * metadata fields are BC_ARCHIVE_UNSET where the row has NULL. */
typedef struct bc_archive_file_info {
  uint64_t size;
  uint64_t shard;   /* NAME-shard-%05d */
  uint64_t offset;  /* in the shard */
  uint32_t crc32c;  /* valid when has_crc32c */
  bool has_crc32c;  /* false for a row with NULL: such a file is read
                       without a check (bagcache never writes one) */
  int64_t mode;
  int64_t uid;
  int64_t gid;
  int64_t mtime_ns;
} bc_archive_file_info;

/* A directory's row in the dirs table: the aggregates are exact. */
typedef struct bc_archive_dir_info {
  uint64_t num_subdirs;    /* direct subdirectories */
  uint64_t num_files;      /* direct files */
  uint64_t num_files_tree; /* files anywhere below */
  uint64_t size_tree;      /* their total size in bytes */
  int64_t mode;
  int64_t uid;
  int64_t gid;
  int64_t mtime_ns;
} bc_archive_dir_info;

/* Metadata for bc_archive_add; NULL means all BC_ARCHIVE_UNSET. */
typedef struct bc_archive_file_meta {
  int64_t mode;
  int64_t uid;
  int64_t gid;
  int64_t mtime_ns;
} bc_archive_file_meta;

#define BC_ARCHIVE_FILE_META_INIT \
  {BC_ARCHIVE_UNSET, BC_ARCHIVE_UNSET, BC_ARCHIVE_UNSET, BC_ARCHIVE_UNSET}

/* One entry of bc_archive_listdir: a name (not a path) in the directory. */
typedef struct bc_archive_dirent {
  const char *name;
  bool is_dir;
} bc_archive_dirent;

/* Paths are normalized as barecat does (os.path.normpath, then without a
 * leading '/'): "a//b/./c" and "/a/b/c" are "a/b/c", "", "." and "/" are the
 * root directory.  A ".." that leaves the root is BC_EINVAL. */

/* Opens (or, for writing, creates) the archive whose files are
 * PATH-sqlite-index and PATH-shard-NNNNN.  Errors: BC_ENOTFOUND (reading an
 * archive that does not exist), BC_ECORRUPT (the index is not an SQLite
 * database or lacks barecat's tables, a shard is missing, or the index
 * points past a shard's end), BC_EVERSION (schema_version_major is not 0),
 * BC_EAGAIN (another process has it open for writing), BC_EINVAL, BC_EIO,
 * BC_EPERM.  Opening for writing rolls back what a killed writer had not
 * committed, including bytes it had appended to the last shard. */
int bc_archive_open(bc_archive **out, const char *path,
                    const bc_archive_options *opts);

/* Commits (bc_archive_commit) and closes; NULL is a no-op.  Returns the
 * commit's error, if any (the archive is closed all the same, keeping its
 * last commit). */
int bc_archive_close(bc_archive *a);

/* Adds file `path` with `size` bytes of `data` (NULL when size is 0).
 * Errors: BC_EPERM (read-only), BC_EINVAL (the path is empty, is the root,
 * exists as a file or a directory, or lies below a file; the file is larger
 * than shard_size_limit).  Visible to this handle's reads at once and to
 * other processes after the next commit. */
int bc_archive_add(bc_archive *a, const char *path, const void *data,
                   size_t size, const bc_archive_file_meta *meta);

/* Makes what was added and removed durable and visible to other processes:
 * fsyncs the shards written since the last commit (and their directory
 * when a shard was created), then commits the index.  add commits by itself
 * every 4096 files or 64 MiB, close commits.  A no-op when read-only. */
int bc_archive_commit(bc_archive *a);

/* Removes file `path` from the index; its bytes stay in the shard,
 * unreferenced (as in barecat).  BC_ENOTFOUND when there is no such file
 * (a directory is not a file), BC_EPERM when read-only. */
int bc_archive_remove(bc_archive *a, const char *path);

/* Reads file `path` into buf[0..cap).  *size_out (may be NULL) gets the
 * file's size; a buffer too small is BC_ERANGE with *size_out set and
 * nothing read.  BC_ENOTFOUND (no such file), BC_ECORRUPT (the CRC-32C does
 * not match, or the row points past its shard's end: no bytes are
 * returned), BC_EIO. */
int bc_archive_read(bc_archive *a, const char *path, void *buf, size_t cap,
                    size_t *size_out);

/* Like bc_archive_read into a malloc'd buffer (*out, free with free();
 * non-NULL even for an empty file). */
int bc_archive_read_alloc(bc_archive *a, const char *path, void **out,
                          size_t *size_out);

/* The file's row.  BC_ENOTFOUND when it is not a file. */
int bc_archive_stat(bc_archive *a, const char *path, bc_archive_file_info *out);

/* The directory's row.  BC_ENOTFOUND when it is not a directory. */
int bc_archive_stat_dir(bc_archive *a, const char *path,
                        bc_archive_dir_info *out);

/* 1 if `path` is a file (isfile), a directory (isdir), either (exists),
 * 0 if not, or a negative error code. */
int bc_archive_exists(bc_archive *a, const char *path);
int bc_archive_isfile(bc_archive *a, const char *path);
int bc_archive_isdir(bc_archive *a, const char *path);

/* The entries of directory `dir`: its subdirectories, then its files, each
 * in the order of their paths (bytewise).  *out is one malloc'd block
 * (free it with free()), NULL when *count is 0.  BC_ENOTFOUND when `dir` is
 * not a directory. */
int bc_archive_listdir(bc_archive *a, const char *dir, bc_archive_dirent **out,
                       size_t *count);

/* Number of files, and their total size in bytes (the root's
 * num_files_tree and size_tree).  Negative on error (an error code). */
int64_t bc_archive_num_files(bc_archive *a);
int64_t bc_archive_total_size(bc_archive *a);

/* Reads every file and checks its size against its shard and its CRC-32C,
 * and checks every directory's aggregates against the files.  0 when all
 * is right; else BC_ECORRUPT whose message names the first bad path (in
 * path order) and what is wrong.  May be called any number of times. */
int bc_archive_verify(bc_archive *a);

/* ---- directories, renames, listings (src/archive/tree.c) ------------------ */

/* Adds directory `path` and its missing ancestors (as adding a file below
 * it would), with `meta` (NULL: all unset).  An existing directory is
 * BC_EINVAL unless exist_ok, which sets its metadata to `meta` instead.
 * BC_EINVAL too for a path that is a file or lies below one, BC_EPERM when
 * read-only.  The aggregates stay exact. */
int bc_archive_add_dir(bc_archive *a, const char *path,
                       const bc_archive_file_meta *meta, bool exist_ok);

/* Renames file or directory `old_path` to `new_path` (a directory with
 * everything below it).  Missing ancestors of new_path are created.
 * BC_ENOTFOUND (old_path is neither), BC_EINVAL (new_path exists, lies
 * below a file or inside old_path, or either is the root), BC_EPERM.
 * Renaming a path to itself does nothing.  The aggregates of every
 * directory on both sides stay exact (barecat's move_subdir trigger is not
 * used: it miscounts the parents' num_files). */
int bc_archive_rename(bc_archive *a, const char *old_path, const char *new_path);

/* Removes empty directory `path`.  BC_ENOTFOUND (no such directory),
 * BC_EINVAL (not empty, a file, the root), BC_EPERM. */
int bc_archive_rmdir(bc_archive *a, const char *path);

/* Removes directory `path` with every file and directory below it (their
 * bytes stay in the shards, unreferenced).  Errors as bc_archive_rmdir,
 * but a non-empty directory is removed. */
int bc_archive_remove_tree(bc_archive *a, const char *path);

/* Every file's path, in path order (bytewise): *out is one malloc'd block
 * (free it with free()) holding the *count pointers and then the strings;
 * NULL when there are no files. */
int bc_archive_list_files(bc_archive *a, char ***out, size_t *count);

/* Reads n bytes at `offset` of the file whose row is *fi (from
 * bc_archive_stat) into buf, without a CRC check (the caller checks a
 * whole file with bc_archive_crc32c).  The row's whole range is checked
 * against its shard first (BC_ECORRUPT past the shard's end); a range past
 * the file's size is BC_ERANGE. */
int bc_archive_read_at(bc_archive *a, const bc_archive_file_info *fi,
                       uint64_t offset, void *buf, size_t n);

/* Continues a CRC-32C (Castagnoli), the checksum of the crc32c column:
 * bc_archive_crc32c(bc_archive_crc32c(0, a, n), b, m) is that of a then b. */
uint32_t bc_archive_crc32c(uint32_t crc, const void *data, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* BAGCACHE_ARCHIVE_H */
