/*
 * cache_fill.c - `cache fill`: run a command and cache its output, record
 * by record (the source is in cache_source.c), then wait until the whole
 * output is cached.  `cache fill ROOT -` reads the records from standard
 * input instead, once, through the cache's appender (write-through; with
 * --tee copying them to standard output as they are cached).
 *
 * While it runs, a progress line on standard error (when that is a
 * terminal, or with --progress) is rewritten in place by a thread of its
 * own, from counters the source updates atomically.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "cli/internal.h"

/* zstd's level range (ZSTD_minCLevel() .. ZSTD_maxCLevel()). */
#define MIN_LEVEL (-131072)
#define MAX_LEVEL 22

/* Progress updates per second. */
#define PROGRESS_HZ 4

typedef struct fill_command {
  bc_cache_options opts;
  bool records_given, size_given, level_given, seek_arg, tee;
  cli_framing from;
  int progress; /* -1: when stderr is a terminal; 0: never; 1: always */
  bool verbose;
} fill_command;

static const char fill_usage[] =
    "Usage: bagcache cache fill [OPTIONS] ROOT -- COMMAND [ARGS...]\n"
    "       bagcache cache fill [OPTIONS] [--tee] ROOT -\n"
    "\n"
    "Run COMMAND (looked up in PATH, no shell; standard input /dev/null) and\n"
    "cache the records it prints in ROOT, creating the cache if needed, until\n"
    "its output ends.  COMMAND must exit with status 0, else the fill fails\n"
    "(exit 1).  The cache may run COMMAND more than once (one run at a\n"
    "time), each time reading from the start (with --seek-arg, from the\n"
    "first record needed): to estimate --shard-size, to resume a cache\n"
    "filled in part, to rebuild evicted shards.  It must\n"
    "print the same records every time.  A run that is no longer needed is\n"
    "stopped with SIGTERM.  The '--' is required.\n"
    "\n"
    "The command (its arguments, the working directory, --seek-arg and\n"
    "--from) is stored in ROOT/metadata.json, so that `cache get --rerun`\n"
    "can run it again to rebuild shards the limit evicted.  Nothing else\n"
    "runs a stored command: it is code, run only on that opt-in.\n"
    "\n"
    "With '-' instead of a command, the records are read from standard\n"
    "input, once, and cached as they arrive (each shard is published when\n"
    "its last record has been read); the input's end makes the length\n"
    "final.  Nothing is re-run: shards the limit evicts later cannot be\n"
    "rebuilt (reading them says the cache has no source), and a cache that\n"
    "holds records already is checked against the input (a difference\n"
    "fails).  With --tee the input is copied to standard output, byte for\n"
    "byte, as it is cached, so that `producer | bagcache cache fill --tee\n"
    "ROOT - | consumer` caches a pipeline's stream.  When the consumer exits\n"
    "early (a broken pipe) the fill stops reading: the shards completed so\n"
    "far stay cached, the length is not made final, and the exit status is\n"
    "141 (as for a process killed by SIGPIPE).\n"
    "\n"
    "Options:\n"
    "      --from FORMAT         how the output is cut into records: lines\n"
    "                            (each line without its newline; a last line\n"
    "                            without one counts; the default) or frames\n"
    "                            (a 4-byte little-endian length, then that\n"
    "                            many bytes, repeated)\n"
    "      --shard-records N     records per shard\n"
    "      --shard-size SIZE     target bytes per shard, the records per\n"
    "                            shard estimated from the first records\n"
    "                            (default 64M)\n"
    "      --limit SIZE          keep at most SIZE bytes of shards on disk,\n"
    "                            evicting the least recently used; the limit\n"
    "                            is stored with the cache and kept by every\n"
    "                            process that uses it (default: the stored\n"
    "                            limit, if any); none removes the stored\n"
    "                            limit.  It must hold two shards at least\n"
    "      --level N             compress shards with zstd at level N\n"
    "                            (-131072 to 22; 0 = zstd's default, 3);\n"
    "                            without it shards are not compressed\n"
    "      --info JSON           store JSON (any JSON text) as the cache's\n"
    "                            user info\n"
    "  -p, --parents             create ROOT's missing parent directories\n"
    "                            (as mkdir -p); without it a missing parent\n"
    "                            is an error\n"
    "      --seek-arg            COMMAND can start anywhere: in its arguments,\n"
    "                            {start} is replaced by the index of the first\n"
    "                            record it must print (from 0) and {start1} by\n"
    "                            that index + 1 (e.g. -- tail -n +{start1}\n"
    "                            data.txt), so resuming and rebuilding start\n"
    "                            there instead of at the first record\n"
    "      --no-publish-behind   publish each shard before filling the next\n"
    "                            (by default a thread publishes them, several\n"
    "                            per transaction, while the fill goes on)\n"
    "      --evict-ahead, --no-evict-ahead\n"
    "                            under a limit, the publishing thread keeps\n"
    "                            room for the next shard, evicting before it\n"
    "                            is needed (one shard fewer on disk), or not;\n"
    "                            by default it does unless ROOT is on tmpfs\n"
    "      --progress            show progress on standard error even when\n"
    "                            it is not a terminal\n"
    "      --no-progress         never show progress\n"
    "      --tee                 with '-': copy the input to standard output\n"
    "  -v, --verbose             print a summary line when done (on standard\n"
    "                            error with --tee)\n"
    "  -h, --help                show this help\n"
    "\n"
    "SIZE is a number of bytes (decimals allowed) with an optional unit k, m,\n"
    "g, t or p, any case, also spelled kb/kib, mb/mib, ... (all powers of\n"
    "1024): 64M, 2GiB, 512k, \"1.5 GB\".  The shard length and compression of an existing cache are\n"
    "kept (a notice says so when the options differ).\n";

