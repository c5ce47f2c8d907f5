/* Atomic publish: a file is written under a hidden temporary name in its
 * final directory, fsynced, renamed over the final name, and the directory
 * is fsynced.  Readers therefore see either the old file or the complete new
 * one, never a partial file, even across a crash or power loss. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/internal.h"

/* Splits `path` into a malloc'd directory ("." when none) and a pointer to
 * the base name inside `path`. */
static int split_path(const char *path, char **dir, const char **base) {
  const char *slash = strrchr(path, '/');
  if (slash == NULL) {
    *dir = strdup(".");
    *base = path;
  } else if (slash == path) {
    *dir = strdup("/");
    *base = slash + 1;
  } else {
    *dir = strndup(path, (size_t)(slash - path));
    *base = slash + 1;
  }
  if (*dir == NULL) return bc__error(BC_ENOMEM, "out of memory");
  return 0;
}

int bc__tmp_create(const char *final_path, unsigned mode, char **tmp_path,
                   int *fd_out) {
  char *dir = NULL, *tmp = NULL;
  const char *base;
  int fd = -1;
  int rc = split_path(final_path, &dir, &base);
  if (rc != 0) goto cleanup;
  if (*base == '\0') {
    rc = bc__error(BC_EINVAL, "%s: not a file name", final_path);
    goto cleanup;
  }
  size_t n = strlen(dir) + strlen(base) + 32;
  tmp = malloc(n);
  if (tmp == NULL) {
    rc = bc__error(BC_ENOMEM, "out of memory");
    goto cleanup;
  }
  /* O_EXCL with a random suffix instead of mkstemp: the kernel then applies
   * the umask to `mode` itself, so the umask is never touched (changing it
   * is process-wide and would race with other threads creating files). */
  static _Atomic uint64_t counter;
  uint64_t seed = (uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)&n;
  for (int attempt = 0; attempt < 100; attempt++) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t r = bc__hash64(&ts, sizeof ts, seed + atomic_fetch_add(&counter, 1));
    /* ".BASE.tmp-XXXXXX" must fit NAME_MAX (255): a long base is cut. */
    int keep = (int)strnlen(base, 255 - 12);
    snprintf(tmp, n, "%s/.%.*s.tmp-%06llx", dir, keep, base,
             (unsigned long long)(r & 0xffffff));
    fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC,
              (mode_t)(mode ? mode : 0666) & 07777);
    if (fd >= 0 || errno != EEXIST) break;
  }
  if (fd < 0) {
    rc = bc__error_errno(errno, "%s: cannot create a temporary file in %s",
                         final_path, dir);
    goto cleanup;
  }
  *tmp_path = tmp;
  *fd_out = fd;
  tmp = NULL;
cleanup:
  free(tmp);
  free(dir);
  return rc;
}

int bc__fsync(int fd, const char *what) {
  while (fsync(fd) != 0) {
    if (errno == EINTR) continue;
    return bc__error_errno(errno, "%s: fsync", what);
  }
  return 0;
}

int bc__fsync_parent_dir(const char *path) {
  char *dir = NULL;
  const char *base;
  int rc = split_path(path, &dir, &base);
  if (rc != 0) return rc;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    rc = bc__error_errno(errno, "%s: open directory", dir);
  } else {
    rc = bc__fsync(fd, dir);
    close(fd);
  }
  free(dir);
  return rc;
}

int bc__publish(const char *tmp_path, const char *final_path) {
  if (rename(tmp_path, final_path) != 0)
    return bc__error_errno(errno, "%s: rename from %s", final_path, tmp_path);
  return bc__fsync_parent_dir(final_path);
}
