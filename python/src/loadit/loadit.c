/*
 * loadit/loadit.c - the C side of bagcache.LoadIt: a cache over a Python iterator
 * factory, read as a sequence of Python objects.
 *
 *   _CacheCore  one open cache (bc_cache_open over the source of
 *               loadit/source.c): introspection, info, fill_all, close.
 *               Shared by the loader and every view of it.
 *   _CacheSeq   a subtype of _Sequence (core/sequence.c): the loader
 *               itself (the cache's bc_seq) or a view (a bc_seq_slice /
 *               bc_seq_take of another _CacheSeq's sequence).  Its kind
 *               (lobj_kind) reads items (unpickled records, or bytes),
 *               makes views of index lists, and waits with the GIL
 *               released; subscripts and slices are the base type's;
 *               read_indices reads in parallel.
 *   _CacheIter  the one iterator (core/iterator.c) under LoadIt's name:
 *               positions streamed lazily, records decoded by lobj_decode;
 *               a first pass is one opened chunked (loadit/tee.c).
 *
 * Reads and waits: every call into the engine runs with the GIL released,
 * in the calling thread.  From the main thread, Ctrl-C reaches a wait
 * (a miss filled by another thread, a length, a drain, read-ahead) through
 * the interrupt handler the module sets there (module.c): the call returns
 * BC_ECANCELED with KeyboardInterrupt pending.
 *
 * Errors: bcpy_raise maps codes (module.c): a source failure re-raises the
 * iterator's own exception, carried as the failure's payload
 * (loadit/source.c); BC_ENOTCACHED is NotCachedError (an IndexError);
 * BC_ENONDET NondeterministicError.  A fill abandoned elsewhere (a closing
 * loader on the same root, a thread interrupted in its own fill) is
 * filled again by the engine for the threads that waited for it.
 */
#include "loadit/loadit.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "structmember.h"

#define ITER_BATCH 128  /* records per read-ahead job */
#define ITER_WINDOW 64  /* read-ahead window */

PyObject *bcpy_SourceError;
PyObject *bcpy_NotCachedError;
PyObject *bcpy_NondeterministicError;
PyObject *bcpy_CacheWarning;

typedef struct {
  PyObject_HEAD
  bc_cache *cache;   /* NULL once closed */
  bc_seq *seq;       /* the cache's sequence (own reference) */
  bcpy_source *src;  /* NULL: no source (read-only) */
  PyObject *loads;   /* NULL: records are returned as bytes */
  bool loads_is_pickle; /* loads keeps no reference to its input */
  PyObject *root;    /* str */
  uint64_t R;        /* records per shard */
  /* NULL, or progress(core) -> an object whose close() ends the display:
   * called around a drain for a length (lobj_exact_len). */
  PyObject *progress;
  /* The length hint stored with the root (metadata.json's length_hint,
   * read at open), -1 for none: len() gives it until the source shows
   * another length (check_hint), which warns once (GIL). */
  int64_t length_hint;
  bool hint_done;
  /* Single reads (read_begin/read_end), for the progress display of long
   * waits and the warning about reads that keep regenerating.  Updated
   * and polled with the GIL held (a read counts before it releases the
   * GIL and after it takes it back; the display's thread polls _reads()). */
  uint64_t disk_limit;    /* the root's limit at open (0: none) */
  bool seekable;          /* the source seeks (create_iter(start)) */
  unsigned reading;       /* single reads in flight */
  uint64_t read_seq;      /* single reads begun */
  uint64_t served;        /* records they returned */
  uint64_t gen_in_reads;  /* records the iterator produced during them */
  uint64_t thrash_check;  /* gen_in_reads at which the warning is next
                             considered */
  bool thrash_warned;     /* the CacheWarning was given */
  PyObject *read_shown;   /* NULL, or the display of waiting reads
                             (_progress._Watch): suspend() is called when
                             the last read in flight returns */
  /* Who holds the cache open (GIL): the loader and its views, and their
   * iterators.  close() drops their references, so the cache, its files
   * and the root's shared state are released then, not when the last of
   * them is collected. */
  struct bcpy_lobj *users;
  bcpy_iter *iters;
  PyObject *weakrefs;
} bcpy_core;

typedef struct bcpy_lobj {
  BCPY_SEQ_HEAD       /* seq: the cache's sequence or a view of it; NULL
                         once the core is closed */
  bcpy_core *core;
  PyObject *parent;   /* a view: the object it was taken from */
  PyObject *key;      /* ... and the key (a slice, or int64 bytes) */
  bool resolve_safe;  /* resolving a non-negative index never blocks */
  struct bcpy_lobj *next_user, **prev_user; /* core->users (GIL) */
  /* Calls of this object that use `seq` across a GIL hand-off (GIL): a
   * close meanwhile leaves `seq` to the last of them to drop. */
  int inflight;
  bool drop_pending;
  PyObject *weakrefs;
} bcpy_lobj;

/* Brackets a call that uses v->seq across GIL hand-offs (GIL held). */
static void lobj_enter(struct bcpy_lobj *v);
static void lobj_leave(struct bcpy_lobj *v);

/* Lists `v` in its core's users (GIL held). */
static void user_add(bcpy_lobj *v) {
  bcpy_core *c = v->core;
  v->next_user = c->users;
  if (c->users != NULL) c->users->prev_user = &v->next_user;
  c->users = v;
  v->prev_user = &c->users;
}

static void user_remove(bcpy_lobj *v) {
  if (v->prev_user == NULL) return;
  *v->prev_user = v->next_user;
  if (v->next_user != NULL) v->next_user->prev_user = v->prev_user;
  v->prev_user = NULL;
  v->next_user = NULL;
}

/* ---- teardown ----------------------------------------------------------------- */

typedef struct {
  bcpy_call base;
  bc_cache *cache;
  bc_seq *seq;
  bcpy_source *src;
} teardown_call;

static int teardown_run(bcpy_call *c) {
  teardown_call *t = (teardown_call *)c;
  bc_cache_close(t->cache);
  bc_seq_unref(t->seq);
  bcpy_source_unref(t->src);
  return 0;
}

static void teardown_free(bcpy_call *c) { PyMem_RawFree(c); }

/* Closes a cache and drops a sequence and a source reference (any may be
 * NULL; the GIL is held).  Inside a source callback this is done by a
 * thread of its own instead (core/bcpy.h, bcpy_in_callback); should none
 * start, the objects are leaked rather than torn down under the engine. */
static void teardown(bc_cache *cache, bc_seq *seq, bcpy_source *src) {
  if (cache == NULL && seq == NULL && src == NULL) return;
  if (bcpy_in_callback) {
    teardown_call *t = PyMem_RawCalloc(1, sizeof *t);
    if (t == NULL) return;
    *t = (teardown_call){{teardown_run, teardown_free, 0}, cache, seq, src};
    if (bcpy_run_detached(&t->base) < 0) PyMem_RawFree(t);
    return;
  }
  Py_BEGIN_ALLOW_THREADS
  bc_cache_close(cache);
  bc_seq_unref(seq);
  Py_END_ALLOW_THREADS
  bcpy_source_unref(src);
}

/* Drains the source, then fills the shards below the end that are missing
 * (never read, or evicted): afterwards everything is on disk unless the
 * disk limit cannot hold it all.  No GIL. */
static int fill_everything(bc_cache *cache, bc_seq *seq, uint64_t R) {
  int rc = bc_cache_fill_all(cache);
  uint64_t len = 0;
  if (rc == 0) rc = bc_cache_len(cache, &len);
  if (rc != 0 || R == 0) return rc;
  size_t count = 0;
  if ((rc = bc_cache_shards(cache, NULL, 0, &count)) != 0) return rc;
  bc_cache_shard *list = malloc((count ? count : 1) * sizeof *list);
  if (list == NULL) return bc_set_errmsg(BC_ENOMEM, "out of memory");
  rc = bc_cache_shards(cache, list, count, &count);
  bc_buf buf = BC_BUF_INIT;
  size_t k = 0; /* list is ascending */
  for (uint64_t start = 0; rc == 0 && start < len; start += R) {
    while (k < count && list[k].start < start) k++;
    if (k < count && list[k].start == start) continue;
    rc = bc_seq_get(seq, (int64_t)start, &buf);
  }
  bc_buf_release(&buf);
  free(list);
  return rc;
}

/* ---- _CacheCore --------------------------------------------------------------- */

static int core_check(bcpy_core *c) {
  if (c->cache != NULL) return 0;
  PyErr_SetString(PyExc_ValueError, "the LoadIt is closed");
  return -1;
}

/* How a close goes when a fill is stuck in the iterator (a next() that
 * does not return), which keeps the engine's close waiting for its worker:
 *   CLOSE_CALL   close(): waits; a Ctrl-C abandons the stuck fills, the
 *                close completes and KeyboardInterrupt is raised.
 *   CLOSE_QUIET  the loader is collected: the same, but the interrupt is
 *                delivered again afterwards (nothing can raise here).
 *   CLOSE_EXIT   the interpreter exits: waits EXIT_GRACE_MS at most (or
 *                until a Ctrl-C), then abandons them and lets it exit.
 * See bc_cache_abandon_fills for what happens to the stuck thread. */