static const struct option fill_options[] = {
    {"help", no_argument, NULL, CLI_OPT_HELP},
    {"verbose", no_argument, NULL, CLI_OPT_VERBOSE},
    {"from", required_argument, NULL, CLI_OPT_FROM},
    {"shard-records", required_argument, NULL, CLI_OPT_SHARD_RECORDS},
    {"shard-size", required_argument, NULL, CLI_OPT_SHARD_SIZE},
    {"limit", required_argument, NULL, CLI_OPT_LIMIT},
    {"level", required_argument, NULL, CLI_OPT_LEVEL},
    {"info", required_argument, NULL, CLI_OPT_INFO},
    {"parents", no_argument, NULL, CLI_OPT_PARENTS},
    {"progress", no_argument, NULL, CLI_OPT_PROGRESS},
    {"no-progress", no_argument, NULL, CLI_OPT_NO_PROGRESS},
    {"seek-arg", no_argument, NULL, CLI_OPT_SEEK_ARG},
    {"tee", no_argument, NULL, CLI_OPT_TEE},
    {"no-publish-behind", no_argument, NULL, CLI_OPT_NO_PUBLISH_BEHIND},
    {"evict-ahead", no_argument, NULL, CLI_OPT_EVICT_AHEAD},
    {"no-evict-ahead", no_argument, NULL, CLI_OPT_NO_EVICT_AHEAD},
    {NULL, 0, NULL, 0},
};

