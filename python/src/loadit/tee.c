/*
 * loadit/tee.c - the first pass over an empty cache: the reader's thread
 * runs the iterator itself and yields its objects, and the records reach
 * the cache through a ring the fill reads without the GIL.
 *
 * Without it, a first pass is two threads taking turns at the GIL: a fill
 * thread calls the iterator and dumps, the reader waits for whole shards
 * and calls loads on every record.  With it, the reader's thread does what
 * a plain loop over the generator plus dumps would do, and the fill thread
 * (another core) only copies bytes into the shard and writes it.
 *
 * Parties:
 *   the consumer  the _TeeIter (one thread at a time, GIL held): pulls
 *                 from the iterator, serializes, pushes, yields the object;
 *   the pass      the source pass that attached to the ring (loadit/source.c,
 *                 an engine thread, no GIL): reads records in order, so the
 *                 engine writes shard after shard from them;
 *   the driver    a helper job asking the engine for shard 0, 1, 2, ... so
 *                 that somebody fills them (the consumer reads none).
 *
 * The ring is single-producer single-consumer: slots [head, tail) hold
 * serialized records (bytes objects, one reference each) not yet read by
 * the pass; the consumer owns `tail`, the pass `head`.  A slot the pass has
 * read keeps its object until the consumer reclaims it (Py_DECREF needs the
 * GIL): `held` counts the bytes of [reclaimed, tail), which bounds the
 * memory, and a consumer over the bound waits.  The pass reads a bytes
 * object without the GIL: it is immutable and the ring holds a reference.
 *
 * States (changed with the GIL AND the lock held; read with either, or
 * atomically):
 *   OPEN      the consumer pulls from the iterator;
 *   ENDED     the consumer met the end (end_rc 0) or an error (end_rc < 0,
 *             end_msg): after the ring, the pass returns that;
 *   GIVEN     the pass owns the iterator: after the ring it pulls itself
 *             (a regular pass), up to stop_at.  Entered when the consumer
 *             is dropped mid-way (stop_at: the end of the shard it was in,
 *             so work done is not wasted and nothing more is generated)
 *             or when the pass found the ring empty while the consumer is
 *             stuck (it waits for a fill itself, or nothing came for
 *             STALL_NS): the consumer then continues from the cache;
 *   DETACHED  the pass went away (its fill failed or the engine closed
 *             it): the consumer continues from the cache, once the driver
 *             has stopped and said whether the fill failed;
 *   ALONE     the driver failed to write the cache (fill_rc: a full disk,
 *             an I/O error...): the consumer warns once (CacheWarning) and
 *             goes on pulling from the iterator, pushing nothing; a pass
 *             still attached fails at the ring's end (cancelled: its
 *             waiters retry with a pass of their own).
 * `in_next` (GIL) is true while the consumer is inside the iterator or
 * dumps or waiting to push; the iterator is never taken from it then.
 *
 * Wake-ups: a party about to sleep sets its *_waiting flag, re-checks, and
 * waits on `cond` under `lock` for at most WAIT_SLICE_NS; the other side
 * publishes its index with a sequentially consistent store and then reads
 * the flag (Dekker: one of the two sees the other), broadcasting under the
 * lock when it is set - but only every WAKE_EVERY records (and when the
 * pass empties the ring), since a wake-up costs more than a record.  So a
 * sleeper may wait one slice with fewer records than that ready; state
 * changes wake it at once.
 *
 * The end: when the iterator is exhausted, or raises an Exception, the
 * consumer waits until the driver is done (all shards up to the end
 * published, the length final) before StopIteration or the exception
 * reaches the caller: at most one ring to drain and one publish.  So a
 * process may exit right after its loop, and a later access retries
 * instead of meeting the failing fill.  A pass opened after the iterator
 * raised never reads the ring (it would only meet that old failure), except
 * the driver's own.  close() and the loader's collection wait the same way
 * (bcpy_tee_settle) for an ENDED pass and for a GIVEN one broken off by
 * its loop (the shard it was in is completed); an OPEN one is broken off
 * by the close first.  A driver failure nobody warned about is warned
 * about there.
 *
 * Lock order: GIL -> lock.  `lock` is a leaf: nothing is taken while it
 * is held, and the GIL is never requested with it held.
 */
#include "loadit/loadit.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SLOTS 4096                    /* records in the ring at most */
/* Bytes kept by the ring at most: what the end of a pass may have to
 * drain before the loop ends (see the header), and the memory a pass
 * holds beyond the shard being written. */
#define HELD_BYTES ((size_t)1 << 20)
#define RECLAIM_EVERY 32               /* pushes between reclaims */
#define WAKE_EVERY 64                  /* records between wake-ups of a sleeper */
#define STALL_NS 1000000000ull         /* an idle consumer this long is stuck */
#define WAIT_SLICE_NS 20000000ull      /* timed waits, to re-check */

enum { TEE_OPEN, TEE_ENDED, TEE_GIVEN, TEE_DETACHED, TEE_ALONE };

