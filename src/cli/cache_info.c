/*
 * cache_info.c - the commands that describe a cache as a whole: `cache
 * info` (human-readable lines, or one JSON object with --json) and `cache
 * count`.  Both open the root with no source: they never run anything.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/internal.h"

/* ---- cache info ------------------------------------------------------------ */

static const char info_usage[] =
    "Usage: bagcache cache info [OPTIONS] ROOT\n"
    "\n"
    "Describe the cache at ROOT, one 'key: value' per line: its length (a\n"
    "lower bound until the source has ended, then final), the records per\n"
    "shard, the shards present, their bytes on disk, the disk limit stored\n"
    "with the cache, the root's counters (summed over every process that\n"
    "has used it: misses, fills, regenerations, evictions, records\n"
    "generated, bytes written, shards kept on a pass's way; 0 on a root\n"
    "written before they were kept),\n"
    "and the user info (JSON) from metadata.json; then, when stored there,\n"
    "the source's fingerprint (JSON) and the length hint the cache was\n"
    "created with (until the source's end is seen).\n"
    "\n"
    "Options:\n"
    "      --json                print one JSON object with the same fields\n"
    "                            and the list of shards (start, end, path,\n"
    "                            bytes, last_access)\n"
    "  -h, --help                show this help\n";

static const struct option info_options[] = {
    {"help", no_argument, NULL, CLI_OPT_HELP},
    {"json", no_argument, NULL, CLI_OPT_JSON},
    {NULL, 0, NULL, 0},
};

static int info_option(void *ctx, int option, const char *arg) {
  (void)arg;
  if (option != CLI_OPT_JSON) return CLI_USAGE; /* not in info_options */
  *(bool *)ctx = true;
  return CLI_OK;
}

/* The user info as a JSON value (new reference), or NULL after printing
 * the error. */
static json_t *load_user_info(bc_cache *cache) {
  char *text = NULL;
  json_error_t err;
  int rc = bc_cache_info(cache, &text);
  if (rc != BC_OK) {
    cli_fail(rc);
    return NULL;
  }
  json_t *value = json_loads(text, JSON_DECODE_ANY, &err);
  if (!value)
    cli_error(bc_strerror(BC_ECORRUPT), "user info is not JSON: %s",
              err.text);
  free(text);
  return value;
}

/* The source's fingerprint (compact JSON text, malloc'd; NULL when none)
 * and the length hint (-1: none) stored in metadata.json, or CLI_FAIL
 * after printing the error. */
static int load_stamps(bc_cache *cache, char **fingerprint, int64_t *hint) {
  int rc = bc_cache_fingerprint(cache, fingerprint);
  if (rc == BC_OK) rc = bc_cache_length_hint(cache, hint);
  if (rc == BC_OK) return CLI_OK;
  free(*fingerprint);
  *fingerprint = NULL;
  return cli_fail(rc);
}

/* The shard listing (malloc'd, *count entries), or CLI_FAIL after printing
 * the error.  Shards may appear between the two calls: retry until the
 * listing fits. */
static int list_shards(bc_cache *cache, bc_cache_shard **out, size_t *count) {
  bc_cache_shard *shards = NULL;
  size_t max = 0, n = 0;
  for (;;) {
    int rc = bc_cache_shards(cache, shards, max, &n);
    if (rc != BC_OK) {
      free(shards);
      return cli_fail(rc);
    }
    if (n <= max) break;
    free(shards);
    max = n + 16;
    shards = calloc(max, sizeof *shards);
    if (!shards) return cli_error("out of memory", "%zu shards", max);
  }
  *out = shards;
  *count = n;
  return CLI_OK;
}

/* Sets obj[key] to `value`, consuming the reference; false when either is
 * NULL or out of memory (json_object_set_new then drops the value). */
static bool put(json_t *obj, const char *key, json_t *value) {
  return obj && value && json_object_set_new(obj, key, value) == 0;
}

static json_t *u64(uint64_t v) { return json_integer((json_int_t)v); }

