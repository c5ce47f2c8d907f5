/*
 * output.c - everything written to standard output goes through here, so
 * that a write error is noticed once, reported once, and turns the exit
 * status into CLI_FAIL.  A reader that went away (EPIPE, e.g. `| head`) is
 * not an error worth a message: the command stops quietly with CLI_FAIL.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli/internal.h"

/* Set by the first failed write; no output is attempted afterwards. */
static bool output_failed;

void cli_output_init(void) { signal(SIGPIPE, SIG_IGN); }

static int output_error(int err) {
  output_failed = true;
  if (err == EPIPE) return CLI_FAIL;
  return cli_error("write error", "standard output: %s", strerror(err));
}

int cli_out(const void *data, size_t size) {
  if (output_failed) return CLI_FAIL;
  if (size == 0) return CLI_OK;
  errno = 0;
  if (fwrite(data, 1, size, stdout) != size)
    return output_error(errno ? errno : EIO);
  return CLI_OK;
}

int cli_outs(const char *s) { return cli_out(s, strlen(s)); }

int cli_printf(const char *fmt, ...) {
  if (output_failed) return CLI_FAIL;
  va_list ap;
  va_start(ap, fmt);
  errno = 0;
  int n = vfprintf(stdout, fmt, ap);
  va_end(ap);
  if (n < 0) return output_error(errno ? errno : EIO);
  return CLI_OK;
}

int cli_out_hex(const void *data, size_t size) {
  const unsigned char *p = data;
  char chunk[4096];
  while (size > 0) {
    size_t n = size < sizeof chunk / 2 ? size : sizeof chunk / 2;
    cli_hex_encode(p, n, chunk);
    if (cli_out(chunk, 2 * n) != CLI_OK) return CLI_FAIL;
    p += n;
    size -= n;
  }
  return CLI_OK;
}

int cli_out_base64(const void *data, size_t size) {
  const unsigned char *p = data;
  char chunk[4096];
  /* Whole 3-byte groups per chunk, so padding only ever ends the record. */
  const size_t step = sizeof chunk / 4 * 3;
  while (size > 0) {
    size_t n = size < step ? size : step;
    cli_base64_encode(p, n, chunk);
    if (cli_out(chunk, cli_base64_length(n)) != CLI_OK) return CLI_FAIL;
    p += n;
    size -= n;
  }
  return CLI_OK;
}

int cli_out_finish(void) {
  if (output_failed) return CLI_FAIL;
  errno = 0;
  if (fflush(stdout) != 0 || ferror(stdout))
    return output_error(errno ? errno : EIO);
  return CLI_OK;
}
