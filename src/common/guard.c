/*
 * Guarded reads of mapped files.
 *
 * A file mapped with mmap that shrinks while open (another program
 * truncates it) turns reads of the lost pages into SIGBUS, which would kill
 * the process.  bc__guarded runs a read with a per-thread jump buffer
 * registered; a process-wide SIGBUS handler, installed once, jumps back to
 * it when the fault happens inside a guarded read and otherwise passes the
 * signal on to the handler that was there before (or to the default action).
 *
 * Foreign code reading a mapped file it trusts (LMDB and its data.mdb) can
 * also fault with SIGSEGV on damaged contents (a page number far past the
 * map), or give up in an assertion.  A *fault scope* (bc__guard_enter) also
 * catches SIGSEGV, and bc__guard_escape() jumps out of it from a callback
 * (LMDB's assertion hook).  Shard reads do not catch SIGSEGV: there it
 * would be our own bug, and hiding it would be wrong.
 *
 * Rules for guarded code: no lock may be held and nothing may be allocated
 * while mapped bytes are touched, because a fault abandons the code at that
 * point.  (Readers copy mapped limits outside their locks for this reason.)
 * SA_NODEFER keeps the signal unblocked after the jump (the jump does not
 * restore the signal mask).
 */
#include "config.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>

#include "common/internal.h"

/* The default TLS model: initial-exec would pull the library's whole TLS
 * block (the 1 KiB error message included) into glibc's small static
 * reserve, and dlopen of a second copy (the Python extension next to
 * libbagcache.so) would then fail.  In a guarded thread the block exists
 * before any fault.  In a dlopen'ed copy, a SIGBUS in a thread that never
 * used bagcache makes the handler's read allocate that thread's block; such
 * a fault is not ours and goes on to the previous handler (normally the end
 * of the process) anyway.  A global "guards active" counter would avoid
 * that at the price of two contended atomics per read: not worth it. */
static __thread sigjmp_buf *current;
static __thread bool current_segv; /* the current guard catches SIGSEGV */
static struct sigaction previous_bus, previous_segv;
static pthread_mutex_t install_lock = PTHREAD_MUTEX_INITIALIZER;

static void on_fault(int sig, siginfo_t *info, void *context) {
  sigjmp_buf *jb = current;
  if (jb != NULL && (sig == SIGBUS || current_segv)) {
    current = NULL;
    siglongjmp(*jb, sig);
  }
  /* Not ours: behave as if we were never installed. */
  const struct sigaction *previous = sig == SIGBUS ? &previous_bus : &previous_segv;
  if (previous->sa_flags & SA_SIGINFO) {
    if (previous->sa_sigaction != NULL) previous->sa_sigaction(sig, info, context);
    return;
  }
  if (previous->sa_handler == SIG_IGN) return;
  if (previous->sa_handler == SIG_DFL) {
    /* Returning re-executes the faulting access, now with the default
     * action: the process ends as it would have without bagcache. */
    signal(sig, SIG_DFL);
    return;
  }
  previous->sa_handler(sig);
}

/* If someone replaced the handler since (an application, or a child
 * process resetting it), ours goes back in front and the replacement
 * becomes the one signals are passed on to.  install_lock held. */
static void install(int sig, struct sigaction *previous) {
  struct sigaction now;
  if (sigaction(sig, NULL, &now) == 0 &&
      !((now.sa_flags & SA_SIGINFO) && now.sa_sigaction == on_fault)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    *previous = now;
    sigaction(sig, &sa, NULL);
  }
}

/* Called whenever a file is mapped. */
void bc__guard_install(void) {
  pthread_mutex_lock(&install_lock);
  install(SIGBUS, &previous_bus);
  pthread_mutex_unlock(&install_lock);
}

void bc__guard_install_segv(void) {
  pthread_mutex_lock(&install_lock);
  install(SIGBUS, &previous_bus);
  install(SIGSEGV, &previous_segv);
  pthread_mutex_unlock(&install_lock);
}

int bc__guarded(int (*fn)(void *arg), void *arg, const char *what) {
  sigjmp_buf jb;
  sigjmp_buf *outer = current;
  bool outer_segv = current_segv;
  if (sigsetjmp(jb, 0) != 0) {
    current = outer;
    current_segv = outer_segv;
    return bc__error(BC_ECORRUPT,
                     "%s: the file shrank while open (a mapped read failed)",
                     what);
  }
  current = &jb;
  current_segv = false;
  int rc = fn(arg);
  current = outer;
  current_segv = outer_segv;
  return rc;
}

void bc__guard_enter(bc__fault_scope *s) {
  s->outer = current;
  s->outer_segv = current_segv;
  current = &s->jb;
  current_segv = true;
}

void bc__guard_leave(bc__fault_scope *s) {
  current = s->outer;
  current_segv = s->outer_segv;
}

void bc__guard_escape(void) {
  sigjmp_buf *jb = current;
  if (jb != NULL && current_segv) {
    current = NULL;
    siglongjmp(*jb, -1);
  }
}
