/*
 * The cache: opening a root, the sequence leaf over it, introspection.
 *
 * get(i): shard s = i / R; the per-process reader LRU serves it if open,
 * else bc__reader_acquire obtains the shard (fill, wait, or take over) and
 * opens it.  Reading past the end is BC_ERANGE: the filler discovers the
 * end and records it (length_final) for everyone.
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#ifdef __linux__
#include <sys/vfs.h>
#endif
#include <jansson.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include "bag/internal.h"
#include "cache/internal.h"
#include "seq/internal.h"

double bc__now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

double bc__coarse_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Writes v in decimal at p; returns the end. */
static char *put_decimal(char *p, uint64_t v) {
  char digits[20];
  size_t n = 0;
  do digits[n++] = (char)('0' + v % 10); while ((v /= 10) != 0);
  while (n > 0) *p++ = digits[--n];
  return p;
}

char *bc__path_printf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *p = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (p != NULL) {
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
  }
  return p;
}

char *bc__cache_shard_path(const bc_cache *c, uint64_t shard, uint64_t records,
                           bool zstd) {
  uint64_t start = shard * c->R;
  size_t dir = strlen(c->shards_dir);
  /* By hand: every shard open names its file, and snprintf's %llu costs
   * thousands of instructions (a sixth of a cold read's). */
  char *out = malloc(dir + sizeof "/." + 2 * 20 + sizeof ".bagz");
  if (out == NULL) return NULL;
  char *p = out;
  memcpy(p, c->shards_dir, dir);
  p += dir;
  *p++ = '/';
  p = put_decimal(p, start);
  *p++ = '.';
  p = put_decimal(p, start + records);
  memcpy(p, zstd ? ".bagz" : ".bag", zstd ? 6 : 5);
  return out;
}

char *bc__cache_crc_path(const bc_cache *c, const char *shard_path) {
  const char *slash = strrchr(shard_path, '/');
  return bc__path_printf("%s/%s.crc", c->sums_dir, slash ? slash + 1 : shard_path);
}

char *bc__scratch_crc_path(const char *scratch) {
  return bc__path_printf("%s.crc", scratch);
}

int bc__cache_open_shard(bc_cache *c, const char *path, bc_bag **out) {
  bc_reader_options o = BC_READER_OPTIONS_INIT;
  o.max_parallelism = 1;
  bc_bag *bag = NULL;
  /* The literal path: the root's name may hold ',' or '@' (spec syntax). */
  int rc = bc__bag_open_file(&bag, path, &o);
  if (rc == 0 && c->crc && !bc__path_is_bagz(path)) {
    char *crc = bc__cache_crc_path(c, path);
    rc = crc ? bc__bag_attach_crcs(bag, crc) : bc__error(BC_ENOMEM, "out of memory");
    struct stat st;
    if (rc == BC_ENOTFOUND && stat(path, &st) == 0)
      /* The shard is there but not its checksums: damaged (an eviction
       * meanwhile removes both, and stays BC_ENOTFOUND). */
      rc = bc__error(BC_ECORRUPT, "%s: damaged shard: its checksum file %s "
                     "is missing", path, crc);
    free(crc);
  }
  if (rc != 0) {
    bc_bag_close(bag);
    return rc;
  }
  *out = bag;
  return 0;
}

int bc__cache_load_length(bc_cache *c, MDB_txn *t) {
  /* A final length never changes (final is never cleared): nothing to
   * refresh, and every shard open skips two lookups. */
  if (atomic_load(&c->final)) return 0;
  uint64_t len = 0, fin = 0;
  bool f1 = false, f2 = false;
  int rc = bc__u64_get(t, bc__dbi_meta(c->env), "length", &len, &f1);
  if (rc == 0) rc = bc__u64_get(t, bc__dbi_meta(c->env), "final", &fin, &f2);
  if (rc != 0) return rc;
  if (f1) atomic_store(&c->known_length, len);
  if (f2 && fin) atomic_store(&c->final, true);
  return 0;
}

/* ---- fork ------------------------------------------------------------------ */

/* Every open cache, so fork() can be made safe for them: before fork each
 * cache's lock is taken (no thread is inside its bookkeeping), after it the
 * parent releases them and the child resets what belonged to the parent's
 * threads: its identity (claims must be the child's), the source passes
 * (the parent's objects: forgotten, not closed, since closing could end
 * the parent's resources, e.g. a subprocess), the prefetch queue and
 * workers (threads do not survive fork), the pending access-clock bumps
 * (the parent's opens).  The LMDB environment is reopened
 * by the child's first transaction (state.c).
 * Lock order: open_caches_lock, then the environments' locks (state.c:
 * the registry, then each fill registry), then each cache's locks in the
 * order of internal.h.  The registry comes before the caches because
 * elsewhere it is held while an environment is opened, which takes LMDB's
 * writer mutex, and a publish takes a cache's access lock while it holds
 * that mutex (access.c): taking a cache's lock before the registry here
 * would close that cycle. */
static pthread_mutex_t open_caches_lock = PTHREAD_MUTEX_INITIALIZER;
static bc_cache *open_caches;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void before_fork(void) {
  pthread_mutex_lock(&open_caches_lock);
  bc__envs_before_fork();
  for (bc_cache *c = open_caches; c; c = c->next_open) {
    pthread_mutex_lock(&c->pool.lock); /* the order of internal.h */
    pthread_mutex_lock(&c->prefetch.lock);
    pthread_mutex_lock(&c->readers.lock);
    pthread_mutex_lock(&c->access.lock);
    pthread_mutex_lock(&c->publisher.lock);
  }
}

static void after_fork_parent(void) {
  for (bc_cache *c = open_caches; c; c = c->next_open) {
    pthread_mutex_unlock(&c->publisher.lock);
    pthread_mutex_unlock(&c->access.lock);
    pthread_mutex_unlock(&c->readers.lock);
    pthread_mutex_unlock(&c->prefetch.lock);
    pthread_mutex_unlock(&c->pool.lock);
  }
  bc__envs_after_fork(false);
  pthread_mutex_unlock(&open_caches_lock);
}

static void after_fork_child(void) {
  for (bc_cache *c = open_caches; c; c = c->next_open) {
    c->self = bc__owner_self();
    c->store.self = c->self;
    for (size_t i = 0; i < c->pool.max_passes; i++)
      c->pool.passes[i] = (bc__pass){0};
    c->prefetch.qlen = 0;
    c->access.n = 0; /* the parent's opens: the parent commits them */
    c->prefetch.drain_requested = false;
    c->prefetch.nworkers = 0; /* the parent's threads: nothing to join here */
    /* ... nor to hold references: drop theirs (the last one stays, and
     * the cache with it, should nothing else hold one: no destroying in
     * an atfork handler). */
    for (int i = 0; i < c->prefetch.nstarted; i++) {
      if (c->prefetch.workers[i].exited) continue;
      c->prefetch.workers[i].exited = true;
      if (__atomic_load_n(&c->base.refs, __ATOMIC_RELAXED) > 1)
        __atomic_fetch_sub(&c->base.refs, 1, __ATOMIC_RELAXED);
    }
    atomic_store(&c->abandon, false);
    bc__slots_after_fork_child(&c->readers.slots);
    pthread_cond_init(&c->pool.cond, NULL);
    pthread_cond_init(&c->prefetch.cond, NULL);
    bc__publisher_after_fork_child(&c->publisher); /* (unlocks it) */
    pthread_mutex_unlock(&c->access.lock);
    pthread_mutex_unlock(&c->readers.lock);
    pthread_mutex_unlock(&c->prefetch.lock);
    pthread_mutex_unlock(&c->pool.lock);
  }
  bc__envs_after_fork(true);
  pthread_mutex_unlock(&open_caches_lock);
}