static json_t *stats_json(const bc_cache_stats *s) {
  json_t *obj = json_object();
  json_t *counters = json_object();
  bool ok = put(obj, "length", u64(s->length)) &&
            put(obj, "length_final", json_boolean(s->length_final)) &&
            put(obj, "shard_records", u64(s->shard_records)) &&
            put(obj, "shards_present", u64(s->shards_present)) &&
            put(obj, "bytes_on_disk", u64(s->bytes_on_disk)) &&
            put(obj, "disk_limit", u64(s->disk_limit)) &&
            put(counters, "misses", u64(s->root.fills + s->root.regenerations)) &&
            put(counters, "fills", u64(s->root.fills)) &&
            put(counters, "regenerations", u64(s->root.regenerations)) &&
            put(counters, "evictions", u64(s->root.evictions)) &&
            put(counters, "records_generated", u64(s->root.records_generated)) &&
            put(counters, "bytes_written", u64(s->root.bytes_written)) &&
            put(counters, "shards_kept", u64(s->root.shards_kept));
  /* put() consumes counters; if it was never called, drop it here. */
  if (!ok)
    json_decref(counters);
  else if (!put(obj, "counters", counters))
    ok = false;
  if (!ok) {
    json_decref(obj);
    return NULL;
  }
  return obj;
}

static json_t *shards_json(bc_cache *cache, const bc_cache_shard *shards,
                           size_t count) {
  json_t *list = json_array();
  for (size_t i = 0; list && i < count; i++) {
    json_t *s = json_object();
    char *path = NULL;
    bool ok = bc_cache_shard_path(cache, &shards[i], &path) == BC_OK &&
              put(s, "start", u64(shards[i].start)) &&
              put(s, "end", u64(shards[i].end)) &&
              put(s, "path", json_string(path)) &&
              put(s, "bytes", u64(shards[i].bytes)) &&
              put(s, "last_access", u64(shards[i].last_access));
    free(path);
    if (!ok || json_array_append_new(list, s) != 0) {
      if (!ok) json_decref(s);
      json_decref(list);
      list = NULL;
    }
  }
  return list;
}

static int print_json(bc_cache *cache, const bc_cache_stats *stats) {
  bc_cache_shard *shards = NULL;
  size_t count = 0;
  json_t *obj = NULL, *info = NULL;
  char *text = NULL, *fingerprint = NULL;
  int64_t hint = -1;
  int status = list_shards(cache, &shards, &count);
  if (status == CLI_OK) status = load_stamps(cache, &fingerprint, &hint);
  if (status != CLI_OK) goto cleanup;
  status = CLI_FAIL;
  if (!(info = load_user_info(cache))) goto cleanup;
  obj = stats_json(stats);
  bool ok = put(obj, "info", info);
  info = NULL; /* put() took it */
  /* Present only when stored (metadata.json's optional fields). */
  if (ok && fingerprint != NULL)
    ok = put(obj, "fingerprint", json_loads(fingerprint, JSON_DECODE_ANY, NULL));
  if (ok && hint >= 0) ok = put(obj, "length_hint", json_integer((json_int_t)hint));
  if (!ok || !put(obj, "shards", shards_json(cache, shards, count)) ||
      !(text = json_dumps(obj, JSON_INDENT(2)))) {
    cli_error("out of memory", "building the JSON description");
    goto cleanup;
  }
  cli_outs(text);
  cli_outs("\n");
  status = cli_out_finish();
cleanup:
  free(text);
  free(fingerprint);
  json_decref(obj);
  json_decref(info);
  free(shards);
  return status;
}

