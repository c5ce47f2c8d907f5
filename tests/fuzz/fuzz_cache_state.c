/*
 * fuzz_cache_state.c - fuzz target for the cache's shared state file.
 *
 * The input is a locks/data.mdb (the seeds in corpus/cache_state are valid
 * ones of the template cache below; libFuzzer mutates them).  The code
 * under test is exactly the one that reads an untrusted data.mdb: opening
 * a cache on it (validation, LMDB's open, the repair and rebuild), then the
 * transactions that read and write it (with the source: claims, fills and
 * publishes of what the state lost; then without one).  Properties, for ANY input:
 *
 *  - no crash, no hang (libFuzzer's -timeout), no leak (LeakSanitizer);
 *  - the open succeeds, or fails with a BC_E* code and a message;
 *  - after a successful open, every record read is the template's exact
 *    bytes, or the read fails with a BC_E* code and a message (a state
 *    whose values were changed in a way no check can see may call a shard
 *    missing; it never makes another shard's bytes appear);
 *  - the length, the statistics and the shard listing either fail cleanly
 *    or describe at most the template's shards.
 *
 * The template is a cache of 100 records ("record N") in shards of 10,
 * built once per process under fz_dir(); each input runs on a fresh copy
 * (hard links to its shard files and metadata.json: the engine replaces
 * files by rename, never writes them in place).  With FZ_STATE_SEED=path
 * set, the template's own data.mdb is copied there (how the seeds were
 * made).
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bagcache/cache.h"
#include "fuzz.h"

#define NREC 100
#define SHARD 10

static size_t record(uint64_t i, char *buf, size_t cap) {
  return (size_t)snprintf(buf, cap, "record %llu", (unsigned long long)i);
}

/* ---- the template's source ------------------------------------------------ */

typedef struct {
  uint64_t next;
} pass;

static int src_open(void *payload, void **out) {
  (void)payload;
  pass *p = calloc(1, sizeof *p);
  if (p == NULL) return BC_ENOMEM;
  *out = p;
  return 0;
}

static int src_next(void *payload, void *handle, bc_buf *out) {
  (void)payload;
  pass *p = handle;
  if (p->next >= NREC) return 0;
  char rec[64];
  size_t n = record(p->next++, rec, sizeof rec);
  if (out->capacity < n || out->data == NULL) {
    unsigned char *d = realloc(out->data, 64);
    if (d == NULL) return bc_set_errmsg(BC_ENOMEM, "fuzz source: out of memory");
    out->data = d;
    out->capacity = 64;
  }
  memcpy(out->data, rec, n);
  out->size = n;
  return 1;
}

static void src_close(void *payload, void *handle) {
  (void)payload;
  free(handle);
}

/* ---- files ---------------------------------------------------------------- */

/* out = a + "/" + b, checked. */
static void join(char *out, size_t cap, const char *a, const char *b) {
  int n = snprintf(out, cap, "%s/%s", a, b);
  FZ_CHECK(n > 0 && (size_t)n < cap, "path too long: %s/%s", a, b);
}

static void rm_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    DIR *d = opendir(path);
    FZ_CHECK(d != NULL, "opendir(%s): %s", path, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      char sub[PATH_MAX];
      join(sub, sizeof sub, path, e->d_name);
      rm_tree(sub);
    }
    closedir(d);
    FZ_CHECK(rmdir(path) == 0, "rmdir(%s): %s", path, strerror(errno));
  } else {
    fz_unlink(path);
  }
}

/* Hard links every file of directory `from` into `to` (created). */
static void link_dir(const char *from, const char *to) {
  FZ_CHECK(mkdir(to, 0755) == 0, "mkdir(%s): %s", to, strerror(errno));
  DIR *d = opendir(from);
  FZ_CHECK(d != NULL, "opendir(%s): %s", from, strerror(errno));
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char a[PATH_MAX], b[PATH_MAX];
    join(a, sizeof a, from, e->d_name);
    join(b, sizeof b, to, e->d_name);
    FZ_CHECK(link(a, b) == 0, "link(%s): %s", a, strerror(errno));
  }
  closedir(d);
}

static void rm_tree_atexit(void);
static char template_root[PATH_MAX], work_root[PATH_MAX];

static void rm_tree_atexit(void) {
  rm_tree(work_root);
  rm_tree(template_root);
}

static void ignore_notice(void *payload, const char *message) {
  (void)payload;
  (void)message;
}