static void register_atfork(void) {
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

static void track_open(bc_cache *c, bool open) {
  pthread_once(&atfork_once, register_atfork);
  pthread_mutex_lock(&open_caches_lock);
  if (open) {
    c->next_open = open_caches;
    open_caches = c;
  } else {
    for (bc_cache **p = &open_caches; *p; p = &(*p)->next_open)
      if (*p == c) {
        *p = c->next_open;
        break;
      }
  }
  pthread_mutex_unlock(&open_caches_lock);
}

/* ---- the sequence leaf ---------------------------------------------------- */

static int cache_length(bc_seq *self, bool exact, bc_len *out) {
  bc_cache *c = (bc_cache *)self;
  if (exact && !atomic_load(&c->final)) {
    /* Another process (or cache object) may have found the end. */
    MDB_txn *t;
    int rc = bc__txn_begin(c->env, false, &t);
    if (rc != 0) return rc;
    rc = bc__cache_load_length(c, t);
    mdb_txn_abort(t);
    if (rc != 0) return rc;
  }
  if (exact && !atomic_load(&c->final)) {
    if (!c->has_source)
      return bc__error(BC_ENOTCACHED,
                       "%s: the length is not known yet (the source never "
                       "ended) and the cache has no source", c->root);
    int rc = bc__drain(c, false);
    if (rc != 0) return rc;
  }
  *out = (bc_len){atomic_load(&c->final) ? BC_LEN_EXACT : BC_LEN_AT_LEAST,
                  atomic_load(&c->known_length)};
  return 0;
}

/* A read of shard `shard` through reader `r` failed with BC_ECORRUPT: the
 * file's bytes changed on disk (a record checksum failed) or it shrank
 * under its mapping.  The reader is released and dropped, so no read of
 * this process uses that mapping again; with a source the file is
 * forgotten (if it is still the one read) for the caller to read the shard
 * again, which regenerates it through the normal fill and publish.
 * Returns 0 to retry, or the error to report. */
static int read_damaged(bc_cache *c, uint64_t shard, bc__reader *r,
                        int attempt) {
  char detail[1024];
  snprintf(detail, sizeof detail, "%s", bc_errmsg());
  uint64_t dev, ino;
  bc__bag_file_id(r->bag, &dev, &ino);
  bc__reader_discard(c, r);
  if (!c->has_source)
    return bc__error(BC_ECORRUPT, "%s (and the cache has no source to "
                     "regenerate it)", detail);
  if (attempt >= 2)
    return bc__error(BC_ECORRUPT, "%s (the shard was regenerated twice and "
                     "read damaged again)", detail);
  bc__notice("%s; regenerating the shard", detail);
  bc__file_id bad = {dev, ino};
  return bc__forget_shard(c, shard, &bad);
}

/* Record `index` into out; `mode` says whether to wait for work done by
 * other threads and processes (bc__obtain). */
static int get_record(bc_cache *c, uint64_t index, bc__wait_mode mode, bc_buf *out) {
  if (atomic_load(&c->final) && index >= atomic_load(&c->known_length))
    return bc__error(BC_ERANGE, "%s: index %llu out of range [0, %llu)",
                     c->root, (unsigned long long)index,
                     (unsigned long long)atomic_load(&c->known_length));
  if (c->R == 0)
    return bc__error(c->has_source ? BC_EIO : BC_ENOTCACHED,
                     "%s: nothing is cached yet and the cache has no source",
                     c->root);
  uint64_t shard = index / c->R;
  for (int attempt = 0;; attempt++) {
    bc__reader r;
    int rc = bc__reader_acquire(c, shard, mode, &r);
    if (rc != 0) return rc;
    uint64_t local = index - r.start;
    if (local >= bc_bag_len(r.bag)) {
      /* The last shard is short: the source ended before index. */
      uint64_t end = r.start + bc_bag_len(r.bag);
      bc__reader_release(c, &r);
      return bc__error(BC_ERANGE, "%s: index %llu out of range [0, %llu)",
                       c->root, (unsigned long long)index,
                       (unsigned long long)end);
    }
    rc = bc_bag_get(r.bag, local, out);
    if (rc != BC_ECORRUPT) {
      bc__reader_release(c, &r);
      return rc;
    }
    if ((rc = read_damaged(c, shard, &r, attempt)) != 0) return rc;
  }
}

static int cache_get_record(bc_seq *self, uint64_t index, bc_buf *out) {
  return get_record((bc_cache *)self, index, BC__WAIT, out);
}

static void cache_destroy(bc_seq *self) {
  bc_cache *c = (bc_cache *)self;
  track_open(c, false);
  bc__workers_stop(c);
  bc__publisher_stop(c); /* (done by close already, unless in a child) */
  bc__access_flush(c);
  bc__readers_close_all(c);
  bc__passes_close_all(c);
  if (c->src.free_payload) c->src.free_payload(c->src.payload);
  bc__env_release(c->env);
  pthread_mutex_destroy(&c->pool.lock);
  pthread_cond_destroy(&c->pool.cond);
  pthread_mutex_destroy(&c->prefetch.lock);
  pthread_cond_destroy(&c->prefetch.cond);
  pthread_mutex_destroy(&c->readers.lock);
  pthread_mutex_destroy(&c->access.lock);
  bc__publisher_destroy(&c->publisher);
  free(c->pool.passes);
  free(c->pool.checked);
  free(c->pool.nokeep);
  free(c->prefetch.workers);
  free(c->root);
  free(c->shards_dir);
  free(c->sums_dir);
  free(c->scratch_dir);
  free(c->locks_dir);
  free(c->meta_path);
  free(c);
}

/* One partition per shard, [k R, (k + 1) R): R is fixed at open, so the
 * boundaries are known for any index, also past the known length while
 * the cache fills (the caller cuts the last one to the length). */
static int cache_partition(bc_seq *self, uint64_t index, uint64_t *start,
                           uint64_t *end) {
  const bc_cache *c = (const bc_cache *)self;
  if (c->R == 0) { /* nothing cached and no source: one partition */
    *start = 0;
    *end = UINT64_MAX;
    return 0;
  }
  *start = index / c->R * c->R;
  *end = *start > UINT64_MAX - c->R ? UINT64_MAX : *start + c->R;
  return 0;
}

static const bc_seq_ops cache_ops = {
    .version = BC_SEQ_OPS_VERSION,
    .type_name = "cache",
    .length = cache_length,
    .get = cache_get_record,
    .read_into = bc__cache_read_into, /* read_into.c */
    .destroy = cache_destroy,
    .partition = cache_partition,
};

/* ---- opening ---------------------------------------------------------------- */

static char *join(const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 2;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%s/%s", a, b);
  return p;
}

/* Every directory a cache creates (root, parents, shards/, ...) gets this
 * mode, less the umask. */
#define DIR_MODE 0755

/* The prefixes of a path that end a component ("a", "a/b", "a/b/c" for
 * "a//b/c/"), made one at a time into a buffer of the path's size. */
typedef struct {
  const char *path;
  char *prefix;
  size_t *ends; /* the length of each prefix */
  size_t count;
} path_prefixes;

static int prefixes_init(path_prefixes *p, const char *path) {
  size_t n = strlen(path);
  p->path = path;
  p->prefix = malloc(n + 1);
  p->ends = malloc((n + 1) * sizeof *p->ends);
  p->count = 0;
  if (p->prefix == NULL || p->ends == NULL) return bc__error(BC_ENOMEM, "out of memory");
  for (size_t i = 1; i <= n; i++)
    if ((i == n || path[i] == '/') && path[i - 1] != '/') p->ends[p->count++] = i;
  return 0;
}

/* Prefix k (< count), NUL-terminated; valid until the next call. */
static const char *prefix_at(path_prefixes *p, size_t k) {
  memcpy(p->prefix, p->path, p->ends[k]);
  p->prefix[p->ends[k]] = '\0';
  return p->prefix;
}

static void prefixes_free(path_prefixes *p) {
  free(p->ends);
  free(p->prefix);
}

/* mkdir(path) failed with ENOTDIR: some component of it is not a
 * directory.  Reports the first such one that exists (a file where a
 * directory should be), else the system's error. */
static int not_a_directory(const char *path) {
  path_prefixes p;
  int rc = prefixes_init(&p, path);
  for (size_t k = 0; k < p.count && rc == 0; k++) {
    struct stat st;
    const char *prefix = prefix_at(&p, k);
    if (stat(prefix, &st) == 0 && !S_ISDIR(st.st_mode))
      rc = bc__error(BC_EINVAL, "%s: exists and is not a directory", prefix);
  }
  if (rc == 0) /* none found: changed meanwhile */
    rc = bc__error_errno(ENOTDIR, "%s: cannot create the directory", path);
  prefixes_free(&p);
  return rc;
}

/* True when path is on a file system held in memory (tmpfs, ramfs), where
 * removing a file costs about nothing: evict_ahead's auto is off there. */
static bool in_memory_fs(const char *path) {
#ifdef __linux__
  struct statfs fs;
  if (statfs(path, &fs) != 0) return false;
  return (unsigned long)fs.f_type == 0x01021994UL    /* TMPFS_MAGIC */
         || (unsigned long)fs.f_type == 0x858458f6UL; /* RAMFS_MAGIC */
#else
  (void)path;
  return false;
#endif
}

static int make_dir(const char *path) {
  if (mkdir(path, DIR_MODE) == 0 || errno == EEXIST) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return 0;
    return bc__error(BC_EINVAL, "%s: exists and is not a directory", path);
  }
  if (errno == ENOTDIR) return not_a_directory(path);
  return bc__error_errno(errno, "%s: cannot create the directory", path);
}

