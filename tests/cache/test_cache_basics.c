/*
 * The cache engine's basic behaviour against the generator's model: reads,
 * the end of the source, the length, reopening (with and without a source,
 * with other options), metadata.json checks, rejected options, the shard
 * length estimate, user info, file modes, a known length (a hint), the
 * source's fingerprint and zstd shards.
 *
 * Every test runs in its own temporary directory under a watchdog
 * (fixture.h).
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture.h"

/* ---- reads and the end of the source -------------------------------------- */

/* A root whose path holds the file-spec characters ',' and '@N' (a comma
 * list, a sharded name to bc_bag_open): shards are opened by their literal
 * paths, so reading, reopening and verifying work as anywhere else. */
static void test_root_with_spec_characters(void **state) {
  fixture *f = *state;
  char *parent = cu_path(f->dir, "a,b@2");
  assert_int_equal(mkdir(parent, 0755), 0);
  free(f->root);
  f->root = cu_path(parent, "c,d@3");
  free(parent);
  ts_config cfg = ts_config_default(95);
  bc_cache_options o = fx_quiet_options(10);
  o.max_open_shards = 1; /* every shard change opens a file */
  fx_open(f, &cfg, &o);
  cu_check_all(f->c, 95, false);
  fx_reopen(f, NULL, &o); /* no source: only the files can answer */
  cu_check_all(f->c, 95, false);
  uint64_t bad = 0;
  CU_OK(bc_cache_verify(f->c, &bad));
}


static void test_get_and_range(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(95);
  bc_cache_options o = fx_quiet_options(10);
  fx_open(f, &cfg, &o);
  bc_cache_stats st = fx_stats(f->c);
  assert_int_equal(st.length, 0);
  assert_false(st.length_final);
  assert_int_equal(st.shard_records, 10);
  assert_int_equal(st.passes_opened, 0);

  bc_buf b = BC_BUF_INIT;
  assert_int_equal(cu_get_cmp(f->c, 0, false, &b), 0);
  assert_int_equal(cu_get_cmp(f->c, 7, false, &b), 0);
  assert_int_equal(b.size, 0); /* record 7 is empty in the model */
  assert_int_equal(cu_get_cmp(f->c, 94, false, &b), 0);
  /* The last shard is short (90..95): 95 is past the end, found by the
   * fill of that shard, and the length is now exact. */
  CU_RC(bc_cache_get(f->c, 95, &b), BC_ERANGE);
  st = fx_stats(f->c);
  assert_true(st.length_final);
  assert_int_equal(st.length, 95);
  CU_RC(bc_cache_get(f->c, 96, &b), BC_ERANGE);
  CU_RC(bc_cache_get(f->c, 1000000, &b), BC_ERANGE);
  /* Negative indices count from the end. */
  CU_OK(bc_cache_get(f->c, -1, &b));
  assert_true(ts_matches(94, false, &b));
  CU_OK(bc_cache_get(f->c, -95, &b));
  assert_true(ts_matches(0, false, &b));
  CU_RC(bc_cache_get(f->c, -96, &b), BC_ERANGE);
  CU_RC(bc_cache_get(f->c, INT64_MIN, &b), BC_ERANGE);
  CU_RC(bc_cache_get(f->c, INT64_MAX, &b), BC_ERANGE);
  uint64_t len = 0;
  CU_OK(bc_cache_len(f->c, &len));
  assert_int_equal(len, 95);
  /* Through the sequence interface as well. */
  CU_OK(bc_seq_get(bc_cache_seq(f->c), 93, &b));
  assert_true(ts_matches(93, false, &b));
  bc_buf_release(&b);
}

static void test_first_read_past_end(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(95);
  bc_cache_options o = fx_quiet_options(10);
  fx_open(f, &cfg, &o);
  bc_buf b = BC_BUF_INIT;
  /* Shard 100 lies beyond the end: the fill discovers the end (95) while
   * moving to it, records it, and reports BC_ERANGE.  The shards it
   * crossed are kept (no limit), the short last one (90..95) with them. */
  CU_RC(bc_cache_get(f->c, 1005, &b), BC_ERANGE);
  bc_cache_stats st = fx_stats(f->c);
  assert_true(st.length_final);
  assert_int_equal(st.length, 95);
  assert_int_equal(st.shards_present, 10);
  assert_int_equal(st.shards_kept, 10);
  assert_int_equal(st.fills, 0);
  assert_int_equal(st.records_written, 95);
  assert_int_equal(st.records_skipped, 0);
  size_t files = 0;
  char *sd = fx_shards_dir(f);
  cu_dir_bytes(sd, &files);
  assert_int_equal(files, 10);
  /* Asking again costs nothing: the end is known. */
  uint64_t opens = atomic_load(&f->sh->opens);
  CU_RC(bc_cache_get(f->c, 100, &b), BC_ERANGE);
  CU_RC(bc_cache_get(f->c, 95, &b), BC_ERANGE);
  assert_int_equal(atomic_load(&f->sh->opens), opens);
  assert_int_equal(cu_get_cmp(f->c, 94, false, &b), 0);
  free(sd);
  bc_buf_release(&b);
}

