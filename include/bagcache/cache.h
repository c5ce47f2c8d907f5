/*
 * bagcache/cache.h - the cache engine: drain a slow sequential source into
 * Bagz shards on disk, under an optional disk limit, shared by many threads
 * and processes, and read it back as a random-access sequence.
 *
 * A cache lives in a root directory:
 *   ROOT/metadata.json   format version, shard length, length (a lower bound
 *                        until length_final), compression, user info
 *   ROOT/shards/START.END.bag[z]   each a standalone Bagz file holding
 *                        records [START, END)
 *   ROOT/locks/          LMDB: shard states, claims, access clock, bytes
 *   ROOT/scratch/        shards being written
 * doc/cache.md explains the life of a shard and the locking protocol.
 *
 * Ownership: bc_cache_open() returns a cache the caller closes with
 * bc_cache_close().  bc_cache_seq() gives the cache as a bc_seq (borrowed);
 * take a reference (bc_seq_ref) to keep it, or to build views: views hold
 * their own references, so the cache lives until the last one is dropped.
 *
 * Thread safety: every function may be called from any thread at once on
 * one cache, except bc_cache_close: no call through this handle may be
 * running or start after it.  References taken with bc_seq_ref (and views)
 * stay valid after close: reads through them still work, filling on demand
 * (the background workers are gone).  Many
 * processes may open one root at once.  The source's callbacks are never
 * called with a bagcache lock held.
 */
#ifndef BAGCACHE_CACHE_H
#define BAGCACHE_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bag.h"
#include "seq.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the source ------------------------------------------------------ */

/* 2 adds open_at.  A source of version 1 (the struct without open_at, as
 * compiled against the headers before it) is still accepted: the cache
 * reads only the fields its version has. */
#define BC_SOURCE_VERSION 2

/* A deterministic sequential source, read in passes from the start (or,
 * with open_at, from any record).  Every callback returns 0 (or 1 where
 * noted) on success, or a negative BC_E* code with bc_set_errmsg() (the
 * message, and a payload set with bc_error_set_payload, reach whoever
 * needed the record).  BC_EAGAIN from a callback says this pass cannot go
 * on: a fill that waits is started again with a new pass (a source must
 * not say it again and again).  A callback that runs long loops may poll
 * the thread's interrupt handler with bc_check_interrupt(). */
typedef struct bc_source {
  unsigned version; /* BC_SOURCE_VERSION */
  /* Opens a fresh pass from the first record; *pass is passed back below. */
  int (*open)(void *payload, void **pass);
  /* The next record into out: 1 = a record, 0 = the end of the source. */
  int (*next)(void *payload, void *pass, bc_buf *out);
  /* Optional (NULL: records are read and dropped): skips up to n records
   * cheaply, storing how many were skipped (fewer means the source ended). */
  int (*skip)(void *payload, void *pass, uint64_t n, uint64_t *skipped);
  /* Ends a pass (also an unfinished one).  Required. */
  void (*close)(void *payload, void *pass);
  /* Called once when the cache no longer needs the payload.  May be NULL. */
  void (*free_payload)(void *payload);
  void *payload;
  /* true: several passes may run at once, on different threads (only then
   * does the cache use more than one fill worker).  false: the cache may
   * still keep several passes open (parked where they stopped, up to
   * max_passes), but calls into one pass at a time. */
  bool thread_safe;
  /* Version 2, optional (NULL: the source is read from its start only).
   * Opens a pass whose first record is record `start` (a seekable source:
   * a file read by offset, a list of URLs, a database cursor).  It must
   * give exactly the records a pass from the start gives from `start` on:
   * regenerated shards are checked as any others (BC_ENONDET, naming the
   * start asked for).  A `start` at or past the end gives a pass that ends
   * at once. */
  int (*open_at)(void *payload, uint64_t start, void **pass);
} bc_source;

/* ---- options --------------------------------------------------------- */

/* Decides what to fill next: called when this process opens a shard (not on
 * every record), with `index` the shard's first record; stores up to `max`
 * shard numbers in shards[] and returns how many.  Called with no lock
 * held, from the thread that opened the shard. */
