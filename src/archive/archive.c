/*
 * src/archive/archive.c - the public bc_archive_* API: opening and
 * creating, add/remove with the commit rule, reads with their checks.
 *
 * Crash rule: bytes are appended to the last shard and their row inserted
 * in an open write transaction; a commit first fsyncs every shard written
 * since the last one (bc__shards_sync), then commits the index.  So a
 * committed row only ever points at durable bytes, and a killed writer
 * leaves rows SQLite rolls back (its hot journal) plus unreferenced bytes
 * at the end of the last shard, which the next writer truncates at open.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "archive/internal.h"
#include "common/crc32c.h"

int bc_archive_options_init(bc_archive_options *opts, unsigned version) {
  return BC__OPTIONS_INIT(bc_archive_options, BC_ARCHIVE_OPTIONS, opts, version);
}

static char *index_path(const char *base) {
  size_t n = strlen(base) + sizeof "-sqlite-index";
  char *p = malloc(n);
  if (p != NULL) snprintf(p, n, "%s-sqlite-index", base);
  return p;
}

/* Truncates the last shard to the end of the last bytes a row points at,
 * and checks that no row points past its shard or at a missing shard. */
static int recover_shards(bc_archive *a) {
  int rc = 0;
  int64_t max_shard = -1;
  uint64_t end = 0;
  size_t last;
  if ((rc = bc__index_max_shard(&a->ix, &max_shard)) != 0) return rc;
  if (max_shard >= (int64_t)a->sh.n)
    return bc__error(BC_ECORRUPT, "%s: the index points at shard %05lld, but "
                     "there are only %zu shards", a->path, (long long)max_shard,
                     a->sh.n);
  if (a->readonly || a->sh.n == 0) return 0;
  last = a->sh.n - 1;
  if ((rc = bc__index_shard_end(&a->ix, last, &end)) != 0) return rc;
  if (end > a->sh.v[last].size)
    return bc__error(BC_ECORRUPT, "%s-shard-%05zu has %llu bytes, but the "
                     "index points at bytes up to %llu", a->path, last,
                     (unsigned long long)a->sh.v[last].size,
                     (unsigned long long)end);
  if (end < a->sh.v[last].size) {
    rc = bc__shards_truncate(&a->sh, last, end);
    if (rc == 0) rc = bc__shards_sync(&a->sh);
  }
  return rc;
}

static int largest_shard(bc_archive *a, uint64_t *out) {
  int rc = 0;
  *out = 0;
  for (size_t i = 0; i < a->sh.n && rc == 0; i++) {
    uint64_t end = 0;
    rc = bc__index_shard_end(&a->ix, i, &end);
    if (end > *out) *out = end;
  }
  return rc;
}

/* As barecat's util.exists: the index or the first shard is there. */
static int archive_exists(const char *ipath, const char *base, bool *exists) {
  struct stat st;
  size_t n = strlen(base) + sizeof "-shard-00000";
  char *shard0;
  *exists = false;
  if (stat(ipath, &st) == 0) {
    *exists = true;
    return 0;
  }
  if (errno != ENOENT) return bc__error_errno(errno, "%s: stat", ipath);
  if ((shard0 = malloc(n)) == NULL)
    return bc__error(BC_ENOMEM, "archive: out of memory");
  snprintf(shard0, n, "%s-shard-00000", base);
  *exists = stat(shard0, &st) == 0;
  free(shard0);
  return 0;
}

/* Opens the index file and takes the writer's exclusive flock on it. */
static int lock_index(const char *ipath, const char *path, int *fd) {
  *fd = open(ipath, O_RDWR | O_CLOEXEC);
  if (*fd < 0) return bc__error_errno(errno, "%s: open", ipath);
  if (flock(*fd, LOCK_EX | LOCK_NB) != 0)
    return errno == EWOULDBLOCK
               ? bc__error(BC_EAGAIN, "%s: another process has the archive "
                           "open for writing", path)
               : bc__error_errno(errno, "%s: flock", ipath);
  return 0;
}