struct bcpy_tee {
  atomic_long refs; /* consumer, registration, pass, driver */
  pid_t pid;
  pthread_t consumer; /* the thread that made the iterator */
  uint64_t R;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  PyObject **slots; /* SLOTS entries */

  /* the consumer's side (GIL) */
  _Alignas(64) atomic_uint_fast64_t tail;
  uint64_t reclaimed; /* slots below this hold no object */
  size_t held;        /* bytes of the objects in [reclaimed, tail) */
  unsigned since_reclaim;
  atomic_bool consumer_waiting;

  /* the pass's side (no GIL) */
  _Alignas(64) atomic_uint_fast64_t head;
  uint64_t tail_seen;
  atomic_bool pass_waiting;

  /* shared state (see the header comment) */
  _Alignas(64) atomic_int state;
  bool attached; /* a pass reads the ring (GIL) */
  bool in_next;  /* GIL */
  bool driver_stop; /* GIVEN by a stuck consumer: it fills from the cache */
  uint64_t stop_at; /* GIVEN: the pass fails at this position */
  PyObject *it;     /* the iterator; the pass takes its own reference */
  int end_rc;
  bc_error_state end_err; /* end_rc's error (payload included) */
  PyObject *root;   /* the cache's root (str), for the warning */
  bool warned;      /* the CacheWarning was given (GIL) */
  /* the driver */
  atomic_int fill_rc; /* its failure (not the source's): warned about */
  char fill_msg[1024];
  atomic_bool driver_done;
  atomic_bool driver_started;
  pthread_t driver_thread; /* set before driver_started */
};

/* ---- helpers ------------------------------------------------------------------ */

/* Waits on the tee's condition for at most WAIT_SLICE_NS (lock held). */
static void wait_slice(bcpy_tee *t) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_nsec += (long)WAIT_SLICE_NS;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  pthread_cond_timedwait(&t->cond, &t->lock, &until);
}

static void wake(bcpy_tee *t) {
  pthread_mutex_lock(&t->lock);
  pthread_cond_broadcast(&t->cond);
  pthread_mutex_unlock(&t->lock);
}

/* Changes the state (GIL held). */
static void set_state(bcpy_tee *t, int state) {
  pthread_mutex_lock(&t->lock);
  atomic_store(&t->state, state);
  pthread_cond_broadcast(&t->cond);
  pthread_mutex_unlock(&t->lock);
}

static bcpy_tee *tee_ref(bcpy_tee *t) {
  atomic_fetch_add(&t->refs, 1);
  return t;
}

/* Drops a reference; the last frees the ring's objects and the iterator
 * (GIL held). */
static void tee_unref(bcpy_tee *t) {
  if (t == NULL || atomic_fetch_sub(&t->refs, 1) != 1) return;
  uint64_t tail = atomic_load(&t->tail);
  for (uint64_t k = t->reclaimed; k < tail; k++) Py_XDECREF(t->slots[k % SLOTS]);
  Py_XDECREF(t->it);
  Py_XDECREF(t->root);
  bc_error_state_clear(&t->end_err);
  PyMem_RawFree(t->slots);
  pthread_mutex_destroy(&t->lock);
  pthread_cond_destroy(&t->cond);
  free(t);
}

/* A zeroed tee, aligned for its cache-line-aligned members. */
static bcpy_tee *tee_alloc(void) {
  size_t size = (sizeof(bcpy_tee) + 63) / 64 * 64;
  bcpy_tee *t = aligned_alloc(64, size);
  if (t != NULL) memset(t, 0, size);
  return t;
}

/* The shard end at or after position n. */
static uint64_t shard_end(const bcpy_tee *t, uint64_t n) {
  return (n + t->R - 1) / t->R * t->R;
}

/* ---- the consumer's side ---------------------------------------------------------- */

/* Drops the objects the pass has read (GIL held). */
static void reclaim(bcpy_tee *t) {
  uint64_t head = atomic_load_explicit(&t->head, memory_order_acquire);
  for (; t->reclaimed < head; t->reclaimed++) {
    PyObject **slot = &t->slots[t->reclaimed % SLOTS];
    t->held -= (size_t)PyBytes_GET_SIZE(*slot);
    Py_CLEAR(*slot);
  }
  t->since_reclaim = 0;
}

static bool ring_full(bcpy_tee *t) {
  uint64_t tail = atomic_load_explicit(&t->tail, memory_order_relaxed);
  if (tail - t->reclaimed >= SLOTS) return true;
  return t->held >= HELD_BYTES && tail != t->reclaimed;
}

/* Nobody will read the ring any more: the pass went away, or the driver
 * stopped (failed, or found every shard filled by other processes). */
static bool unread(bcpy_tee *t) {
  return atomic_load(&t->state) == TEE_DETACHED || atomic_load(&t->driver_done);
}

/* Room for one more record, waiting for the pass if need be (GIL held).
 * 0, 1 when nobody will read the ring (unread), -1 with an exception (a
 * signal handler raised). */
