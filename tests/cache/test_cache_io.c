/*
 * Injected I/O failures during fills: write(2) through the library's test
 * hook (bc__write_hook), fsync(2) and rename(2) through the linker
 * (-Wl,--wrap=fsync,--wrap=rename: only calls made by bagcache's own
 * objects are wrapped, not LMDB's).  Each failure must reach the caller as
 * its code, publish nothing (no file in shards/ the shared state does not
 * account for, nothing in scratch/), and the next attempt, with the failure
 * removed, must succeed.
 *
 * A failure is aimed at one kind of file by the path of the descriptor
 * (/proc/self/fd) or of the rename's target.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/internal.h"
#include "util.h"

/* ---- the injection ----------------------------------------------------------- */

typedef enum target {
  T_NONE = 0,
  T_SCRATCH,    /* files under scratch/ */
  T_META,       /* metadata.json's temporary file */
  T_SHARDS_DIR, /* the shards/ directory itself (its fsync) */
  T_SHARDS,     /* a rename into shards/ */
  T_DIE_AFTER_RENAME /* the process dies right after a rename into shards/
                        (a crash between the rename and the commit) */
} target;

/* Atomics: the publisher thread's fsyncs and renames read them too. */
static _Atomic(target) fail_target;
static atomic_int fail_errno;
static atomic_int failures; /* injected so far */

/* The path a descriptor refers to, into out[PATH_MAX]. */
static void fd_path(int fd, char *out) {
  char link[64];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, out, PATH_MAX - 1);
  out[n > 0 ? n : 0] = '\0';
}

static bool matches(const char *path) {
  size_t n = strlen(path);
  switch ((target)atomic_load(&fail_target)) {
  case T_SCRATCH: return strstr(path, "/scratch/") != NULL;
  case T_META: return strstr(path, "/.metadata.json.tmp") != NULL;
  case T_SHARDS_DIR: return n >= 7 && strcmp(path + n - 7, "/shards") == 0;
  case T_SHARDS:
  case T_DIE_AFTER_RENAME: return strstr(path, "/shards/") != NULL;
  case T_NONE: break;
  }
  return false;
}

static ssize_t failing_write(int fd, const void *data, size_t size) {
  char path[PATH_MAX];
  fd_path(fd, path);
  if (matches(path)) {
    failures++;
    errno = fail_errno;
    return -1;
  }
  return write(fd, data, size);
}

int __real_fsync(int fd);
int __wrap_fsync(int fd);
int __real_rename(const char *from, const char *to);
int __wrap_rename(const char *from, const char *to);
int __real_unlink(const char *path);
int __wrap_unlink(const char *path);

/* fsyncs counted by what they sync, while `counting` (the sync budget):
 * synced[] by every thread, synced_main[] by the test's own thread (the
 * read path), synced_bg[] by the others (the publisher). */
enum { S_SCRATCH_FILE, S_SCRATCH_DIR, S_SUMS_DIR, S_SHARDS_DIR, S_OTHER, S_KINDS };
static atomic_bool counting;
static atomic_int synced[S_KINDS], synced_main[S_KINDS], synced_bg[S_KINDS];
static pthread_t main_thread;

static void count_reset(void) {
  for (int k = 0; k < S_KINDS; k++) {
    atomic_store(&synced[k], 0);
    atomic_store(&synced_main[k], 0);
    atomic_store(&synced_bg[k], 0);
  }
}

/* Publish-behind's publisher held: while `hold`, an fsync of a scratch
 * file by a thread other than the test's waits (`held` says one does). */
static atomic_bool hold, held;

static bool ends_with(const char *s, const char *tail) {
  size_t n = strlen(s), k = strlen(tail);
  return n >= k && strcmp(s + n - k, tail) == 0;
}

static void count_sync(int fd) {
  char path[PATH_MAX];
  fd_path(fd, path);
  int k = strstr(path, "/scratch/") != NULL ? S_SCRATCH_FILE
          : ends_with(path, "/scratch")    ? S_SCRATCH_DIR
          : ends_with(path, "/sums")       ? S_SUMS_DIR
          : ends_with(path, "/shards")     ? S_SHARDS_DIR
                                           : S_OTHER;
  atomic_fetch_add(&synced[k], 1);
  atomic_fetch_add(pthread_equal(pthread_self(), main_thread) ? &synced_main[k]
                                                              : &synced_bg[k], 1);
}

static void hold_here(int fd) {
  if (!atomic_load(&hold) || pthread_equal(pthread_self(), main_thread)) return;
  char path[PATH_MAX];
  fd_path(fd, path);
  if (strstr(path, "/scratch/") == NULL) return;
  atomic_store(&held, true);
  while (atomic_load(&hold)) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
}

