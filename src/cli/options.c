/*
 * options.c - command-line parsing shared by every command: getopt_long with
 * options allowed after operands, negative numbers as operands, uniform
 * usage errors; strict integers; reading a whole file.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/internal.h"

/* True for "-" followed by one or more decimal digits. */
static bool is_negative_number(const char *s) {
  if (s[0] != '-' || s[1] == '\0') return false;
  for (s++; *s; s++)
    if (*s < '0' || *s > '9') return false;
  return true;
}

/* The long option that getopt_long would pick for "--NAME[=...]" (exact
 * match, else the only prefix match), or NULL. */
static const struct option *find_long(const struct option *longopts,
                                      const char *arg) {
  const char *name = arg + 2;
  size_t len = strcspn(name, "=");
  const struct option *found = NULL;
  for (const struct option *o = longopts; o->name; o++) {
    if (strncmp(o->name, name, len) != 0) continue;
    if (strlen(o->name) == len) return o;
    if (found) return NULL; /* ambiguous: getopt_long reports it */
    found = o;
  }
  return found;
}

/* True when "--NAME" is a prefix of at least one long option's name. */
static bool is_prefix_of_any(const struct option *longopts, const char *arg) {
  const char *name = arg + 2;
  size_t len = strcspn(name, "=");
  for (const struct option *o = longopts; o->name; o++)
    if (strncmp(o->name, name, len) == 0) return true;
  return false;
}

/* Splits argv[1..argc) into options (each with its separate argument, if
 * any) and operands, and builds [argv0, options..., "--", operands...], so
 * that getopt_long meets every operand after "--".  This is how operands
 * may precede options and how "-3" can be an operand.  An option that needs
 * an argument but is the last word is left out and named in *missing (else
 * getopt_long would take the "--" as its argument).  Returns NULL when out
 * of memory. */
static char **rearrange(int argc, char **argv, const char *shortopts,
                        const struct option *longopts, bool negative_operands,
                        int *nargc, const char **missing) {
  static char dashdash[] = "--";
  char **out = calloc((size_t)argc + 2, sizeof *out);
  char **operands = calloc((size_t)argc + 1, sizeof *operands);
  int n = 0, nops = 0;
  if (!out || !operands) {
    free(out);
    out = NULL;
    goto cleanup;
  }
  out[n++] = argv[0];
  for (int i = 1; i < argc; i++) {
    char *a = argv[i];
    if (strcmp(a, "--") == 0) {
      while (++i < argc) operands[nops++] = argv[i];
      break;
    }
    if (a[0] != '-' || a[1] == '\0' ||
        (negative_operands && is_negative_number(a))) {
      operands[nops++] = a;
      continue;
    }
    bool needs_next = false;
    if (a[1] == '-') {
      const struct option *o = find_long(longopts, a);
      needs_next = o && o->has_arg == required_argument && !strchr(a, '=');
    } else {
      /* A cluster of short options: the first one taking an argument takes
       * the rest of the cluster, or else the next argument. */
      for (const char *p = a + 1; *p; p++) {
        const char *spec = strchr(shortopts, *p);
        if (*p != ':' && spec && spec[1] == ':') {
          needs_next = p[1] == '\0';
          break;
        }
      }
    }
    if (needs_next && i + 1 >= argc) {
      if (!*missing) *missing = a;
      continue;
    }
    out[n++] = a;
    if (needs_next) out[n++] = argv[++i];
  }
  out[n++] = dashdash;
  for (int k = 0; k < nops; k++) out[n++] = operands[k];
  out[n] = NULL;
  *nargc = n;
cleanup:
  free(operands);
  return out;
}

static const char *long_name(const struct option *longopts, int val) {
  for (const struct option *o = longopts; o->name; o++)
    if (o->val == val && !o->flag) return o->name;
  return "?";
}

/* The message for getopt_long's '?' (unknown option, ambiguous prefix, or
 * an argument given to an option that takes none) and ':' (missing
 * argument). */
