/*
 * bagcache/seq.h - the sequence interface and composable views.
 *
 * Everything a user can index is a bc_seq: a bag set, a cache, a view of
 * either, or a foreign sequence supplied through callbacks.  A view is an
 * index map: it answers "which child, and which index in it" for an index of
 * its own; records are fetched only at the leaves.  So views compose at a
 * small constant cost per level, and a batch read through any stack of views
 * resolves every index first, groups them by leaf, and reads each leaf's
 * group as one parallel batch.
 *
 * Ownership: every function that returns a bc_seq through an out-parameter
 * returns a NEW reference; release it with bc_seq_unref().  View
 * constructors take their own references on the sequences they are given
 * (the caller keeps its own).  Functions taking a bc_seq * argument borrow
 * it for the duration of the call.
 *
 * Thread safety: sequences are immutable once constructed (views settle
 * lazily computed tables once, under their own lock), so any number of
 * threads may read one sequence at once, and reference counting is atomic.
 * A foreign leaf is as thread-safe as its callbacks; see
 * bc_callback_seq_options.thread_safe.  A bc_readahead belongs to one
 * consumer thread.
 *
 * Lengths: a sequence knows its length exactly, knows only a lower bound (a
 * cache still filling), or has no end (an endless repeat).  See bc_len.
 */
#ifndef BAGCACHE_SEQ_H
#define BAGCACHE_SEQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bag.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- lengths -------------------------------------------------------- */

typedef enum bc_len_kind {
  BC_LEN_EXACT = 0,    /* value is the length */
  BC_LEN_AT_LEAST = 1, /* value is a lower bound; the end is not known yet */
  BC_LEN_INFINITE = 2  /* no end; value is unused (0) */
} bc_len_kind;

typedef struct bc_len {
  bc_len_kind kind;
  uint64_t value;
} bc_len;

/* ---- implementing a sequence ---------------------------------------- */

typedef struct bc_seq bc_seq;

/* Version 2 added `read_into`; tables of version 1 (which end before it)
 * are still accepted. */
#define BC_SEQ_OPS_VERSION 2

/* The operations table of a sequence type (cf. sqlite3_io_methods).  A view
 * implements `resolve`; a leaf implements `get` (and optionally
 * `get_many` and `read_into`).  Every function returns 0 or a negative
 * BC_E* code (with bc_set_errmsg for the detail). */
typedef struct bc_seq_ops {
  unsigned version;      /* BC_SEQ_OPS_VERSION */
  const char *type_name; /* "bag", "slice", ...: used in messages */
  /* What is known of the length.  With exact = false: what is known now,
   * cheaply, never blocking.  With exact = true: settle it, even if that
   * takes long (a cache drains its source): the answer must be EXACT or
   * INFINITE. */
  int (*length)(bc_seq *self, bool exact, bc_len *out);
  /* Views: the child holding own index `index` (borrowed from self) and the
   * index in it.  `index` is below the known length or the lower bound may
   * have grown; return BC_ERANGE if it is past the end.  NULL for leaves. */
  int (*resolve)(bc_seq *self, uint64_t index, bc_seq **child,
                 uint64_t *child_index);
  /* Leaves: reads record `index` into out; BC_ERANGE past the end.  NULL for
   * views. */
  int (*get)(bc_seq *self, uint64_t index, bc_buf *out);
  /* Leaves, optional: reads count records in request order (outs[i] for
   * indices[i]); may use the worker pool.  NULL: the library runs `get`
   * for each index on the worker pool (or inline, when the leaf says its
   * `get` is not thread-safe). */
  int (*get_many)(bc_seq *self, const uint64_t *indices, size_t count,
                  bc_buf *outs);
  /* Releases what the implementation holds (child references, memory);
   * called once when the last reference goes.  Must free `self`. */
  void (*destroy)(bc_seq *self);
  /* Leaves, optional (version >= 2): reads count records straight into
   * caller memory, record indices[k] into the `size` bytes at
   * dst + rows[k] * size (rows NULL: at dst + k * size), on at most
   * max_parallelism threads (as in bc_seq_read_into).  Every record must
   * have exactly `size` bytes: another size is BC_EINVAL, and no byte
   * outside the record's own row is ever written.  Indices may be past
   * the end (BC_ERANGE).  On failure the rows' contents are unspecified.
   * NULL: the library reads each record with `get` and copies it. */
  int (*read_into)(bc_seq *self, const uint64_t *indices, const size_t *rows,
                   size_t count, void *dst, size_t size, int max_parallelism);
} bc_seq_ops;

