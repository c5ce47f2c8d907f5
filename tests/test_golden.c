/*
 * test_golden: every vector of tests/data/bagz/manifest.json, both ways.
 *
 *   read:ID   open the vector's spec with its reader options and check the
 *             length and every record, or the expected open/read errors;
 *   write:ID  write the vector's records with its writer options into a
 *             temporary directory and compare the produced files with the
 *             golden bytes (zstd output only when our libzstd is one of the
 *             versions known to produce the same bytes; decoded records
 *             otherwise).
 *
 * One cmocka test is generated per vector and direction.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "testutil.h"

/* libzstd versions that produced the golden zstd bytes (1.5.4 and 1.5.6). */
static bool zstd_matches_golden(void) {
  unsigned v = ZSTD_versionNumber();
  return v == 10504 || v == 10506;
}

/* ---- manifest fields -> bagcache options -------------------------------- */

static const char *str_field(const json_t *obj, const char *key) {
  return json_string_value(json_object_get(obj, key));
}

static bc_limits_placement placement_of(const json_t *options) {
  const char *p = str_field(options, "limits_placement");
  if (p == NULL || strcmp(p, "TAIL") == 0) return BC_LIMITS_TAIL;
  if (strcmp(p, "SEPARATE") == 0) return BC_LIMITS_SEPARATE;
  fail_msg("unknown limits_placement %s", p);
  return BC_LIMITS_TAIL;
}

/* Fills compression, level and dictionary from a manifest "compression"
 * value: absent or "auto", "none", or {"zstd": {"level", "dictionary"}}. */
static void compression_of(const json_t *options, bc_compression *comp,
                           int *level, const char **dict, size_t *dict_size) {
  const json_t *c = json_object_get(options, "compression");
  *comp = BC_COMPRESSION_AUTO;
  *level = 0;
  *dict = NULL;
  *dict_size = 0;
  if (c == NULL || (json_is_string(c) && strcmp(json_string_value(c), "auto") == 0))
    return;
  if (json_is_string(c) && strcmp(json_string_value(c), "none") == 0) {
    *comp = BC_COMPRESSION_NONE;
    return;
  }
  const json_t *z = json_object_get(c, "zstd");
  if (!json_is_object(z)) fail_msg("unknown compression in the manifest");
  *comp = BC_COMPRESSION_ZSTD;
  const json_t *lv = json_object_get(z, "level");
  if (lv != NULL) *level = (int)json_integer_value(lv);
  const json_t *d = json_object_get(z, "dictionary");
  if (d != NULL && json_string_length(d) > 0) {
    *dict = json_string_value(d);
    *dict_size = json_string_length(d);
  }
}

static bc_reader_options reader_options_of(const json_t *vector) {
  const json_t *o = json_object_get(vector, "reader_options");
  bc_reader_options ro = BC_READER_OPTIONS_INIT;
  ro.limits_placement = placement_of(o);
  const char *layout = str_field(o, "sharding_layout");
  if (layout != NULL && strcmp(layout, "INTERLEAVED") == 0)
    ro.sharding_layout = BC_LAYOUT_INTERLEAVED;
  else if (layout != NULL && strcmp(layout, "CONCATENATED") != 0)
    fail_msg("unknown sharding_layout %s", layout);
  int level;
  const char *dict;
  compression_of(o, &ro.compression, &level, &dict, &ro.dictionary_size);
  ro.dictionary = dict;
  return ro;
}

static bc_writer_options writer_options_of(const json_t *options) {
  bc_writer_options wo = BC_WRITER_OPTIONS_INIT;
  wo.limits_placement = placement_of(options);
  const char *dict;
  compression_of(options, &wo.compression, &wo.zstd_level, &dict,
                 &wo.dictionary_size);
  wo.dictionary = dict;
  return wo;
}

/* The vector's "open" spec made absolute: every comma element is joined to
 * the data directory (so @N and @* stay inside the element). */
