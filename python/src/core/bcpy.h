/*
 * core/bcpy.h - private declarations of the CPython extension bagcache._bagcache.
 *
 * The extension wraps the public C API only (bagcache.h), so it builds
 * against an installed libbagcache as well as inside the source tree.
 *
 * Object model:
 *   _Sequence    the one sequence base type (core/sequence.c): an object
 *                over a bc_seq whose subtype supplies how an element is
 *                read and decoded and how a blocking call waits
 *                (bcpy_seq_kind).  Subscripts (ints, numpy integers,
 *                slices, index lists), slicing (always bc_seq_slice of the
 *                object's own sequence, so slices of slices compose in C)
 *                and slice bounds are one code path for every subtype.
 *   _SeqBase     raw records of a bag set or a slice of one, with bulk
 *                reads and read-ahead iteration; _ReaderBase opens it from
 *                a file spec.
 *   _CacheSeq    a LoadIt or a view of one (loadit/loadit.c): unpickled
 *                records, reads that may wait for a cache's fill.
 *   _View        a loadit-compatible view over any sequences (views/).
 *   ReaderIterator  the one iterator (core/iterator.c); _CacheIter and
 *                ViewIterator are its names for LoadIt and views.
 *   _WriterBase, Index, MultiIndex.
 * The pure-Python package (bagcache/__init__.py) subclasses _ReaderBase and
 * _WriterBase to add options classes, pickling and the Sequence ABC.
 *
 * GIL rule: the GIL is released around every call that reads, writes or
 * waits (Py_BEGIN_ALLOW_THREADS).  The library does call back into Python,
 * from its own threads too: a LoadIt's source runs the user's iterator and
 * serializer on whichever thread fills a shard (loadit/source.c); a view's
 * Python leaves and Python index maps are called while the library
 * resolves or reads the tree (views/); ReaderIterator's index stream calls
 * next() on a Python iterator inside bc_readahead_next; the main thread's
 * interrupt handler checks for signals during waits; an exception payload
 * is released by the last thread that holds it.  Every such callback takes
 * the GIL itself (PyGILState_Ensure).  No bagcache lock is held while the
 * GIL is taken, except by a payload's release (loadit/source.c).  Decoders
 * (pickle.loads, a view's decode) run in the extension with the GIL held.
 */
#ifndef BCPY_H
#define BCPY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

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


/* Sets the interrupt handler that runs Python's signal handlers in the
 * calling thread, which must be the main one (module.c; also after fork). */
void bcpy_interrupt_install(void);
/* True in the thread Python runs signal handlers in (module.c). */
bool bcpy_is_main_thread(void);
/* Changes in a child after fork(): a cheaper test than getpid() for
 * objects that must not be used across one (module.c). */
unsigned bcpy_forks(void);

/* Raised for an invalid slice: both TypeError (as bagz) and IndexError (as
 * sackli). */
extern PyObject *bcpy_InvalidSliceError;

/* The number of records a bulk call reads between GIL hand-offs. */
#define BCPY_CHUNK 8192

/* True during interpreter shutdown, when no thread may take the GIL:
 * callbacks then fail and destructors leak their Python references. */
