/*
 * src/cache/internal.h - the cache engine's private pieces.
 *
 * Files are the truth, LMDB is the coordination state:
 *   shards/START.END.bag[z]  published shards (complete Bagz files)
 *   sums/START.END.bag.crc   record checksums of .bag shards (version 2)
 *   scratch/                 shards being written (owner pid in the name)
 *   locks/                   the LMDB environment
 *   metadata.json            format version, shard length, length,
 *                            length_final, compression, user info
 *
 * LMDB databases (keys of shard numbers are 8-byte big-endian so a cursor
 * walks them in order):
 *   "shard"  shard -> shard_rec: FILLING (claimed by pid + start time) or
 *            PRESENT (bytes, last access)
 *   "sum"    shard -> checksum recorded at the first publish (kept after
 *            eviction: a regenerated shard must match it)
 *   "meta"   "bytes" (sum of PRESENT bytes), "clock" (access clock),
 *            "length" (records known), "final" (the source ended),
 *            "ready" (set once the state was built from a scan),
 *            "limit" (the disk limit every process enforces)
 */
#ifndef BC_CACHE_INTERNAL_H
#define BC_CACHE_INTERNAL_H

#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/types.h>

#include "cache/lease.h"
#include "cache/lmdb_guard.h"
#include "cache/passes.h"
#include "cache/prefetch.h"
#include "cache/readers.h"

#include "common/internal.h"

/* Version 2: uncompressed shards carry record checksums in a sidecar
 * sums/START.END.bag.crc (src/bag/crc_table.c), published with the shard.
 * Version 1 roots (no sidecars) are read and written as before. */
#define BC_CACHE_FORMAT_VERSION 2
#define BC_CACHE_FORMAT_OLDEST 1

/* ---- owners: a process identity that survives pid reuse (owner.c) ------ */

typedef struct {
  int32_t pid;
  uint64_t start_time; /* process start, in clock ticks since boot */
} bc__owner;

bc__owner bc__owner_self(void);
/* True while the process named by `o` is alive (same pid, same start). */
bool bc__owner_alive(bc__owner o);

/* ---- metadata.json (meta.c) ----------------------------------------------- */

typedef struct {
  int version;
  uint64_t shard_records; /* 0 = not decided yet */
  uint64_t length;
  bool length_final;
  bool zstd;
  int zstd_level;
  char *info_json;        /* malloc'd JSON text ("null" when none) */
  /* The source's fingerprint (any JSON, malloc'd compact text), NULL when
   * none was given: an open that gives another is refused. */
  char *fingerprint_json;
  /* The length the creator said the source has (known_length): a hint,
   * -1 when none.  The engine never trusts it; the length it finds
   * (length, length_final) is the truth. */
  int64_t length_hint;
  char *source_json;      /* malloc'd JSON text of "source", how the cache's
                             source can be run again (bc_cache_set_source_info);
                             NULL when absent (then not written) */
} bc__meta;

/* Reads ROOT/metadata.json.  BC_ENOTFOUND when absent; BC_ECORRUPT for
 * anything unreadable; BC_EVERSION for another format version. */
int bc__meta_read(const char *path, bc__meta *m);
/* Replaces it atomically (temp file, fsync, rename, fsync dir). */
int bc__meta_write(const char *path, const bc__meta *m, unsigned mode);
void bc__meta_free(bc__meta *m);
/* 0 when `json` is JSON text (*null: it is null), else BC_EINVAL naming
 * `what`. */
int bc__meta_check_json(const char *json, const char *what, bool *null);

/* ---- the shared state (state.c) ---------------------------------------- */

enum { SHARD_FILLING = 1, SHARD_PRESENT = 2 };

typedef struct {
  uint32_t state;
  uint32_t zstd;        /* the file is .bagz */
  uint64_t records;     /* PRESENT: end - start; FILLING: the bytes the
                           claim reserves under the disk limit for its
                           scratch file (publish-behind), 0 for none */
  uint64_t bytes;       /* PRESENT: file size; FILLING: the fill's token
                           (bc__filling.token), so a claim names one fill */
  uint64_t last_access; /* access clock value */
  bc__owner owner;      /* FILLING: who */
} bc__shard_rec;

