/*
 * append.c - the appender: records handed over in order, once, become
 * shards as they complete (write-through; include/bagcache/cache.h,
 * doc/cache.md "Appending").
 *
 * Each shard goes through fill.c's rules (fill_append.h): the appender
 * registers itself as this process's filler of the shard (so the process's
 * readers wait for it), claims it in the shared state, writes its records
 * into scratch/ under the same name a fill uses (so a crash leaves a file
 * bc__clean_scratch removes and a claim the next claimant takes over), and
 * publishes it with fill.c's publish: checksum check, eviction under the
 * disk limit, length.  The modes of a shard, decided when its first record
 * is appended (with claim_late, never WRITE: the claim is tried at the
 * shard's end, as STANDBY does after its wait):
 *   WRITE   we hold the claim: the records go to scratch/, and the shard is
 *           published when its last one arrives;
 *   STANDBY another thread or process holds the claim: the records go to
 *           scratch/ too, and at the shard's end the appender waits for
 *           that filler, then checks against what it published, or claims
 *           and publishes its own file if the other fill went away;
 *   VERIFY  the shard is PRESENT: only its checksum is computed, and
 *           compared at the end with the one recorded at its first publish
 *           (or with the file's records, where none was recorded).
 *
 * Write-behind (the write_behind option): append copies the record into
 * a bounded ring (append_ring.h) and returns; a writer thread of the
 * appender takes the records out in order and does all of the above with
 * them (the same functions, so the same bytes, claims and checks).  The
 * writer's failure is kept in the appender (`failed`, written by the
 * writer only, before it stores `wfailed`) and returned by the next
 * append and by close.  The caller's interrupt handler stops a wait for
 * room in the ring, and close's and discard's waits for the writer; it
 * then sets `cancel`, the writer's (and its publisher's) interrupt
 * handler, so that the writer's own waits stop too.  Close lets the
 * writer publish the last shard and make the length final as well (its
 * syncs are then not the caller's CPU time either).  Discard lets the
 * writer take the complete shards queued (appended, they would have been
 * published already without write-behind) and drop the rest.
 *
 * Locking: none of its own besides the ring's (a leaf); one thread at a
 * time calls the appender.  The registry lock and LMDB write transactions
 * are taken inside fill.c's functions, never together with anything here.
 * Write-behind: the fields of the sync core (mode, shard, w ... failed)
 * belong to the writer thread while it runs, the `wb` fields marked
 * "caller" to the caller; the two meet only in the ring and the atomics.
 *
 * Fork: an appender belongs to the process that opened it (its claims,
 * scratch files and threads are that process's): in a child, append and
 * close return BC_EINVAL and close and discard leave it alone (a leak of
 * the child's copy, rather than a touch of the parent's state).
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bag/internal.h"
#include "cache/internal.h"
#include "cache/fill_append.h"
#include "cache/append_ring.h"

enum { MODE_NONE, MODE_WRITE, MODE_STANDBY, MODE_VERIFY };

struct bc_appender {
  bc_cache *c;      /* a reference of the cache's sequence */
  uint64_t R;
  uint64_t count;   /* records appended */
  bool late;        /* claim_late: STANDBY until the shard's end */
  bool behind;      /* publish_behind */
  /* publish_behind: the completed shard being published on thread
   * `publisher` (a copy of this struct holding that shard's state), or
   * NULL.  Joined before the next shard is handed over, and by close and
   * discard. */
  struct bc_appender *publishing;
  pthread_t publisher;
  /* the shard in progress (mode != MODE_NONE): records [count - n, count) */
  int mode;
  uint64_t shard, n, sum, token;
  bc__filling *mine;  /* WRITE: our registry record */
  bc__filling *other; /* STANDBY: the in-process filler we wait for */
  bc_writer *w;       /* WRITE, STANDBY */
  bc_buf crcs;
  char *scratch;      /* WRITE, STANDBY: its file (malloc'd); else NULL */
  bc_error_state failed; /* a failure is final (failed.code != 0) */
  atomic_bool *cancel; /* write-behind: the writer's and publisher's
                          interrupt handler (else NULL) */
  struct write_behind *wb; /* write-behind (else NULL) */
  unsigned forks;     /* `forks` when opened */
};

