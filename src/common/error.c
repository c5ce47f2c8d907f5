/* Error codes, their names and descriptions, the thread-local error
 * (code, detail message, errno, payload), its save and restore, and the
 * thread's interrupt handler. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

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
    {"BC_ECANCELED", "interrupted"},
};

static _Thread_local char error_message[BC_ERRMSG_MAX];
/* The errno value behind this thread's last failure (0: none, or not a
 * system call's) and its payload (one reference).  Set with the
 * message, so they always describe the same failure: every function that
 * sets the message sets them too (a new message drops the payload, except
 * a wrap of the current one). */
static _Thread_local int error_errno;
static _Thread_local struct {
  void *ptr;
  bc_payload_fn retain, release;
} error_payload;

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

/* ---- payloads ------------------------------------------------------------ */

/* A thread that exits holding a payload releases it (a pthread key's
 * destructor: glibc runs them before the thread's TLS is freed). */
static pthread_key_t payload_key;
static pthread_once_t payload_once = PTHREAD_ONCE_INIT;
static bool payload_key_ok;

static void drop_payload(void) {
  void *p = error_payload.ptr;
  bc_payload_fn release = error_payload.release;
  error_payload.ptr = NULL;
  error_payload.retain = error_payload.release = NULL;
  if (p != NULL && release != NULL) release(p);
}

static void payload_thread_exit(void *unused) {
  BC__UNUSED(unused);
  drop_payload();
}

static void payload_key_init(void) {
  payload_key_ok = pthread_key_create(&payload_key, payload_thread_exit) == 0;
}

/* Makes (p, retain, release) this thread's payload, taking a new reference
 * (retain first, so replacing a payload by itself is safe). */
static void put_payload(void *p, bc_payload_fn retain, bc_payload_fn release) {
  if (p != NULL && retain != NULL) retain(p);
  drop_payload();
  if (p == NULL) return;
  error_payload.ptr = p;
  error_payload.retain = retain;
  error_payload.release = release;
  pthread_once(&payload_once, payload_key_init);
  /* Any non-NULL value arms the destructor for this thread. */
  if (payload_key_ok) pthread_setspecific(payload_key, &payload_key);
}

void bc_error_set_payload(void *payload, bc_payload_fn retain,
                          bc_payload_fn release) {
  put_payload(payload, retain, release);
}

void *bc_error_payload(void) { return error_payload.ptr; }

/* ---- setting the message ------------------------------------------------- */

void bc__error_clear(void) {
  error_message[0] = '\0';
  error_errno = 0;
  if (error_payload.ptr != NULL) drop_payload();
}

void bc_error_clear(void) { bc__error_clear(); }

/* Formats the message (which may quote the current one: it is formatted
 * into a copy first) and records `err`; the payload is dropped
 * unless `keep_payload`. */
static void set_message(int err, bool keep_payload, const char *fmt, va_list ap)
    BC__PRINTF(3, 0);
static void set_message(int err, bool keep_payload, const char *fmt, va_list ap) {
  char text[sizeof error_message];
  vsnprintf(text, sizeof text, fmt, ap);
  memcpy(error_message, text, sizeof text);
  error_errno = err;
  if (!keep_payload && error_payload.ptr != NULL) drop_payload();
}

int bc__error(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  set_message(0, false, fmt, ap);
  va_end(ap);
  return code;
}

int bc__error_wrap(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  set_message(error_errno, true, fmt, ap);
  va_end(ap);
  return code;
}

int bc_error_wrap(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  set_message(error_errno, true, fmt, ap);
  va_end(ap);
  return code;
}

int bc_set_errmsg(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  set_message(0, false, fmt, ap);
  va_end(ap);
  return code;
}

int bc_set_error(int code, int sys_errno, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  set_message(sys_errno > 0 ? sys_errno : 0, false, fmt, ap);
  va_end(ap);
  return code;
}

/* ---- saved errors -------------------------------------------------------- */

void bc_error_save(bc_error_state *st, int code) {
  bc_error_state_clear(st);
  st->code = code;
  st->sys_errno = error_errno;
  memcpy(st->message, error_message, sizeof st->message);
  if (error_payload.ptr != NULL) {
    if (error_payload.retain != NULL) error_payload.retain(error_payload.ptr);
    st->payload = error_payload.ptr;
    st->retain = error_payload.retain;
    st->release = error_payload.release;
  }
}

int bc_error_restore(const bc_error_state *st) {
  memcpy(error_message, st->message, sizeof error_message);
  error_message[sizeof error_message - 1] = '\0';
  error_errno = st->sys_errno;
  put_payload(st->payload, st->retain, st->release);
  return st->code;
}

void bc_error_state_clear(bc_error_state *st) {
  void *p = st->payload;
  bc_payload_fn release = st->release;
  *st = (bc_error_state)BC_ERROR_STATE_INIT;
  if (p != NULL && release != NULL) release(p);
}

/* ---- interrupts ---------------------------------------------------------- */

_Thread_local bc_interrupt_fn bc__interrupt_fn;
static _Thread_local void *interrupt_ctx;
/* CLOCK_MONOTONIC_COARSE time (ns) before which bc__interrupt_poll does not
 * call the handler again: a poll per record of a fast source, or per
 * wake-up of a busy condition variable, would cost more than the work. */
static _Thread_local int64_t next_poll_ns;

bc_interrupt_handler bc_set_interrupt_handler(bc_interrupt_fn fn, void *ctx) {
  bc_interrupt_handler prev = {bc__interrupt_fn, interrupt_ctx};
  bc__interrupt_fn = fn;
  interrupt_ctx = ctx;
  next_poll_ns = 0; /* the next poll calls it */
  return prev;
}

static int64_t coarse_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

int bc__interrupt_poll_now(void) {
  bc_interrupt_fn fn = bc__interrupt_fn;
  if (fn == NULL) return 0;
  next_poll_ns = coarse_ns() + BC__POLL_MS * 1000000;
  if (fn(interrupt_ctx) == 0) return 0;
  return bc__error(BC_ECANCELED, "interrupted (the thread's interrupt handler "
                   "asked the call to stop)");
}

int bc__interrupt_poll_slow(void) {
  if (coarse_ns() < next_poll_ns) return 0;
  return bc__interrupt_poll_now();
}

int bc_check_interrupt(void) { return bc__interrupt_poll(); }

int bc__cond_wait(pthread_cond_t *cond, pthread_mutex_t *lock) {
  if (bc__interrupt_fn == NULL) {
    pthread_cond_wait(cond, lock);
    return 0;
  }
  int rc = 0;
  if (coarse_ns() >= next_poll_ns) {
    /* The handler runs with no bagcache lock held (it may take a
     * language's global lock); to the caller this is a spurious wake-up. */
    pthread_mutex_unlock(lock);
    rc = bc__interrupt_poll_now();
    pthread_mutex_lock(lock);
    if (rc != 0) return rc;
  }
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_nsec += BC__POLL_MS * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  pthread_cond_timedwait(cond, lock, &until);
  return 0;
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
  set_message(err, false, fmt, ap);
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