static void test_len_drains(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(100); /* a multiple of the shard length */
  bc_cache_options o = fx_quiet_options(10);
  fx_open(f, &cfg, &o);
  uint64_t len = 0;
  CU_OK(bc_cache_len(f->c, &len));
  assert_int_equal(len, 100);
  bc_cache_stats st = fx_stats(f->c);
  assert_true(st.length_final);
  assert_int_equal(st.shards_present, 10);
  assert_int_equal(st.fills, 10);
  assert_int_equal(st.passes_opened, 1);
  for (uint64_t i = 0; i < 100; i++)
    assert_int_equal(atomic_load(&f->sh->per_record[i]), 1);
  char *sd = fx_shards_dir(f);
  size_t files = 0;
  assert_int_equal(cu_dir_bytes(sd, &files), st.bytes_on_disk);
  assert_int_equal(files, 10);
  cu_check_shards(f->root, false, false);
  cu_check_all(f->c, 100, false);
  /* Everything is cached: reading produced nothing new. */
  assert_int_equal(atomic_load(&f->sh->produced), 100);
  bc_buf b = BC_BUF_INIT;
  CU_RC(bc_cache_get(f->c, 100, &b), BC_ERANGE);
  bc_buf_release(&b);
  free(sd);
}

static void test_empty_source(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(0);
  bc_cache_options o = fx_quiet_options(10);
  fx_open(f, &cfg, &o);
  bc_buf b = BC_BUF_INIT;
  CU_RC(bc_cache_get(f->c, 0, &b), BC_ERANGE);
  uint64_t len = 99;
  CU_OK(bc_cache_len(f->c, &len));
  assert_int_equal(len, 0);
  CU_RC(bc_cache_get(f->c, -1, &b), BC_ERANGE);
  assert_int_equal(fx_stats(f->c).shards_present, 0);
  bc_buf_release(&b);
}

/* The end found by one cache is seen by another open on the same root
 * (through the shared state), which has no source to find it itself. */
static void test_end_shared(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(95);
  bc_cache_options o = fx_quiet_options(10);
  fx_open(f, &cfg, &o);
  CU_OK(bc_cache_open(&f->c2, f->root, NULL, &o));
  uint64_t len = 0;
  CU_RC(bc_cache_len(f->c2, &len), BC_ENOTCACHED);
  fx_get_ok(f->c, 93);
  CU_OK(bc_cache_len(f->c2, &len));
  assert_int_equal(len, 95);
  bc_buf b = BC_BUF_INIT;
  CU_RC(bc_cache_get(f->c2, 95, &b), BC_ERANGE);
  CU_OK(bc_cache_get(f->c2, -1, &b));
  assert_true(ts_matches(94, false, &b));
  bc_buf_release(&b);
}

/* ---- reopening ------------------------------------------------------------ */

static void test_reopen_without_source(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(100);
  cfg.fixed = true;
  uint64_t *sizes = cu_shard_sizes(100, 10, true);
  bc_cache_options o = fx_quiet_options(10);
  o.disk_limit = 3 * sizes[0] + sizes[0] / 2; /* room for three shards */
  fx_open(f, &cfg, &o);
  CU_OK(bc_cache_fill_all(f->c));
  bc_cache_stats st = fx_stats(f->c);
  assert_int_equal(st.shards_present, 3);
  assert_int_equal(st.evictions, 7);

  /* Without a source: the three last shards are served, the others are
   * BC_ENOTCACHED, the end is known. */
  fx_reopen(f, NULL, &o);
  bc_buf b = BC_BUF_INIT;
  for (int64_t i = 0; i < 100; i++) {
    int rc = cu_get_cmp(f->c, i, true, &b);
    if (i >= 70) assert_int_equal(rc, 0);
    else assert_int_equal(rc, BC_ENOTCACHED);
  }
  CU_RC(bc_cache_get(f->c, 100, &b), BC_ERANGE);
  uint64_t len = 0;
  CU_OK(bc_cache_len(f->c, &len));
  assert_int_equal(len, 100);
  CU_OK(bc_cache_get(f->c, -1, &b));
  assert_true(ts_matches(99, true, &b));
  char *out = cu_path(f->dir, "unused@1.bag");
  CU_RC(bc_cache_export(f->c, out), BC_ENOTCACHED);
  CU_RC(bc_cache_fill_all(f->c), BC_ENOTCACHED); /* shards 0..6 are gone */
  assert_int_equal(cu_dir_count(f->dir), 1); /* only the root: nothing left */
  free(out);
  st = fx_stats(f->c);
  assert_int_equal(st.fills, 0);
  assert_int_equal(st.passes_opened, 0);
  bc_buf_release(&b);
  free(sizes);
}

