/*
 * bagcache/error.h - error codes, messages and notices.
 *
 * Every fallible bagcache function returns 0 (BC_OK) on success or one of
 * the negative BC_E* codes below.  The code says what kind of failure it
 * was; bc_errmsg() gives the detail (file, index, offset, system error) of
 * the most recent failure in the calling thread.
 *
 * Thread safety: the message buffer is thread-local, so concurrent failures
 * in different threads never mix their messages.
 */
#ifndef BAGCACHE_ERROR_H
#define BAGCACHE_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

/* The one table of error codes.  Values are stable ABI: never renumber. */
enum bc_error {
  BC_OK = 0,
  BC_ENOMEM = -1,       /* out of memory */
  BC_EINVAL = -2,       /* invalid argument (bad option, bad spec, misuse) */
  BC_ENOTFOUND = -3,    /* a file or directory does not exist */
  BC_ECORRUPT = -4,     /* a file's contents violate the format */
  BC_ERANGE = -5,       /* an index or range is outside the sequence */
  BC_EIO = -6,          /* an operating-system I/O call failed */
  BC_ENOSPC = -7,       /* no space left on the device (or quota exceeded) */
  BC_ECLOSED = -8,      /* the object was already closed */
  BC_EUNSUPPORTED = -9, /* the operation is not available for this object */
  BC_EPERM = -10,       /* permission denied */
  BC_EINFINITE = -11,   /* the sequence has no end (so no length, no -1) */
  BC_ESOURCE = -12,     /* a cache's source (the user's iterator) failed */
  BC_ENONDET = -13,     /* a regenerated shard differs: the source is not
                           deterministic */
  BC_ENOTCACHED = -14,  /* the record is not cached and there is no source */
  BC_EVERSION = -15,    /* a file of an unsupported format version */
  BC_EAGAIN = -16,      /* the call would wait for work another thread or
                           process is doing (bc_cache_try_get) */
  BC_ECANCELED = -17    /* the calling thread's interrupt handler asked the
                           call to stop (bc_set_interrupt_handler) */
};

/* Number of codes in the table (BC_OK included): codes run 0 .. -(N-1). */
#define BC_ERROR_COUNT 18

/* A short, static, human-readable description of an error code ("corrupt
 * file").  Never NULL; unknown codes give "unknown error". */
const char *bc_strerror(int code);

/* The identifier of an error code as a string ("BC_ECORRUPT").  Never NULL. */
const char *bc_error_name(int code);

/* The detail message of the last failure in this thread: what failed and
 * where, e.g. "shard.bag: record 7: limits not monotonic (limit 90 < 120)".
 * Valid until the next bagcache call in this thread.  Never NULL (empty when
 * no failure has happened). */
const char *bc_errmsg(void);

/* The errno value behind the last failure in this thread when it was an
 * operating-system call's (ENOSPC, EACCES, EIO, EMFILE, ...), else 0.  It
 * describes the same failure as bc_errmsg(): every function that sets the
 * message sets it too (to 0 when the failure was not a system call's).
 * With BC_EIO, BC_ENOSPC, BC_EPERM and BC_ENOTFOUND it tells which system
 * error it was (BC_ENOSPC covers ENOSPC, EDQUOT and EFBIG; BC_EPERM
 * EACCES, EPERM and EROFS). */
int bc_errno(void);

/* Sets this thread's detail message (printf-style) and returns `code`: for
 * callbacks (foreign sequences, index streams) that report a failure, e.g.
 * `return bc_set_errmsg(BC_EIO, "%s: fetch failed", url);`.  bc_errno()
 * becomes 0. */