int bc_archive_open(bc_archive **out, const char *path,
                    const bc_archive_options *opts) {
  static const bc_archive_options defaults = BC_ARCHIVE_OPTIONS_INIT;
  bc_archive *a = NULL;
  char *ipath = NULL;
  bool exists = false, mutex = false;
  int rc = 0;
  if (out == NULL || path == NULL || path[0] == '\0')
    return bc__error(BC_EINVAL, "bc_archive_open: NULL or empty argument");
  *out = NULL;
  if (opts == NULL) opts = &defaults;
  if (opts->version != BC_ARCHIVE_OPTIONS_VERSION)
    return bc__options_version("bc_archive_options", "BC_ARCHIVE_OPTIONS",
                               opts->version, BC_ARCHIVE_OPTIONS_VERSION);
  if (opts->shard_size_limit > BC__ARCHIVE_NO_LIMIT)
    return bc__error(BC_EINVAL, "%s: shard_size_limit %llu is above 2^63 - 1",
                     path, (unsigned long long)opts->shard_size_limit);
  a = calloc(1, sizeof *a);
  ipath = index_path(path);
  if (a == NULL || ipath == NULL || (a->path = strdup(path)) == NULL) {
    rc = bc__error(BC_ENOMEM, "bc_archive_open: out of memory");
    goto cleanup;
  }
  a->lock_fd = -1;
  a->readonly = opts->readonly;
  if (pthread_mutex_init(&a->lock, NULL) != 0) {
    rc = bc__error(BC_ENOMEM, "bc_archive_open: mutex");
    goto cleanup;
  }
  mutex = true;
  if ((rc = archive_exists(ipath, path, &exists)) != 0) goto cleanup;
  if (opts->readonly) {
    struct stat st;
    if (stat(ipath, &st) != 0) {
      rc = bc__error(BC_ENOTFOUND, "%s: no such archive (%s does not exist)",
                     path, ipath);
      goto cleanup;
    }
  } else if (exists && !opts->exist_ok) {
    rc = bc__error(BC_EINVAL, "%s: the archive exists (exist_ok is off)", path);
    goto cleanup;
  } else if (exists && opts->overwrite) {
    /* Not under a live writer: take its lock first. */
    struct stat st;
    if (stat(ipath, &st) == 0 && (rc = lock_index(ipath, path, &a->lock_fd)) < 0)
      goto cleanup;
    if (unlink(ipath) != 0 && errno != ENOENT) {
      rc = bc__error_errno(errno, "%s: unlink", ipath);
      goto cleanup;
    }
    if ((rc = bc__shards_remove_all(path)) != 0) goto cleanup;
    if (a->lock_fd >= 0) close(a->lock_fd);
    a->lock_fd = -1;
  }
  if (!opts->readonly) {
    struct stat st;
    bool created = false;
    if (stat(ipath, &st) != 0) {
      if (errno != ENOENT) {
        rc = bc__error_errno(errno, "%s: stat", ipath);
        goto cleanup;
      }
      if ((rc = bc__index_create(ipath)) < 0) goto cleanup;
      created = rc == 0;
      if (rc == 1 && !opts->exist_ok) {
        rc = bc__error(BC_EINVAL, "%s: the archive exists (another process "
                       "created it; exist_ok is off)", path);
        goto cleanup;
      }
      rc = 0;
    }
    if ((rc = lock_index(ipath, path, &a->lock_fd)) < 0) goto cleanup;
    /* Shards beside an index we just created (a creator killed before its
     * index was linked in, or an overwrite that lost a race) hold nothing
     * any index points at: start afresh, now that we hold the lock. */
    if (created && (rc = bc__shards_remove_all(path)) != 0) goto cleanup;
  }
  if ((rc = bc__index_open(&a->ix, ipath, opts->readonly)) != 0 ||
      (rc = bc__shards_open(&a->sh, path, opts->readonly)) != 0 ||
      (rc = recover_shards(a)) != 0)
    goto cleanup;
  if (!opts->readonly && opts->shard_size_limit != 0) {
    uint64_t largest = 0;
    if ((rc = largest_shard(a, &largest)) != 0 ||
        (rc = bc__index_set_limit(&a->ix, opts->shard_size_limit, largest)) != 0 ||
        (rc = bc__index_commit(&a->ix)) != 0)
      goto cleanup;
  }
  *out = a;
  a = NULL;
cleanup:
  if (a != NULL) {
    bc__index_close(&a->ix);
    bc__shards_close(&a->sh);
    if (a->lock_fd >= 0) close(a->lock_fd);
    if (mutex) pthread_mutex_destroy(&a->lock);
    free(a->path);
    free(a);
  }
  free(ipath);
  return rc;
}