/* Creates `path` and whichever of its parents are missing (mkdir -p),
 * each as make_dir does.  Only missing components are touched: from the
 * deepest prefix up to the first that exists (or fails for another reason
 * than a missing parent), then down again creating each.  Another process
 * creating the same directories meanwhile is fine (EEXIST). */
static int make_dirs(const char *path) {
  path_prefixes p;
  int rc = prefixes_init(&p, path);
  if (rc == 0 && p.count == 0) { /* "" or "/" */
    rc = make_dir(path);
  } else if (rc == 0) {
    size_t k = p.count; /* prefixes [k, count) are missing */
    while (k > 0 && mkdir(prefix_at(&p, k - 1), DIR_MODE) != 0 && errno == ENOENT)
      k--;
    /* made, exists, or another error: make_dir below reports it */
    for (size_t j = k > 0 ? k - 1 : 0; j < p.count && rc == 0; j++)
      rc = make_dir(prefix_at(&p, j));
  }
  prefixes_free(&p);
  return rc;
}

unsigned bc__limit_shards(const bc_cache_options *o, unsigned *prefetched) {
  /* What may be filled ahead while one shard is read and another filled:
   * preload_all up to fill_workers; the default policy prefetch_shards
   * (0 = 1, -1 = none); a custom policy the depth it states there (> 0),
   * none (-1), or up to fill_workers (0: not stated). */
  unsigned workers = o->fill_workers > 0 ? (unsigned)o->fill_workers : 1;
  unsigned ahead = o->preload_all ? workers : 0;
  unsigned policy = o->prefetch_shards < 0   ? 0
                    : o->prefetch_shards > 0 ? (unsigned)o->prefetch_shards
                    : o->prefetch != NULL    ? workers
                                             : 1;
  if (policy > ahead) ahead = policy;
  if (prefetched) *prefetched = ahead;
  return 2 + ahead;
}

int bc__limit_error(const char *root, uint64_t limit, unsigned shards,
                    unsigned prefetched, uint64_t shard_bytes, const char *which) {
  char extra[64] = "";
  if (prefetched)
    snprintf(extra, sizeof extra, ", %u prefetched", prefetched);
  return bc__error(BC_EINVAL,
                   "%s: the disk limit (%llu bytes) is below the smallest "
                   "workable limit, %llu bytes: %u shards of %llu bytes (%s) "
                   "(one being read, one being filled%s)", root,
                   (unsigned long long)limit,
                   (unsigned long long)shards * shard_bytes, shards,
                   (unsigned long long)shard_bytes, which, extra);
}

int bc_cache_options_init(bc_cache_options *opts, unsigned version) {
  return BC__OPTIONS_INIT(bc_cache_options, BC_CACHE_OPTIONS, opts, version);
}