enum { CLOSE_CALL, CLOSE_QUIET, CLOSE_EXIT };
#define EXIT_GRACE_MS 1000
#define ABANDON_AFTER_MS 1000

/* The interrupt handler of a close (close_engine): on the main thread a
 * signal handler that raises ends the wait for stuck workers (their fills
 * are abandoned); an exit gives up after EXIT_GRACE_MS by itself. */
typedef struct {
  bool main;            /* signal handlers run in this thread */
  uint64_t give_up_ns;  /* bcpy_now_ns() to give up at (0: never) */
  PyObject *type, *value, *tb; /* the exception a signal handler raised */
} close_hook;

static int close_interrupt(void *ctx) {
  close_hook *h = ctx;
  if (h->type != NULL) return 1;
  if (h->give_up_ns != 0 && bcpy_now_ns() >= h->give_up_ns) return 1;
  if (!h->main) return 0;
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject *t, *v, *tb; /* an exception the close keeps for later */
  PyErr_Fetch(&t, &v, &tb);
  if (PyErr_CheckSignals() < 0) PyErr_Fetch(&h->type, &h->value, &h->tb);
  PyErr_Restore(t, v, tb);
  PyGILState_Release(gil);
  return h->type != NULL;
}

/* bc_cache_close(cache), waited for as `mode` says (GIL held, released
 * while waiting).  -1 with KeyboardInterrupt set when a Ctrl-C came
 * (CLOSE_CALL); the cache is closed either way. */
static int close_engine(bc_cache *cache, int mode) {
  /* Our own reference keeps the cache alive for bc_cache_abandon_fills
   * after the close. */
  bc_seq *hold = bc_seq_ref(bc_cache_seq(cache));
  close_hook h = {.main = bcpy_is_main_thread(),
                  .give_up_ns = mode == CLOSE_EXIT
                                    ? bcpy_now_ns() + EXIT_GRACE_MS * 1000000ull : 0};
  bc_interrupt_handler prev = bc_set_interrupt_handler(close_interrupt, &h);
  Py_BEGIN_ALLOW_THREADS
  bc_cache_close(cache); /* an interrupt abandons a worker stuck in the source */
  Py_END_ALLOW_THREADS
  bc_set_interrupt_handler(prev.fn, prev.ctx);
  bool interrupted = h.type != NULL;
  /* Fills of this loader still in the iterator end at their next record,
   * the source being closed; one stuck there would keep its shard claimed
   * by this live process: abandon what has not ended after a second (at
   * once after an interrupt), so other processes fill those shards. */
  Py_BEGIN_ALLOW_THREADS
  bc_cache_abandon_fills(cache, interrupted || mode == CLOSE_EXIT ? 0 : ABANDON_AFTER_MS);
  bc_seq_unref(hold); /* may be the last: the cache is released */
  Py_END_ALLOW_THREADS
  if (interrupted && mode == CLOSE_CALL) {
    PyErr_Restore(h.type, h.value, h.tb);
    return -1;
  }
  Py_XDECREF(h.type);
  Py_XDECREF(h.value);
  Py_XDECREF(h.tb);
  if (interrupted && mode == CLOSE_QUIET) PyErr_SetInterrupt(); /* delivered again */
  return 0;
}

static void release_users(bcpy_core *c);

/* Closes the core: stops the fills, closes the cache and drops every
 * reference this loader, its views and iterators hold, so that the
 * cache's files and the root's shared state (the process's LMDB
 * environment, when no other loader uses the root) are released now.
 * -1 with KeyboardInterrupt (CLOSE_CALL only; closed all the same). */
static int core_close(bcpy_core *c, int mode) {
  bc_cache *cache = c->cache;
  if (cache == NULL) return 0;
  /* A first pass that has met its end, or was broken off, finishes
   * writing the shards it was in: interruptibly for close() (then -1 with
   * the exception, kept while the close goes on all the same). */
  int settled = bcpy_tee_settle(c->src, mode == CLOSE_CALL);
  PyObject *st = NULL, *sv = NULL, *stb = NULL;
  if (settled < 0) PyErr_Fetch(&st, &sv, &stb);
  c->cache = NULL;
  /* A preload or prefetch in progress stops at its next record (otherwise
   * closing would wait for a whole drain), and nothing starts a new pass:
   * reads still in flight (an interrupted iteration's) end quickly. */
  bcpy_source_close(c->src);
  int rc = 0;
  if (bcpy_in_callback) teardown(cache, NULL, NULL); /* a helper closes it */
  else rc = close_engine(cache, mode);
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb); /* a KeyboardInterrupt, kept for later */
  release_users(c);
  bc_seq *seq = c->seq;
  c->seq = NULL;
  teardown(NULL, seq, NULL);
  PyErr_Restore(type, value, tb);
  if (rc < 0 || settled == 0) { /* an interrupt of the close wins */
    Py_XDECREF(st);
    Py_XDECREF(sv);
    Py_XDECREF(stb);
    return rc;
  }
  PyErr_Restore(st, sv, stb);
  if (mode == CLOSE_CALL) return -1;
  PyErr_WriteUnraisable(NULL); /* a collection cannot raise */
  return 0;
}

/* The mode of a close the program did not ask for (collection). */
static int quiet_mode(void) {
  return bcpy_finalizing() ? CLOSE_EXIT : CLOSE_QUIET;
}

/* A record as a Python object: loads(record), or bytes.  With pickle's
 * loads the record is passed as a memoryview of the buffer (no copy) that
 * is released right after; should anything still hold an export of it,
 * the buffer is given up (leaked) rather than freed under it. */
static PyObject *to_record(bcpy_core *c, bc_buf *b) {
  const char *data = b->data != NULL ? (const char *)b->data : "";
  if (c->loads == NULL) return PyBytes_FromStringAndSize(data, (Py_ssize_t)b->size);
  if (!c->loads_is_pickle) {
    PyObject *bytes = PyBytes_FromStringAndSize(data, (Py_ssize_t)b->size);
    if (bytes == NULL) return NULL;
    PyObject *r = PyObject_CallOneArg(c->loads, bytes);
    Py_DECREF(bytes);
    return r;
  }
  PyObject *mv = PyMemoryView_FromMemory((char *)data, (Py_ssize_t)b->size, PyBUF_READ);
  if (mv == NULL) return NULL;
  PyObject *r = PyObject_CallOneArg(c->loads, mv);
  if (Py_REFCNT(mv) == 1) { /* nobody kept it: freeing it releases it */
    Py_DECREF(mv);
    return r;
  }
  PyObject *released = PyObject_CallMethod(mv, "release", NULL);
  if (released == NULL) {
    PyErr_Clear();
    *b = (bc_buf)BC_BUF_INIT; /* exported: never freed */
  }
  Py_XDECREF(released);
  Py_DECREF(mv);
  return r;
}