static int make_room(bcpy_tee *t) {
  if (++t->since_reclaim >= RECLAIM_EVERY || ring_full(t)) reclaim(t);
  while (ring_full(t)) {
    if (unread(t)) return 1;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&t->lock);
    atomic_store(&t->consumer_waiting, true);
    uint64_t head = t->reclaimed;
    if (atomic_load(&t->head) == head && !unread(t)) wait_slice(t);
    atomic_store(&t->consumer_waiting, false);
    pthread_mutex_unlock(&t->lock);
    Py_END_ALLOW_THREADS
    reclaim(t);
    if (PyErr_CheckSignals() < 0) return -1;
  }
  return 0;
}

/* Appends a record (a bytes object; the reference is the ring's now). */
static void push(bcpy_tee *t, PyObject *bytes) {
  uint64_t tail = atomic_load_explicit(&t->tail, memory_order_relaxed);
  t->slots[tail % SLOTS] = bytes;
  t->held += (size_t)PyBytes_GET_SIZE(bytes);
  atomic_store(&t->tail, tail + 1); /* seq_cst: then the flag (Dekker) */
  /* A sleeping pass is woken once per WAKE_EVERY records, not per record
   * (a wake-up costs more than a record); it also wakes by itself every
   * WAIT_SLICE_NS, and end() and state changes wake it at once. */
  if ((tail + 1) % WAKE_EVERY == 0 && atomic_load(&t->pass_waiting)) wake(t);
}

/* The consumer met the end (rc 0) or an error (rc < 0, bc_errmsg()). */
static void end(bcpy_tee *t, int rc) {
  pthread_mutex_lock(&t->lock);
  if (atomic_load(&t->state) == TEE_OPEN) {
    t->end_rc = rc;
    if (rc < 0) bc_error_save(&t->end_err, rc);
    atomic_store(&t->state, TEE_ENDED);
  }
  pthread_cond_broadcast(&t->cond);
  pthread_mutex_unlock(&t->lock);
}

/* The consumer goes away mid-way (GIL held): the pass finishes the shard
 * the consumer was in with the iterator, and stops there. */
static void hand_over(bcpy_tee *t) {
  pthread_mutex_lock(&t->lock);
  if (atomic_load(&t->state) == TEE_OPEN) {
    t->stop_at = shard_end(t, atomic_load(&t->tail));
    atomic_store(&t->state, TEE_GIVEN);
  }
  pthread_cond_broadcast(&t->cond);
  pthread_mutex_unlock(&t->lock);
}

/* Waits until the driver is done (GIL held, released meanwhile).  0, or
 * -1 with an exception when a signal handler raised (interruptible). */
static int wait_driver(bcpy_tee *t, bool interruptible) {
  while (!atomic_load(&t->driver_done)) {
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&t->lock);
    if (!atomic_load(&t->driver_done)) wait_slice(t);
    pthread_mutex_unlock(&t->lock);
    Py_END_ALLOW_THREADS
    if (interruptible && PyErr_CheckSignals() < 0) return -1;
  }
  return 0;
}

/* The errno behind a driver failure's code, 0 when it is not the system's. */
static int fill_errno(int rc) {
  switch (rc) {
    case BC_ENOSPC: return ENOSPC; /* also EDQUOT and EFBIG underneath */
    case BC_EIO: return EIO;
    case BC_EPERM: return EACCES;
    case BC_ENOTFOUND: return ENOENT;
    case BC_ENOMEM: return ENOMEM;
    default: return 0;
  }
}

/* Warns once that the driver failed to write the cache (GIL held, no
 * exception set): a CacheWarning whose `filename` is the root and `errno`
 * the system's error number (None when the failure is not the system's).
 * -1 with an exception when the warning filters made it an error. */
static int warn_fill_failed(bcpy_tee *t) {
  int rc = atomic_load(&t->fill_rc);
  if (rc == 0 || t->warned) return 0;
  t->warned = true;
  int err = fill_errno(rc);
  PyObject *msg = NULL, *w = NULL, *warnings = NULL, *r = NULL, *no = NULL;
  if (err != 0)
    msg = PyUnicode_FromFormat("the first pass could not write the cache in %U "
                               "([Errno %d] %s): %s; its items are not saved from there on",
                               t->root, err, strerror(err), t->fill_msg);
  else
    msg = PyUnicode_FromFormat("the first pass could not write the cache in %U: %s; "
                               "its items are not saved from there on", t->root, t->fill_msg);
  if (msg == NULL || (w = PyObject_CallFunctionObjArgs(bcpy_CacheWarning, msg, NULL)) == NULL) goto done;
  if (err != 0) {
    no = PyLong_FromLong(err);
  } else {
    Py_INCREF(Py_None);
    no = Py_None;
  }
  if (no == NULL || PyObject_SetAttrString(w, "errno", no) < 0 ||
      PyObject_SetAttrString(w, "filename", t->root) < 0)
    goto done;
  /* warnings.warn(w): attributed to the Python code iterating. */
  if ((warnings = PyImport_ImportModule("warnings")) == NULL) goto done;
  r = PyObject_CallMethod(warnings, "warn", "O", w);
done:
  Py_XDECREF(msg);
  Py_XDECREF(w);
  Py_XDECREF(no);
  Py_XDECREF(warnings);
  int ok = r != NULL ? 0 : -1;
  Py_XDECREF(r);
  return ok;
}