static inline bool bcpy_finalizing(void) {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

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
/* The number of records of the next round, `left` records being left to
 * read (> 0): at most `left`, and at most about BCPY_STAGE_BYTES at the
 * record sizes read so far (`whole`: at most cap). */
size_t bcpy_stage_next(bcpy_stage *s, size_t left, bool whole);
/* After a round of `n` records has been read: sizes the next round. */
void bcpy_stage_done(bcpy_stage *s, size_t n);

/* core/indices.c: a growable array of int64 indices (free v with PyMem_RawFree). */
typedef struct bcpy_ivec {
  int64_t *v;
  size_t n, cap;
} bcpy_ivec;

/* ---- the sequence base type (core/sequence.c) --------------------------- */

/* A blocking library call handed to a sequence's wait policy: run() works
 * on the call alone, without the GIL, in the calling thread (its failure
 * is that thread's error, with its message and payload), or, handed to
 * bcpy_run_detached, on a thread of its own; free() frees it (it was
 * allocated with PyMem_RawCalloc) and whatever it still holds. */
typedef struct bcpy_call bcpy_call;
struct bcpy_call {
  int (*run)(bcpy_call *c); /* 0 or a BC_E* code */
  void (*free)(bcpy_call *c);
  int rc; /* run's result */
};

/* Records the wait policy's call reads on success while a bulk read's
 * round runs it (core/bulk.c sets it around kind->wait), else 0: for a
 * policy that counts reads (a LoadIt's).  Per thread. */
extern _Thread_local size_t bcpy_wait_records;

/* c->rc = c->run(c) (no GIL). */
void bcpy_call_run(bcpy_call *c);

/* Runs c->run, then c->free, on a detached thread of its own (module.c).
 * -1 when no thread could be started (the call is untouched). */
int bcpy_run_detached(bcpy_call *c);

/* Non-zero while this thread runs Python code for a source callback (it
 * may be one of the engine's own threads, in the middle of a fill).  An
 * object that dies there (a collection can run anywhere) must not close a
 * cache, drop a sequence or join a read-ahead inline: that could join or
 * free the thread's own engine state.  Such teardown is handed to a thread
 * of its own (bcpy_run_detached). */
extern _Thread_local int bcpy_in_callback;

typedef struct bcpy_sobj bcpy_sobj;
typedef struct bcpy_iter bcpy_iter;

/* What a subtype adds to the base: the read and decode of an element, the
 * wait policy, index lists, and the object a slice makes. */
typedef struct {
  /* 0 when the object can be read, else -1 with an exception. */
  int (*check)(bcpy_sobj *self);
  /* self[i], i any int64 (negative counts from the end); checked object. */
  PyObject *(*item)(bcpy_sobj *self, int64_t i);
  /* self[key] for a key that is neither an integer nor a slice (an index
   * list); NULL: such keys are a TypeError. */
  PyObject *(*take)(bcpy_sobj *self, PyObject *key);
  /* The wait policy of a call that may wait (a slice that settles the
   * length, a read-ahead refill): 0 when it ran. */
  int (*wait)(bcpy_sobj *self, bcpy_call *c);
  /* The object self[key] (a slice) over `seq` (reference taken over);
   * self may have been closed while the slice waited. */
  PyObject *(*wrap)(bcpy_sobj *self, bc_seq *seq, PyObject *key);
  /* Raises for a failed library call (message NULL: bc_errmsg()). */
  PyObject *(*raise)(int rc, int sys_errno, const char *message);
  /* Iteration (core/iterator.c).  The element of a record read at
   * position `index`; NULL: the record's bytes. */
  PyObject *(*decode)(bcpy_sobj *self, bc_buf *record, uint64_t index);
  /* Whether reads may wait for a cache's fill (NULL: never): iterators
   * then wait through the wait policy and close through a helper. */
  bool (*waits)(bcpy_sobj *self);
  /* Lists (add) or unlists an iterator of self, e.g. to stop it when the
   * sequence is closed (NULL: nothing to do). */
  void (*track)(bcpy_sobj *self, bcpy_iter *it, bool add);
  /* The refill of an iterator opened without read-ahead (chunked): puts
   * up to it->batch elements into it->items[0..count), and sets done and
   * the end (it->fail or the exc_* triple) when they are all. */
  void (*chunk)(bcpy_sobj *self, bcpy_iter *it);
} bcpy_seq_kind;

/* The head of every sequence object: its sequence (NULL until opened, or
 * once closed) and its kind. */
#define BCPY_SEQ_HEAD \
  PyObject_HEAD       \
  bc_seq *seq;        \
  const bcpy_seq_kind *kind;

struct bcpy_sobj {
  BCPY_SEQ_HEAD
};

extern PyTypeObject bcpy_Sequence_Type;

/* self[key] for a slice: bc_seq_slice of self->seq, waiting through
 * kind->wait when the slice needs a length not known yet. */
PyObject *bcpy_sobj_slice(bcpy_sobj *self, PyObject *key);
/* self[::-1]. */
PyObject *bcpy_sobj_reversed(bcpy_sobj *self, PyObject *unused);
/* The plain wait policy: the call with the GIL released. */
int bcpy_wait_plain(bcpy_sobj *self, bcpy_call *c);

/* The slice-bound rule of every sequence: None -> BC_NONE (a step of None
 * -> 1), an integer clamped to [INT64_MIN + 1, INT64_MAX] (*big set when
 * one above INT64_MAX was clamped), anything else InvalidSliceError; a
 * zero step ValueError.  0, or -1 with the exception set. */
int bcpy_slice_bound(PyObject *obj, int64_t *out, bool *big);
/* PySlice_Unpack + PySlice_AdjustIndices over `len` elements, with the
 * bounds rule above; returns the element count, or -1 with an exception. */
Py_ssize_t bcpy_slice_indices(PyObject *slice, Py_ssize_t len, Py_ssize_t *start,
                              Py_ssize_t *step);

/* ---- raw records of a bag set (core/seq.c) -------------------------------- */

typedef struct {
  BCPY_SEQ_HEAD
  bc_seq *root;  /* the bag set the view selects from (seq is root or a
                    bc_seq_slice of it) */
  uint64_t len;  /* exact length of seq */
  int max_parallelism; /* as requested; negative makes bulk reads fail */
  int readahead_threads;
  PyObject *meta; /* opaque Python state shared with every slice */
  PyObject *weakrefs;
} bcpy_seq;

extern PyTypeObject bcpy_SeqBase_Type;
extern PyTypeObject bcpy_ReaderBase_Type;

/* Checks the object is open; sets ValueError and returns -1 otherwise. */
int bcpy_seq_check(bcpy_seq *self);

/* Fails (ValueError) when the options forbid bulk reads. */
int bcpy_seq_check_bulk(bcpy_seq *self);

/* ---- bulk reads (core/bulk.c) --------------------------------------------- */

/* [self[i] for i in idx[0..n)], read in parallel: the one bulk read loop of
 * every sequence.  Records go in rounds of bc_seq_get_many through the
 * kind's wait policy, and are made elements by kind->decode (NULL: bytes);
 * indices are the sequence's (negative count from the end).  A new list,
 * or NULL with an exception (kind->raise). */
PyObject *bcpy_read_list(bcpy_sobj *self, const int64_t *idx, size_t n);

PyObject *bcpy_seq_read(bcpy_seq *self, PyObject *unused);
PyObject *bcpy_seq_read_range(bcpy_seq *self, PyObject *args);
/* Checks [start, start + num) against the view (a negative start counts
 * from the end, and is made non-negative): 0, or -1 with IndexError or
 * ValueError. */
int bcpy_seq_check_range(bcpy_seq *self, Py_ssize_t *start, Py_ssize_t num);
PyObject *bcpy_seq_read_indices(bcpy_seq *self, PyObject *indices);

/* Linear scans: __contains__, count, index. */
int bcpy_seq_contains(bcpy_seq *self, PyObject *value);
PyObject *bcpy_seq_count(bcpy_seq *self, PyObject *value);
PyObject *bcpy_seq_index(bcpy_seq *self, PyObject *args, PyObject *kwds);

/* ---- iterators (core/iterator.c) ------------------------------------------ */

/* The one iterator of every sequence: records read ahead on worker threads
 * (bc_readahead) and handed out a batch at a time, decoded by the
 * sequence's kind; or, for views with Python code, elements made a chunk at
 * a time by kind->chunk.  ReaderIterator, _CacheIter and ViewIterator are
 * its names for the three subtypes. */
struct bcpy_iter {
  PyObject_HEAD
  bcpy_sobj *owner;        /* the sequence (own reference) */
  bc_readahead *ra;        /* NULL: chunked, or ended */
  struct bcpy_stream *stream; /* a lazy stream of positions, if any */
  PyObject *source;        /* an iterator of indices (ReaderIterator) */
  bcpy_ivec array;         /* or the indices of a native integer buffer */
  size_t array_pos;
  uint64_t len;            /* the owner's length, for streamed indices */
  unsigned forks;          /* bcpy_forks() of the process whose threads
                              serve ra, or that runs the producer */
  bool busy, done;
  bc_buf *bufs;            /* read-ahead: records bufs[head..count) */
  uint64_t *index;         /* ... read at these positions */
  PyObject **items;        /* chunked: elements items[head..count) */
  size_t cap, head, count;
  size_t batch, max_batch; /* records per refill, doubling up to max */
  uint64_t next;           /* chunked: the next position */
  bool bounded;            /* chunked: the length was exact at the start */
  uint64_t end;            /* ... and was this */
  uint64_t pulled;         /* records taken from the read-ahead */
  bc_error_state fail;     /* how it ended: a failure (code 0: none) */
  PyObject *exc_type, *exc_value, *exc_tb; /* or a Python exception */
  bcpy_iter *next_iter, **prev_iter;       /* kind->track's list */
  /* The kind's own state of a chunked iterator (a LoadIt's first pass,
   * loadit/tee.c), released by kind->track(.., false). */
  void *producer;
};

extern PyTypeObject bcpy_Iterator_Type;

/* An iterator of type `type` (bcpy_Iterator_Type or a subtype) over
 * `seq` (owner->seq or a slice of it) from position `from`: read ahead in
 * a window of `window` records on `threads` threads (0: the default),
 * `batch` records per refill doubling up to `max_batch`.  `lazy`: the
 * positions are streamed while the end is not known (a cache still being
 * filled); else bc_seq_iterate, which settles the length first.  `chunked`:
 * no read-ahead, kind->chunk makes the elements. */
PyObject *bcpy_iter_open(bcpy_sobj *owner, PyTypeObject *type, bc_seq *seq, uint64_t from,
                         size_t window, int threads, size_t batch, size_t max_batch,
                         bool lazy, bool chunked);

/* Stops an iterator's read-ahead (a helper closes it where this thread must
 * not wait); it then ends after the records it holds. */
void bcpy_iter_stop(bcpy_iter *it);

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
 * cache's fill (a LoadIt's): iterators of views over it close their
 * read-ahead on a helper where this thread must not wait. */