static int check_options(const bc_cache_options *o, const bc_source *src) {
  if (o->version < 1 || o->version > BC_CACHE_OPTIONS_VERSION)
    return bc__options_version("bc_cache_options", "BC_CACHE_OPTIONS",
                               o->version, BC_CACHE_OPTIONS_VERSION);
  if (src != NULL && ((src->version != 1 && src->version != BC_SOURCE_VERSION) ||
                      src->open == NULL || src->next == NULL || src->close == NULL))
    return bc__error(BC_EINVAL, "source: version %u (need 1 to %d) with open, "
                     "next and close", src->version, BC_SOURCE_VERSION);
  if (o->shard_records > BC_CACHE_MAX_SHARD_RECORDS)
    return bc__error(BC_EINVAL,
                     "cache options: %llu records per shard; metadata.json "
                     "holds at most %llu", (unsigned long long)o->shard_records,
                     (unsigned long long)BC_CACHE_MAX_SHARD_RECORDS);
  if (o->fill_workers < 0 || o->max_open_shards < 0 || o->prefetch_shards < -1 ||
      o->max_passes < 0)
    return bc__error(BC_EINVAL, "cache options: negative count");
  if (o->version >= 3 && (o->evict_ahead < -1 || o->evict_ahead > 1))
    return bc__error(BC_EINVAL, "cache options: evict_ahead must be -1 (off), 0 (auto) "
                     "or 1 (on), not %d", o->evict_ahead);
  if (o->version >= 4 && o->fingerprint_json != NULL) {
    json_error_t err;
    json_t *fp = json_loads(o->fingerprint_json, JSON_DECODE_ANY, &err);
    if (fp == NULL)
      return bc__error(BC_EINVAL, "cache options: the fingerprint is not JSON: %s", err.text);
    json_decref(fp);
  }
  if (o->fill_workers > 1 && src != NULL && !src->thread_safe)
    return bc__error(BC_EINVAL,
                     "cache options: %d fill workers need a thread-safe source",
                     o->fill_workers);
  if ((unsigned)o->compression > BC_COMPRESSION_ZSTD)
    return bc__error(BC_EINVAL, "cache options: compression must be auto, none or zstd");
  if (o->compression == BC_COMPRESSION_ZSTD &&
      (o->zstd_level < ZSTD_minCLevel() || o->zstd_level > ZSTD_maxCLevel()))
    return bc__error(BC_EINVAL, "cache options: zstd level %d outside [%d, %d]",
                     o->zstd_level, ZSTD_minCLevel(), ZSTD_maxCLevel());
  uint64_t target = o->shard_bytes ? o->shard_bytes : (uint64_t)64 << 20;
  unsigned prefetched, shards = bc__limit_shards(o, &prefetched);
  if (o->disk_limit != 0 && o->disk_limit != BC_CACHE_NO_LIMIT &&
      o->shard_records == 0 && o->disk_limit / shards < target)
    return bc__limit_error("cache options", o->disk_limit, shards, prefetched,
                           target, "the target shard size");
  return 0;
}

/* The largest shard file present, 0 for none. */
static int largest_shard(bc_cache *c, uint64_t *largest) {
  MDB_txn *t;
  int rc = bc__txn_begin(c->env, false, &t);
  if (rc != 0) return rc;
  MDB_cursor *cur;
  int mrc = mdb_cursor_open(t, bc__dbi_shard(c->env), &cur);
  if (mrc != 0) rc = bc__mdb_error(mrc, "cache state");
  uint64_t most = 0;
  MDB_val k, v;
  for (int op = MDB_FIRST; rc == 0 && mdb_cursor_get(cur, &k, &v, op) == 0;
       op = MDB_NEXT) {
    bc__shard_rec r;
    uint64_t shard;
    if (bc__rec_decode(&k, &v, &shard, &r) && r.state == SHARD_PRESENT &&
        r.bytes > most)
      most = r.bytes;
  }
  if (mrc == 0) mdb_cursor_close(cur);
  mdb_txn_abort(t);
  if (rc == 0) *largest = most;
  return rc;
}

/* metadata.json is missing (new root, or lost).  Shard files left in
 * shards/ are the truth: their layout replaces the options'.  Whatever
 * the shared state remembers was recorded under a layout nobody can vouch
 * for any more (records, checksums: a shard refilled under another layout
 * must not be compared with them), so it is dropped and rebuilt from the
 * files (bc__rebuild_state); the disk limit and the access clock stay.
 * Called in the write transaction that creates metadata.json. */
static int recover_layout(bc_cache *c, MDB_txn *t, bc__meta *m) {
  bc__layout l;
  int rc = bc__infer_layout(c, &l);
  if (rc != 0) return rc;
  if (l.files > 0) {
    bc__notice("%s: metadata.json is missing; rebuilt from %zu shard files "
               "(%llu records per shard, %s)", c->root, l.files,
               (unsigned long long)l.shard_records, l.zstd ? "zstd" : "none");
    m->shard_records = l.shard_records;
    m->zstd = l.zstd;
    /* Shards without sidecars were written by a version 1 bagcache. */
    if (!l.zstd && !l.crc) m->version = 1;
    if (!m->length_final || m->length < l.length) {
      m->length = l.length;
      m->length_final = false;
    }
  }
  MDB_dbi meta = bc__dbi_meta(c->env);
  uint64_t ready = 0;
  bool stale = false;
  if ((rc = bc__u64_get(t, meta, "ready", &ready, &stale)) != 0) return rc;
  MDB_dbi dbs[2] = {bc__dbi_shard(c->env), bc__dbi_sum(c->env)};
  for (size_t i = 0; i < 2 && !stale; i++) {
    MDB_val k, v;
    MDB_cursor *cur;
    int mrc = mdb_cursor_open(t, dbs[i], &cur);
    if (mrc != 0) return bc__mdb_error(mrc, "cache state");
    stale = mdb_cursor_get(cur, &k, &v, MDB_FIRST) == 0;
    mdb_cursor_close(cur);
  }
  if (!stale) return 0;
  for (size_t i = 0; i < 2; i++) {
    int mrc = mdb_drop(t, dbs[i], 0);
    if (mrc != 0) return bc__mdb_error(mrc, "cache state");
  }
  static const char *const keys[] = {"bytes", "length", "final", "ready"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    MDB_val key = {strlen(keys[i]), (void *)keys[i]};
    int mrc = mdb_del(t, meta, &key, NULL);
    if (mrc != 0 && mrc != MDB_NOTFOUND) return bc__mdb_error(mrc, "cache state");
  }
  /* The lease state too: its claims and access times name shards of the
   * layout dropped (under the main write lock t holds: lock order). */
  MDB_txn *lt = NULL;
  const bc__lease *ls = bc__env_lease(c->env);
  if ((rc = bc__lease_txn_begin(c->env, true, &lt)) != 0) return rc;
  int lrc = mdb_drop(lt, ls->claim, 0);
  if (lrc == 0) lrc = mdb_drop(lt, ls->access, 0);
  if (lrc == 0) lrc = mdb_drop(lt, ls->meta, 0);
  if (lrc == 0) lrc = mdb_txn_commit(lt);
  else mdb_txn_abort(lt);
  if (lrc != 0) return bc__mdb_error(lrc, "lease state");
  atomic_store(&c->known_length, 0);
  atomic_store(&c->final, false);
  if (l.files == 0)
    bc__notice("%s: metadata.json and the shard files are missing; the shared "
               "state starts afresh", c->root);
  return 0;
}

/* The fingerprint `given` (compact JSON text) against the one stored in
 * `m` (metadata.json as read): equal JSON values agree; a root without
 * one takes the one given (written under the LMDB write lock, which
 * serialises metadata writers); another is BC_ENONDET. */