static bc_cache_options options(void) {
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = SHARD;
  o.prefetch_shards = -1;
  return o;
}

/* Builds the template cache once. */
static void make_template(void) {
  if (template_root[0] != '\0') return;
  bc_set_notice_handler(ignore_notice, NULL);
  join(template_root, sizeof template_root, fz_dir(), "template");
  join(work_root, sizeof work_root, fz_dir(), "root");
  atexit(rm_tree_atexit);
  bc_source src = {.version = BC_SOURCE_VERSION, .open = src_open,
                   .next = src_next, .close = src_close};
  bc_cache_options o = options();
  bc_cache *c = NULL;
  int rc = bc_cache_open(&c, template_root, &src, &o);
  FZ_CHECK(rc == 0, "template: %s", bc_errmsg());
  rc = bc_cache_fill_all(c);
  FZ_CHECK(rc == 0, "template: %s", bc_errmsg());
  bc_cache_close(c);
  const char *seed = getenv("FZ_STATE_SEED");
  if (seed != NULL) {
    char p[PATH_MAX];
    unsigned char *data = NULL;
    size_t size = 0;
    join(p, sizeof p, template_root, "locks/data.mdb");
    FZ_CHECK(fz_read_file(p, &data, &size), "no %s", p);
    fz_write_file(seed, data, size);
    free(data);
  }
}

/* ---- the target ------------------------------------------------------------ */

static void check_reads(bc_cache *c) {
  bc_buf buf = BC_BUF_INIT;
  for (int64_t i = 0; i < NREC; i++) {
    int rc = bc_cache_get(c, i, &buf);
    if (rc != 0) {
      fz_check_failure(rc, "bc_cache_get");
      continue;
    }
    char want[64];
    size_t n = record((uint64_t)i, want, sizeof want);
    FZ_CHECK(buf.size == n && memcmp(buf.data, want, n) == 0,
             "record %lld: %zu bytes that are not the template's",
             (long long)i, buf.size);
  }
  bc_buf_release(&buf);
  uint64_t len = 0;
  int rc = bc_cache_len(c, &len);
  if (rc != 0) fz_check_failure(rc, "bc_cache_len");
  bc_cache_stats st;
  rc = bc_cache_stats_get(c, &st);
  if (rc != 0) fz_check_failure(rc, "bc_cache_stats_get");
  else FZ_CHECK(st.shard_records == SHARD, "shard length %llu",
                (unsigned long long)st.shard_records);
  size_t count = 0;
  rc = bc_cache_shards(c, NULL, 0, &count);
  if (rc != 0) fz_check_failure(rc, "bc_cache_shards");
  rc = bc_cache_verify(c, NULL);
  if (rc != 0) fz_check_failure(rc, "bc_cache_verify");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  make_template();
  rm_tree(work_root);
  FZ_CHECK(mkdir(work_root, 0755) == 0, "mkdir(%s): %s", work_root, strerror(errno));
  char a[PATH_MAX], b[PATH_MAX];
  join(a, sizeof a, template_root, "shards");
  join(b, sizeof b, work_root, "shards");
  link_dir(a, b);
  join(a, sizeof a, template_root, "metadata.json");
  join(b, sizeof b, work_root, "metadata.json");
  FZ_CHECK(link(a, b) == 0, "link(%s): %s", a, strerror(errno));
  join(b, sizeof b, work_root, "locks");
  FZ_CHECK(mkdir(b, 0755) == 0, "mkdir(%s): %s", b, strerror(errno));
  join(b, sizeof b, work_root, "locks/data.mdb");
  fz_write_file(b, data, size);

  bc_cache_options o = options();
  bc_cache *c = NULL;
  /* With the template's source: what the state lost is filled again, so
   * claims, publishes and the free list are written too. */
  bc_source src = {.version = BC_SOURCE_VERSION, .open = src_open,
                   .next = src_next, .close = src_close};
  int rc = bc_cache_open(&c, work_root, &src, &o);
  if (rc != 0) {
    fz_check_failure(rc, "bc_cache_open");
  } else {
    check_reads(c);
    bc_cache_close(c);
    /* A second open, without a source, sees what the first one left: a
     * repaired state, or the one it accepted, after its own writes. */
    rc = bc_cache_open(&c, work_root, NULL, &o);
    if (rc != 0) {
      fz_check_failure(rc, "bc_cache_open (again)");
    } else {
      check_reads(c);
      bc_cache_close(c);
    }
  }
  rm_tree(work_root);
  return 0;
}