static PyObject *core_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"root", "create_iter", "dumps", "dumps_args", "loads", "shard_records",
                           "shard_bytes", "max_open_shards", "fill_workers",
                           "thread_safe", "disk_limit", "zstd_level", "preload_all",
                           "info_json", "known_length", "file_mode", "make_parents",
                           "progress", "seekable", "max_passes", "prefetch_shards",
                           "publish_behind", "evict_ahead", "fingerprint_json", NULL};
  PyObject *root, *create_iter, *dumps = Py_None, *dumps_args = Py_None, *loads = Py_None;
  PyObject *level = Py_None;
  unsigned long long shard_records = 0, shard_bytes = 0, disk_limit = 0;
  int max_open = 0, workers = 0, thread_safe = 0, preload_all = 0;
  const char *info = NULL, *fingerprint = NULL;
  long long known_length = -1;
  unsigned int file_mode = 0;
  int make_parents = 0;
  PyObject *progress = Py_None;
  int seekable = 0, max_passes = 0, prefetch_shards = 0, publish_behind = 1, evict_ahead = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "UO|$OOOKKiipKOpzLIpOpiipiz:_CacheCore", kwlist,
                                   &root, &create_iter, &dumps, &dumps_args, &loads,
                                   &shard_records,
                                   &shard_bytes, &max_open, &workers, &thread_safe,
                                   &disk_limit, &level, &preload_all, &info,
                                   &known_length, &file_mode, &make_parents, &progress,
                                   &seekable, &max_passes, &prefetch_shards,
                                   &publish_behind, &evict_ahead, &fingerprint))
    return NULL;
  /* (bagcache/loadit.py checks the options; a callable that is not one
   * raises TypeError when called.) */
  if (dumps_args != Py_None &&
      (!PyTuple_Check(dumps_args) || PyTuple_GET_SIZE(dumps_args) > BCPY_DUMPS_ARGS_MAX)) {
    PyErr_Format(PyExc_TypeError, "dumps_args must be a tuple of at most %d arguments or None",
                 BCPY_DUMPS_ARGS_MAX);
    return NULL;
  }
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = shard_records;
  o.shard_bytes = shard_bytes;
  o.max_open_shards = max_open;
  o.fill_workers = workers;
  o.disk_limit = disk_limit;
  if (level != Py_None) {
    long lv = PyLong_AsLong(level);
    if (lv == -1 && PyErr_Occurred()) return NULL;
    if (lv < INT_MIN || lv > INT_MAX) {
      PyErr_Format(PyExc_ValueError, "zstd level %ld out of range", lv);
      return NULL;
    }
    o.compression = BC_COMPRESSION_ZSTD;
    o.zstd_level = (int)lv;
  }
  o.preload_all = preload_all;
  o.known_length = known_length;
  o.file_mode = file_mode;
  o.make_parents = make_parents;
  o.max_passes = max_passes;
  o.publish_behind = publish_behind;
  o.evict_ahead = evict_ahead; /* (-1, 0 or 1: loadit.py maps None/False/True) */
  /* The depth of the Python policy (set after the open): the smallest
   * workable disk limit counts it. */
  o.prefetch_shards = prefetch_shards < -1 ? -1 : prefetch_shards;

  const char *root_s = PyUnicode_AsUTF8(root);
  if (root_s == NULL) return NULL;
  bcpy_core *self = (bcpy_core *)type->tp_alloc(type, 0);
  if (self == NULL) return NULL;
  Py_INCREF(root);
  self->root = root;
  if (progress != Py_None) {
    Py_INCREF(progress);
    self->progress = progress;
  }
  if (loads != Py_None) {
    Py_INCREF(loads);
    self->loads = loads;
    PyObject *pickle = PyImport_ImportModule("pickle");
    PyObject *pl = pickle != NULL ? PyObject_GetAttrString(pickle, "loads") : NULL;
    if (pl == NULL) PyErr_Clear();
    self->loads_is_pickle = pl == loads;
    Py_XDECREF(pl);
    Py_XDECREF(pickle);
  }
  /* root_s and info stay valid without the GIL: the call's arguments
   * hold their str objects. */
  o.info_json = info;
  o.fingerprint_json = fingerprint;
  bc_source source;
  bool has_source = create_iter != Py_None;
  if (has_source) {
    self->src = bcpy_source_new(create_iter, dumps == Py_None ? NULL : dumps,
                                dumps == Py_None || dumps_args == Py_None ? NULL : dumps_args);
    if (self->src == NULL) goto fail;
    bcpy_source_describe(self->src, thread_safe, &source);
    if (seekable) bcpy_source_seekable(&source);
    o.prefetch = bcpy_source_prefetch;
    o.prefetch_payload = self->src;
  }
  /* Opening may estimate the shard length from the source: interruptible
   * (the main thread's interrupt handler).  bc_cache_open owns the source's
   * payload reference, even on failure. */
  bc_cache *cache = NULL;
  bc_cache_stats stats = {0};
  int rc;
  int64_t hint = -1;
  Py_BEGIN_ALLOW_THREADS
  rc = bc_cache_open(&cache, root_s, has_source ? &source : NULL, &o);
  if (rc == 0) rc = bc_cache_stats_get(cache, &stats);
  if (rc == 0 && !stats.length_final) rc = bc_cache_length_hint(cache, &hint);
  Py_END_ALLOW_THREADS
  bcpy_notices_flush(); /* what the open said (a kept option, a repair) */
  if (rc != 0) {
    bcpy_raise(rc, NULL);
    if (cache != NULL) teardown(cache, NULL, NULL);
    goto fail;
  }
  self->cache = cache;
  self->R = stats.shard_records;
  self->length_hint = hint;
  self->hint_done = hint < 0;
  self->disk_limit = stats.disk_limit;
  self->seekable = has_source && seekable;
  self->seq = bc_seq_ref(bc_cache_seq(self->cache));
  return (PyObject *)self;
fail:
  Py_DECREF(self);
  return NULL;
}

/* Called by the collector before it clears a garbage cycle holding the
 * core (and by nothing else): closes the cache, so that no engine thread
 * uses the source's objects once they may be cleared (loadit/source.c). */
static void core_finalize(bcpy_core *self) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  core_close(self, quiet_mode());
  PyErr_Restore(type, value, tb);
}

static int core_traverse(bcpy_core *self, visitproc visit, void *arg) {
  Py_VISIT(self->loads);
  Py_VISIT(self->progress);
  Py_VISIT(self->read_shown);
  return bcpy_source_traverse(self->src, visit, arg);
}

/* Breaks reference cycles through the source (e.g. a create_iter that is
 * a method of an object holding the loader).  The source is closed first:
 * its callbacks check that under the GIL, which this holds, so none of
 * them uses the objects cleared here. */
static int core_clear(bcpy_core *self) {
  Py_CLEAR(self->loads);
  Py_CLEAR(self->progress);
  Py_CLEAR(self->read_shown);
  bcpy_source *s = self->src;
  if (s != NULL) {
    bcpy_source_close(s);
    atomic_store(&s->prefetch_mode, BCPY_PREFETCH_NONE);
    Py_CLEAR(s->prefetch_fn);
    Py_CLEAR(s->create_iter);
    Py_CLEAR(s->dumps);
    Py_CLEAR(s->dumps_args);
  }
  return 0;
}

static void core_dealloc(bcpy_core *self) {
  PyObject_GC_UnTrack(self);
  if (self->weakrefs != NULL) PyObject_ClearWeakRefs((PyObject *)self);
  if (self->cache != NULL) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    core_close(self, quiet_mode()); /* workers stop first */
    PyErr_Restore(type, value, tb);
  }
  bcpy_source_close(self->src);
  bc_seq *seq = self->seq;
  self->seq = NULL;
  teardown(NULL, seq, self->src);
  self->src = NULL;
  Py_CLEAR(self->loads);
  Py_CLEAR(self->progress);
  Py_CLEAR(self->read_shown);
  Py_CLEAR(self->root);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *core_close_method(bcpy_core *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"at_exit", NULL};
  int at_exit = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "|$p:close", kwlist, &at_exit)) return NULL;
  int r = core_close(self, at_exit ? CLOSE_EXIT : CLOSE_CALL);
  bcpy_notices_flush(); /* a publish that failed at the close */
  if (r < 0) return NULL;
  Py_RETURN_NONE;
}

static PyObject *core_stats(bcpy_core *self, PyObject *unused) {
  (void)unused;
  if (core_check(self) < 0) return NULL;
  bc_cache_stats st;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = bc_cache_stats_get(self->cache, &st);
  Py_END_ALLOW_THREADS
  if (rc != 0) return bcpy_raise(rc, NULL);
  return Py_BuildValue(
      "{s:K,s:O,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,"
      "s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:{s:K,s:K,s:K,s:K,s:K,s:K}}", "length",
      (unsigned long long)st.length, "length_final", st.length_final ? Py_True : Py_False,
      "shard_records", (unsigned long long)st.shard_records, "shards_present",
      (unsigned long long)st.shards_present, "bytes_on_disk",
      (unsigned long long)st.bytes_on_disk, "disk_limit", (unsigned long long)st.disk_limit,
      "hits", (unsigned long long)st.hits, "shard_opens", (unsigned long long)st.shard_opens,
      "fills", (unsigned long long)st.fills, "regenerations",
      (unsigned long long)st.regenerations, "evictions", (unsigned long long)st.evictions,
      "passes_opened", (unsigned long long)st.passes_opened, "records_skipped",
      (unsigned long long)st.records_skipped, "records_written",
      (unsigned long long)st.records_written, "waits", (unsigned long long)st.waits,
      "open_shards", (unsigned long long)st.open_shards,
      "miss_ns", (unsigned long long)st.miss_ns,
      "publishes_queued", (unsigned long long)st.publishes_queued,
      "publish_batches", (unsigned long long)st.publish_batches,
      "publish_largest", (unsigned long long)st.publish_largest,
      "publish_failures", (unsigned long long)st.publish_failures,
      "shards_kept", (unsigned long long)st.shards_kept,
      "shards_bypassed", (unsigned long long)st.shards_bypassed,
      "root", "fills", (unsigned long long)st.root.fills,
      "regenerations", (unsigned long long)st.root.regenerations,
      "evictions", (unsigned long long)st.root.evictions,
      "records_generated", (unsigned long long)st.root.records_generated,
      "bytes_written", (unsigned long long)st.root.bytes_written,
      "shards_kept", (unsigned long long)st.root.shards_kept);
}