static int fill_option(void *ctx, int option, const char *arg) {
  fill_command *cmd = ctx;
  int64_t n;
  uint64_t size;
  switch (option) {
    case CLI_OPT_VERBOSE:
      cmd->verbose = true;
      return CLI_OK;
    case CLI_OPT_FROM:
      if (strcmp(arg, "lines") == 0)
        cmd->from = CLI_FRAMING_LINES;
      else if (strcmp(arg, "frames") == 0)
        cmd->from = CLI_FRAMING_FRAMES;
      else
        return cli_usage_error(
            "invalid input format '%s' (expected lines or frames)", arg);
      return CLI_OK;
    case CLI_OPT_SHARD_RECORDS:
      if (!cli_parse_i64(arg, 1, INT64_MAX, &n))
        return cli_usage_error(
            "invalid record count '%s' (expected a positive number)", arg);
      cmd->opts.shard_records = (uint64_t)n;
      cmd->records_given = true;
      return CLI_OK;
    case CLI_OPT_SHARD_SIZE:
      if (!cli_parse_size(arg, &size) || size == 0)
        return cli_usage_error(
            "invalid shard size '%s' (expected bytes, e.g. 64M)", arg);
      cmd->opts.shard_bytes = size;
      cmd->size_given = true;
      return CLI_OK;
    case CLI_OPT_LIMIT:
      if (strcmp(arg, "none") == 0) {
        cmd->opts.disk_limit = BC_CACHE_NO_LIMIT;
        return CLI_OK;
      }
      if (!cli_parse_size(arg, &size))
        return cli_usage_error("invalid limit '%s' (expected bytes, e.g. 10G)",
                               arg);
      cmd->opts.disk_limit = size;
      return CLI_OK;
    case CLI_OPT_LEVEL:
      if (!cli_parse_i64(arg, MIN_LEVEL, MAX_LEVEL, &n))
        return cli_usage_error("invalid level '%s' (expected %d to %d)", arg,
                               MIN_LEVEL, MAX_LEVEL);
      cmd->opts.compression = BC_COMPRESSION_ZSTD;
      cmd->opts.zstd_level = (int)n;
      return CLI_OK;
    case CLI_OPT_INFO: {
      /* Checked here so that a typo is a usage error, not a failed fill. */
      json_error_t err;
      json_t *value = json_loads(arg, JSON_DECODE_ANY, &err);
      if (!value)
        return cli_usage_error("invalid JSON for --info: %s", err.text);
      json_decref(value);
      cmd->opts.info_json = arg;
      return CLI_OK;
    }
    case CLI_OPT_PARENTS:
      cmd->opts.make_parents = true;
      return CLI_OK;
    case CLI_OPT_PROGRESS:
      cmd->progress = 1;
      return CLI_OK;
    case CLI_OPT_NO_PROGRESS:
      cmd->progress = 0;
      return CLI_OK;
    case CLI_OPT_SEEK_ARG:
      cmd->seek_arg = true;
      return CLI_OK;
    case CLI_OPT_TEE:
      cmd->tee = true;
      return CLI_OK;
    case CLI_OPT_NO_PUBLISH_BEHIND:
      cmd->opts.publish_behind = false;
      return CLI_OK;
    case CLI_OPT_EVICT_AHEAD:
      cmd->opts.evict_ahead = 1;
      return CLI_OK;
    case CLI_OPT_NO_EVICT_AHEAD:
      cmd->opts.evict_ahead = -1;
      return CLI_OK;
    default:
      return CLI_USAGE; /* getopt_long only returns values from the table */
  }
}

/* ---- the progress line ----------------------------------------------------- */

typedef struct progress {
  const cli_source_counters *counters;
  struct timespec started; /* CLOCK_MONOTONIC */
  size_t width;            /* longest line so far, blanked on rewrite */
  pthread_mutex_t lock;    /* guards stop; the thread sleeps on `wake` */
  pthread_cond_t wake;
  bool stop;
  pthread_t thread;
  bool running;
} progress;

static double seconds_since(const struct timespec *t0) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)(now.tv_sec - t0->tv_sec) +
         (double)(now.tv_nsec - t0->tv_nsec) / 1e9;
}

/* Rewrites the line: "\r" and the text, padded to cover a longer earlier
 * line.  Only the progress thread calls this until it has been joined. */
static void progress_draw(progress *p, const char *end) {
  uint64_t records = atomic_load(&p->counters->records);
  uint64_t bytes = atomic_load(&p->counters->bytes);
  double secs = seconds_since(&p->started);
  double mib = (double)bytes / (1024.0 * 1024.0);
  char line[160];
  int n = snprintf(line, sizeof line,
                   "%" PRIu64 " records, %.1f MiB, %.0f records/s, "
                   "%.1f MiB/s, %.0f s",
                   records, mib, secs > 0 ? (double)records / secs : 0.0,
                   secs > 0 ? mib / secs : 0.0, secs);
  size_t len = n < 0 ? 0 : (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
  size_t pad = p->width > len ? p->width - len : 0;
  if (len > p->width) p->width = len;
  fprintf(stderr, "\r%s%*s%s", line, (int)pad, "", end);
  fflush(stderr);
}

static void *progress_main(void *arg) {
  progress *p = arg;
  pthread_mutex_lock(&p->lock);
  while (!p->stop) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until); /* the condition's clock */
    until.tv_nsec += 1000000000L / PROGRESS_HZ;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&p->wake, &p->lock, &until);
    if (!p->stop) {
      /* Drawing outside the lock: stop() must not wait for stderr. */
      pthread_mutex_unlock(&p->lock);
      progress_draw(p, "");
      pthread_mutex_lock(&p->lock);
    }
  }
  pthread_mutex_unlock(&p->lock);
  return NULL;
}