static char *absolute_spec(const char *dir, const char *spec) {
  size_t cap = strlen(spec) * (strlen(dir) + 2) + 2;
  char *out = calloc(1, cap);
  char *copy = strdup(spec);
  if (out == NULL || copy == NULL) fail_msg("out of memory");
  char *save = NULL;
  bool first = true;
  for (char *el = strtok_r(copy, ",", &save); el != NULL;
       el = strtok_r(NULL, ",", &save)) {
    if (!first) strcat(out, ",");
    strcat(out, dir);
    strcat(out, "/");
    strcat(out, el);
    first = false;
  }
  free(copy);
  return out;
}

static void records_of(const json_t *array, tu_records *recs) {
  size_t i;
  const json_t *r;
  json_array_foreach(array, i, r) {
    size_t n;
    unsigned char *data = tu_manifest_record(r, &n);
    tu_records_add(recs, data, n);
    free(data);
  }
}

/* The golden files themselves must be the bytes the manifest describes. */
static void check_files(const char *dir, const json_t *vector) {
  size_t i;
  const json_t *f;
  json_array_foreach(json_object_get(vector, "files"), i, f) {
    char *path = tu_join(dir, str_field(f, "path"));
    size_t n;
    unsigned char *data = tu_read_file(path, &n);
    assert_int_equal(n, json_integer_value(json_object_get(f, "size")));
    char sha[65];
    tu_sha256_hex(data, n, sha);
    assert_string_equal(sha, str_field(f, "sha256"));
    free(data);
    free(path);
  }
}

/* ---- reading --------------------------------------------------------------- */

static void check_ok_vector(const char *spec, bc_reader_options ro,
                            const tu_records *recs) {
  bc_bag *bag = NULL;
  TU_OK(bc_bag_open(&bag, spec, &ro));
  tu_check_bag(bag, recs);
  uint64_t bad = 12345;
  TU_OK(bc_bag_verify(bag, &bad));
  assert_int_equal(bad, 12345); /* only set on failure */
  bc_bag_close(bag);
}

/* Expected read results of a malformed but openable vector.  With
 * `strict_ok` the read_ok records must read back exactly; without it (limits
 * held in memory are validated as a whole) they may instead fail with
 * BC_ECORRUPT. */
static void check_corrupt_reads(const bc_bag *bag, const json_t *expect,
                                bool strict_ok) {
  json_int_t len = json_integer_value(json_object_get(expect, "len"));
  assert_int_equal(bc_bag_len(bag), len);
  bc_buf buf = BC_BUF_INIT;

  const char *key;
  const json_t *val;
  json_object_foreach((json_t *)json_object_get(expect, "read_ok"), key, val) {
    size_t n;
    unsigned char *want = tu_hex_decode(json_string_value(val), &n);
    int rc = bc_bag_get(bag, strtoull(key, NULL, 10), &buf);
    if (rc == BC_OK || strict_ok) {
      TU_OK(rc);
      TU_BUF_EQ(&buf, want, n);
    } else {
      TU_RC(rc, BC_ECORRUPT);
    }
    free(want);
  }

  uint64_t first_bad = UINT64_MAX;
  json_object_foreach((json_t *)json_object_get(expect, "read_error"), key, val) {
    assert_string_equal(json_string_value(val), "ValueError");
    uint64_t i = strtoull(key, NULL, 10);
    TU_RC(bc_bag_get(bag, i, &buf), BC_ECORRUPT);
    if (i < first_bad) first_bad = i;
  }
  bc_buf_release(&buf);

  if (json_object_get(expect, "read_all_error") != NULL) {
    /* bagz returns empty records from its bulk reads here; we must fail. */
    uint64_t n = bc_bag_len(bag);
    uint64_t *idx = calloc(n, sizeof *idx);
    bc_buf *outs = calloc(n, sizeof *outs);
    if (idx == NULL || outs == NULL) fail_msg("out of memory");
    for (uint64_t i = 0; i < n; i++) idx[i] = i;
    TU_RC(bc_bag_get_many(bag, idx, n, outs), BC_ECORRUPT);
    for (uint64_t i = 0; i < n; i++) bc_buf_release(&outs[i]);
    free(outs);
    free(idx);

    uint64_t bad = UINT64_MAX;
    TU_RC(bc_bag_verify(bag, &bad), BC_ECORRUPT);
    /* The first failing record in index order; with whole-shard limit
     * validation that may be an earlier one. */
    if (strict_ok)
      assert_int_equal(bad, first_bad);
    else
      assert_true(bad <= first_bad);
  }
}