/* The common header of every sequence: embed it as the FIRST member of an
 * implementation struct.  Fields are private to the library. */
struct bc_seq {
  const bc_seq_ops *ops;
  long refs;        /* atomic reference count */
  unsigned flags;   /* BC_SEQ_F_* */
};

/* flags: the leaf's `get` may be called from several threads at once. */
#define BC_SEQ_F_THREAD_SAFE 1u

/* Initialises the header of a new sequence with one reference.  `flags` is
 * a set of BC_SEQ_F_* values.  Checks ops->version: BC_EINVAL if it is not
 * one this library understands. */
int bc_seq_init(bc_seq *seq, const bc_seq_ops *ops, unsigned flags);

/* ---- references ----------------------------------------------------- */

/* Adds a reference; returns seq.  NULL is fine (returns NULL). */
bc_seq *bc_seq_ref(bc_seq *seq);

/* Drops a reference; destroys the sequence with the last one.  NULL is fine. */
void bc_seq_unref(bc_seq *seq);

/* The type name from the ops table ("bag", "slice", ...). */
const char *bc_seq_type_name(const bc_seq *seq);

/* ---- leaves --------------------------------------------------------- */

/* Opens a bag set (bc_bag_open) as a sequence that owns it. */
int bc_seq_open_bag(bc_seq **out, const char *spec,
                    const bc_reader_options *opts);

/* Wraps an open bag; the sequence takes ownership (bc_bag_close on last
 * unref, also when this call fails). */
int bc_seq_wrap_bag(bc_seq **out, bc_bag *bag);

/* The bag behind a sequence made by bc_seq_open_bag/bc_seq_wrap_bag, or
 * NULL for any other sequence.  Borrowed. */
bc_bag *bc_seq_bag(const bc_seq *seq);

/* A foreign leaf: length and get are callbacks with a payload. */
typedef struct bc_callback_seq_options {
  /* Length, as bc_seq_ops.length.  NULL: the length is fixed_length. */
  int (*length)(void *payload, bool exact, bc_len *out);
  bc_len fixed_length;
  /* Reads record `index`; BC_ERANGE past the end.  Required. */
  int (*get)(void *payload, uint64_t index, bc_buf *out);
  /* Called once when the sequence is destroyed.  May be NULL. */
  void (*free_payload)(void *payload);
  void *payload;
  /* true: get may run on several threads at once (then batches use the
   * worker pool); false: every call is made from one thread at a time. */
  bool thread_safe;
} bc_callback_seq_options;

int bc_seq_new_callbacks(bc_seq **out, const bc_callback_seq_options *opts);

/* ---- reading through the public wrappers ---------------------------- */

/* What is known of the length (see bc_seq_ops.length). */
int bc_seq_length(bc_seq *seq, bool exact, bc_len *out);

/* The exact length, settling it if needed.  BC_EINFINITE for an endless
 * sequence. */
int bc_seq_len(bc_seq *seq, uint64_t *len);

/* Reads element `index` into out.  A negative index counts from the end
 * (which settles the length; BC_EINFINITE for an endless sequence).
 * BC_ERANGE outside the sequence. */
int bc_seq_get(bc_seq *seq, int64_t index, bc_buf *out);

