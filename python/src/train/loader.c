/*
 * train/loader.c - _Loader: a DataLoader's batches of fixed-size rows built
 * on POSIX threads, with no GIL and no Python object per batch.
 *
 *   _Loader(sources, order, workers, prefetch)
 *       sources: a list of (kind, obj, row_bytes, pool), one per dataset:
 *         ("seq", seq, row_bytes, pool): seq's raw records, gathered with
 *           bc_seq_read_into (a Reader, a view of them, a raw LoadIt);
 *         ("buf", array, row_bytes, pool): rows of a C-contiguous buffer
 *           (an NPDataset's array), copied with memcpy;
 *         pool: the _BatchPool the batches' memory comes from.
 *       order: (length, batch_size, world_size, rank, mode, drop_last,
 *         num_epochs or None): the Sampler's parameters (train/order.c
 *         computes its steps and indices).
 *   .start(seed, epoch, consumed)  workers start at that sampler state
 *   .next() -> None at the end of a finite order or once closed, else
 *       (count, blocks, epoch_after, consumed_after): blocks holds one
 *       _BatchBlock per source (None for an empty batch or rows of 0
 *       bytes); for a batch whose build failed, its exception object,
 *       returned, not raised (BC_ESOURCE: the source's own exception; a
 *       record that is not one row: ValueError), so that the caller tells
 *       it from an interrupt of the wait itself, which is raised.  Waits
 *       with the GIL released, checking for signals every 100 ms.
 *   .stop()   stops and joins the workers; built batches not yet returned
 *             are dropped (their memory goes back to the pools).  A worker
 *             stops between two parts of a batch (read_parts) and inside a
 *             LoadIt's fill (its interrupt handler), not at the batch's end.
 *   .close()  stop(), then releases the sources; next() then returns None
 *   .running  worker threads alive;  .ready  batches built, not returned
 *
 * The hand-off: step k (the k-th batch since start) is built into slot
 * k % ahead, where ahead = prefetch + workers: as loaderx's queue of
 * prefetch_size batches, which its workers fill each building one more.
 * Workers take steps in order under `lock` (the sampler's state advances
 * there), never more than `ahead` steps ahead of the consumer, build them
 * without any lock, and publish them under `lock`;
 * the consumer takes slot `delivered` once it is done.  So batch k is
 * always built from the same indices and returned in order, whatever the
 * number of workers, as the Python pipeline (train.py's _Pipeline).
 *
 * Locks: `lock` guards the hand-off state (below); it is never held while
 * taking the GIL, a pool's lock or doing I/O.  The consumer takes it with
 * the GIL released.  Workers never take the GIL themselves; a LoadIt's
 * fill inside bc_seq_read_into may (loadit/source.c), so every join runs
 * with the GIL released.
 *
 * Memory: a worker takes a batch's memory from its source's pool
 * (bcpy_pool_take_mem, no GIL); next() wraps it in a _BatchBlock, whose
 * death gives it back.  Memory of a batch never returned goes back by
 * bcpy_pool_give_mem.  So a block's memory is on a free list only while
 * nothing refers to it, and is handed to at most one live batch.
 */
#include "train/train.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "train/order.h"
#include "train/pool.h"

#define MAX_SOURCES 2

typedef struct {
  bc_seq *seq;        /* "seq": the records (one reference) */
  Py_buffer view;     /* "buf": the rows (view.obj NULL when not held) */
  size_t nrows;       /* "buf": rows in view */
  size_t row_bytes;
  PyObject *pool;     /* a _BatchPool, strong reference */
} source;

typedef struct {
  bool done;          /* built (or failed): the consumer may take it */
  int rc;             /* 0, or the failure in err */
  bc_error_state err;
  size_t count;       /* rows */
  void *mem[MAX_SOURCES];
  uint64_t epoch_after, consumed_after;
} slot;

typedef struct {
  PyObject_HEAD
  bcpy_order ord;
  size_t nsrc;
  source src[MAX_SOURCES];
  size_t workers, ahead;
  pthread_t *tids;
  size_t nstarted;    /* threads created by start(), joined by stop() */
  bool init;          /* lock and conds made */
  bool closed;
  pthread_mutex_t lock;
  /* guarded by lock: */
  pthread_cond_t work_cv, done_cv;
  /* stop(): workers leave.  Atomic: also read without the lock, by a
   * worker between the parts of a batch and by its interrupt handler (a
   * LoadIt's fill or wait inside bc_seq_read_into then gives up with
   * BC_ECANCELED instead of finishing its shard, so that close() does not
   * wait for a slow source; the batch is dropped). */
  atomic_bool stopping;
  uint64_t epoch, consumed; /* the sampler's state after the steps handed */
  uint64_t handed, delivered, end;
  bool ended;         /* end is the number of steps of this run */
  size_t running;
  slot *slots;        /* ahead of them */
} loader;