static PyObject *core_shards(bcpy_core *self, PyObject *unused) {
  (void)unused;
  if (core_check(self) < 0) return NULL;
  bc_cache_shard *list = NULL;
  size_t count = 0, want = 0;
  int rc;
  /* The list may grow between the two calls: ask again until it fits. */
  for (;;) {
    Py_BEGIN_ALLOW_THREADS
    rc = bc_cache_shards(self->cache, list, want, &count);
    Py_END_ALLOW_THREADS
    if (rc != 0 || count <= want) break;
    want = count + 8;
    bc_cache_shard *bigger = PyMem_RawRealloc(list, want * sizeof *list);
    if (bigger == NULL) {
      PyMem_RawFree(list);
      return PyErr_NoMemory();
    }
    list = bigger;
  }
  if (rc != 0) {
    PyMem_RawFree(list);
    return bcpy_raise(rc, NULL);
  }
  PyObject *result = PyList_New((Py_ssize_t)count);
  for (size_t k = 0; result != NULL && k < count; k++) {
    char *file = NULL;
    rc = bc_cache_shard_path(self->cache, &list[k], &file);
    if (rc != 0) {
      Py_CLEAR(result);
      bcpy_raise(rc, NULL);
      break;
    }
    PyObject *path = PyUnicode_DecodeFSDefault(file);
    free(file);
    PyObject *item =
        path == NULL ? NULL
                     : Py_BuildValue("{s:K,s:K,s:N,s:K,s:K}", "start",
                                     (unsigned long long)list[k].start, "end",
                                     (unsigned long long)list[k].end, "path", path,
                                     "bytes", (unsigned long long)list[k].bytes,
                                     "last_access", (unsigned long long)list[k].last_access);
    if (item == NULL) Py_CLEAR(result);
    else PyList_SET_ITEM(result, (Py_ssize_t)k, item);
  }
  PyMem_RawFree(list);
  return result;
}

static PyObject *core_finalize_length(bcpy_core *self, PyObject *unused) {
  (void)unused;
  if (core_check(self) < 0) return NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = bc_cache_finalize(self->cache);
  Py_END_ALLOW_THREADS
  if (rc != 0) return bcpy_raise(rc, NULL);
  Py_RETURN_NONE;
}

/* sync(): bc_cache_sync, the GIL released. */
static PyObject *core_sync(bcpy_core *self, PyObject *unused) {
  (void)unused;
  if (core_check(self) < 0) return NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = bc_cache_sync(self->cache);
  Py_END_ALLOW_THREADS
  if (rc != 0) return bcpy_raise(rc, NULL);
  Py_RETURN_NONE;
}

static PyObject *core_worker_positions(bcpy_core *self, PyObject *unused) {
  (void)unused;
  if (core_check(self) < 0) return NULL;
  uint64_t pos[1024]; /* max_passes is rarely more than its default, 64 */
  size_t count = 0;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = bc_cache_worker_positions(self->cache, pos, 1024, &count);
  Py_END_ALLOW_THREADS
  if (rc != 0) return bcpy_raise(rc, NULL);
  if (count > 1024) count = 1024;
  PyObject *list = PyList_New((Py_ssize_t)count);
  for (size_t k = 0; list != NULL && k < count; k++) {
    PyObject *v = PyLong_FromUnsignedLongLong(pos[k]);
    if (v == NULL) Py_CLEAR(list);
    else PyList_SET_ITEM(list, (Py_ssize_t)k, v);
  }
  return list;
}

/* _reads() -> (reading, read_seq, pulled, bytes_read): single reads in
 * flight, begun so far, and the records and bytes the iterator produced so
 * far (never waits; for the watch of long reads in _progress.py). */
static PyObject *core_reads(bcpy_core *self, PyObject *unused) {
  (void)unused;
  if (core_check(self) < 0) return NULL;
  return Py_BuildValue("IKKK", self->reading, (unsigned long long)self->read_seq,
                       (unsigned long long)(self->src ? self->src->pulled : 0),
                       (unsigned long long)(self->src ? self->src->bytes_read : 0));
}

/* _set_read_shown(display or None) (_progress._Watch). */
static PyObject *core_set_read_shown(bcpy_core *self, PyObject *arg) {
  if (arg == Py_None) {
    Py_CLEAR(self->read_shown);
  } else {
    Py_INCREF(arg);
    Py_XSETREF(self->read_shown, arg);
  }
  Py_RETURN_NONE;
}

/* _progress() -> (length, length_final, position, bytes_read, draining),
 * never waiting: the length known now, the furthest next record of this
 * process's source passes (0 when none is open), the bytes of records
 * pulled from the iterator so far, and whether a drain runs.  For the
 * progress display, polled a few times a second. */
static PyObject *core_progress(bcpy_core *self, PyObject *unused) {
  (void)unused;
  if (core_check(self) < 0) return NULL;
  uint64_t pos[64];
  size_t n = 0;
  bc_len l = {BC_LEN_AT_LEAST, 0};
  bool draining;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = bc_seq_length(self->seq, false, &l);
  if (rc == 0) rc = bc_cache_worker_positions(self->cache, pos, 64, &n);
  draining = bc_cache_draining(self->cache);
  Py_END_ALLOW_THREADS
  if (rc != 0) return bcpy_raise(rc, NULL);
  if (!self->hint_done && l.kind != BC_LEN_EXACT && l.value <= (uint64_t)self->length_hint)
    l = (bc_len){BC_LEN_EXACT, (uint64_t)self->length_hint}; /* as len() says, for the display */
  uint64_t furthest = 0;
  for (size_t k = 0; k < n && k < 64; k++)
    if (pos[k] > furthest) furthest = pos[k];
  return Py_BuildValue("KOKKO", (unsigned long long)l.value,
                       l.kind == BC_LEN_EXACT ? Py_True : Py_False,
                       (unsigned long long)furthest,
                       (unsigned long long)(self->src ? self->src->bytes_read : 0),
                       draining ? Py_True : Py_False);
}

/* A JSON text of metadata.json read by `get` (GIL released), as str; None
 * when `get` gives NULL (a field that is not stored). */
static PyObject *meta_text(bcpy_core *self, int (*get)(bc_cache *, char **)) {
  if (core_check(self) < 0) return NULL;
  char *json = NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = get(self->cache, &json);
  Py_END_ALLOW_THREADS
  if (rc != 0) return bcpy_raise(rc, NULL);
  if (json == NULL) Py_RETURN_NONE;
  PyObject *s = PyUnicode_FromString(json);
  free(json);
  return s;
}

static PyObject *core_info(bcpy_core *self, PyObject *unused) {
  (void)unused;
  return meta_text(self, bc_cache_info);
}

static PyObject *core_fingerprint(bcpy_core *self, PyObject *unused) {
  (void)unused;
  return meta_text(self, bc_cache_fingerprint);
}

/* bc_cache_clear(root): no cache may be open on it (loadit.py checks this
 * process's). */
static PyObject *core_clear_root(PyObject *unused, PyObject *arg) {
  (void)unused;
  const char *root = PyUnicode_AsUTF8(arg);
  if (root == NULL) return NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = bc_cache_clear(root);
  Py_END_ALLOW_THREADS
  if (rc != 0) return bcpy_raise(rc, NULL);
  Py_RETURN_NONE;
}

static PyObject *core_set_info(bcpy_core *self, PyObject *arg) {
  if (core_check(self) < 0) return NULL;
  const char *json = PyUnicode_AsUTF8(arg);
  if (json == NULL) return NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = bc_cache_set_info(self->cache, json);
  Py_END_ALLOW_THREADS
  if (rc != 0) return bcpy_raise(rc, NULL);
  Py_RETURN_NONE;
}

static PyObject *core_fill_all(bcpy_core *self, PyObject *unused) {
  (void)unused;
  if (core_check(self) < 0) return NULL;
  bc_seq *seq = bc_seq_ref(self->seq); /* keeps the cache alive */
  bc_cache *cache = self->cache;
  uint64_t R = self->R;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = fill_everything(cache, seq, R);
  Py_END_ALLOW_THREADS
  if (rc != 0) bcpy_raise(rc, NULL);
  teardown(NULL, seq, NULL);
  if (rc != 0) return NULL;
  Py_RETURN_NONE;
}

/* _set_prefetch(policy, loader): None (no prefetching), an int n (the n
 * shards after each one opened, in C) or a callable fn(loader, index)
 * (loadit's preload_fn; loader is kept as a weak reference). */
static PyObject *core_set_prefetch(bcpy_core *self, PyObject *args) {
  PyObject *policy, *loader = Py_None;
  if (!PyArg_ParseTuple(args, "O|O:_set_prefetch", &policy, &loader)) return NULL;
  bcpy_source *s = self->src;
  if (s == NULL) Py_RETURN_NONE; /* nothing is ever filled */
  if (policy == Py_None) {
    atomic_store(&s->prefetch_mode, BCPY_PREFETCH_NONE);
    Py_RETURN_NONE;
  }
  if (PyLong_Check(policy)) {
    long n = PyLong_AsLong(policy);
    if (n == -1 && PyErr_Occurred()) return NULL;
    atomic_store(&s->prefetch_ahead, n < 0 ? 0 : n > 16 ? 16 : (int)n);
    atomic_store(&s->prefetch_mode, n > 0 ? BCPY_PREFETCH_NEXT : BCPY_PREFETCH_NONE);
    Py_RETURN_NONE;
  }
  if (!PyCallable_Check(policy)) {
    PyErr_SetString(PyExc_TypeError, "preload_fn must be None or callable");
    return NULL;
  }
  PyObject *ref = loader == Py_None ? NULL : PyWeakref_NewRef(loader, NULL);
  if (ref == NULL && loader != Py_None) return NULL;
  /* Mode off while the objects change (the GIL orders this against the
   * policy, which reads them under the GIL too). */
  atomic_store(&s->prefetch_mode, BCPY_PREFETCH_NONE);
  Py_INCREF(policy);
  Py_XSETREF(s->prefetch_fn, policy);
  Py_XSETREF(s->loader, ref);
  atomic_store(&s->prefetch_mode, BCPY_PREFETCH_PYTHON);
  Py_RETURN_NONE;
}