static void progress_start(progress *p, const cli_source_counters *counters) {
  memset(p, 0, sizeof *p);
  p->counters = counters;
  clock_gettime(CLOCK_MONOTONIC, &p->started);
  pthread_mutex_init(&p->lock, NULL);
  pthread_cond_init(&p->wake, NULL);
  /* Without the thread there is only the final line: not worth failing. */
  p->running = pthread_create(&p->thread, NULL, progress_main, p) == 0;
}

/* Stops the thread and draws the final state with a newline. */
static void progress_stop(progress *p) {
  pthread_mutex_lock(&p->lock);
  p->stop = true;
  pthread_cond_signal(&p->wake);
  pthread_mutex_unlock(&p->lock);
  if (p->running) pthread_join(p->thread, NULL);
  progress_draw(p, "\n");
  pthread_cond_destroy(&p->wake);
  pthread_mutex_destroy(&p->lock);
}

/* ---- cache fill ------------------------------------------------------------ */

static int summary_stderr(const char *fmt, ...) CLI_PRINTF(1, 2);
static int summary_stderr(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vfprintf(stderr, fmt, ap);
  va_end(ap);
  return n;
}

/* The -v line, on standard output (standard error when that carries the
 * records: `to_stderr`). */
static int print_summary(bc_cache *cache, const char *root, bool to_stderr) {
  bc_cache_stats s;
  char limit[40] = "";
  int rc = bc_cache_stats_get(cache, &s);
  if (rc != BC_OK) return cli_fail(rc);
  if (s.disk_limit)
    snprintf(limit, sizeof limit, ", limit %" PRIu64, s.disk_limit);
  (to_stderr ? summary_stderr : cli_printf)("%s: %" PRIu64 " records, %" PRIu64 " shard%s present (%" PRIu64
             " bytes%s); this run: %" PRIu64 " filled, %" PRIu64
             " regenerated, %" PRIu64 " evicted, %" PRIu64 " pass%s\n",
             root, s.length, s.shards_present,
             s.shards_present == 1 ? "" : "s", s.bytes_on_disk, limit,
             s.fills, s.regenerations, s.evictions, s.passes_opened,
             s.passes_opened == 1 ? "" : "es");
  return cli_out_finish();
}

/* The exit status of a fill whose --tee reader went away: a process
 * killed by SIGPIPE, as the shell reports it. */
#define STATUS_BROKEN_PIPE (128 + SIGPIPE)

/* Records of the first SAMPLE records decide a new root's shard length. */
#define SAMPLE 16

/* `cache fill ROOT -`: standard input, read once, through the appender.
 * A new root without --shard-records gets its shard length from the
 * first SAMPLE records (as a source's first records decide it).  Errors:
 * the input's (a frame cut short) or the cache's discard the shard in
 * progress (complete ones stay) and fail; a --tee reader that went away
 * stops the fill the same way, with STATUS_BROKEN_PIPE. */
