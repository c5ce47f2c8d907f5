/*
 * cache_admin.c - the commands that look after a cache as a whole: `cache
 * verify` (checksums), `cache export` (a standard Bagz set) and `cache
 * clear` (delete it).  None of them runs a source.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>

#include "cli/internal.h"

/* ---- cache verify ---------------------------------------------------------- */

static const char verify_usage[] =
    "Usage: bagcache cache verify [OPTIONS] ROOT\n"
    "\n"
    "Check every shard present in the cache at ROOT against the size and\n"
    "checksum recorded when it was written.  Prints 'ok: N shards verified'\n"
    "and exits 0 when all match; otherwise prints the first bad shard and\n"
    "the problem to standard error and exits 1.\n"
    "\n"
    "Options:\n"
    "  -h, --help                show this help\n";

int cli_cache_verify(int argc, char **argv) {
  const char *root;
  bc_cache *cache = NULL;
  bc_cache_stats stats;
  int status = cli_cache_root_only(argc, argv, verify_usage, &root);
  if (status != CLI_OK || !root) return status;
  status = cli_cache_open_existing(root, &cache);
  if (status != CLI_OK) goto cleanup;
  uint64_t bad = UINT64_MAX;
  int rc = bc_cache_verify(cache, &bad);
  if (rc != BC_OK && bad != UINT64_MAX) {
    char what[80];
    snprintf(what, sizeof what,
             "verify failed in the shard starting at record %" PRIu64, bad);
    status = cli_error(what, "%s: %s", bc_strerror(rc), bc_errmsg());
    goto cleanup;
  }
  if (rc == BC_OK) rc = bc_cache_stats_get(cache, &stats);
  if (rc != BC_OK) {
    status = cli_fail(rc);
    goto cleanup;
  }
  cli_printf("ok: %" PRIu64 " shard%s verified\n", stats.shards_present,
             stats.shards_present == 1 ? "" : "s");
  status = cli_out_finish();
cleanup:
  bc_cache_close(cache);
  return status;
}

/* ---- cache export ---------------------------------------------------------- */

static const char export_usage[] =
    "Usage: bagcache cache export [OPTIONS] ROOT OUT\n"
    "\n"
    "Write the records of the complete cache at ROOT as a standard Bagz\n"
    "set, readable by bagz and by 'bagcache bag'.  OUT is passed to the\n"
    "library as given: PREFIX@N.SUFFIX writes N shards\n"
    "(PREFIX-00000-of-0000N.SUFFIX, ...) as even as possible; a name\n"
    "without @N writes one file.  The shards are zstd-compressed when OUT\n"
    "ends in .bagz, else stored as they are.  Fails (exit 1) if a record\n"
    "is not cached: nothing is filled.\n"
    "\n"
    "Options:\n"
    "  -h, --help                show this help\n";

static const struct option export_options[] = {
    {"help", no_argument, NULL, CLI_OPT_HELP},
    {NULL, 0, NULL, 0},
};

static int export_option(void *ctx, int option, const char *arg) {
  (void)ctx;
  (void)option;
  (void)arg;
  return CLI_USAGE; /* getopt_long only returns values from the table */
}

int cli_cache_export(int argc, char **argv) {
  cli_args args = {NULL, 0, NULL};
  bc_cache *cache = NULL;
  bool done;
  int status = cli_parse(argc, argv, "h", export_options, false,
                         export_option, NULL, export_usage, &done, &args);
  if (status != CLI_OK || done) goto cleanup;
  if (args.noperands != 2) {
    status = args.noperands == 0   ? cli_usage_error("missing ROOT")
             : args.noperands == 1 ? cli_usage_error("missing OUT")
                                   : cli_usage_error("unexpected argument '%s'",
                                                     args.operands[2]);
    goto cleanup;
  }
  status = cli_cache_open_existing(args.operands[0], &cache);
  if (status != CLI_OK) goto cleanup;
  int rc = bc_cache_export(cache, args.operands[1]);
  if (rc != BC_OK) status = cli_fail(rc);
cleanup:
  bc_cache_close(cache);
  cli_args_free(&args);
  return status;
}

/* ---- cache clear ----------------------------------------------------------- */

static const char clear_usage[] =
    "Usage: bagcache cache clear [OPTIONS] ROOT\n"
    "\n"
    "Delete the cache at ROOT, without asking: every shard, the shared state\n"
    "and metadata.json with the user info (ROOT/shards, ROOT/scratch,\n"
    "ROOT/locks, ROOT/metadata.json), then ROOT itself if nothing else is\n"
    "in it.  A directory without metadata.json is refused (exit 1).  While\n"
    "other processes have the cache open, it is emptied instead: every\n"
    "shard goes, and metadata.json, the shared state and the directories\n"
    "stay for them (a notice says so); clear it again once they have\n"
    "closed it to delete ROOT.\n"
    "\n"
    "Options:\n"
    "  -h, --help                show this help\n";

int cli_cache_clear(int argc, char **argv) {
  const char *root;
  int status = cli_cache_root_only(argc, argv, clear_usage, &root);
  if (status != CLI_OK || !root) return status;
  int rc = bc_cache_clear(root);
  return rc == BC_OK ? CLI_OK : cli_fail(rc);
}