static PyObject *core_get_closed(bcpy_core *self, void *unused) {
  (void)unused;
  return PyBool_FromLong(self->cache == NULL);
}

static PyObject *core_get_has_source(bcpy_core *self, void *unused) {
  (void)unused;
  return PyBool_FromLong(self->src != NULL);
}

static PyMethodDef core_methods[] = {
    {"close", (PyCFunction)(void (*)(void))core_close_method, METH_VARARGS | METH_KEYWORDS,
     "close(*, at_exit=False)\n\n"
     "Stops the background workers, closes the cache and drops the references\n"
     "of the loader, its views and iterators (idempotent).  A fill stuck in the\n"
     "iterator is abandoned on Ctrl-C, or (at_exit) after a second."},
    {"stats", (PyCFunction)core_stats, METH_NOARGS, "stats() -> dict (bc_cache_stats)."},
    {"sync", (PyCFunction)core_sync, METH_NOARGS,
     "sync(): waits for the queued publishes (bc_cache_sync)."},
    {"shards", (PyCFunction)core_shards, METH_NOARGS,
     "shards() -> list of dicts (start, end, path, bytes, last_access), ascending."},
    {"finalize", (PyCFunction)core_finalize_length, METH_NOARGS,
     "Makes the length final at the end of the last shard present."},
    {"worker_positions", (PyCFunction)core_worker_positions, METH_NOARGS,
     "worker_positions() -> list of the next record of each open source pass."},
    {"info", (PyCFunction)core_info, METH_NOARGS, "info() -> the user info as JSON text."},
    {"clear_root", (PyCFunction)core_clear_root, METH_O | METH_STATIC,
     "clear_root(root): deletes the cache at root (no cache may be open on it)."},
    {"fingerprint", (PyCFunction)core_fingerprint, METH_NOARGS,
     "fingerprint() -> the source's fingerprint stored with the root, as JSON text, or None."},
    {"set_info", (PyCFunction)core_set_info, METH_O,
     "set_info(json_text)\n\nReplaces the user info (atomically)."},
    {"_set_read_shown", (PyCFunction)core_set_read_shown, METH_O,
     "_set_read_shown(display or None): the display suspended when reads end."},
    {"_reads", (PyCFunction)core_reads, METH_NOARGS,
     "_reads() -> (reading, read_seq, pulled, bytes_read), never waiting."},
    {"_progress", (PyCFunction)core_progress, METH_NOARGS,
     "_progress() -> (length, length_final, position, bytes_read, draining), never waiting."},
    {"fill_all", (PyCFunction)core_fill_all, METH_NOARGS,
     "fill_all()\n\nDrains the source, then fills the missing shards below the end."},
    {"_set_prefetch", (PyCFunction)core_set_prefetch, METH_VARARGS,
     "_set_prefetch(policy, loader=None): None, a shard count, or fn(loader, index)."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef core_getset[] = {
    {"closed", (getter)core_get_closed, NULL, "True once closed.", NULL},
    {"has_source", (getter)core_get_has_source, NULL, "Whether it can fill.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMemberDef core_members[] = {
    {"shard_records", T_ULONGLONG, offsetof(bcpy_core, R), READONLY, "Records per shard."},
    {"root", T_OBJECT, offsetof(bcpy_core, root), READONLY, "The root directory."},
    {NULL, 0, 0, 0, NULL}};

PyTypeObject bcpy_CacheCore_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bagcache._bagcache._CacheCore",
    .tp_basicsize = sizeof(bcpy_core),
    .tp_dealloc = (destructor)core_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "_CacheCore(root, create_iter, *, dumps, dumps_args, loads, shard_records, ...)\n\n"
              "One open cache (bc_cache_open); the engine behind bagcache.LoadIt.",
    .tp_traverse = (traverseproc)core_traverse,
    .tp_clear = (inquiry)core_clear,
    .tp_finalize = (destructor)core_finalize,
    .tp_weaklistoffset = offsetof(bcpy_core, weakrefs),
    .tp_methods = core_methods,
    .tp_getset = core_getset,
    .tp_members = core_members,
    .tp_new = core_new,
};

/* ---- _CacheSeq: reading ------------------------------------------------------- */

static int lobj_check(bcpy_lobj *self) {
  if (self->core != NULL && core_check(self->core) < 0) return -1;
  if (self->seq == NULL) {
    PyErr_Format(PyExc_ValueError, "%s object is not open", Py_TYPE(self)->tp_name);
    return -1;
  }
  return 0;
}

static void lobj_enter(bcpy_lobj *v) { v->inflight++; }

static void lobj_leave(bcpy_lobj *v) {
  if (--v->inflight > 0 || !v->drop_pending) return;
  v->drop_pending = false;
  bc_seq *seq = v->seq;
  v->seq = NULL;
  teardown(NULL, seq, NULL); /* the last reference releases the cache */
}

static PyObject *lobj_item_held(bcpy_lobj *self, int64_t index);
static PyObject *range_error(bcpy_lobj *self, const char *detail);
static int check_hint(bcpy_core *core, const bc_len *l);

/* A pending IndexError whose message names the cache by its type
 * ("cache: index 100 out of range [0, 30)", also inside "indices[1] = 100:
 * ..."): the root instead.  Returns NULL (the exception stays set). */
static PyObject *name_the_root(bcpy_lobj *self) {
  if (!PyErr_ExceptionMatches(PyExc_IndexError) || PyErr_ExceptionMatches(bcpy_NotCachedError))
    return NULL;
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  PyObject *text = value != NULL ? PyObject_Str(value) : NULL;
  PyObject *fixed = NULL;
  if (text != NULL) {
    PyObject *old = PyUnicode_FromString("cache: index ");
    PyObject *new = old != NULL ? PyUnicode_FromFormat("%U: index ", self->core->root) : NULL;
    if (new != NULL && PyUnicode_Find(text, old, 0, PyUnicode_GET_LENGTH(text), 1) >= 0)
      fixed = PyUnicode_Replace(text, old, new, 1);
    Py_XDECREF(old);
    Py_XDECREF(new);
  }
  if (fixed != NULL && Py_IS_TYPE(value, (PyTypeObject *)PyExc_IndexError)) {
    PyErr_SetObject(PyExc_IndexError, fixed); /* a plain IndexError, as before */
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
  } else {
    PyErr_Clear(); /* (of the lookups above) */
    PyErr_Restore(type, value, tb);
  }
  Py_XDECREF(fixed);
  Py_XDECREF(text);
  return NULL;
}

/* Raises the error `rc` of reading an item (out of range: naming the root). */
static PyObject *item_error(bcpy_lobj *self, int rc) {
  if (rc == BC_ERANGE && !self->core->hint_done) {
    /* An index below the hint that is out of range shows it wrong. */
    bc_error_state saved = BC_ERROR_STATE_INIT;
    bc_error_save(&saved, rc);
    bc_len l;
    int lrc = bc_seq_length(self->core->seq, false, &l);
    bc_error_restore(&saved);
    bc_error_state_clear(&saved);
    if (lrc == 0 && check_hint(self->core, &l) < 0) {
      bc_error_clear();
      return NULL;
    }
  }
  const char *detail = rc == BC_ERANGE ? strstr(bc_errmsg(), "index ") : NULL;
  Py_ssize_t n = 0;
  const char *root = detail != NULL ? PyUnicode_AsUTF8AndSize(self->core->root, &n) : NULL;
  if (detail != NULL && root == NULL) PyErr_Clear(); /* not UTF-8: not in the message */
  if (detail == NULL || (root != NULL && strncmp(bc_errmsg(), root, (size_t)n) == 0))
    return bcpy_raise(rc, NULL);
  if (strncmp(bc_errmsg(), "cache: ", 7) == 0) {
    /* The leaf's own range (a view's index resolved to it): its index. */
    bcpy_raise(rc, NULL);
    return name_the_root(self);
  }
  range_error(self, detail);
  bc_error_clear();
  return NULL;
}

/* IndexError for an index out of range, naming the root (a view's too):
 * `detail` is the "index ... out of range ..." part. */
static PyObject *range_error(bcpy_lobj *self, const char *detail) {
  return PyErr_Format(PyExc_IndexError, "%U%s: %s", self->core->root,
                      self->parent != NULL ? " (a view of it)" : "", detail);
}

/* ---- single reads: accounting and the regeneration warning --------------- */

/* Before a single read releases the GIL: the iterator's count then. */
static uint64_t read_begin(bcpy_core *c) {
  c->reading++;
  c->read_seq++;
  return c->src != NULL ? c->src->pulled : 0;
}

#define THRASH_RATIO 10   /* records generated per record served */
#define THRASH_SHARDS 8   /* ... and at least this many shards' worth */
#define THRASH_REGENS 4   /* ... with this many shards regenerated */

/* Random reads under a disk limit that keep regenerating: warned once per
 * loader (CacheWarning), when the records the iterator produced during
 * single reads exceed THRASH_RATIO times the records they served (and
 * THRASH_SHARDS shards), and THRASH_REGENS shards were regenerated (not
 * a first fill that ran the iterator up to a far record).  The engine's counters are
 * read only when the first test passes, and then again only after the
 * records generated have doubled.  -1 when the warning raised (a
 * warnings filter "error"). */
static int thrash_check(bcpy_core *c) {
  uint64_t gen = c->gen_in_reads;
  if (c->thrash_warned || c->disk_limit == 0 || c->src == NULL || gen < c->thrash_check ||
      gen <= THRASH_RATIO * c->served || gen < THRASH_SHARDS * (c->R ? c->R : 1))
    return 0;
  c->thrash_check = 2 * gen;
  bc_cache_stats st;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = bc_cache_stats_get(c->cache, &st);
  Py_END_ALLOW_THREADS
  if (rc != 0) {
    bc_error_clear(); /* only a hint: the read itself succeeded */
    return 0;
  }
  if (st.regenerations < THRASH_REGENS) return 0;
  c->thrash_warned = true;
  PyObject *msg = PyUnicode_FromFormat(
      "%U: reads under the disk limit (%llu bytes) keep regenerating evicted "
      "shards: %llu records generated for %llu records read (%llu shards "
      "regenerated).%s "
      "Read in an order that stays within a few shards at a time "
      "(bagcache.chunk_shuffle(data, chunk_size, seed=...) with chunk_size "
      "about the records the limit holds), or raise memory_limit.",
      c->root, (unsigned long long)c->disk_limit, (unsigned long long)gen,
      (unsigned long long)c->served, (unsigned long long)st.regenerations,
      c->seekable ? ""
                  : " Each miss reruns create_iter() from the nearest parked pass "
                    "before the shard: make the source seekable (def "
                    "create_iter(start=0), yielding the items from index start on; "
                    "for a command stored by `bagcache cache fill`, fill with "
                    "--seek-arg) so that a miss produces one shard.");
  if (msg == NULL) return -1;
  PyObject *text = PyUnicode_AsUTF8String(msg);
  Py_DECREF(msg);
  if (text == NULL) return -1;
  int r = PyErr_WarnEx(bcpy_CacheWarning, PyBytes_AS_STRING(text), 1);
  Py_DECREF(text);
  return r;
}

/* After a single read took the GIL back: `got` records served.  The
 * display of waiting reads, if shown, is erased by the last read in flight
 * before it returns (its failure is dropped: the read succeeded). */
static int read_end(bcpy_core *c, uint64_t pulled0, uint64_t got) {
  c->reading--;
  c->served += got;
  uint64_t pulled = c->src != NULL ? c->src->pulled : 0;
  c->gen_in_reads += pulled - pulled0;
  if (c->read_shown != NULL && c->reading == 0) {
    PyObject *shown = c->read_shown;
    Py_INCREF(shown);
    PyObject *r = PyObject_CallMethod(shown, "suspend", NULL);
    if (r == NULL) PyErr_Clear();
    Py_XDECREF(r);
    Py_DECREF(shown);
  }
  return thrash_check(c);
}


/* Record `index` (negative counts from the end).  A close in another
 * thread meanwhile leaves self->seq to this call to drop. */
static PyObject *lobj_item(bcpy_lobj *self, int64_t index) {
  if (lobj_check(self) < 0) return NULL;
  lobj_enter(self);
  PyObject *r = lobj_item_held(self, index);
  lobj_leave(self);
  return r;
}

static PyObject *lobj_item_held(bcpy_lobj *self, int64_t index) {
  bcpy_core *core = self->core;
  if (index < 0) { /* cheap when the end is already known */
    bc_len l;
    if (bc_seq_length(self->seq, false, &l) == 0 && l.kind == BC_LEN_EXACT) {
      if ((uint64_t)(-(index + 1)) >= l.value) {
        char detail[128];
        snprintf(detail, sizeof detail, "index %lld out of range [-%llu, %llu)",
                 (long long)index, (unsigned long long)l.value, (unsigned long long)l.value);
        return range_error(self, detail);
      }
      index += (int64_t)l.value;
    }
  }
  bc_seq *seq = self->seq;
  int64_t at = index;
  if (index >= 0 && self->resolve_safe) {
    /* Arithmetic only (the caller keeps the GIL). */
    bc_seq *leaf;
    uint64_t li;
    int rc = bc_seq_resolve(self->seq, index, &leaf, &li);
    if (rc != 0) return item_error(self, rc);
    if (leaf == core->seq && core->R != 0) {
      seq = leaf;
      at = (int64_t)li;
    }
  }
  /* The cache itself: its own entry skips the sequence layer.  Safe
   * against a close meanwhile: closing drops the handle, not the object,
   * which this object's sequence reference keeps (it is left to this call
   * to drop: lobj_enter). */
  bc_cache *leaf = seq == core->seq && at >= 0 ? core->cache : NULL;
  bc_buf fallback = BC_BUF_INIT;
  bc_buf *buf = bcpy_scratch_take(&fallback);
  int rc;
  uint64_t pulled0 = read_begin(core);
  Py_BEGIN_ALLOW_THREADS
  rc = leaf == NULL ? bc_seq_get(seq, at, buf) : bc_cache_get(leaf, at, buf);
  Py_END_ALLOW_THREADS
  bcpy_notices_flush(); /* a damaged shard regenerated, say */
  if (rc != 0) {
    core->reading--;
    bcpy_scratch_give(buf, &fallback);
    return item_error(self, rc);
  }
  PyObject *result = to_record(core, buf);
  bcpy_scratch_give(buf, &fallback);
  if (result != NULL && read_end(core, pulled0, 1) < 0) Py_CLEAR(result);
  else if (result == NULL) core->reading--;
  return result;
}

/* Ends a progress display (NULL or None: none) with shown.close(finished),
 * after the call it showed returned (finished: successfully): -1 when
 * close() raised and no exception was set before (an exception of the
 * call wins over close()'s). */
static int progress_end(PyObject *shown, bool finished) {
  if (shown == NULL) return 0;
  int result = 0;
  if (shown != Py_None) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *r = PyObject_CallMethod(shown, "close", "O", finished ? Py_True : Py_False);
    Py_XDECREF(r);
    if (type != NULL) {
      PyErr_Clear();
      PyErr_Restore(type, value, tb);
    } else if (r == NULL) {
      result = -1;
    }
  }
  Py_DECREF(shown);
  return result;
}

/* The exact length, draining the source if needed (with the core's
 * progress display around the drain, if it has one). */
static int lobj_exact_len(bcpy_lobj *self, uint64_t *out) {
  if (lobj_check(self) < 0) return -1;
  bc_len l;
  int rc = bc_seq_length(self->seq, false, &l);
  bool loader = self->seq == self->core->seq; /* not a view: the hint is its length */
  if (rc == 0 && loader && check_hint(self->core, &l) < 0) return -1;
  if (rc == 0 && l.kind == BC_LEN_EXACT) {
    *out = l.value;
    return 0;
  }
  if (rc == 0 && loader && !self->core->hint_done) {
    *out = (uint64_t)self->core->length_hint; /* the source has not shown another yet */
    return 0;
  }
  PyObject *shown = NULL; /* the progress display of this drain, if any */
  if (self->core->progress != NULL &&
      (shown = PyObject_CallOneArg(self->core->progress, (PyObject *)self->core)) == NULL)
    return -1;
  bc_seq *seq = bc_seq_ref(self->seq);
  uint64_t len = 0;
  Py_BEGIN_ALLOW_THREADS
  rc = bc_seq_len(seq, &len);
  Py_END_ALLOW_THREADS
  if (rc != 0) bcpy_raise(rc, NULL);
  teardown(NULL, seq, NULL);
  if (progress_end(shown, rc == 0) < 0 || rc != 0) return -1;
  *out = len;
  return 0;
}

/* Warns once (CacheWarning) when what is known of the length `l` shows
 * the length hint wrong: the source ended elsewhere, or goes on past it;
 * the hint is not used from then on (hint_done).  metadata.json drops the
 * hint when the length is found (the engine).  -1 when the warning
 * raised (warnings as errors). */
static int check_hint(bcpy_core *core, const bc_len *l) {
  if (core->hint_done) return 0;
  uint64_t hint = (uint64_t)core->length_hint;
  if (l->kind != BC_LEN_EXACT && l->value <= hint) return 0;
  core->hint_done = true;
  if (l->kind == BC_LEN_EXACT && l->value == hint) return 0;
  if (l->kind == BC_LEN_EXACT)
    return PyErr_WarnFormat(bcpy_CacheWarning, 1,
                            "%U: the source ended after %llu records, not at the length "
                            "given when the cache was created (length=%llu, a hint): "
                            "len() is %llu",
                            core->root, (unsigned long long)l->value,
                            (unsigned long long)hint, (unsigned long long)l->value);
  return PyErr_WarnFormat(bcpy_CacheWarning, 1,
                          "%U: the source goes on past the length given when the cache "
                          "was created (length=%llu, a hint): %llu records so far; len() "
                          "reads it to its end", core->root, (unsigned long long)hint,
                          (unsigned long long)l->value);
}

static Py_ssize_t lobj_length(bcpy_lobj *self) {
  uint64_t n;
  if (lobj_exact_len(self, &n) < 0) return -1;
  if (n > (uint64_t)PY_SSIZE_T_MAX) {
    PyErr_SetString(PyExc_OverflowError, "sequence too long for len()");
    return -1;
  }
  return (Py_ssize_t)n;
}

/* ---- _CacheSeq: views ---------------------------------------------------------- */

static const bcpy_seq_kind lobj_kind;

/* A new view object (of the class named by type(self)._view_class, else
 * _CacheSeq) over seq (reference taken over). */
static PyObject *new_view(bcpy_lobj *self, bc_seq *seq, PyObject *key, bool safe) {
  PyTypeObject *type = &bcpy_CacheSeq_Type;
  PyObject *cls = PyObject_GetAttrString((PyObject *)Py_TYPE(self), "_view_class");
  if (cls == NULL) {
    PyErr_Clear();
  } else if (PyType_Check(cls) && PyType_IsSubtype((PyTypeObject *)cls, &bcpy_CacheSeq_Type)) {
    type = (PyTypeObject *)cls;
  }
  bcpy_lobj *v = (bcpy_lobj *)type->tp_alloc(type, 0);
  Py_XDECREF(cls); /* a class stays alive through self's type */
  if (v == NULL) {
    bc_seq_unref(seq);
    return NULL;
  }
  v->kind = &lobj_kind;
  v->seq = seq;
  Py_INCREF(self->core);
  v->core = self->core;
  Py_INCREF(self);
  v->parent = (PyObject *)self;
  Py_INCREF(key);
  v->key = key;
  v->resolve_safe = safe;
  user_add(v);
  return (PyObject *)v;
}

/* self[a:b:c] (core/sequence.c made `seq`, perhaps after a wait in which
 * the loader may have been closed). */
static PyObject *lobj_wrap(bcpy_sobj *base, bc_seq *seq, PyObject *key) {
  bcpy_lobj *self = (bcpy_lobj *)base;
  if (lobj_check(self) < 0) {
    teardown(NULL, seq, NULL);
    return NULL;
  }
  return new_view(self, seq, key, self->resolve_safe);
}

/* self[indices]: a view of the records at those positions (checked when
 * read); key is kept as int64 bytes for pickling. */
static PyObject *get_take(bcpy_sobj *base, PyObject *key) {
  bcpy_lobj *self = (bcpy_lobj *)base;
  bcpy_ivec a = {NULL, 0, 0};
  if (bcpy_key_indices(key, "indices", false, &a) < 0) {
    PyMem_RawFree(a.v);
    return NULL;
  }
  bool safe = self->resolve_safe;
  for (size_t k = 0; k < a.n && safe; k++) safe = a.v[k] >= 0;
  PyObject *packed = PyBytes_FromStringAndSize(a.v != NULL ? (const char *)a.v : "",
                                               (Py_ssize_t)(a.n * sizeof(int64_t)));
  bc_seq *out = NULL;
  int rc = packed == NULL ? 0 : bc_seq_take(&out, self->seq, a.v, a.n);
  PyMem_RawFree(a.v);
  if (packed == NULL) return NULL;
  if (rc != 0) {
    Py_DECREF(packed);
    return bcpy_raise(rc, NULL);
  }
  PyObject *v = new_view(self, out, packed, safe);
  Py_DECREF(packed);
  return v;
}

/* Iterators are listed in their core, which stops them when it closes; a
 * first pass's tee goes with its iterator. */
static void lobj_track(bcpy_sobj *self, bcpy_iter *it, bool add) {
  bcpy_core *core = ((bcpy_lobj *)self)->core;
  if (add) {
    it->next_iter = core->iters;
    if (core->iters != NULL) core->iters->prev_iter = &it->next_iter;
    core->iters = it;
    it->prev_iter = &core->iters;
  } else if (it->prev_iter != NULL) {
    *it->prev_iter = it->next_iter;
    if (it->next_iter != NULL) it->next_iter->prev_iter = it->prev_iter;
    it->prev_iter = NULL;
  }
  if (!add && it->producer != NULL) bcpy_tee_release(it);
}

/* A record an iterator read: none once the loader is closed (its records
 * are gone). */
static PyObject *lobj_decode(bcpy_sobj *self, bc_buf *b, uint64_t index) {
  (void)index;
  bcpy_core *core = ((bcpy_lobj *)self)->core;
  if (core_check(core) < 0) return NULL;
  return to_record(core, b);
}

static bool lobj_waits(bcpy_sobj *self) {
  (void)self;
  return true;
}

static int lobj_check_seq(bcpy_sobj *self) { return lobj_check((bcpy_lobj *)self); }

static PyObject *lobj_item_seq(bcpy_sobj *self, int64_t i) {
  return lobj_item((bcpy_lobj *)self, i);
}

/* The wait policy of a LoadIt and its views: the call with the GIL
 * released, counted as a read (a bulk read's round: read_indices, a torch
 * Dataset's __getitems__) for the progress of reads that wait and the
 * warning about reads that keep regenerating. */
static int lobj_wait(bcpy_sobj *base, bcpy_call *c) {
  bcpy_lobj *self = (bcpy_lobj *)base;
  bcpy_core *core = self->core;
  size_t records = bcpy_wait_records;
  if (core == NULL || records == 0) return bcpy_wait_plain(base, c);
  uint64_t pulled0 = read_begin(core);
  bcpy_wait_plain(base, c);
  bcpy_notices_flush();
  return read_end(core, pulled0, c->rc == 0 ? records : 0);
}

static const bcpy_seq_kind lobj_kind = {
    .check = lobj_check_seq,
    .item = lobj_item_seq,
    .take = get_take,
    .wait = lobj_wait,
    .wrap = lobj_wrap,
    .raise = bcpy_raise_errno,
    .decode = lobj_decode,
    .waits = lobj_waits,
    .track = lobj_track,
    .chunk = bcpy_tee_chunk,
};

static PyObject *lobj_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
  bcpy_lobj *self = (bcpy_lobj *)PyType_GenericNew(type, args, kwds);
  if (self != NULL) self->kind = &lobj_kind;
  return (PyObject *)self;
}

