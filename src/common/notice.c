/* Notices: non-fatal news for the user, routed through one process-wide
 * handler (stderr by default). */
#include "config.h"

#include <pthread.h>
#include <stdio.h>

#include "common/internal.h"

static void notice_to_stderr(void *payload, const char *message) {
  BC__UNUSED(payload);
  fprintf(stderr, "bagcache: notice: %s\n", message);
}

/* Guards the handler pair so a reader never sees a new function with an
 * old payload.  Held only to copy the pair, never while calling it. */
static pthread_mutex_t notice_lock = PTHREAD_MUTEX_INITIALIZER;
static bc_notice_fn notice_fn = notice_to_stderr;
static void *notice_payload;

void bc_set_notice_handler(bc_notice_fn fn, void *payload) {
  pthread_mutex_lock(&notice_lock);
  notice_fn = fn;
  notice_payload = payload;
  pthread_mutex_unlock(&notice_lock);
}

void bc__notice(const char *fmt, ...) {
  pthread_mutex_lock(&notice_lock);
  bc_notice_fn fn = notice_fn;
  void *payload = notice_payload;
  pthread_mutex_unlock(&notice_lock);
  if (fn == NULL) return;
  char message[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  fn(payload, message);
}