int __wrap_fsync(int fd) {
  hold_here(fd);
  if (atomic_load(&counting)) count_sync(fd);
  if (fail_target == T_SCRATCH || fail_target == T_SHARDS_DIR) {
    char path[PATH_MAX];
    fd_path(fd, path);
    if (matches(path)) {
      failures++;
      errno = fail_errno;
      return -1;
    }
  }
  return __real_fsync(fd);
}

int __wrap_rename(const char *from, const char *to) {
  if (fail_target == T_SHARDS && matches(to)) {
    failures++;
    errno = fail_errno;
    return -1;
  }
  int rc = __real_rename(from, to);
  if (fail_target == T_DIE_AFTER_RENAME && matches(to)) raise(SIGKILL);
  return rc;
}

/* Shard files (in shards/) removed: by the test's own thread (the read
 * path) and by the others (the publisher). */
static atomic_int unlinked_main, unlinked_bg;

int __wrap_unlink(const char *path) {
  int rc = __real_unlink(path);
  if (rc == 0 && strstr(path, "/shards/") != NULL)
    atomic_fetch_add(pthread_equal(pthread_self(), main_thread) ? &unlinked_main
                                                                 : &unlinked_bg, 1);
  return rc;
}

static void inject(target t, int err) {
  fail_target = t;
  fail_errno = err;
  failures = 0;
}

/* ---- fixture ------------------------------------------------------------------ */

typedef struct fixture {
  char *dir, *root, *shards, *scratch;
  ts_shared *sh;
  bc_cache *c;
  bc_buf buf;      /* the tests' read buffer */
  uint64_t *sizes; /* shard sizes, when a test measured them */
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  if (f == NULL) return -1;
  f->dir = cu_tmp_dir();
  f->root = cu_path(f->dir, "c");
  f->shards = cu_path(f->root, "shards");
  f->scratch = cu_path(f->root, "scratch");
  inject(T_NONE, 0);
  atomic_store(&hold, false);
  atomic_store(&held, false);
  atomic_store(&unlinked_main, 0);
  atomic_store(&unlinked_bg, 0);
  main_thread = pthread_self();
  cu_watchdog(60);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  inject(T_NONE, 0);
  atomic_store(&hold, false);
  bc__write_hook = NULL;
  bc_buf_release(&f->buf);
  free(f->sizes);
  bc_cache_close(f->c);
  ts_shared_free(f->sh);
  cu_rm_rf(f->dir);
  free(f->scratch);
  free(f->shards);
  free(f->root);
  free(f->dir);
  free(f);
  cu_watchdog(0);
  return 0;
}

/* A cache of a `records`-record source in 10-record shards. */
static void open_records(fixture *f, uint64_t limit, uint64_t records) {
  ts_config cfg = ts_config_default(records);
  cfg.fixed = true;
  f->sh = ts_shared_new(&cfg);
  assert_non_null(f->sh);
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = 10;
  o.prefetch_shards = -1;
  o.max_open_shards = 1;
  o.disk_limit = limit;
  CU_OK(cu_open(&f->c, f->root, &cfg, f->sh, &o));
}

static void open_with(fixture *f, uint64_t limit) { open_records(f, limit, 100); }

/* The invariant after any failure: the state accounts for exactly the
 * files in shards/ (count and bytes), every one of them is a complete shard
 * of the model, and scratch/ is empty. */
static void check_consistent(fixture *f) {
  bc_cache_stats st;
  CU_OK(bc_cache_stats_get(f->c, &st));
  size_t files = 0;
  uint64_t bytes = cu_dir_bytes(f->shards, &files);
  if (files != st.shards_present || bytes != st.bytes_on_disk)
    fail_msg("shards/ holds %zu files, %llu bytes; the state says %llu "
             "shards, %llu bytes", files, (unsigned long long)bytes,
             (unsigned long long)st.shards_present,
             (unsigned long long)st.bytes_on_disk);
  assert_int_equal(cu_dir_count(f->scratch), 0);
  cu_check_shards(f->root, true, false);
}

/* One fill with the failure in place, then without. */
static void fail_then_recover(fixture *f, int64_t index, int want_rc) {
  bc_buf *b = &f->buf;
  int rc = bc_cache_get(f->c, index, b);
  int injected = failures;
  inject(T_NONE, 0);
  bc__write_hook = NULL;
  if (injected == 0) fail_msg("the injected failure was never reached");
  if (rc != want_rc)
    fail_msg("get(%lld) with a failure injected: %s (%s), expected %s",
             (long long)index, bc_error_name(rc), bc_errmsg(),
             bc_error_name(want_rc));
  check_consistent(f);
  rc = cu_get_cmp(f->c, index, true, b);
  if (rc != 0)
    fail_msg("get(%lld) after the failure was removed: %d (%s)",
             (long long)index, rc, bc_errmsg());
  check_consistent(f);
}

/* ---- write(2) ----------------------------------------------------------------- */

static void test_write_enospc(void **state) {
  fixture *f = *state;
  open_with(f, 0);
  inject(T_SCRATCH, ENOSPC);
  bc__write_hook = failing_write;
  fail_then_recover(f, 13, BC_ENOSPC);
}

