/*
 * src/cli/internal.h - the `bagcache` command: shared pieces of the command
 * groups (command tables, option parsing, error reporting, output, encoding).
 *
 * The program uses only the public library API (bagcache.h).  Exit statuses
 * are fixed: CLI_OK on success, CLI_FAIL for runtime failures (missing file,
 * corrupt data, index out of range, write error), CLI_USAGE for mistakes on
 * the command line.
 */
#ifndef BC_CLI_INTERNAL_H
#define BC_CLI_INTERNAL_H

#include <getopt.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bagcache.h"
#include "bagcache/cache.h"

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

#define CLI_PRINTF(f, a) __attribute__((format(printf, f, a)))

/* ---- command tables (main.c) ------------------------------------------ */

/* One entry of a dispatch table: a command group ("bag") or a command
 * ("get").  `run` receives the arguments starting at its own name
 * (argv[0] == name) and returns an exit status. */
typedef struct cli_command {
  const char *name;
  const char *summary; /* one line for the parent's --help */
  int (*run)(int argc, char **argv);
} cli_command;

/* Runs the entry of `table` (terminated by a NULL name) named by argv[1],
 * after handling --help/-h (prints `usage` and the table to stdout) and
 * rejecting unknown names and options.  argv[0] is the group's own name. */
int cli_dispatch(const cli_command *table, const char *usage, int argc,
                 char **argv);

/* The command groups. */
int cli_bag_main(int argc, char **argv);
int cli_cache_main(int argc, char **argv);

/* Commands of the `bag` group, one per file. */
int cli_bag_info(int argc, char **argv);
int cli_bag_count(int argc, char **argv);
int cli_bag_get(int argc, char **argv);
int cli_bag_dump(int argc, char **argv);
int cli_bag_write(int argc, char **argv);
int cli_bag_verify(int argc, char **argv);

/* Commands of the `cache` group (cache_info.c: info, count; cache_get.c:
 * get; cache_fill.c: fill; cache_admin.c: verify, export, clear). */
int cli_cache_info(int argc, char **argv);
int cli_cache_count(int argc, char **argv);
int cli_cache_get(int argc, char **argv);
int cli_cache_fill(int argc, char **argv);
int cli_cache_verify(int argc, char **argv);
int cli_cache_export(int argc, char **argv);
int cli_cache_clear(int argc, char **argv);

/* ---- the command path and diagnostics (report.c) ------------------------- */

/* Appends a word to the command path used in messages ("bagcache bag get"). */
void cli_enter(const char *name);
const char *cli_path(void);

/* Usage error: "PATH: MESSAGE" and a hint to try --help, to stderr.
 * Returns CLI_USAGE. */
int cli_usage_error(const char *fmt, ...) CLI_PRINTF(1, 2);

/* Library failure: "bagcache: bc_strerror(code): bc_errmsg()" to stderr.
 * Returns CLI_FAIL. */
int cli_fail(int code);

/* Other runtime failure: "bagcache: WHAT: DETAIL" to stderr.
 * Returns CLI_FAIL. */
int cli_error(const char *what, const char *fmt, ...) CLI_PRINTF(2, 3);

/* ---- option parsing (options.c) ----------------------------------------- */

/* Long-option values above any character, so they never clash with short
 * options.  The reader options share one block. */
enum {
  CLI_OPT_HELP = 'h',
  CLI_OPT_VERBOSE = 'v',
  CLI_OPT_PARENTS = 'p',
  CLI_OPT_SEPARATE_LIMITS = 256,
  CLI_OPT_INTERLEAVED,
  CLI_OPT_COMPRESSION,
  CLI_OPT_DICTIONARY,
  CLI_OPT_LIMITS_IN_MEMORY,
  CLI_OPT_CACHE_POLICY,
  CLI_OPT_ACCESS,
  CLI_OPT_THREADS,
  CLI_OPT_HEX,
  CLI_OPT_BASE64,
  CLI_OPT_TEXT,
  CLI_OPT_RAW,
  CLI_OPT_LEVEL,
  CLI_OPT_FROM,
  CLI_OPT_JSON,
  CLI_OPT_SHARD_RECORDS,
  CLI_OPT_SHARD_SIZE,
  CLI_OPT_LIMIT,
  CLI_OPT_INFO,
  CLI_OPT_PROGRESS,
  CLI_OPT_NO_PROGRESS,
  CLI_OPT_SEEK_ARG,
  CLI_OPT_TEE,
  CLI_OPT_NO_PUBLISH_BEHIND,
  CLI_OPT_EVICT_AHEAD,
  CLI_OPT_NO_EVICT_AHEAD,
  CLI_OPT_RERUN
};