static void test_read(void **state) {
  const json_t *v = *state;
  char *dir = tu_data_dir();
  char *spec = absolute_spec(dir, str_field(v, "open"));
  bc_reader_options ro = reader_options_of(v);
  const json_t *expect = json_object_get(v, "expect");
  tu_records recs = {0};
  bc_bag *bag = NULL;

  check_files(dir, v);
  if (json_is_string(expect)) {
    assert_string_equal(json_string_value(expect), "ok");
    records_of(json_object_get(v, "records"), &recs);
    /* The listed options, then the same with limits in memory, with batch
     * reads spread over several threads, and through every cache policy
     * (direct I/O may fall back to buffered reads quietly). */
    tu_capture_notices();
    for (int cache = 0; cache <= 2; cache++)
      for (int storage = 0; storage <= 1; storage++) {
        ro.cache_policy = (bc_cache_policy)cache;
        ro.limits_storage = (bc_limits_storage)storage;
        ro.max_parallelism = storage ? 2 : 0;
        check_ok_vector(spec, ro, &recs);
      }
  } else if (json_object_get(expect, "open_error") != NULL) {
    assert_string_equal(str_field(expect, "open_error"), "ValueError");
    tu_capture_notices();
    for (int cache = 0; cache <= 2; cache++)
      for (int storage = 0; storage <= 1; storage++) {
        ro.cache_policy = (bc_cache_policy)cache;
        ro.limits_storage = (bc_limits_storage)storage;
        TU_RC(bc_bag_open(&bag, spec, &ro), BC_ECORRUPT);
        assert_null(bag);
      }
  } else {
    tu_capture_notices();
    for (int cache = 0; cache <= 2; cache++) {
      ro.cache_policy = (bc_cache_policy)cache;
      ro.limits_storage = BC_LIMITS_ON_DISK;
      bag = NULL;
      TU_OK(bc_bag_open(&bag, spec, &ro));
      check_corrupt_reads(bag, expect, true);
      bc_bag_close(bag);
      bag = NULL;
      ro.limits_storage = BC_LIMITS_IN_MEMORY;
      int rc = bc_bag_open(&bag, spec, &ro);
      if (rc == BC_OK) {
        check_corrupt_reads(bag, expect, false);
        bc_bag_close(bag);
      } else {
        /* Validating the limits at open is allowed to reject the file. */
        TU_RC(rc, BC_ECORRUPT);
      }
    }
  }
  tu_records_free(&recs);
  free(spec);
  free(dir);
}

/* ---- writing --------------------------------------------------------------- */

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

/* Compares tmp/NAME with data/NAME byte for byte. */
static void compare_file(const char *golden_dir, const char *tmp,
                         const char *name) {
  char *want_path = tu_join(golden_dir, name);
  char *got_path = tu_join(tmp, base_name(name));
  size_t want_n, got_n;
  unsigned char *want = tu_read_file(want_path, &want_n);
  unsigned char *got = tu_read_file(got_path, &got_n);
  tu_assert_bytes(got, got_n, want, want_n, name);
  free(got);
  free(want);
  free(got_path);
  free(want_path);
}

/* Writes `records` to tmp/NAME with `options` and checks the result:
 * byte-for-byte when `byte_exact` allows it here, else by decoding. */