/* The write-behind half of an appender (see the header). */
struct write_behind {
  bc__ring ring;
  pthread_t writer;
  uint64_t accepted;     /* records appended (caller) */
  bc_error_state failed; /* the caller's own failure, final (caller) */
  _Atomic uint64_t keep; /* the writer appends records [0, keep) */
  atomic_bool cancel;    /* the caller was interrupted: stop */
  atomic_int wfailed;    /* the writer's failure code (then a->failed) */
  bool ending;           /* close: the writer ends the stream too (set
                            before the ring is closed) */
};

/* fork() generations: an appender of an older one is the parent's. */
static atomic_uint forks;
static pthread_once_t forks_once = PTHREAD_ONCE_INIT;
static void count_fork(void) { atomic_fetch_add(&forks, 1); }
static void watch_forks(void) { pthread_atfork(NULL, NULL, count_fork); }

/* Appender tokens have the top bit set, so they never equal a token of
 * bc__obtain's fills (its counter counts up from 1). */
static uint64_t next_token(void) {
  static _Atomic uint64_t counter = 1;
  return (UINT64_C(1) << 63) | atomic_fetch_add(&counter, 1);
}

/* Remembers failure rc (with bc_errmsg()) and returns it. */
static int fail(bc_appender *a, int rc) {
  bc_error_save(&a->failed, rc);
  return rc;
}

/* Removes the scratch file of the shard in progress and its sidecar. */
static void drop_scratch(bc_appender *a) {
  bc_writer_free(a->w);
  a->w = NULL;
  if (a->scratch != NULL) {
    char *crc = bc__scratch_crc_path(a->scratch);
    unlink(a->scratch);
    if (a->c->crc && crc != NULL) unlink(crc);
    free(crc);
    free(a->scratch);
    a->scratch = NULL;
  }
  a->crcs.size = 0;
}

/* Opens the scratch file of the shard in progress, as fill.c opens its
 * own (the same name scheme, options and checksums). */
static int open_scratch(bc_appender *a) {
  return bc__fill_open_scratch(a->c, a->shard, a->token, &a->scratch, &a->w);
}

/* Tries to become the shard's filler: registers (or finds another thread
 * of this process filling it: *other), then claims it in the shared state.
 * On return exactly one holds: *claimed (a->mine set), *other set, or *rec
 * is the shard's state (PRESENT, or FILLING by another live process). */
static int try_take(bc_appender *a, bool *claimed, bc__filling **other,
                    bc__shard_rec *rec) {
  bc_cache *c = a->c;
  bc__filling *mine = NULL;
  *claimed = false;
  a->token = next_token();
  int rc = bc__fill_enter(c, a->shard, a->token, &mine, other);
  if (rc != 0 || *other != NULL) return rc;
  rc = bc__fill_claim(c, a->shard, a->token, rec, claimed);
  if (rc == 0 && *claimed) {
    a->mine = mine;
  } else {
    /* Not ours: this process's waiters (if any came) retry. */
    int saved = rc;
    if (rc == 0) bc__error(BC_EAGAIN, "%s: shard %llu is filled elsewhere",
                           c->root, (unsigned long long)a->shard);
    bc__fill_done(c, mine, rc ? rc : BC_EAGAIN);
    rc = saved;
  }
  return rc;
}