static void test_fill_all_without_source_complete(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(45);
  bc_cache_options o = fx_quiet_options(10);
  fx_open(f, &cfg, &o);
  CU_OK(bc_cache_fill_all(f->c));
  fx_reopen(f, NULL, &o);
  CU_OK(bc_cache_fill_all(f->c)); /* everything is there: nothing to do */
  cu_check_all(f->c, 45, false);
}

static void test_reopen_without_source_unknown_length(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(100);
  bc_cache_options o = fx_quiet_options(10);
  fx_open(f, &cfg, &o);
  bc_buf b = BC_BUF_INIT;
  assert_int_equal(cu_get_cmp(f->c, 15, false, &b), 0);
  fx_reopen(f, NULL, &o);
  assert_int_equal(cu_get_cmp(f->c, 19, false, &b), 0);
  CU_RC(bc_cache_get(f->c, 20, &b), BC_ENOTCACHED);
  uint64_t len = 0;
  CU_RC(bc_cache_len(f->c, &len), BC_ENOTCACHED);
  CU_RC(bc_cache_fill_all(f->c), BC_ENOTCACHED);
  bc_cache_stats st = fx_stats(f->c);
  assert_false(st.length_final);
  assert_int_equal(st.length, 20);
  bc_buf_release(&b);
}

static void test_reopen_other_options(void **state) {
  fixture *f = *state;
  cu_notices_capture();
  ts_config cfg = ts_config_default(100);
  bc_cache_options o = fx_quiet_options(10);
  fx_open(f, &cfg, &o);
  bc_buf b = BC_BUF_INIT;
  assert_int_equal(cu_get_cmp(f->c, 25, false, &b), 0);
  assert_int_equal(cu_notice_count(), 0);

  bc_cache_options other = fx_quiet_options(7);
  other.compression = BC_COMPRESSION_ZSTD;
  fx_reopen(f, &cfg, &other);
  assert_true(cu_notice_seen("10 records"));
  assert_int_equal(fx_stats(f->c).shard_records, 10);
  cu_check_all(f->c, 100, false);
  cu_check_shards(f->root, false, false); /* still .bag, 10 records each */
  char *name = cu_path(f->root, "shards/90.100.bag");
  struct stat sb;
  assert_int_equal(stat(name, &sb), 0);
  free(name);
  /* Equal options say nothing. */
  cu_notices_reset();
  fx_reopen(f, &cfg, &o);
  assert_int_equal(cu_notice_count(), 0);
  bc_buf_release(&b);
}

/* Options left at their defaults (shard_records 0, compression AUTO) never
 * disagree with a root: a zstd root reopened so says nothing and stays
 * zstd; a compression given explicitly and different does notice. */
static void test_reopen_with_defaults_says_nothing(void **state) {
  fixture *f = *state;
  cu_notices_capture();
  ts_config cfg = ts_config_default(40);
  bc_cache_options o = fx_quiet_options(10);
  o.compression = BC_COMPRESSION_ZSTD;
  fx_open(f, &cfg, &o);
  cu_check_all(f->c, 40, false);
  bc_cache_options defaults = BC_CACHE_OPTIONS_INIT;
  defaults.prefetch_shards = -1;
  fx_reopen(f, &cfg, &defaults);
  cu_check_all(f->c, 40, false);
  fx_reopen(f, NULL, &defaults);
  cu_check_all(f->c, 40, false);
  assert_int_equal(cu_notice_count(), 0);
  cu_check_shards(f->root, false, true);
  bc_cache_options plain = defaults;
  plain.compression = BC_COMPRESSION_NONE;
  fx_reopen(f, &cfg, &plain);
  assert_true(cu_notice_seen("compression (zstd)"));
  cu_check_shards(f->root, false, true);
}

