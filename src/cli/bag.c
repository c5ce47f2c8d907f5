/*
 * bag.c - the `bagcache bag` command group: its dispatch table.  Each
 * command lives in its own file (bag_info.c, bag_get.c, bag_write.c, ...).
 */
#include "config.h"

#include "cli/internal.h"

static const char bag_usage[] =
    "Usage: bagcache bag COMMAND [OPTIONS] ARGS...\n"
    "\n"
    "Read, write and check Bagz files.  SPEC names one file, a sharded set\n"
    "(PREFIX@N.SUFFIX, PREFIX@*.SUFFIX) or a comma-separated list of these.\n";

static const cli_command bag_commands[] = {
    {"info", "describe a bag: records, shards, bytes, compression",
     cli_bag_info},
    {"count", "print the number of records", cli_bag_count},
    {"get", "print records by index (negative counts from the end)",
     cli_bag_get},
    {"dump", "print every record, one per line", cli_bag_dump},
    {"write", "write records read from standard input to a new file",
     cli_bag_write},
    {"verify", "read every record and report the first problem",
     cli_bag_verify},
    {NULL, NULL, NULL},
};

int cli_bag_main(int argc, char **argv) {
  return cli_dispatch(bag_commands, bag_usage, argc, argv);
}