#include "cache/store.h" /* the typed store over this state */
#include "cache/fills.h"   /* (its fill records name a shard record) */
#include "cache/publisher.h"

/* One LMDB environment per root per process (LMDB forbids opening an
 * environment twice in a process); shared by reference count and reopened
 * after fork. */
typedef struct bc__env bc__env;

int bc__env_acquire(bc__env **out, const char *locks_dir, unsigned mode,
                    bool *fresh);

/* validate.c: checks an LMDB data file (data.mdb) with our own bounds
 * checks before LMDB trusts it: 0 when LMDB can use it safely (or it is
 * absent or empty), BC_ECORRUPT saying what is wrong, or an I/O error.
 * `map_size`: the map size the environment is opened with.  *claims (on
 * success): the "shard" database holds an entry other than a well-formed
 * PRESENT record. */
int bc__state_validate(const char *data_path, uint64_t map_size, bool *claims);

/* The root's fill registry (fills.h), shared by the process's caches. */
bc__fill_registry *bc__env_fills(bc__env *env);
/* pthread_atfork helpers (called by the cache's handlers). */
void bc__envs_before_fork(void);
void bc__envs_after_fork(bool child);
void bc__env_release(bc__env *env);
/* Starts a transaction (the environment is reopened first in a forked
 * child).  `write`: a write transaction (one at a time across processes). */
int bc__txn_begin(bc__env *env, bool write, MDB_txn **txn);
int bc__txn_commit(MDB_txn *txn);
MDB_dbi bc__dbi_shard(bc__env *env);
/* The lease environment (lease.h) of env, and a transaction on it, begun
 * after one on the main environment with bc__txn_begin (a write one only
 * under the main one's write lock). */
const bc__lease *bc__env_lease(bc__env *env);
/* True once (for the first caller) when this process's open renewed the
 * lease directory: the first open after a reboot, whose claims, void now,
 * may have renamed files into shards/ that the state does not list
 * (bc__remove_strays removes them). */
bool bc__env_take_renewed(bc__env *env);
int bc__lease_txn_begin(bc__env *env, bool write, MDB_txn **txn);
MDB_dbi bc__dbi_sum(bc__env *env);
MDB_dbi bc__dbi_meta(bc__env *env);
/* Converts an LMDB error into a BC_E* code with a message. */
int bc__mdb_error(int rc, const char *what);

int bc__rec_get(MDB_txn *t, MDB_dbi db, uint64_t shard, bc__shard_rec *rec,
                bool *found);
/* Decodes a cursor entry of the "shard" database; false for a malformed
 * one (which cursor walks skip). */
bool bc__rec_decode(const MDB_val *key, const MDB_val *val, uint64_t *shard,
                    bc__shard_rec *rec);
int bc__rec_put(MDB_txn *t, MDB_dbi db, uint64_t shard, const bc__shard_rec *r);
int bc__rec_del(MDB_txn *t, MDB_dbi db, uint64_t shard);
int bc__u64_get(MDB_txn *t, MDB_dbi db, const char *key, uint64_t *v,
                bool *found);
int bc__u64_put(MDB_txn *t, MDB_dbi db, const char *key, uint64_t v);
int bc__sum_get(MDB_txn *t, MDB_dbi db, uint64_t shard, uint64_t *sum,
                bool *found);
int bc__sum_put(MDB_txn *t, MDB_dbi db, uint64_t shard, uint64_t sum);

/* ---- checksums of shard contents ------------------------------------------ */

/* Folds one record into a shard checksum (order-sensitive). */
static inline uint64_t bc__sum_add(uint64_t sum, const void *data, size_t n) {
  uint64_t h = bc__hash64(data, n, 0x73686172645f6373ULL);
  sum ^= h + 0x9e3779b97f4a7c15ULL + (sum << 6) + (sum >> 2);
  return sum * 0xff51afd7ed558ccdULL + (uint64_t)n;
}
#define BC__SUM_INIT 0x6263736d31ULL

