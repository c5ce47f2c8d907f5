/* metadata.json: the human-readable, durable description of a cache,
 * replaced atomically (never read half-written). */
#include "config.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/internal.h"

#define FORMAT_NAME "bagcache-cache"

void bc__meta_free(bc__meta *m) {
  free(m->info_json);
  m->info_json = NULL;
  free(m->fingerprint_json);
  m->fingerprint_json = NULL;
  free(m->source_json);
  m->source_json = NULL;
}

int bc__meta_check_json(const char *json, const char *what, bool *null) {
  json_error_t err;
  json_t *v = json_loads(json, JSON_DECODE_ANY, &err);
  if (v == NULL) return bc__error(BC_EINVAL, "%s is not JSON: %s", what, err.text);
  *null = json_is_null(v);
  json_decref(v);
  return 0;
}

/* *out = the compact JSON text of v (an optional field), NULL when absent. */
static int dup_optional_json(json_t *v, char **out) {
  if (v == NULL) return 0;
  *out = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_SORT_KEYS);
  return *out == NULL ? bc__error(BC_ENOMEM, "out of memory") : 0;
}

/* root[key] = the JSON text `text` (an optional field); nothing when NULL. */
static int set_optional_json(json_t *root, const char *key, const char *text) {
  if (text == NULL) return 0;
  json_error_t err;
  json_t *v = json_loads(text, JSON_DECODE_ANY, &err);
  if (v == NULL) return bc__error(BC_EINVAL, "%s is not JSON: %s", key, err.text);
  return json_object_set_new(root, key, v) != 0 ? bc__error(BC_ENOMEM, "out of memory") : 0;
}

static int corrupt(const char *path, const char *why) {
  return bc__error(BC_ECORRUPT, "%s: not a bagcache metadata file: %s", path,
                   why);
}

int bc__meta_read(const char *path, bc__meta *m) {
  memset(m, 0, sizeof *m);
  m->length_hint = -1;
  if (access(path, F_OK) != 0)
    return bc__error_errno(errno, "%s", path);
  json_error_t err;
  json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
  if (root == NULL) {
    char why[256];
    snprintf(why, sizeof why, "line %d: %s", err.line, err.text);
    return corrupt(path, why);
  }
  int rc = 0;
  json_t *fmt = json_object_get(root, "format");
  json_t *ver = json_object_get(root, "version");
  json_t *sr = json_object_get(root, "shard_records");
  json_t *len = json_object_get(root, "length");
  json_t *fin = json_object_get(root, "length_final");
  json_t *comp = json_object_get(root, "compression");
  json_t *lvl = json_object_get(root, "zstd_level");
  json_t *info = json_object_get(root, "info");
  json_t *fp = json_object_get(root, "fingerprint"); /* optional: absent = none */
  json_t *hint = json_object_get(root, "length_hint"); /* optional */
  json_t *source = json_object_get(root, "source");    /* optional */
  if (!json_is_object(root) || !json_is_string(fmt) ||
      strcmp(json_string_value(fmt), FORMAT_NAME) != 0) {
    rc = corrupt(path, "\"format\" is not \"" FORMAT_NAME "\"");
  } else if (!json_is_integer(ver)) {
    rc = corrupt(path, "no integer \"version\"");
  } else if (json_integer_value(ver) < BC_CACHE_FORMAT_OLDEST ||
             json_integer_value(ver) > BC_CACHE_FORMAT_VERSION) {
    rc = bc__error(BC_EVERSION,
                   "%s: cache format version %lld; this bagcache reads "
                   "versions %d to %d", path, (long long)json_integer_value(ver),
                   BC_CACHE_FORMAT_OLDEST, BC_CACHE_FORMAT_VERSION);
  } else if (!json_is_integer(sr) || json_integer_value(sr) < 0 ||
             !json_is_integer(len) || json_integer_value(len) < 0 ||
             !json_is_boolean(fin) || !json_is_string(comp) ||
             (strcmp(json_string_value(comp), "none") != 0 &&
              strcmp(json_string_value(comp), "zstd") != 0) ||
             (lvl != NULL && !json_is_integer(lvl)) ||
             (hint != NULL && (!json_is_integer(hint) || json_integer_value(hint) < 0))) {
    rc = corrupt(path, "a field is missing or has the wrong type");
  } else {
    m->version = (int)json_integer_value(ver);
    m->shard_records = (uint64_t)json_integer_value(sr);
    m->length = (uint64_t)json_integer_value(len);
    m->length_final = json_is_true(fin);
    m->zstd = strcmp(json_string_value(comp), "zstd") == 0;
    m->zstd_level = lvl ? (int)json_integer_value(lvl) : 0;
    m->info_json = json_dumps(info ? info : json_null(),
                              JSON_ENCODE_ANY | JSON_COMPACT | JSON_SORT_KEYS);
    if (m->info_json == NULL) rc = bc__error(BC_ENOMEM, "out of memory");
    if (rc == 0) rc = dup_optional_json(fp, &m->fingerprint_json);
    if (rc == 0) rc = dup_optional_json(source, &m->source_json);
    if (hint != NULL) m->length_hint = (int64_t)json_integer_value(hint);
    if (rc != 0) bc__meta_free(m);
  }
  json_decref(root);
  return rc;
}