/* ---- building a batch (worker threads, no GIL, no lock) ----------------------------- */

static int read_rows(const source *s, const int64_t *idx, size_t count, void *mem) {
  if (s->seq != NULL) return bc_seq_read_into(s->seq, idx, count, mem, s->row_bytes, 1);
  const unsigned char *base = s->view.buf;
  unsigned char *dst = mem;
  for (size_t k = 0; k < count; k++) {
    if (idx[k] < 0 || (uint64_t)idx[k] >= s->nrows)
      return bc_set_errmsg(BC_ERANGE, "indices[%zu] = %lld out of range [0, %zu)", k,
                           (long long)idx[k], s->nrows);
    memcpy(dst + k * s->row_bytes, base + (size_t)idx[k] * s->row_bytes, s->row_bytes);
  }
  return 0;
}

/* A batch is read in parts of at least this many bytes (and 64 rows):
 * between two parts a worker looks at `stopping`, so that stop() and
 * close() wait for one part of a large batch, not for the whole of it. */
#define PART_BYTES ((size_t)1 << 20)
#define PART_ROWS_MIN 64

/* read_rows in parts (above): 0, the first failure, or BC_ECANCELED once
 * the loader stops. */
static int read_parts(loader *L, const source *s, const int64_t *idx, size_t count,
                      unsigned char *mem) {
  /* (row_bytes > 0: build() reads no source of empty rows) */
  size_t part = (PART_BYTES + s->row_bytes - 1) / s->row_bytes;
  if (part < PART_ROWS_MIN) part = PART_ROWS_MIN;
  for (size_t at = 0; at < count; at += part) {
    if (at > 0 && atomic_load_explicit(&L->stopping, memory_order_relaxed))
      return bc_set_errmsg(BC_ECANCELED, "the loader stopped");
    size_t n = count - at < part ? count - at : part;
    int rc = read_rows(s, idx + at, n, mem + at * s->row_bytes);
    /* A later part's error names its position in the part: the whole
     * batch read once more names it in the batch (the failure path only;
     * the seq's own read_into does the same to name its first failure). */
    if (rc != 0 && at > 0 && rc != BC_ECANCELED) return read_rows(s, idx, count, mem);
    if (rc != 0) return rc;
  }
  return 0;
}

/* Builds step `st` into *out (not yet done): its rows, or its failure. */
static void build(loader *L, const bcpy_step *st, int64_t *idx, bcpy_order_cache *cache,
                  slot *out) {
  size_t count = bcpy_order_count(&L->ord, st);
  int rc = idx == NULL ? bc_set_errmsg(BC_ENOMEM, "out of memory for a batch's indices")
                       : bcpy_order_indices(&L->ord, st, cache, idx);
  out->count = count;
  out->epoch_after = st->epoch_after;
  out->consumed_after = st->consumed_after;
  for (size_t i = 0; i < L->nsrc && rc == 0; i++) {
    const source *s = &L->src[i];
    if (count == 0 || s->row_bytes == 0) continue;
    size_t nbytes = count * s->row_bytes; /* below the pool's nbytes: no overflow */
    if ((out->mem[i] = bcpy_pool_take_mem(s->pool, nbytes)) == NULL)
      rc = bc_set_errmsg(BC_ENOMEM, "out of memory for a batch of %zu bytes", nbytes);
    else
      rc = read_parts(L, s, idx, count, out->mem[i]);
  }
  if (rc != 0) {
    for (size_t i = 0; i < L->nsrc; i++) {
      bcpy_pool_give_mem(L->src[i].pool, out->mem[i], count * L->src[i].row_bytes);
      out->mem[i] = NULL;
    }
    bc_error_save(&out->err, rc);
  }
  out->rc = rc;
}

/* The workers' interrupt handler (bc_set_interrupt_handler). */
static int worker_aborted(void *arg) {
  loader *L = arg;
  return atomic_load_explicit(&L->stopping, memory_order_relaxed);
}