/* ---- the cache object (cache.c, readers.c, fill.c, maint.c, prefetch.c) -- */

/* Access-clock bumps of shard opens waiting in a cache, at most: a full
 * list is committed at once, so opens of many distinct shards pay one disk
 * sync per this many (about 2 us each at 2.5 ms a sync). */
#define BC__ACCESS_PENDING 1024

/* Access-clock bumps of shard opens not committed yet, oldest first
 * (access.c); since_ms: when the oldest was noted.  `lock` guards it. */
typedef struct {
  pthread_mutex_t lock;
  uint64_t pending[BC__ACCESS_PENDING];
  size_t n;
  int64_t since_ms;
} bc__access_log;

/* The cache is a few sub-objects, each with its own lock and header, and
 * fields set at open and read-only after it.
 *
 * Lock order.  Each sub-object's lock is taken alone: the pass pool's
 * (passes.h), the prefetch queue's (prefetch.h), the open readers'
 * (readers.h), the access log's, and the root's fill registry's
 * (fills.h, shared by the process's caches on the root).  None is held
 * while waiting for another, nor across a source call, LMDB or file I/O
 * (taking one inside an LMDB transaction is fine).  Only the fork
 * handlers (cache.c) hold several: open_caches_lock, the environments'
 * registry and fill registries (state.c), then for each cache pool,
 * prefetch, readers, access, in that order (the registry first: it is held
 * while an environment opens, which takes LMDB's writer mutex, and a
 * publish takes the access lock under that mutex). */
struct bc_cache {
  bc_seq base; /* first: the cache is a sequence leaf */
  char *root, *shards_dir, *sums_dir, *scratch_dir, *locks_dir, *meta_path;
  bc__env *env;
  bc__store store; /* the shared state, typed (store.h); set once R is */
  bc_source src;
  bool has_source;
  bc_cache_options opts;
  unsigned mode;
  uint64_t R; /* records per shard (0: undecided, nothing cached) */
  /* metadata.json's length_hint at open (-1: none): records believed to
   * exist, for sizing publish-behind claims only (claim_with_room), never
   * for the length or a range check. */
  int64_t length_hint;
  bool zstd;
  int level;
  bool crc; /* shards are .bag with .bag.crc sidecars (format version 2) */
  bc__owner self;
  uint64_t serial;       /* unique in the process, never reused */
  _Atomic uint64_t known_length; /* records known to exist */
  atomic_bool final;             /* known_length is the exact length */
  atomic_bool stop_fills;        /* close: fills and drains end early */
  /* bc_cache_abandon_fills: close stops waiting for workers, fills stop
   * waiting for a pass (set, then each waiter's lock taken and its
   * condition broadcast). */
  atomic_bool abandon;
  struct bc_cache *next_open; /* the process's list of open caches (fork;
                                 open_caches_lock) */

  bc__pass_pool pool;          /* passes.h */
  bc__prefetch_queue prefetch; /* prefetch.h */
  bc__reader_list readers;     /* readers.h */
  bc__access_log access;
  bc__publisher publisher; /* publisher.h (publish_behind) */
  /* The publisher keeps room for one more shard under the limit
   * (opts.evict_ahead resolved at open: publish_behind, and on, or auto
   * on a file system that is not in memory). */
  bool evict_ahead;
  /* The largest shard file this process has seen (published, queued or
   * opened): what a claim reserves for publish-behind under a limit. */
  _Atomic uint64_t shard_bytes_seen;

  struct {
    atomic_uint_fast64_t shard_opens, fills, regenerations, evictions,
        passes_opened, records_skipped, records_written, waits,
        miss_ns, shards_kept;
    /* Shards served from their scratch file and not kept: no room under
     * the limit within BC__ROOM_WAIT_S (publisher.c, fill.c). */
    atomic_uint_fast64_t bypassed;
  } stats;
};