typedef size_t (*bc_prefetch_fn)(void *payload, uint64_t index,
                                 uint64_t shard_records, uint64_t *shards,
                                 size_t max);

/* The most records per shard: metadata.json holds the shard length as a
 * JSON integer, which is signed 64-bit (and an index never reaches past
 * it).  Larger values are BC_EINVAL. */
#define BC_CACHE_MAX_SHARD_RECORDS ((uint64_t)INT64_MAX)

/* The most fill workers a cache runs (fill_workers above it is lowered to
 * it, with a notice): each is a thread with its own pass over the source. */
#define BC_CACHE_MAX_FILL_WORKERS 256

/* disk_limit: no limit, and none stored for the processes that follow. */
#define BC_CACHE_NO_LIMIT UINT64_MAX

/* Versioned: initialize with BC_CACHE_OPTIONS_INIT or
 * bc_cache_options_init(); NULL options mean the defaults. */
#define BC_CACHE_OPTIONS_VERSION 4 /* (1: up to max_passes; 2: up to publish_behind;
                                       3: up to evict_ahead) */

typedef struct bc_cache_options {
  /* BC_CACHE_OPTIONS_VERSION: set by BC_CACHE_OPTIONS_INIT and
   * bc_cache_options_init(); a function given another version returns
   * BC_EINVAL (a struct of another library version). */
  unsigned version;
  /* Records per shard.  0: derive it from shard_bytes, estimated from the
   * first records of the source, and recorded once in metadata.json. */
  uint64_t shard_records;
  uint64_t shard_bytes;   /* target shard size when shard_records is 0;
                             0 = 64 MiB */
  int max_open_shards;    /* shard readers kept open per process; 0 = 128 */
  int fill_workers;       /* background fill threads; 0 = 1.  More than one
                             needs a thread-safe source (else BC_EINVAL);
                             ignored without a source (nothing to fill).
                             More than BC_CACHE_MAX_FILL_WORKERS runs that
                             many, with a notice */
  uint64_t disk_limit;    /* bytes in shards/ at most; 0 = the limit stored
                             in the root by an earlier open, or none.  A
                             non-zero limit is stored in the root's shared
                             state and enforced by every process;
                             BC_CACHE_NO_LIMIT removes the stored one */
  bc_compression compression; /* NONE (.bag) or ZSTD (.bagz); AUTO (the
                                 default): an existing root's, none for a
                                 new root */
  int zstd_level;         /* with ZSTD; 0 = zstd's default (3) */
  /* When a shard is opened, fill what this returns next (no lock held).
   * NULL: the next prefetch_shards shards after the opened one. */
  bc_prefetch_fn prefetch;
  void *prefetch_payload;
  int prefetch_shards;    /* for the default policy; 0 = 1, -1 = none.
                             With a custom `prefetch`, the most shards it
                             fills ahead (-1: none; 0: not stated, taken
                             as fill_workers): only the smallest workable
                             disk limit uses it */
  bool preload_all;       /* drain the whole source in the background */
  const char *info_json;  /* user info (any JSON text) for metadata.json;
                             NULL keeps what is there */
  /* The source's length if known, else -1: a hint, stored with a new root
   * (metadata.json's "length_hint", bc_cache_length_hint) for callers to
   * use until the length is found (the Python binding's len()).  The
   * engine never takes it for the length: the source ending before it or
   * going on past it is not an error. */
  int64_t known_length;
  unsigned file_mode;     /* mode of created files; 0 = 0644 */
  /* Create the root's missing parent directories too (as mkdir -p), each
   * like the root itself (mode 0755 less the umask).  false: a missing
   * parent is BC_ENOTFOUND. */
  bool make_parents;
  /* Source passes this process keeps open, parked where their last fill
   * stopped, so that a regeneration starts from the nearest one at or
   * before the shard instead of from record 0; 0 = 64 (at least
   * fill_workers + 1 with a thread-safe source). */
  int max_passes;
  /* Publish-behind (default true): a shard a read misses is served from
   * its complete scratch file at once, and its durable publish (fsyncs,
   * renames, the commit) is left to a background thread that publishes
   * what is queued in one transaction (doc/cache.md, "Publish-behind").
   * false: every fill publishes before its read returns.  Options of
   * version 1 have it on. */
  bool publish_behind;
  /* Evicting ahead, under a disk limit with publish_behind: the
   * background publisher also evicts, in its transaction, until the limit
   * has room for one more shard, so that the next miss's claim finds room
   * without removing files on the read path (doc/cache.md, "Evicting
   * ahead"); the disk then holds one shard fewer.  1 on, -1 off, 0 (the
   * default, and options of version 1 and 2) auto: on unless the root is
   * on a memory file system (tmpfs, ramfs), where removing a file costs
   * about nothing and the shard of room costs hits. */
  int evict_ahead;
  /* The source's fingerprint: any JSON text (a version string, a hash of
   * the preprocessing's configuration), or NULL for no check.  A new root
   * stores it in metadata.json ("fingerprint"), as does an existing root
   * without one; a root holding another (not an equal JSON value) is
   * refused with BC_ENONDET, since its records came from another source.
   * Not JSON: BC_EINVAL.  Options of version 1 to 3 have none. */
  const char *fingerprint_json;
} bc_cache_options;