/* Caller holds a->lock. */
static int commit_locked(bc_archive *a) {
  int rc = 0;
  if (a->readonly || !a->ix.in_txn) return 0;
  if ((rc = bc__shards_sync(&a->sh)) != 0 || (rc = bc__index_commit(&a->ix)) != 0)
    return rc;
  a->pending_files = 0;
  a->pending_bytes = 0;
  return 0;
}

int bc_archive_commit(bc_archive *a) {
  int rc;
  if (a == NULL) return bc__error(BC_EINVAL, "bc_archive_commit: NULL archive");
  pthread_mutex_lock(&a->lock);
  rc = commit_locked(a);
  pthread_mutex_unlock(&a->lock);
  return rc;
}

int bc_archive_close(bc_archive *a) {
  int rc = 0;
  if (a == NULL) return 0;
  pthread_mutex_lock(&a->lock);
  rc = commit_locked(a);
  pthread_mutex_unlock(&a->lock);
  bc__index_close(&a->ix); /* rolls back what a failed commit left */
  bc__shards_close(&a->sh);
  if (a->lock_fd >= 0) close(a->lock_fd); /* releases the flock */
  pthread_mutex_destroy(&a->lock);
  free(a->path);
  free(a);
  return rc;
}

static int writable(bc_archive *a, const char *what) {
  if (a == NULL) return bc__error(BC_EINVAL, "%s: NULL archive", what);
  if (a->readonly)
    return bc__error(BC_EPERM, "%s: %s: the archive is open read-only", a->path,
                     what);
  return 0;
}

/* Whether any ancestor of normalized `path` is a file (caller holds lock). */
static int below_file(bc_archive *a, const char *path, char **bad) {
  char *p = strdup(path);
  int rc = 0;
  *bad = NULL;
  if (p == NULL) return bc__error(BC_ENOMEM, "archive: out of memory");
  for (size_t len = bc__archive_parent_len(p); len > 0 && rc == 0;
       len = bc__archive_parent_len(p)) {
    bc_archive_file_info fi;
    p[len] = '\0';
    rc = bc__index_lookup_file(&a->ix, p, &fi);
    if (rc == 1) {
      *bad = p;
      return 1;
    }
  }
  free(p);
  return rc;
}