static int check_fingerprint(bc_cache *c, const char *given, const bc__meta *m) {
  json_error_t err;
  json_t *want = json_loads(given, JSON_DECODE_ANY, &err), *have = NULL;
  MDB_txn *t = NULL;
  bc__meta now;
  bool read_now = false;
  int rc = want ? 0 : bc__error(BC_EINVAL, "cache options: the fingerprint is not JSON: %s",
                                err.text);
  if (rc == 0 && m->fingerprint_json == NULL) {
    /* None stored: this one is, unless another process stored one since. */
    rc = bc__txn_begin(c->env, true, &t);
    if (rc == 0 && (rc = bc__meta_read(c->meta_path, &now)) == 0) read_now = true;
    if (rc == 0 && now.fingerprint_json == NULL) {
      now.fingerprint_json = json_dumps(want, JSON_ENCODE_ANY | JSON_COMPACT | JSON_SORT_KEYS);
      rc = now.fingerprint_json ? bc__meta_write(c->meta_path, &now, c->mode)
                                : bc__error(BC_ENOMEM, "out of memory");
    }
    if (rc == 0) m = &now; /* what is stored now, compared below */
  }
  if (rc == 0 && (have = json_loads(m->fingerprint_json, JSON_DECODE_ANY, &err)) == NULL)
    rc = bc__error(BC_ECORRUPT, "%s: the fingerprint in metadata.json: %s", c->meta_path,
                   err.text);
  if (rc == 0 && !json_equal(want, have))
    rc = bc__error(BC_ENONDET,
                   "%s: the cache was filled from a source whose fingerprint is %.200s, "
                   "and this one's is %.200s: the source changed since the cache was filled",
                   c->root, m->fingerprint_json, given);
  if (t != NULL) mdb_txn_abort(t); /* nothing changed in LMDB: the lock was the point */
  if (read_now) bc__meta_free(&now);
  json_decref(want);
  json_decref(have);
  return rc;
}

/* Reads metadata.json, or creates it from the options and the shard length
 * `estimated` from the source (0: none).  Creation runs under the LMDB write lock so two
 * processes creating one root agree on one metadata.json.  `fingerprint`
 * (NULL: none) is stored in a new root and checked against an existing
 * one's (check_fingerprint). */
static int load_or_create_meta(bc_cache *c, uint64_t estimated, const char *fingerprint) {
  bc__meta m;
  int rc = bc__meta_read(c->meta_path, &m);
  if (rc != 0 && rc != BC_ENOTFOUND) return rc;
  if (rc == BC_ENOTFOUND || m.shard_records == 0) {
    if (rc == 0) bc__meta_free(&m);
    uint64_t records = c->opts.shard_records ? c->opts.shard_records : estimated;
    MDB_txn *t;
    if ((rc = bc__txn_begin(c->env, true, &t)) != 0) return rc;
    rc = bc__meta_read(c->meta_path, &m); /* another process may have won */
    bool write = false;
    if (rc == BC_ENOTFOUND) {
      memset(&m, 0, sizeof m);
      m.length_hint = -1;
      m.version = BC_CACHE_FORMAT_VERSION;
      m.shard_records = records;
      m.zstd = c->opts.compression == BC_COMPRESSION_ZSTD;
      m.zstd_level = c->opts.zstd_level;
      m.info_json = strdup(c->opts.info_json ? c->opts.info_json : "null");
      /* A length given is a hint (length_hint), never the length: a
       * wrong one must not make the source look nondeterministic. */
      m.length_hint = c->opts.known_length;
      rc = m.info_json ? 0 : bc__error(BC_ENOMEM, "out of memory");
      if (rc == 0 && fingerprint != NULL) {
        json_error_t err;
        json_t *fp = json_loads(fingerprint, JSON_DECODE_ANY, &err);
        m.fingerprint_json = fp ? json_dumps(fp, JSON_ENCODE_ANY | JSON_COMPACT | JSON_SORT_KEYS)
                                : NULL;
        if (fp == NULL)
          rc = bc__error(BC_EINVAL, "cache options: the fingerprint is not JSON: %s", err.text);
        else if (m.fingerprint_json == NULL)
          rc = bc__error(BC_ENOMEM, "out of memory");
        json_decref(fp);
      }
      if (rc == 0) rc = recover_layout(c, t, &m);
      write = true;
    } else if (rc == 0 && m.shard_records == 0 && records != 0) {
      m.shard_records = records;
      write = true;
    }
    if (rc == 0 && write) {
      rc = bc__meta_write(c->meta_path, &m, c->mode);
      if (rc == 0 && m.length_final) {
        rc = bc__u64_put(t, bc__dbi_meta(c->env), "length", m.length);
        if (rc == 0) rc = bc__u64_put(t, bc__dbi_meta(c->env), "final", 1);
      }
    }
    if (rc == 0) {
      rc = bc__txn_commit(t);
    } else {
      mdb_txn_abort(t);
    }
    if (rc != 0) {
      bc__meta_free(&m);
      return rc;
    }
  }
  c->R = m.shard_records;
  c->length_hint = m.length_hint;
  c->zstd = m.zstd;
  c->level = m.zstd_level;
  c->crc = m.version >= 2 && !m.zstd;
  /* Only values the caller gave (not left at 0 / AUTO) can disagree. */
  if ((c->opts.shard_records && c->opts.shard_records != m.shard_records) ||
      (c->opts.compression != BC_COMPRESSION_AUTO &&
       (c->opts.compression == BC_COMPRESSION_ZSTD) != m.zstd))
    bc__notice("%s: keeping the existing cache's shard length (%llu records) "
               "and compression (%s) over the options given", c->root,
               (unsigned long long)m.shard_records, m.zstd ? "zstd" : "none");
  if (m.length_final) atomic_store(&c->final, true);
  if (m.length > atomic_load(&c->known_length))
    atomic_store(&c->known_length, m.length);
  int rc2 = fingerprint != NULL ? check_fingerprint(c, fingerprint, &m) : 0;
  bc__meta_free(&m);
  return rc2;
}

