/*
 * src/common/internal.h - helpers shared by every layer: error reporting,
 * notices, buffers, careful I/O, atomic publish, the worker pool, hashing.
 * Internal names carry the bc__ prefix and are not exported from the shared
 * library.
 */
#ifndef BC_COMMON_INTERNAL_H
#define BC_COMMON_INTERNAL_H

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "bagcache.h"

#define BC__PRINTF(f, a) __attribute__((format(printf, f, a)))
#define BC__UNUSED(x) ((void)(x))

/* ---- errors (error.c) ---------------------------------------------------- */

/* Records "message" as this thread's detail message and returns `code`, so a
 * failure site reads `return bc__error(BC_ECORRUPT, "%s: ...", path);`. */
int bc__error(int code, const char *fmt, ...) BC__PRINTF(2, 3);
/* BC_EINVAL unless an options struct's version `got` is `want`, saying how
 * to initialize one: `type` is its name ("bc_cache_options"), `prefix` its
 * macros' ("BC_CACHE_OPTIONS").  version.c. */
int bc__options_version(const char *type, const char *prefix, unsigned got,
                        unsigned want);
/* The body of a public bc_x_options_init(opts, version). */
#define BC__OPTIONS_INIT(type, prefix, opts, version)                        \
  ((opts) == NULL ? bc__error(BC_EINVAL, #type "_init: NULL options")       \
   : bc__options_version(#type, #prefix, (version), prefix##_VERSION) != 0  \
       ? BC_EINVAL                                                           \
       : (*(opts) = (type)prefix##_INIT, 0))

/* Like bc__error but keeps bc_errno(): for a message that wraps the
 * current one ("indices[3]: %s" with bc_errmsg()), so the system error
 * behind it stays known. */
int bc__error_wrap(int code, const char *fmt, ...) BC__PRINTF(2, 3);

/* Like bc__error with the code derived from errno value `err` (ENOENT ->
 * BC_ENOTFOUND, ENOSPC/EDQUOT -> BC_ENOSPC, EACCES/EPERM -> BC_EPERM,
 * ENOMEM -> BC_ENOMEM, else BC_EIO); appends ": strerror(err)" and records
 * `err` as bc_errno(). */
int bc__error_errno(int err, const char *fmt, ...) BC__PRINTF(2, 3);

/* The code bc__error_errno would use for errno value `err`. */
int bc__errno_code(int err);

/* Clears this thread's message (used by entry points that succeed). */
void bc__error_clear(void);

/* ---- interrupts (error.c) ------------------------------------------------ */

/* The calling thread's interrupt handler (bc_set_interrupt_handler); NULL:
 * none, and the polls below cost a thread-local load. */
extern _Thread_local bc_interrupt_fn bc__interrupt_fn;

/* How often a wait or a fill polls the handler, at most and at least. */
#define BC__POLL_MS 10

int bc__interrupt_poll_now(void);
int bc__interrupt_poll_slow(void);

/* 0, or BC_ECANCELED (with a message) when the thread's handler says stop.
 * Calls the handler at most every BC__POLL_MS (at once after it is set):
 * cheap enough to call per record.  Hold no lock while calling it. */
static inline int bc__interrupt_poll(void) {
  return bc__interrupt_fn == NULL ? 0 : bc__interrupt_poll_slow();
}

/* pthread_cond_wait(cond, lock) that, with a handler set, wakes every
 * BC__POLL_MS to poll it (unlocking `lock` around the call: to the caller
 * it is a spurious wake-up).  0 after a wake-up (re-check the predicate),
 * or BC_ECANCELED; `lock` is held on return either way.  Without a
 * handler it is a plain pthread_cond_wait. */
int bc__cond_wait(pthread_cond_t *cond, pthread_mutex_t *lock);

/* Emits a notice through the handler set by bc_set_notice_handler. */
void bc__notice(const char *fmt, ...) BC__PRINTF(1, 2);

/* ---- buffers (buf.c) ---------------------------------------------------- */

/* Ensures capacity >= n (contents kept).  BC_ENOMEM with a message. */
int bc__buf_reserve(bc_buf *buf, size_t n);

/* Replaces the contents with data[0..n). */
int bc__buf_set(bc_buf *buf, const void *data, size_t n);

/* ---- careful I/O (io.c) ------------------------------------------------- */

/* Test hook: when non-NULL, used instead of write(2) by bc__write_all, so
 * tests can inject ENOSPC/EIO.  NULL in production. */
extern ssize_t (*bc__write_hook)(int fd, const void *data, size_t size);

/* Writes all of data[0..size) (retrying EINTR and short writes).  On failure
 * the message names `what`. */
int bc__write_all(int fd, const void *data, size_t size, const char *what);

/* Reads exactly `size` bytes at `offset`; a short read is BC_ECORRUPT (the
 * file shrank) and names `what`. */
int bc__pread_all(int fd, void *data, size_t size, uint64_t offset,
                  const char *what);

/* ---- atomic publish (publish.c) ----------------------------------------- */

/* Creates a hidden temporary file beside `final_path` (".NAME.tmp-XXXXXX"),
 * with permissions `mode` (0 = 0666) filtered by the umask.  Returns its path
 * (malloc'd) and open fd. */
int bc__tmp_create(const char *final_path, unsigned mode, char **tmp_path,
                   int *fd);

/* fsync(fd), naming `what` on failure. */
int bc__fsync(int fd, const char *what);

/* rename(tmp_path, final_path), then fsync the directory holding final_path. */
int bc__publish(const char *tmp_path, const char *final_path);

/* fsync of the directory that contains `path`. */
int bc__fsync_parent_dir(const char *path);

/* ---- guarded reads of mapped files (guard.c) ----------------------------- */

/* Puts the SIGBUS handler in place unless it already is (it chains to the
 * handler it displaces).  Called whenever a file is mapped. */
void bc__guard_install(void);

/* Runs fn(arg) so that a SIGBUS from reading a mapped file that shrank
 * returns BC_ECORRUPT ("WHAT: the file shrank while open") instead of
 * killing the process.  fn must hold no lock and allocate nothing while it
 * touches mapped bytes. */
int bc__guarded(int (*fn)(void *arg), void *arg, const char *what);

/* A fault scope, for foreign code that reads a mapped file it trusts and
 * may fault on damaged contents (LMDB): SIGBUS and SIGSEGV inside it, and
 * bc__guard_escape() from a callback it makes, return to its sigsetjmp
 * with the signal number (-1 for an escape).  Used as
 *
 *     bc__fault_scope s;
 *     int sig = sigsetjmp(s.jb, 0);
 *     if (sig == 0) { bc__guard_enter(&s); ...the calls...; }
 *     bc__guard_leave(&s);
 *
 * (the scope saves the enclosing one; scopes and bc__guarded nest).
 * bc__guard_install_segv() must have run first. */
typedef struct {
  sigjmp_buf jb;
  sigjmp_buf *outer;
  bool outer_segv;
} bc__fault_scope;
void bc__guard_install_segv(void);
void bc__guard_enter(bc__fault_scope *s);
void bc__guard_leave(bc__fault_scope *s);
/* Jumps to the innermost fault scope; returns when there is none. */
void bc__guard_escape(void);

/* ---- worker pool (pool.c) ----------------------------------------------- */

/* A task body: called once for each task number 0..ntasks-1, from the caller
 * thread or a pool thread.  Returns 0 or a BC_E* code. */
typedef int (*bc__task_fn)(void *arg, size_t task);

/* Runs fn(arg, 0..ntasks-1) on the process-wide pool using at most
 * `max_parallelism` threads including the caller (<= 1: inline; 0 is the
 * number of CPUs).  Tasks are claimed in increasing order; the caller runs
 * the first ones itself and wakes pool threads only when the rest would take
 * long enough to be worth sharing (pool.c).  Returns 0, or the
 * error of the lowest-numbered failing task with its message (tasks after a
 * failure may be skipped).  The pool is created on first use and re-created
 * lazily in a forked child.  Safe to call from several threads at once, but
 * not from inside a task (no nesting). */
int bc__parallel_for(size_t ntasks, int max_parallelism, bc__task_fn fn,
                     void *arg);

/* True in a pool thread running a task of another thread's job.  Such a
 * thread must not start work that may block for an unbounded time and
 * that its handler cannot interrupt (a cache fill runs the user's
 * source): the task returns bc__pool_give_back(what) instead, and the
 * job's caller runs that task again itself after the helpers are done.
 * Tasks must therefore be safe to run again from the start. */
bool bc__pool_helper(void);
/* Marks the running task given back; returns BC_EAGAIN ("WHAT: left to
 * the caller of the batch"). */
int bc__pool_give_back(const char *what);

/* Online CPUs (>= 1). */
int bc__cpu_count(void);

/* ---- hashing (hash.c) --------------------------------------------------- */

/* A fast 64-bit non-cryptographic hash with good avalanche; stable across
 * runs and platforms (used for indexes, not for anything persistent). */
uint64_t bc__hash64(const void *data, size_t size, uint64_t seed);

/* XXH64 of data[0..size) (xxh64.c): zstd's content checksum is its low 32
 * bits with seed 0. */
uint64_t bc__xxh64(const void *data, size_t size, uint64_t seed);

/* ---- little endian ------------------------------------------------------ */

static inline uint64_t bc__load_u64le(const void *p) {
  uint64_t v;
  memcpy(&v, p, 8); /* one load: compilers do not always merge byte loads */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

static inline void bc__store_u64le(void *p, uint64_t v) {
  unsigned char *b = (unsigned char *)p;
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
}

#endif /* BC_COMMON_INTERNAL_H */