/* Starts the shard of record a->count. */
static int shard_begin(bc_appender *a) {
  bc_cache *c = a->c;
  bool claimed;
  bc__filling *other = NULL;
  bc__shard_rec rec = {0};
  a->shard = a->count / a->R;
  a->n = 0;
  a->sum = BC__SUM_INIT;
  a->crcs.size = 0;
  int rc;
  if (a->late) {
    /* No claim and no registration yet: only whether it is there. */
    bool found = false;
    MDB_txn *t;
    claimed = false;
    a->token = next_token(); /* names the scratch file */
    if ((rc = bc__txn_begin(c->env, false, &t)) != 0) return rc;
    rc = bc__rec_get(t, bc__dbi_shard(c->env), a->shard, &rec, &found);
    mdb_txn_abort(t);
    if (rc != 0) return rc;
    if (!found) rec.state = SHARD_FILLING; /* (not PRESENT: STANDBY) */
  } else if ((rc = try_take(a, &claimed, &other, &rec)) != 0) {
    return rc;
  }
  a->other = other;
  a->mode = claimed || other != NULL || rec.state != SHARD_PRESENT
                ? (claimed ? MODE_WRITE : MODE_STANDBY)
                : MODE_VERIFY;
  if (a->mode != MODE_VERIFY && (rc = open_scratch(a)) != 0) {
    drop_scratch(a);
    if (a->mine != NULL) {
      bc__fill_release_claim(c, a->shard, a->token, rc);
      bc__fill_done(c, a->mine, rc);
      a->mine = NULL;
    }
    if (a->other != NULL) bc__fill_put(c, a->other);
    a->other = NULL;
    a->mode = MODE_NONE;
  }
  return rc;
}

/* BC_ENONDET for shard records that differ from those cached. */
static int differ(bc_appender *a, const char *how) {
  uint64_t start = a->shard * a->R;
  return bc__error(BC_ENONDET,
                   "%s: shard %llu (records %llu..%llu): the records appended "
                   "%s those cached: the stream is not the one the cache "
                   "holds", a->c->root, (unsigned long long)a->shard,
                   (unsigned long long)start,
                   (unsigned long long)(start + a->n), how);
}

/* Checks the shard's records against the published shard `rec` (its state
 * when found; `present` false when it is gone): its recorded checksum, or
 * else its file's records. */
static int verify(bc_appender *a, const bc__shard_rec *rec, bool present) {
  bc_cache *c = a->c;
  MDB_txn *t;
  uint64_t want = 0;
  bool found = false;
  int rc = bc__txn_begin(c->env, false, &t);
  if (rc != 0) return rc;
  rc = bc__sum_get(t, bc__dbi_sum(c->env), a->shard, &want, &found);
  mdb_txn_abort(t);
  if (rc != 0) return rc;
  if (present && rec->records != a->n)
    return differ(a, rec->records < a->n ? "go on past" : "end before");
  if (found) return want == a->sum ? 0 : differ(a, "differ from");
  if (!present) return 0; /* evicted, and no checksum to compare with */
  /* No checksum recorded (a state rebuilt from the files): the file. */
  char *path = bc__cache_shard_path(c, a->shard, rec->records, rec->zstd);
  if (path == NULL) return bc__error(BC_ENOMEM, "out of memory");
  bc_bag *bag = NULL;
  bc_buf buf = BC_BUF_INIT;
  uint64_t sum = BC__SUM_INIT;
  rc = bc__cache_open_shard(c, path, &bag);
  free(path);
  for (uint64_t i = 0; rc == 0 && i < rec->records; i++)
    if ((rc = bc_bag_get(bag, i, &buf)) == 0) sum = bc__sum_add(sum, buf.data, buf.size);
  bc_bag_close(bag);
  bc_buf_release(&buf);
  if (rc == BC_ENOTFOUND) return 0; /* evicted meanwhile */
  if (rc != 0) return rc;
  return sum == a->sum ? 0 : differ(a, "differ from");
}

