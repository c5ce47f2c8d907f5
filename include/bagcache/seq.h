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

/* Version 2 added `read_into`, version 3 `partition`; tables of an older
 * version (which end before the members it lacks) are still accepted. */
#define BC_SEQ_OPS_VERSION 3

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
  /* Optional (version >= 3): the partition holding `index`, [*start,
   * *end) with *start <= index < *end: a run of consecutive indices that
   * is read together best (a leaf: one shard; a view: see each view's
   * constructor).  Every index of a partition must answer the same range.
   * *end may pass the sequence's end (then the end bounds the partition):
   * UINT64_MAX when the partition runs to wherever the sequence ends.
   * `index` is below the length when it is known; a sequence whose end is
   * not known yet answers for any index (the partition that index will be
   * in, if the sequence reaches it).  NULL (or a table of version < 3):
   * the whole sequence is one partition.  See bc_seq_partition. */
  int (*partition)(bc_seq *self, uint64_t index, uint64_t *start,
                   uint64_t *end);
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

/* A foreign leaf: length and get are callbacks with a payload.  Versioned:
 * initialize with BC_CALLBACK_SEQ_OPTIONS_INIT or
 * bc_callback_seq_options_init(), then set get (required) and the rest. */
#define BC_CALLBACK_SEQ_OPTIONS_VERSION 1

