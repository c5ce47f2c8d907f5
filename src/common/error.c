/* Error codes, their names and descriptions, and the thread-local detail
 * message. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/internal.h"

/* Indexed by -code.  Keep in step with enum bc_error in bagcache/error.h. */
static const struct {
  const char *name;
  const char *text;
} error_table[BC_ERROR_COUNT] = {
    {"BC_OK", "success"},
    {"BC_ENOMEM", "out of memory"},
    {"BC_EINVAL", "invalid argument"},
    {"BC_ENOTFOUND", "not found"},
    {"BC_ECORRUPT", "corrupt data"},
    {"BC_ERANGE", "index out of range"},
    {"BC_EIO", "input/output error"},
    {"BC_ENOSPC", "no space left on device"},
    {"BC_ECLOSED", "already closed"},
    {"BC_EUNSUPPORTED", "operation not supported"},
    {"BC_EPERM", "permission denied"},
    {"BC_EINFINITE", "sequence has no end"},
    {"BC_ESOURCE", "source failed"},
    {"BC_ENONDET", "source is not deterministic"},
    {"BC_ENOTCACHED", "not cached"},
    {"BC_EVERSION", "unsupported format version"},
    {"BC_EAGAIN", "would wait for another filler"},
};

static _Thread_local char error_message[1024];
/* The errno value behind this thread's last failure (0: none, or not a
 * system call's).  Set with the message, so the two always describe the
 * same failure: every function that sets the message sets it too. */
static _Thread_local int error_errno;

const char *bc_strerror(int code) {
  if (code > 0 || code <= -BC_ERROR_COUNT) return "unknown error";
  return error_table[-code].text;
}

const char *bc_error_name(int code) {
  if (code > 0 || code <= -BC_ERROR_COUNT) return "BC_E?";
  return error_table[-code].name;
}

const char *bc_errmsg(void) { return error_message; }

int bc_errno(void) { return error_errno; }

void bc__error_clear(void) {
  error_message[0] = '\0';
  error_errno = 0;
}

/* Formats the message (which may quote the current one: it is formatted
 * into a copy first) and records `err`. */
static void set_message(int err, const char *fmt, va_list ap) BC__PRINTF(2, 0);
static void set_message(int err, const char *fmt, va_list ap) {
  char text[sizeof error_message];
  vsnprintf(text, sizeof text, fmt, ap);
  memcpy(error_message, text, sizeof text);
  error_errno = err;
}

int bc__error(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  set_message(0, fmt, ap);
  va_end(ap);
  return code;
}

int bc__error_wrap(int code, const char *fmt, ...) {
  int err = error_errno;
  va_list ap;
  va_start(ap, fmt);
  set_message(err, fmt, ap);
  va_end(ap);
  return code;
}

int bc_set_errmsg(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  set_message(0, fmt, ap);
  va_end(ap);
  return code;
}

int bc_set_error(int code, int sys_errno, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  set_message(sys_errno > 0 ? sys_errno : 0, fmt, ap);
  va_end(ap);
  return code;
}

int bc__errno_code(int err) {
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return BC_ENOTFOUND;
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return BC_ENOSPC;
    case EACCES:
    case EPERM:
    case EROFS:
      return BC_EPERM;
    case ENOMEM:
      return BC_ENOMEM;
    case EINVAL:
      return BC_EINVAL;
    default:
      return BC_EIO;
  }
}

int bc__error_errno(int err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  set_message(err, fmt, ap);
  va_end(ap);
  size_t n = strlen(error_message);
  if (n + 1 < sizeof error_message) {
    char sys[128];
    /* GNU strerror_r may return a static string instead of filling sys. */
    const char *text = strerror_r(err, sys, sizeof sys);
    snprintf(error_message + n, sizeof error_message - n, ": %s", text);
  }
  return bc__errno_code(err);
}
