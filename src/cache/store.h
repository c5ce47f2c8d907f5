/*
 * src/cache/store.h - the shared state of a root behind a typed interface.
 *
 * Two levels:
 *
 *  - bc__store_ops, a small table of primitive operations: transactions
 *    (one write transaction at a time across processes, nested ones for a
 *    part that may fail alone), typed records (a shard's state, its
 *    checksum, the counters of bc__store_key), a walk over the shards in
 *    ascending order, and the files of shards/ that the state describes.
 *    store_lmdb.c implements it over LMDB and the root's directories; the
 *    policy test (tests/cache/test_cache_policy.c) over arrays in memory,
 *    with failures injected where it likes.
 *
 *  - the store's typed calls, written once over the table (store.c): read
 *    a shard's state with the length, claim a shard, release a claim,
 *    publish a shard (evicting, and returning every victim), forget a
 *    damaged shard, record the source's end.  They hold the engine's
 *    policy: who may take a claim, which checks a publish makes, which
 *    shards a limit evicts, what survives a failed publish.
 *
 * Ownership: a transaction handle belongs to its caller until commit or
 * abort (both end it, success or not).  A nested transaction ends before
 * its parent.  Every call returns 0 or a negative BC_E* code with the
 * thread's message set.
 *
 * Included by cache/internal.h (after the shard record it names, before
 * the cache object that holds a store): include that.
 */
#ifndef BC_CACHE_STORE_H
#define BC_CACHE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct bc__store_txn bc__store_txn; /* the implementation's */

/* The counters of the "meta" database. */
typedef enum {
  BC__KEY_BYTES,  /* sum of PRESENT bytes */
  BC__KEY_CLOCK,  /* the access clock */
  BC__KEY_LENGTH, /* records known to exist */
  BC__KEY_FINAL,  /* 1: the length is the source's end */
  BC__KEY_LIMIT,  /* the disk limit every process enforces (0: none) */
  /* Root-wide counters, summed over every process that used the root (a
   * root written before they existed lacks them: 0).  Updated in the
   * transactions that publish and evict, never in one of their own. */
  BC__KEY_N_FILLS,     /* shards published for the first time */
  BC__KEY_N_REGENS,    /* shards published again (a checksum was known) */
  BC__KEY_N_EVICTIONS, /* shards evicted under the limit */
  BC__KEY_N_RECORDS,   /* records the source produced for published
                          shards: their records and those skipped on the
                          way to them */
  BC__KEY_N_WRITTEN,   /* bytes of the shard files published */
  BC__KEY_N_KEPT,      /* shards a pass published on its way to another
                          (not in n_fills or n_regenerations) */
  BC__KEY_COUNT        /* (the number of keys) */
} bc__store_key;

/* Called by `each` for every shard record in ascending shard order;
 * nonzero stops the walk and is returned. */
typedef int (*bc__store_visit)(void *arg, uint64_t shard, const bc__shard_rec *rec);

/* Which file a reader found bad: its device and inode numbers, both 0
 * when there was no file at the shard's path.  A PRESENT shard's file is
 * replaced only by a forget and a later publish (write transactions), and a
 * regenerated shard has the same records and bytes as the one it replaces,
 * so the identity of the file, not the state, tells them apart. */
typedef struct {
  uint64_t dev, ino;
} bc__file_id;

typedef struct bc__store_ops {
  int (*begin)(void *impl, bool write, bc__store_txn **t);
  int (*nest)(bc__store_txn *parent, bc__store_txn **t); /* write only */
  int (*commit)(bc__store_txn *t);
  void (*abort)(bc__store_txn *t);

  int (*get)(bc__store_txn *t, uint64_t shard, bc__shard_rec *rec, bool *found);
  int (*put)(bc__store_txn *t, uint64_t shard, const bc__shard_rec *rec);
  int (*del)(bc__store_txn *t, uint64_t shard);
  int (*each)(bc__store_txn *t, bc__store_visit visit, void *arg);
  int (*sum_get)(bc__store_txn *t, uint64_t shard, uint64_t *sum, bool *found);
  int (*sum_put)(bc__store_txn *t, uint64_t shard, uint64_t sum);
  int (*u64_get)(bc__store_txn *t, bc__store_key key, uint64_t *v, bool *found);
  int (*u64_put)(bc__store_txn *t, bc__store_key key, uint64_t v);

  /* True while the process `o` is alive (a claim of a dead one is free). */
  bool (*owner_alive)(void *impl, bc__owner o);
  /* Files.  evict: removes a PRESENT shard's file (and its checksums);
   * a file already gone is fine.  purge: removes whatever files shard
   * `shard` has, of any length (a dead claimant's).  install: moves the
   * finished file `scratch` (and its checksums) in as shard `shard` of
   * `records` records (its data is durable already): renamed, and with
   * `sync_dirs` the directories fsynced (sums/ first), else left to one
   * sync_dirs call for a whole batch.  uninstall: takes an installed file
   * back out (its state was not committed).  end: records the source's
   * end (`length`) in the root's human-readable metadata. */
  int (*evict)(void *impl, uint64_t shard, const bc__shard_rec *rec);
  /* same_file: true when PRESENT shard `rec`'s file is the file `id`, or
   * is missing (a lost file is as bad as a damaged one). */
  bool (*same_file)(void *impl, uint64_t shard, const bc__shard_rec *rec,
                    const bc__file_id *id);
  void (*purge)(void *impl, uint64_t shard);
  int (*install)(void *impl, const char *scratch, uint64_t shard,
                 uint64_t records, bool sync_dirs);
  int (*sync_dirs)(void *impl);
  void (*uninstall)(void *impl, uint64_t shard, uint64_t records);
  int (*end)(void *impl, uint64_t length);
} bc__store_ops;