/* Reads count elements into outs[0..count-1], in request order (indices
 * may repeat, and may be negative as in bc_seq_get).  Every index is mapped
 * to its leaf first; each leaf's group is then read as one batch on the
 * worker pool.  On failure: the error of the first failing position in
 * request order, with its message. */
int bc_seq_get_many(bc_seq *seq, const int64_t *indices, size_t count,
                    bc_buf *outs);

/* Reads count elements straight into caller memory: element indices[k]
 * (indices may repeat, and may be negative as in bc_seq_get) into
 * dst[k * size .. (k + 1) * size), for arrays of fixed-size rows (a batch
 * of a training loop).  Every element must have exactly `size` bytes.  No
 * per-record buffer is allocated where the leaf reads into place (a bag:
 * records are copied, or zstd-decoded, straight into their rows); other
 * leaves are read with `get` and copied.  Nothing outside
 * dst[0 .. count * size) is written.
 * max_parallelism: threads per leaf read, the caller's included, from the
 * worker pool: 0 = the leaf's own (a bag's reader option, a thread-safe
 * foreign leaf: the CPUs), 1 = the calling thread only.  Give 1 when the
 * caller already reads several batches at once on threads of its own (a
 * data loader's workers): fanning out a batch of page-cache-warm rows
 * then costs more than it gains (doc/performance.md, "Training loops").
 * Errors, those of the first failing position in request order:
 * BC_ERANGE (an index outside the sequence), BC_EINVAL (an element whose
 * size is not `size`: "record I (indices[K]) has N bytes, not the row size
 * S"; NULL dst with count * size > 0; count * size overflows), and the
 * leaves' read errors; the message names indices[K].  On failure dst's
 * contents are unspecified. */
int bc_seq_read_into(bc_seq *seq, const int64_t *indices, size_t count,
                     void *dst, size_t size, int max_parallelism);

/* Maps an index (negative counts from the end) down to its leaf: *leaf is
 * borrowed from seq, *leaf_index the index to read there. */
int bc_seq_resolve(bc_seq *seq, int64_t index, bc_seq **leaf,
                   uint64_t *leaf_index);

/* ---- views ---------------------------------------------------------- */

/* "Omitted" for slice bounds, like Python's None. */
#define BC_NONE INT64_MIN

/* seq[start:stop:step] with Python's rules (negative bounds count from the
 * end, out-of-range bounds are clipped, negative steps walk backwards; step
 * 0 is BC_EINVAL).  A slice of a slice collapses into one slice of the
 * original.  Over a sequence whose end is unknown, non-negative bounds with
 * a positive step stay lazy; anything else settles the length first
 * (BC_EINVAL if the sequence is endless). */
int bc_seq_slice(bc_seq **out, bc_seq *seq, int64_t start, int64_t stop,
                 int64_t step);

/* take: element k is seq[indices[k]] (indices may repeat; a negative index
 * counts from seq's end).  bc_seq_take copies the array; bc_seq_take_shared
 * uses it in place: it must stay valid and unchanged until `release` is
 * called (with `payload`) when the view is destroyed (release may be NULL).
 * Out-of-range indices are reported when read, as BC_ERANGE. */
int bc_seq_take(bc_seq **out, bc_seq *seq, const int64_t *indices,
                size_t count);
int bc_seq_take_shared(bc_seq **out, bc_seq *seq, const int64_t *indices,
                       size_t count, void (*release)(void *payload),
                       void *payload);

/* map: element k is seq[fn(payload, k)], for k below `length` (EXACT or
 * INFINITE).  fn returns 0 and the child index, or a BC_E* code.  It must be
 * thread-safe.  free_payload (may be NULL) is called on destruction. */
typedef int (*bc_index_map_fn)(void *payload, uint64_t index,
                               uint64_t *child_index);
int bc_seq_map(bc_seq **out, bc_seq *seq, bc_index_map_fn fn, void *payload,
               void (*free_payload)(void *payload), bc_len length);

/* concat: the parts one after another.  Part lengths are looked up only
 * when an index needs them, so the last part may be of unknown length (and
 * an endless part hides the parts after it). */