static void test_write_eio(void **state) {
  fixture *f = *state;
  open_with(f, 0);
  bc_buf *b = &f->buf;
  assert_int_equal(cu_get_cmp(f->c, 0, true, b), 0);
  inject(T_SCRATCH, EIO);
  bc__write_hook = failing_write;
  fail_then_recover(f, 55, BC_EIO);
  cu_check_all(f->c, 100, true);
}

/* The shard is already renamed into shards/ when metadata.json fails to be
 * written (the publish of the short last shard records the end there): the
 * publish is undone, the file removed.  95 records: shard 9 holds 5. */
static void test_metadata_write_fails_in_publish(void **state) {
  fixture *f = *state;
  open_records(f, 0, 95);
  inject(T_META, ENOSPC);
  bc__write_hook = failing_write;
  fail_then_recover(f, 92, BC_ENOSPC);
  cu_check_all(f->c, 95, true);
}

/* The same under a disk limit: the victims of the undone publish were
 * already unlinked; they must be found missing and refilled, and the
 * state's byte count must not drift from the directory's. */
static void test_metadata_write_fails_with_evictions(void **state) {
  fixture *f = *state;
  uint64_t *sizes = f->sizes = cu_shard_sizes(95, 10, true);
  open_records(f, 2 * sizes[0] + sizes[0] / 2, 95); /* two shards fit */
  bc_buf *b = &f->buf;
  for (int64_t i = 0; i < 30; i += 10) assert_int_equal(cu_get_cmp(f->c, i, true, b), 0);
  check_consistent(f);
  inject(T_META, ENOSPC);
  bc__write_hook = failing_write;
  fail_then_recover(f, 92, BC_ENOSPC);
  for (int64_t i = 0; i < 95; i += 5) {
    int rc = cu_get_cmp(f->c, i, true, b);
    if (rc != 0) fail_msg("get(%lld): %d (%s)", (long long)i, rc, bc_errmsg());
    check_consistent(f);
  }
}

/* The user info is replaced atomically or not at all. */
static void test_set_info_write_fails(void **state) {
  fixture *f = *state;
  open_with(f, 0);
  CU_OK(bc_cache_set_info(f->c, "{\"a\": 1}"));
  inject(T_META, ENOSPC);
  bc__write_hook = failing_write;
  CU_RC(bc_cache_set_info(f->c, "{\"a\": 2}"), BC_ENOSPC);
  bc__write_hook = NULL;
  inject(T_NONE, 0);
  char *info = NULL;
  CU_OK(bc_cache_info(f->c, &info));
  assert_string_equal(info, "{\"a\":1}");
  free(info);
  assert_int_equal(cu_dir_count(f->root), 5); /* no temporary file left */
}

/* ---- fsync(2) and rename(2) ------------------------------------------------------ */

static void test_fsync_of_scratch_fails(void **state) {
  fixture *f = *state;
  open_with(f, 0);
  inject(T_SCRATCH, EIO);
  fail_then_recover(f, 8, BC_EIO);
}

static void test_rename_into_shards_fails(void **state) {
  fixture *f = *state;
  open_with(f, 0);
  inject(T_SHARDS, EIO);
  fail_then_recover(f, 31, BC_EIO);
  inject(T_SHARDS, ENOSPC);
  fail_then_recover(f, 61, BC_ENOSPC);
}

/* fsync of shards/ fails after the rename put the new file in place: the
 * publish fails, so the file must not stay there unaccounted for. */
static void test_fsync_of_shards_dir_fails(void **state) {
  fixture *f = *state;
  open_with(f, 0);
  inject(T_SHARDS_DIR, EIO);
  fail_then_recover(f, 44, BC_EIO);
}

/* The sync budget of a regeneration (doc/cache.md, "The sync budget of a
 * miss"): the shard's data and its sidecar's, then sums/ and shards/ after
 * the renames into them; scratch/ never (its names are temporary), and
 * nothing else (metadata.json only when the end is found).  A fill that
 * evicts costs the same. */
static void test_sync_budget_of_a_fill(void **state) {
  fixture *f = *state;
  uint64_t *sizes = f->sizes = cu_shard_sizes(100, 10, true);
  open_with(f, 2 * sizes[0] + sizes[0] / 2); /* two shards */
  bc_buf *b = &f->buf;
  for (int64_t i = 0; i < 60; i += 10) {
    count_reset();
    counting = true;
    int rc = cu_get_cmp(f->c, i, true, b);
    counting = false;
    assert_int_equal(rc, 0);
    if (synced[S_SCRATCH_FILE] != 2 || synced[S_SCRATCH_DIR] != 0 ||
        synced[S_SUMS_DIR] != 1 || synced[S_SHARDS_DIR] != 1 || synced[S_OTHER] != 0)
      fail_msg("get(%lld): fsyncs of scratch files %d, scratch/ %d, sums/ %d, "
               "shards/ %d, others %d; expected 2, 0, 1, 1, 0", (long long)i,
               synced[S_SCRATCH_FILE], synced[S_SCRATCH_DIR], synced[S_SUMS_DIR],
               synced[S_SHARDS_DIR], synced[S_OTHER]);
  }
  bc_cache_stats st;
  CU_OK(bc_cache_stats_get(f->c, &st));
  assert_int_equal(st.evictions, 4);
  check_consistent(f);
}