typedef struct bc__store {
  const bc__store_ops *ops;
  void *impl;       /* store_lmdb.c: the bc_cache */
  const char *root; /* for messages */
  uint64_t R;       /* records per shard */
  bc__owner self;   /* this process, as its claims name it */
} bc__store;

typedef struct bc__publish_req bc__publish_req;
typedef struct bc__victims bc__victims;

/* The store of cache c, over LMDB (store_lmdb.c). */
void bc__store_lmdb_init(bc__store *s, bc_cache *c);

/* ---- the typed calls (store.c) ------------------------------------------ */

/* A shard's state and the length, in one read transaction: *length the
 * records known to exist, *final whether that is the source's end. */
int bc__store_read(const bc__store *s, uint64_t shard, bc__shard_rec *rec,
                   bool *found, uint64_t *length, bool *final);

/* Claims shard `shard` for fill `token`: taken when it has no state, or a
 * FILLING state whose owner died or is this process (the caller holds
 * the process's filling record, so a claim of its own is stale).  A dead
 * claimant's files are purged.  *claimed: ours now; else *rec is its
 * state (PRESENT, or FILLING by a live owner). */
int bc__store_claim(const bc__store *s, uint64_t shard, uint64_t token,
                    bc__shard_rec *rec, bool *claimed);

/* bc__store_claim that also reserves room for the claim's scratch file
 * (publish-behind, doc/cache.md "Publish-behind"): under a disk limit,
 * q->size bytes are reserved in the claim (its FILLING record's
 * `records`), evicting first as a publish does (q as for a publish: the
 * limit, the cost model, the bumps) until
 *   bytes of PRESENT shards + reservations of all claims <= limit.
 * *room: the bytes the claim may publish behind it (UINT64_MAX without a
 * limit; 0 when nothing could be reserved: the fill publishes
 * synchronously, evicting at its publish as before).  Victims are
 * appended to *victims (the caller drops its readers of them). */
int bc__store_claim_room(const bc__store *s, const bc__publish_req *q,
                         bc__shard_rec *rec, bool *claimed, uint64_t *room,
                         bc__victims *victims);

/* Drops fill `token`'s claim on `shard` (a newer claim is left alone).
 * Best effort: may set the thread's error (a caller reporting a failure
 * saves it around the call, bc_error_save/restore). */
void bc__store_release(const bc__store *s, uint64_t shard, uint64_t token);

/* Records that the source ends at `end`, found by the fill of `shard`
 * (whose claim goes): BC_ENONDET if more records were seen before. */
int bc__store_record_end(const bc__store *s, uint64_t shard, uint64_t end);

/* Makes the length final at the highest end of a PRESENT shard, unless it
 * is final already.  *length: the final length. */
int bc__store_finalize(const bc__store *s, uint64_t *length);

/* Forgets damaged or lost shard `shard` (its file goes, its state and bytes
 * too) if it is still PRESENT with the file `bad` (or none at all): a
 * reader that found a file bad never drops the good one a regeneration
 * published meanwhile. */
int bc__store_forget(const bc__store *s, uint64_t shard, const bc__file_id *bad);

/* Empties the state for bc_cache_clear while other processes use the
 * root, in ONE write transaction (so no publish lands in between): every
 * PRESENT shard's files are removed and its entry dropped, dead claims are
 * purged and dropped, `bytes` becomes 0.  Claims of live fillers stay
 * (their shards are published when they finish, as new shards); so do
 * the checksums, the length and the limit (the root is still a cache of
 * the same source for the processes using it).  *removed: the shards
 * whose entries went (their files with them).  A commit that fails after
 * files went leaves their entries listed: readers find them missing and
 * refill them. */
