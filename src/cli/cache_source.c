/*
 * cache_source.c - a command's standard output as a cache source.
 *
 * Every pass runs the command afresh (posix_spawnp, standard output into a
 * pipe, standard input from /dev/null) and cuts what it prints into
 * records: lines, or frames of a 4-byte little-endian length followed by
 * that many bytes.  The cache may open several passes over its life (to
 * regenerate evicted shards), so the command must print the same records
 * every time it runs.
 *
 * A pass that reaches the end of the output reaps the child: a non-zero
 * exit status or a fatal signal makes the end an error (BC_ESOURCE), so a
 * command that fails half-way never looks like a short, complete source.
 * A pass abandoned before the end sends the child SIGTERM (SIGKILL if it
 * lingers) and reaps it.
 *
 * Thread safety: each pass owns its process, pipe and buffer, and the
 * shared counters are atomic, but the source is declared not thread-safe
 * so that the cache runs one pass at a time (one copy of the command).
 *
 * Seekable (--seek-arg): a pass that starts at record N runs the command
 * with "{start}" replaced by N and "{start1}" by N + 1 in every argument
 * (0 and 1 for a pass from the start), and must print records N, N+1, ...
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "cli/internal.h"

/* Bytes read from the pipe at once. */
#define READ_SIZE 65536

/* How long an abandoned child gets to exit after SIGTERM before SIGKILL. */
#define TERM_GRACE_MS 2000

typedef struct command_payload {
  char *const *argv; /* borrowed: outlives the cache */
  cli_framing framing;
  cli_source_counters *counters; /* borrowed; may be NULL */
  bool seek;         /* argv holds {start} or {start1} to substitute */
  const char *cwd;   /* borrowed; NULL: run in this process's directory */
} command_payload;

typedef struct command_pass {
  pid_t pid;          /* the child; -1 once reaped */
  int fd;             /* the pipe's read end; -1 once closed */
  unsigned char *buf; /* READ_SIZE bytes */
  size_t start, end;  /* unconsumed bytes: buf[start..end) */
  uint64_t records;   /* records read in this pass (for messages) */
  bool newline;       /* lines: the last line read ended with '\n' */
  /* A stream with --tee: records copied to tee_fd, buffered in tee
   * (flushed when full and before each read that may block). */
  int tee_fd;         /* -1: none */
  bc_buf tee;
  bool tee_broken;    /* tee_fd's reader went away (EPIPE) */
  /* Once `ended` (the output ended, the child was reaped) every later read
   * gives the same answer: end_rc, 0 or an error described by end_msg. */
  bool ended;
  int end_rc;
  char end_msg[512];
} command_pass;

/* ---- the child process ---------------------------------------------------- */

/* Waits for the child (retrying on EINTR) and forgets it.  *status gets
 * the wait status; false if waitpid failed (the child is gone either
 * way). */
static bool reap(command_pass *pass, int *status) {
  pid_t got;
  do {
    got = waitpid(pass->pid, status, 0);
  } while (got < 0 && errno == EINTR);
  pass->pid = -1;
  return got >= 0;
}

/* Records `rc` (with the current message) as the answer to every later
 * read of an ended pass, and returns it. */
static int end_with(command_pass *pass, int rc) {
  pass->ended = true;
  pass->end_rc = rc;
  snprintf(pass->end_msg, sizeof pass->end_msg, "%s",
           rc == BC_OK ? "" : bc_errmsg());
  return rc;
}

/* The recorded answer of an ended pass, its message set again. */
static int ended_answer(const command_pass *pass) {
  if (pass->end_rc == BC_OK) return BC_OK;
  return bc_set_errmsg(pass->end_rc, "%s", pass->end_msg);
}

/* Called once the output has ended: closes the pipe, reaps the child and
 * judges how it ended.  Returns 0 or BC_ESOURCE (message set). */