/* Publishes our scratch file; we hold the claim (a->mine). */
static int publish_ours(bc_appender *a, bool ended) {
  bc_cache *c = a->c;
  bool regenerated = false;
  int rc = bc_writer_close(a->w);
  if (rc == 0 && c->crc)
    rc = bc__fill_write_sidecar(c, a->scratch, &a->crcs, a->n,
                                bc_writer_records_bytes(a->w));
  if (rc == 0)
    rc = bc__fill_publish(c, a->shard, a->token, a->scratch, a->n, a->sum, ended,
                          &regenerated);
  if (rc == 0) {
    free(a->scratch); /* renamed into shards/ */
    a->scratch = NULL;
    atomic_fetch_add(regenerated ? &c->stats.regenerations : &c->stats.fills, 1);
    atomic_fetch_add(&c->stats.records_written, a->n);
  } else {
    bc__fill_release_claim(c, a->shard, a->token, rc);
  }
  bc__fill_done(c, a->mine, rc);
  a->mine = NULL;
  return rc;
}

/* Ends the shard in progress (ended: the stream ends with it). */
static int shard_end(bc_appender *a, bool ended) {
  bc_cache *c = a->c;
  int rc = 0;
  bool published_end = false;
  double backoff = 0.001;
  if (a->mode == MODE_WRITE) {
    rc = publish_ours(a, ended);
    published_end = rc == 0;
  } else if (a->mode == MODE_VERIFY) {
    bc__shard_rec rec;
    bool found = false;
    MDB_txn *t;
    if ((rc = bc__txn_begin(c->env, false, &t)) == 0) {
      rc = bc__rec_get(t, bc__dbi_shard(c->env), a->shard, &rec, &found);
      mdb_txn_abort(t);
    }
    if (rc == 0) rc = verify(a, &rec, found && rec.state == SHARD_PRESENT);
  } else {
    /* STANDBY: wait for the filler, then check against its shard, or take
     * the shard over if that fill went away. */
    for (;;) {
      if (a->other != NULL) {
        rc = bc__fill_wait(c, a->other); /* its failure is not ours: retry */
        a->other = NULL;
        if (rc != 0) break; /* interrupted */
      }
      bool claimed;
      bc__shard_rec rec;
      if ((rc = try_take(a, &claimed, &a->other, &rec)) != 0) break;
      if (a->other != NULL) continue;
      if (claimed) {
        rc = publish_ours(a, ended);
        published_end = rc == 0;
        break;
      }
      if (rec.state == SHARD_PRESENT) {
        rc = verify(a, &rec, true);
        break;
      }
      /* FILLING by another live process: poll, as bc__obtain does. */
      atomic_fetch_add(&c->stats.waits, 1);
      if ((rc = bc__interrupt_poll()) != 0) break;
      struct timespec ts = {0, (long)(backoff * 1e9)};
      nanosleep(&ts, NULL);
      if (backoff < 0.05) backoff *= 2;
    }
  }
  drop_scratch(a);
  a->mode = MODE_NONE;
  if (rc == 0 && ended && !published_end) rc = bc__fill_record_end(c, a->count);
  return rc;
}

/* The interrupt handler of the writer and publisher threads of a
 * write-behind appender: the caller was interrupted. */
static int cancelled(void *ctx) { return atomic_load((atomic_bool *)ctx); }

/* The publisher thread: ends the shard its copy of the appender holds,
 * keeping a failure in the copy (the thread's message is its own). */
static void *publish_main(void *arg) {
  bc_appender *job = arg;
  if (job->cancel != NULL) bc_set_interrupt_handler(cancelled, job->cancel);
  int rc = shard_end(job, false);
  if (rc != 0) bc_error_save(&job->failed, rc);
  return NULL;
}

static void job_free(bc_appender *job) {
  bc_buf_release(&job->crcs);
  bc_error_state_clear(&job->failed);
  free(job);
}

/* Waits for the shard being published behind, if any: 0, or its failure
 * (then final for the appender too). */