int bc__store_clear(const bc__store *s, uint64_t *removed);

/* Shards evicted by one publish: any number. */
struct bc__victims {
  uint64_t *shards;
  size_t n, cap;
};
void bc__victims_free(bc__victims *v);

/* What a publish needs to know besides the state. */
struct bc__publish_req {
  uint64_t shard, token;
  const char *scratch;  /* the finished file */
  uint64_t records;     /* in it (R, or fewer when the source ended) */
  uint64_t size;        /* its bytes */
  uint64_t checksum;    /* of its records (bc__sum_add) */
  uint64_t skipped;     /* records the source produced and dropped on the
                           way to this shard (root-wide counters) */
  bool ended;           /* the source ended after them */
  bool zstd;            /* the file is .bagz */
  const char *note;     /* appended to determinism errors ("" for none) */
  bool installed;       /* the file is in shards/ (and sums/) already,
                           the directories fsynced: publish-behind renames
                           outside the write lock, in the claim's room */
  /* The disk limit when none is stored, and the smallest workable one in
   * shards (bc__limit_shards) with the prefetched ones among them. */
  uint64_t default_limit;
  unsigned need, prefetched;
  /* Eviction's cost model: ascending positions of this process's passes
   * (after the publish), whether the source seeks (then every shard costs
   * the same to rebuild). */
  const uint64_t *passes;
  size_t npasses;
  bool seekable;
  /* A shard kept on a pass's way (doc/cache.md, "Shards on the way"):
   * nothing is evicted for it, and the limit must also keep `spare` bytes
   * free beside it (the next miss's claim).  Without that room a publish
   * fails with BC_ENOSPC and a claim reserves nothing. */
  bool no_evict;
  uint64_t spare;
  /* Counted in the root's n_shards_kept, not as a fill (a shard kept on a
   * pass's way, published synchronously or behind). */
  bool kept;
  /* Applied in the transaction before victims are picked (this process's
   * pending access-clock bumps), NULL for none. */
  int (*bump)(void *arg, const bc__store *s, bc__store_txn *t, uint64_t *clock);
  void *bump_arg;
};

/* Publishes the claimed, finished shard q->shard in one write transaction
 * (fill.c's header comment has the steps).  Every shard evicted is
 * appended to *victims, also when the publish fails after evicting (their
 * files are gone then too): the caller drops its readers of all of them.
 * *regenerated: a checksum was recorded before (a shard refilled). */
int bc__store_publish(const bc__store *s, const bc__publish_req *q,
                      bc__victims *victims, bool *regenerated);

/* The checks a publish of q makes (the claim, the determinism checksum,
 * the length, the limit), in a read transaction: publish-behind makes
 * them before a shard is served from its scratch file. */
int bc__store_check(const bc__store *s, const bc__publish_req *q);

/* Publishes the claimed, finished shards q[0..n) (their data fsynced
 * already) in ONE write transaction with one fsync of sums/ and one of
 * shards/ (group commit, publish-behind): each passes the checks of
 * bc__store_publish or fails alone (its error saved in errs[i], its files
 * left in scratch/); victims are evicted for those that pass, then all of
 * them are renamed into place, the directories fsynced once and the state
 * committed.  A failure of the directories' fsync or of the commit fails
 * every shard of the batch (taken back out of shards/; evictions stay
 * committed).  Returns 0 when the transaction ran (each shard's outcome in
 * errs[i].code, regenerated[i]), or the error that failed all of them
 * (then also in each errs[i]).  BC_EAGAIN: the limit has no room for the
 * shards that passed their checks now, even with nothing left to evict
 * (room reserved by other claims, or the limit lowered since these claims
 * reserved theirs): nothing is published, evictions made are committed,
 * and files installed before the batch STAY installed (their errs[i] are
 * BC_EAGAIN; the others' their own failure): the caller tries again
 * later, or takes them out (uninstall).  headroom (evict_ahead; 0: none): after the
 * room for the batch, evict as far as anything is evictable until this
 * many more bytes fit too, the room the next claim reserves, when the
 * limit holds q[0].need + 1 shards of that size. */
int bc__store_publish_batch(const bc__store *s, const bc__publish_req *q,
                            size_t n, uint64_t headroom, bc__victims *victims,
                            bc_error_state *errs, bool *regenerated);

/* The victim a limit evicts next among the PRESENT shards other than
 * `keep` (eviction's policy, doc/cache.md "Eviction"): *found false when
 * there is none. */
int bc__store_pick_victim(const bc__store *s, bc__store_txn *t,
                          const bc__publish_req *q, uint64_t *victim,
                          bc__shard_rec *vrec, bool *found);

#endif /* BC_CACHE_STORE_H */