int bc_cache_open(bc_cache **out, const char *root, const bc_source *source,
                  const bc_cache_options *opts) {
  static const bc_cache_options defaults = BC_CACHE_OPTIONS_INIT;
  if (opts == NULL) opts = &defaults;
  int rc = 0;
  if (out == NULL || root == NULL) {
    rc = bc__error(BC_EINVAL, "bc_cache_open: NULL argument");
    goto fail_early;
  }
  if ((rc = check_options(opts, source)) != 0) goto fail_early;
  bc_cache *c = calloc(1, sizeof *c);
  if (c == NULL || bc_seq_init(&c->base, &cache_ops, BC_SEQ_F_THREAD_SAFE) != 0) {
    free(c);
    rc = bc__error(BC_ENOMEM, "out of memory");
    goto fail_early;
  }
  /* From here the cache owns the source payload: cache_destroy frees it. */
  if (source != NULL) {
    /* A version-1 source is the struct without open_at: read no further. */
    memcpy(&c->src, source, source->version >= 2 ? sizeof *source
                                                 : offsetof(bc_source, open_at));
    c->has_source = true;
  }
  /* Version 1 ends before publish_behind (on by default), version 2
   * before evict_ahead (auto), version 3 before fingerprint_json (none). */
  c->opts = defaults;
  memcpy(&c->opts, opts, opts->version == 1   ? offsetof(bc_cache_options, publish_behind)
                         : opts->version == 2 ? offsetof(bc_cache_options, evict_ahead)
                         : opts->version == 3 ? offsetof(bc_cache_options, fingerprint_json)
                                              : sizeof c->opts);
  c->opts.version = BC_CACHE_OPTIONS_VERSION;
  c->opts.info_json = NULL; /* applied below; the caller's string is not kept */
  c->opts.fingerprint_json = NULL; /* checked below from opts, not kept either */
  if (c->opts.fill_workers > BC_CACHE_MAX_FILL_WORKERS) {
    /* Each worker is a thread with a pass over the source of its own. */
    bc__notice("%s: %d fill workers asked for; using %d, the most a cache "
               "runs", root, c->opts.fill_workers, BC_CACHE_MAX_FILL_WORKERS);
    c->opts.fill_workers = BC_CACHE_MAX_FILL_WORKERS;
  }
  c->mode = opts->file_mode ? opts->file_mode : 0644;
  c->self = bc__owner_self();
  static _Atomic uint64_t next_serial = 1;
  c->serial = atomic_fetch_add(&next_serial, 1);
  bc__slots_init();
  atomic_init(&c->known_length, 0);
  atomic_init(&c->final, false);
  atomic_init(&c->prefetch.drain_next, 0);
  atomic_init(&c->stop_fills, false);
  atomic_init(&c->abandon, false);
  pthread_mutex_init(&c->pool.lock, NULL);
  pthread_cond_init(&c->pool.cond, NULL);
  pthread_mutex_init(&c->prefetch.lock, NULL);
  pthread_cond_init(&c->prefetch.cond, NULL);
  pthread_mutex_init(&c->readers.lock, NULL);
  pthread_mutex_init(&c->access.lock, NULL);
  bc__publisher_init(&c->publisher);
  atomic_init(&c->shard_bytes_seen, 0);
  track_open(c, true);
  /* Parked passes: max_passes (default 64), at least one per fill worker
   * plus one for a reader with a thread-safe source.  Without thread
   * safety only one of them is in use at a time (max_running). */
  size_t running = c->has_source && c->src.thread_safe
                       ? (size_t)(c->opts.fill_workers > 1 ? c->opts.fill_workers : 1) + 1
                       : 1;
  bc__pass_pool *pool = &c->pool;
  pool->max_passes = opts->max_passes > 0 ? (size_t)opts->max_passes : 64;
  if (!c->has_source) pool->max_passes = 1;
  if (pool->max_passes < running) pool->max_passes = running;
  pool->max_running = running;
  pool->passes = calloc(pool->max_passes, sizeof *pool->passes);
  c->root = strdup(root);
  c->shards_dir = join(root, "shards");
  c->sums_dir = join(root, "sums");
  c->scratch_dir = join(root, "scratch");
  c->locks_dir = join(root, "locks");
  c->meta_path = join(root, "metadata.json");
  if (!c->pool.passes || !c->root || !c->shards_dir || !c->sums_dir || !c->scratch_dir ||
      !c->locks_dir || !c->meta_path) {
    rc = bc__error(BC_ENOMEM, "out of memory");
    goto fail;
  }
  /* A root whose metadata.json is unreadable is refused before anything is
   * created in it; so is one whose shard length must be estimated from a
   * source that fails (the estimate runs the user's source: no lock held). */
  bc__meta probe;
  uint64_t estimated = 0;
  rc = bc__meta_read(c->meta_path, &probe);
  bool undecided = rc == BC_ENOTFOUND || (rc == 0 && probe.shard_records == 0);
  if (rc == 0) bc__meta_free(&probe);
  else if (rc != BC_ENOTFOUND) goto fail;
  if (undecided && opts->shard_records == 0 && c->has_source &&
      (rc = bc__estimate_shard_records(c, &estimated)) != 0)
    goto fail;
  bool fresh;
  /* BC_EAGAIN from the acquire: a bc_cache_clear deleted the root while
   * this open waited for its gate; its directories are made again. */
  for (int tries = 0; tries == 0 || (rc == BC_EAGAIN && tries < 4); tries++)
    if ((rc = opts->make_parents ? make_dirs(root) : make_dir(root)) == 0 &&
        (rc = make_dir(c->shards_dir)) == 0 && (rc = make_dir(c->scratch_dir)) == 0 &&
        (rc = make_dir(c->locks_dir)) == 0)
      rc = bc__env_acquire(&c->env, c->locks_dir, c->mode, &fresh);
  if (rc != 0) goto fail;
  if ((rc = load_or_create_meta(c, estimated, opts->version >= 4 ? opts->fingerprint_json
                                                                   : NULL)) != 0)
    goto fail;
  c->evict_ahead = c->opts.publish_behind &&
                   (c->opts.evict_ahead > 0 || (c->opts.evict_ahead == 0 && !in_memory_fs(root)));
  bc__store_lmdb_init(&c->store, c); /* R is known from here */
  if (c->crc && (rc = make_dir(c->sums_dir)) != 0) goto fail;
  if ((rc = bc__rebuild_state(c)) != 0) goto fail;
  /* The first open after a reboot: claims made before it are void (the
   * lease state is new), and files their fills renamed into shards/
   * without a commit are nobody's (doc/cache.md, "Leases"). */
  if (bc__env_take_renewed(c->env) && (rc = bc__remove_strays(c)) != 0) goto fail;
  if (opts->disk_limit != 0 && opts->disk_limit != BC_CACHE_NO_LIMIT) {
    /* A limit that cannot hold the shards at work is refused, before it is
     * stored (doc/cache.md, "The smallest workable limit"). */
    uint64_t largest = 0;
    unsigned prefetched, shards = bc__limit_shards(opts, &prefetched);
    if ((rc = largest_shard(c, &largest)) != 0) goto fail;
    /* (Also what a claim reserves, and a shard kept on a pass's way.) */
    atomic_store(&c->shard_bytes_seen, largest);
    if (largest != 0 && opts->disk_limit / shards < largest) {
      rc = bc__limit_error(c->root, opts->disk_limit, shards, prefetched, largest,
                           "the largest shard present");
      goto fail;
    }
  }
  if (opts->disk_limit != 0) {
    /* Every process enforces the limit stored here at each publish; a
     * stored 0 is no limit (BC_CACHE_NO_LIMIT). */
    if (opts->disk_limit == BC_CACHE_NO_LIMIT) c->opts.disk_limit = 0;
    MDB_txn *t;
    if ((rc = bc__txn_begin(c->env, true, &t)) != 0) goto fail;
    rc = bc__u64_put(t, bc__dbi_meta(c->env), "limit", c->opts.disk_limit);
    if (rc == 0) rc = bc__txn_commit(t);
    else mdb_txn_abort(t);
    if (rc != 0) goto fail;
  }
  if (opts->info_json != NULL && (rc = bc_cache_set_info(c, opts->info_json)) != 0)
    goto fail;
  bc__clean_scratch(c);
  if (c->has_source && (rc = bc__workers_start(c)) != 0) goto fail;
  *out = c;
  return 0;
fail:
  bc_seq_unref(&c->base);
  return rc;
fail_early:
  if (source != NULL && source->free_payload) source->free_payload(source->payload);
  return rc;
}

