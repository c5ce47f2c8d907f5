/*
 * core/bcpy.h - private declarations of the CPython extension bagcache._bagcache.
 *
 * The extension wraps the public C API only (bagcache.h), so it builds
 * against an installed libbagcache as well as inside the source tree.
 *
 * Object model:
 *   _SeqBase     a read-only view of a bc_seq: length, items, slices (which
 *                are views again), bulk reads, read-ahead iteration.  It is
 *                generic over the sequence behind it; nothing in it knows
 *                about Bagz files.
 *   _ReaderBase  a _SeqBase whose root is a bag set opened from a file spec
 *                (bc_seq_open_bag); adds what only a bag can answer.
 *   ReaderIterator, _WriterBase, Index, MultiIndex.
 * The pure-Python package (bagcache/__init__.py) subclasses _ReaderBase and
 * _WriterBase to add options classes, pickling and the Sequence ABC.
 *
 * GIL rule: the GIL is released around every call that reads, writes or
 * waits (Py_BEGIN_ALLOW_THREADS).  bagcache calls back into Python from
 * any thread (a LoadIt's source, a view's Python leaves and index maps,
 * the index stream of ReaderIterator, the main thread's interrupt handler,
 * the release of an exception payload); each callback takes the GIL
 * itself (PyGILState_Ensure).  No bagcache lock is held while the GIL is
 * taken, except by a payload's release (loadit/source.c).
 */
#ifndef BCPY_H
#define BCPY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>
#include <stdint.h>

#include <bagcache.h>

/* ---- errors (module.c) ------------------------------------------------ */

/* Raises the Python exception for a bagcache error code, with `message`
 * (NULL or "": the calling thread's bc_errmsg(), and its bc_errno()), and
 * clears the thread's error.  Errors map by code: BC_ESOURCE -> the
 * exception of the thread's payload (the source's own exception object),
 * else SourceError; BC_ECANCELED -> the exception the main thread's
 * interrupt handler left pending (KeyboardInterrupt), else
 * InterruptedError; BC_ERANGE -> IndexError, BC_ENOMEM -> MemoryError, the
 * system failures
 * OSError(errno, message): BC_ENOTFOUND FileNotFoundError, BC_EPERM
 * PermissionError (EACCES, EPERM; EROFS a plain OSError), BC_ENOSPC and
 * BC_EIO OSError with their errno (or a subclass Python picks from it);
 * anything else -> ValueError.  Returns NULL. */
PyObject *bcpy_raise(int code, const char *message);

/* bcpy_raise for a failure met in another thread: `sys_errno` is its
 * bc_errno() (0: unknown, the code's usual errno is used: ENOENT, ENOSPC,
 * EACCES, EIO). */
PyObject *bcpy_raise_errno(int code, int sys_errno, const char *message);

/* The exception class bcpy_raise uses for a code (borrowed; OSError for
 * BC_EIO and BC_ENOSPC, whose subclass depends on the errno). */
PyObject *bcpy_error_type(int code);

/* Sets the interrupt handler that runs Python's signal handlers in the
 * calling thread, which must be the main one (module.c; also after fork). */
void bcpy_interrupt_install(void);
/* True in the thread Python runs signal handlers in (loadit/runner.c). */
bool bcpy_is_main_thread(void);

/* Raised for an invalid slice: both TypeError (as bagz) and IndexError (as
 * sackli). */
extern PyObject *bcpy_InvalidSliceError;

/* The number of records a bulk call reads between GIL hand-offs. */
#define BCPY_CHUNK 8192

/* ---- the thread's read buffer (core/scratch.c) ------------------------------ */

/* Takes the calling thread's reusable buffer (or, out of memory,
 * `fallback`, which must be BC_BUF_INIT); give it back when done.  Taking
 * twice in one thread gives two different buffers. */
bc_buf *bcpy_scratch_take(bc_buf *fallback);
void bcpy_scratch_give(bc_buf *b, bc_buf *fallback);

