/*
 * File specs: "a.bag", "dir/name@4.bagz", "dir/name@*.bag", comma lists of
 * those, each element optionally "posix:"-prefixed.
 *
 * Unlike the reference, every element is handled on its own: "@*" may appear
 * in any element of a list, and separate limits are named per element
 * (DIR/NAME -> DIR/limits.NAME), so lists and globs work with them too.
 */
#include "config.h"

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bag/internal.h"

#define MAX_SHARDS 99999

bool bc__path_is_bagz(const char *path) {
  size_t n = strlen(path);
  return n >= 5 && memcmp(path + n - 5, ".bagz", 5) == 0;
}

char *bc_limits_path(const char *records_path) {
  const char *slash = strrchr(records_path, '/');
  size_t dir_len = slash ? (size_t)(slash - records_path) + 1 : 0;
  size_t n = strlen(records_path);
  char *out = malloc(n + sizeof "limits.");
  if (out == NULL) return NULL;
  memcpy(out, records_path, dir_len);
  memcpy(out + dir_len, "limits.", 7);
  memcpy(out + dir_len + 7, records_path + dir_len, n - dir_len + 1);
  return out;
}

/* A growing array of shard paths. */
typedef struct {
  bc__shard_path *items;
  size_t count, capacity;
} path_list;

static int list_push(path_list *l, char *records, bool separate) {
  if (records == NULL) return bc__error(BC_ENOMEM, "out of memory");
  if (l->count == l->capacity) {
    size_t cap = l->capacity ? l->capacity * 2 : 8;
    bc__shard_path *p = realloc(l->items, cap * sizeof *p);
    if (p == NULL) {
      free(records);
      return bc__error(BC_ENOMEM, "out of memory");
    }
    l->items = p;
    l->capacity = cap;
  }
  char *limits = NULL;
  if (separate && (limits = bc_limits_path(records)) == NULL) {
    free(records);
    return bc__error(BC_ENOMEM, "out of memory");
  }
  l->items[l->count].records = records;
  l->items[l->count].limits = limits;
  l->count++;
  return 0;
}

void bc__spec_free(bc__shard_path *paths, size_t count) {
  for (size_t i = 0; i < count; i++) {
    free(paths[i].records);
    free(paths[i].limits);
  }
  free(paths);
}

/* Drops a file-system prefix: "posix:" or "/posix:" (what
 * pathlib.Path('/posix:/tmp') / 'x' produces).  Other prefixes are kept:
 * such a path is then looked up literally. */
static const char *strip_fs_prefix(const char *element) {
  const char *e = element[0] == '/' ? element + 1 : element;
  if (strncmp(e, "posix:", 6) == 0) return e + 6;
  return element;
}

/* Appends `text[0..n)` to dst with glob metacharacters escaped. */
static char *glob_escape_append(char *dst, const char *text, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (strchr("*?[]\\", text[i]) != NULL) *dst++ = '\\';
    *dst++ = text[i];
  }
  return dst;
}

/* Resolves "PREFIX@*SUFFIX" to a shard count by globbing
 * PREFIX-00000-of-?????SUFFIX and taking the lexicographically last match. */
static int resolve_glob_count(const char *element, size_t at, const char *suffix,
                              unsigned *count) {
  size_t plen = at, slen = strlen(suffix);
  char *pattern = malloc(2 * (plen + slen) + 64);
  if (pattern == NULL) return bc__error(BC_ENOMEM, "out of memory");
  char *p = glob_escape_append(pattern, element, plen);
  p += sprintf(p, "-00000-of-[0-9][0-9][0-9][0-9][0-9]");
  p = glob_escape_append(p, suffix, slen);
  *p = '\0';

  glob_t g;
  int grc = glob(pattern, 0, NULL, &g);
  int rc = 0;
  if (grc != 0 || g.gl_pathc == 0) {
    rc = bc__error(BC_ENOTFOUND, "%s: no shard files match %s", element,
                   pattern);
  } else {
    /* glob sorts its results, so the last one is the greatest count. */
    const char *last = g.gl_pathv[g.gl_pathc - 1];
    const char *digits = last + strlen(last) - slen - 5;
    unsigned n = 0;
    for (int i = 0; i < 5; i++) n = n * 10 + (unsigned)(digits[i] - '0');
    if (n == 0)
      rc = bc__error(BC_ENOTFOUND, "%s: %s declares 0 shards", element, last);
    *count = n;
  }
  if (grc == 0) globfree(&g);
  free(pattern);
  return rc;
}

/* Expands one element (file-system prefix already stripped) into `out`. */
static int expand_element(const char *element, bool separate, path_list *out) {
  const char *slash = strrchr(element, '/');
  const char *at = strchr(slash ? slash + 1 : element, '@');
  unsigned count = 0;
  const char *suffix = NULL;
  if (at != NULL) {
    if (at[1] == '*') {
      suffix = at + 2;
      int rc = resolve_glob_count(element, (size_t)(at - element), suffix,
                                  &count);
      if (rc != 0) return rc;
    } else {
      const char *d = at + 1;
      unsigned long n = 0;
      while (*d >= '0' && *d <= '9' && n <= MAX_SHARDS) n = n * 10 + (unsigned)(*d++ - '0');
      if (d > at + 1 && n >= 1 && n <= MAX_SHARDS) {
        count = (unsigned)n;
        suffix = d;
      }
    }
  }
  if (count == 0) return list_push(out, strdup(element), separate);

  size_t plen = (size_t)(at - element), slen = strlen(suffix);
  for (unsigned i = 0; i < count; i++) {
    char *name = malloc(plen + slen + 32);
    if (name != NULL) {
      memcpy(name, element, plen);
      sprintf(name + plen, "-%05u-of-%05u%s", i, count, suffix);
    }
    int rc = list_push(out, name, separate);
    if (rc != 0) return rc;
  }
  return 0;
}

int bc__spec_expand(const char *spec, bool separate, bc__shard_path **paths,
                    size_t *count) {
  path_list list = {0};
  char *copy = strdup(spec);
  int rc = 0;
  if (copy == NULL) {
    rc = bc__error(BC_ENOMEM, "out of memory");
    goto cleanup;
  }
  char *save = NULL;
  for (char *el = strtok_r(copy, ",", &save); el != NULL;
       el = strtok_r(NULL, ",", &save)) {
    rc = expand_element(strip_fs_prefix(el), separate, &list);
    if (rc != 0) goto cleanup;
  }
  *paths = list.items;
  *count = list.count;
  list.items = NULL;
  list.count = 0;
cleanup:
  bc__spec_free(list.items, list.count);
  free(copy);
  return rc;
}
