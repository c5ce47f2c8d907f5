/*
 * bag_write.c - `bag write`: records from standard input, one per line, to
 * one new Bagz file.
 *
 * All or nothing: the library writer publishes OUT only when it is closed,
 * and it is closed only after the whole input was read and decoded, so bad
 * input or a failed write leaves no OUT (and an existing OUT untouched).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/internal.h"

typedef enum input_format { INPUT_LINES, INPUT_HEX, INPUT_BASE64 } input_format;

typedef struct write_command {
  bc_writer_options opts;
  bool compression_given;
  bool level_given;
  const char *dictionary_path;
  input_format from;
  bool verbose;
} write_command;

/* zstd's level range (ZSTD_minCLevel() .. ZSTD_maxCLevel()). */
#define MIN_LEVEL (-131072)
#define MAX_LEVEL 22

static const char write_usage[] =
    "Usage: bagcache bag write [OPTIONS] OUT\n"
    "\n"
    "Write the lines of standard input as the records of a new Bagz file OUT\n"
    "(one file; no @ expansion).  A final line without a newline is a record\n"
    "too.  OUT appears only when everything was written; on any error it is\n"
    "left as it was.\n"
    "\n"
    "Options:\n"
    "      --from FORMAT         how a line spells a record: lines (the line\n"
    "                            itself, without its newline; the default),\n"
    "                            hex or base64 (decoded; an invalid line is\n"
    "                            an error naming the line number)\n"
    "      --compression MODE    auto (zstd if OUT ends in .bagz; the default\n"
    "                            unless --level or --dictionary is given),\n"
    "                            none or zstd\n"
    "      --level N             zstd level, -131072 to 22 (0 = zstd's\n"
    "                            default, 3); implies zstd\n"
    "      --dictionary FILE     zstd dictionary (raw content or trained);\n"
    "                            implies zstd; readers need the same FILE\n"
    "      --separate-limits     write the limits to DIR/limits.NAME instead\n"
    "                            of the end of OUT\n"
    "  -v, --verbose             print a summary line when done\n"
    "  -h, --help                show this help\n";

static const struct option write_options[] = {
    {"help", no_argument, NULL, CLI_OPT_HELP},
    {"verbose", no_argument, NULL, CLI_OPT_VERBOSE},
    {"from", required_argument, NULL, CLI_OPT_FROM},
    {"compression", required_argument, NULL, CLI_OPT_COMPRESSION},
    {"level", required_argument, NULL, CLI_OPT_LEVEL},
    {"dictionary", required_argument, NULL, CLI_OPT_DICTIONARY},
    {"separate-limits", no_argument, NULL, CLI_OPT_SEPARATE_LIMITS},
    {NULL, 0, NULL, 0},
};

static int write_option(void *ctx, int option, const char *arg) {
  write_command *cmd = ctx;
  int64_t n;
  switch (option) {
    case CLI_OPT_VERBOSE:
      cmd->verbose = true;
      return CLI_OK;
    case CLI_OPT_FROM:
      if (strcmp(arg, "lines") == 0)
        cmd->from = INPUT_LINES;
      else if (strcmp(arg, "hex") == 0)
        cmd->from = INPUT_HEX;
      else if (strcmp(arg, "base64") == 0)
        cmd->from = INPUT_BASE64;
      else
        return cli_usage_error(
            "invalid input format '%s' (expected lines, hex or base64)", arg);
      return CLI_OK;
    case CLI_OPT_COMPRESSION:
      if (!cli_parse_compression(arg, &cmd->opts.compression))
        return cli_usage_error(
            "invalid compression '%s' (expected auto, none or zstd)", arg);
      cmd->compression_given = true;
      return CLI_OK;
    case CLI_OPT_LEVEL:
      if (!cli_parse_i64(arg, MIN_LEVEL, MAX_LEVEL, &n))
        return cli_usage_error("invalid level '%s' (expected %d to %d)", arg,
                               MIN_LEVEL, MAX_LEVEL);
      cmd->opts.zstd_level = (int)n;
      cmd->level_given = true;
      return CLI_OK;
    case CLI_OPT_DICTIONARY:
      cmd->dictionary_path = arg;
      return CLI_OK;
    case CLI_OPT_SEPARATE_LIMITS:
      cmd->opts.limits_placement = BC_LIMITS_SEPARATE;
      return CLI_OK;
    default:
      return CLI_USAGE; /* getopt_long only returns values from the table */
  }
}

/* Decides the compression from the options: explicit --compression wins;
 * --level or --dictionary alone mean zstd; otherwise by OUT's suffix. */