/* ---- _CacheSeq: bulk reads and the rest ---------------------------------------- */

/* The loader is held (lobj_enter) while it reads: the one bulk read loop
 * (core/bulk.c) waits with the GIL released and checks between rounds that it
 * was not closed meanwhile. */
static PyObject *lobj_read_indices(bcpy_lobj *self, PyObject *indices) {
  if (lobj_check(self) < 0) return NULL;
  lobj_enter(self);
  bcpy_ivec a = {NULL, 0, 0};
  PyObject *r = bcpy_indices_from_object(indices, &a, NULL) < 0
                    ? NULL : bcpy_read_list((bcpy_sobj *)self, a.v, a.n);
  PyMem_RawFree(a.v);
  lobj_leave(self);
  return r != NULL ? r : name_the_root(self);
}

static PyObject *lobj_known_length(bcpy_lobj *self, PyObject *unused) {
  (void)unused;
  if (lobj_check(self) < 0) return NULL;
  bc_len l;
  int rc = bc_seq_length(self->seq, false, &l);
  if (rc != 0) return bcpy_raise(rc, NULL);
  return Py_BuildValue("(KO)", (unsigned long long)l.value,
                       l.kind == BC_LEN_EXACT ? Py_True : Py_False);
}

static void capsule_release(PyObject *capsule) {
  teardown(NULL, PyCapsule_GetPointer(capsule, "bagcache.bc_seq"), NULL);
}