static void *worker_main(void *arg) {
  loader *L = arg;
  bc_set_interrupt_handler(worker_aborted, L); /* a new thread: none before */
  int64_t *idx = malloc(L->ord.batch_size ? L->ord.batch_size * sizeof *idx : 1);
  bcpy_order_cache cache = {0};
  pthread_mutex_lock(&L->lock);
  for (;;) {
    while (!L->stopping && !L->ended && L->handed >= L->delivered + L->ahead)
      pthread_cond_wait(&L->work_cv, &L->lock);
    if (L->stopping || L->ended) break;
    uint64_t k = L->handed;
    bcpy_step st;
    int p = bcpy_order_plan(&L->ord, L->epoch, L->consumed, &st);
    if (p <= 0) { /* the end, or a state the order cannot go on from */
      if (p < 0) {
        slot *s = &L->slots[k % L->ahead];
        s->rc = p;
        bc_error_save(&s->err, p);
        s->done = true;
        L->handed++;
      }
      L->end = L->handed;
      L->ended = true;
      pthread_cond_broadcast(&L->done_cv);
      break;
    }
    L->handed++;
    L->epoch = st.epoch_after;
    L->consumed = st.consumed_after;
    /* Built without the lock: slot k % ahead is no one else's until the
     * consumer takes it (step k - ahead was delivered). */
    slot r = {.err = BC_ERROR_STATE_INIT};
    pthread_mutex_unlock(&L->lock);
    build(L, &st, idx, &cache, &r);
    pthread_mutex_lock(&L->lock);
    r.done = true;
    L->slots[k % L->ahead] = r;
    pthread_cond_signal(&L->done_cv); /* the consumer is its only waiter */
  }
  L->running--;
  pthread_mutex_unlock(&L->lock);
  bcpy_order_cache_free(&cache);
  free(idx);
  bc_set_interrupt_handler(NULL, NULL);
  return NULL;
}

/* ---- the Python object ------------------------------------------------------------- */

/* Drops a slot's batch (GIL held: an error's payload may be a Python
 * exception). */
static void slot_drop(loader *L, slot *s) {
  for (size_t i = 0; i < L->nsrc; i++)
    bcpy_pool_give_mem(L->src[i].pool, s->mem[i], s->count * L->src[i].row_bytes);
  bc_error_state_clear(&s->err);
  *s = (slot){.err = BC_ERROR_STATE_INIT};
}

/* True in one of L's workers: Python code a worker runs (a LoadIt's
 * source, inside a fill) may drop or collect the loader. */
static bool on_a_worker(const loader *L) {
  for (size_t t = 0; t < L->nstarted; t++)
    if (pthread_equal(L->tids[t], pthread_self())) return true;
  return false;
}

/* Stops and joins the workers; drops the batches not returned.  Not from a
 * worker (on_a_worker): the callers check. */
static void loader_stop_threads(loader *L) {
  if (!L->init) return;
  Py_BEGIN_ALLOW_THREADS
  pthread_mutex_lock(&L->lock);
  L->stopping = true;
  pthread_cond_broadcast(&L->work_cv);
  pthread_mutex_unlock(&L->lock);
  /* With the GIL released: a worker in a LoadIt's fill may need it. */
  for (size_t t = 0; t < L->nstarted; t++) pthread_join(L->tids[t], NULL);
  Py_END_ALLOW_THREADS
  L->nstarted = 0;
  /* No worker is left: the slots are this thread's. */
  for (size_t i = 0; i < L->ahead; i++) slot_drop(L, &L->slots[i]);
}

static void loader_release_sources(loader *L) {
  for (size_t i = 0; i < L->nsrc; i++) {
    source *s = &L->src[i];
    if (s->seq != NULL) {
      bc_seq *seq = s->seq;
      s->seq = NULL;
      /* The last reference to a LoadIt's sequence may close its cache. */
      Py_BEGIN_ALLOW_THREADS
      bc_seq_unref(seq);
      Py_END_ALLOW_THREADS
    }
    if (s->view.obj != NULL) PyBuffer_Release(&s->view);
  }
}