static int settle_compression(write_command *cmd) {
  bool zstd_options = cmd->level_given || cmd->dictionary_path;
  if (!cmd->compression_given) {
    if (zstd_options) cmd->opts.compression = BC_COMPRESSION_ZSTD;
    return CLI_OK;
  }
  if (cmd->opts.compression == BC_COMPRESSION_NONE && zstd_options)
    return cli_usage_error("--%s needs zstd compression, not --compression "
                           "none",
                           cmd->level_given ? "level" : "dictionary");
  return CLI_OK;
}

/* Turns line `text[0..len)` into record bytes in `rec` (hex/base64 are
 * decoded; a line is used as is).  Returns CLI_OK or CLI_FAIL (message
 * names the line). */
static int decode_line(input_format from, uint64_t line_no, char *text,
                       size_t len, bc_buf *rec, const unsigned char **data,
                       size_t *size) {
  char err[128];
  bool ok;
  if (from == INPUT_LINES) {
    *data = (const unsigned char *)text;
    *size = len;
    return CLI_OK;
  }
  /* Both decodings shrink: len bytes of room are always enough. */
  if (rec->capacity < len + 1) {
    unsigned char *grown = realloc(rec->data, len + 1);
    if (!grown) return cli_error("out of memory", "line %" PRIu64, line_no);
    rec->data = grown;
    rec->capacity = len + 1;
  }
  if (from == INPUT_HEX)
    ok = cli_hex_decode(text, len, rec->data, &rec->size, err, sizeof err);
  else
    ok = cli_base64_decode(text, len, rec->data, &rec->size, err, sizeof err);
  if (!ok)
    return cli_error("invalid input", "line %" PRIu64 ": %s", line_no, err);
  *data = rec->data;
  *size = rec->size;
  return CLI_OK;
}

/* Copies standard input into the writer, one record per line. */
static int copy_lines(bc_writer *w, input_format from) {
  char *line = NULL;
  size_t cap = 0;
  bc_buf rec = BC_BUF_INIT;
  uint64_t line_no = 0;
  int status = CLI_OK;
  ssize_t got;
  errno = 0;
  while ((got = getline(&line, &cap, stdin)) >= 0) {
    size_t len = (size_t)got;
    const unsigned char *data = NULL;
    size_t size = 0;
    line_no++;
    if (len > 0 && line[len - 1] == '\n') len--;
    status = decode_line(from, line_no, line, len, &rec, &data, &size);
    if (status != CLI_OK) goto cleanup;
    int rc = bc_writer_write(w, data, size);
    if (rc != BC_OK) {
      status = cli_fail(rc);
      goto cleanup;
    }
  }
  if (ferror(stdin)) {
    status = cli_error("read error", "standard input: %s",
                       strerror(errno ? errno : EIO));
    goto cleanup;
  }
cleanup:
  free(line);
  bc_buf_release(&rec);
  return status;
}

int cli_bag_write(int argc, char **argv) {
  write_command cmd = {.opts = BC_WRITER_OPTIONS_INIT, .from = INPUT_LINES};
  cli_args args = {NULL, 0, NULL};
  unsigned char *dictionary = NULL;
  size_t dictionary_size = 0;
  bc_writer *w = NULL;
  bool done;
  int status = cli_parse(argc, argv, "hv", write_options, false, write_option,
                         &cmd, write_usage, &done, &args);
  if (status != CLI_OK || done) goto cleanup;
  if (args.noperands != 1) {
    status = args.noperands == 0
                 ? cli_usage_error("missing OUT")
                 : cli_usage_error("unexpected argument '%s'",
                                   args.operands[1]);
    goto cleanup;
  }
  const char *out = args.operands[0];
  status = settle_compression(&cmd);
  if (status != CLI_OK) goto cleanup;
  if (cmd.dictionary_path) {
    status = cli_read_file(cmd.dictionary_path, &dictionary, &dictionary_size);
    if (status != CLI_OK) goto cleanup;
    cmd.opts.dictionary = dictionary;
    cmd.opts.dictionary_size = dictionary_size;
  }
  int rc = bc_writer_open(&w, out, &cmd.opts);
  if (rc != BC_OK) {
    status = cli_fail(rc);
    goto cleanup;
  }
  status = copy_lines(w, cmd.from);
  if (status != CLI_OK) goto cleanup;
  rc = bc_writer_close(w);
  if (rc != BC_OK) {
    status = cli_fail(rc);
    goto cleanup;
  }
  if (cmd.verbose) {
    uint64_t n = bc_writer_count(w);
    cli_printf("wrote %" PRIu64 " record%s (%" PRIu64
               " bytes of records) to %s\n",
               n, n == 1 ? "" : "s", bc_writer_records_bytes(w), out);
  }
  status = cli_out_finish();
cleanup:
  bc_writer_free(w); /* unpublished unless closed above */
  free(dictionary);
  cli_args_free(&args);
  return status;
}
