/*
 * cache_get.c - `cache get`: print cached records by index.
 *
 * The root is opened with no source, so a record that is not cached is an
 * error (BC_ENOTCACHED), never a reason to run anything, unless --rerun
 * asks for the command `cache fill` stored with the root: then the root is
 * opened again with that command as its source, which rebuilds what is
 * missing.  Every record is read before the first is printed: on any
 * error nothing is printed.
 */
#include "config.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli/internal.h"

typedef enum record_format {
  FORMAT_RAW,    /* bytes as stored, no separator */
  FORMAT_HEX,    /* lowercase hex, one record per line */
  FORMAT_BASE64, /* padded standard base64, one record per line */
  FORMAT_TEXT    /* bytes as stored, one record per line (no '\n' inside) */
} record_format;

static const char get_usage[] =
    "Usage: bagcache cache get [OPTIONS] ROOT INDEX...\n"
    "\n"
    "Print the cached records at the given indices, in the order given.  A\n"
    "negative INDEX counts from the end (-1 is the last record; this needs\n"
    "a cache whose length is final).  A record that is not cached is an\n"
    "error: nothing is filled.  Every record is read before any is printed.\n"
    "\n"
    "      --rerun               run the command stored by 'cache fill ROOT --\n"
    "                            COMMAND' (in the directory it was filled\n"
    "                            from) to rebuild the records that are not\n"
    "                            cached (evicted under the disk limit).  A\n"
    "                            stored command is code: it never runs\n"
    "                            without this option\n"
    "\n"
    "Output formats (the last one given wins):\n"
    "      --raw                 the record bytes, records concatenated (the\n"
    "                            default)\n"
    "      --hex                 lowercase hex, one record per line\n"
    "      --base64              padded standard base64, one per line\n"
    "      --text                the record bytes, one per line; fails on\n"
    "                            a record that contains a newline\n"
    "  -h, --help                show this help\n";

static const struct option get_options[] = {
    {"help", no_argument, NULL, CLI_OPT_HELP},
    {"raw", no_argument, NULL, CLI_OPT_RAW},
    {"hex", no_argument, NULL, CLI_OPT_HEX},
    {"base64", no_argument, NULL, CLI_OPT_BASE64},
    {"text", no_argument, NULL, CLI_OPT_TEXT},
    {"rerun", no_argument, NULL, CLI_OPT_RERUN},
    {NULL, 0, NULL, 0},
};

typedef struct get_command {
  record_format format;
  bool rerun;
} get_command;

static int get_option(void *ctx, int option, const char *arg) {
  get_command *cmd = ctx;
  record_format *format = &cmd->format;
  (void)arg;
  switch (option) {
    case CLI_OPT_RERUN:
      cmd->rerun = true;
      return CLI_OK;
    case CLI_OPT_RAW:
      *format = FORMAT_RAW;
      return CLI_OK;
    case CLI_OPT_HEX:
      *format = FORMAT_HEX;
      return CLI_OK;
    case CLI_OPT_BASE64:
      *format = FORMAT_BASE64;
      return CLI_OK;
    case CLI_OPT_TEXT:
      *format = FORMAT_TEXT;
      return CLI_OK;
    default:
      return CLI_USAGE; /* getopt_long only returns values from the table */
  }
}

static int print_record(const bc_buf *rec, record_format format) {
  switch (format) {
    case FORMAT_RAW:
      return cli_out(rec->data, rec->size);
    case FORMAT_HEX:
      if (cli_out_hex(rec->data, rec->size) != CLI_OK) return CLI_FAIL;
      break;
    case FORMAT_BASE64:
      if (cli_out_base64(rec->data, rec->size) != CLI_OK) return CLI_FAIL;
      break;
    case FORMAT_TEXT:
      if (cli_out(rec->data, rec->size) != CLI_OK) return CLI_FAIL;
      break;
  }
  return cli_out("\n", 1);
}

/* Reopens *cache (opened with no source) with its stored command as the
 * source (--rerun).  CLI_OK, or CLI_FAIL (printed; *cache closed). */