static int print_lines(bc_cache *cache, const bc_cache_stats *s) {
  char *text = NULL, *fingerprint = NULL;
  int64_t hint = -1;
  if (load_stamps(cache, &fingerprint, &hint) != CLI_OK) return CLI_FAIL;
  json_t *info = load_user_info(cache);
  if (!info) {
    free(fingerprint);
    return CLI_FAIL;
  }
  /* One line, whatever the layout of metadata.json. */
  text = json_dumps(info, JSON_COMPACT | JSON_ENCODE_ANY);
  json_decref(info);
  if (!text) {
    free(fingerprint);
    return cli_error("out of memory", "printing the user info");
  }
  cli_printf("length: %" PRIu64 "\n", s->length);
  cli_printf("length final: %s\n", s->length_final ? "yes" : "no");
  cli_printf("shard records: %" PRIu64 "\n", s->shard_records);
  cli_printf("shards present: %" PRIu64 "\n", s->shards_present);
  cli_printf("bytes on disk: %" PRIu64 "\n", s->bytes_on_disk);
  if (s->disk_limit)
    cli_printf("disk limit: %" PRIu64 "\n", s->disk_limit);
  else
    cli_outs("disk limit: none\n");
  /* The root's counters: this process's would all be 0 (it reads nothing). */
  cli_printf("misses: %" PRIu64 "\n", s->root.fills + s->root.regenerations);
  cli_printf("fills: %" PRIu64 "\n", s->root.fills);
  cli_printf("regenerations: %" PRIu64 "\n", s->root.regenerations);
  cli_printf("evictions: %" PRIu64 "\n", s->root.evictions);
  cli_printf("records generated: %" PRIu64 "\n", s->root.records_generated);
  cli_printf("bytes written: %" PRIu64 "\n", s->root.bytes_written);
  cli_printf("shards kept: %" PRIu64 "\n", s->root.shards_kept);
  cli_printf("info: %s\n", text);
  /* Only when stored, each on one line. */
  if (fingerprint != NULL) cli_printf("fingerprint: %s\n", fingerprint);
  if (hint >= 0) cli_printf("length hint: %" PRId64 "\n", hint);
  free(fingerprint);
  free(text);
  return cli_out_finish();
}

int cli_cache_info(int argc, char **argv) {
  cli_args args = {NULL, 0, NULL};
  bc_cache *cache = NULL;
  bool json = false, done;
  int status = cli_parse(argc, argv, "h", info_options, false, info_option,
                         &json, info_usage, &done, &args);
  if (status != CLI_OK || done) goto cleanup;
  if (args.noperands != 1) {
    status = args.noperands == 0
                 ? cli_usage_error("missing ROOT")
                 : cli_usage_error("unexpected argument '%s'",
                                   args.operands[1]);
    goto cleanup;
  }
  status = cli_cache_open_existing(args.operands[0], &cache);
  if (status != CLI_OK) goto cleanup;
  bc_cache_stats stats;
  int rc = bc_cache_stats_get(cache, &stats);
  if (rc != BC_OK) {
    status = cli_fail(rc);
    goto cleanup;
  }
  status = json ? print_json(cache, &stats) : print_lines(cache, &stats);
cleanup:
  bc_cache_close(cache);
  cli_args_free(&args);
  return status;
}

/* ---- cache count ----------------------------------------------------------- */

static const char count_usage[] =
    "Usage: bagcache cache count [OPTIONS] ROOT\n"
    "\n"
    "Print the number of records of the cache at ROOT, alone on a line.\n"
    "The length is known only once a fill has reached the end of its\n"
    "source; before that this fails (exit 1): see 'cache info' for the\n"
    "lower bound.\n"
    "\n"
    "Options:\n"
    "  -h, --help                show this help\n";

int cli_cache_count(int argc, char **argv) {
  const char *root;
  bc_cache *cache = NULL;
  uint64_t len = 0;
  int status = cli_cache_root_only(argc, argv, count_usage, &root);
  if (status != CLI_OK || !root) return status;
  status = cli_cache_open_existing(root, &cache);
  if (status != CLI_OK) goto cleanup;
  int rc = bc_cache_len(cache, &len);
  if (rc != BC_OK) {
    status = cli_fail(rc);
    goto cleanup;
  }
  cli_printf("%" PRIu64 "\n", len);
  status = cli_out_finish();
cleanup:
  bc_cache_close(cache);
  return status;
}