void bc_cache_close(bc_cache *c) {
  if (c == NULL) return;
  /* Workers stop now even if views keep the sequence alive: a closed
   * cache still serves reads, filling on demand only. */
  bc__workers_stop(c);
  bc__publisher_stop(c); /* what is queued is published first */
  bc_seq_unref(&c->base);
}

int bc_cache_sync(bc_cache *c) { return bc__publisher_wait(c, true); }

bc_seq *bc_cache_seq(bc_cache *c) { return &c->base; }

int bc_cache_get(bc_cache *c, int64_t index, bc_buf *out) {
  /* A cache is a leaf: a non-negative index needs no resolving, and
   * cache_get_record checks it against the length. */
  if (index >= 0) return cache_get_record(&c->base, (uint64_t)index, out);
  return bc_seq_get(&c->base, index, out);
}

int bc_cache_try_get(bc_cache *c, int64_t index, bc_buf *out) {
  if (index < 0) {
    /* Counting from the end needs the end: known, or a wait for a drain. */
    if (!atomic_load(&c->final))
      return bc__error(BC_EAGAIN, "%s: index %lld counts from an end not known yet",
                       c->root, (long long)index);
    uint64_t len = atomic_load(&c->known_length);
    if ((uint64_t)-(index + 1) >= len)
      return bc__error(BC_ERANGE, "%s: index %lld out of range for length %llu",
                       c->root, (long long)index, (unsigned long long)len);
    index += (int64_t)len;
  }
  return get_record(c, (uint64_t)index, BC__NO_WAIT, out);
}

static int try_get(void *c, int64_t index, bc_buf *out) {
  return bc_cache_try_get(c, index, out);
}

int bc_cache_try_get_many(bc_cache *c, const int64_t *indices, size_t count,
                          bc_buf *outs) {
  /* The batch task loop of seq/batch.c: the pool runs the tasks in the
   * calling thread unless they are slow enough to share (pool.c). */
  return bc__get_each(c, try_get, indices, count, outs, 0, true);
}

bc_cache *bc_seq_cache(bc_seq *seq) {
  return seq != NULL && seq->ops == &cache_ops ? (bc_cache *)seq : NULL;
}

int bc_cache_len(bc_cache *c, uint64_t *len) { return bc_seq_len(&c->base, len); }

int bc_cache_fill_all(bc_cache *c) {
  if (c->has_source) {
    /* Without a disk limit, every missing shard is filled; under one,
     * everything cannot stay, so the source is drained to its end and what
     * the limit evicts stays evicted. */
    MDB_txn *t;
    uint64_t limit = c->opts.disk_limit;
    bool found = false;
    int rc = bc__txn_begin(c->env, false, &t);
    if (rc != 0) return rc;
    rc = bc__u64_get(t, bc__dbi_meta(c->env), "limit", &limit, &found);
    mdb_txn_abort(t);
    if (rc != 0) return rc;
    return bc__drain(c, !(found ? limit : c->opts.disk_limit));
  }
  /* Without a source, "filled" means: the end is known and every shard up
   * to it is present. */
  uint64_t len;
  int rc = bc_cache_len(c, &len);
  if (rc != 0) return rc;
  MDB_txn *t;
  if ((rc = bc__txn_begin(c->env, false, &t)) != 0) return rc;
  for (uint64_t shard = 0; rc == 0 && c->R && shard * c->R < len; shard++) {
    bc__shard_rec rec;
    bool found;
    rc = bc__rec_get(t, bc__dbi_shard(c->env), shard, &rec, &found);
    if (rc == 0 && !(found && rec.state == SHARD_PRESENT))
      rc = bc__error(BC_ENOTCACHED,
                     "%s: records %llu..%llu are not cached and the cache has "
                     "no source to fill them", c->root,
                     (unsigned long long)(shard * c->R),
                     (unsigned long long)(shard * c->R + c->R));
  }
  mdb_txn_abort(t);
  return rc;
}

/* ---- introspection ------------------------------------------------------------ */

int bc_cache_stats_get(bc_cache *c, bc_cache_stats *st) {
  memset(st, 0, sizeof *st);
  /* What is published: shards queued by this process first (publisher.h;
   * a failure stays for the next call that returns one). */
  bc__publisher_wait(c, false);
  MDB_txn *t;
  int rc = bc__txn_begin(c->env, false, &t);
  if (rc != 0) return rc;
  bool found;
  rc = bc__cache_load_length(c, t);
  if (rc == 0) rc = bc__u64_get(t, bc__dbi_meta(c->env), "bytes", &st->bytes_on_disk, &found);
  uint64_t limit = 0;
  bool have_limit = false;
  if (rc == 0) rc = bc__u64_get(t, bc__dbi_meta(c->env), "limit", &limit, &have_limit);
  /* The root-wide counters (store_lmdb.c's names; absent on an old root: 0). */
  const struct { const char *name; uint64_t *v; } counters[] = {
      {"n_fills", &st->root.fills}, {"n_regenerations", &st->root.regenerations},
      {"n_evictions", &st->root.evictions},
      {"n_records_generated", &st->root.records_generated},
      {"n_bytes_written", &st->root.bytes_written},
      {"n_shards_kept", &st->root.shards_kept}};
  for (size_t k = 0; rc == 0 && k < sizeof counters / sizeof counters[0]; k++)
    rc = bc__u64_get(t, bc__dbi_meta(c->env), counters[k].name, counters[k].v, &found);
  if (rc == 0) {
    /* Count PRESENT shards (the database also holds claims). */
    MDB_cursor *cur;
    int mrc = mdb_cursor_open(t, bc__dbi_shard(c->env), &cur);
    if (mrc != 0) rc = bc__mdb_error(mrc, "cache state");
    MDB_val k, v;
    for (int op = MDB_FIRST; rc == 0 && mdb_cursor_get(cur, &k, &v, op) == 0;
         op = MDB_NEXT) {
      bc__shard_rec r;
      uint64_t shard;
      if (bc__rec_decode(&k, &v, &shard, &r))
        st->shards_present += r.state == SHARD_PRESENT;
    }
    if (mrc == 0) mdb_cursor_close(cur);
  }
  mdb_txn_abort(t);
  if (rc != 0) return rc;
  st->length = atomic_load(&c->known_length);
  st->length_final = atomic_load(&c->final);
  st->shard_records = c->R;
  st->disk_limit = have_limit ? limit : c->opts.disk_limit;
  st->hits = bc__readers_hits(c);
  st->shard_opens = atomic_load(&c->stats.shard_opens);
  st->fills = atomic_load(&c->stats.fills);
  st->regenerations = atomic_load(&c->stats.regenerations);
  st->miss_ns = atomic_load(&c->stats.miss_ns);
  st->publishes_queued = atomic_load(&c->publisher.queued_total);
  st->publish_batches = atomic_load(&c->publisher.batches);
  st->publish_largest = atomic_load(&c->publisher.largest);
  st->publish_failures = atomic_load(&c->publisher.failures);
  st->shards_kept = atomic_load(&c->stats.shards_kept);
  st->shards_bypassed = atomic_load(&c->stats.bypassed);
  st->evictions = atomic_load(&c->stats.evictions);
  st->passes_opened = atomic_load(&c->stats.passes_opened);
  st->records_skipped = atomic_load(&c->stats.records_skipped);
  st->records_written = atomic_load(&c->stats.records_written);
  st->waits = atomic_load(&c->stats.waits);
  st->open_shards = bc__readers_open_count(c);
  return 0;
}