/* ---- the pass's side ---------------------------------------------------------------- */

bcpy_tee *bcpy_tee_attach(bcpy_source *s) {
  bcpy_tee *t = s->tee;
  if (t == NULL || t->pid != getpid() || t->attached || atomic_load(&t->head) != 0)
    return NULL;
  int state = atomic_load(&t->state);
  if (state == TEE_DETACHED || state == TEE_ALONE) return NULL;
  /* After the iterator raised, only the driver reads the ring (to write
   * the complete shards before the failure): any other pass would only
   * meet that old failure, instead of retrying. */
  if (state == TEE_ENDED && t->end_rc < 0 &&
      !(atomic_load(&t->driver_started) && pthread_equal(pthread_self(), t->driver_thread)))
    return NULL;
  t->attached = true;
  return tee_ref(t);
}

void bcpy_tee_detach(bcpy_tee *t) {
  if (t == NULL) return;
  t->attached = false;
  if (atomic_load(&t->state) == TEE_OPEN) set_state(t, TEE_DETACHED);
  tee_unref(t);
}

/* The consumer cannot push now: it waits in a call that needs a fill. */
static bool consumer_stuck(bcpy_tee *t) {
  return pthread_equal(pthread_self(), t->consumer) || bcpy_thread_waits(t->consumer);
}

/* Takes the iterator from a stuck consumer (no GIL held; takes it).
 * 0, or BC_ESOURCE when the consumer's own iterator asked for this fill
 * (it would wait for itself). */
static int take_over(bcpy_tee *t) {
  int rc = 0;
  PyGILState_STATE gil = bcpy_gil_enter();
  pthread_mutex_lock(&t->lock);
  if (atomic_load(&t->state) == TEE_OPEN && atomic_load(&t->tail) == atomic_load(&t->head)) {
    if (!t->in_next) {
      t->stop_at = UINT64_MAX;
      t->driver_stop = true;
      atomic_store(&t->state, TEE_GIVEN);
      pthread_cond_broadcast(&t->cond);
    } else if (pthread_equal(pthread_self(), t->consumer)) {
      rc = bc_set_errmsg(BC_ESOURCE, "the LoadIt's iterator reads the LoadIt itself "
                         "during its first pass, at a record not cached yet");
    }
  }
  pthread_mutex_unlock(&t->lock);
  bcpy_gil_leave(gil);
  return rc;
}

/* Waits until the ring has a record, the state changes, or the consumer
 * is stuck (no GIL held).  0, or an error. */
static int wait_record(bcpy_tee *t, const bcpy_source *s, unsigned long generation) {
  uint64_t head = atomic_load_explicit(&t->head, memory_order_relaxed);
  uint64_t start = bcpy_now_ns();
  for (;;) {
    bool stuck = false;
    pthread_mutex_lock(&t->lock);
    atomic_store(&t->pass_waiting, true);
    while (atomic_load(&t->tail) == head && atomic_load(&t->state) == TEE_OPEN &&
           atomic_load(&s->generation) == generation) {
      if (consumer_stuck(t) || bcpy_now_ns() - start > STALL_NS) {
        stuck = true;
        break;
      }
      wait_slice(t);
    }
    atomic_store(&t->pass_waiting, false);
    pthread_mutex_unlock(&t->lock);
    if (!stuck) return 0;
    int rc = take_over(t);
    if (rc != 0) return rc;
    start = bcpy_now_ns();
  }
}

int bcpy_tee_next(bcpy_tee *t, const bcpy_source *s, unsigned long generation,
                  bc_buf *out, PyObject **it, uint64_t *stop_at) {
  uint64_t head = atomic_load_explicit(&t->head, memory_order_relaxed);
  for (;;) {
    if (head == t->tail_seen)
      t->tail_seen = atomic_load_explicit(&t->tail, memory_order_acquire);
    if (head != t->tail_seen) break;
    /* Empty.  The state is read before the tail again: a record pushed
     * before the state changed is seen. */
    int state = atomic_load(&t->state);
    t->tail_seen = atomic_load(&t->tail);
    if (head != t->tail_seen) break;
    if (atomic_load(&s->generation) != generation)
      return bc_set_errmsg(BC_ECLOSED, "the fill was stopped: its LoadIt was closed");
    if (state == TEE_ENDED) {
      if (t->end_rc < 0) return bc_error_restore(&t->end_err);
      return 0;
    }
    if (state == TEE_ALONE)
      return bc_set_errmsg(BC_EAGAIN, "the first pass stopped writing the cache");
    if (state == TEE_GIVEN) {
      PyGILState_STATE gil = bcpy_gil_enter();
      Py_INCREF(t->it);
      *it = t->it;
      *stop_at = t->stop_at;
      bcpy_gil_leave(gil);
      return BCPY_TEE_GIVEN;
    }
    int rc = wait_record(t, s, generation);
    if (rc != 0) return rc;
  }
  if (out != NULL) {
    PyObject *b = t->slots[head % SLOTS];
    size_t n = (size_t)PyBytes_GET_SIZE(b);
    if (n > out->capacity) {
      unsigned char *data = realloc(out->data, n);
      if (data == NULL) return bc_set_errmsg(BC_ENOMEM, "out of memory");
      out->data = data;
      out->capacity = n;
    }
    if (n > 0) memcpy(out->data, PyBytes_AS_STRING(b), n);
    out->size = n;
  }
  atomic_store(&t->head, head + 1); /* seq_cst: then the flag (Dekker) */
  if (((head + 1) % WAKE_EVERY == 0 || head + 1 == t->tail_seen) &&
      atomic_load(&t->consumer_waiting))
    wake(t);
  return 1;
}