typedef struct bc_callback_seq_options {
  /* BC_CALLBACK_SEQ_OPTIONS_VERSION: set by BC_CALLBACK_SEQ_OPTIONS_INIT and
   * bc_callback_seq_options_init(); a function given another version returns
   * BC_EINVAL (a struct of another library version). */
  unsigned version;
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

#define BC_CALLBACK_SEQ_OPTIONS_INIT \
  {BC_CALLBACK_SEQ_OPTIONS_VERSION, NULL, {BC_LEN_EXACT, 0}, NULL, NULL, NULL, false}

/* Sets *opts to BC_CALLBACK_SEQ_OPTIONS_INIT; BC_EINVAL unless `version`
 * is BC_CALLBACK_SEQ_OPTIONS_VERSION. */
int bc_callback_seq_options_init(bc_callback_seq_options *opts, unsigned version);

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

/* ---- partitions ----------------------------------------------------- */

/* Partitions are runs of consecutive indices that are read together best:
 * a sequence's natural partitions tile it, in order, with no gaps.  They
 * come from the leaves (bc_seq_ops.partition) and are mapped by the views:
 *   bag set       one partition per shard file (empty shards have none).
 *   cache         one per shard: [k * R, (k + 1) * R) for the cache's
 *                 max_shard_length R, the last one ending at the length.
 *                 The boundaries are fixed when the cache is opened (R is
 *                 in its metadata), so they are known for any index before
 *                 the length is final; only where the last partition ends
 *                 waits for the source's end (bc_seq_partitions settles
 *                 it).  A cache with nothing cached and no source is one
 *                 partition.
 *   foreign leaf  (bc_seq_new_callbacks, or ops without `partition`): one.
 *   slice         the child's partitions that hold its elements, each
 *                 cut to the elements it holds (any step: a partition of
 *                 the slice is the run of its elements that fall into one
 *                 partition of the child; a negative step walks them in
 *                 reverse).
 *   take, map     one partition: their indices are arbitrary, so no run
 *                 of them is more local than another (bc_seq_partitions
 *                 still splits them evenly).
 *   concat        every part's partitions, one after another (a part
 *                 boundary is always a partition boundary).
 *   interleave    one partition (consecutive elements come from
 *                 different parts).
 *   repeat        the child's partitions, again in every repetition.
 *   chunk_shuffle the child's partition boundaries, each moved up to the
 *                 next run boundary (a multiple of chunk_size), duplicates
 *                 dropped: a run is never split, so each partition is a
 *                 union of whole runs and holds exactly the child's
 *                 elements of the same range.  A shuffle (one run) is one
 *                 partition.
 * These rules compose: a slice of a concat of bag sets has the bag
 * shards' boundaries, mapped. */

/* The natural partition holding `index` (negative counts from the end, as
 * bc_seq_get): [*start, *stop), cut to the length where it is known (a
 * sequence whose end is not known yet may answer a stop past its current
 * lower bound, or UINT64_MAX).  BC_ERANGE outside the sequence; BC_EINVAL
 * when a sequence's partition op answers a range that does not hold the
 * index. */
int bc_seq_partition(bc_seq *seq, int64_t index, uint64_t *start,
                     uint64_t *stop);

/* Contiguous ranges tiling [0, length): range k is
 * [bounds[k], bounds[k + 1]) for k < count (bounds has count + 1 entries,
 * bounds[0] = 0, bounds[count] = the length; count is 0 for an empty
 * sequence).  Release with bc_partitions_free. */
typedef struct bc_partitions {
  size_t count;
  uint64_t *bounds;
} bc_partitions;

/* Splits seq into about target_count contiguous ranges along its natural
 * partitions.  The exact length is settled first (a cache still filling
 * drains its source; BC_EINFINITE for an endless sequence).
 *   target_count 0: the natural partitions themselves, in order (one op
 *   call per partition).
 *   target_count T > 0, length N: the cut points are c_k = floor(k N / T)
 *   for k = 1 .. T-1.  Each moves to the nearer end of the natural
 *   partition holding it when that end is closer than half a target size
 *   (2 T |end - c_k| < N; a tie between the two ends goes to the lower),
 *   and otherwise stays where it is (a partition larger than the target
 *   size is split at the even points).  Cuts at 0 or N and repeated cuts
 *   are dropped.  So the result has at most T ranges (fewer when N < T or
 *   when two cuts move to one boundary), none empty; natural partitions
 *   smaller than half the target size are merged with their neighbours;
 *   and the natural boundaries are kept wherever they lie near an even
 *   cut (equal shards and T = their count, or a divisor of it, gives the
 *   shards exactly).  Costs T - 1 partition lookups, whatever the number
 *   of natural partitions.
 * On success *out holds the ranges; on failure it is left empty (count 0,
 * bounds NULL). */
int bc_seq_partitions(bc_seq *seq, size_t target_count, bc_partitions *out);

/* Frees the bounds and empties *p.  NULL is fine. */
void bc_partitions_free(bc_partitions *p);

/* ---- epoch orders ---------------------------------------------------- */

/* The index orders of training loops, as pure functions of their
 * arguments: every rank of a data-parallel job computes its own share of
 * an epoch, and a job resumes at any position, with nothing stored.
 * Thread-safe; no memory allocated; O(1) work per index. */

/* The seed of epoch `epoch`'s permutation in a run seeded `seed`:
 * splitmix64's finaliser of seed + 0x9E3779B97F4A7C15 * (epoch + 1)
 * (mod 2^64); bagcache.train.Sampler.epoch_seed. */
uint64_t bc_epoch_seed(uint64_t seed, uint64_t epoch);

/* out[k] = element start + k * stride of bc_seq_shuffle(range(n), seed),
 * for k < count, computed without making a sequence (the same keyed
 * bijection).  Every position must be below n: BC_ERANGE otherwise
 * (stride 0 with count > 1 too), and out is then unchanged. */
int bc_shuffle_indices(uint64_t n, uint64_t seed, uint64_t start,
                       uint64_t stride, size_t count, int64_t *out);

/* out[k] = a uniform draw from [0, n) at stream position
 * start + k * stride, for k < count: a counter-based generator keyed by
 * seed (splitmix64 words, Lemire's multiply-shift with rejection, so
 * exactly uniform), so any position is computable alone.  Positions wrap
 * modulo 2^64.  BC_EINVAL for n = 0 with count > 0. */
int bc_iid_indices(uint64_t n, uint64_t seed, uint64_t start, uint64_t stride,
                   size_t count, int64_t *out);

/* One rank's share of one epoch over [0, length).  Versioned: initialise
 * with BC_EPOCH_ORDER_INIT or bc_epoch_order_init(), then set the fields.
 *
 * The epoch's order is a permutation of [0, length): with shuffle,
 * position p holds bc_shuffle_indices(length, bc_epoch_seed(seed, epoch),
 * p, ...), a different permutation every epoch; without it, p itself.
 * Positions before `start` were used already (a resumed epoch: `start` is
 * the number of positions that every rank together consumed, the
 * `consumed` of bagcache.train's state); the rest, start .. end - 1, are
 * dealt round-robin: rank r takes positions start + r, start + r + W,
 * start + r + 2W, ... below end (W = world_size).  end is the length, or
 * with drop_last, start + floor((length - start) / W) * W, so that every
 * rank takes the same number.  Nothing is ever padded or repeated: without
 * drop_last ranks below (length - start) mod W take one index more than
 * the others, and the ranks' shares together are exactly the positions
 * start .. end - 1, each once.  So a rank's indices do not depend on how
 * it batches them (bagcache.train's EPOCH loader gives rank r, batch after
 * batch, exactly these indices), and a job may resume on another world
 * size: the positions consumed stay consumed. */
#define BC_EPOCH_ORDER_VERSION 1

typedef struct bc_epoch_order {
  /* BC_EPOCH_ORDER_VERSION: set by BC_EPOCH_ORDER_INIT and
   * bc_epoch_order_init(); another version is BC_EINVAL. */
  unsigned version;
  uint64_t length;     /* the number of samples; default 0 */
  uint64_t seed;       /* the run's seed; default 0 */
  uint64_t epoch;      /* default 0 */
  bool shuffle;        /* default true */
  uint64_t rank;       /* below world_size; default 0 */
  uint64_t world_size; /* >= 1; default 1 */
  uint64_t start;      /* positions already consumed, <= length; default 0 */
  bool drop_last;      /* default false */
} bc_epoch_order;

#define BC_EPOCH_ORDER_INIT \
  {BC_EPOCH_ORDER_VERSION, 0, 0, 0, true, 0, 1, 0, false}

/* Sets *o to BC_EPOCH_ORDER_INIT; BC_EINVAL unless `version` is
 * BC_EPOCH_ORDER_VERSION. */
int bc_epoch_order_init(bc_epoch_order *o, unsigned version);

/* The number of indices rank `rank` takes: len(range(start + rank, end,
 * world_size)).  BC_EINVAL for a bad order (another version, world_size
 * 0, rank >= world_size, start > length). */
int bc_epoch_order_count(const bc_epoch_order *o, uint64_t *count);

/* The rank's indices number first .. first + count - 1 (of the
 * bc_epoch_order_count it takes) into out[0 .. count).  BC_EINVAL as
 * bc_epoch_order_count; BC_ERANGE when first + count passes the rank's
 * count.  out is unchanged on failure. */
int bc_epoch_order_indices(const bc_epoch_order *o, uint64_t first,
                           size_t count, int64_t *out);

/* ---- read-ahead iteration ------------------------------------------- */

typedef struct bc_readahead bc_readahead;

/* An index stream: stores the next index and returns 1, returns 0 at the
 * end, or a negative BC_E* code (with bc_set_errmsg) on failure.  Called
 * only from bc_readahead_next, in the consumer's thread. */
typedef int (*bc_index_stream_fn)(void *payload, uint64_t *index);

/* Versioned: initialize with BC_READAHEAD_OPTIONS_INIT or
 * bc_readahead_options_init(); NULL options mean the defaults. */
#define BC_READAHEAD_OPTIONS_VERSION 1

typedef struct bc_readahead_options {
  /* BC_READAHEAD_OPTIONS_VERSION: set by BC_READAHEAD_OPTIONS_INIT and
   * bc_readahead_options_init(); a function given another version returns
   * BC_EINVAL (a struct of another library version). */
  unsigned version;
  size_t window; /* records kept in flight or ready (>= 1); default 1024.
                    Memory is window x record size.  Small windows cost CPU:
                    threads hand over work once per quarter window */
  int threads;   /* worker threads fetching them (>= 1); default 2 */
} bc_readahead_options;

#define BC_READAHEAD_OPTIONS_INIT {BC_READAHEAD_OPTIONS_VERSION, 1024, 2}

/* Sets *opts to BC_READAHEAD_OPTIONS_INIT; BC_EINVAL unless `version` is
 * BC_READAHEAD_OPTIONS_VERSION. */
int bc_readahead_options_init(bc_readahead_options *opts, unsigned version);

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