static void loader_dealloc(loader *L) {
  if (L->init && on_a_worker(L)) {
    /* Collected by Python code running in one of its own workers: that
     * worker goes on with L when this returns, so L is left allocated
     * (with its sources); its workers stop, detached since nobody is left
     * to join them.  A leak, not a crash. */
    pthread_mutex_lock(&L->lock);
    L->stopping = true;
    pthread_cond_broadcast(&L->work_cv);
    pthread_mutex_unlock(&L->lock);
    for (size_t t = 0; t < L->nstarted; t++) pthread_detach(L->tids[t]);
    L->nstarted = 0;
    return;
  }
  if (!bcpy_finalizing()) {
    loader_stop_threads(L);
    loader_release_sources(L);
  } /* else threads may still run: everything is left to the process's end */
  if (L->init && !bcpy_finalizing()) {
    pthread_mutex_destroy(&L->lock);
    pthread_cond_destroy(&L->work_cv);
    pthread_cond_destroy(&L->done_cv);
    for (size_t i = 0; i < L->nsrc; i++) Py_CLEAR(L->src[i].pool);
    PyMem_RawFree(L->slots);
    PyMem_RawFree(L->tids);
  }
  Py_TYPE(L)->tp_free((PyObject *)L);
}

static int parse_source(source *s, PyObject *item) {
  const char *kind;
  PyObject *obj, *pool;
  Py_ssize_t row_bytes;
  if (!PyArg_ParseTuple(item, "sOnO:_Loader source", &kind, &obj, &row_bytes, &pool))
    return -1;
  if (row_bytes < 0 || !bcpy_is_batch_pool(pool)) {
    PyErr_SetString(PyExc_TypeError, "_Loader: a source is (kind, obj, row_bytes >= 0, pool)");
    return -1;
  }
  s->row_bytes = (size_t)row_bytes;
  s->pool = Py_NewRef(pool);
  if (strcmp(kind, "seq") == 0) return (s->seq = bcpy_record_seq(obj)) == NULL ? -1 : 0;
  if (strcmp(kind, "buf") != 0) {
    PyErr_Format(PyExc_ValueError, "_Loader: unknown source kind %s", kind);
    return -1;
  }
  if (PyObject_GetBuffer(obj, &s->view, PyBUF_C_CONTIGUOUS) < 0) return -1;
  if (row_bytes == 0 ? s->view.len != 0 : s->view.len % row_bytes != 0) {
    PyErr_SetString(PyExc_ValueError, "_Loader: the buffer is not a whole number of rows");
    return -1;
  }
  s->nrows = row_bytes == 0 ? 0 : (size_t)(s->view.len / row_bytes);
  return 0;
}

static PyObject *loader_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"sources", "order", "workers", "prefetch", NULL};
  PyObject *sources, *epochs;
  unsigned long long length, batch_size, world_size, rank;
  int mode, drop_last;
  Py_ssize_t workers, prefetch;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!(KKKKipO)nn:_Loader", kwlist, &PyList_Type,
                                   &sources, &length, &batch_size, &world_size, &rank, &mode,
                                   &drop_last, &epochs, &workers, &prefetch))
    return NULL;
  Py_ssize_t nsrc = PyList_GET_SIZE(sources);
  if (nsrc < 1 || nsrc > MAX_SOURCES || workers < 1 || workers > 1024 || prefetch < 1 ||
      prefetch > (1 << 20) || mode < 0 || mode > 2 || batch_size < 1 || world_size < 1 ||
      rank >= world_size || world_size > UINT64_MAX / batch_size ||
      batch_size > SIZE_MAX / sizeof(int64_t)) {
    PyErr_SetString(PyExc_ValueError, "_Loader: bad arguments");
    return NULL;
  }
  loader *L = (loader *)type->tp_alloc(type, 0);
  if (L == NULL) return NULL;
  L->ord = (bcpy_order){.length = length, .batch_size = batch_size, .world_size = world_size,
                        .rank = rank, .mode = mode, .drop_last = drop_last != 0,
                        .finite = epochs != Py_None};
  if (L->ord.finite) {
    L->ord.num_epochs = PyLong_AsUnsignedLongLong(epochs);
    if (PyErr_Occurred()) goto fail;
  }
  L->workers = (size_t)workers;
  L->ahead = (size_t)prefetch + (size_t)workers; /* both bounded above */
  for (Py_ssize_t i = 0; i < nsrc; i++) {
    L->nsrc = (size_t)i + 1;
    if (parse_source(&L->src[i], PyList_GET_ITEM(sources, i)) < 0) goto fail;
    if (L->src[i].row_bytes > SIZE_MAX / batch_size) {
      PyErr_SetString(PyExc_OverflowError, "_Loader: a batch would not fit in memory");
      goto fail;
    }
  }
  L->slots = PyMem_RawCalloc(L->ahead, sizeof *L->slots);
  L->tids = PyMem_RawCalloc(L->workers, sizeof *L->tids);
  if (L->slots == NULL || L->tids == NULL) {
    PyErr_NoMemory();
    goto fail;
  }
  for (size_t i = 0; i < L->ahead; i++) L->slots[i].err = (bc_error_state)BC_ERROR_STATE_INIT;
  if (pthread_mutex_init(&L->lock, NULL) != 0) goto fail_sys;
  if (pthread_cond_init(&L->work_cv, NULL) != 0) {
    pthread_mutex_destroy(&L->lock);
    goto fail_sys;
  }
  if (pthread_cond_init(&L->done_cv, NULL) != 0) {
    pthread_cond_destroy(&L->work_cv);
    pthread_mutex_destroy(&L->lock);
    goto fail_sys;
  }
  L->init = true;
  L->stopping = true; /* until start() */
  return (PyObject *)L;