/* The reader options every reading command accepts, for splicing into a
 * struct option table. */
#define CLI_READER_LONG_OPTIONS                                           \
  {"separate-limits", no_argument, NULL, CLI_OPT_SEPARATE_LIMITS},        \
      {"interleaved", no_argument, NULL, CLI_OPT_INTERLEAVED},            \
      {"compression", required_argument, NULL, CLI_OPT_COMPRESSION},      \
      {"dictionary", required_argument, NULL, CLI_OPT_DICTIONARY},        \
      {"limits-in-memory", no_argument, NULL, CLI_OPT_LIMITS_IN_MEMORY},  \
      {"cache-policy", required_argument, NULL, CLI_OPT_CACHE_POLICY},    \
      {"access", required_argument, NULL, CLI_OPT_ACCESS},                \
      {"threads", required_argument, NULL, CLI_OPT_THREADS}

/* The help text describing CLI_READER_LONG_OPTIONS (a string literal, for
 * pasting into a command's usage text). */
#define CLI_READER_OPTIONS_HELP                                          \
  "Reader options:\n"                                                    \
  "      --separate-limits     limits are in DIR/limits.NAME beside\n"   \
  "                            each records file DIR/NAME\n"             \
  "      --interleaved         record i is in shard i mod S (default:\n" \
  "                            the shards are concatenated)\n"           \
  "      --compression MODE    auto (zstd for each shard whose file\n"   \
  "                            name ends in .bagz), none or zstd\n"     \
  "      --dictionary FILE     zstd dictionary (implies zstd unless\n"   \
  "                            --compression is given)\n"                \
  "      --limits-in-memory    load each shard's limits once (and\n"     \
  "                            check them all)\n"                        \
  "      --cache-policy P      system (mmap), drop (read, then drop\n"   \
  "                            from the page cache) or direct\n"         \
  "                            (O_DIRECT)\n"                             \
  "      --access A            read-ahead hint: system, random or\n"     \
  "                            sequential\n"                             \
  "      --threads N           threads for batch reads (0 = one per\n"   \
  "                            CPU)\n"

/* The operands of one command line, in order (pointers into `storage`, a
 * rearranged copy of the argument vector that cli_args_free releases). */
typedef struct cli_args {
  char **operands;
  int noperands;
  char **storage; /* the rearranged argument vector (owned) */
} cli_args;

/* Handles one option returned by getopt_long (`arg` is optarg).  Returns
 * CLI_OK, or a status to exit with (after printing its message). */
typedef int (*cli_option_fn)(void *ctx, int option, const char *arg);

/* Parses argv (argv[0] = the command name) with getopt_long, calling `fn`
 * for every option except --help, which prints `usage` to stdout and
 * makes this return CLI_OK with *done set.  Options may follow operands.
 * With `negative_operands`, arguments of the form -DIGITS are operands, not
 * options (for negative indices).  Unknown options and missing option
 * arguments are usage errors.  Returns CLI_OK or an exit status. */
int cli_parse(int argc, char **argv, const char *shortopts,
              const struct option *longopts, bool negative_operands,
              cli_option_fn fn, void *ctx, const char *usage, bool *done,
              cli_args *out);
void cli_args_free(cli_args *args);

/* Strict decimal integer in [min, max] (optional leading '-', no spaces,
 * no '+').  Returns false for anything else. */
bool cli_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out);

/* Reads a whole file into malloc'd memory (*data is non-NULL even for an
 * empty file).  On failure prints the error and returns CLI_FAIL. */
int cli_read_file(const char *path, unsigned char **data, size_t *size);

