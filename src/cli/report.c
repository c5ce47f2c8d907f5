/*
 * report.c - the command path ("bagcache bag get") and the three kinds of
 * diagnostics: usage errors (exit 2), library failures and other runtime
 * failures (exit 1).  Every diagnostic goes to stderr as one line (usage
 * errors add a second line with a hint).
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli/internal.h"

/* Invariant: always NUL-terminated; words are separated by one space.  The
 * deepest path ("bagcache bag verify") is far below the size. */
static char command_path[128];

void cli_enter(const char *name) {
  size_t used = strlen(command_path);
  snprintf(command_path + used, sizeof command_path - used, "%s%s",
           used ? " " : "", name);
}

const char *cli_path(void) { return command_path; }

int cli_usage_error(const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "%s: ", command_path);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nTry '%s --help' for more information.\n", command_path);
  return CLI_USAGE;
}

int cli_fail(int code) {
  const char *detail = bc_errmsg();
  if (detail[0])
    fprintf(stderr, "bagcache: %s: %s\n", bc_strerror(code), detail);
  else
    fprintf(stderr, "bagcache: %s\n", bc_strerror(code));
  /* The way out of a cache whose source changed. */
  if (code == BC_ENONDET && strstr(detail, "cache clear") == NULL)
    fprintf(stderr, "bagcache: if the source changed since the cache was filled, start "
                    "over: delete what is cached with 'bagcache cache clear ROOT' (no "
                    "process may be using it), or fill another root\n");
  return CLI_FAIL;
}

int cli_error(const char *what, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "bagcache: %s: ", what);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  return CLI_FAIL;
}