static int join_publisher(bc_appender *a) {
  bc_appender *job = a->publishing;
  if (job == NULL) return 0;
  pthread_join(a->publisher, NULL);
  a->publishing = NULL;
  int rc = job->failed.code;
  if (rc != 0) fail(a, bc_error_restore(&job->failed));
  job_free(job);
  return rc;
}

/* The shard in progress is complete: published now, or (publish_behind)
 * handed to a publisher thread once the previous one is done, the
 * appender going on with a fresh shard state. */
static int shard_complete(bc_appender *a) {
  if (!a->behind) return shard_end(a, false);
  int rc = join_publisher(a);
  if (rc != 0) return rc;
  bc_appender *job = malloc(sizeof *job);
  if (job == NULL) return shard_end(a, false); /* inline, then */
  memcpy(job, a, sizeof *job);
  job->failed = (bc_error_state)BC_ERROR_STATE_INIT;
  job->publishing = NULL;
  job->wb = NULL;
  a->mode = MODE_NONE;
  a->mine = a->other = NULL;
  a->w = NULL;
  a->scratch = NULL;
  a->crcs = (bc_buf)BC_BUF_INIT;
  if (pthread_create(&a->publisher, NULL, publish_main, job) != 0) {
    rc = shard_end(job, false); /* no thread: inline */
    job_free(job);
    return rc;
  }
  a->publishing = job;
  return 0;
}

/* Appends a record on this thread: the caller's, or the writer's. */
static int append_now(bc_appender *a, const void *data, size_t size) {
  if (a->failed.code != 0) return bc_error_restore(&a->failed);
  bc_cache *c = a->c;
  int rc = 0;
  if (a->mode == MODE_NONE && (rc = shard_begin(a)) != 0) return fail(a, rc);
  if (a->mine != NULL && atomic_load(&a->mine->abandoned))
    return fail(a, bc__error(BC_ECLOSED, "%s: shard %llu: the fill was abandoned",
                             c->root, (unsigned long long)a->shard));
  a->sum = bc__sum_add(a->sum, data, size);
  if (a->w != NULL && (rc = bc_writer_write(a->w, data, size)) != 0) return fail(a, rc);
  if (a->w != NULL && c->crc && (rc = bc__fill_crc_append(&a->crcs, data, size)) != 0)
    return fail(a, rc);
  a->n++;
  a->count++;
  if (a->n == a->R && (rc = shard_complete(a)) != 0) return fail(a, rc);
  return 0;
}

/* The stream has ended (close): the shard in progress is published and
 * the length made final.  A failure is final (a->failed). */
static int end_stream(bc_appender *a) {
  join_publisher(a); /* (its failure is the appender's) */
  if (a->failed.code != 0) return a->failed.code;
  int rc = a->mode != MODE_NONE ? shard_end(a, true) : bc__fill_record_end(a->c, a->count);
  return rc != 0 ? fail(a, rc) : 0;
}

/* ---- write-behind ---------------------------------------------------------- */

/* The writer thread: appends the queued records in order with the sync
 * core until the ring is closed and empty.  After a failure (kept in
 * a->failed, then announced in wfailed) it only empties the ring; records
 * from `keep` on (a discard) are dropped. */
static void *writer_main(void *arg) {
  bc_appender *a = arg;
  struct write_behind *wb = a->wb;
  bc__ring_batch b;
  bc_set_interrupt_handler(cancelled, &wb->cancel);
  while (bc__ring_take(&wb->ring, &b)) {
    uint64_t pos = b.from, released = b.from;
    while (pos < b.to) {
      const void *data;
      size_t size;
      bc__ring_next(&b, &pos, &data, &size);
      if (a->failed.code == 0 && a->count < atomic_load(&wb->keep)) {
        int rc = atomic_load(&wb->cancel)
                     ? fail(a, bc__error(BC_ECANCELED, "%s: the appender was interrupted",
                                         a->c->root))
                     : append_now(a, data, size);
        if (rc != 0) atomic_store(&wb->wfailed, rc);
      }
      /* Room for the caller as we go (not the batch's last record: a
       * release of `to` ends the batch). */
      if (pos < b.to && pos - released >= b.cap / 8) {
        bc__ring_release(&wb->ring, pos);
        released = pos;
      }
    }
    bc__ring_release(&wb->ring, b.to);
  }
  /* close: the last publish and its syncs are this thread's too. */
  if (wb->ending && a->failed.code == 0 && !atomic_load(&wb->cancel) &&
      end_stream(a) != 0)
    atomic_store(&wb->wfailed, a->failed.code);
  bc__ring_finish(&wb->ring);
  return NULL;
}