/* Paths, malloc'd (NULL when out of memory): a printf-made one; the file
 * of shard `shard` of `records` records; the checksum sidecar of shard
 * file `shard_path` (sums/NAME.crc); that of a scratch file (SCRATCH.crc,
 * in scratch/, removed with the scratch files of dead processes). */
char *bc__path_printf(const char *fmt, ...) BC__PRINTF(1, 2);
char *bc__cache_shard_path(const bc_cache *c, uint64_t shard, uint64_t records,
                           bool zstd);
char *bc__cache_crc_path(const bc_cache *c, const char *shard_path);
char *bc__scratch_crc_path(const char *scratch);

double bc__now(void);
/* A clock of a few milliseconds' resolution, cheap enough for every hit. */
double bc__coarse_now(void);
/* Opens shard file `path` (of `records` records) as this cache reads it:
 * with its checksum sidecar attached when the root has them. */
int bc__cache_open_shard(bc_cache *c, const char *path, bc_bag **out);
/* Refreshes known_length/final from the shared state (read txn `t`). */
int bc__cache_load_length(bc_cache *c, MDB_txn *t);

/* The smallest workable disk limit, in shards (cache.c): the one being
 * read, the one being filled, and those the prefetcher may fill meanwhile
 * (*prefetched: the default policy's prefetch_shards, or fill_workers for
 * a custom policy or preload_all). */
unsigned bc__limit_shards(const bc_cache_options *o, unsigned *prefetched);
/* BC_EINVAL naming the smallest workable limit, `shards` x `shard_bytes`
 * (`which`: where the shard size comes from). */
int bc__limit_error(const char *root, uint64_t limit, unsigned shards,
                    unsigned prefetched, uint64_t shard_bytes, const char *which);

/* How bc__obtain (and bc__reader_acquire) deal with work done elsewhere. */
typedef enum {
  BC__WAIT,     /* wait for another filler of the shard, and for a pass */
  BC__PREFETCH, /* skip a shard another thread or process fills (BC_EAGAIN);
                   wait for a pass */
  BC__NO_WAIT   /* BC_EAGAIN instead of any wait for another thread or
                   process: a filler of the shard, or every pass leased */
} bc__wait_mode;

/* readers.c: an open reader of shard s (filling it if needed, BC_EAGAIN as
 * `mode` says); release it when done. */
int bc__reader_acquire(bc_cache *c, uint64_t shard, bc__wait_mode mode,
                       bc__reader *out);
void bc__reader_release(bc_cache *c, bc__reader *r);
/* Counts n records more served from an open shard by this thread (the
 * stats' hits): a read of n records through one acquire counts n - 1 here,
 * as n single reads would count them. */
void bc__reader_count_hits(bc_cache *c, uint64_t n);
/* read_into.c: the cache's bc_seq_ops.read_into (rows shard by shard). */
int bc__cache_read_into(bc_seq *self, const uint64_t *indices, const size_t *rows,
                        size_t count, void *dst, size_t size, int max_parallelism);
/* Releases a reader whose shard was found damaged by a read, and drops it
 * from its slot so the next read opens the shard's file anew. */
void bc__reader_discard(bc_cache *c, bc__reader *r);
void bc__readers_close_all(bc_cache *c);
/* Reads served from open readers, summed over the threads' records. */
uint64_t bc__readers_hits(bc_cache *c);
/* Readers in the open list now (not counting dropped ones still in use). */
size_t bc__readers_open_count(bc_cache *c);
/* Drops this process's readers of shards that were just evicted, so their
 * unlinked files are closed (and their disk space freed) as soon as they
 * are unused. */
void bc__readers_forget(bc_cache *c, const uint64_t *shards, size_t n);

/* access.c: the access-clock bumps of shard opens, batched (see there).
 * note: shard was opened (its bump is committed later, within about a
 * second while opens go on); apply: commits the pending bumps in write
 * transaction t, whose caller reads and writes the "clock" value *clock;
 * flush: commits them in a transaction of its own. */
