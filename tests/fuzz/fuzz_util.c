/* Harness helpers of the bag reader fuzzer: failure reports, scratch files. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"

void fz_fail(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "fuzz: %s:%d: ", file, line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
  fflush(stderr);
  abort();
}

void fz_check_failure(int rc, const char *what) {
  FZ_CHECK(rc < 0 && rc > -BC_ERROR_COUNT,
           "%s: returned %d, not a BC_E* code", what, rc);
  const char *msg = bc_errmsg();
  FZ_CHECK(msg != NULL && msg[0] != '\0',
           "%s: failed with %s but bc_errmsg() is empty", what,
           bc_error_name(rc));
}

static char fz_dir_path[PATH_MAX];

/* Removes the files the target made, then the directory (atexit). */
static void fz_dir_remove(void) {
  DIR *d = opendir(fz_dir_path);
  if (d != NULL) {
    struct dirent *e;
    char p[PATH_MAX + NAME_MAX + 2];
    while ((e = readdir(d)) != NULL) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
        continue;
      snprintf(p, sizeof p, "%s/%s", fz_dir_path, e->d_name);
      unlink(p);
    }
    closedir(d);
  }
  rmdir(fz_dir_path);
}

const char *fz_dir(void) {
  if (fz_dir_path[0] != '\0') return fz_dir_path;
  const char *base = getenv("TMPDIR");
  if (base == NULL || base[0] == '\0') base = "/tmp";
  int n = snprintf(fz_dir_path, sizeof fz_dir_path, "%s/bc-fuzz.XXXXXX", base);
  FZ_CHECK(n > 0 && (size_t)n < sizeof fz_dir_path, "TMPDIR too long");
  FZ_CHECK(mkdtemp(fz_dir_path) != NULL, "mkdtemp(%s): %s", fz_dir_path,
           strerror(errno));
  atexit(fz_dir_remove);
  return fz_dir_path;
}

const char *fz_path(int slot, const char *name) {
  static char paths[4][PATH_MAX];
  FZ_CHECK(slot >= 0 && slot < 4, "bad path slot %d", slot);
  int n = snprintf(paths[slot], PATH_MAX, "%s/%s", fz_dir(), name);
  FZ_CHECK(n > 0 && n < PATH_MAX, "path too long");
  return paths[slot];
}

void fz_write_file(const char *path, const void *data, size_t size) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  FZ_CHECK(fd >= 0, "open(%s): %s", path, strerror(errno));
  const unsigned char *p = data;
  while (size > 0) {
    ssize_t w = write(fd, p, size);
    if (w < 0 && errno == EINTR) continue;
    FZ_CHECK(w > 0, "write(%s): %s", path, strerror(errno));
    p += w;
    size -= (size_t)w;
  }
  FZ_CHECK(close(fd) == 0, "close(%s): %s", path, strerror(errno));
}

bool fz_read_file(const char *path, unsigned char **data, size_t *size) {
  *data = NULL;
  *size = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) return false;
  FZ_CHECK(fd >= 0, "open(%s): %s", path, strerror(errno));
  struct stat st;
  FZ_CHECK(fstat(fd, &st) == 0, "fstat(%s): %s", path, strerror(errno));
  size_t n = (size_t)st.st_size;
  unsigned char *buf = NULL;
  if (n > 0) {
    buf = malloc(n);
    FZ_CHECK(buf != NULL, "out of memory reading %s", path);
    size_t got = 0;
    while (got < n) {
      ssize_t r = read(fd, buf + got, n - got);
      if (r < 0 && errno == EINTR) continue;
      FZ_CHECK(r > 0, "read(%s): %s", path, r < 0 ? strerror(errno) : "EOF");
      got += (size_t)r;
    }
  }
  close(fd);
  *data = buf;
  *size = n;
  return true;
}

void fz_unlink(const char *path) {
  FZ_CHECK(unlink(path) == 0 || errno == ENOENT, "unlink(%s): %s", path,
           strerror(errno));
}