#define BC_CACHE_OPTIONS_INIT \
  {BC_CACHE_OPTIONS_VERSION, 0, 0, 0, 0, 0, BC_COMPRESSION_AUTO, 0, NULL, \
   NULL, 0, false, NULL, -1, 0, false, 0, true, 0, NULL}

/* Sets *opts to BC_CACHE_OPTIONS_INIT; BC_EINVAL unless `version` is
 * BC_CACHE_OPTIONS_VERSION. */
int bc_cache_options_init(bc_cache_options *opts, unsigned version);

/* ---- opening and reading ---------------------------------------------- */

typedef struct bc_cache bc_cache;

/* Opens (creating if needed) the cache at `root`.  `source` may be NULL:
 * the cache then serves what is cached, and a request for anything else is
 * BC_ENOTCACHED.  The source struct is copied; its payload is the cache's
 * from now on (free_payload is called at the end, also when this fails).
 * An existing root keeps the shard length and compression of its
 * metadata.json (a notice says so when shard_records or compression were
 * given, not left at 0 and AUTO, and differ).
 * Errors: BC_EINVAL (options; the root or, with make_parents, one of its
 * parents exists and is not a directory), BC_ENOTFOUND (a parent of the
 * root is missing, without make_parents), BC_ECORRUPT (metadata.json
 * unreadable), BC_EVERSION (another format version), BC_EIO, BC_EPERM,
 * BC_ENOSPC. */
int bc_cache_open(bc_cache **out, const char *root, const bc_source *source,
                  const bc_cache_options *opts);

/* Stops the background workers (their fills end at the next record) and
 * drops this handle's reference to the sequence; files are closed when the
 * last reference goes (views keep it alive).  NULL is fine.  It waits for
 * the workers: one stuck in the source (a next() that does not return)
 * keeps it waiting until bc_cache_abandon_fills() is called from another
 * thread. */
void bc_cache_close(bc_cache *cache);

/* Waits until every shard this cache object queued for publishing
 * (publish_behind) is published, and returns the first publish that
 * failed since the last call that returned one (BC_ENOSPC, BC_EIO, ...:
 * the records served were right, the shard was not kept).  0 when all
 * went well or nothing was queued.  An interrupt of the wait
 * (bc_set_interrupt_handler) returns its code. */
int bc_cache_sync(bc_cache *cache);