/* Without a source there is nothing to fill: any fill_workers is fine. */
static void test_fill_workers_without_source(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(30);
  bc_cache_options o = fx_quiet_options(10);
  fx_open(f, &cfg, &o);
  cu_check_all(f->c, 30, false);
  o.fill_workers = 8; /* the source of cfg is not thread-safe */
  bc_cache_close(f->c);
  f->c = NULL;
  CU_RC(cu_open(&f->c, f->root, &cfg, f->sh, &o), BC_EINVAL);
  fx_reopen(f, NULL, &o);
  cu_check_all(f->c, 30, false);
}

/* bc_cache_finalize cuts the sequence at the end of the last shard present,
 * for this handle, a reopened one and metadata.json; then it is a no-op. */
static void test_finalize(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(100);
  bc_cache_options o = fx_quiet_options(10);
  fx_open(f, &cfg, &o);
  fx_get_ok(f->c, 35);
  fx_get_ok(f->c, 3);
  CU_OK(bc_cache_finalize(f->c));
  bc_cache_stats st = fx_stats(f->c);
  assert_true(st.length_final);
  assert_int_equal(st.length, 40);
  bc_buf b = BC_BUF_INIT;
  CU_RC(bc_cache_get(f->c, 40, &b), BC_ERANGE);
  assert_int_equal(cu_get_cmp(f->c, 15, false, &b), 0); /* regenerated */
  fx_reopen(f, NULL, &o);
  uint64_t len = 0;
  CU_OK(bc_cache_len(f->c, &len));
  assert_int_equal(len, 40);
  CU_OK(bc_cache_finalize(f->c)); /* final already */
  assert_int_equal(fx_stats(f->c).length, 40);
  char *meta = cu_path(f->root, "metadata.json");
  json_error_t err;
  json_t *m = json_load_file(meta, 0, &err);
  assert_non_null(m);
  assert_int_equal(json_integer_value(json_object_get(m, "length")), 40);
  assert_true(json_is_true(json_object_get(m, "length_final")));
  json_decref(m);
  free(meta);
  bc_buf_release(&b);
}

/* Rewrites metadata.json with `key` set to `value` (a JSON text). */
static void meta_set(const char *root, const char *key, const char *value) {
  char *path = cu_path(root, "metadata.json");
  json_error_t err;
  json_t *m = json_load_file(path, 0, &err);
  assert_non_null(m);
  json_t *v = json_loads(value, JSON_DECODE_ANY, &err);
  assert_non_null(v);
  assert_int_equal(json_object_set_new(m, key, v), 0);
  assert_int_equal(json_dump_file(m, path, JSON_INDENT(2)), 0);
  json_decref(m);
  free(path);
}

static void test_metadata_checks(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(30);
  bc_cache_options o = fx_quiet_options(10);
  fx_open(f, &cfg, &o);
  CU_OK(bc_cache_fill_all(f->c));
  bc_cache_close(f->c);
  f->c = NULL;
  char *path = cu_path(f->root, "metadata.json");

  /* metadata.json as written: the fields of the documented layout. */
  json_error_t err;
  json_t *m = json_load_file(path, 0, &err);
  assert_non_null(m);
  assert_int_equal(json_integer_value(json_object_get(m, "version")), 2);
  assert_int_equal(json_integer_value(json_object_get(m, "shard_records")), 10);
  assert_int_equal(json_integer_value(json_object_get(m, "length")), 30);
  assert_true(json_is_true(json_object_get(m, "length_final")));
  assert_string_equal(json_string_value(json_object_get(m, "compression")), "none");
  json_decref(m);

  /* Another format version: BC_EVERSION, and the payload is still freed. */
  meta_set(f->root, "version", "3");
  uint64_t frees = atomic_load(&f->sh->frees);
  CU_RC(cu_open(&f->c, f->root, &cfg, f->sh, &o), BC_EVERSION);
  assert_null(f->c);
  assert_int_equal(atomic_load(&f->sh->frees), frees + 1);
  CU_RC(cu_open(&f->c, f->root, NULL, NULL, &o), BC_EVERSION);

  /* Garbage and wrong shapes: BC_ECORRUPT. */
  static const char *const bad[] = {
      "this is not json\n",
      "",
      "[1, 2, 3]\n",
      "{\"format\": \"something-else\", \"version\": 1}\n",
      "{\"format\": \"bagcache-cache\", \"version\": 1, \"shard_records\": "
      "\"ten\", \"length\": 0, \"length_final\": false, \"compression\": "
      "\"none\"}\n",
      "{\"format\": \"bagcache-cache\", \"version\": 1, \"shard_records\": "
      "10, \"length\": -5, \"length_final\": false, \"compression\": "
      "\"none\"}\n",
      "{\"format\": \"bagcache-cache\", \"version\": 1, \"shard_records\": "
      "10, \"length\": 0, \"length_final\": false, \"compression\": "
      "\"lz4\"}\n",
  };
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    cu_write_text(path, bad[k]);
    int rc = cu_open(&f->c, f->root, &cfg, f->sh, &o);
    if (rc != BC_ECORRUPT)
      fail_msg("metadata.json case %zu: %s, expected BC_ECORRUPT", k,
               bc_error_name(rc));
    assert_null(f->c);
  }
  /* The shards were left alone by the failed opens. */
  char *sd = fx_shards_dir(f);
  size_t files = 0;
  cu_dir_bytes(sd, &files);
  assert_int_equal(files, 3);
  free(sd);
  free(path);
}

