/*
 * src/archive/shards.c - the data files NAME-shard-00000, -00001, ...: a
 * file's bytes lie at (shard, offset, size) as its index row says.
 *
 * Invariant: sh->v[i].size never exceeds the bytes in shard i's file, so a
 * range inside it can be read; a range beyond it is checked against a fresh
 * fstat (another process may have appended) before it is called corrupt.
 * The caller holds bc_archive.lock.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "archive/internal.h"

static char *shard_path(const char *base, size_t i) {
  size_t n = strlen(base) + 32;
  char *p = malloc(n);
  if (p != NULL) snprintf(p, n, "%s-shard-%05zu", base, i);
  return p;
}

/* The directory holding `base` and its last component's name. */
static int split(const char *base, char **dir, const char **name) {
  const char *slash = strrchr(base, '/');
  *name = slash != NULL ? slash + 1 : base;
  *dir = slash == NULL ? strdup(".")
         : slash == base ? strdup("/")
                          : strndup(base, (size_t)(slash - base));
  return *dir == NULL ? bc__error(BC_ENOMEM, "archive: out of memory") : 0;
}

/* The shard number of directory entry `ent` of archive `name`, or -1. */
static long shard_number(const char *ent, const char *name) {
  size_t nl = strlen(name);
  if (strncmp(ent, name, nl) != 0 || strncmp(ent + nl, "-shard-", 7) != 0)
    return -1;
  ent += nl + 7;
  if (strlen(ent) != 5) return -1;
  for (int i = 0; i < 5; i++)
    if (ent[i] < '0' || ent[i] > '9') return -1;
  return strtol(ent, NULL, 10);
}

/* The highest shard number present in the directory, or -1. */
static int scan_max(const char *base, long *max) {
  char *dir = NULL;
  const char *name;
  DIR *d = NULL;
  struct dirent *e;
  int rc = split(base, &dir, &name);
  *max = -1;
  if (rc != 0) goto cleanup;
  d = opendir(dir);
  if (d == NULL) {
    rc = bc__error_errno(errno, "%s: opendir", dir);
    goto cleanup;
  }
  while ((e = readdir(d)) != NULL) {
    long k = shard_number(e->d_name, name);
    if (k > *max) *max = k;
  }
cleanup:
  if (d != NULL) closedir(d);
  free(dir);
  return rc;
}

static int push(bc__shards *sh, int fd, uint64_t size) {
  if (sh->n == sh->cap) {
    size_t cap = sh->cap ? sh->cap * 2 : 8;
    bc__shard *v = realloc(sh->v, cap * sizeof *v);
    if (v == NULL) return bc__error(BC_ENOMEM, "archive: out of memory");
    sh->v = v;
    sh->cap = cap;
  }
  sh->v[sh->n].fd = fd;
  sh->v[sh->n].size = size;
  sh->v[sh->n].dirty = false;
  sh->n++;
  return 0;
}

/* Opens shard i; 0 with *fd = -1 when it does not exist. */
static int open_one(bc__shards *sh, size_t i, int *fd, uint64_t *size) {
  char *p = shard_path(sh->base, i);
  struct stat stt;
  int rc = 0;
  *fd = -1;
  if (p == NULL) return bc__error(BC_ENOMEM, "archive: out of memory");
  *fd = open(p, (sh->readonly ? O_RDONLY : O_RDWR) | O_CLOEXEC);
  if (*fd < 0) {
    if (errno != ENOENT) rc = bc__error_errno(errno, "%s: open", p);
    goto cleanup;
  }
  if (fstat(*fd, &stt) != 0)
    rc = bc__error_errno(errno, "%s: fstat", p);
  else if (!S_ISREG(stt.st_mode))
    rc = bc__error(BC_ECORRUPT, "%s: not a regular file", p);
  if (rc != 0) {
    close(*fd);
    *fd = -1;
    goto cleanup;
  }
  *size = (uint64_t)stt.st_size;
cleanup:
  free(p);
  return rc;
}

int bc__shards_open(bc__shards *sh, const char *base, bool readonly) {
  int rc = 0;
  long max = -1;
  memset(sh, 0, sizeof *sh);
  sh->readonly = readonly;
  sh->base = strdup(base);
  if (sh->base == NULL) return bc__error(BC_ENOMEM, "archive: out of memory");
  for (;;) {
    int fd;
    uint64_t size = 0;
    if ((rc = open_one(sh, sh->n, &fd, &size)) != 0) goto cleanup;
    if (fd < 0) break;
    if ((rc = push(sh, fd, size)) != 0) {
      close(fd);
      goto cleanup;
    }
  }
  if ((rc = scan_max(base, &max)) != 0) goto cleanup;
  if (max >= (long)sh->n) {
    rc = bc__error(BC_ECORRUPT, "%s-shard-%05zu is missing, but shard %05ld "
                   "exists", base, sh->n, max);
    goto cleanup;
  }
  if (!readonly && sh->n == 0) rc = bc__shards_add(sh);
cleanup:
  if (rc != 0) bc__shards_close(sh);
  return rc;
}