/* ---- the driver --------------------------------------------------------------------- */

typedef struct {
  bcpy_job base;
  bcpy_tee *t;
  bcpy_source *src;
  bc_seq *seq;
} driver_job;

/* Whether shard `k` is the driver's to ask for. */
static bool driver_wants(bcpy_tee *t, uint64_t k) {
  uint64_t start = k * t->R;
  pthread_mutex_lock(&t->lock);
  bool yes;
  switch (atomic_load(&t->state)) {
    case TEE_OPEN: yes = true; break;
    /* At the end, up to the shard that starts there if any: its fill
     * finds the end at once and records the length as final. */
    case TEE_ENDED: yes = start < atomic_load(&t->tail) ||
                          (t->end_rc == 0 && start == atomic_load(&t->tail));
      break;
    case TEE_GIVEN: yes = !t->driver_stop && start < t->stop_at; break;
    default: yes = false; break;
  }
  pthread_mutex_unlock(&t->lock);
  return yes;
}

static int driver_run(bcpy_job *job) {
  driver_job *j = (driver_job *)job;
  bcpy_tee *t = j->t;
  bc_buf buf = BC_BUF_INIT;
  /* The fills below run in this thread: their passes may read the ring
   * of a pass that raised (bcpy_tee_attach). */
  t->driver_thread = pthread_self();
  atomic_store(&t->driver_started, true);
  for (uint64_t k = 0; driver_wants(t, k); k++) {
    int rc = bc_seq_get(j->seq, (int64_t)(k * t->R), &buf);
    if (rc == BC_ERANGE) break; /* the end came at a shard boundary */
    if (rc != 0) {
      /* The source's failures are the consumer's own (it met them first),
       * and cancelled fills are a close or an interrupt: not reported. */
      if (rc != BC_ESOURCE && rc != BC_ECLOSED && !atomic_load(&j->src->closed)) {
        snprintf(t->fill_msg, sizeof t->fill_msg, "%s", bc_errmsg());
        atomic_store(&t->fill_rc, rc);
      }
      break;
    }
  }
  /* This thread may run other jobs from now on. */
  atomic_store(&t->driver_started, false);
  bc_buf_release(&buf);
  return 0;
}

static void driver_release(bcpy_job *job) {
  driver_job *j = (driver_job *)job;
  bc_seq_unref(j->seq);
  pthread_mutex_lock(&j->t->lock);
  atomic_store(&j->t->driver_done, true);
  pthread_cond_broadcast(&j->t->cond);
  pthread_mutex_unlock(&j->t->lock);
  PyGILState_STATE gil = bcpy_gil_enter();
  if (j->src->tee == j->t) { /* the first pass is over: a new one may start */
    j->src->tee = NULL;
    atomic_store(&j->src->tee_active, false);
    if (atomic_load(&j->t->fill_rc) != 0 && !j->t->warned && j->src->unwarned == NULL)
      j->src->unwarned = j->t; /* the reference passes: close() warns */
    else
      tee_unref(j->t);
  }
  tee_unref(j->t);
  bcpy_gil_leave(gil);
  bcpy_source_unref(j->src);
}

int bcpy_tee_settle(bcpy_source *s, bool interruptible) {
  bcpy_tee *t = s != NULL ? s->tee : NULL;
  int rc = 0;
  if (t != NULL && t->pid == getpid()) {
    tee_ref(t);
    /* A loop holding its iterator mid-way is broken off by the close
     * (unless it is inside the iterator now): as if it had been dropped. */
    if (atomic_load(&t->state) == TEE_OPEN && !t->in_next) hand_over(t);
    int state = atomic_load(&t->state);
    if (state == TEE_ENDED || (state == TEE_GIVEN && !t->driver_stop))
      rc = wait_driver(t, interruptible);
    if (rc == 0) rc = warn_fill_failed(t);
    tee_unref(t);
  }
  if (rc == 0 && s != NULL && s->unwarned != NULL) { /* a driver that failed alone */
    t = s->unwarned;
    s->unwarned = NULL;
    if (t->pid == getpid()) rc = warn_fill_failed(t);
    tee_unref(t);
  }
  return rc;
}

