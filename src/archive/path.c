/*
 * src/archive/path.c - barecat's path normalization (os.path.normpath
 * without the leading '/'), so that the same file has one key.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "archive/internal.h"

int bc__archive_normalize(const char *path, char **out) {
  int rc = 0;
  size_t n = strlen(path);
  char *res = malloc(n + 1);
  size_t len = 0;
  const char *p = path;
  *out = NULL;
  if (res == NULL) {
    rc = bc__error(BC_ENOMEM, "archive path: out of memory");
    goto cleanup;
  }
  while (*p != '\0') {
    const char *seg = p;
    size_t sl;
    while (*p != '\0' && *p != '/') p++;
    sl = (size_t)(p - seg);
    if (*p == '/') p++;
    if (sl == 0 || (sl == 1 && seg[0] == '.')) continue;
    if (sl == 2 && seg[0] == '.' && seg[1] == '.') {
      if (len == 0) {
        /* normpath keeps a leading ".." of a relative path and drops it at
         * the root; barecat then has a key outside the tree: refuse. */
        rc = bc__error(BC_EINVAL, "archive path '%s': '..' leaves the root",
                       path);
        goto cleanup;
      }
      while (len > 0 && res[len - 1] != '/') len--;
      if (len > 0) len--; /* the '/' before the dropped segment */
      continue;
    }
    if (len > 0) res[len++] = '/';
    memcpy(res + len, seg, sl);
    len += sl;
  }
  res[len] = '\0';
  *out = res;
  res = NULL;
cleanup:
  free(res);
  return rc;
}

size_t bc__archive_parent_len(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash == NULL ? 0 : (size_t)(slash - path);
}