/* Starts the writer thread with a ring of `bytes`.  No thread: the
 * appender works without write-behind. */
static int behind_start(bc_appender *a, size_t bytes) {
  /* (aligned: the ring keeps each side's fields on a cache line of its own) */
  size_t size = (sizeof(struct write_behind) + 63) / 64 * 64;
  struct write_behind *wb = aligned_alloc(64, size);
  if (wb == NULL) return bc__error(BC_ENOMEM, "out of memory");
  memset(wb, 0, size);
  int rc = bc__ring_init(&wb->ring, bytes);
  if (rc != 0) {
    free(wb);
    return rc;
  }
  wb->failed = (bc_error_state)BC_ERROR_STATE_INIT;
  atomic_init(&wb->keep, UINT64_MAX);
  atomic_init(&wb->cancel, false);
  atomic_init(&wb->wfailed, 0);
  a->wb = wb;
  a->cancel = &wb->cancel;
  if (pthread_create(&wb->writer, NULL, writer_main, a) != 0) {
    bc__ring_destroy(&wb->ring);
    free(wb);
    a->wb = NULL;
    a->cancel = NULL;
  }
  return 0;
}

/* Write-behind append (caller's thread): copies the record into the
 * ring, waiting for room (`wait`) or not (BC_EAGAIN). */
static int append_behind(bc_appender *a, const void *data, size_t size, bool wait) {
  struct write_behind *wb = a->wb;
  if (wb->failed.code != 0) return bc_error_restore(&wb->failed);
  int rc = atomic_load(&wb->wfailed);
  if (rc != 0) { /* a->failed is the writer's failure, written before */
    bc_error_restore(&a->failed);
    bc_error_save(&wb->failed, rc);
    return rc;
  }
  rc = bc__ring_put(&wb->ring, data, size, wait, (wb->accepted + 1) % a->R == 0);
  if (rc == BC_EAGAIN)
    return bc__error(BC_EAGAIN, "%s: the appender's queue is full", a->c->root);
  if (rc != 0) { /* interrupted, or no memory for a long record */
    if (rc == BC_ECANCELED) atomic_store(&wb->cancel, true);
    bc_error_save(&wb->failed, rc);
    return rc;
  }
  wb->accepted++;
  return 0;
}

/* Write-behind: lets the writer take the records [0, keep) queued (and,
 * `ending`, end the stream: end_stream), stops it and the publisher, and
 * frees the write-behind half: from then on the sync core is the
 * caller's.  An interrupt of the wait stops the writer
 * at once (BC_ECANCELED, final).  Returns the appender's failure, if
 * any (then also in a->failed). */
static int behind_end(bc_appender *a, uint64_t keep, bool ending) {
  struct write_behind *wb = a->wb;
  atomic_store(&wb->keep, keep);
  wb->ending = ending; /* (the ring's lock orders it before the writer's look) */
  bc__ring_close(&wb->ring);
  int rc = bc__ring_wait_finished(&wb->ring, true);
  if (rc != 0) {
    atomic_store(&wb->cancel, true);
    bc__ring_wait_finished(&wb->ring, false); /* prompt now */
    if (wb->failed.code == 0) bc_error_save(&wb->failed, rc);
  }
  pthread_join(wb->writer, NULL);
  join_publisher(a); /* (it polls wb->cancel) */
  if (a->failed.code == 0 && wb->failed.code != 0)
    fail(a, bc_error_restore(&wb->failed));
  bc__ring_destroy(&wb->ring);
  bc_error_state_clear(&wb->failed);
  free(wb);
  a->wb = NULL;
  a->cancel = NULL;
  return a->failed.code;
}