int bc_archive_add(bc_archive *a, const char *path, const void *data,
                   size_t size, const bc_archive_file_meta *meta) {
  static const bc_archive_file_meta no_meta = BC_ARCHIVE_FILE_META_INIT;
  char *key = NULL, *bad = NULL;
  bc_archive_file_info fi;
  bc_archive_dir_info di;
  bool locked = false, wrote = false;
  size_t shard = 0;
  int rc;
  if ((rc = writable(a, "add")) != 0) return rc;
  if (path == NULL || (data == NULL && size > 0))
    return bc__error(BC_EINVAL, "%s: add: NULL path or data", a->path);
  if (meta == NULL) meta = &no_meta;
  if ((rc = bc__archive_normalize(path, &key)) != 0) goto cleanup;
  if (key[0] == '\0') {
    rc = bc__error(BC_EINVAL, "%s: add '%s': the path names the root", a->path,
                   path);
    goto cleanup;
  }
  pthread_mutex_lock(&a->lock);
  locked = true;
  if ((uint64_t)size > a->ix.shard_size_limit) {
    rc = bc__error(BC_EINVAL, "%s: add '%s': %zu bytes is larger than the "
                   "shard_size_limit, %llu bytes", a->path, key, size,
                   (unsigned long long)a->ix.shard_size_limit);
    goto cleanup;
  }
  /* Refused before any byte is written, so a refusal leaves no stray bytes. */
  if ((rc = bc__index_lookup_file(&a->ix, key, &fi)) != 0 ||
      (rc = bc__index_lookup_dir(&a->ix, key, &di)) != 0) {
    if (rc > 0)
      rc = bc__error(BC_EINVAL, "%s: add '%s': exists", a->path, key);
    goto cleanup;
  }
  if ((rc = below_file(a, key, &bad)) != 0) {
    if (rc > 0)
      rc = bc__error(BC_EINVAL, "%s: add '%s': '%s' is a file", a->path, key, bad);
    goto cleanup;
  }
  shard = a->sh.n - 1;
  /* barecat's rule: a new shard when the file does not fit in this one. */
  if (a->sh.v[shard].size + size > a->ix.shard_size_limit) {
    if ((rc = bc__shards_add(&a->sh)) != 0) goto cleanup;
    shard = a->sh.n - 1;
  }
  memset(&fi, 0, sizeof fi);
  fi.shard = shard;
  fi.offset = a->sh.v[shard].size;
  fi.size = size;
  fi.crc32c = bc__crc32c(0, data, size);
  fi.has_crc32c = true;
  fi.mode = meta->mode;
  fi.uid = meta->uid;
  fi.gid = meta->gid;
  fi.mtime_ns = meta->mtime_ns;
  if ((rc = bc__shards_write(&a->sh, shard, fi.offset, data, size)) != 0) {
    wrote = true;
    goto cleanup;
  }
  wrote = true;
  if ((rc = bc__index_insert_file(&a->ix, key, &fi)) != 0) goto cleanup;
  wrote = false;
  a->pending_files++;
  a->pending_bytes += size;
  if (a->pending_files >= BC__ARCHIVE_COMMIT_FILES ||
      a->pending_bytes >= BC__ARCHIVE_COMMIT_BYTES)
    rc = commit_locked(a);
cleanup:
  if (rc != 0 && wrote) {
    /* Take back the bytes no row points at. */
    int saved = bc_errno();
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", bc_errmsg());
    bc__shards_truncate(&a->sh, shard, fi.offset);
    bc__error(rc, "%s", msg);
    BC__UNUSED(saved);
  }
  if (locked) pthread_mutex_unlock(&a->lock);
  free(bad);
  free(key);
  return rc;
}

int bc_archive_remove(bc_archive *a, const char *path) {
  char *key = NULL;
  int rc;
  if ((rc = writable(a, "remove")) != 0) return rc;
  if (path == NULL) return bc__error(BC_EINVAL, "%s: remove: NULL path", a->path);
  if ((rc = bc__archive_normalize(path, &key)) != 0) return rc;
  pthread_mutex_lock(&a->lock);
  rc = bc__index_delete_file(&a->ix, key);
  if (rc == 0)
    rc = bc__error(BC_ENOTFOUND, "%s: remove '%s': no such file", a->path, key);
  else if (rc == 1)
    rc = 0;
  pthread_mutex_unlock(&a->lock);
  free(key);
  return rc;
}

/* The file's row and the fd and range to read (checked against the shard). */
static int locate(bc_archive *a, const char *path, bc_archive_file_info *fi,
                  int *fd, char **key_out) {
  char *key = NULL;
  int rc;
  if (a == NULL || path == NULL)
    return bc__error(BC_EINVAL, "archive read: NULL argument");
  if ((rc = bc__archive_normalize(path, &key)) != 0) return rc;
  pthread_mutex_lock(&a->lock);
  rc = bc__index_lookup_file(&a->ix, key, fi);
  if (rc == 0)
    rc = bc__error(BC_ENOTFOUND, "%s: '%s': no such file", a->path, key);
  else if (rc == 1)
    rc = bc__shards_locate(&a->sh, fi->shard, fi->offset, fi->size, fd, key);
  pthread_mutex_unlock(&a->lock);
  if (rc == 0 && key_out != NULL)
    *key_out = key;
  else
    free(key);
  return rc;
}