extern const char bcpy_waits_mark[];

/* The C sequence of `obj` when its elements are raw records read in C (a
 * Reader or a slice of one, a view with only such leaves, a LoadIt with
 * serializer="raw"): new reference.  NULL with TypeError when its elements
 * come from Python code or a decoder. */
bc_seq *bcpy_record_seq(PyObject *obj);

/* ---- notices (core/notice.c) ------------------------------------------- */

/* Installs the library's notice handler that queues messages for the logger
 * "bagcache", and adds _flush_notices() to the module. */
int bcpy_notices_init(PyObject *mod);
/* Delivers the queued notices to the logger (GIL held, no engine lock);
 * a pending exception is kept.  bcpy_notices_flush is a cheap no-op when
 * none is queued: call it after engine calls that may raise notices. */
void bcpy_notices_flush(void);
void bcpy_notices_flush_now(void);
/* The child's side of a fork (module.c's handler). */
void bcpy_notices_after_fork(void);

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
/* Makes the exception class bagcache.`name` (base: a class or a tuple of
 * them) into *slot and adds it to the module (module.c). */
int bcpy_add_exception(PyObject *mod, PyObject **slot, const char *name, PyObject *base,
                       const char *doc);

/* Adds _CacheCore, _CacheSeq, _CacheIter and the exceptions above. */
int bcpy_loadit_init(PyObject *mod);

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
 * value beyond int64: IndexError naming the position).  A boolean mask is
 * a TypeError, and bytes are not integers, unless `bagz` (then a boolean
 * mask is not such a buffer). */