/* ---- the API ---------------------------------------------------------------- */

/* BC_EINVAL for an appender opened before fork(), in the child. */
static int forked(const bc_appender *a, const char *fn) {
  if (a->forks == atomic_load(&forks)) return 0;
  return bc__error(BC_EINVAL, "%s: the appender was opened before fork(): it "
                   "belongs to the parent process", fn);
}

int bc_cache_appender_open(bc_appender **out, bc_cache *c,
                           const bc_appender_options *opts) {
  static const bc_appender_options defaults = BC_APPENDER_OPTIONS_INIT;
  if (opts == NULL) opts = &defaults;
  if (c == NULL || out == NULL)
    return bc__error(BC_EINVAL, "bc_cache_appender_open: NULL argument");
  if (opts->version != 1 && opts->version != BC_APPENDER_OPTIONS_VERSION)
    return bc__error(BC_EINVAL, "bc_cache_appender_open: options of version %u "
                     "(this library knows 1 to %u)", opts->version,
                     BC_APPENDER_OPTIONS_VERSION);
  /* Version 1 ends before write_behind. */
  bc_appender_options o = defaults;
  memcpy(&o, opts, opts->version == 1 ? offsetof(bc_appender_options, write_behind)
                                      : sizeof o);
  if (c->R == 0)
    return bc__error(BC_EINVAL,
                     "%s: the cache's shard length is not decided yet: open it "
                     "with shard_records (bc_cache_estimate_shard_records "
                     "derives one from the first records)", c->root);
  pthread_once(&forks_once, watch_forks);
  bc_appender *a = calloc(1, sizeof *a);
  if (a == NULL) return bc__error(BC_ENOMEM, "out of memory");
  a->c = c;
  bc_seq_ref(&c->base);
  a->R = c->R;
  a->late = o.claim_late;
  a->behind = o.publish_behind;
  a->crcs = (bc_buf)BC_BUF_INIT;
  a->failed = (bc_error_state)BC_ERROR_STATE_INIT;
  a->forks = atomic_load(&forks);
  int rc = o.write_behind
               ? behind_start(a, o.behind_bytes ? o.behind_bytes
                                                : BC_APPENDER_BEHIND_BYTES_DEFAULT)
               : 0;
  if (rc != 0) {
    bc_seq_unref(&c->base);
    free(a);
    return rc;
  }
  *out = a;
  return 0;
}

uint64_t bc_appender_count(const bc_appender *a) {
  if (a == NULL) return 0;
  return a->wb != NULL ? a->wb->accepted : a->count;
}

int bc_appender_append(bc_appender *a, const void *data, size_t size) {
  if (a == NULL || (data == NULL && size > 0))
    return bc__error(BC_EINVAL, "bc_appender_append: NULL argument");
  int rc = forked(a, "bc_appender_append");
  if (rc != 0) return rc;
  return a->wb != NULL ? append_behind(a, data, size, true) : append_now(a, data, size);
}

int bc_appender_try_append(bc_appender *a, const void *data, size_t size) {
  if (a == NULL || (data == NULL && size > 0))
    return bc__error(BC_EINVAL, "bc_appender_try_append: NULL argument");
  int rc = forked(a, "bc_appender_try_append");
  if (rc != 0) return rc;
  if (a->wb != NULL) return append_behind(a, data, size, false);
  if (a->failed.code != 0) return bc_error_restore(&a->failed);
  /* A shard's start claims it, its end publishes it: both may wait. */
  if (a->mode == MODE_NONE || a->n + 1 == a->R)
    return bc__error(BC_EAGAIN, "%s: the record starts or ends a shard", a->c->root);
  return append_now(a, data, size);
}