/* Gives up on the fills this cache object's threads are doing (the
 * background workers' and the callers'), for shutting down when one may
 * be stuck in the source.  Each is abandoned: its claim on the shard is
 * dropped at once (other threads and processes may fill the shard), its
 * waiters are woken (BC_ECLOSED for those of a closing cache object; the
 * others fill the shard themselves), and a bc_cache_close waiting for a
 * worker returns.  The thread doing an abandoned fill is not stopped (no
 * thread can be stopped inside the source): it stays where it is, keeping
 * its reference to the cache (so the memory, open files and shared state
 * the cache uses stay until then), and when the source returns, its fill
 * fails (BC_ECLOSED) without publishing anything, removes its scratch file
 * and ends.  Such a worker does not keep the process from exiting.
 * It first gives them up to `wait_ms` milliseconds to end on their own
 * (fills end at their next record while the cache closes).  Returns the
 * number of fills abandoned.  Thread-safe; call it on a cache the caller
 * keeps alive (a reference of its own if bc_cache_close may run
 * meanwhile). */
int bc_cache_abandon_fills(bc_cache *cache, int wait_ms);

/* The cache as a sequence (borrowed; bc_seq_ref to keep).  Its length is a
 * lower bound until the source has ended; bc_seq_len drains to the end.
 * Reading an index past the end is BC_ERANGE. */
bc_seq *bc_cache_seq(bc_cache *cache);

/* The cache behind a sequence from bc_cache_seq, or NULL for any other
 * sequence (a view of a cache included).  Borrowed. */
bc_cache *bc_seq_cache(bc_seq *seq);

/* Shorthands for bc_seq_get / bc_seq_len on the cache. */
int bc_cache_get(bc_cache *cache, int64_t index, bc_buf *out);
int bc_cache_len(bc_cache *cache, uint64_t *len);

/* bc_cache_get that never waits for work another thread or process is
 * doing: where bc_cache_get would wait for a fill of the record's shard made
 * elsewhere, for a pass over the source that other fills hold, or (for a
 * negative index) for the end of the source, it returns BC_EAGAIN at once.
 * A shard nobody is filling is filled by the calling thread, as
 * bc_cache_get does.  For callers that must stay responsive (an
 * interpreter's main thread): try here, and wait somewhere interruptible
 * on BC_EAGAIN. */
int bc_cache_try_get(bc_cache *cache, int64_t index, bc_buf *out);

/* bc_cache_try_get of many records, read on the worker pool: outs[p] gets
 * record indices[p] (buffers reused, as bc_seq_get_many).  BC_EAGAIN when
 * any of them would wait; on failure the error is that of the first
 * failing position in request order ("indices[P] = I: ..."), and the
 * contents of outs are unspecified (still valid buffers to release). */
int bc_cache_try_get_many(bc_cache *cache, const int64_t *indices, size_t count,
                          bc_buf *outs);

/* Fills every missing shard and drains the source to its end, waiting
 * until it is done.  Under a disk limit only the drain to the end is done
 * (what the limit evicts stays evicted).  Without a source: 0 if the end is
 * known and every shard is present, else BC_ENOTCACHED. */
int bc_cache_fill_all(bc_cache *cache);

/* Makes the length final where the cached records end: at the end of the
 * last shard present (0 if none), which cuts the sequence short there
 * (loadit's finalize()).  Records past that point are out of range from
 * then on, for every process (a fill past that point that is running at
 * that moment fails to publish, as a source going past its end would).
 * Nothing happens when the length is final already. */
int bc_cache_finalize(bc_cache *cache);

/* ---- appending (write-through) ------------------------------------------ */