int bc__meta_write(const char *path, const bc__meta *m, unsigned mode) {
  /* JSON integers are signed 64-bit: a larger value would come back
   * negative, and every later open would refuse the file. */
  if (m->shard_records > BC_CACHE_MAX_SHARD_RECORDS || m->length > (uint64_t)INT64_MAX)
    return bc__error(BC_EINVAL, "%s: %llu records per shard, length %llu: "
                     "metadata.json holds at most %lld", path,
                     (unsigned long long)m->shard_records,
                     (unsigned long long)m->length, (long long)INT64_MAX);
  json_error_t err;
  json_t *info = json_loads(m->info_json ? m->info_json : "null",
                            JSON_DECODE_ANY, &err);
  if (info == NULL)
    return bc__error(BC_EINVAL, "user info is not JSON: %s", err.text);
  json_t *root = json_pack(
      "{s:s, s:i, s:I, s:I, s:b, s:s, s:i, s:o}", "format", FORMAT_NAME,
      "version", m->version ? m->version : BC_CACHE_FORMAT_VERSION, "shard_records",
      (json_int_t)m->shard_records, "length", (json_int_t)m->length,
      "length_final", m->length_final, "compression", m->zstd ? "zstd" : "none",
      "zstd_level", m->zstd_level, "info", info);
  if (root == NULL) return bc__error(BC_ENOMEM, "out of memory");
  /* The optional fields, only when set (files without them stay as they
   * were, and older readers ignore them). */
  int rc = set_optional_json(root, "fingerprint", m->fingerprint_json);
  if (rc == 0) rc = set_optional_json(root, "source", m->source_json);
  if (rc == 0 && m->length_hint >= 0 &&
      json_object_set_new(root, "length_hint", json_integer((json_int_t)m->length_hint)) != 0)
    rc = bc__error(BC_ENOMEM, "out of memory");
  if (rc != 0) {
    json_decref(root);
    return rc;
  }
  char *text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
  json_decref(root);
  if (text == NULL) return bc__error(BC_ENOMEM, "out of memory");
  char *tmp = NULL;
  int fd = -1;
  rc = bc__tmp_create(path, mode, &tmp, &fd);
  if (rc == 0) {
    size_t n = strlen(text);
    text[n] = '\n'; /* json_dumps gives no final newline; its NUL is ours */
    rc = bc__write_all(fd, text, n + 1, tmp);
    if (rc == 0) rc = bc__fsync(fd, tmp);
    close(fd);
    if (rc == 0) rc = bc__publish(tmp, path);
    if (rc != 0) unlink(tmp);
  }
  free(tmp);
  free(text);
  return rc;
}