static void test_options_rejected(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(30);
  f->sh = ts_shared_new(&cfg);
  assert_non_null(f->sh);
  bc_cache_options o = fx_quiet_options(10);
  o.fill_workers = 2; /* needs a thread-safe source */
  CU_RC(cu_open(&f->c, f->root, &cfg, f->sh, &o), BC_EINVAL);
  o = fx_quiet_options(10);
  o.compression = (bc_compression)7;
  CU_RC(cu_open(&f->c, f->root, &cfg, f->sh, &o), BC_EINVAL);
  o = fx_quiet_options(10);
  o.compression = BC_COMPRESSION_ZSTD;
  o.zstd_level = 1000;
  CU_RC(cu_open(&f->c, f->root, &cfg, f->sh, &o), BC_EINVAL);
  o = fx_quiet_options(10);
  o.fill_workers = -1;
  CU_RC(cu_open(&f->c, f->root, &cfg, f->sh, &o), BC_EINVAL);
  /* A shard length metadata.json cannot hold (a signed 64-bit integer):
   * 2**63 was written as -2**63, and the root refused for good. */
  o = fx_quiet_options(0);
  o.shard_records = BC_CACHE_MAX_SHARD_RECORDS + 1;
  CU_RC(cu_open(&f->c, f->root, &cfg, f->sh, &o), BC_EINVAL);
  o.shard_records = UINT64_MAX;
  CU_RC(cu_open(&f->c, f->root, &cfg, f->sh, &o), BC_EINVAL);
  /* A limit below the estimated shard's target size. */
  o = fx_quiet_options(0);
  o.shard_bytes = 4096;
  o.disk_limit = 4000;
  CU_RC(cu_open(&f->c, f->root, &cfg, f->sh, &o), BC_EINVAL);
  o.shard_bytes = 0; /* and below the default target (64 MiB) */
  o.disk_limit = 1 << 20;
  CU_RC(cu_open(&f->c, f->root, &cfg, f->sh, &o), BC_EINVAL);
  /* A source of another version, or without next. */
  bc_source s = ts_source(&cfg, f->sh);
  s.version = 99;
  o = fx_quiet_options(10);
  CU_RC(bc_cache_open(&f->c, f->root, &s, &o), BC_EINVAL);
  s = ts_source(&cfg, f->sh);
  s.next = NULL;
  CU_RC(bc_cache_open(&f->c, f->root, &s, &o), BC_EINVAL);
  CU_RC(bc_cache_open(NULL, f->root, NULL, &o), BC_EINVAL);
  CU_RC(bc_cache_open(&f->c, NULL, NULL, &o), BC_EINVAL);
  /* Every failed open released the payload it was given. */
  assert_int_equal(atomic_load(&f->sh->frees), 10);
  assert_null(f->c);
  struct stat st; /* and nothing was created */
  assert_int_not_equal(stat(f->root, &st), 0);
}

/* ---- the shard length estimate ---------------------------------------------- */

