/*
 * bag_get.c - the commands that print records: `bag get` (chosen indices)
 * and `bag dump` (all of them).  Both read in batches through
 * bc_bag_get_many, so --threads spreads a batch over the worker pool, and
 * print each record in one of four formats.
 */
#include "config.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli/internal.h"

/* Records per bc_bag_get_many call: enough to keep the threads busy, few
 * enough that a batch of large records stays modest in memory. */
#define BATCH 64

typedef enum record_format {
  FORMAT_RAW,    /* bytes as stored, no separator */
  FORMAT_HEX,    /* lowercase hex, one record per line */
  FORMAT_BASE64, /* padded standard base64, one record per line */
  FORMAT_TEXT    /* bytes as stored, one record per line (no '\n' inside) */
} record_format;

typedef struct print_command {
  cli_reader reader;
  record_format format;
} print_command;

static const struct option print_options[] = {
    {"help", no_argument, NULL, CLI_OPT_HELP},
    {"raw", no_argument, NULL, CLI_OPT_RAW},
    {"hex", no_argument, NULL, CLI_OPT_HEX},
    {"base64", no_argument, NULL, CLI_OPT_BASE64},
    {"text", no_argument, NULL, CLI_OPT_TEXT},
    CLI_READER_LONG_OPTIONS,
    {NULL, 0, NULL, 0},
};

/* The last format option given wins. */
static int print_option(void *ctx, int option, const char *arg) {
  print_command *cmd = ctx;
  switch (option) {
    case CLI_OPT_RAW:
      cmd->format = FORMAT_RAW;
      return CLI_OK;
    case CLI_OPT_HEX:
      cmd->format = FORMAT_HEX;
      return CLI_OK;
    case CLI_OPT_BASE64:
      cmd->format = FORMAT_BASE64;
      return CLI_OK;
    case CLI_OPT_TEXT:
      cmd->format = FORMAT_TEXT;
      return CLI_OK;
    default: {
      int status = cli_reader_option(&cmd->reader, option, arg);
      return status < 0 ? CLI_USAGE : status;
    }
  }
}

static int print_record(uint64_t index, const bc_buf *rec,
                        record_format format) {
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
      if (rec->size && memchr(rec->data, '\n', rec->size))
        return cli_error("cannot print as text",
                         "record %" PRIu64
                         " contains a newline (use --hex or --base64)",
                         index);
      if (cli_out(rec->data, rec->size) != CLI_OK) return CLI_FAIL;
      break;
  }
  return cli_out("\n", 1);
}

/* Reads and prints records indices[0..count) (each < bc_bag_len) in
 * order, BATCH at a time.  `bufs` (BATCH buffers, caller-owned) are reused
 * from call to call, so their memory is allocated once per size. */
static int print_records(const bc_bag *bag, const uint64_t *indices,
                         size_t count, record_format format, bc_buf *bufs) {
  int status = CLI_OK;
  for (size_t start = 0; start < count && status == CLI_OK; start += BATCH) {
    size_t n = count - start < BATCH ? count - start : BATCH;
    int rc = bc_bag_get_many(bag, indices + start, n, bufs);
    if (rc != BC_OK) return cli_fail(rc);
    for (size_t i = 0; i < n && status == CLI_OK; i++)
      status = print_record(indices[start + i], &bufs[i], format);
  }
  return status;
}

static void release_bufs(bc_buf *bufs) {
  for (size_t i = 0; i < BATCH; i++) bc_buf_release(&bufs[i]);
}

/* Parses the command line and opens the bag; *operands gets what follows
 * SPEC.  Returns CLI_OK with *bag set (NULL after --help) or an exit
 * status. */
static int open_print_command(int argc, char **argv, const char *usage,
                              bool negative_operands, print_command *cmd,
                              cli_args *args, bc_bag **bag) {
  bool done;
  *bag = NULL;
  int status = cli_parse(argc, argv, "h", print_options, negative_operands,
                         print_option, cmd, usage, &done, args);
  if (status != CLI_OK || done) return status;
  if (args->noperands == 0)
    status = cli_usage_error("missing SPEC");
  else
    status = cli_reader_open(&cmd->reader, args->operands[0], bag);
  if (status != CLI_OK) cli_args_free(args);
  return status;
}