int bc_seq_concat(bc_seq **out, bc_seq *const *parts, size_t count);

/* interleave: round-robin over the parts; when a part runs out the
 * rotation continues over the parts that remain, so every element of every
 * part appears exactly once:  ([0..4], [x], [y, z]) -> 0 x y 1 z 2 3 4.
 * Settles the parts' lengths on first use (endless parts are fine).
 * O(log parts) per index. */
int bc_seq_interleave(bc_seq **out, bc_seq *const *parts, size_t count);

/* repeat: seq, `times` times over; BC_REPEAT_FOREVER for no end (an empty
 * seq repeated forever is empty).  Settles seq's length on first use. */
#define BC_REPEAT_FOREVER UINT64_MAX
int bc_seq_repeat(bc_seq **out, bc_seq *seq, uint64_t times);

/* chunk_shuffle: the first `length` elements of seq (BC_LEN_ALL: all of
 * them, settling the length), permuted within each run of chunk_size
 * consecutive indices (the last run may be shorter; chunk_size 0 means one
 * run: a full shuffle).  Deterministic for a seed; computed per index with a
 * keyed bijection (a Feistel network with cycle walking), in O(1) memory. */
#define BC_LEN_ALL UINT64_MAX
int bc_seq_chunk_shuffle(bc_seq **out, bc_seq *seq, uint64_t chunk_size,
                         uint64_t length, uint64_t seed);

/* shuffle: a global permutation of seq by the same keyed bijection:
 * resumable (element k is computable alone) and memory-free. */
int bc_seq_shuffle(bc_seq **out, bc_seq *seq, uint64_t seed);

/* ---- read-ahead iteration ------------------------------------------- */

typedef struct bc_readahead bc_readahead;

/* An index stream: stores the next index and returns 1, returns 0 at the
 * end, or a negative BC_E* code (with bc_set_errmsg) on failure.  Called
 * only from bc_readahead_next, in the consumer's thread. */
typedef int (*bc_index_stream_fn)(void *payload, uint64_t *index);

typedef struct bc_readahead_options {
  size_t window; /* records kept in flight or ready (>= 1); default 1024.
                    Memory is window x record size.  Small windows cost CPU:
                    threads hand over work once per quarter window */
  int threads;   /* worker threads fetching them (>= 1); default 2 */
} bc_readahead_options;

#define BC_READAHEAD_OPTIONS_INIT {1024, 2}

/* Reads seq at the indices the stream yields, `window` records ahead, on
 * `threads` worker threads, delivering in stream order.  Memory is bounded
 * by the window.  The iterator holds a reference to seq. */
int bc_readahead_open(bc_readahead **out, bc_seq *seq, bc_index_stream_fn fn,
                      void *payload, const bc_readahead_options *opts);

/* Iterates seq[start], seq[start+1], ... to the end (which need not be
 * known in advance: iteration stops where the sequence ends). */
int bc_seq_iterate(bc_readahead **out, bc_seq *seq, uint64_t start,
                   const bc_readahead_options *opts);

/* The next record: 1 and the record in *out (its buffer is swapped with a
 * ready one, so no copy is made), and its index in *index (may be NULL);
 * 0 at the end; a negative code on failure.  A failure of the index stream
 * arrives after every record whose index came before it, and ends the
 * iteration.  A failed read ends it too. */
int bc_readahead_next(bc_readahead *it, bc_buf *out, uint64_t *index);

/* True when the next bc_readahead_next will return without waiting for a
 * worker (its record is ready, or the iteration has finished); false when
 * it may wait.  Never blocks; for callers that must not wait where they
 * are (e.g. a thread that has to stay responsive to signals). */
bool bc_readahead_ready(bc_readahead *it);

/* Stops the workers and releases everything.  NULL is fine. */
void bc_readahead_close(bc_readahead *it);

#ifdef __cplusplus
}
#endif
#endif /* BAGCACHE_SEQ_H */