static void test_estimate(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(400);
  bc_cache_options o = fx_quiet_options(0);
  o.shard_bytes = 1500;
  fx_open(f, &cfg, &o);
  /* The first records' mean size decides: shard_bytes over their mean
   * cost on disk (the record plus its 8-byte limit), give or take a record,
   * so the first shard file comes out near the target. */
  double mean = (double)ts_bytes(0, 16, false) / 16.0;
  uint64_t r = fx_stats(f->c).shard_records;
  double lo = 1500.0 / (mean + 16.0) - 1.0, hi = 1500.0 / mean + 1.0;
  if ((double)r < lo || (double)r > hi)
    fail_msg("estimated %llu records per shard, expected %.1f..%.1f",
             (unsigned long long)r, lo, hi);
  bc_buf b = BC_BUF_INIT;
  assert_int_equal(cu_get_cmp(f->c, 0, false, &b), 0);
  bc_cache_shard sh;
  size_t n = 0;
  CU_OK(bc_cache_shards(f->c, &sh, 1, &n));
  assert_int_equal(n, 1);
  assert_int_equal(sh.start, 0);
  assert_int_equal(sh.end, r);
  if (sh.bytes < 1500 * 3 / 4 || sh.bytes > 1500 * 5 / 4)
    fail_msg("the first shard has %llu bytes, target 1500",
             (unsigned long long)sh.bytes);
  /* Recorded once: a reopen without a source, and one asking for another
   * target, keep it. */
  fx_reopen(f, NULL, NULL);
  assert_int_equal(fx_stats(f->c).shard_records, r);
  assert_int_equal(cu_get_cmp(f->c, (int64_t)r - 1, false, &b), 0);
  o.shard_bytes = 100000;
  fx_reopen(f, &cfg, &o);
  assert_int_equal(fx_stats(f->c).shard_records, r);
  char *path = cu_path(f->root, "metadata.json");
  json_error_t err;
  json_t *m = json_load_file(path, 0, &err);
  assert_non_null(m);
  assert_int_equal(json_integer_value(json_object_get(m, "shard_records")), r);
  json_decref(m);
  free(path);
  cu_check_all(f->c, 400, false);
  bc_buf_release(&b);
}

static void test_no_source_no_metadata(void **state) {
  fixture *f = *state;
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  CU_OK(bc_cache_open(&f->c, f->root, NULL, &o));
  bc_buf b = BC_BUF_INIT;
  CU_RC(bc_cache_get(f->c, 0, &b), BC_ENOTCACHED);
  uint64_t len;
  CU_RC(bc_cache_len(f->c, &len), BC_ENOTCACHED);
  bc_buf_release(&b);
}

/* ---- user info ------------------------------------------------------------- */

static void check_info(bc_cache *c, const char *want) {
  char *got = NULL;
  CU_OK(bc_cache_info(c, &got));
  json_error_t err;
  json_t *a = json_loads(got, JSON_DECODE_ANY, &err);
  json_t *b = json_loads(want, JSON_DECODE_ANY, &err);
  assert_non_null(a);
  assert_non_null(b);
  if (!json_equal(a, b)) fail_msg("info is %s, expected %s", got, want);
  json_decref(a);
  json_decref(b);
  free(got);
}

static void test_info(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(20);
  bc_cache_options o = fx_quiet_options(10);
  fx_open(f, &cfg, &o);
  check_info(f->c, "null");
  CU_OK(bc_cache_set_info(f->c, "{\"name\": \"imagenet\", \"n\": [1, 2.5, null]}"));
  check_info(f->c, "{\"n\": [1, 2.5, null], \"name\": \"imagenet\"}");
  CU_RC(bc_cache_set_info(f->c, "{not json"), BC_EINVAL);
  check_info(f->c, "{\"n\": [1, 2.5, null], \"name\": \"imagenet\"}");
  /* Across a reopen (info_json NULL keeps it), and from the options. */
  fx_reopen(f, NULL, &o);
  check_info(f->c, "{\"n\": [1, 2.5, null], \"name\": \"imagenet\"}");
  o.info_json = "\"just a string\"";
  fx_reopen(f, &cfg, &o);
  check_info(f->c, "\"just a string\"");
  o.info_json = NULL;
  fx_reopen(f, &cfg, &o);
  check_info(f->c, "\"just a string\"");
  /* A fresh root created with info. */
  bc_cache_close(f->c);
  f->c = NULL;
  char *other = cu_path(f->dir, "d");
  o.info_json = "[true, false]";
  CU_OK(bc_cache_open(&f->c, other, NULL, &o));
  check_info(f->c, "[true, false]");
  free(other);
}

/* ---- file modes and bad info ---------------------------------------------------- */

static unsigned mode_of(const char *path) {
  struct stat sb;
  if (stat(path, &sb) != 0) fail_msg("%s: missing", path);
  return (unsigned)(sb.st_mode & 0777);
}

static void test_file_mode(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(30);
  bc_cache_options o = fx_quiet_options(10);
  o.file_mode = 0600;
  fx_open(f, &cfg, &o);
  CU_OK(bc_cache_fill_all(f->c));
  char *meta = cu_path(f->root, "metadata.json");
  char *shard = cu_path(f->root, "shards/10.20.bag");
  char *data = cu_path(f->root, "locks/data.mdb");
  assert_int_equal(mode_of(meta), 0600);
  assert_int_equal(mode_of(shard), 0600);
  assert_int_equal(mode_of(data), 0600);
  free(data);
  free(shard);
  free(meta);
}