/* The staging area of bulk reads: records are read into `bufs` with the GIL
 * released, a round at a time, then turned into Python objects.  Kept per
 * thread between calls, so a bulk read allocates no record buffers once the
 * thread has read records of that size, and a round's records are still in
 * the CPU cache when they are copied out (core/scratch.c). */
typedef struct {
  int64_t *idx;   /* the round's view indices */
  bc_buf *bufs;   /* their records */
  size_t cap;     /* BCPY_CHUNK */
  size_t round;   /* records in the next round (bcpy_stage_done) */
  size_t used;    /* bufs[used..cap) have no memory */
} bcpy_stage;

/* Takes the calling thread's staging area, or makes one (another when the
 * thread's is in use: nested calls); NULL with MemoryError set. */
bcpy_stage *bcpy_stage_take(void);
/* Gives it back, keeping at most BCPY_STAGE_KEEP bytes of buffers. */
void bcpy_stage_give(bcpy_stage *s);
/* Frees it (any thread, no GIL needed): for an area handed to a job that
 * its submitter abandoned. */
void bcpy_stage_free(bcpy_stage *s);
/* The number of records of the next round, `left` records being left to
 * read (> 0): at most `left`, and at most about BCPY_STAGE_BYTES at the
 * record sizes read so far (`whole`: at most cap). */
size_t bcpy_stage_next(bcpy_stage *s, size_t left, bool whole);
/* After a round of `n` records has been read: sizes the next round. */
void bcpy_stage_done(bcpy_stage *s, size_t n);

/* ---- sequences (core/seq.c) ----------------------------------------------- */

typedef struct {
  PyObject_HEAD
  bc_seq *seq;   /* the view this object reads; NULL until opened */
  bc_seq *root;  /* the unsliced sequence the view selects from */
  uint64_t len;  /* exact length of seq */
  int64_t start; /* element k of seq is root[start + k * step] */
  int64_t step;
  int max_parallelism; /* as requested; negative makes bulk reads fail */
  int readahead_threads;
  PyObject *meta; /* opaque Python state shared with every slice */
  PyObject *weakrefs;
} bcpy_seq;

extern PyTypeObject bcpy_SeqBase_Type;
extern PyTypeObject bcpy_ReaderBase_Type;

/* Makes `self` (fresh from tp_alloc) a view of `root` selecting
 * root[start + k * step] for k < len.  Takes new references. */
int bcpy_seq_set_view(bcpy_seq *self, bc_seq *root, int64_t start,
                      int64_t step, uint64_t len);

/* Checks the object is open; sets ValueError and returns -1 otherwise. */
int bcpy_seq_check(bcpy_seq *self);

/* Fails (ValueError) when the options forbid bulk reads. */
int bcpy_seq_check_bulk(bcpy_seq *self);

/* ---- bulk reads (core/bulk.c) --------------------------------------------- */

PyObject *bcpy_seq_read(bcpy_seq *self, PyObject *unused);
PyObject *bcpy_seq_read_range(bcpy_seq *self, PyObject *args);
PyObject *bcpy_seq_read_indices(bcpy_seq *self, PyObject *indices);

/* Linear scans: __contains__, count, index. */
int bcpy_seq_contains(bcpy_seq *self, PyObject *value);
PyObject *bcpy_seq_count(bcpy_seq *self, PyObject *value);
PyObject *bcpy_seq_index(bcpy_seq *self, PyObject *args, PyObject *kwds);

/* ---- iterators (core/iterator.c) ------------------------------------------ */

extern PyTypeObject bcpy_Iterator_Type;

/* An iterator over view[start : start + count] (count records). */
PyObject *bcpy_iter_range(bcpy_seq *seq, uint64_t start, uint64_t count,
                          PyObject *read_ahead);

/* An iterator over view[i] for i from the Python iterable `indices`
 * (iter() is called now; its exceptions propagate now). */
PyObject *bcpy_iter_indices(bcpy_seq *seq, PyObject *indices,
                            PyObject *read_ahead);