void bc__shards_close(bc__shards *sh) {
  for (size_t i = 0; i < sh->n; i++)
    if (sh->v[i].fd >= 0) close(sh->v[i].fd);
  free(sh->v);
  free(sh->base);
  memset(sh, 0, sizeof *sh);
}

int bc__shards_remove_all(const char *base) {
  long max = -1;
  int rc = scan_max(base, &max);
  for (long i = 0; rc == 0 && i <= max; i++) {
    char *p = shard_path(base, (size_t)i);
    if (p == NULL) return bc__error(BC_ENOMEM, "archive: out of memory");
    if (unlink(p) != 0 && errno != ENOENT) rc = bc__error_errno(errno, "%s: unlink", p);
    free(p);
  }
  return rc;
}

int bc__shards_add(bc__shards *sh) {
  char *p = shard_path(sh->base, sh->n);
  int rc = 0, fd;
  if (p == NULL) return bc__error(BC_ENOMEM, "archive: out of memory");
  fd = open(p, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) {
    rc = bc__error_errno(errno, "%s: create", p);
    goto cleanup;
  }
  if ((rc = push(sh, fd, 0)) != 0) {
    close(fd);
    unlink(p);
    goto cleanup;
  }
  sh->created = true;
cleanup:
  free(p);
  return rc;
}

int bc__shards_truncate(bc__shards *sh, size_t i, uint64_t size) {
  if (ftruncate(sh->v[i].fd, (off_t)size) != 0)
    return bc__error_errno(errno, "%s-shard-%05zu: truncate", sh->base, i);
  sh->v[i].size = size;
  sh->v[i].dirty = true;
  return 0;
}

int bc__shards_write(bc__shards *sh, size_t i, uint64_t offset,
                     const void *data, size_t size) {
  const char *p = data;
  uint64_t at = offset;
  size_t left = size;
  while (left > 0) {
    ssize_t w = pwrite(sh->v[i].fd, p, left, (off_t)at);
    if (w < 0) {
      if (errno == EINTR) continue;
      return bc__error_errno(errno, "%s-shard-%05zu: write", sh->base, i);
    }
    p += w;
    at += (uint64_t)w;
    left -= (size_t)w;
  }
  if (offset + size > sh->v[i].size) sh->v[i].size = offset + size;
  sh->v[i].dirty = true;
  return 0;
}

int bc__shards_sync(bc__shards *sh) {
  int rc = 0;
  for (size_t i = 0; i < sh->n && rc == 0; i++) {
    if (!sh->v[i].dirty) continue;
    if (fsync(sh->v[i].fd) != 0)
      rc = bc__error_errno(errno, "%s-shard-%05zu: fsync", sh->base, i);
    else
      sh->v[i].dirty = false;
  }
  if (rc == 0 && sh->created) {
    char *p = shard_path(sh->base, 0);
    if (p == NULL) return bc__error(BC_ENOMEM, "archive: out of memory");
    rc = bc__fsync_parent_dir(p);
    free(p);
    if (rc == 0) sh->created = false;
  }
  return rc;
}

int bc__shards_locate(bc__shards *sh, uint64_t i, uint64_t offset,
                      uint64_t size, int *fd, const char *path) {
  int rc = 0;
  /* A shard another process created after we opened. */
  while (rc == 0 && i >= sh->n) {
    int nfd;
    uint64_t nsize = 0;
    if ((rc = open_one(sh, sh->n, &nfd, &nsize)) != 0) break;
    if (nfd < 0) {
      rc = bc__error(BC_ECORRUPT, "'%s': in shard %llu, but %s-shard-%05zu "
                     "does not exist", path, (unsigned long long)i, sh->base,
                     sh->n);
      break;
    }
    if ((rc = push(sh, nfd, nsize)) != 0) close(nfd);
  }
  if (rc != 0) return rc;
  if (offset > UINT64_MAX - size) {
    return bc__error(BC_ECORRUPT, "'%s': offset %llu + size %llu overflows", path,
                     (unsigned long long)offset, (unsigned long long)size);
  }
  if (offset + size > sh->v[i].size) {
    struct stat stt;
    if (fstat(sh->v[i].fd, &stt) != 0)
      return bc__error_errno(errno, "%s-shard-%05llu: fstat", sh->base,
                             (unsigned long long)i);
    sh->v[i].size = (uint64_t)stt.st_size;
    if (offset + size > sh->v[i].size)
      return bc__error(BC_ECORRUPT, "'%s': bytes %llu..%llu of %s-shard-%05llu, "
                       "which has %llu bytes (truncated shard or bad index row)",
                       path, (unsigned long long)offset,
                       (unsigned long long)(offset + size), sh->base,
                       (unsigned long long)i, (unsigned long long)sh->v[i].size);
  }
  *fd = sh->v[i].fd;
  return 0;
}