static void test_bad_info_at_open(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(30);
  f->sh = ts_shared_new(&cfg);
  assert_non_null(f->sh);
  bc_cache_options o = fx_quiet_options(10);
  o.info_json = "{\"unterminated\": ";
  CU_RC(cu_open(&f->c, f->root, &cfg, f->sh, &o), BC_EINVAL);
  assert_null(f->c);
  assert_int_equal(atomic_load(&f->sh->frees), 1);
  o.info_json = NULL;
  fx_open(f, &cfg, &o);
  check_info(f->c, "null");
}

/* ---- a known length: a hint ------------------------------------------------- */

/* metadata.json's field `key` as compact JSON text (malloc'd), NULL when
 * absent. */
static char *meta_get(const char *root, const char *key) {
  char *path = cu_path(root, "metadata.json");
  json_error_t err;
  json_t *m = json_load_file(path, 0, &err);
  assert_non_null(m);
  json_t *v = json_object_get(m, key);
  char *text = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  json_decref(m);
  free(path);
  return text;
}

static void check_meta(const char *root, const char *key, const char *want) {
  char *got = meta_get(root, key);
  if (want == NULL ? got != NULL : got == NULL || strcmp(got, want) != 0)
    fail_msg("metadata.json's %s is %s, expected %s", key, got ? got : "absent",
             want ? want : "absent");
  free(got);
}

/* known_length is a hint: stored as length_hint, never as the length, so
 * that a source ending before it, at it or after it is the source's own
 * length and no nondeterminism (it used to be stored final: a hint too
 * large made every later open fail). */
static void test_known_length(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(57);
  const int64_t hints[] = {57, 80, 30};
  for (size_t k = 0; k < 3; k++) {
    if (f->c != NULL) {
      bc_cache_close(f->c);
      f->c = NULL;
      cu_rm_rf(f->root);
    }
    bc_cache_options o = fx_quiet_options(10);
    o.known_length = hints[k];
    fx_open(f, &cfg, &o);
    bc_cache_stats st = fx_stats(f->c);
    assert_false(st.length_final);
    assert_int_equal(st.length, 0);
    int64_t hint = 0;
    CU_OK(bc_cache_length_hint(f->c, &hint));
    assert_int_equal(hint, hints[k]);
    char want[32];
    snprintf(want, sizeof want, "%lld", (long long)hints[k]);
    check_meta(f->root, "length_hint", want);
    check_meta(f->root, "length_final", "false");
    uint64_t len = 0;
    CU_OK(bc_cache_len(f->c, &len));
    assert_int_equal(len, 57);
    bc_buf b = BC_BUF_INIT;
    CU_RC(bc_cache_get(f->c, 57, &b), BC_ERANGE);
    CU_OK(bc_cache_get(f->c, -1, &b));
    assert_true(ts_matches(56, false, &b));
    bc_buf_release(&b);
    cu_check_all(f->c, 57, false);
    /* Reopened, with and without a source: the same length, no error. */
    fx_reopen(f, &cfg, &o);
    CU_OK(bc_cache_len(f->c, &len));
    assert_int_equal(len, 57);
    fx_reopen(f, NULL, &o);
    cu_check_all(f->c, 57, false);
    check_meta(f->root, "length", "57");
    check_meta(f->root, "length_final", "true");
  }
  /* No hint: none stored. */
  bc_cache_close(f->c);
  f->c = NULL;
  cu_rm_rf(f->root);
  bc_cache_options o = fx_quiet_options(10);
  fx_open(f, &cfg, &o);
  int64_t hint = 0;
  CU_OK(bc_cache_length_hint(f->c, &hint));
  assert_int_equal(hint, -1);
  check_meta(f->root, "length_hint", NULL);
}

/* ---- the source's fingerprint ------------------------------------------------- */

static void check_fingerprint(bc_cache *c, const char *want) {
  char *got = NULL;
  CU_OK(bc_cache_fingerprint(c, &got));
  if (want == NULL ? got != NULL : got == NULL || strcmp(got, want) != 0)
    fail_msg("fingerprint %s, expected %s", got ? got : "NULL", want ? want : "NULL");
  free(got);
}

/* A fingerprint is stored with a new root; an equal JSON value (however
 * spelled) or none reopens it; another is BC_ENONDET naming both, before
 * anything is read; a root without one takes the first given. */