fail_sys:
  PyErr_SetString(PyExc_OSError, "_Loader: cannot make a lock");
fail:
  loader_release_sources(L);
  for (size_t i = 0; i < L->nsrc; i++) Py_CLEAR(L->src[i].pool);
  PyMem_RawFree(L->slots);
  PyMem_RawFree(L->tids);
  L->slots = NULL;
  L->tids = NULL;
  L->nsrc = 0;
  Py_DECREF(L);
  return NULL;
}

static int check_open(loader *L) {
  if (!L->closed) return 0;
  PyErr_SetString(PyExc_ValueError, "the loader is closed");
  return -1;
}

static PyObject *loader_start(loader *L, PyObject *args) {
  unsigned long long seed, epoch, consumed;
  if (!PyArg_ParseTuple(args, "KKK:start", &seed, &epoch, &consumed)) return NULL;
  if (check_open(L) < 0) return NULL;
  if (L->nstarted > 0) {
    PyErr_SetString(PyExc_RuntimeError, "_Loader.start: the workers run already");
    return NULL;
  }
  /* No worker runs; under the lock all the same, for a next() another
   * thread may be calling. */
  pthread_mutex_lock(&L->lock);
  L->ord.seed = seed;
  L->epoch = epoch;
  L->consumed = consumed;
  L->handed = L->delivered = L->end = 0;
  L->ended = false;
  L->stopping = false;
  pthread_mutex_unlock(&L->lock);
  int err = 0;
  for (; L->nstarted < L->workers; L->nstarted++) {
    pthread_mutex_lock(&L->lock);
    L->running++;
    pthread_mutex_unlock(&L->lock);
    if ((err = pthread_create(&L->tids[L->nstarted], NULL, worker_main, L)) != 0) {
      pthread_mutex_lock(&L->lock);
      L->running--;
      pthread_mutex_unlock(&L->lock);
      break;
    }
  }
  if (err != 0) {
    loader_stop_threads(L);
    errno = err;
    return PyErr_SetFromErrno(PyExc_OSError);
  }
  Py_RETURN_NONE;
}

/* Raises a failed batch's error (its state made this thread's). */
static PyObject *raise_slot(slot *s) {
  int rc = bc_error_restore(&s->err);
  return bcpy_train_raise(rc);
}