/* For bagcache's views over any sequence: (capsule of the bc_seq, loads)
 * so that they read records in C and decode them with loads. */
static PyObject *lobj_bagcache_seq(bcpy_lobj *self, PyObject *unused) {
  (void)unused;
  if (lobj_check(self) < 0) return NULL;
  PyObject *cap = PyCapsule_New(bc_seq_ref(self->seq), "bagcache.bc_seq", capsule_release);
  if (cap == NULL || PyCapsule_SetContext(cap, (void *)bcpy_waits_mark) < 0) {
    Py_XDECREF(cap);
    return NULL;
  }
  return Py_BuildValue("(NO)", cap, self->core->loads != NULL ? self->core->loads : Py_None);
}

static PyObject *lobj_open(bcpy_lobj *self, PyObject *core) {
  if (!PyObject_TypeCheck(core, &bcpy_CacheCore_Type)) {
    PyErr_SetString(PyExc_TypeError, "_open needs a _CacheCore");
    return NULL;
  }
  if (self->seq != NULL) {
    PyErr_SetString(PyExc_ValueError, "already open");
    return NULL;
  }
  bcpy_core *c = (bcpy_core *)core;
  if (core_check(c) < 0) return NULL;
  Py_INCREF(core);
  self->core = c;
  self->seq = bc_seq_ref(c->seq);
  self->resolve_safe = true;
  user_add(self);
  Py_RETURN_NONE;
}

