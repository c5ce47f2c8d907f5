/*
 * main.c - the `bagcache` program: top-level dispatch to command groups.
 *
 * Each group ("bag", "cache") is a dispatch table of commands in its
 * own file; cli_dispatch() is the one routine that walks a table, so help
 * and error handling look the same at every level.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "cli/internal.h"

static const char top_usage[] =
    "Usage: bagcache [--help] [--version] GROUP COMMAND [ARGS...]\n"
    "\n"
    "Inspect, read, write and check Bagz record files (the format of\n"
    "google-deepmind/bagz), and caches of records stored as Bagz shards.\n";

static const cli_command top_commands[] = {
    {"bag", "read, write and check Bagz files", cli_bag_main},
    {"cache", "fill, read and manage a cache of a command's output",
     cli_cache_main},
    {NULL, NULL, NULL},
};

static bool is_help(const char *arg) {
  return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0;
}

static void print_table(const char *usage, const cli_command *table) {
  size_t width = 0;
  for (const cli_command *c = table; c->name; c++)
    if (strlen(c->name) > width) width = strlen(c->name);
  printf("%s\nCommands:\n", usage);
  for (const cli_command *c = table; c->name; c++)
    printf("  %-*s  %s\n", (int)width, c->name, c->summary);
  printf("\nRun '%s COMMAND --help' for the options of a command.\n",
         cli_path());
}

int cli_dispatch(const cli_command *table, const char *usage, int argc,
                 char **argv) {
  if (argc < 2) return cli_usage_error("missing command");
  const char *name = argv[1];
  if (is_help(name)) {
    print_table(usage, table);
    return cli_out_finish();
  }
  if (name[0] == '-') return cli_usage_error("unrecognized option '%s'", name);
  for (const cli_command *c = table; c->name; c++) {
    if (strcmp(c->name, name) == 0) {
      cli_enter(c->name);
      return c->run(argc - 1, argv + 1);
    }
  }
  return cli_usage_error("unknown command '%s'", name);
}

int main(int argc, char **argv) {
  cli_output_init();
  cli_enter("bagcache");
  if (argc >= 2 && strcmp(argv[1], "--version") == 0) {
    if (argc > 2) return cli_usage_error("--version takes no arguments");
    printf("bagcache %d.%d.%d (library %s)\n", BAGCACHE_VERSION_MAJOR,
           BAGCACHE_VERSION_MINOR, BAGCACHE_VERSION_PATCH, bc_version());
    return cli_out_finish();
  }
  return cli_dispatch(top_commands, top_usage, argc, argv);
}