static PyObject *loader_next(loader *L, PyObject *unused) {
  (void)unused;
  if (L->closed) Py_RETURN_NONE;
  slot got = {.err = BC_ERROR_STATE_INIT};
  enum { WAIT, GOT, END } what = WAIT;
  while (what == WAIT) {
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&L->lock);
    for (int waited = 0; what == WAIT && waited < 2; waited++) {
      slot *s = &L->slots[L->delivered % L->ahead];
      if (L->delivered < L->handed && s->done) {
        got = *s;
        *s = (slot){.err = BC_ERROR_STATE_INIT};
        L->delivered++;
        what = GOT;
        /* One slot came free: one worker can take one more step.  (A worker
         * woken for nothing waits again; stop() broadcasts.) */
        pthread_cond_signal(&L->work_cv);
      } else if ((L->ended && L->delivered >= L->end) || L->stopping) {
        what = END;
      } else if (waited == 0) { /* wait up to 100 ms, then look again */
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += 100 * 1000 * 1000;
        if (t.tv_nsec >= 1000 * 1000 * 1000) {
          t.tv_sec++;
          t.tv_nsec -= 1000 * 1000 * 1000;
        }
        pthread_cond_timedwait(&L->done_cv, &L->lock, &t);
      }
    }
    pthread_mutex_unlock(&L->lock);
    Py_END_ALLOW_THREADS
    if (what == WAIT && PyErr_CheckSignals() < 0) return NULL;
  }
  if (what == END) Py_RETURN_NONE;
  if (got.rc != 0) { /* the batch's exception, returned (an interrupt is raised) */
    raise_slot(&got);
    bc_error_state_clear(&got.err);
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    if (v != NULL && tb != NULL) PyException_SetTraceback(v, tb);
    Py_XDECREF(t);
    Py_XDECREF(tb);
    return v;
  }
  PyObject *blocks = PyTuple_New((Py_ssize_t)L->nsrc);
  for (size_t i = 0; i < L->nsrc; i++) {
    size_t nbytes = got.count * L->src[i].row_bytes;
    PyObject *b = NULL;
    if (got.mem[i] == NULL) {
      b = Py_NewRef(Py_None);
    } else if (blocks != NULL) {
      b = bcpy_pool_wrap(L->src[i].pool, got.mem[i], nbytes);
    } else {
      bcpy_pool_give_mem(L->src[i].pool, got.mem[i], nbytes);
    }
    got.mem[i] = NULL;
    if (blocks == NULL) {
      Py_XDECREF(b);
    } else if (b == NULL) {
      Py_CLEAR(blocks);
    } else {
      PyTuple_SET_ITEM(blocks, (Py_ssize_t)i, b);
    }
  }
  if (blocks == NULL) return NULL;
  return Py_BuildValue("(nNKK)", (Py_ssize_t)got.count, blocks,
                       (unsigned long long)got.epoch_after,
                       (unsigned long long)got.consumed_after);
}

static int check_not_worker(loader *L) {
  if (!on_a_worker(L)) return 0;
  PyErr_SetString(PyExc_RuntimeError, "a loader cannot be stopped from its own worker");
  return -1;
}

static PyObject *loader_stop(loader *L, PyObject *unused) {
  (void)unused;
  if (check_not_worker(L) < 0) return NULL;
  loader_stop_threads(L);
  Py_RETURN_NONE;
}

static PyObject *loader_close(loader *L, PyObject *unused) {
  (void)unused;
  if (L->closed) Py_RETURN_NONE;
  if (check_not_worker(L) < 0) return NULL;
  L->closed = true;
  loader_stop_threads(L);
  loader_release_sources(L);
  Py_RETURN_NONE;
}

static PyObject *loader_get_running(loader *L, void *closure) {
  (void)closure;
  pthread_mutex_lock(&L->lock);
  size_t n = L->running;
  pthread_mutex_unlock(&L->lock);
  return PyLong_FromSize_t(n);
}

static PyObject *loader_get_ready(loader *L, void *closure) {
  (void)closure;
  size_t n = 0;
  pthread_mutex_lock(&L->lock);
  for (uint64_t k = L->delivered; k < L->handed; k++)
    n += L->slots[k % L->ahead].done;
  pthread_mutex_unlock(&L->lock);
  return PyLong_FromSize_t(n);
}

static PyObject *loader_get_closed(loader *L, void *closure) {
  (void)closure;
  return PyBool_FromLong(L->closed);
}

static PyMethodDef loader_methods[] = {
    {"start", (PyCFunction)loader_start, METH_VARARGS,
     "start(seed, epoch, consumed): the workers start at this sampler state."},
    {"next", (PyCFunction)loader_next, METH_NOARGS,
     "next() -> (count, blocks, epoch_after, consumed_after), a failed batch's exception, "
     "or None at the end."},
    {"stop", (PyCFunction)loader_stop, METH_NOARGS,
     "Stops and joins the workers; drops the batches not returned."},
    {"close", (PyCFunction)loader_close, METH_NOARGS,
     "stop(), and releases the sources."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef loader_getset[] = {
    {"running", (getter)loader_get_running, NULL, "Worker threads alive.", NULL},
    {"ready", (getter)loader_get_ready, NULL, "Batches built and not returned.", NULL},
    {"closed", (getter)loader_get_closed, NULL, "True once close() ran.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject loader_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bagcache._bagcache._Loader",
    .tp_basicsize = sizeof(loader),
    .tp_dealloc = (destructor)loader_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "_Loader(sources, order, workers, prefetch): batches of fixed-size rows "
              "built on C threads (train/loader.c).",
    .tp_methods = loader_methods,
    .tp_getset = loader_getset,
    .tp_new = loader_new,
};

int bcpy_train_loader_init(PyObject *mod) {
  return bcpy_add_type(mod, &loader_type, "_Loader");
}