static int fill_stdin(const char *root, fill_command *cmd,
                      cli_source_counters *counters) {
  bc_cache *cache = NULL;
  bc_appender *a = NULL;
  cli_stream *in = NULL;
  bc_buf sample[SAMPLE], rec = BC_BUF_INIT;
  bool sample_nl[SAMPLE], nl = false;
  size_t nsample = 0;
  int status = CLI_OK, got = 1, rc;
  progress prog;
  bool show_progress = false;
  memset(sample, 0, sizeof sample);
  /* A reader that went away is EPIPE, handled below, not a silent death. */
  if (cmd->tee) signal(SIGPIPE, SIG_IGN);
  rc = cli_stream_open(&in, STDIN_FILENO, "standard input", cmd->from, counters,
                       cmd->tee ? STDOUT_FILENO : -1);
  if (rc == BC_OK) rc = bc_cache_open(&cache, root, NULL, &cmd->opts);
  if (rc != BC_OK) {
    cache = NULL;
    status = cli_fail(rc);
    goto cleanup;
  }
  bc_cache_stats st;
  if ((rc = bc_cache_stats_get(cache, &st)) != BC_OK) {
    status = cli_fail(rc);
    goto cleanup;
  }
  if (st.shard_records == 0) {
    /* Read the sample (appended first, below), then reopen the root with
     * the shard length it gives. */
    while (nsample < SAMPLE && (got = cli_stream_next(in, &sample[nsample], &sample_nl[nsample])) == 1)
      nsample++;
    if (got < 0) {
      status = cli_fail(got);
      goto cleanup;
    }
    rc = bc_cache_estimate_shard_records(&cmd->opts, sample, nsample,
                                         &cmd->opts.shard_records);
    bc_cache_close(cache);
    cache = NULL;
    if (rc == BC_OK) rc = bc_cache_open(&cache, root, NULL, &cmd->opts);
    if (rc != BC_OK) {
      cache = NULL;
      status = cli_fail(rc);
      goto cleanup;
    }
  }
  /* The appender's thread writes the records while the input is read
   * (write_behind: 0.76x the wall time of writing them here, 78 MB of
   * lines), and each shard is published on a thread of its own (a reader
   * of the input never waits for a publish's syncs). */
  bc_appender_options ao = BC_APPENDER_OPTIONS_INIT;
  ao.publish_behind = true;
  ao.write_behind = true;
  if ((rc = bc_cache_appender_open(&a, cache, &ao)) != BC_OK) {
    status = cli_fail(rc);
    goto cleanup;
  }
  show_progress = cmd->progress == 1 || (cmd->progress < 0 && isatty(2));
  if (show_progress) progress_start(&prog, counters);
  for (size_t i = 0; rc == BC_OK && i < nsample; i++) {
    rc = bc_appender_append(a, sample[i].data, sample[i].size);
    if (rc == BC_OK) rc = cli_stream_tee(in, &sample[i], sample_nl[i]);
  }
  while (rc == BC_OK && got == 1 && (got = cli_stream_next(in, &rec, &nl)) == 1) {
    rc = bc_appender_append(a, rec.data, rec.size);
    if (rc == BC_OK) rc = cli_stream_tee(in, &rec, nl);
  }
  if (rc == BC_OK && got < 0) rc = got; /* the input's error */
  if (rc == BC_OK) {
    /* The end of the input: the rest is published, the length final. */
    rc = bc_appender_close(a);
    a = NULL;
    if (rc == BC_OK) rc = cli_stream_flush(in);
  }
  if (show_progress) progress_stop(&prog);
  if (rc != BC_OK && cli_stream_broken_pipe(in)) {
    uint64_t count = bc_appender_count(a);
    bc_appender_discard(a); /* (NULL after a close: the input had ended) */
    a = NULL;
    if ((rc = bc_cache_stats_get(cache, &st)) != BC_OK) {
      status = cli_fail(rc);
      goto cleanup;
    }
    fprintf(stderr, "bagcache: cache fill: standard output was closed (broken "
            "pipe)%s%" PRIu64 " records; %s holds %" PRIu64 " records%s\n",
            count ? " after " : ": all ", count ? count : st.length, root,
            st.length, st.length_final ? " (complete)" : " (its complete "
            "shards; the length is not final)");
    status = STATUS_BROKEN_PIPE;
    goto cleanup;
  }
  if (rc != BC_OK) {
    status = cli_fail(rc);
    goto cleanup;
  }
  status = cmd->verbose ? print_summary(cache, root, cmd->tee) : cli_out_finish();
cleanup:
  bc_appender_discard(a);
  bc_cache_close(cache);
  cli_stream_close(in);
  for (size_t i = 0; i < SAMPLE; i++) bc_buf_release(&sample[i]);
  bc_buf_release(&rec);
  return status;
}