static void test_fingerprint(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(30);
  bc_cache_options o = fx_quiet_options(10);
  o.fingerprint_json = "{\"b\": [1, 2], \"a\": \"v1\"}";
  fx_open(f, &cfg, &o);
  check_fingerprint(f->c, "{\"a\":\"v1\",\"b\":[1,2]}");
  check_meta(f->root, "fingerprint", "{\"a\":\"v1\",\"b\":[1,2]}");
  cu_check_all(f->c, 30, false);
  o.fingerprint_json = "{\"a\":\"v1\",  \"b\":[1,2]}";
  fx_reopen(f, &cfg, &o);
  o.fingerprint_json = NULL; /* no check */
  fx_reopen(f, &cfg, &o);
  CU_OK(bc_cache_set_info(f->c, "{\"note\": 1}")); /* a rewrite keeps it */
  check_fingerprint(f->c, "{\"a\":\"v1\",\"b\":[1,2]}");
  bc_cache_close(f->c);
  f->c = NULL;
  o.fingerprint_json = "\"v2\"";
  CU_RC(bc_cache_open(&f->c, f->root, NULL, &o), BC_ENONDET);
  assert_null(f->c);
  assert_non_null(strstr(bc_errmsg(), ": the cache was filled from a source whose fingerprint "
                                       "is {\"a\":\"v1\",\"b\":[1,2]}, and this one's is \"v2\": "
                                       "the source changed since the cache was filled"));
  o.fingerprint_json = "{\"a\": 1";
  CU_RC(bc_cache_open(&f->c, f->root, NULL, &o), BC_EINVAL);
  assert_non_null(strstr(bc_errmsg(), "the fingerprint is not JSON"));
  CU_RC(bc_cache_open(&f->c, f->root2, NULL, &o), BC_EINVAL);
  struct stat sb;
  assert_int_equal(stat(f->root2, &sb), -1); /* refused before anything is made */
  /* 1 and 1.0 are different JSON values; 1 and 1 are not. */
  o.fingerprint_json = NULL;
  CU_OK(bc_cache_open(&f->c2, f->root2, NULL, &o));
  check_fingerprint(f->c2, NULL);
  bc_cache_close(f->c2);
  f->c2 = NULL;
  o.fingerprint_json = "1";
  CU_OK(bc_cache_open(&f->c2, f->root2, NULL, &o)); /* taken */
  check_fingerprint(f->c2, "1");
  bc_cache_close(f->c2);
  f->c2 = NULL;
  o.fingerprint_json = "1.0";
  CU_RC(bc_cache_open(&f->c2, f->root2, NULL, &o), BC_ENONDET);
  o.fingerprint_json = " 1 ";
  CU_OK(bc_cache_open(&f->c2, f->root2, NULL, &o));
}

/* ---- compression ------------------------------------------------------------- */

static void test_zstd(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(64);
  bc_cache_options o = fx_quiet_options(16);
  o.compression = BC_COMPRESSION_ZSTD;
  o.zstd_level = 5;
  fx_open(f, &cfg, &o);
  cu_check_all(f->c, 64, false);
  cu_check_shards(f->root, false, true);
  bc_cache_shard list[8];
  size_t n = 0;
  CU_OK(bc_cache_shards(f->c, list, 8, &n));
  assert_int_equal(n, 4);
  for (size_t k = 0; k < n; k++) {
    char *path = NULL;
    assert_true(list[k].zstd);
    CU_OK(bc_cache_shard_path(f->c, &list[k], &path));
    size_t len = strlen(path);
    assert_true(len > 5 && strcmp(path + len - 5, ".bagz") == 0);
    bc_bag *bag = NULL;
    CU_OK(bc_bag_open(&bag, path, NULL));
    free(path);
    bc_shard_info info;
    CU_OK(bc_bag_shard_info(bag, 0, &info));
    assert_int_equal(info.compression, BC_COMPRESSION_ZSTD);
    assert_int_equal(info.file_bytes, list[k].bytes);
    bc_bag_close(bag);
  }
  /* Reopened asking for no compression: still zstd, still readable. */
  bc_cache_options plain = fx_quiet_options(16);
  fx_reopen(f, NULL, &plain);
  cu_check_all(f->c, 64, false);
}

int main(void) {
  bc_set_notice_handler(NULL, NULL);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_get_and_range, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_root_with_spec_characters, fx_setup,
                                      fx_teardown),
      cmocka_unit_test_setup_teardown(test_first_read_past_end, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_len_drains, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_empty_source, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_end_shared, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_reopen_without_source, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_fill_all_without_source_complete, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_reopen_without_source_unknown_length, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_reopen_other_options, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_reopen_with_defaults_says_nothing, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_fill_workers_without_source, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_finalize, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_metadata_checks, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_options_rejected, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_estimate, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_no_source_no_metadata, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_info, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_file_mode, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_bad_info_at_open, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_known_length, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_fingerprint, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_zstd, fx_setup, fx_teardown),
  };
  return cmocka_run_group_tests_name("cache basics", tests, NULL, NULL);
}