/* ---- reader options (reader.c) ----------------------------------------- */

typedef struct cli_reader {
  bc_reader_options opts;
  bool compression_given; /* --compression was on the command line */
  unsigned char *dictionary; /* --dictionary contents (owned) */
  size_t dictionary_size;
  const char *dictionary_path;
} cli_reader;

void cli_reader_init(cli_reader *r);

/* Handles one of the CLI_READER_LONG_OPTIONS.  Returns CLI_OK, CLI_USAGE
 * (message printed), or -1 when `option` is not a reader option. */
int cli_reader_option(cli_reader *r, int option, const char *arg);

/* Opens `spec` with the parsed options (loading the dictionary; a
 * dictionary without --compression means zstd).  Returns CLI_OK, or
 * CLI_FAIL after printing the error. */
int cli_reader_open(cli_reader *r, const char *spec, bc_bag **bag);

void cli_reader_free(cli_reader *r);

/* Parses auto|none|zstd.  Returns false for anything else. */
bool cli_parse_compression(const char *s, bc_compression *out);

/* "none" or "zstd" (or "auto"). */
const char *cli_compression_name(bc_compression c);

/* ---- standard output (output.c) --------------------------------------- */

/* Ignores SIGPIPE so that a closed pipe shows up as EPIPE. */
void cli_output_init(void);

/* Writes bytes / a string to stdout.  Returns CLI_OK or CLI_FAIL; after the
 * first failure every later call fails at once.  A closed pipe (EPIPE) is
 * reported quietly (no message); other errors print one message. */
int cli_out(const void *data, size_t size);
int cli_outs(const char *s);
int cli_printf(const char *fmt, ...) CLI_PRINTF(1, 2);

/* Writes data as lowercase hex / padded standard base64 (no newline). */
int cli_out_hex(const void *data, size_t size);
int cli_out_base64(const void *data, size_t size);

/* Flushes stdout and reports any pending error.  Returns CLI_OK or
 * CLI_FAIL; call once before exiting successfully. */
int cli_out_finish(void);

/* ---- encodings (encode.c) ----------------------------------------------- */

/* Lowercase hex of in[0..n) into out (2n chars, not terminated). */
void cli_hex_encode(const unsigned char *in, size_t n, char *out);

/* Standard padded base64 of in[0..n) into out (cli_base64_length(n)
 * chars, not terminated). */
size_t cli_base64_length(size_t n);
void cli_base64_encode(const unsigned char *in, size_t n, char *out);

/* Decoders: in[0..n) into out (at least n/2 resp. n/4*3 bytes), *outn the
 * decoded length.  On invalid input they return false and describe the
 * problem in err[0..errsize) ("invalid hex digit 'g' at column 3"). */
bool cli_hex_decode(const char *in, size_t n, unsigned char *out,
                    size_t *outn, char *err, size_t errsize);
bool cli_base64_decode(const char *in, size_t n, unsigned char *out,
                       size_t *outn, char *err, size_t errsize);

/* ---- caches (cache.c) ------------------------------------------------- */

/* A byte count as bc_parse_size reads it (a number, decimals allowed, with
 * an optional unit k, m, g, t, p, or kb/kib, ...: powers of 1024, any
 * case), e.g. "512", "64M", "10G", "1.5 GiB".  Returns false for anything
 * else and on overflow (the library's error cleared). */
bool cli_parse_size(const char *s, uint64_t *out);

/* Parses "COMMAND [--help] ROOT" (no other options): *root points into
 * argv.  Returns CLI_OK with *root set (NULL after --help) or an exit
 * status. */
int cli_cache_root_only(int argc, char **argv, const char *usage,
                        const char **root);

/* Opens the existing cache at `root` with no source, so it serves only
 * what is cached.  A directory without ROOT/metadata.json is refused (not
 * turned into a new, empty cache).  Returns CLI_OK, or CLI_FAIL after
 * printing the error. */
int cli_cache_open_existing(const char *root, bc_cache **cache);

/* ---- a command as a cache source (cache_source.c) ----------------------- */