/* ---- writer and indexes ----------------------------------------------- */

extern PyTypeObject bcpy_WriterBase_Type;
extern PyTypeObject bcpy_Index_Type;
extern PyTypeObject bcpy_MultiIndex_Type;

/* ---- loadit-compatible views (views/views.c) --------------------------------- */

/* _View: a lazy index map over any sequences (Python objects, Readers,
 * other views); ViewIterator iterates one.  A Python object takes part as
 * a native sequence when its type defines __bagcache_seq__() returning a
 * _SeqBase, a _View, a PyCapsule "bagcache.bc_seq" (a bc_seq *), or a
 * pair (one of those, decode) where decode(bytes) makes each element. */
extern PyTypeObject bcpy_View_Type;
extern PyTypeObject bcpy_ViewIterator_Type;
/* The context of a "bagcache.bc_seq" capsule whose reads may wait for a
 * cache's fill (a LoadIt's): views over it wait so that Ctrl-C works. */
extern const char bcpy_waits_mark[];

/* The C sequence of `obj` when its elements are raw records read in C (a
 * Reader or a slice of one, a view with only such leaves, a LoadIt with
 * serializer="raw"): new reference.  NULL with TypeError when its elements
 * come from Python code or a decoder. */
bc_seq *bcpy_record_seq(PyObject *obj);

/* Adds _gather, _epoch_indices and _iid_indices (train/train.c). */
int bcpy_train_init(PyObject *mod);

/* ---- LoadIt: caches over Python iterators (loadit/) -------- */

/* Exceptions for BC_ESOURCE without a stored exception, BC_ENOTCACHED
 * (an IndexError) and BC_ENONDET (a ValueError). */
extern PyObject *bcpy_SourceError;
extern PyObject *bcpy_NotCachedError;
extern PyObject *bcpy_CorruptError; /* BC_ECORRUPT (a ValueError) */
extern PyObject *bcpy_NondeterministicError;
/* Warned when the fill behind a first pass fails (a RuntimeWarning). */
extern PyObject *bcpy_CacheWarning;

/* The exception a cache's source raised, when this thread's error carries
 * one as its payload (loadit/source.c): new reference, or NULL (no error
 * set). */
PyObject *bcpy_payload_exception(void);

/* Readies `type` and adds it to the module as `name` (module.c). */
int bcpy_add_type(PyObject *mod, PyTypeObject *type, const char *name);

/* Adds _CacheCore, _CacheSeq, _CacheIter and the exceptions above. */
int bcpy_loadit_init(PyObject *mod);

/* core/indices.c: a growable array of int64 indices (free v with PyMem_RawFree). */
typedef struct bcpy_ivec {
  int64_t *v;
  size_t n, cap;
} bcpy_ivec;

/* Doubles the capacity (64 at first); -1 with MemoryError set. */
int bcpy_ivec_grow(bcpy_ivec *a);

/* Appends x; -1 with MemoryError set.  Inline: it is on the path of every
 * index of a read_indices call. */
static inline int bcpy_ivec_push(bcpy_ivec *a, int64_t x) {
  if (a->n == a->cap && bcpy_ivec_grow(a) < 0) return -1;
  a->v[a->n++] = x;
  return 0;
}

/* Integers from a 1-D buffer of native integers (numpy, array.array) into
 * an empty `a`: 1 converted, 0 not such a buffer, -1 error (an unsigned
 * value beyond int64: IndexError naming the position). */
int bcpy_indices_from_buffer(PyObject *obj, bcpy_ivec *a);

/* Appends the integers of `obj` (a 1-D native integer buffer, or any
 * iterable of integers; str/bytes and boolean masks are TypeErrors, other
 * dimensions ValueError, out-of-int64 IndexError naming the position).
 * 0, or -1 with an exception set. */
int bcpy_indices_from_object(PyObject *obj, bcpy_ivec *a);

#endif /* BCPY_H */