void bcpy_tee_forget(bcpy_source *s) {
  if (s == NULL || s->unwarned == NULL) return;
  tee_unref(s->unwarned);
  s->unwarned = NULL;
}

/* ---- _TeeIter ---------------------------------------------------------------------- */

typedef struct {
  PyObject_HEAD
  PyObject *loader;   /* for the fall-back */
  bcpy_source *src;   /* own reference */
  bcpy_tee *tee;      /* NULL once it is not read from any more */
  PyObject *fallback; /* the cache's iterator, from where the ring stopped */
  bool done;
  bool alone;         /* the cache failed: the iterator's items, not saved */
  unsigned forks; /* bcpy_forks() when made */
} bcpy_teeiter;

/* Leaves the ring (GIL held): a consumer that is not at the end hands
 * the iterator over. */
static void leave(bcpy_teeiter *self) {
  bcpy_tee *t = self->tee;
  if (t == NULL) return;
  self->tee = NULL;
  hand_over(t);
  tee_unref(t);
}

/* Leaves the ring for the cache's iterator from the record after the last
 * one pushed.  -1 with an exception when that iterator cannot be made
 * (the iteration is then over). */
static int switch_to_cache(bcpy_teeiter *self) {
  uint64_t from = atomic_load(&self->tee->tail);
  leave(self);
  self->fallback = bcpy_cache_iter(self->loader, from);
  if (self->fallback != NULL) return 0;
  self->done = true;
  return -1;
}

/* Continues from the cache (switch_to_cache) with its first record. */
static PyObject *fall_back(bcpy_teeiter *self) {
  if (switch_to_cache(self) < 0) return NULL;
  return Py_TYPE(self->fallback)->tp_iternext(self->fallback);
}

/* Where the records come from once the ring may not be read any more
 * (GIL held, not in the iterator): 0 the ring still, 1 the iterator alone
 * (the driver failed to write the cache: warned once), 2 the cache, or -1
 * with an exception (a signal, or the warning made an error: the
 * iteration is then over). */
static int choose(bcpy_teeiter *self) {
  bcpy_tee *t = self->tee;
  int state = atomic_load(&t->state);
  if (state == TEE_OPEN && !atomic_load(&t->driver_done) && atomic_load(&t->fill_rc) == 0)
    return 0;
  if (state == TEE_DETACHED) {
    /* The pass went away: whether its fill failed is the driver's to say
     * (it stops after the request in progress).  in_next keeps other
     * threads out of the iterator meanwhile. */
    t->in_next = true;
    int rc = wait_driver(t, true);
    t->in_next = false;
    if (rc < 0) return -1;
  }
  state = atomic_load(&t->state);
  if (atomic_load(&t->fill_rc) == 0 || (state != TEE_OPEN && state != TEE_DETACHED))
    return 2;
  set_state(t, TEE_ALONE); /* the iterator is still the consumer's */
  self->alone = true;
  if (warn_fill_failed(t) < 0) {
    self->done = true;
    leave(self);
    return -1;
  }
  return 1;
}

/* The iterator ended, with the exception pending if any (GIL held): waits
 * (when `wait`) until the driver has published the shards up to the end
 * and made the length final, or failed the shard of the failure, and
 * warns if it could not write the cache.  A signal or an error of the
 * warning during that becomes the exception, with the pending one as its
 * context. */
static void end_of_pass(bcpy_tee *t, bool wait) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  int rc = wait ? wait_driver(t, true) : 0;
  if (rc == 0) rc = warn_fill_failed(t);
  if (rc == 0 || value == NULL) {
    if (rc == 0) PyErr_Restore(type, value, tb);
    return;
  }
  PyObject *type2, *value2, *tb2;
  PyErr_Fetch(&type2, &value2, &tb2);
  PyErr_NormalizeException(&type2, &value2, &tb2);
  PyErr_NormalizeException(&type, &value, &tb);
  if (tb != NULL) PyException_SetTraceback(value, tb);
  PyException_SetContext(value2, value); /* takes the reference */
  Py_XDECREF(type);
  Py_XDECREF(tb);
  PyErr_Restore(type2, value2, tb2);
}

static PyObject *serialize(bcpy_source *s, PyObject *item);

/* A record pulled while the iterator's items go on alone: as the cache
 * would give it back (raw: its bytes), or NULL with an exception. */
static PyObject *alone_item(bcpy_teeiter *self, PyObject *item) {
  if (self->src->dumps != NULL) return item;
  PyObject *record = serialize(self->src, item);
  Py_DECREF(item);
  if (record == NULL) {
    self->done = true;
    leave(self);
  }
  return record;
}

/* Ends the ring with the pending exception (kept for the fill's waiters)
 * and leaves it set for the caller. */