/* The appender opens its scratch files as a fill does: per shard, the same
 * budget (the scratch file and its sidecar, sums/ and shards/, never
 * scratch/); close adds the final length's metadata.json and the root
 * directory holding it (the two others). */
static void test_sync_budget_of_an_appender(void **state) {
  fixture *f = *state;
  open_with(f, 0);
  bc_appender *a = NULL;
  CU_OK(bc_cache_appender_open(&a, f->c, NULL));
  unsigned char rec[TS_MAX_RECORD];
  count_reset();
  counting = true;
  for (uint64_t i = 0; i < 25; i++) { /* two shards and half of one */
    size_t n = ts_record(i, true, 0, rec);
    CU_OK(bc_appender_append(a, rec, n));
  }
  int rc = bc_appender_close(a);
  counting = false;
  CU_OK(rc);
  if (synced[S_SCRATCH_FILE] != 6 || synced[S_SCRATCH_DIR] != 0 ||
      synced[S_SUMS_DIR] != 3 || synced[S_SHARDS_DIR] != 3 || synced[S_OTHER] != 2)
    fail_msg("appending 3 shards: fsyncs of scratch files %d, scratch/ %d, "
             "sums/ %d, shards/ %d, others %d; expected 6, 0, 3, 3, 2",
             synced[S_SCRATCH_FILE], synced[S_SCRATCH_DIR], synced[S_SUMS_DIR],
             synced[S_SHARDS_DIR], synced[S_OTHER]);
  cu_check_all(f->c, 25, true);
  check_consistent(f);
}

/* A crash between the rename into shards/ and the commit leaves a complete
 * file the state does not account for (its shard is claimed by a dead
 * process).  Until that claim is taken over, the file still occupies
 * shards/: later publishes must not push the directory over the limit. */
static void test_crash_between_rename_and_commit(void **state) {
  fixture *f = *state;
  uint64_t *sizes = f->sizes = cu_shard_sizes(100, 10, true);
  uint64_t limit = 3 * sizes[0] + sizes[0] / 2; /* three shards */
  open_with(f, limit);
  bc_buf *b = &f->buf;
  assert_int_equal(cu_get_cmp(f->c, 5, true, b), 0);
  assert_int_equal(cu_get_cmp(f->c, 15, true, b), 0);
  bc_cache_close(f->c);
  f->c = NULL;

  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    bc_cache *c = NULL;
    ts_config cfg = ts_config_default(100);
    cfg.fixed = true;
    bc_cache_options o = BC_CACHE_OPTIONS_INIT;
    o.shard_records = 10;
    o.prefetch_shards = -1;
    if (cu_open(&c, f->root, &cfg, f->sh, &o) != 0) _exit(2);
    inject(T_DIE_AFTER_RENAME, 0);
    bc_buf cb = BC_BUF_INIT;
    bc_cache_get(c, 25, &cb);
    _exit(3); /* not reached: the rename kills the process */
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
    fail_msg("the child did not die after the rename (status %#x)",
             (unsigned)status);
  size_t files = 0;
  cu_dir_bytes(f->shards, &files);
  assert_int_equal(files, 3); /* 0, 1 and the unaccounted 2 */
  cu_check_shards(f->root, true, false);

  ts_config cfg = ts_config_default(100);
  cfg.fixed = true;
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = 10;
  o.prefetch_shards = -1;
  o.max_open_shards = 1;
  o.disk_limit = limit;
  CU_OK(cu_open(&f->c, f->root, &cfg, f->sh, &o));
  for (int64_t i = 35; i < 100; i += 10) {
    assert_int_equal(cu_get_cmp(f->c, i, true, b), 0);
    uint64_t bytes = cu_dir_bytes(f->shards, &files);
    if (bytes > limit)
      fail_msg("after reading %lld: %zu files, %llu bytes in shards/, limit "
               "%llu", (long long)i, files, (unsigned long long)bytes,
               (unsigned long long)limit);
  }
  /* Reading shard 2 takes the dead claim over and refills it. */
  assert_int_equal(cu_get_cmp(f->c, 25, true, b), 0);
  check_consistent(f);
}


/* ---- publish-behind ------------------------------------------------------------ */

/* A cache of 100 records in 10-record shards with publish_behind on (its
 * default; util.h starts these tests' options with it off). */
/* A cache of 100 records in shards of 10, publishing behind, evict_ahead
 * as given (-1 off, 1 on, 0 auto). */
