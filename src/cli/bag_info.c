/*
 * bag_info.c - the commands that describe a bag as a whole: `bag info`,
 * `bag count` and `bag verify`.  They share one shape: reader options and a
 * single SPEC operand.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli/internal.h"

static const struct option spec_options[] = {
    {"help", no_argument, NULL, CLI_OPT_HELP},
    CLI_READER_LONG_OPTIONS,
    {NULL, 0, NULL, 0},
};

static int reader_only_option(void *ctx, int option, const char *arg) {
  int status = cli_reader_option(ctx, option, arg);
  /* getopt_long only returns values from spec_options. */
  return status < 0 ? CLI_USAGE : status;
}

/* Parses "COMMAND [OPTIONS] SPEC" and opens the bag.  Returns CLI_OK with
 * *bag set (or *bag NULL after --help), or an exit status. */
static int open_spec_command(int argc, char **argv, const char *usage,
                             cli_reader *reader, bc_bag **bag) {
  cli_args args;
  bool done;
  *bag = NULL;
  int status = cli_parse(argc, argv, "h", spec_options, false,
                         reader_only_option, reader, usage, &done, &args);
  if (status != CLI_OK || done) return status;
  if (args.noperands != 1)
    status = args.noperands == 0
                 ? cli_usage_error("missing SPEC")
                 : cli_usage_error("unexpected argument '%s'",
                                   args.operands[1]);
  else
    status = cli_reader_open(reader, args.operands[0], bag);
  cli_args_free(&args);
  return status;
}

static const char *placement_name(bc_limits_placement p) {
  return p == BC_LIMITS_SEPARATE ? "separate" : "tail";
}

static const char *layout_name(bc_sharding_layout l) {
  return l == BC_LAYOUT_INTERLEAVED ? "interleaved" : "concatenated";
}

/* ---- bag info ------------------------------------------------------------ */

static const char info_usage[] =
    "Usage: bagcache bag info [OPTIONS] SPEC\n"
    "\n"
    "Describe a bag: number of records and shards, bytes of records and of\n"
    "files, compression, limits placement, sharding layout.  With several\n"
    "shards, one line per shard follows.\n"
    "\n" CLI_READER_OPTIONS_HELP
    "  -h, --help                show this help\n";

static int print_info(const bc_bag *bag) {
  const bc_reader_options *opts = bc_bag_options(bag);
  size_t shards = bc_bag_shard_count(bag);
  uint64_t records_bytes = 0, file_bytes = 0;
  const char *compression = shards ? NULL : "n/a";
  bc_shard_info info;
  for (size_t s = 0; s < shards; s++) {
    int rc = bc_bag_shard_info(bag, s, &info);
    if (rc != BC_OK) return cli_fail(rc);
    records_bytes += info.records_bytes;
    file_bytes += info.file_bytes;
    const char *name = cli_compression_name(info.compression);
    if (!compression)
      compression = name;
    else if (strcmp(compression, name) != 0)
      compression = "mixed";
  }
  cli_printf("records: %" PRIu64 "\n", bc_bag_len(bag));
  cli_printf("shards: %zu\n", shards);
  cli_printf("records bytes: %" PRIu64 "\n", records_bytes);
  cli_printf("file bytes: %" PRIu64 "\n", file_bytes);
  cli_printf("compression: %s\n", compression);
  cli_printf("limits: %s\n", placement_name(opts->limits_placement));
  cli_printf("layout: %s\n", layout_name(opts->sharding_layout));
  for (size_t s = 0; shards > 1 && s < shards; s++) {
    int rc = bc_bag_shard_info(bag, s, &info);
    if (rc != BC_OK) return cli_fail(rc);
    cli_printf("shard %zu: records=%" PRIu64 " records_bytes=%" PRIu64
               " file_bytes=%" PRIu64 " compression=%s path=%s",
               s, info.records, info.records_bytes, info.file_bytes,
               cli_compression_name(info.compression), info.path);
    if (info.limits_path) cli_printf(" limits_path=%s", info.limits_path);
    cli_outs("\n");
  }
  return cli_out_finish();
}

int cli_bag_info(int argc, char **argv) {
  cli_reader reader;
  bc_bag *bag = NULL;
  cli_reader_init(&reader);
  int status = open_spec_command(argc, argv, info_usage, &reader, &bag);
  if (status == CLI_OK && bag) status = print_info(bag);
  bc_bag_close(bag);
  cli_reader_free(&reader);
  return status;
}

/* ---- bag count ----------------------------------------------------------- */

static const char count_usage[] =
    "Usage: bagcache bag count [OPTIONS] SPEC\n"
    "\n"
    "Print the number of records in SPEC, alone on a line.\n"
    "\n" CLI_READER_OPTIONS_HELP
    "  -h, --help                show this help\n";

int cli_bag_count(int argc, char **argv) {
  cli_reader reader;
  bc_bag *bag = NULL;
  cli_reader_init(&reader);
  int status = open_spec_command(argc, argv, count_usage, &reader, &bag);
  if (status == CLI_OK && bag) {
    cli_printf("%" PRIu64 "\n", bc_bag_len(bag));
    status = cli_out_finish();
  }
  bc_bag_close(bag);
  cli_reader_free(&reader);
  return status;
}

/* ---- bag verify ---------------------------------------------------------- */

static const char verify_usage[] =
    "Usage: bagcache bag verify [OPTIONS] SPEC\n"
    "\n"
    "Read every record of SPEC, checking its limits and (for zstd) its\n"
    "frame.  Prints a one-line summary and exits 0 when all are valid;\n"
    "otherwise prints the first bad record's index and the problem to\n"
    "standard error and exits 1.\n"
    "\n" CLI_READER_OPTIONS_HELP
    "  -h, --help                show this help\n";

int cli_bag_verify(int argc, char **argv) {
  cli_reader reader;
  bc_bag *bag = NULL;
  cli_reader_init(&reader);
  int status = open_spec_command(argc, argv, verify_usage, &reader, &bag);
  if (status == CLI_OK && bag) {
    uint64_t bad = UINT64_MAX;
    int rc = bc_bag_verify(bag, &bad);
    uint64_t len = bc_bag_len(bag);
    if (rc != BC_OK && bad < len) {
      /* The library's detail names the file and the index in its shard;
       * the global index is what the user can pass to `bag get`. */
      char what[64];
      snprintf(what, sizeof what, "verify failed at record %" PRIu64, bad);
      status = cli_error(what, "%s: %s", bc_strerror(rc), bc_errmsg());
    } else if (rc != BC_OK) {
      status = cli_fail(rc);
    } else {
      size_t shards = bc_bag_shard_count(bag);
      cli_printf("ok: %" PRIu64 " record%s in %zu shard%s verified\n", len,
                 len == 1 ? "" : "s", shards, shards == 1 ? "" : "s");
      status = cli_out_finish();
    }
  }
  bc_bag_close(bag);
  cli_reader_free(&reader);
  return status;
}