static int option_error(int c, char **argv, const char *shortopts,
                        const struct option *longopts) {
  if (c == ':') {
    if (optopt >= 256 || !strchr(shortopts, optopt))
      return cli_usage_error("option '--%s' requires an argument",
                             long_name(longopts, optopt));
    return cli_usage_error("option '-%c' requires an argument", optopt);
  }
  /* glibc sets optopt to 0 for an unknown or ambiguous long option, to the
   * option's value for a long option given an unwanted "=ARG", and to the
   * character for an unknown short option; optind has then moved past a
   * long option's argument. */
  if (optopt == 0) {
    const char *a = argv[optind - 1];
    if (a[0] == '-' && a[1] == '-' && !find_long(longopts, a) &&
        is_prefix_of_any(longopts, a))
      return cli_usage_error("option '%.*s' is ambiguous",
                             (int)strcspn(a, "="), a);
    return cli_usage_error("unrecognized option '%s'", a);
  }
  if (optopt >= 256 || strchr(shortopts, optopt)) {
    const char *a = argv[optind - 1];
    return cli_usage_error("option '%.*s' doesn't allow an argument",
                           (int)strcspn(a, "="), a);
  }
  return cli_usage_error("unrecognized option '-%c'", optopt);
}

int cli_parse(int argc, char **argv, const char *shortopts,
              const struct option *longopts, bool negative_operands,
              cli_option_fn fn, void *ctx, const char *usage, bool *done,
              cli_args *out) {
  char optstring[64];
  const char *missing = NULL;
  int nargc = 0, status = CLI_OK;
  *done = false;
  out->operands = NULL;
  out->noperands = 0;
  out->storage = rearrange(argc, argv, shortopts, longopts, negative_operands,
                           &nargc, &missing);
  if (!out->storage) return cli_error("out of memory", "parsing arguments");
  /* ':' first: a missing argument returns ':' rather than '?'. */
  snprintf(optstring, sizeof optstring, ":%s", shortopts);
  char **nargv = out->storage;
  opterr = 0;
  optind = 0; /* glibc: full re-initialisation for each new vector */
  int c;
  while ((c = getopt_long(nargc, nargv, optstring, longopts, NULL)) != -1) {
    if (c == '?' || c == ':') {
      status = option_error(c, nargv, shortopts, longopts);
      goto cleanup;
    }
    if (c == CLI_OPT_HELP) {
      fputs(usage, stdout);
      *done = true;
      status = cli_out_finish();
      goto cleanup;
    }
    status = fn(ctx, c, optarg);
    if (status != CLI_OK) goto cleanup;
  }
  if (missing) {
    status = cli_usage_error("option '%.*s' requires an argument",
                             (int)strcspn(missing, "="), missing);
    goto cleanup;
  }
  out->operands = nargv + optind;
  out->noperands = nargc - optind;
cleanup:
  if (status != CLI_OK || *done) cli_args_free(out);
  return status;
}

void cli_args_free(cli_args *args) {
  free(args->storage);
  args->storage = NULL;
  args->operands = NULL;
  args->noperands = 0;
}

bool cli_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out) {
  const char *digits = s[0] == '-' ? s + 1 : s;
  if (digits[0] < '0' || digits[0] > '9') return false;
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno != 0 || *end != '\0' || v < min || v > max) return false;
  *out = (int64_t)v;
  return true;
}

int cli_read_file(const char *path, unsigned char **data, size_t *size) {
  unsigned char *buf = NULL;
  size_t used = 0, cap = 0;
  int status = CLI_FAIL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    cli_error("cannot open file", "%s: %s", path, strerror(errno));
    goto cleanup;
  }
  for (;;) {
    if (cap - used < 4096) {
      size_t ncap = cap ? cap * 2 : 65536;
      unsigned char *nbuf = realloc(buf, ncap);
      if (!nbuf) {
        cli_error("out of memory", "reading %s", path);
        goto cleanup;
      }
      buf = nbuf;
      cap = ncap;
    }
    ssize_t got = read(fd, buf + used, cap - used);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      cli_error("cannot read file", "%s: %s", path, strerror(errno));
      goto cleanup;
    }
    if (got == 0) break;
    used += (size_t)got;
  }
  *data = buf;
  *size = used;
  buf = NULL;
  status = CLI_OK;
cleanup:
  if (fd >= 0) close(fd);
  free(buf);
  return status;
}