static void open_behind_ahead(fixture *f, uint64_t limit, int evict_ahead) {
  ts_config cfg = ts_config_default(100);
  cfg.fixed = true;
  f->sh = ts_shared_new(&cfg);
  assert_non_null(f->sh);
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = 10;
  o.prefetch_shards = -1;
  o.max_open_shards = 1;
  o.disk_limit = limit;
  o.publish_behind = true;
  o.evict_ahead = evict_ahead;
  CU_OK(cu_open(&f->c, f->root, &cfg, f->sh, &o));
  atomic_store(&unlinked_main, 0); /* (cu_shard_sizes removed a cache of its own) */
  atomic_store(&unlinked_bg, 0);
}

/* The tests of publish-behind's own protocol: no eviction ahead. */
static void open_behind(fixture *f, uint64_t limit) { open_behind_ahead(f, limit, -1); }

/* Waits until the publisher is held in its first fsync of a scratch file. */
static void wait_held(void) {
  for (int i = 0; !atomic_load(&held); i++) {
    if (i > 20000) fail_msg("the publisher never reached its fsync");
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
}

static void *release_later(void *arg) {
  struct timespec ts = {0, (long)(intptr_t)arg * 1000000L};
  nanosleep(&ts, NULL);
  atomic_store(&hold, false);
  return NULL;
}

/* Bytes of shard files (not sidecars) in dir: what the disk limit counts. */
static uint64_t shard_file_bytes(const char *dir) {
  DIR *d = opendir(dir);
  uint64_t total = 0;
  struct dirent *e;
  while (d != NULL && (e = readdir(d)) != NULL) {
    size_t n = strlen(e->d_name);
    if (e->d_name[0] == '.' || (n > 4 && strcmp(e->d_name + n - 4, ".crc") == 0))
      continue;
    char path[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (stat(path, &st) == 0) total += (uint64_t)st.st_size;
  }
  if (d != NULL) closedir(d);
  return total;
}

/* The sync budget of a miss with publish-behind: the read path fsyncs
 * nothing (its one sync is the claim's LMDB commit, whose fdatasync is
 * LMDB's own and not wrapped here); the publisher fsyncs each shard's
 * data and sidecar, and sums/ and shards/ once per batch: shard 0 alone
 * (it was taken while the others were not read yet), then 1, 2 and 3 in
 * one batch, one transaction. */
static void test_sync_budget_behind(void **state) {
  fixture *f = *state;
  open_behind(f, 0);
  bc_buf *b = &f->buf;
  count_reset();
  counting = true;
  atomic_store(&hold, true);
  assert_int_equal(cu_get_cmp(f->c, 5, true, b), 0);
  wait_held(); /* the publisher took shard 0 alone and is in its fsync */
  for (int64_t i = 15; i < 40; i += 10) assert_int_equal(cu_get_cmp(f->c, i, true, b), 0);
  for (int k = 0; k < S_KINDS; k++)
    if (synced_main[k] != 0) fail_msg("the read path fsynced (kind %d: %d)", k, (int)synced_main[k]);
  size_t files = 0;
  cu_dir_bytes(f->shards, &files);
  assert_int_equal(files, 0);                    /* nothing published yet */
  assert_int_equal(cu_dir_count(f->scratch), 8); /* 4 shards, 4 sidecars */
  atomic_store(&hold, false);
  CU_OK(bc_cache_sync(f->c));
  counting = false;
  if (synced_bg[S_SCRATCH_FILE] != 8 || synced_bg[S_SCRATCH_DIR] != 0 ||
      synced_bg[S_SUMS_DIR] != 2 || synced_bg[S_SHARDS_DIR] != 2 || synced_bg[S_OTHER] != 0)
    fail_msg("publisher: fsyncs of scratch files %d, scratch/ %d, sums/ %d, "
             "shards/ %d, others %d; expected 8, 0, 2, 2, 0",
             (int)synced_bg[S_SCRATCH_FILE], (int)synced_bg[S_SCRATCH_DIR],
             (int)synced_bg[S_SUMS_DIR], (int)synced_bg[S_SHARDS_DIR],
             (int)synced_bg[S_OTHER]);
  bc_cache_stats st;
  CU_OK(bc_cache_stats_get(f->c, &st));
  assert_int_equal(st.publishes_queued, 4);
  assert_int_equal(st.publish_batches, 2);
  assert_int_equal(st.publish_largest, 3);
  assert_int_equal(st.publish_failures, 0);
  assert_int_equal(st.fills, 4);
  assert_int_equal(st.shards_present, 4);
  check_consistent(f);
  cu_check_all(f->c, 100, true);
}

/* Under a limit of three and a half shards, with the publisher held and
 * running by turns: at every point the shard files in shards/ plus the
 * complete scratch files waiting for their publish hold at most the
 * limit; every record read is the model's. */
static void limit_holds(fixture *f, int evict_ahead) {
  uint64_t *sizes = f->sizes = cu_shard_sizes(100, 10, true);
  uint64_t limit = 3 * sizes[0] + sizes[0] / 2;
  open_behind_ahead(f, limit, evict_ahead);
  bc_buf *b = &f->buf;
  /* A size is known, and the length: regenerations reserve room. */
  CU_OK(bc_cache_fill_all(f->c));
  CU_OK(bc_cache_sync(f->c));
  uint64_t seed = 7;
  for (int round = 0; round < 6; round++) {
    atomic_store(&held, false);
    atomic_store(&hold, true);
    pthread_t t;
    /* Released from a thread: a fill that finds no room waits for it. */
    assert_int_equal(pthread_create(&t, NULL, release_later, (void *)(intptr_t)30), 0);
    for (int i = 0; i < 6; i++) {
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      int64_t index = (int64_t)((seed >> 33) % 100);
      assert_int_equal(cu_get_cmp(f->c, index, true, b), 0);
      uint64_t on_disk = shard_file_bytes(f->shards) + shard_file_bytes(f->scratch);
      if (on_disk > limit)
        fail_msg("round %d read %d: %llu bytes in shards/ and scratch/, limit %llu",
                 round, i, (unsigned long long)on_disk, (unsigned long long)limit);
    }
    pthread_join(t, NULL);
  }
  CU_OK(bc_cache_sync(f->c));
  check_consistent(f);
  bc_cache_stats st;
  CU_OK(bc_cache_stats_get(f->c, &st));
  assert_true(st.publishes_queued > 0);
  assert_int_equal(st.publish_failures, 0);
}

static void test_behind_limit_holds(void **state) { limit_holds(*state, -1); }

/* The same with evicting ahead: the publisher's evictions too keep the
 * files under the limit at every point. */
static void test_ahead_limit_holds(void **state) { limit_holds(*state, 1); }

/* Reads shards first..last-1 in order (a miss each), each published before
 * the next read. */
static void read_shards(fixture *f, int first, int last) {
  for (int s = first; s < last; s++) {
    assert_int_equal(cu_get_cmp(f->c, 10 * s, true, &f->buf), 0);
    CU_OK(bc_cache_sync(f->c));
  }
}

/* Fails unless `present` shards are present and `evicted` were evicted
 * since *before (then updated), `main` of their files removed by the read
 * path and `bg` by the publisher. */
static void expect(fixture *f, bc_cache_stats *before, uint64_t present, uint64_t evicted,
                   int main, int bg) {
  bc_cache_stats st;
  CU_OK(bc_cache_stats_get(f->c, &st));
  if (st.shards_present != present || st.evictions - before->evictions != evicted ||
      atomic_load(&unlinked_main) != main || atomic_load(&unlinked_bg) != bg)
    fail_msg("%llu shards present, %llu evicted, files removed by the read path %d, by "
             "the publisher %d; expected %llu, %llu, %d, %d",
             (unsigned long long)st.shards_present,
             (unsigned long long)(st.evictions - before->evictions),
             atomic_load(&unlinked_main), atomic_load(&unlinked_bg),
             (unsigned long long)present, (unsigned long long)evicted, main, bg);
  *before = st;
  atomic_store(&unlinked_main, 0);
  atomic_store(&unlinked_bg, 0);
}

/* A limit of `halves` half shards, evict_ahead as given: the whole source
 * drained first (its fills publish synchronously: the length is not known
 * until its end), so that later misses regenerate, publishing behind. */
static void open_drained(fixture *f, int halves, int evict_ahead, bc_cache_stats *st) {
  uint64_t *sizes = f->sizes = cu_shard_sizes(100, 10, true);
  open_behind_ahead(f, (uint64_t)halves * sizes[0] / 2, evict_ahead);
  CU_OK(bc_cache_fill_all(f->c));
  CU_OK(bc_cache_sync(f->c));
  CU_OK(bc_cache_stats_get(f->c, st));
  assert_int_equal(st->shards_present, (uint64_t)halves / 2);
  atomic_store(&unlinked_main, 0);
  atomic_store(&unlinked_bg, 0);
}

/* Evicting ahead under a limit of four and a half shards, four present
 * after the drain.  The first regeneration's claim finds no room and
 * evicts on the read path; its publish evicts one more ahead, leaving
 * three.  From then on every claim finds its room, and the publisher
 * removes the files: one per miss.  Off, every claim removes one itself
 * and four stay. */
static void test_evict_ahead(void **state) {
  fixture *f = *state;
  bc_cache_stats st;
  open_drained(f, 9, 1, &st);
  read_shards(f, 0, 1);
  expect(f, &st, 3, 2, 1, 1);
  read_shards(f, 1, 4);
  expect(f, &st, 3, 3, 0, 3);
  check_consistent(f);
  cu_check_all(f->c, 100, true);
}

static void test_evict_ahead_off(void **state) {
  fixture *f = *state;
  bc_cache_stats st;
  open_drained(f, 9, -1, &st);
  read_shards(f, 0, 4);
  expect(f, &st, 4, 4, 4, 0);
  check_consistent(f);
}

/* A limit of two and a half shards holds the two at work but not a third
 * besides: nothing is evicted ahead, the claims make their own room. */
static void test_evict_ahead_needs_a_spare_shard(void **state) {
  fixture *f = *state;
  bc_cache_stats st;
  open_drained(f, 5, 1, &st);
  read_shards(f, 0, 3);
  expect(f, &st, 2, 3, 3, 0);
}

/* evict_ahead is checked (-1, 0 or 1); options of version 2 end before it
 * (an exact allocation: ASan sees a read past) and get auto; a version
 * after this library's is refused. */
static void test_evict_ahead_options(void **state) {
  fixture *f = *state;
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = 10;
  o.evict_ahead = 2;
  CU_RC(bc_cache_open(&f->c, f->root, NULL, &o), BC_EINVAL);
  assert_non_null(strstr(bc_errmsg(), "evict_ahead must be -1 (off), 0 (auto) or 1 (on), not 2"));
  o.evict_ahead = 0;
  o.version = BC_CACHE_OPTIONS_VERSION + 1;
  CU_RC(bc_cache_open(&f->c, f->root, NULL, &o), BC_EINVAL);
  size_t v2_size = offsetof(bc_cache_options, evict_ahead);
  bc_cache_options *v2 = malloc(v2_size);
  assert_non_null(v2);
  o.version = 2;
  memcpy(v2, &o, v2_size);
  CU_OK(bc_cache_open(&f->c, f->root, NULL, v2));
  free(v2);
  bc_cache_close(f->c);
  f->c = NULL;
  /* Version 3 ends before fingerprint_json: none is read past it. */
  size_t v3_size = offsetof(bc_cache_options, fingerprint_json);
  bc_cache_options *v3 = malloc(v3_size);
  assert_non_null(v3);
  o.version = 3;
  memcpy(v3, &o, v3_size);
  CU_OK(bc_cache_open(&f->c, f->root, NULL, v3));
  free(v3);
  bc_cache_close(f->c);
  f->c = NULL;
}

/* A publish that fails (EIO at the fsync of the scratch file, then ENOSPC
 * at the rename into shards/): the records served were right; the shard
 * is not published, its claim is released and its scratch files deleted;
 * the failure counts in the stats and is returned once, by bc_cache_sync
 * or by the next read that misses; reading the shard again fills it. */
static void test_behind_publish_fails(void **state) {
  fixture *f = *state;
  open_behind(f, 0);
  bc_buf *b = &f->buf;
  inject(T_SCRATCH, EIO);
  assert_int_equal(cu_get_cmp(f->c, 5, true, b), 0); /* served all the same */
  CU_RC(bc_cache_sync(f->c), BC_EIO);
  assert_true(failures > 0);
  CU_OK(bc_cache_sync(f->c)); /* once */
  inject(T_SHARDS, ENOSPC);
  assert_int_equal(cu_get_cmp(f->c, 15, true, b), 0);
  bc_cache_stats st;
  CU_OK(bc_cache_stats_get(f->c, &st)); /* waits for it, reports nothing */
  inject(T_NONE, 0);
  assert_int_equal(st.publish_failures, 2);
  assert_int_equal(st.fills, 0);
  assert_int_equal(st.shards_present, 0);
  assert_int_equal(cu_dir_count(f->scratch), 0);
  /* The next miss returns it (its own shard is not read then). */
  CU_RC(bc_cache_get(f->c, 25, b), BC_ENOSPC);
  assert_int_equal(cu_get_cmp(f->c, 25, true, b), 0);
  assert_int_equal(cu_get_cmp(f->c, 5, true, b), 0);
  assert_int_equal(cu_get_cmp(f->c, 15, true, b), 0);
  CU_OK(bc_cache_sync(f->c));
  CU_OK(bc_cache_stats_get(f->c, &st));
  assert_int_equal(st.fills, 3);
  assert_int_equal(st.shards_present, 3);
  check_consistent(f);
}

/* bc_cache_close publishes what is queued. */
static void test_behind_close_publishes(void **state) {
  fixture *f = *state;
  open_behind(f, 0);
  bc_buf *b = &f->buf;
  atomic_store(&hold, true);
  for (int64_t i = 5; i < 40; i += 10) assert_int_equal(cu_get_cmp(f->c, i, true, b), 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, release_later, (void *)(intptr_t)50), 0);
  bc_cache_close(f->c);
  f->c = NULL;
  pthread_join(t, NULL);
  size_t files = 0;
  cu_dir_bytes(f->shards, &files);
  assert_int_equal(files, 4);
  assert_int_equal(cu_dir_count(f->scratch), 0);
  cu_check_shards(f->root, true, false);
}

/* kill -9 between "served" and "published": shards published before are
 * intact; the shard served from its scratch file was not published; the
 * next open takes its claim over and regenerates it. */
static void test_behind_killed_before_publish(void **state) {
  fixture *f = *state;
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    open_behind(f, 0);
    bc_buf *b = &f->buf;
    for (int64_t i = 5; i < 30; i += 10)
      if (cu_get_cmp(f->c, i, true, b) != 0) _exit(2);
    if (bc_cache_sync(f->c) != 0) _exit(3); /* shards 0..2 published */
    atomic_store(&hold, true);
    if (cu_get_cmp(f->c, 35, true, b) != 0) _exit(4); /* served */
    for (int i = 0; !atomic_load(&held); i++) {
      if (i > 20000) _exit(5);
      struct timespec ts = {0, 1000000};
      nanosleep(&ts, NULL);
    }
    raise(SIGKILL);
    _exit(6);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
    fail_msg("the child did not die as planned (status %#x)", (unsigned)status);
  size_t files = 0;
  cu_dir_bytes(f->shards, &files);
  assert_int_equal(files, 3);
  assert_true(cu_dir_count(f->scratch) > 0); /* shard 3's, unpublished */
  open_behind(f, 0);
  assert_int_equal(cu_dir_count(f->scratch), 0); /* the dead one's, gone */
  bc_buf *b = &f->buf;
  assert_int_equal(cu_get_cmp(f->c, 35, true, b), 0); /* taken over */
  for (int64_t i = 5; i < 30; i += 10) assert_int_equal(cu_get_cmp(f->c, i, true, b), 0);
  CU_OK(bc_cache_sync(f->c));
  bc_cache_stats st;
  CU_OK(bc_cache_stats_get(f->c, &st));
  assert_int_equal(st.fills, 1); /* shard 3 only: nothing published lost */
  assert_int_equal(st.shards_present, 4);
  check_consistent(f);
}

/* Another process that wants a shard served here from its scratch file
 * waits on the claim, and gets the shard once it is published: it fills
 * nothing itself. */
static void test_behind_other_process_waits(void **state) {
  fixture *f = *state;
  open_behind(f, 0);
  bc_buf *b = &f->buf;
  atomic_store(&hold, true);
  assert_int_equal(cu_get_cmp(f->c, 25, true, b), 0);
  wait_held();
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    bc_cache *c = NULL;
    ts_config cfg = ts_config_default(100);
    cfg.fixed = true;
    bc_cache_options o = BC_CACHE_OPTIONS_INIT;
    o.shard_records = 10;
    o.prefetch_shards = -1;
    if (cu_open(&c, f->root, &cfg, f->sh, &o) != 0) _exit(2);
    bc_buf cb = BC_BUF_INIT;
    if (cu_get_cmp(c, 25, true, &cb) != 0) _exit(3);
    bc_cache_stats st;
    if (bc_cache_stats_get(c, &st) != 0) _exit(4);
    _exit(st.fills == 0 && st.regenerations == 0 && st.waits > 0 ? 0 : 5);
  }
  struct timespec ts = {0, 200000000}; /* the child polls the claim */
  nanosleep(&ts, NULL);
  size_t files = 0;
  cu_dir_bytes(f->shards, &files);
  assert_int_equal(files, 0); /* still not published */
  atomic_store(&hold, false);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail_msg("the other process: status %#x", (unsigned)status);
  CU_OK(bc_cache_sync(f->c));
  check_consistent(f);
}