static void end_with_exception(bcpy_tee *t, const char *what) {
  if (!PyErr_ExceptionMatches(PyExc_Exception)) {
    /* KeyboardInterrupt, SystemExit...: the fill is cancelled (its
     * waiters retry), the exception is the consumer's alone. */
    bc_set_errmsg(BC_ESOURCE, "the first pass was interrupted");
    end(t, BC_ESOURCE);
    return;
  }
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  Py_XINCREF(type);
  Py_XINCREF(value);
  Py_XINCREF(tb);
  PyErr_Restore(type, value, tb);
  end(t, bcpy_keep_exception(what)); /* takes the pending one */
  PyErr_Restore(type, value, tb);
}

/* The record as stored: dumps(item), or item's bytes (new reference). */
static PyObject *serialize(bcpy_source *s, PyObject *item) {
  PyObject *b;
  if (s->dumps != NULL) {
    b = bcpy_source_dumps(s, item);
  } else {
    Py_INCREF(item);
    b = item;
  }
  if (b == NULL || PyBytes_CheckExact(b)) return b;
  /* Another bytes-like object (it could change after this): a copy. */
  PyObject *copy = NULL;
  if ((PyUnicode_Check(b) || !PyObject_CheckBuffer(b)) && s->dumps != NULL) {
    PyErr_Format(PyExc_TypeError, "the serializer returned %.200s, not a bytes-like object",
                 Py_TYPE(b)->tp_name);
  } else if (PyUnicode_Check(b) || !PyObject_CheckBuffer(b)) {
    PyErr_Format(PyExc_TypeError, "a record must be a bytes-like object "
                 "(serializer=\"raw\"), not %.200s", Py_TYPE(b)->tp_name);
  } else {
    copy = PyBytes_FromObject(b);
  }
  Py_DECREF(b);
  return copy;
}

static PyObject *teeiter_next(bcpy_teeiter *self) {
  if (self->fallback != NULL) return Py_TYPE(self->fallback)->tp_iternext(self->fallback);
  if (self->done) return NULL;
  if (self->forks != bcpy_forks()) {
    PyErr_SetString(PyExc_RuntimeError, "the iterator was created before fork(); "
                    "create a new one in this process");
    return NULL;
  }
  bcpy_tee *t = self->tee;
  bcpy_source *s = self->src;
  if (t->in_next) {
    PyErr_SetString(PyExc_RuntimeError, "the iterator is already running in another thread");
    return NULL;
  }
  if (atomic_load(&s->closed)) {
    self->done = true;
    leave(self);
    PyErr_SetString(PyExc_ValueError, "the LoadIt is closed");
    return NULL;
  }
  if (!self->alone) {
    int mode = choose(self);
    if (mode < 0) return NULL;
    if (mode == 2) return fall_back(self); /* the rest is (or will be) in the cache */
  }

  t->in_next = true;
  PyObject *item = PyIter_Next(t->it), *record = NULL;
  if (item == NULL) {
    self->done = true;
    t->in_next = false;
    if (self->alone) goto out;
    /* KeyboardInterrupt, SystemExit...: no waiting (and the fill is
     * cancelled); the end or an Exception: the caller gets it once the
     * driver is done (see the header). */
    bool wait = !PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_Exception);
    if (PyErr_Occurred()) end_with_exception(t, "iterator");
    else end(t, 0);
    end_of_pass(t, wait);
    goto out;
  }
  if (self->alone) {
    t->in_next = false;
    return alone_item(self, item);
  }
  if (atomic_load(&t->state) != TEE_OPEN) { /* the pass went away meanwhile */
    t->in_next = false;
    int mode = choose(self);
    if (mode == 1) return alone_item(self, item);
    Py_DECREF(item);
    return mode < 0 ? NULL : fall_back(self);
  }
  record = serialize(s, item);
  if (record == NULL) {
    self->done = true;
    Py_CLEAR(item);
    bool wait = PyErr_ExceptionMatches(PyExc_Exception);
    end_with_exception(t, "serializer");
    t->in_next = false;
    end_of_pass(t, wait);
    goto out;
  }
  int room = make_room(t);
  if (room < 0) { /* interrupted while the pass was busy: continue from the cache */
    end_with_exception(t, "iterator");
    Py_CLEAR(item);
    Py_DECREF(record);
    t->in_next = false;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (switch_to_cache(self) < 0) PyErr_Clear(); /* the interrupt is what counts */
    PyErr_Restore(type, value, tb);
    return NULL;
  }
  if (room > 0) { /* nobody reads the ring: the cache, or the iterator alone */
    Py_DECREF(record);
    t->in_next = false;
    int mode = choose(self);
    if (mode == 1) return alone_item(self, item);
    Py_DECREF(item);
    return mode < 0 ? NULL : fall_back(self);
  }
  if (s->dumps == NULL) { /* raw: what the cache will give back */
    Py_DECREF(item);
    Py_INCREF(record);
    item = record;
  }
  push(t, record);
out:
  t->in_next = false;
  if (self->done) leave(self);
  return item;
}

