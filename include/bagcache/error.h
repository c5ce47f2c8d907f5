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
  BC_EAGAIN = -16       /* the call would wait for work another thread or
                           process is doing (bc_cache_try_get) */
};

/* Number of codes in the table (BC_OK included): codes run 0 .. -(N-1). */
#define BC_ERROR_COUNT 17

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