static int finish(const command_payload *p, command_pass *pass) {
  int status = 0;
  if (pass->ended) return ended_answer(pass);
  close(pass->fd);
  pass->fd = -1;
  int rc = BC_OK;
  if (pass->pid < 0) /* a stream (standard input): no child */
    return end_with(pass, rc);
  if (!reap(pass, &status))
    rc = bc_set_errmsg(BC_ESOURCE, "%s: waitpid: %s", p->argv[0],
                       strerror(errno));
  else if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
    rc = bc_set_errmsg(BC_ESOURCE, "%s exited with status %d", p->argv[0],
                       WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    rc = bc_set_errmsg(BC_ESOURCE, "%s killed by signal %d (%s)", p->argv[0],
                       WTERMSIG(status), strsignal(WTERMSIG(status)));
  return end_with(pass, rc);
}

/* Ends an unfinished child: SIGTERM, a grace period, then SIGKILL.  The
 * pipe is closed first, so a child blocked writing gets SIGPIPE too. */
static void stop_child(command_pass *pass) {
  int status;
  if (pass->fd >= 0) close(pass->fd);
  pass->fd = -1;
  if (pass->pid < 0) return;
  /* The child is not reaped yet, so its pid cannot have been reused. */
  kill(pass->pid, SIGTERM);
  for (int waited = 0; waited < TERM_GRACE_MS; waited += 10) {
    pid_t got = waitpid(pass->pid, &status, WNOHANG);
    if (got == pass->pid || (got < 0 && errno != EINTR)) {
      pass->pid = -1;
      return;
    }
    struct timespec ten_ms = {0, 10 * 1000 * 1000};
    nanosleep(&ten_ms, NULL);
  }
  kill(pass->pid, SIGKILL);
  reap(pass, &status);
}

/* `arg` with every "{start}" replaced by `start` and every "{start1}" by
 * start + 1 (malloc'd), or NULL when out of memory. */
static char *substitute(const char *arg, uint64_t start) {
  static const char *const keys[2] = {"{start}", "{start1}"};
  char nums[2][24];
  snprintf(nums[0], sizeof nums[0], "%" PRIu64, start);
  snprintf(nums[1], sizeof nums[1], "%" PRIu64, start + 1);
  size_t cap = strlen(arg) + 1, len = 0;
  for (const char *a = arg; *a; a++) cap += 24; /* room for any expansion */
  char *out = malloc(cap);
  if (!out) return NULL;
  for (const char *a = arg; *a;) {
    int hit = -1;
    for (int k = 0; k < 2 && hit < 0; k++)
      if (strncmp(a, keys[k], strlen(keys[k])) == 0) hit = k;
    if (hit >= 0) {
      size_t n = strlen(nums[hit]);
      memcpy(out + len, nums[hit], n);
      len += n;
      a += strlen(keys[hit]);
    } else {
      out[len++] = *a++;
    }
  }
  out[len] = '\0';
  return out;
}

static bool has_placeholder(const char *arg) {
  return strstr(arg, "{start}") != NULL || strstr(arg, "{start1}") != NULL;
}

static int spawn_argv(const command_payload *p, command_pass *pass,
                      char *const *args);

/* Runs the command for a pass whose first record is `start` (only a
 * seekable source gets arguments other than its own). */
static int spawn(const command_payload *p, command_pass *pass, uint64_t start) {
  char **argv = NULL;
  size_t argc = 0;
  if (p->seek) {
    while (p->argv[argc]) argc++;
    argv = calloc(argc + 1, sizeof *argv);
    for (size_t i = 0; argv && i < argc; i++)
      if (!(argv[i] = substitute(p->argv[i], start))) {
        for (size_t k = 0; k < i; k++) free(argv[k]);
        free(argv);
        argv = NULL;
      }
    if (!argv)
      return bc_set_errmsg(BC_ENOMEM, "out of memory: a pass of %s", p->argv[0]);
  }
  int rc = spawn_argv(p, pass, argv ? argv : (char **)p->argv);
  for (size_t i = 0; argv && i < argc; i++) free(argv[i]);
  free(argv);
  return rc;
}

static int spawn_argv(const command_payload *p, command_pass *pass,
                      char *const *args) {
  extern char **environ;
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  bool have_actions = false, have_attr = false;
  int fds[2] = {-1, -1};
  int rc = BC_OK, err;
  sigset_t none, pipe_only;
  if (pipe2(fds, O_CLOEXEC) != 0) {
    rc = bc_set_errmsg(BC_ESOURCE, "%s: pipe: %s", p->argv[0],
                       strerror(errno));
    goto cleanup;
  }
  if ((err = posix_spawn_file_actions_init(&actions)) != 0) goto spawn_error;
  have_actions = true;
  if ((err = posix_spawnattr_init(&attr)) != 0) goto spawn_error;
  have_attr = true;
  /* The child's stdout is the pipe (dup2 clears close-on-exec; both pipe
   * ends are closed by exec); its stdin is /dev/null, since it runs once
   * per pass and must not eat the caller's input. */
  if ((err = posix_spawn_file_actions_addopen(&actions, 0, "/dev/null",
                                              O_RDONLY, 0)) != 0 ||
      (err = posix_spawn_file_actions_adddup2(&actions, fds[1], 1)) != 0)
    goto spawn_error;
  if (p->cwd != NULL) {
#ifdef HAVE_POSIX_SPAWN_FILE_ACTIONS_ADDCHDIR_NP
    if ((err = posix_spawn_file_actions_addchdir_np(&actions, p->cwd)) != 0)
      goto spawn_error;
#else
    rc = bc_set_errmsg(BC_ESOURCE, "cannot run %s in %s: this system cannot "
                       "start a command in another directory", p->argv[0], p->cwd);
    goto cleanup;
#endif
  }
  /* This program ignores SIGPIPE (see output.c), and ignored signals stay
   * ignored across exec: give the child the default back, so that it dies
   * quietly when a pass is abandoned.  No signal is blocked in the child. */
  sigemptyset(&none);
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  if ((err = posix_spawnattr_setsigdefault(&attr, &pipe_only)) != 0 ||
      (err = posix_spawnattr_setsigmask(&attr, &none)) != 0 ||
      (err = posix_spawnattr_setflags(
           &attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK)) != 0)
    goto spawn_error;
  err = posix_spawnp(&pass->pid, args[0], &actions, &attr, args, environ);
  if (err != 0) {
    pass->pid = -1;
    rc = bc_set_errmsg(BC_ESOURCE, "cannot run %s: %s", p->argv[0],
                       strerror(err));
    goto cleanup;
  }
  pass->fd = fds[0];
  fds[0] = -1;
  goto cleanup;
spawn_error:
  rc = bc_set_errmsg(err == ENOMEM ? BC_ENOMEM : BC_ESOURCE,
                     "%s: posix_spawn setup: %s", p->argv[0], strerror(err));
cleanup:
  if (have_actions) posix_spawn_file_actions_destroy(&actions);
  if (have_attr) posix_spawnattr_destroy(&attr);
  if (fds[0] >= 0) close(fds[0]);
  if (fds[1] >= 0) close(fds[1]);
  return rc;
}

/* ---- reading the pipe -------------------------------------------------- */

/* Makes bytes available when none are: returns 1 (some), 0 (end of the
 * output) or BC_ESOURCE. */
static int tee_flush(command_pass *pass);

static int refill(const command_payload *p, command_pass *pass) {
  if (pass->start < pass->end) return 1;
  if (pass->fd < 0) return 0;
  /* The records copied so far go out before a read that may block. */
  int trc = tee_flush(pass);
  if (trc < 0) return trc;
  ssize_t got;
  do {
    got = read(pass->fd, pass->buf, READ_SIZE);
  } while (got < 0 && errno == EINTR);
  if (got < 0)
    return bc_set_errmsg(BC_ESOURCE, "%s: reading its output: %s",
                         p->argv[0], strerror(errno));
  pass->start = 0;
  pass->end = (size_t)got;
  return got > 0;
}

/* Appends data[0..n) to out (out may be NULL: the bytes are dropped). */
static int append(bc_buf *out, const unsigned char *data, size_t n) {
  if (!out || n == 0) return BC_OK;
  if (out->capacity - out->size < n) {
    size_t cap = out->capacity ? out->capacity : 256;
    while (cap - out->size < n) {
      if (cap > SIZE_MAX / 2) return bc_set_errmsg(BC_ENOMEM, "record too big");
      cap *= 2;
    }
    unsigned char *grown = realloc(out->data, cap);
    if (!grown)
      return bc_set_errmsg(BC_ENOMEM, "out of memory: a record of %zu bytes",
                           out->size + n);
    out->data = grown;
    out->capacity = cap;
  }
  memcpy(out->data + out->size, data, n);
  out->size += n;
  return BC_OK;
}

/* Reads up to `want` bytes into out (NULL: dropped), stopping early only
 * at the end of the output; *got says how many.  The buffer grows with the
 * bytes that actually arrive, so a bogus frame length cannot make it
 * allocate more than the command printed. */
static int read_bytes(const command_payload *p, command_pass *pass,
                      uint64_t want, bc_buf *out, uint64_t *got) {
  *got = 0;
  while (*got < want) {
    int rc = refill(p, pass);
    if (rc <= 0) return rc;
    size_t avail = pass->end - pass->start;
    size_t n = want - *got < avail ? (size_t)(want - *got) : avail;
    rc = append(out, pass->buf + pass->start, n);
    if (rc != BC_OK) return rc;
    pass->start += n;
    *got += n;
  }
  return BC_OK;
}

/* One line into out (NULL: dropped).  Returns 1 (a record, *size its
 * length), 0 (no bytes left: the end) or an error. */
static int read_line(const command_payload *p, command_pass *pass,
                     bc_buf *out, uint64_t *size) {
  bool any = false;
  *size = 0;
  pass->newline = false;
  for (;;) {
    int rc = refill(p, pass);
    if (rc < 0) return rc;
    if (rc == 0) return any ? 1 : 0; /* a last line without '\n' counts */
    any = true;
    unsigned char *from = pass->buf + pass->start;
    size_t avail = pass->end - pass->start;
    unsigned char *nl = memchr(from, '\n', avail);
    size_t n = nl ? (size_t)(nl - from) : avail;
    rc = append(out, from, n);
    if (rc != BC_OK) return rc;
    *size += n;
    pass->start += n;
    if (nl) {
      pass->start++; /* the newline is not part of the record */
      pass->newline = true;
      return 1;
    }
  }
}

/* One frame into out (NULL: dropped).  Returns 1 (a record, *size its
 * length), 0 (the end, between frames) or an error.  The output ending
 * inside a frame is an error, unless the command failed, which is then
 * the more useful message. */
static int read_frame(const command_payload *p, command_pass *pass,
                      bc_buf *out, uint64_t *size) {
  unsigned char header[4];
  bc_buf header_buf = {header, 0, sizeof header};
  uint64_t got = 0, length;
  int rc = read_bytes(p, pass, sizeof header, &header_buf, &got);
  if (rc < 0) return rc;
  if (got == 0) return 0;
  if (got < sizeof header) {
    rc = finish(p, pass);
    if (rc != BC_OK) return rc;
    return end_with(pass,
                    bc_set_errmsg(BC_ESOURCE,
                                  "%s: output ends inside the length of "
                                  "frame %" PRIu64 " (%" PRIu64 " of 4 bytes)",
                                  p->argv[0], pass->records, got));
  }
  length = (uint64_t)header[0] | (uint64_t)header[1] << 8 |
           (uint64_t)header[2] << 16 | (uint64_t)header[3] << 24;
  rc = read_bytes(p, pass, length, out, &got);
  if (rc < 0) return rc;
  if (got < length) {
    rc = finish(p, pass);
    if (rc != BC_OK) return rc;
    return end_with(pass,
                    bc_set_errmsg(BC_ESOURCE,
                                  "%s: output ends inside frame %" PRIu64
                                  " (%" PRIu64 " of %" PRIu64 " bytes)",
                                  p->argv[0], pass->records, got, length));
  }
  *size = length;
  return 1;
}

/* The next record into out (NULL: dropped).  Returns 1 (a record), 0 (the
 * end: the child exited cleanly) or an error. */
static int read_record(const command_payload *p, command_pass *pass,
                       bc_buf *out) {
  uint64_t size = 0;
  if (pass->ended) return ended_answer(pass);
  int rc = p->framing == CLI_FRAMING_FRAMES ? read_frame(p, pass, out, &size)
                                            : read_line(p, pass, out, &size);
  if (rc == 0) return finish(p, pass);
  if (rc < 0) return rc;
  pass->records++;
  if (p->counters) {
    atomic_fetch_add(&p->counters->records, 1);
    atomic_fetch_add(&p->counters->bytes, size);
  }
  return 1;
}

/* ---- the bc_source callbacks ------------------------------------------- */

static int source_open_at(void *payload, uint64_t start, void **out) {
  const command_payload *p = payload;
  command_pass *pass = calloc(1, sizeof *pass);
  int rc = BC_OK;
  if (!pass || !(pass->buf = malloc(READ_SIZE))) {
    rc = bc_set_errmsg(BC_ENOMEM, "out of memory: a pass of %s", p->argv[0]);
    goto cleanup;
  }
  pass->pid = -1;
  pass->fd = -1;
  pass->tee_fd = -1;
  rc = spawn(p, pass, start);
  if (rc != BC_OK) goto cleanup;
  *out = pass;
  pass = NULL;
cleanup:
  if (pass) free(pass->buf);
  free(pass);
  return rc;
}

static int source_open(void *payload, void **out) {
  return source_open_at(payload, 0, out);
}

static int source_next(void *payload, void *pass, bc_buf *out) {
  out->size = 0;
  return read_record(payload, pass, out);
}

static int source_skip(void *payload, void *pass, uint64_t n,
                       uint64_t *skipped) {
  uint64_t done = 0;
  int rc = BC_OK;
  while (done < n) {
    rc = read_record(payload, pass, NULL);
    if (rc <= 0) break;
    done++;
  }
  if (rc < 0) return rc;
  *skipped = done;
  return BC_OK;
}

static void source_close(void *payload, void *pass_) {
  command_pass *pass = pass_;
  (void)payload;
  if (!pass) return;
  stop_child(pass); /* nothing to do after the end: already reaped */
  free(pass->buf);
  free(pass);
}

int cli_command_source(bc_source *source, char *const *argv,
                       cli_framing framing, cli_source_counters *counters) {
  command_payload *p = malloc(sizeof *p);
  if (!p) return cli_error("out of memory", "starting %s", argv[0]);
  p->argv = argv;
  p->framing = framing;
  p->counters = counters;
  p->seek = false;
  p->cwd = NULL;
  memset(source, 0, sizeof *source);
  source->version = BC_SOURCE_VERSION;
  source->open = source_open;
  source->next = source_next;
  source->skip = source_skip;
  source->close = source_close;
  source->free_payload = free;
  source->payload = p;
  source->thread_safe = false;
  return CLI_OK;
}

int cli_command_source_seekable(bc_source *source) {
  command_payload *p = source->payload;
  bool any = false;
  for (size_t i = 0; p->argv[i] && !any; i++) any = has_placeholder(p->argv[i]);
  if (!any)
    return cli_usage_error("--seek-arg: no argument of the command holds "
                           "{start} or {start1}");
  p->seek = true;
  source->open_at = source_open_at;
  return CLI_OK;
}

void cli_command_source_cwd(bc_source *source, const char *cwd) {
  ((command_payload *)source->payload)->cwd = cwd;
}

/* ---- the stored command ----------------------------------------------------- */

int cli_command_store(bc_cache *cache, char *const *argv, bool seek_arg,
                      cli_framing from) {
  char *cwd = getcwd(NULL, 0);
  json_t *args = json_array();
  json_t *obj = NULL;
  char *text = NULL;
  int status = CLI_FAIL;
  if (!cwd) {
    cli_error("cannot store the command", "getcwd: %s", strerror(errno));
    goto cleanup;
  }
  for (size_t i = 0; args && argv[i]; i++)
    if (json_array_append_new(args, json_string(argv[i])) != 0) {
      json_decref(args);
      args = NULL;
    }
  /* (json_pack's "o" takes args, also when it fails) */
  obj = args ? json_pack("{s:s, s:o, s:s, s:b, s:s}", "type", "command", "argv", args,
                         "cwd", cwd, "seek_arg", seek_arg, "from",
                         from == CLI_FRAMING_FRAMES ? "frames" : "lines")
             : NULL;
  if (!obj || !(text = json_dumps(obj, JSON_COMPACT))) {
    cli_error("out of memory", "storing the command");
    goto cleanup;
  }
  int rc = bc_cache_set_source_info(cache, text);
  status = rc == BC_OK ? CLI_OK : cli_fail(rc);
cleanup:
  free(text);
  json_decref(obj);
  free(cwd);
  return status;
}

void cli_stored_command_free(cli_stored_command *c) {
  for (size_t i = 0; c->argv && c->argv[i]; i++) free(c->argv[i]);
  free(c->argv);
  free(c->cwd);
  memset(c, 0, sizeof *c);
}

int cli_command_load(bc_cache *cache, cli_stored_command *out, bool *found) {
  char *text = NULL;
  json_t *v = NULL;
  json_error_t err;
  int status = CLI_FAIL;
  memset(out, 0, sizeof *out);
  *found = false;
  int rc = bc_cache_source_info(cache, &text);
  if (rc != BC_OK) return cli_fail(rc);
  if (!(v = json_loads(text, JSON_DECODE_ANY, &err))) {
    cli_error(bc_strerror(BC_ECORRUPT), "the stored source is not JSON: %s", err.text);
    goto cleanup;
  }
  if (json_is_null(v)) {
    status = CLI_OK;
    goto cleanup;
  }
  json_t *type = json_object_get(v, "type"), *args = json_object_get(v, "argv");
  json_t *cwd = json_object_get(v, "cwd"), *seek = json_object_get(v, "seek_arg");
  json_t *from = json_object_get(v, "from");
  size_t n = json_array_size(args);
  bool ok = json_is_string(type) && strcmp(json_string_value(type), "command") == 0 &&
            n > 0 && json_is_string(cwd) && json_is_boolean(seek) && json_is_string(from) &&
            (strcmp(json_string_value(from), "lines") == 0 ||
             strcmp(json_string_value(from), "frames") == 0);
  for (size_t i = 0; ok && i < n; i++) ok = json_is_string(json_array_get(args, i));
  if (!ok) {
    cli_error(bc_strerror(BC_ECORRUPT), "the stored source is not a command "
              "stored by 'bagcache cache fill' (%s)", text);
    goto cleanup;
  }
  out->argv = calloc(n + 1, sizeof *out->argv);
  out->cwd = strdup(json_string_value(cwd));
  for (size_t i = 0; out->argv && i < n; i++)
    if (!(out->argv[i] = strdup(json_string_value(json_array_get(args, i))))) ok = false;
  if (!out->argv || !out->cwd || !ok) {
    cli_stored_command_free(out);
    cli_error("out of memory", "loading the stored command");
    goto cleanup;
  }
  out->seek_arg = json_is_true(seek);
  out->from = strcmp(json_string_value(from), "frames") == 0 ? CLI_FRAMING_FRAMES
                                                             : CLI_FRAMING_LINES;
  *found = true;
  status = CLI_OK;
cleanup:
  json_decref(v);
  free(text);
  return status;
}

/* ---- a stream: records read once from a descriptor ------------------------ */

struct cli_stream {
  command_payload p;
  command_pass pass;
  char *names[2]; /* p.argv: the stream's name (malloc'd), for messages */
};

/* Writes the copied records out (a stream with --tee).  BC_EIO with
 * tee_broken set when the reader went away. */
static int tee_flush(command_pass *pass) {
  size_t done = 0;
  int rc = BC_OK;
  while (pass->tee_fd >= 0 && done < pass->tee.size) {
    ssize_t n = write(pass->tee_fd, pass->tee.data + done, pass->tee.size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      pass->tee_broken = errno == EPIPE;
      rc = bc_set_error(BC_EIO, errno, "standard output: %s", strerror(errno));
      break;
    }
    done += (size_t)n;
  }
  pass->tee.size = 0;
  return rc;
}

int cli_stream_open(cli_stream **out, int fd, const char *name,
                    cli_framing framing, cli_source_counters *counters,
                    int tee_fd) {
  cli_stream *s = calloc(1, sizeof *s);
  unsigned char *buf = malloc(READ_SIZE);
  char *copy = strdup(name);
  if (!s || !buf || !copy) {
    free(s);
    free(buf);
    free(copy);
    return bc_set_errmsg(BC_ENOMEM, "out of memory: reading %s", name);
  }
  s->names[0] = copy; /* names[1] stays NULL */
  s->p.argv = s->names;
  s->p.framing = framing;
  s->p.counters = counters;
  s->pass.pid = -1; /* no child: the end is the end of the input */
  s->pass.fd = fd;
  s->pass.buf = buf;
  s->pass.tee_fd = tee_fd;
  *out = s;
  return BC_OK;
}

int cli_stream_next(cli_stream *s, bc_buf *out, bool *newline) {
  out->size = 0;
  int rc = read_record(&s->p, &s->pass, out);
  *newline = s->pass.newline;
  return rc;
}

int cli_stream_tee(cli_stream *s, const bc_buf *record, bool newline) {
  command_pass *pass = &s->pass;
  if (pass->tee_fd < 0) return BC_OK;
  /* The input's own bytes: the line and its newline (a last line without
   * one gets none), or the frame's header and bytes. */
  unsigned char header[4];
  size_t hn = 0;
  if (s->p.framing == CLI_FRAMING_FRAMES) {
    for (int i = 0; i < 4; i++) header[i] = (unsigned char)(record->size >> (8 * i));
    hn = 4;
  }
  int rc = append(&pass->tee, header, hn);
  if (rc == BC_OK) rc = append(&pass->tee, record->data, record->size);
  if (rc == BC_OK && s->p.framing == CLI_FRAMING_LINES && newline)
    rc = append(&pass->tee, (const unsigned char *)"\n", 1);
  if (rc == BC_OK && pass->tee.size >= READ_SIZE) rc = tee_flush(pass);
  return rc;
}

int cli_stream_flush(cli_stream *s) { return tee_flush(&s->pass); }

bool cli_stream_broken_pipe(const cli_stream *s) { return s->pass.tee_broken; }

void cli_stream_close(cli_stream *s) {
  if (!s) return;
  /* The descriptor is the caller's (standard input): not closed here. */
  free(s->pass.buf);
  free(s->pass.tee.data);
  free(s->names[0]);
  free(s);
}