static PyObject *lobj_iter(bcpy_lobj *self);

static int lobj_traverse(bcpy_lobj *self, visitproc visit, void *arg) {
  Py_VISIT(self->core);
  Py_VISIT(self->parent);
  Py_VISIT(self->key);
  return 0;
}

static int lobj_clear(bcpy_lobj *self) {
  Py_CLEAR(self->parent);
  Py_CLEAR(self->key);
  return 0;
}

static void lobj_dealloc(bcpy_lobj *self) {
  PyObject_GC_UnTrack(self);
  if (self->weakrefs != NULL) PyObject_ClearWeakRefs((PyObject *)self);
  user_remove(self);
  bc_seq *seq = self->seq;
  self->seq = NULL;
  teardown(NULL, seq, NULL);
  lobj_clear(self);
  Py_CLEAR(self->core);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef lobj_methods[] = {
    {"_open", (PyCFunction)lobj_open, METH_O, "_open(core): read the whole cache."},
    {"read_indices", (PyCFunction)lobj_read_indices, METH_O,
     "read_indices(indices) -> list\n\n"
     "The records at `indices` (any iterable of ints or a 1-D integer array;\n"
     "negative ones count from the end), read in parallel."},
    {"_known_length", (PyCFunction)lobj_known_length, METH_NOARGS,
     "_known_length() -> (n, exact): what is known of the length, never waiting."},
    {"__bagcache_seq__", (PyCFunction)lobj_bagcache_seq, METH_NOARGS,
     "__bagcache_seq__() -> (capsule, loads): the C sequence, for bagcache views."},
    {NULL, NULL, 0, NULL}};

static PyMemberDef lobj_members[] = {
    {"_core", T_OBJECT, offsetof(bcpy_lobj, core), READONLY, "The _CacheCore."},
    {"_parent", T_OBJECT, offsetof(bcpy_lobj, parent), READONLY,
     "A view: what it was taken from (None for the loader)."},
    {"_key", T_OBJECT, offsetof(bcpy_lobj, key), READONLY,
     "A view: its key (a slice, or the indices as int64 bytes)."},
    {NULL, 0, 0, 0, NULL}};

static PyMappingMethods lobj_as_mapping = {
    .mp_length = (lenfunc)lobj_length,
};

PyTypeObject bcpy_CacheSeq_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bagcache._bagcache._CacheSeq",
    .tp_basicsize = sizeof(bcpy_lobj),
    .tp_dealloc = (destructor)lobj_dealloc,
    .tp_as_mapping = &lobj_as_mapping,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A sequence of the records of a cache, or a view of one.",
    .tp_traverse = (traverseproc)lobj_traverse,
    .tp_clear = (inquiry)lobj_clear,
    .tp_weaklistoffset = offsetof(bcpy_lobj, weakrefs),
    .tp_iter = (getiterfunc)lobj_iter,
    .tp_methods = lobj_methods,
    .tp_members = lobj_members,
    .tp_base = &bcpy_Sequence_Type,
    .tp_new = lobj_new,
};

/* ---- _CacheIter ----------------------------------------------------------------- */

/* The iterator (core/iterator.c) from position `from`: positions streamed
 * lazily (never settling the length first: that would drain the source),
 * ITER_BATCH records per refill from a window of ITER_WINDOW. */
static PyObject *cache_iter_at(bcpy_lobj *self, uint64_t from) {
  if (lobj_check(self) < 0) return NULL;
  return bcpy_iter_open((bcpy_sobj *)self, &bcpy_CacheIter_Type, self->seq, from,
                        ITER_WINDOW, 0, ITER_BATCH, ITER_BATCH, true, false);
}

PyObject *bcpy_cache_iter(PyObject *loader, uint64_t from) {
  return cache_iter_at((bcpy_lobj *)loader, from);
}

/* Nothing of the loader is on disk (in any process), no pass runs in this
 * one and the length is not known yet: a first pass.  (A first pass yields
 * what the iterator yields; a known length, from `length=` or finalize(),
 * may end the sequence before the iterator ends, so then the cache is read
 * as on any later pass.) */
static bool first_pass(bcpy_lobj *self) {
  bcpy_core *core = self->core;
  if (self->seq != core->seq || core->src == NULL || core->R == 0 ||
      atomic_load(&core->src->passes) != 0)
    return false;
  bc_cache_stats st;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = bc_cache_stats_get(core->cache, &st);
  Py_END_ALLOW_THREADS
  return rc == 0 && st.shards_present == 0 && !st.length_final;
}

static PyObject *lobj_iter(bcpy_lobj *self) {
  if (lobj_check(self) < 0) return NULL;
  if (first_pass(self)) {
    PyObject *tee = bcpy_tee_start((bcpy_sobj *)self, self->core->src, self->seq,
                                   self->core->R, self->core->root);
    if (tee != NULL || PyErr_Occurred()) return tee;
  }
  return cache_iter_at(self, 0);
}

PyTypeObject bcpy_CacheIter_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bagcache._bagcache._CacheIter",
    .tp_basicsize = sizeof(bcpy_iter),
    .tp_flags = Py_TPFLAGS_DEFAULT, /* GC: inherited */
    .tp_doc = "Iterator over a cache's records, read ahead on worker threads; on a\n"
              "first pass, the iterator's own objects, cached on the way.",
    .tp_base = &bcpy_Iterator_Type,
};

static void release_users(bcpy_core *c) {
  /* Iterators first (their read-ahead holds references of its own; a
   * busy one is inside a read that ends with the close, and drops its
   * read-ahead when collected), then the sequences (GIL released: the
   * last one releases the cache). */
  for (bcpy_iter *it = c->iters; it != NULL; it = it->next_iter)
    if (!it->busy) bcpy_iter_stop(it);
  size_t n = 0;
  for (bcpy_lobj *v = c->users; v != NULL; v = v->next_user) n++;
  bc_seq **seqs = n > 0 ? PyMem_RawCalloc(n, sizeof *seqs) : NULL;
  size_t k = 0;
  for (bcpy_lobj *v = c->users; v != NULL; v = v->next_user) {
    if (v->inflight > 0) { /* a call in another thread uses it */
      v->drop_pending = true;
      continue;
    }
    if (seqs == NULL) break; /* out of memory: they go when collected */
    seqs[k++] = v->seq;
    v->seq = NULL;
  }
  if (k == 0) {
    PyMem_RawFree(seqs);
    return;
  }
  if (bcpy_in_callback) {
    for (size_t i = 0; i < k; i++) teardown(NULL, seqs[i], NULL);
  } else {
    Py_BEGIN_ALLOW_THREADS
    for (size_t i = 0; i < k; i++) bc_seq_unref(seqs[i]);
    Py_END_ALLOW_THREADS
  }
  PyMem_RawFree(seqs);
}


/* ---- module setup ----------------------------------------------------------------- */

int bcpy_loadit_init(PyObject *mod) {
  if (bcpy_add_type(mod, &bcpy_CacheCore_Type, "_CacheCore") < 0 ||
      bcpy_add_type(mod, &bcpy_CacheSeq_Type, "_CacheSeq") < 0 ||
      bcpy_add_type(mod, &bcpy_CacheIter_Type, "_CacheIter") < 0)
    return -1;
  if (bcpy_add_exception(mod, &bcpy_SourceError, "SourceError", PyExc_RuntimeError,
                    "A cache's source failed and its exception is not available "
                    "(the fill was interrupted, or the interpreter is exiting).") < 0 ||
      bcpy_add_exception(mod, &bcpy_NotCachedError, "NotCachedError", PyExc_IndexError,
                    "The record is not cached and the cache has no source to fill it.") < 0 ||
      bcpy_add_exception(mod, &bcpy_NondeterministicError, "NondeterministicError",
                    PyExc_ValueError,
                    "A regenerated shard differs from the first time: the iterator "
                    "is not deterministic.") < 0 ||
      bcpy_add_exception(mod, &bcpy_CacheWarning, "CacheWarning", PyExc_RuntimeWarning,
                    "Warned once when the fill behind a LoadIt's first pass fails "
                    "(a full disk, an I/O error...): the loop goes on with the "
                    "iterator's items, which are not saved.  `filename` is the "
                    "cache's root, `errno` the system's error number (None when the "
                    "failure is not the system's).") < 0)
    return -1;
  return 0;
}