/* An appender hands a stream's records to the cache once, in order, as
 * they are produced (a producer that cannot be re-run: a pipe, a loop's
 * first pass), and publishes each shard as soon as its last record is
 * appended, through the same claim, publish, determinism and disk-limit
 * rules as a fill from the source (doc/cache.md, "Appending").
 *
 * - It always starts at record 0.  A shard the root holds already is not
 *   written again: the records appended for it are checked against the
 *   checksum recorded at its first publish (or against the file, where no
 *   checksum was recorded); a difference, or a stream that ends before or
 *   goes past a known end, is BC_ENONDET.  So appending the same stream to
 *   a complete root only verifies it, and appending to a root filled in
 *   part (or evicted in part) fills in what is missing.
 * - Claims decide between writers: a shard another thread or process is
 *   filling (another appender, a fill from the source) is written to
 *   scratch/ all the same; when its last record is appended the appender
 *   waits for that filler, then checks its records against the published
 *   shard, or publishes its own if the other fill failed or died (a dead
 *   claimant's claim is taken over).
 * - Readers: with a source, a record of the shard being appended waits
 *   for its publish (as for any fill in progress), and a record of a later
 *   shard is filled from the source (claims decide, as above).  Without a
 *   source, a record not published yet is BC_ENOTCACHED at once ("...
 *   not cached and the cache has no source"), also one of the shard being
 *   appended: nothing waits for an appender that may never come.
 *
 * An appender is used by one thread at a time.  It keeps a reference to
 * the cache's sequence, so it stays usable after bc_cache_close.  It
 * belongs to the process that opened it: in a child after fork(), append
 * and close return BC_EINVAL, and close and discard leave it alone (the
 * child's copy leaks; the parent's claims, files and threads are not the
 * child's to touch). */
typedef struct bc_appender bc_appender;

#define BC_APPENDER_OPTIONS_VERSION 2 /* (1: up to publish_behind) */

/* The write-behind queue's size when behind_bytes is 0. */
#define BC_APPENDER_BEHIND_BYTES_DEFAULT ((size_t)1 << 20)

typedef struct bc_appender_options {
  unsigned version; /* BC_APPENDER_OPTIONS_VERSION */
  /* Claim each shard only when its last record has been appended (or at
   * close), instead of when its first one is.  Until then nobody waits
   * for the appender: a reader of the shard in progress fills it from the
   * source (without a source: BC_ENOTCACHED), and the appender checks its
   * records against that shard at the end.  For a producer that readers
   * of the cache may themselves be waiting on (a loop whose body reads the
   * shard it is producing, a thread the producer waits for): no deadlock,
   * at the cost of a second pass over the source for such a read. */
  bool claim_late;
  /* Publish each completed shard on a thread of its own while the next
   * one is appended (one at a time: the append that completes the next
   * shard first waits for it), so that the producer does not wait for the
   * syncs of a publish.  A publish's failure is returned by the next
   * append that completes a shard, or by close; close and discard wait
   * for it (a complete shard is published also by discard). */
  bool publish_behind;
  /* Write behind: append copies the record into a queue of behind_bytes
   * (0: BC_APPENDER_BEHIND_BYTES_DEFAULT; a longer record grows it to its
   * size) and returns; a thread of the appender writes, checksums and
   * publishes the records in order, with the same bytes, claims and
   * checks as without it (so the producer's thread pays a copy, and the
   * writing runs meanwhile).  When the queue is full, append waits for
   * room.  A failure of that thread is returned by the next append (it
   * is final, as any failure) and by close.  The caller's interrupt
   * handler stops append's, close's and discard's waits (BC_ECANCELED,
   * final) and the thread's own waits with them.  A shard is claimed
   * when the thread comes to its first record and published when it
   * comes to its last one (soon after the append: the thread is woken at
   * the end of each shard), so between the append and then, readers see
   * the shard as not filled yet (as with claim_late).  close waits until
   * everything queued is published; discard publishes the complete
   * shards queued (they would have been published without write-behind)
   * and drops the rest.  With publish_behind too, the thread hands each
   * completed shard to a publisher thread as described above.  Without a
   * thread (pthread_create failed) the appender works without it. */
  bool write_behind;
  size_t behind_bytes;
} bc_appender_options;

#define BC_APPENDER_OPTIONS_INIT \
  {BC_APPENDER_OPTIONS_VERSION, false, false, false, 0}

/* Starts appending at record 0 (opts NULL: the defaults).  BC_EINVAL when
 * the cache's shard length is not decided yet (a new root opened without
 * a source and without shard_records: see
 * bc_cache_estimate_shard_records), or for options of an unknown version. */
int bc_cache_appender_open(bc_appender **out, bc_cache *cache,
                           const bc_appender_options *opts);

