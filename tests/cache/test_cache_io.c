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
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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

static target fail_target;
static int fail_errno;
static int failures; /* injected so far */

/* The path a descriptor refers to, into out[PATH_MAX]. */
static void fd_path(int fd, char *out) {
  char link[64];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, out, PATH_MAX - 1);
  out[n > 0 ? n : 0] = '\0';
}

static bool matches(const char *path) {
  size_t n = strlen(path);
  switch (fail_target) {
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

/* fsyncs counted by what they sync, while `counting` (the sync budget). */
enum { S_SCRATCH_FILE, S_SCRATCH_DIR, S_SUMS_DIR, S_SHARDS_DIR, S_OTHER, S_KINDS };
static bool counting;
static int synced[S_KINDS];

static bool ends_with(const char *s, const char *tail) {
  size_t n = strlen(s), k = strlen(tail);
  return n >= k && strcmp(s + n - k, tail) == 0;
}

static void count_sync(int fd) {
  char path[PATH_MAX];
  fd_path(fd, path);
  synced[strstr(path, "/scratch/") != NULL ? S_SCRATCH_FILE
         : ends_with(path, "/scratch")    ? S_SCRATCH_DIR
         : ends_with(path, "/sums")       ? S_SUMS_DIR
         : ends_with(path, "/shards")     ? S_SHARDS_DIR
                                          : S_OTHER]++;
}

int __wrap_fsync(int fd) {
  if (counting) count_sync(fd);
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
  cu_watchdog(60);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  inject(T_NONE, 0);
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
    memset(synced, 0, sizeof synced);
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
  memset(synced, 0, sizeof synced);
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
  };
  return cmocka_run_group_tests_name("cache I/O failures", tests, NULL, NULL);
}
