/*
 * reader.c - the reader options shared by every reading command, and
 * opening a spec with them.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "cli/internal.h"

/* A word list lookup: the index of `s` in `words` (NULL-terminated), or -1. */
static int lookup(const char *s, const char *const *words) {
  for (int i = 0; words[i]; i++)
    if (strcmp(s, words[i]) == 0) return i;
  return -1;
}

bool cli_parse_compression(const char *s, bc_compression *out) {
  static const char *const words[] = {"auto", "none", "zstd", NULL};
  static const bc_compression values[] = {
      BC_COMPRESSION_AUTO, BC_COMPRESSION_NONE, BC_COMPRESSION_ZSTD};
  int i = lookup(s, words);
  if (i < 0) return false;
  *out = values[i];
  return true;
}

const char *cli_compression_name(bc_compression c) {
  switch (c) {
    case BC_COMPRESSION_NONE:
      return "none";
    case BC_COMPRESSION_ZSTD:
      return "zstd";
    case BC_COMPRESSION_AUTO:
      return "auto";
  }
  return "unknown";
}

void cli_reader_init(cli_reader *r) {
  const bc_reader_options init = BC_READER_OPTIONS_INIT;
  memset(r, 0, sizeof *r);
  r->opts = init;
}

int cli_reader_option(cli_reader *r, int option, const char *arg) {
  static const char *const policies[] = {"system", "drop", "direct", NULL};
  static const bc_cache_policy policy_values[] = {
      BC_CACHE_SYSTEM, BC_CACHE_DROP_AFTER_READ, BC_CACHE_DIRECT_IO};
  static const char *const accesses[] = {"system", "random", "sequential",
                                         NULL};
  static const bc_access_pattern access_values[] = {
      BC_ACCESS_SYSTEM, BC_ACCESS_RANDOM, BC_ACCESS_SEQUENTIAL};
  int i;
  int64_t n;
  switch (option) {
    case CLI_OPT_SEPARATE_LIMITS:
      r->opts.limits_placement = BC_LIMITS_SEPARATE;
      return CLI_OK;
    case CLI_OPT_INTERLEAVED:
      r->opts.sharding_layout = BC_LAYOUT_INTERLEAVED;
      return CLI_OK;
    case CLI_OPT_LIMITS_IN_MEMORY:
      r->opts.limits_storage = BC_LIMITS_IN_MEMORY;
      return CLI_OK;
    case CLI_OPT_COMPRESSION:
      if (!cli_parse_compression(arg, &r->opts.compression))
        return cli_usage_error(
            "invalid compression '%s' (expected auto, none or zstd)", arg);
      r->compression_given = true;
      return CLI_OK;
    case CLI_OPT_DICTIONARY:
      r->dictionary_path = arg;
      return CLI_OK;
    case CLI_OPT_CACHE_POLICY:
      if ((i = lookup(arg, policies)) < 0)
        return cli_usage_error(
            "invalid cache policy '%s' (expected system, drop or direct)",
            arg);
      r->opts.cache_policy = policy_values[i];
      return CLI_OK;
    case CLI_OPT_ACCESS:
      if ((i = lookup(arg, accesses)) < 0)
        return cli_usage_error(
            "invalid access pattern '%s' (expected system, random or "
            "sequential)",
            arg);
      r->opts.access_pattern = access_values[i];
      return CLI_OK;
    case CLI_OPT_THREADS:
      if (!cli_parse_i64(arg, 0, 4096, &n))
        return cli_usage_error(
            "invalid thread count '%s' (expected 0 to 4096)", arg);
      r->opts.max_parallelism = (int)n;
      return CLI_OK;
    default:
      return -1;
  }
}

int cli_reader_open(cli_reader *r, const char *spec, bc_bag **bag) {
  if (r->dictionary_path && !r->dictionary) {
    int status = cli_read_file(r->dictionary_path, &r->dictionary,
                               &r->dictionary_size);
    if (status != CLI_OK) return status;
    if (!r->compression_given) r->opts.compression = BC_COMPRESSION_ZSTD;
  }
  r->opts.dictionary = r->dictionary;
  r->opts.dictionary_size = r->dictionary_size;
  int rc = bc_bag_open(bag, spec, &r->opts);
  if (rc != BC_OK) return cli_fail(rc);
  return CLI_OK;
}

void cli_reader_free(cli_reader *r) {
  free(r->dictionary);
  r->dictionary = NULL;
}
