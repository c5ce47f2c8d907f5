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
#include <sys/stat.h>
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
  snprintf(tmp, n, "%s/.%s.tmp-XXXXXX", dir, base);
  fd = mkostemp(tmp, O_CLOEXEC);
  if (fd < 0) {
    rc = bc__error_errno(errno, "%s: cannot create a temporary file in %s",
                         final_path, dir);
    goto cleanup;
  }
  /* mkostemp creates 0600; give the file the mode a plain creat() would. */
  mode_t mask = umask(0);
  umask(mask);
  if (fchmod(fd, (mode ? mode : 0666) & ~mask & 07777) != 0) {
    rc = bc__error_errno(errno, "%s: chmod", tmp);
    goto cleanup;
  }
  *tmp_path = tmp;
  *fd_out = fd;
  tmp = NULL;
  fd = -1;
cleanup:
  if (fd >= 0) {
    close(fd);
    unlink(tmp);
  }
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