static int teeiter_traverse(bcpy_teeiter *self, visitproc visit, void *arg) {
  Py_VISIT(self->loader);
  Py_VISIT(self->fallback);
  return 0;
}

/* The loop dropped its iterator mid-pass (a break, an exception in the
 * loop's body): the shard it was in is completed by the driver with the
 * same iterator, and is on disk when the drop returns, as if each shard had
 * been written before its records were yielded (loadit's own loop, and
 * what code that looks at the root right after the loop expects).  The
 * wait is interruptible on the main thread: Ctrl-C stops it and is raised
 * again at once (a dealloc cannot raise), the driver finishing in the
 * background.  Any exception being propagated is kept. */
static void leave_and_settle(bcpy_teeiter *self) {
  bcpy_tee *t = self->tee;
  if (t == NULL) return;
  tee_ref(t);
  leave(self);
  int state = atomic_load(&t->state);
  bool driver = atomic_load(&t->driver_started) &&
                pthread_equal(pthread_self(), t->driver_thread);
  if (t->pid == getpid() && state == TEE_GIVEN && !t->driver_stop && !driver) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (wait_driver(t, true) < 0) {
      if (PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) PyErr_SetInterrupt();
      PyErr_Clear();
    }
    PyErr_Restore(type, value, tb);
  }
  tee_unref(t);
}

static void teeiter_dealloc(bcpy_teeiter *self) {
  PyObject_GC_UnTrack(self);
  leave_and_settle(self);
  Py_CLEAR(self->fallback);
  Py_CLEAR(self->loader);
  bcpy_source_unref(self->src);
  PyObject_GC_Del(self);
}

PyTypeObject bcpy_TeeIter_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bagcache._bagcache._TeeIter",
    .tp_basicsize = sizeof(bcpy_teeiter),
    .tp_dealloc = (destructor)teeiter_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The first pass over an empty LoadIt: the iterator's own objects, "
              "cached on the way.",
    .tp_traverse = (traverseproc)teeiter_traverse,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)teeiter_next,
};

PyObject *bcpy_tee_start(PyObject *loader, bcpy_source *s, bc_seq *seq, uint64_t R,
                         PyObject *root) {
  if (R == 0 || atomic_load(&s->closed) || atomic_load(&s->passes) != 0 ||
      (s->tee != NULL && s->tee->pid == getpid()))
    return NULL;
  bcpy_tee *t = tee_alloc();
  PyObject **slots = PyMem_RawCalloc(SLOTS, sizeof *slots);
  driver_job *j = PyMem_RawCalloc(1, sizeof *j);
  bcpy_teeiter *self = NULL;
  if (t == NULL || slots == NULL || j == NULL ||
      (self = PyObject_GC_New(bcpy_teeiter, &bcpy_TeeIter_Type)) == NULL) {
    free(t);
    PyMem_RawFree(slots);
    PyMem_RawFree(j);
    return self == NULL && !PyErr_Occurred() ? PyErr_NoMemory() : NULL;
  }
  self->fallback = NULL;
  self->tee = NULL;
  self->done = false;
  self->alone = false;
  self->forks = bcpy_forks();
  atomic_fetch_add(&s->refs, 1);
  self->src = s;
  Py_INCREF(loader);
  self->loader = loader;
  PyObject_GC_Track(self);

  atomic_init(&t->refs, 1);
  t->pid = getpid();
  t->consumer = pthread_self();
  t->R = R;
  t->slots = slots;
  Py_INCREF(root);
  t->root = root;
  pthread_mutex_init(&t->lock, NULL);
  pthread_cond_init(&t->cond, NULL);
  atomic_init(&t->state, TEE_OPEN);
  self->tee = t;

  /* The iterator itself, as a pass would make it. */
  PyObject *create = s->create_iter;
  Py_INCREF(create);
  PyObject *iterable = PyObject_CallNoArgs(create);
  Py_DECREF(create);
  t->it = iterable != NULL ? PyObject_GetIter(iterable) : NULL;
  Py_XDECREF(iterable);
  if (t->it == NULL) {
    PyMem_RawFree(j);
    Py_DECREF(self); /* the source's exception reaches the caller as itself */
    return NULL;
  }

  j->base.run = driver_run;
  j->base.release = driver_release;
  j->t = tee_ref(t);
  atomic_fetch_add(&s->refs, 1);
  j->src = s;
  j->seq = bc_seq_ref(seq);
  s->tee = tee_ref(t); /* registered: a pass opened from now on attaches */
  atomic_store(&s->tee_active, true);
  if (bcpy_run_detached(&j->base) != 0) {
    s->tee = NULL;
    atomic_store(&s->tee_active, false);
    tee_unref(t);
    tee_unref(t);
    bc_seq_unref(j->seq);
    bcpy_source_unref(s);
    PyMem_RawFree(j);
    Py_DECREF(self);
    return NULL; /* no helper thread: the regular iterator will do */
  }
  return (PyObject *)self;
}