/* Gives up the shard in progress: nothing of it is published. */
static void shard_abort(bc_appender *a) {
  bc_cache *c = a->c;
  drop_scratch(a);
  if (a->mine != NULL) {
    bc__error(BC_EAGAIN, "%s: the appender of shard %llu was discarded", c->root,
              (unsigned long long)a->shard);
    bc__fill_release_claim(c, a->shard, a->token, BC_EAGAIN);
    bc__fill_done(c, a->mine, BC_EAGAIN); /* its waiters retry */
    a->mine = NULL;
  }
  if (a->other != NULL) bc__fill_put(c, a->other);
  a->other = NULL;
  a->mode = MODE_NONE;
}

static void appender_free(bc_appender *a) {
  bc_buf_release(&a->crcs);
  bc_error_state_clear(&a->failed);
  bc_seq_unref(&a->c->base);
  free(a);
}

int bc_appender_close(bc_appender *a) {
  if (a == NULL) return 0;
  int rc = forked(a, "bc_appender_close");
  if (rc != 0) return rc; /* (left alone: see the header) */
  /* (a failure: in a->failed) */
  if (a->wb != NULL) behind_end(a, UINT64_MAX, true);
  else end_stream(a);
  if (a->failed.code != 0) {
    rc = bc_error_restore(&a->failed);
    shard_abort(a);
  }
  if (rc != 0) {
    bc_error_state keep = BC_ERROR_STATE_INIT; /* (shard_abort's messages) */
    bc_error_save(&keep, rc);
    appender_free(a);
    bc_error_restore(&keep);
    bc_error_state_clear(&keep);
    return rc;
  }
  appender_free(a);
  return rc;
}

void bc_appender_discard(bc_appender *a) {
  if (a == NULL || forked(a, "bc_appender_discard") != 0) return;
  /* Keep the caller's error message: discarding is what a failure does. */
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", bc_errmsg());
  int err = bc_errno();
  /* The complete shards queued are published, as without write-behind. */
  if (a->wb != NULL) behind_end(a, a->wb->accepted - a->wb->accepted % a->R, false);
  join_publisher(a); /* a complete shard is published all the same */
  shard_abort(a);
  appender_free(a);
  bc_set_error(0, err, "%s", msg);
}

int bc_cache_estimate_shard_records(const bc_cache_options *opts,
                                    const bc_buf *records, size_t n,
                                    uint64_t *shard_records) {
  static const bc_cache_options defaults = BC_CACHE_OPTIONS_INIT;
  if (opts == NULL) opts = &defaults;
  if (shard_records == NULL || (records == NULL && n > 0))
    return bc__error(BC_EINVAL, "bc_cache_estimate_shard_records: NULL argument");
  /* As bc__estimate_shard_records (maint.c): stored bytes (compressed as
   * the shards will be) plus the 8-byte limit each record adds. */
  bool zstd = opts->compression == BC_COMPRESSION_ZSTD;
  bc__encoder *enc = NULL;
  bc_buf packed = BC_BUF_INIT;
  int rc = zstd ? bc__encoder_new(&enc, opts->zstd_level, NULL, 0) : 0;
  uint64_t total = 0;
  for (size_t i = 0; rc == 0 && i < n; i++) {
    uint64_t stored = records[i].size;
    if (zstd && records[i].size > 0 &&
        (rc = bc__encoder_encode(enc, records[i].data, records[i].size, &packed)) == 0)
      stored = packed.size;
    total += stored + 8;
  }
  bc__encoder_free(enc);
  bc_buf_release(&packed);
  if (rc != 0) return rc;
  uint64_t target = opts->shard_bytes ? opts->shard_bytes : (uint64_t)64 << 20;
  uint64_t cost = n ? total / n : 8;
  if (cost == 0) cost = 8;
  *shard_records = target / cost ? target / cost : 1;
  return 0;
}