int bcpy_indices_from_buffer(PyObject *obj, bcpy_ivec *a, bool bagz);

/* Appends the integers of `obj` to an empty `a`: a 1-D native integer
 * buffer, or any iterable of integers.  As loadit (bagz_len NULL):
 * str/bytes and boolean masks are TypeErrors, other dimensions ValueError,
 * out-of-int64 IndexError naming the position.  As bagz's read_indices
 * (bagz_len: the length): bytes are integers too, False and True are 0
 * and 1, a non-integer raises Python's own TypeError, and every index is
 * checked against *bagz_len, IndexError "indices[P] = I out of range [0,
 * N)" naming the first bad one, and made non-negative.  0, or -1 with an
 * exception set. */
int bcpy_indices_from_object(PyObject *obj, bcpy_ivec *a, const uint64_t *bagz_len);

/* The indices of a subscript key that is neither an integer nor a slice
 * (self[[1, 5, 2]]), as bcpy_indices_from_object reads them (loadit's
 * rules).  A str, bytes, bytearray or float key is a TypeError "`what`
 * must be integers, slices or sequences of integers, not T"; so is, when
 * `strict`, None or anything neither a sequence nor a buffer, and a key
 * that is not a sequence and does not iterate integers.  0, or -1 with an
 * exception set. */
int bcpy_key_indices(PyObject *key, const char *what, bool strict, bcpy_ivec *a);

#endif /* BCPY_H */