int bc_set_errmsg(int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* bc_set_errmsg that also sets bc_errno() to `sys_errno` (0: none): for a
 * callback that failed in a system call, and for code that carries a
 * failure from one thread to another (save code, bc_errmsg() and
 * bc_errno() there, restore them here). */
int bc_set_error(int code, int sys_errno, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Clears this thread's error: message, errno and payload (the payload's
 * release function is called). */
void bc_error_clear(void);

/* Sets this thread's message (printf-style; the format may quote the
 * current message, bc_errmsg()) and returns `code`, keeping bc_errno() and
 * the payload: for adding context to a failure, e.g.
 * `return bc_error_wrap(rc, "%s: %s", name, bc_errmsg());`. */
int bc_error_wrap(int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ---- callback-error payloads ----------------------------------------------
 *
 * A callback of the library's (a cache source's open/next/skip, a foreign
 * sequence's get, an index stream) that fails for a reason of its own can
 * attach an opaque payload to its failure, e.g. the exception object of a
 * language binding: it returns `bc_set_errmsg(BC_ESOURCE, ...)` after
 *
 *     bc_error_set_payload(obj, obj_retain, obj_release);
 *
 * (set the message first: every new message drops the payload; the
 * payload call keeps the message).  The failure travels with it: when a
 * cache fill fails, every thread that waited for that fill gets the same
 * code, message, errno and payload, and bc_error_payload() there returns
 * `obj`.  The payload is reference-counted by the callbacks given:
 * `retain` is called for each holder the library adds (this thread's error
 * takes one at once; a saved error state, a fill's record and each waiter
 * take their own), `release` when a holder lets go (a newer error in that
 * thread, bc_error_clear, bc_error_state_clear, thread exit).  Both may be
 * called from any thread, with library locks held: they must be
 * thread-safe and must not call bagcache.  (The shape of libgit2's
 * GIT_EUSER with git_error_save/git_error_restore.) */
typedef void (*bc_payload_fn)(void *payload);

/* Attaches `payload` (NULL: none) to this thread's current error,
 * releasing the one attached before.  `retain` and `release` may be NULL
 * for a payload that needs no counting (static data). */
void bc_error_set_payload(void *payload, bc_payload_fn retain,
                          bc_payload_fn release);

/* The payload of this thread's last failure, or NULL.  Borrowed: valid
 * until this thread's error changes; retain it to keep it longer. */
void *bc_error_payload(void);

/* ---- saving and restoring the thread's error -------------------------------
 *
 * A saved error is a plain value: the code, the message, the errno and a
 * reference to the payload.  Save it where a failure must survive other
 * calls (cleanup that may fail and set messages of its own) or cross to
 * another thread; restore it where it is reported.  Initialise with
 * BC_ERROR_STATE_INIT; clear it when done (drops the payload). */
#define BC_ERRMSG_MAX 1024
typedef struct bc_error_state {
  int code;                   /* BC_E* code; BC_OK: nothing saved */
  int sys_errno;              /* as bc_errno() */
  void *payload;              /* as bc_error_payload(), one reference */
  bc_payload_fn retain, release;
  char message[BC_ERRMSG_MAX];
} bc_error_state;
#define BC_ERROR_STATE_INIT {0, 0, NULL, NULL, NULL, ""}

/* Copies this thread's error into *st (releasing what st held), with
 * `code` as its code (pass the failing call's return value; this thread's
 * message, errno and payload describe it). */
void bc_error_save(bc_error_state *st, int code);

/* Makes *st this thread's error again (its payload retained anew: st keeps
 * its own reference, so one state may be restored in many threads) and
 * returns st->code. */
int bc_error_restore(const bc_error_state *st);

/* Drops the payload reference of *st and resets it to BC_ERROR_STATE_INIT. */
void bc_error_state_clear(bc_error_state *st);

/* ---- interrupts ------------------------------------------------------------
 *
 * A per-thread interrupt handler, in the shape of SQLite's progress
 * handler: while one is set in a thread, every call that waits there (for
 * another thread's or process's fill of a shard, for a pass over a source,
 * for a drain's workers, for read-ahead, for the worker pool's helpers)
 * polls it every 10 ms or so, and a fill run by the thread polls it
 * between records (at most every 10 ms).  When it returns non-zero, the
 * call returns BC_ECANCELED promptly, leaving everything consistent: a
 * fill the thread was running is abandoned (its claim released, its
 * scratch file removed, to be filled again by a later call); fills other
 * threads run go on.  bc_cache_close, which has no error to return, takes
 * an interrupt while it waits for a fill worker stuck in the source as
 * bc_cache_abandon_fills() and completes.
 *
 * The handler runs in the thread that set it, with no bagcache lock held;
 * it may call bagcache functions that do not wait.  With no handler set
 * (the default) waits cost nothing extra.  Deadlines, for example:
 *
 *     static int past(void *ctx) { return now() >= *(double *)ctx; }
 *     double deadline = now() + 2.0;
 *     bc_interrupt_handler prev = bc_set_interrupt_handler(past, &deadline);
 *     int rc = bc_cache_get(cache, i, &buf);  // BC_ECANCELED after 2 s
 *     bc_set_interrupt_handler(prev.fn, prev.ctx);
 */
typedef int (*bc_interrupt_fn)(void *ctx);
typedef struct {
  bc_interrupt_fn fn;
  void *ctx;
} bc_interrupt_handler;

/* Sets this thread's interrupt handler (fn NULL: none) and returns the one
 * it replaces, to be restored when done. */
bc_interrupt_handler bc_set_interrupt_handler(bc_interrupt_fn fn, void *ctx);

/* Polls this thread's handler: 0, or BC_ECANCELED with a message.  For
 * callbacks (a source's next) that run long loops of their own; cheap
 * enough to call per item: the handler is called at most every 10 ms (at
 * once after it was set), and a call in between returns 0. */
int bc_check_interrupt(void);

/* Notices: things a user should know that are not failures (a fallback from
 * direct I/O to buffered reads, for example).  The default handler writes
 * "bagcache: notice: MESSAGE" to stderr.  Passing NULL silences notices.
 * The handler may be called from any bagcache thread; it must be
 * thread-safe.  Set it before opening objects; the setting is process-wide. */
typedef void (*bc_notice_fn)(void *payload, const char *message);
void bc_set_notice_handler(bc_notice_fn fn, void *payload);

#ifdef __cplusplus
}
#endif
#endif /* BAGCACHE_ERROR_H */