/* The index of the first "--" in argv[1..argc), or argc. */
static int find_separator(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--") == 0) return i;
  return argc;
}

int cli_cache_fill(int argc, char **argv) {
  fill_command cmd = {.opts = BC_CACHE_OPTIONS_INIT,
                      .from = CLI_FRAMING_LINES,
                      .progress = -1};
  cli_args args = {NULL, 0, NULL};
  cli_source_counters counters = {0, 0};
  bc_source source;
  bc_cache *cache = NULL;
  progress prog;
  bool done, show_progress = false;
  /* Everything after the first "--" is the command, never our options
   * (no option's argument is "--" in practice: none of them accepts it). */
  int sep = find_separator(argc, argv);
  int status = cli_parse(sep, argv, "hvp", fill_options, false, fill_option,
                         &cmd, fill_usage, &done, &args);
  if (status != CLI_OK || done) goto cleanup;
  if (args.noperands == 2 && strcmp(args.operands[1], "-") == 0) {
    if (sep < argc)
      status = cli_usage_error("'-' reads the records from standard input: "
                               "no COMMAND after '--'");
    else if (cmd.seek_arg)
      status = cli_usage_error("--seek-arg needs a COMMAND, not '-'");
    else if (cmd.records_given && cmd.size_given)
      status = cli_usage_error(
          "--shard-records and --shard-size cannot be used together");
    else {
      /* Nothing reads while it fills: no prefetching, so the smallest
       * workable limit is two shards (as for a COMMAND). */
      cmd.opts.prefetch_shards = -1;
      status = fill_stdin(args.operands[0], &cmd, &counters);
    }
    goto cleanup;
  }
  if (cmd.tee) {
    status = cli_usage_error("--tee needs '-' (the records from standard "
                             "input) instead of a COMMAND");
    goto cleanup;
  }
  if (args.noperands != 1) {
    status = args.noperands == 0
                 ? cli_usage_error("missing ROOT")
                 : cli_usage_error("unexpected argument '%s' (the command "
                                   "goes after '--')",
                                   args.operands[1]);
    goto cleanup;
  }
  if (sep >= argc - 1) {
    status = cli_usage_error(sep == argc ? "missing '-- COMMAND'"
                                         : "missing COMMAND after '--'");
    goto cleanup;
  }
  if (cmd.records_given && cmd.size_given) {
    status = cli_usage_error(
        "--shard-records and --shard-size cannot be used together");
    goto cleanup;
  }
  const char *root = args.operands[0];
  /* argv is NULL-terminated (argv[argc] == NULL), so is the command. */
  status = cli_command_source(&source, argv + sep + 1, cmd.from, &counters);
  if (status != CLI_OK) goto cleanup;
  if (cmd.seek_arg && (status = cli_command_source_seekable(&source)) != CLI_OK) {
    source.free_payload(source.payload);
    goto cleanup;
  }
  /* One run of COMMAND at a time, and none kept waiting: a fill drains in
   * order, so a parked second run would only hold a process. */
  cmd.opts.max_passes = 1;
  /* Nothing reads while it fills (a drain opens no shard): no prefetching,
   * so the smallest workable limit is two shards. */
  cmd.opts.prefetch_shards = -1;
  int rc = bc_cache_open(&cache, root, &source, &cmd.opts);
  if (rc != BC_OK) {
    cache = NULL;
    status = cli_fail(rc); /* the payload was freed by bc_cache_open */
    goto cleanup;
  }
  /* Remembered for `cache get --rerun` (which alone ever runs it again). */
  status = cli_command_store(cache, argv + sep + 1, cmd.seek_arg, cmd.from);
  if (status != CLI_OK) goto cleanup;
  show_progress = cmd.progress == 1 || (cmd.progress < 0 && isatty(2));
  if (show_progress) progress_start(&prog, &counters);
  rc = bc_cache_fill_all(cache);
  if (show_progress) progress_stop(&prog);
  if (rc != BC_OK) {
    status = cli_fail(rc);
    goto cleanup;
  }
  status = cmd.verbose ? print_summary(cache, root, false) : cli_out_finish();
cleanup:
  bc_cache_close(cache);
  cli_args_free(&args);
  return status;
}