/* How the command's standard output is cut into records. */
typedef enum cli_framing {
  CLI_FRAMING_LINES,  /* up to each '\n' (not included); a last line
                         without '\n' counts */
  CLI_FRAMING_FRAMES  /* a 4-byte little-endian length, then that many
                         bytes */
} cli_framing;

/* Totals over every pass, updated by the source (on a cache worker thread)
 * and read by the progress display (another thread). */
typedef struct cli_source_counters {
  _Atomic uint64_t records; /* records read (delivered or skipped) */
  _Atomic uint64_t bytes;   /* their bytes (without newlines, headers) */
} cli_source_counters;

/* Fills *source with a source whose every pass runs argv[0] (looked up in
 * PATH) with arguments argv[1..] (NULL-terminated; borrowed, and must
 * outlive the cache) and reads its standard output as records.  The
 * command's standard input is /dev/null.  `counters` (borrowed; may be
 * NULL) must also outlive the cache.  Returns CLI_OK or CLI_FAIL. */
int cli_command_source(bc_source *source, char *const *argv,
                       cli_framing framing, cli_source_counters *counters);

/* Makes the source of cli_command_source seekable (open_at): every run
 * gets its first record's index substituted into its arguments, for
 * "{start}" (counted from 0) and "{start1}" (counted from 1); a run from
 * the start gets 0 and 1.  Returns CLI_USAGE (with a message) when no
 * argument holds either. */
int cli_command_source_seekable(bc_source *source);

/* Runs every pass of cli_command_source's source in directory `cwd`
 * (borrowed, must outlive the cache; NULL: this process's). */
void cli_command_source_cwd(bc_source *source, const char *cwd);

/* ---- the stored command (cache_source.c) ----------------------------------
 *
 * `cache fill ROOT -- COMMAND` stores how to run COMMAND again in ROOT's
 * metadata.json ("source", bc_cache_set_source_info):
 *   {"type": "command", "argv": [...], "cwd": "/abs/dir",
 *    "seek_arg": true|false, "from": "lines"|"frames"}
 * so that `cache get --rerun` can rebuild evicted shards.  A stored
 * command is code: it is run only when the caller opts in. */
typedef struct cli_stored_command {
  char **argv;      /* NULL-terminated, malloc'd strings */
  char *cwd;
  bool seek_arg;
  cli_framing from;
} cli_stored_command;

/* Stores argv (with cwd = this process's directory) as ROOT's command.
 * Returns CLI_OK or CLI_FAIL (printed). */
int cli_command_store(bc_cache *cache, char *const *argv, bool seek_arg,
                      cli_framing from);
/* The stored command of `cache` into *out (*found false when none is
 * stored; a value that is not a stored command is an error).  Returns
 * CLI_OK or CLI_FAIL (printed). */
int cli_command_load(bc_cache *cache, cli_stored_command *out, bool *found);
void cli_stored_command_free(cli_stored_command *c);

/* Records read once from descriptor `fd` (standard input), cut as
 * `framing` (counted in `counters`, may be NULL); `name` names it in
 * messages.  next also says whether a line ended with a newline (false
 * for a last line without one, and for frames).  With tee_fd >= 0,
 * cli_stream_tee copies a record's input bytes (byte for byte: a line
 * with its newline if it had one, a frame with its header) to tee_fd, buffered and written out before each read
 * that may block and by cli_stream_flush.  next: 1 (a record), 0 (the
 * end), or an error; a failed write to tee_fd is BC_EIO, and
 * cli_stream_broken_pipe tells whether its reader went away (EPIPE).
 * close does not close fd. */
typedef struct cli_stream cli_stream;
int cli_stream_open(cli_stream **out, int fd, const char *name,
                    cli_framing framing, cli_source_counters *counters,
                    int tee_fd);
int cli_stream_next(cli_stream *s, bc_buf *out, bool *newline);
int cli_stream_tee(cli_stream *s, const bc_buf *record, bool newline);
int cli_stream_flush(cli_stream *s);
bool cli_stream_broken_pipe(const cli_stream *s);
void cli_stream_close(cli_stream *s);

#endif /* BC_CLI_INTERNAL_H */