/* Reads the located bytes into buf and checks the CRC. */
static int read_checked(bc_archive *a, const char *key,
                        const bc_archive_file_info *fi, int fd, void *buf) {
  char what[256];
  int rc;
  snprintf(what, sizeof what, "%s: '%s'", a->path, key);
  if (fi->size > 0 &&
      (rc = bc__pread_all(fd, buf, (size_t)fi->size, fi->offset, what)) != 0)
    return rc;
  if (fi->has_crc32c) {
    uint32_t crc = bc__crc32c(0, buf, (size_t)fi->size);
    if (crc != fi->crc32c)
      return bc__error(BC_ECORRUPT, "%s: '%s': CRC-32C mismatch (stored "
                       "%08x, data %08x): the file is damaged", a->path, key,
                       (unsigned)fi->crc32c, (unsigned)crc);
  }
  return 0;
}

int bc_archive_read(bc_archive *a, const char *path, void *buf, size_t cap,
                    size_t *size_out) {
  bc_archive_file_info fi;
  char *key = NULL;
  int fd = -1, rc = locate(a, path, &fi, &fd, &key);
  if (rc != 0) goto cleanup;
  if (size_out != NULL) *size_out = (size_t)fi.size;
  if (fi.size > cap) {
    rc = bc__error(BC_ERANGE, "%s: '%s' has %llu bytes, the buffer %zu", a->path,
                   key, (unsigned long long)fi.size, cap);
    goto cleanup;
  }
  if (buf == NULL && fi.size > 0) {
    rc = bc__error(BC_EINVAL, "%s: read: NULL buffer", a->path);
    goto cleanup;
  }
  rc = read_checked(a, key, &fi, fd, buf);
cleanup:
  free(key);
  return rc;
}

int bc_archive_read_alloc(bc_archive *a, const char *path, void **out,
                          size_t *size_out) {
  bc_archive_file_info fi;
  char *key = NULL;
  void *buf = NULL;
  int fd = -1, rc;
  if (out == NULL) return bc__error(BC_EINVAL, "archive read: NULL argument");
  *out = NULL;
  if ((rc = locate(a, path, &fi, &fd, &key)) != 0) goto cleanup;
  if (fi.size > SIZE_MAX - 1 || (buf = malloc((size_t)fi.size + 1)) == NULL) {
    rc = bc__error(BC_ENOMEM, "%s: '%s': no memory for %llu bytes", a->path, key,
                   (unsigned long long)fi.size);
    goto cleanup;
  }
  if ((rc = read_checked(a, key, &fi, fd, buf)) != 0) goto cleanup;
  if (size_out != NULL) *size_out = (size_t)fi.size;
  *out = buf;
  buf = NULL;
cleanup:
  free(buf);
  free(key);
  return rc;
}

int bc_archive_stat(bc_archive *a, const char *path, bc_archive_file_info *out) {
  char *key = NULL;
  int rc;
  if (a == NULL || path == NULL || out == NULL)
    return bc__error(BC_EINVAL, "bc_archive_stat: NULL argument");
  if ((rc = bc__archive_normalize(path, &key)) != 0) return rc;
  pthread_mutex_lock(&a->lock);
  rc = bc__index_lookup_file(&a->ix, key, out);
  pthread_mutex_unlock(&a->lock);
  if (rc == 0) rc = bc__error(BC_ENOTFOUND, "%s: '%s': no such file", a->path, key);
  free(key);
  return rc > 0 ? 0 : rc;
}

int bc_archive_stat_dir(bc_archive *a, const char *path, bc_archive_dir_info *out) {
  char *key = NULL;
  int rc;
  if (a == NULL || path == NULL || out == NULL)
    return bc__error(BC_EINVAL, "bc_archive_stat_dir: NULL argument");
  if ((rc = bc__archive_normalize(path, &key)) != 0) return rc;
  pthread_mutex_lock(&a->lock);
  rc = bc__index_lookup_dir(&a->ix, key, out);
  pthread_mutex_unlock(&a->lock);
  if (rc == 0)
    rc = bc__error(BC_ENOTFOUND, "%s: '%s': no such directory", a->path, key);
  free(key);
  return rc > 0 ? 0 : rc;
}