#define FORMAT_HELP                                                      \
  "Output formats (the last one given wins):\n"                          \
  "      --raw                 the record bytes, records concatenated\n" \
  "      --hex                 lowercase hex, one record per line\n"     \
  "      --base64              padded standard base64, one per line\n"   \
  "      --text                the record bytes, one per line; fails on\n" \
  "                            a record that contains a newline\n"

/* ---- bag get ------------------------------------------------------------- */

static const char get_usage[] =
    "Usage: bagcache bag get [OPTIONS] SPEC INDEX...\n"
    "\n"
    "Print the records at the given indices, in the order given.  A negative\n"
    "INDEX counts from the end (-1 is the last record).  The default format\n"
    "is --raw: the bytes of each record, concatenated.\n"
    "\n" FORMAT_HELP "\n" CLI_READER_OPTIONS_HELP
    "  -h, --help                show this help\n";

int cli_bag_get(int argc, char **argv) {
  print_command cmd = {.format = FORMAT_RAW};
  cli_args args = {NULL, 0, NULL};
  bc_bag *bag = NULL;
  uint64_t *indices = NULL;
  bc_buf bufs[BATCH] = {BC_BUF_INIT};
  cli_reader_init(&cmd.reader);
  int status =
      open_print_command(argc, argv, get_usage, true, &cmd, &args, &bag);
  if (status != CLI_OK || !bag) goto cleanup;
  size_t count = (size_t)args.noperands - 1;
  if (count == 0) {
    status = cli_usage_error("missing INDEX");
    goto cleanup;
  }
  indices = calloc(count, sizeof *indices);
  if (!indices) {
    status = cli_error("out of memory", "%zu indices", count);
    goto cleanup;
  }
  /* Every index is checked before anything is printed. */
  uint64_t len = bc_bag_len(bag);
  for (size_t i = 0; i < count; i++) {
    const char *word = args.operands[i + 1];
    int64_t v;
    if (!cli_parse_i64(word, INT64_MIN + 1, INT64_MAX, &v)) {
      status = cli_usage_error("invalid index '%s'", word);
      goto cleanup;
    }
    uint64_t mag = v < 0 ? (uint64_t)(-v) : (uint64_t)v;
    if ((v >= 0 && mag >= len) || (v < 0 && mag > len)) {
      status = cli_error(bc_strerror(BC_ERANGE),
                         "index %" PRId64 " is out of range for %" PRIu64
                         " record%s",
                         v, len, len == 1 ? "" : "s");
      goto cleanup;
    }
    indices[i] = v < 0 ? len - mag : mag;
  }
  status = print_records(bag, indices, count, cmd.format, bufs);
  if (status == CLI_OK) status = cli_out_finish();
cleanup:
  release_bufs(bufs);
  free(indices);
  cli_args_free(&args);
  bc_bag_close(bag);
  cli_reader_free(&cmd.reader);
  return status;
}

/* ---- bag dump ------------------------------------------------------------ */

static const char dump_usage[] =
    "Usage: bagcache bag dump [OPTIONS] SPEC\n"
    "\n"
    "Print every record of SPEC in order, one per line.  The default format\n"
    "is --hex.\n"
    "\n" FORMAT_HELP "\n" CLI_READER_OPTIONS_HELP
    "  -h, --help                show this help\n";

int cli_bag_dump(int argc, char **argv) {
  print_command cmd = {.format = FORMAT_HEX};
  cli_args args = {NULL, 0, NULL};
  bc_bag *bag = NULL;
  bc_buf bufs[BATCH] = {BC_BUF_INIT};
  cli_reader_init(&cmd.reader);
  int status =
      open_print_command(argc, argv, dump_usage, false, &cmd, &args, &bag);
  if (status != CLI_OK || !bag) goto cleanup;
  if (args.noperands > 1) {
    status = cli_usage_error("unexpected argument '%s'", args.operands[1]);
    goto cleanup;
  }
  uint64_t len = bc_bag_len(bag);
  uint64_t indices[BATCH];
  for (uint64_t start = 0; start < len && status == CLI_OK; start += BATCH) {
    size_t n = len - start < BATCH ? (size_t)(len - start) : BATCH;
    for (size_t i = 0; i < n; i++) indices[i] = start + i;
    status = print_records(bag, indices, n, cmd.format, bufs);
  }
  if (status == CLI_OK) status = cli_out_finish();
cleanup:
  release_bufs(bufs);
  cli_args_free(&args);
  bc_bag_close(bag);
  cli_reader_free(&cmd.reader);
  return status;
}