int main(void) {
  bc_set_notice_handler(NULL, NULL);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_write_enospc, setup, teardown),
      cmocka_unit_test_setup_teardown(test_write_eio, setup, teardown),
      cmocka_unit_test_setup_teardown(test_metadata_write_fails_in_publish,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_metadata_write_fails_with_evictions,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_set_info_write_fails, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fsync_of_scratch_fails, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_rename_into_shards_fails, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_fsync_of_shards_dir_fails, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_sync_budget_of_a_fill, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sync_budget_of_an_appender, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_crash_between_rename_and_commit,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_sync_budget_behind, setup, teardown),
      cmocka_unit_test_setup_teardown(test_behind_limit_holds, setup, teardown),
      cmocka_unit_test_setup_teardown(test_ahead_limit_holds, setup, teardown),
      cmocka_unit_test_setup_teardown(test_evict_ahead, setup, teardown),
      cmocka_unit_test_setup_teardown(test_evict_ahead_off, setup, teardown),
      cmocka_unit_test_setup_teardown(test_evict_ahead_needs_a_spare_shard, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_evict_ahead_options, setup, teardown),
      cmocka_unit_test_setup_teardown(test_behind_publish_fails, setup, teardown),
      cmocka_unit_test_setup_teardown(test_behind_close_publishes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_behind_killed_before_publish, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_behind_other_process_waits, setup,
                                      teardown),
  };
  return cmocka_run_group_tests_name("cache I/O failures", tests, NULL, NULL);
}