bool bc_cache_draining(bc_cache *c) {
  /* drain_requested covers the time between a request (preload_all's, at
   * open) and the workers joining; drainers every thread inside a drain. */
  pthread_mutex_lock(&c->prefetch.lock);
  bool draining = c->prefetch.drain_requested || c->prefetch.drainers > 0;
  pthread_mutex_unlock(&c->prefetch.lock);
  return draining;
}

typedef struct {
  bc_cache *c;
  bc_cache_shard *shards;
  size_t max, n;
} shard_list;

/* bc_cache_shards' walk: PRESENT shards, counted beyond max. */
static int list_shard(void *arg, uint64_t shard, const bc__shard_rec *r) {
  shard_list *l = arg;
  if (r->state != SHARD_PRESENT) return 0;
  if (l->n < l->max) {
    l->shards[l->n].start = shard * l->c->R;
    l->shards[l->n].end = shard * l->c->R + r->records;
    l->shards[l->n].zstd = r->zstd != 0;
    l->shards[l->n].bytes = r->bytes;
    l->shards[l->n].last_access = r->last_access;
  }
  l->n++;
  return 0;
}

int bc_cache_shards(bc_cache *c, bc_cache_shard *shards, size_t max,
                    size_t *count) {
  bc__publisher_wait(c, false); /* the shards this process queued count */
  bc__access_flush(c); /* the access clocks include this process's opens */
  /* Through the store: access times may be newer in the lease state. */
  const bc__store *st = &c->store;
  bc__store_txn *t;
  int rc = st->ops->begin(st->impl, false, &t);
  if (rc != 0) return rc;
  shard_list l = {c, shards, max, 0};
  rc = st->ops->each(t, list_shard, &l);
  st->ops->abort(t);
  if (rc != 0) return rc;
  size_t n = l.n;
  *count = n;
  return 0;
}

int bc_cache_shard_path(bc_cache *c, const bc_cache_shard *s, char **path) {
  if (c == NULL || s == NULL || path == NULL || s->end < s->start)
    return bc__error(BC_EINVAL, "bc_cache_shard_path: NULL argument or a "
                     "shard ending before its start");
  if (c->R == 0 || s->start % c->R != 0)
    return bc__error(BC_EINVAL, "%s: no shard starts at record %llu", c->root,
                     (unsigned long long)s->start);
  char *p = bc__cache_shard_path(c, s->start / c->R, s->end - s->start, s->zstd);
  if (p == NULL) return bc__error(BC_ENOMEM, "out of memory");
  *path = p;
  return 0;
}

int bc_cache_worker_positions(bc_cache *c, uint64_t *positions, size_t max,
                              size_t *count) {
  size_t n = 0;
  pthread_mutex_lock(&c->pool.lock);
  for (size_t i = 0; i < c->pool.max_passes; i++)
    if (c->pool.passes[i].open) {
      if (n < max) positions[n] = c->pool.passes[i].pos;
      n++;
    }
  pthread_mutex_unlock(&c->pool.lock);
  *count = n;
  return 0;
}

int bc_cache_info(bc_cache *c, char **json) {
  bc__meta m;
  int rc = bc__meta_read(c->meta_path, &m);
  if (rc != 0) return rc;
  *json = m.info_json;
  m.info_json = NULL;
  bc__meta_free(&m);
  return 0;
}

int bc_cache_fingerprint(bc_cache *c, char **json) {
  bc__meta m;
  int rc = bc__meta_read(c->meta_path, &m);
  if (rc != 0) return rc;
  *json = m.fingerprint_json;
  m.fingerprint_json = NULL;
  bc__meta_free(&m);
  return 0;
}

int bc_cache_length_hint(bc_cache *c, int64_t *hint) {
  bc__meta m;
  int rc = bc__meta_read(c->meta_path, &m);
  if (rc != 0) return rc;
  *hint = m.length_hint;
  bc__meta_free(&m);
  return 0;
}

/* Replaces one JSON field of metadata.json (info: the user info; else the
 * source info, NULL to remove it) in a read-modify-write. */
static int set_meta_json(bc_cache *c, bool info, const char *json) {
  MDB_txn *t;
  int rc = bc__txn_begin(c->env, true, &t); /* serialises metadata writers */
  if (rc != 0) return rc;
  bc__meta m;
  rc = bc__meta_read(c->meta_path, &m);
  if (rc == 0) {
    char *copy = json != NULL ? strdup(json) : NULL;
    if (copy == NULL && json != NULL) {
      rc = bc__error(BC_ENOMEM, "out of memory");
    } else {
      char **field = info ? &m.info_json : &m.source_json;
      free(*field);
      *field = copy;
      rc = bc__meta_write(c->meta_path, &m, c->mode);
    }
    bc__meta_free(&m);
  }
  mdb_txn_abort(t); /* nothing changed in LMDB: the lock was the point */
  return rc;
}

int bc_cache_set_info(bc_cache *c, const char *json) {
  return set_meta_json(c, true, json);
}

int bc_cache_source_info(bc_cache *c, char **json) {
  bc__meta m;
  int rc = bc__meta_read(c->meta_path, &m);
  if (rc != 0) return rc;
  char *out = m.source_json != NULL ? m.source_json : strdup("null");
  m.source_json = NULL;
  bc__meta_free(&m);
  if (out == NULL) return bc__error(BC_ENOMEM, "out of memory");
  *json = out;
  return 0;
}

int bc_cache_set_source_info(bc_cache *c, const char *json) {
  bool null = true;
  int rc = json != NULL ? bc__meta_check_json(json, "source info", &null) : 0;
  if (rc == 0) rc = set_meta_json(c, false, null ? NULL : json);
  return rc;
}
