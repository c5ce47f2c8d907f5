/*
 * cache.c - the `bagcache cache` command group: its dispatch table and the
 * pieces its commands share (byte sizes, the ROOT operand, opening an
 * existing root).  Each command lives in a cache_*.c file.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/internal.h"

static const char cache_usage[] =
    "Usage: bagcache cache COMMAND [OPTIONS] ROOT [ARGS...]\n"
    "\n"
    "Fill, read and manage a cache: a directory ROOT holding a sequence of\n"
    "records as Bagz shards (ROOT/shards/START.END.bag or .bagz) with its\n"
    "description in ROOT/metadata.json.  'fill' drains a command's output\n"
    "into it; the other commands use only what is already cached.\n";

static const cli_command cache_commands[] = {
    {"info", "describe a cache: length, shards, bytes, limit, user info",
     cli_cache_info},
    {"count", "print the number of records of a complete cache",
     cli_cache_count},
    {"get", "print cached records by index (negative counts from the end)",
     cli_cache_get},
    {"fill", "cache a command's output or standard input, record by record",
     cli_cache_fill},
    {"verify", "check every shard against its recorded size and checksum",
     cli_cache_verify},
    {"export", "write a complete cache as a standard Bagz set",
     cli_cache_export},
    {"clear", "delete the cache: shards, state and metadata",
     cli_cache_clear},
    {NULL, NULL, NULL},
};

int cli_cache_main(int argc, char **argv) {
  return cli_dispatch(cache_commands, cache_usage, argc, argv);
}

/* The library's size parser (bagcache.h): Python's memory_limit and
 * max_shard_length strings read the same. */
bool cli_parse_size(const char *s, uint64_t *out) {
  int rc = bc_parse_size(s, out);
  if (rc != 0) bc_error_clear(); /* the caller reports a usage error of its own */
  return rc == 0;
}

static const struct option root_options[] = {
    {"help", no_argument, NULL, CLI_OPT_HELP},
    {NULL, 0, NULL, 0},
};

static int no_option(void *ctx, int option, const char *arg) {
  (void)ctx;
  (void)option;
  (void)arg;
  return CLI_USAGE; /* getopt_long only returns values from root_options */
}

int cli_cache_root_only(int argc, char **argv, const char *usage,
                        const char **root) {
  cli_args args;
  bool done;
  *root = NULL;
  int status = cli_parse(argc, argv, "h", root_options, false, no_option,
                         NULL, usage, &done, &args);
  if (status != CLI_OK || done) return status;
  if (args.noperands != 1)
    status = args.noperands == 0
                 ? cli_usage_error("missing ROOT")
                 : cli_usage_error("unexpected argument '%s'",
                                   args.operands[1]);
  else
    *root = args.operands[0]; /* a pointer into argv, not into storage */
  cli_args_free(&args);
  return status;
}

int cli_cache_open_existing(const char *root, bc_cache **cache) {
  bc_cache_options opts = BC_CACHE_OPTIONS_INIT;
  struct stat st;
  char *meta = NULL;
  int status = CLI_FAIL;
  *cache = NULL;
  if (root[0] == '\0')
    return cli_error(bc_strerror(BC_ENOTFOUND), "empty ROOT");
  size_t n = strlen(root) + sizeof "/metadata.json";
  meta = malloc(n);
  if (!meta) {
    cli_error("out of memory", "opening %s", root);
    goto cleanup;
  }
  snprintf(meta, n, "%s/metadata.json", root);
  /* bc_cache_open creates a missing root; a reading command must not. */
  if (stat(meta, &st) != 0) {
    int err = errno;
    if (err == ENOENT || err == ENOTDIR)
      cli_error(bc_strerror(BC_ENOTFOUND), "%s: not a cache (no %s)", root,
                meta);
    else
      cli_error(bc_strerror(err == EACCES ? BC_EPERM : BC_EIO), "%s: %s",
                meta, strerror(err));
    goto cleanup;
  }
  opts.prefetch_shards = -1; /* there is no source to prefetch from */
  int rc = bc_cache_open(cache, root, NULL, &opts);
  if (rc != BC_OK) {
    *cache = NULL;
    cli_fail(rc);
    goto cleanup;
  }
  status = CLI_OK;
cleanup:
  free(meta);
  return status;
}