static void write_and_compare(const char *golden_dir, const char *tmp,
                              const char *name, const json_t *options,
                              const json_t *records, const char *byte_exact) {
  tu_records recs = {0};
  records_of(records, &recs);
  bc_writer_options wo = writer_options_of(options);
  char *path = tu_join(tmp, base_name(name));
  tu_write_bag(path, &wo, &recs);

  bool exact = strcmp(byte_exact, "exact") == 0 ||
               (strcmp(byte_exact, "exact-if-same-zstd") == 0 &&
                zstd_matches_golden());
  if (strcmp(byte_exact, "exact") != 0 &&
      strcmp(byte_exact, "exact-if-same-zstd") != 0)
    fail_msg("unknown byte_exact %s", byte_exact);

  char *limits = bc_limits_path(name);
  assert_non_null(limits);
  if (exact) {
    compare_file(golden_dir, tmp, name);
    if (wo.limits_placement == BC_LIMITS_SEPARATE)
      compare_file(golden_dir, tmp, limits);
  }
  /* Always: the file decodes to the records (also covers the inexact case). */
  bc_reader_options ro = BC_READER_OPTIONS_INIT;
  ro.limits_placement = wo.limits_placement;
  ro.compression = wo.compression;
  ro.dictionary = wo.dictionary;
  ro.dictionary_size = wo.dictionary_size;
  bc_bag *bag = NULL;
  TU_OK(bc_bag_open(&bag, path, &ro));
  tu_check_bag(bag, &recs);
  bc_bag_close(bag);

  free(limits);
  free(path);
  tu_records_free(&recs);
}

static void test_write(void **state) {
  const json_t *v = *state;
  char *dir = tu_data_dir();
  char *tmp = tu_tempdir();
  size_t expected_files = 0;

  const json_t *writer = json_object_get(v, "writer");
  if (writer != NULL) {
    const json_t *files = json_object_get(v, "files");
    const char *name = str_field(json_array_get(files, 0), "path");
    write_and_compare(dir, tmp, name, json_object_get(writer, "options"),
                      json_object_get(v, "records"),
                      str_field(writer, "byte_exact"));
    expected_files = json_array_size(files);
  } else {
    size_t i;
    const json_t *shard;
    json_array_foreach(json_object_get(v, "shards"), i, shard) {
      const json_t *options = json_object_get(shard, "options");
      write_and_compare(dir, tmp, str_field(shard, "path"), options,
                        json_object_get(shard, "records"),
                        str_field(shard, "byte_exact"));
      expected_files += placement_of(options) == BC_LIMITS_SEPARATE ? 2 : 1;
    }
  }
  /* Exactly the published files: no temporary or stray limits files. */
  assert_int_equal(tu_count_entries(tmp, ""), expected_files);
  tu_rmtree(tmp);
  free(tmp);
  free(dir);
}

/* ---- main: one test per vector and direction ---------------------------- */

int main(void) {
  const char *src = getenv("BC_SRCDIR");
  if (src == NULL) {
    fprintf(stderr, "test_golden: BC_SRCDIR is not set (run via make check)\n");
    return 1;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/data/bagz/manifest.json", src);
  json_error_t err;
  json_t *manifest = json_load_file(path, 0, &err);
  if (manifest == NULL) {
    fprintf(stderr, "test_golden: %s:%d: %s\n", path, err.line, err.text);
    return 1;
  }
  const json_t *vectors = json_object_get(manifest, "vectors");
  size_t nvec = json_array_size(vectors);
  struct CMUnitTest *tests = calloc(2 * nvec, sizeof *tests);
  char **names = calloc(2 * nvec, sizeof *names);
  size_t ntests = 0;
  if (tests == NULL || names == NULL || nvec == 0) {
    fprintf(stderr, "test_golden: no vectors or out of memory\n");
    return 1;
  }
  size_t i;
  json_t *v;
  json_array_foreach(vectors, i, v) {
    const char *id = json_string_value(json_object_get(v, "id"));
    names[ntests] = tu_format("read:%s", id);
    tests[ntests] = (struct CMUnitTest){names[ntests], test_read, NULL, NULL, v};
    ntests++;
    if (json_object_get(v, "writer") != NULL || json_object_get(v, "shards") != NULL) {
      names[ntests] = tu_format("write:%s", id);
      tests[ntests] = (struct CMUnitTest){names[ntests], test_write, NULL, NULL, v};
      ntests++;
    }
  }
  int failed = _cmocka_run_group_tests("golden", tests, ntests, NULL, NULL);
  for (size_t k = 0; k < ntests; k++) free(names[k]);
  free(names);
  free(tests);
  json_decref(manifest);
  return failed == 0 ? 0 : 1;
}