/* Appends the next record (copied).  When it completes a shard, the shard
 * is published before this returns (evicting under the disk limit), or
 * with publish_behind handed to a thread that publishes it, or with
 * write_behind queued for the appender's thread.
 * A failure (BC_ENONDET, BC_ENOSPC, BC_EIO, BC_ECLOSED when the fill was
 * abandoned ...) is final: the appender then only discards (close returns
 * the failure again, publishing nothing more). */
int bc_appender_append(bc_appender *a, const void *data, size_t size);

/* Appends the record if that needs no wait: BC_EAGAIN (nothing appended;
 * not a failure) when it would wait, that is with write_behind when the
 * queue has no room for it, and without when the record starts or ends a
 * shard (a claim, a publish).  For a caller that must give something up
 * around a wait (an interpreter lock): try, then append. */
int bc_appender_try_append(bc_appender *a, const void *data, size_t size);

/* The stream has ended: publishes the partial last shard, makes the length
 * final (bc_appender_count()), and frees the appender (also on failure).
 * When it returns 0 everything appended is on disk (under the limit: what
 * the limit kept) and the cache's length is final, for every process; a
 * process may exit right after.  NULL is fine (0). */
int bc_appender_close(bc_appender *a);

/* The producer failed: publishes nothing of the shard in progress (its
 * scratch file goes, its claim is dropped so that others may fill it),
 * leaves the length as it is, and frees the appender.  What was published
 * stays.  NULL is fine. */
void bc_appender_discard(bc_appender *a);

/* Records appended so far (including those of the shard in progress). */
uint64_t bc_appender_count(const bc_appender *a);

/* The shard length a cache with options `opts` (shard_bytes,
 * compression, zstd_level) would derive from the sample records[0..n),
 * the way bc_cache_open estimates it from a source's first records: for
 * opening a new root (shard_records) before appending to it.  n may be 0
 * (records then cost 8 bytes each). */
int bc_cache_estimate_shard_records(const bc_cache_options *opts,
                                    const bc_buf *records, size_t n,
                                    uint64_t *shard_records);

/* ---- introspection ---------------------------------------------------- */

typedef struct bc_cache_stats {
  uint64_t length;       /* records known */
  bool length_final;     /* the source has ended: length is exact */
  uint64_t shard_records;
  uint64_t shards_present;
  uint64_t bytes_on_disk; /* bytes in shards/ (from the shared state) */
  uint64_t disk_limit;    /* the root's limit (shared); 0 = none */
  /* This process's counters since open: */
  uint64_t hits;          /* records served from an open shard */
  uint64_t shard_opens;   /* shard files opened */
  uint64_t fills;         /* shards filled for the first time */
  uint64_t regenerations; /* shards filled again after eviction/damage */
  uint64_t evictions;     /* shards this process evicted */
  uint64_t passes_opened; /* source passes opened */
  uint64_t records_skipped; /* records skipped or read and dropped */
  uint64_t records_written; /* records written into shards this process
                               filled (records_written + records_skipped:
                               what the source produced for it) */
  uint64_t waits;         /* times it waited for another filler */
  uint64_t open_shards;   /* shard readers this process holds open now
                             (at most max_open_shards, plus any a running
                             read still uses) */
  uint64_t miss_ns;       /* total time reads waited for the shards they
                             opened (shard_opens of them): claim, fill,
                             publish or queueing, waits for other fillers */
  /* Publish-behind: */
  uint64_t publishes_queued; /* shards queued for the publisher */
  uint64_t publish_batches;  /* its transactions (one per batch) */
  uint64_t publish_largest;  /* shards in its largest batch */
  uint64_t publish_failures; /* queued shards whose publish failed */
  uint64_t shards_kept;      /* shards a pass published on its way to another
                                one (not in fills or regenerations) */
  uint64_t shards_bypassed;  /* shards a read was served from their scratch
                                file without keeping them: no room under the
                                limit within a second (room held by other
                                fills; doc/cache.md, "Room under load") */
  /* The root's counters, summed over every process that has used it
   * (kept in the shared state by the transactions that publish and evict;
   * a root written by a version before them starts them at 0): */
  struct {
    uint64_t fills;             /* shards published for the first time */
    uint64_t regenerations;     /* shards published again */
    uint64_t evictions;         /* shards evicted under the limit */
    uint64_t records_generated; /* records the source produced for them
                                   (written, and skipped on the way) */
    uint64_t bytes_written;     /* bytes of the shard files published */
    uint64_t shards_kept;       /* shards published on a pass's way to
                                   another (not in fills or regenerations) */
  } root;
} bc_cache_stats;