/* kind: 1 file, 2 dir, 3 either. */
static int exists_kind(bc_archive *a, const char *path, int kind) {
  bc_archive_file_info fi;
  bc_archive_dir_info di;
  char *key = NULL;
  int rc = 0;
  if (a == NULL || path == NULL)
    return bc__error(BC_EINVAL, "bc_archive_exists: NULL argument");
  if ((rc = bc__archive_normalize(path, &key)) != 0) return rc;
  pthread_mutex_lock(&a->lock);
  if (kind & 1) rc = bc__index_lookup_file(&a->ix, key, &fi);
  if (rc == 0 && (kind & 2)) rc = bc__index_lookup_dir(&a->ix, key, &di);
  pthread_mutex_unlock(&a->lock);
  free(key);
  return rc;
}

int bc_archive_exists(bc_archive *a, const char *path) {
  return exists_kind(a, path, 3);
}
int bc_archive_isfile(bc_archive *a, const char *path) {
  return exists_kind(a, path, 1);
}
int bc_archive_isdir(bc_archive *a, const char *path) {
  return exists_kind(a, path, 2);
}

int bc_archive_listdir(bc_archive *a, const char *dir, bc_archive_dirent **out,
                       size_t *count) {
  bc_archive_dir_info di;
  char *key = NULL;
  int rc;
  if (a == NULL || dir == NULL || out == NULL || count == NULL)
    return bc__error(BC_EINVAL, "bc_archive_listdir: NULL argument");
  *out = NULL;
  *count = 0;
  if ((rc = bc__archive_normalize(dir, &key)) != 0) return rc;
  pthread_mutex_lock(&a->lock);
  rc = bc__index_lookup_dir(&a->ix, key, &di);
  if (rc == 0)
    rc = bc__error(BC_ENOTFOUND, "%s: '%s': no such directory", a->path, key);
  else if (rc == 1)
    rc = bc__index_listdir(&a->ix, key, out, count);
  pthread_mutex_unlock(&a->lock);
  free(key);
  return rc;
}

static int64_t root_stat(bc_archive *a, bool size) {
  bc_archive_dir_info di;
  int rc;
  if (a == NULL) return bc__error(BC_EINVAL, "archive: NULL archive");
  pthread_mutex_lock(&a->lock);
  rc = bc__index_lookup_dir(&a->ix, "", &di);
  pthread_mutex_unlock(&a->lock);
  if (rc == 0) return bc__error(BC_ECORRUPT, "%s: the index has no root", a->path);
  if (rc < 0) return rc;
  return (int64_t)(size ? di.size_tree : di.num_files_tree);
}

int64_t bc_archive_num_files(bc_archive *a) { return root_stat(a, false); }
int64_t bc_archive_total_size(bc_archive *a) { return root_stat(a, true); }

typedef struct verify_ctx {
  bc_archive *a;
  void *buf;
  size_t cap;
} verify_ctx;

/* Called with a->lock held (inside bc__index_each_file). */
static int verify_one(void *arg, const char *path, const bc_archive_file_info *fi) {
  verify_ctx *v = arg;
  int fd = -1;
  int rc = bc__shards_locate(&v->a->sh, fi->shard, fi->offset, fi->size, &fd, path);
  if (rc != 0) return rc;
  if (fi->size > v->cap) {
    void *nb = realloc(v->buf, (size_t)fi->size);
    if (nb == NULL)
      return bc__error(BC_ENOMEM, "verify '%s': no memory for %llu bytes", path,
                       (unsigned long long)fi->size);
    v->buf = nb;
    v->cap = (size_t)fi->size;
  }
  if (!fi->has_crc32c)
    return bc__error(BC_ECORRUPT, "%s: '%s': no CRC-32C in the index",
                     v->a->path, path);
  return read_checked(v->a, path, fi, fd, v->buf);
}

int bc_archive_verify(bc_archive *a) {
  verify_ctx v;
  int rc;
  if (a == NULL) return bc__error(BC_EINVAL, "bc_archive_verify: NULL archive");
  memset(&v, 0, sizeof v);
  v.a = a;
  /* Holds the lock throughout: verify is a maintenance pass, and the file
   * rows it walks must not change under it. */
  pthread_mutex_lock(&a->lock);
  rc = bc__index_each_file(&a->ix, verify_one, &v);
  if (rc == 0) rc = bc__index_check_aggregates(&a->ix);
  pthread_mutex_unlock(&a->lock);
  free(v.buf);
  if (rc == 0) bc__error_clear();
  return rc;
}