static int reopen_with_command(const char *root, bc_cache **cache,
                               cli_stored_command *cmd) {
  bool found = false;
  bc_source source;
  int status = cli_command_load(*cache, cmd, &found);
  if (status == CLI_OK && !found)
    status = cli_error(bc_strerror(BC_ENOTCACHED), "%s: --rerun: no command is "
                       "stored with the cache (only 'bagcache cache fill ROOT -- "
                       "COMMAND' stores one)", root);
  bc_cache_close(*cache);
  *cache = NULL;
  if (status != CLI_OK) return status;
  if ((status = cli_command_source(&source, cmd->argv, cmd->from, NULL)) != CLI_OK)
    return status;
  if (cmd->seek_arg && (status = cli_command_source_seekable(&source)) != CLI_OK) {
    source.free_payload(source.payload);
    return status;
  }
  cli_command_source_cwd(&source, cmd->cwd);
  bc_cache_options opts = BC_CACHE_OPTIONS_INIT;
  opts.max_passes = 1;       /* one run of the command at a time */
  opts.prefetch_shards = -1; /* only what is asked for is rebuilt */
  int rc = bc_cache_open(cache, root, &source, &opts);
  if (rc != BC_OK) {
    *cache = NULL;
    return cli_fail(rc);
  }
  return CLI_OK;
}

/* A record not cached while a command is stored: the error says how to
 * run it (it is not run without --rerun). */
static int fail_not_cached(bc_cache *cache, int rc) {
  if (rc != BC_ENOTCACHED) return cli_fail(rc);
  bc_error_state why = BC_ERROR_STATE_INIT;
  bc_error_save(&why, rc);
  char *text = NULL;
  bool stored = bc_cache_source_info(cache, &text) == BC_OK && strcmp(text, "null") != 0;
  free(text);
  int status = stored ? cli_error(bc_strerror(rc), "%s (a command is stored with "
                                  "the cache: --rerun runs it to rebuild them)",
                                  why.message)
                      : (bc_error_restore(&why), cli_fail(rc));
  bc_error_state_clear(&why);
  return status;
}

int cli_cache_get(int argc, char **argv) {
  get_command cmd = {FORMAT_RAW, false};
  cli_stored_command stored = {0};
  cli_args args = {NULL, 0, NULL};
  bc_cache *cache = NULL;
  int64_t *indices = NULL;
  bc_buf *bufs = NULL;
  size_t count = 0;
  bool done;
  int status = cli_parse(argc, argv, "h", get_options, true, get_option,
                         &cmd, get_usage, &done, &args);
  record_format format = cmd.format;
  if (status != CLI_OK || done) goto cleanup;
  if (args.noperands < 2) {
    status = cli_usage_error(args.noperands == 0 ? "missing ROOT"
                                                 : "missing INDEX");
    goto cleanup;
  }
  count = (size_t)args.noperands - 1;
  indices = calloc(count, sizeof *indices);
  bufs = calloc(count, sizeof *bufs);
  if (!indices || !bufs) {
    status = cli_error("out of memory", "%zu indices", count);
    goto cleanup;
  }
  for (size_t i = 0; i < count; i++) {
    const char *word = args.operands[i + 1];
    if (!cli_parse_i64(word, INT64_MIN + 1, INT64_MAX, &indices[i])) {
      status = cli_usage_error("invalid index '%s'", word);
      goto cleanup;
    }
  }
  status = cli_cache_open_existing(args.operands[0], &cache);
  if (status == CLI_OK && cmd.rerun)
    status = reopen_with_command(args.operands[0], &cache, &stored);
  if (status != CLI_OK) goto cleanup;
  int rc = bc_seq_get_many(bc_cache_seq(cache), indices, count, bufs);
  if (rc != BC_OK) {
    status = fail_not_cached(cache, rc);
    goto cleanup;
  }
  /* --text is checked for every record first, so it too prints nothing
   * unless it can print everything. */
  for (size_t i = 0; format == FORMAT_TEXT && i < count; i++) {
    if (bufs[i].size && memchr(bufs[i].data, '\n', bufs[i].size)) {
      status = cli_error("cannot print as text",
                         "record %" PRId64
                         " contains a newline (use --hex or --base64)",
                         indices[i]);
      goto cleanup;
    }
  }
  for (size_t i = 0; i < count && status == CLI_OK; i++)
    status = print_record(&bufs[i], format);
  if (status == CLI_OK) status = cli_out_finish();
cleanup:
  for (size_t i = 0; bufs && i < count; i++) bc_buf_release(&bufs[i]);
  free(bufs);
  free(indices);
  bc_cache_close(cache);
  cli_stored_command_free(&stored);
  cli_args_free(&args);
  return status;
}