int bc_cache_stats_get(bc_cache *cache, bc_cache_stats *stats);

/* True while this process drains the source: a bc_cache_fill_all or a
 * bc_cache_len (or bc_seq_len) waiting for the end, or the background
 * drain of preload_all.  Never waits (for a progress display polling it,
 * with bc_cache_worker_positions and the length without waiting). */
bool bc_cache_draining(bc_cache *cache);

typedef struct bc_cache_shard {
  uint64_t start, end;    /* records [start, end) */
  bool zstd;              /* the file is .bagz (else .bag) */
  uint64_t bytes;
  uint64_t last_access;   /* shared access clock value (larger = later) */
} bc_cache_shard;

/* Lists the shards present, ascending: at most `max` into shards[], their
 * total count into *count. */
int bc_cache_shards(bc_cache *cache, bc_cache_shard *shards, size_t max,
                    size_t *count);

/* The file of a shard bc_cache_shards listed (ROOT/shards/START.END.bag or
 * .bagz), malloc'd into *path: free it. */
int bc_cache_shard_path(bc_cache *cache, const bc_cache_shard *shard,
                        char **path);

/* Current positions of this process's source passes, parked or in use (the
 * next record each will read): at most `max` into positions[], their count
 * into *count. */
int bc_cache_worker_positions(bc_cache *cache, uint64_t *positions, size_t max,
                              size_t *count);

/* The user info JSON text (malloc'd; free it), "null" when none. */
int bc_cache_info(bc_cache *cache, char **json);

/* Replaces the user info (any JSON text), atomically in metadata.json. */
int bc_cache_set_info(bc_cache *cache, const char *json);
/* The source's fingerprint stored in metadata.json (compact JSON text,
 * malloc'd: free() it), or NULL in *json when it has none. */
int bc_cache_fingerprint(bc_cache *cache, char **json);
/* The length hint stored in metadata.json (the known_length the root was
 * created with), or -1 when there is none. */
int bc_cache_length_hint(bc_cache *cache, int64_t *hint);

/* The source info: a JSON value kept in metadata.json ("source") that says
 * how the cache's source can be run again, for a later process that opens
 * the root without one (`bagcache cache fill -- CMD` stores the command
 * there: doc/cli.md).  The library only keeps it: it never runs anything
 * from it.  bc_cache_source_info gives it as malloc'd JSON text (free it),
 * "null" when none; bc_cache_set_source_info replaces it atomically (any
 * JSON text; NULL or "null" removes it), BC_EINVAL for text that is not
 * JSON. */
int bc_cache_source_info(bc_cache *cache, char **json);
int bc_cache_set_source_info(bc_cache *cache, const char *json);

/* Checks every present shard against its recorded size and checksum.
 * 0 when all match; otherwise the first problem, with the shard's start in
 * *bad_start (if not NULL). */
int bc_cache_verify(bc_cache *cache, uint64_t *bad_start);

/* Writes a fully cached root as a standard Bagz set OUT@N (N shards, as
 * even as possible, zstd if OUT ends in .bagz): readable by bagz itself.
 * BC_ENOTCACHED if a shard is missing and there is no source; with a source
 * missing shards are filled first. */
int bc_cache_export(bc_cache *cache, const char *out_spec);

/* Deletes everything under a root (shards, state, metadata, then the root
 * if empty).  While caches are open on it (in any process) it is emptied
 * instead: every shard goes, in one write transaction of the shared state,
 * and metadata.json, the state and the directories stay for them (a
 * notice says so); clear it again after they close to delete it. */
int bc_cache_clear(const char *root);

#ifdef __cplusplus
}
#endif
#endif /* BAGCACHE_CACHE_H */