void bc__access_note(bc_cache *c, uint64_t shard);
int bc__access_apply(bc_cache *c, bc__store_txn *t, uint64_t *clock);
void bc__access_flush(bc_cache *c);

/* fill.c: makes shard s PRESENT (filling, waiting for another filler, or
 * taking over a dead one's claim) and returns its state.  BC_ERANGE when
 * the source ends before the shard's first record; BC_EAGAIN as `mode`
 * says. */
int bc__obtain(bc_cache *c, uint64_t shard, bc__wait_mode mode, bc__shard_rec *rec);
/* bc__obtain for a reader: *scratch (malloc'd) names the file to open
 * when the shard is readable from its scratch file while its publish is
 * queued (publish-behind), NULL when it is PRESENT (open its shard file);
 * *bag (when bag is not NULL) is a reader of that file already open when
 * this very call filled the shard (then *scratch is NULL).
 * Returns a publish failure not reported yet first (publisher.h). */
int bc__obtain_scratch(bc_cache *c, uint64_t shard, bc__wait_mode mode,
                       bc__shard_rec *rec, char **scratch, bc_bag **bag);
/* A fill record's end, by the publisher (its publish ended) or the
 * appender (its shard ended): done with rc (0, or a failure whose message
 * is the thread's), no longer readable from its scratch file, waiters
 * woken; drops the caller's reference. */
void bc__fill_done(bc_cache *c, bc__filling *f, int rc);
/* fsyncs the data of a scratch file written without a sync, and of its
 * sidecar. */
int bc__fill_sync_scratch(bc_cache *c, const char *scratch);
/* Ascending positions of this process's idle passes (eviction's cost
 * model; none for a seekable source), at most max. */
size_t bc__pass_positions(bc_cache *c, uint64_t *pos, size_t max);
/* The pending access-clock bumps, as a publish request's `bump`. */
int bc__access_bump(void *cache, const bc__store *s, bc__store_txn *t,
                    uint64_t *clock);
/* Forgets shard `shard` (unlinks it, drops its state) so it is refilled, if
 * its file is still `bad` (a read found that file damaged, unreadable, or,
 * with {0, 0}, missing) or is gone; a file published since (another thread
 * or process regenerated the shard already) is kept. */
int bc__forget_shard(bc_cache *c, uint64_t shard, const bc__file_id *bad);
/* Drains the source to its end (known_length becomes final), with the fill
 * workers joining in when there are several.  `from_start`: also fill every
 * missing shard before the known length (fill_all); otherwise start at the
 * first shard not known to exist (len). */
int bc__drain(bc_cache *c, bool from_start);
/* One participant's share of a drain (used by the workers), between
 * bc__drain_join(c, true) and bc__drain_join(c, false). */
int bc__drain_loop(bc_cache *c, bool worker);
void bc__drain_join(bc_cache *c, bool join);
void bc__passes_close_all(bc_cache *c);

/* maint.c */
typedef struct {
  size_t files;           /* shard files found (0: nothing inferred) */
  uint64_t shard_records; /* R */
  bool zstd;
  uint64_t length;        /* the highest end: a lower bound */
  bool crc;               /* every .bag file has its .bag.crc sidecar */
} bc__layout;
int bc__infer_layout(bc_cache *c, bc__layout *out);
/* Removes every file of shard `shard` from shards/ (whatever its end). */
void bc__unlink_shard_files(bc_cache *c, uint64_t shard);
int bc__rebuild_state(bc_cache *c);
/* Removes the files of shards/ (and sums/) whose shard is neither PRESENT
 * nor claimed by a live filler, under the state's write lock: a root
 * being cleared, or the first open after a reboot (bc__env_take_renewed). */
int bc__remove_strays(bc_cache *c);
void bc__clean_scratch(bc_cache *c);
int bc__estimate_shard_records(bc_cache *c, uint64_t *records);

/* prefetch.c */
int bc__workers_start(bc_cache *c);
void bc__workers_stop(bc_cache *c);
void bc__prefetch_after(bc_cache *c, uint64_t index);

#endif /* BC_CACHE_INTERNAL_H */
