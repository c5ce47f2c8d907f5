/*
 * test_writer: the writer's error handling and crash safety.
 *
 * The invariant under test: the final name (and limits.NAME) shows either
 * what was there before the writer started, or the complete new file -
 * never a partial one - whatever happens to the writer: misuse, an
 * unclosed writer being freed, a full disk or an I/O error (injected
 * through bc__write_hook), or SIGKILL at any moment.  Temporary files never
 * outlive a writer that fails or is freed.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/internal.h"
#include "testutil.h"

static const char old_bytes[] = "these are the old bytes of an older file";

static void mixed_records(tu_records *r) { tu_manifest_vector_records("mixed_bag", r); }

/* Hidden temporary files of the writer: ".NAME.tmp-XXXXXX". */
static size_t temp_files(const char *dir) { return tu_count_entries(dir, "."); }

static void expect_old(const char *path) {
  size_t n;
  unsigned char *got = tu_read_file(path, &n);
  tu_assert_bytes(got, n, old_bytes, sizeof old_bytes, path);
  free(got);
}

/* ---- misuse and lifecycle -------------------------------------------------- */

static void test_write_after_close(void **state) {
  (void)state;
  char *tmp = tu_tempdir();
  char *path = tu_join(tmp, "c.bag");
  bc_writer *w = NULL;
  TU_OK(bc_writer_open(&w, path, NULL));
  TU_OK(bc_writer_write(w, "abc", 3));
  TU_OK(bc_writer_write(w, NULL, 0));
  assert_int_equal(bc_writer_count(w), 2);
  assert_int_equal(bc_writer_records_bytes(w), 3);
  TU_OK(bc_writer_close(w));
  TU_RC(bc_writer_write(w, "x", 1), BC_ECLOSED);
  TU_RC(bc_writer_flush(w), BC_ECLOSED);
  TU_OK(bc_writer_close(w)); /* idempotent: the first result again */
  assert_int_equal(bc_writer_count(w), 2);
  bc_writer_free(w);
  bc_writer_free(NULL);

  /* Exactly "abc" + two limits (3, 3). */
  size_t n;
  unsigned char *got = tu_read_file(path, &n);
  const unsigned char want[] = {'a', 'b', 'c', 3, 0, 0, 0, 0, 0, 0, 0,
                                3,   0,   0,   0, 0, 0, 0, 0};
  tu_assert_bytes(got, n, want, sizeof want, path);
  free(got);
  assert_int_equal(temp_files(tmp), 0);
  free(path);
  tu_rmtree(tmp);
  free(tmp);
}

static void test_close_returns_first_error(void **state) {
  (void)state;
  char *tmp = tu_tempdir();
  char *sub = tu_join(tmp, "sub");
  assert_int_equal(mkdir(sub, 0755), 0);
  char *path = tu_join(sub, "gone.bag");
  bc_writer *w = NULL;
  TU_OK(bc_writer_open(&w, path, NULL));
  TU_OK(bc_writer_write(w, "abc", 3));
  /* The directory disappears under the writer: close cannot publish. */
  tu_rmtree(sub);
  int first = bc_writer_close(w);
  assert_int_not_equal(first, BC_OK);
  TU_RC(bc_writer_close(w), first);
  TU_RC(bc_writer_write(w, "x", 1), first); /* a failed writer stays failed */
  bc_writer_free(w);
  assert_false(tu_exists(path));
  free(path);
  free(sub);
  tu_rmtree(tmp);
  free(tmp);
}

static void test_flush_keeps_final_name_empty(void **state) {
  (void)state;
  tu_records mixed = {0};
  mixed_records(&mixed);
  char *tmp = tu_tempdir();
  for (int place = 0; place <= 1; place++) {
    char *path = tu_join(tmp, "f.bag");
    char *limits = bc_limits_path(path);
    bc_writer_options wo = BC_WRITER_OPTIONS_INIT;
    wo.limits_placement = (bc_limits_placement)place;
    bc_writer *w = NULL;
    TU_OK(bc_writer_open(&w, path, &wo));
    for (size_t i = 0; i < mixed.count; i++) {
      TU_OK(bc_writer_write(w, mixed.data[i], mixed.size[i]));
      TU_OK(bc_writer_flush(w));
    }
    assert_false(tu_exists(path));
    assert_false(tu_exists(limits));
    assert_true(temp_files(tmp) >= 1);
    TU_OK(bc_writer_close(w));
    bc_writer_free(w);
    assert_int_equal(temp_files(tmp), 0);
    bc_reader_options ro = BC_READER_OPTIONS_INIT;
    ro.limits_placement = (bc_limits_placement)place;
    bc_bag *bag = NULL;
    TU_OK(bc_bag_open(&bag, path, &ro));
    tu_check_bag(bag, &mixed);
    bc_bag_close(bag);
    tu_remove_entries(tmp, "");
    free(limits);
    free(path);
  }
  tu_rmtree(tmp);
  free(tmp);
  tu_records_free(&mixed);
}

/* With the limits at the tail, a writer keeps one temporary file until
 * its limits outgrow their buffer (8,192 records): a cache shard is one
 * file created and renamed, not two.  The file written either way is
 * the same bag. */
static void test_tail_limits_temp_only_when_needed(void **state) {
  (void)state;
  char *tmp = tu_tempdir();
  char *path = tu_join(tmp, "t.bag");
  enum { N = 8192 + 10 };
  bc_writer *w = NULL;
  TU_OK(bc_writer_open(&w, path, NULL));
  char rec[16];
  for (int i = 0; i < N; i++) {
    int n = snprintf(rec, sizeof rec, "r%d", i);
    TU_OK(bc_writer_write(w, rec, (size_t)n));
    if (i == 8191) assert_int_equal(temp_files(tmp), 1); /* buffer full */
  }
  assert_int_equal(temp_files(tmp), 2); /* the 8,193rd limit flushed them */
  TU_OK(bc_writer_close(w));
  bc_writer_free(w);
  assert_int_equal(temp_files(tmp), 0);
  bc_bag *bag = NULL;
  TU_OK(bc_bag_open(&bag, path, NULL));
  assert_int_equal(bc_bag_len(bag), N);
  bc_buf got = BC_BUF_INIT;
  for (int i = 0; i < N; i += 97) {
    int n = snprintf(rec, sizeof rec, "r%d", i);
    TU_OK(bc_bag_get(bag, (uint64_t)i, &got));
    tu_assert_bytes(got.data, got.size, rec, (size_t)n, path);
  }
  bc_buf_release(&got);
  bc_bag_close(bag);
  tu_remove_entries(tmp, "");
  /* A small file: one temporary file from open to close. */
  TU_OK(bc_writer_open(&w, path, NULL));
  TU_OK(bc_writer_write(w, "abc", 3));
  assert_int_equal(temp_files(tmp), 1);
  TU_OK(bc_writer_close(w));
  bc_writer_free(w);
  assert_int_equal(tu_count_entries(tmp, ""), 1);
  tu_rmtree(tmp);
  free(tmp);
  free(path);
}

static void test_free_unclosed_publishes_nothing(void **state) {
  (void)state;
  tu_records mixed = {0};
  mixed_records(&mixed);
  char *tmp = tu_tempdir();
  for (int place = 0; place <= 1; place++)
    for (int with_old = 0; with_old <= 1; with_old++) {
      char *path = tu_join(tmp, "u.bagz");
      if (with_old) tu_write_file(path, old_bytes, sizeof old_bytes);
      bc_writer_options wo = BC_WRITER_OPTIONS_INIT;
      wo.limits_placement = (bc_limits_placement)place;
      bc_writer *w = NULL;
      TU_OK(bc_writer_open(&w, path, &wo));
      for (size_t i = 0; i < mixed.count; i++)
        TU_OK(bc_writer_write(w, mixed.data[i], mixed.size[i]));
      if (place == 0) TU_OK(bc_writer_flush(w));
      bc_writer_free(w);
      /* Only the old file, if there was one: no temporaries, no limits. */
      assert_int_equal(tu_count_entries(tmp, ""), (size_t)with_old);
      if (with_old) expect_old(path);
      tu_remove_entries(tmp, "");
      free(path);
    }
  /* A writer freed right after open leaves nothing either. */
  char *path = tu_join(tmp, "v.bag");
  bc_writer *w = NULL;
  TU_OK(bc_writer_open(&w, path, NULL));
  bc_writer_free(w);
  assert_int_equal(tu_count_entries(tmp, ""), 0);
  free(path);
  tu_rmtree(tmp);
  free(tmp);
  tu_records_free(&mixed);
}

static void test_missing_directory(void **state) {
  (void)state;
  char *tmp = tu_tempdir();
  char *path = tu_format("%s/no/such/dir/x.bag", tmp);
  bc_writer *w = NULL;
  TU_RC(bc_writer_open(&w, path, NULL), BC_ENOTFOUND);
  assert_null(w);
  bc_writer_options wo = BC_WRITER_OPTIONS_INIT;
  wo.limits_placement = BC_LIMITS_SEPARATE;
  TU_RC(bc_writer_open(&w, path, &wo), BC_ENOTFOUND);
  assert_null(w);
  free(path);
  tu_rmtree(tmp);
  free(tmp);
}

static void test_replace_only_at_close(void **state) {
  (void)state;
  tu_records mixed = {0};
  mixed_records(&mixed);
  char *tmp = tu_tempdir();
  for (int place = 0; place <= 1; place++) {
    char *path = tu_join(tmp, "r.bag");
    char *limits = bc_limits_path(path);
    tu_write_file(path, old_bytes, sizeof old_bytes);
    if (place == BC_LIMITS_SEPARATE) tu_write_file(limits, old_bytes, sizeof old_bytes);
    bc_writer_options wo = BC_WRITER_OPTIONS_INIT;
    wo.limits_placement = (bc_limits_placement)place;
    bc_writer *w = NULL;
    TU_OK(bc_writer_open(&w, path, &wo));
    for (size_t i = 0; i < mixed.count; i++)
      TU_OK(bc_writer_write(w, mixed.data[i], mixed.size[i]));
    TU_OK(bc_writer_flush(w));
    expect_old(path);
    if (place == BC_LIMITS_SEPARATE) expect_old(limits);
    TU_OK(bc_writer_close(w));
    bc_writer_free(w);
    bc_reader_options ro = BC_READER_OPTIONS_INIT;
    ro.limits_placement = (bc_limits_placement)place;
    bc_bag *bag = NULL;
    TU_OK(bc_bag_open(&bag, path, &ro));
    tu_check_bag(bag, &mixed);
    bc_bag_close(bag);
    assert_int_equal(temp_files(tmp), 0);
    tu_remove_entries(tmp, "");
    free(limits);
    free(path);
  }
  tu_rmtree(tmp);
  free(tmp);
  tu_records_free(&mixed);
}

/* Any name the file system accepts for the final file (and limits.NAME)
 * must work: the hidden temporary names must not be what runs out of room. */
static void test_longest_names(void **state) {
  (void)state;
  char *tmp = tu_tempdir();
  long name_max = pathconf(tmp, _PC_NAME_MAX);
  if (name_max <= 0 || name_max > 1000) name_max = 255;
  tu_records recs = {0};
  tu_records_labelled(&recs, "long", 3);
  for (int place = 0; place <= 1; place++) {
    /* The longest name whose files can exist: NAME, or limits.NAME. */
    size_t len = (size_t)name_max - (place == BC_LIMITS_SEPARATE ? 7 : 0);
    char *base = malloc(len + 1);
    assert_non_null(base);
    memset(base, 'n', len);
    memcpy(base + len - 4, ".bag", 5);
    char *path = tu_join(tmp, base);
    bc_writer_options wo = BC_WRITER_OPTIONS_INIT;
    wo.limits_placement = (bc_limits_placement)place;
    bc_writer *w = NULL;
    int rc = bc_writer_open(&w, path, &wo);
    if (rc != BC_OK)
      fail_msg("%s limits, a %zu-character name: bc_writer_open: %s (%s)",
               place ? "separate" : "tail", len, bc_error_name(rc), bc_errmsg());
    for (size_t i = 0; i < recs.count; i++)
      TU_OK(bc_writer_write(w, recs.data[i], recs.size[i]));
    TU_OK(bc_writer_close(w));
    bc_writer_free(w);
    bc_reader_options ro = BC_READER_OPTIONS_INIT;
    ro.limits_placement = (bc_limits_placement)place;
    tu_check_file(path, &ro, &recs);
    assert_int_equal(temp_files(tmp), 0);
    tu_remove_entries(tmp, "");
    free(path);
    free(base);
  }
  tu_records_free(&recs);
  tu_rmtree(tmp);
  free(tmp);
}

/* A relative name with no directory part goes to the current directory. */
static void test_relative_name(void **state) {
  (void)state;
  char *tmp = tu_tempdir();
  char cwd[4096];
  assert_non_null(getcwd(cwd, sizeof cwd));
  assert_int_equal(chdir(tmp), 0);
  tu_records recs = {0};
  tu_records_labelled(&recs, "rel", 4);
  bc_writer_options wo = BC_WRITER_OPTIONS_INIT;
  tu_write_bag("rel.bag", &wo, &recs);
  wo.limits_placement = BC_LIMITS_SEPARATE;
  tu_write_bag("sep.bagz", &wo, &recs);
  bc_reader_options ro = BC_READER_OPTIONS_INIT;
  tu_check_file("rel.bag", &ro, &recs);
  ro.limits_placement = BC_LIMITS_SEPARATE;
  tu_check_file("sep.bagz", &ro, &recs);
  assert_true(tu_exists("limits.sep.bagz"));
  assert_int_equal(chdir(cwd), 0);
  assert_int_equal(tu_count_entries(tmp, ""), 3);
  tu_records_free(&recs);
  tu_rmtree(tmp);
  free(tmp);
}

/* ---- fault injection ---------------------------------------------------- */

/* The hook passes `hook_budget` bytes through write(2), then fails every
 * call with `hook_errno`.  With `hook_counting` set it only counts. */
static size_t hook_budget;
static size_t hook_seen;
static int hook_errno;
static bool hook_counting;

static ssize_t failing_write(int fd, const void *data, size_t size) {
  if (hook_counting) {
    ssize_t w = write(fd, data, size);
    if (w > 0) hook_seen += (size_t)w;
    return w;
  }
  if (hook_budget == 0) {
    errno = hook_errno;
    return -1;
  }
  size_t n = size < hook_budget ? size : hook_budget;
  ssize_t w = write(fd, data, n);
  if (w > 0) hook_budget -= (size_t)w;
  return w;
}

/* Writes `recs` through the writer; returns the first failing result of
 * write/flush/close (0 when everything succeeded) and checks that after a
 * failure every later call repeats it. */
static int write_all_records(const char *path, const bc_writer_options *wo,
                             const tu_records *recs) {
  bc_writer *w = NULL;
  int rc = bc_writer_open(&w, path, wo);
  if (rc != 0) return rc;
  int first = 0;
  for (size_t i = 0; i < recs->count; i++) {
    rc = bc_writer_write(w, recs->data[i], recs->size[i]);
    if (first == 0) first = rc;
    else TU_RC(rc, first); /* a failed writer stays failed */
    if (i == recs->count / 2) {
      rc = bc_writer_flush(w);
      if (first == 0) first = rc;
      else TU_RC(rc, first);
    }
  }
  rc = bc_writer_close(w);
  if (first == 0) first = rc;
  else TU_RC(rc, first);
  TU_RC(bc_writer_close(w), first);
  bc_writer_free(w);
  return first;
}

static void test_injected_write_errors(void **state) {
  (void)state;
  tu_records recs = {0};
  mixed_records(&recs);
  /* More records than the writer buffers, so failures hit write() too. */
  tu_records_labelled(&recs, "after", 3000);
  char *tmp = tu_tempdir();
  char *path = tu_join(tmp, "e.bagz");
  char *limits = bc_limits_path(path);

  for (int place = 0; place <= 1; place++) {
    bc_writer_options wo = BC_WRITER_OPTIONS_INIT;
    wo.limits_placement = (bc_limits_placement)place;
    wo.compression = BC_COMPRESSION_NONE;
    /* How many bytes pass through the hook in a successful run. */
    hook_counting = true;
    hook_seen = 0;
    bc__write_hook = failing_write;
    int rc = write_all_records(path, &wo, &recs);
    bc__write_hook = NULL;
    hook_counting = false;
    TU_OK(rc);
    size_t total = hook_seen;
    assert_true(total > 0);
    tu_remove_entries(tmp, "");

    const size_t budgets[] = {0, 1, 7, 100, 4096, total / 3, total / 2,
                              total - 9, total - 1};
    const int errnos[] = {ENOSPC, EIO, EDQUOT};
    const int codes[] = {BC_ENOSPC, BC_EIO, BC_ENOSPC};
    for (size_t b = 0; b < sizeof budgets / sizeof budgets[0]; b++)
      for (size_t e = 0; e < 3; e++) {
        tu_write_file(path, old_bytes, sizeof old_bytes);
        hook_budget = budgets[b];
        hook_errno = errnos[e];
        bc__write_hook = failing_write;
        rc = write_all_records(path, &wo, &recs);
        bc__write_hook = NULL;
        if (rc != codes[e])
          fail_msg("placement %d, budget %zu of %zu, errno %d: got %s (%s), expected %s",
                   place, budgets[b], total, errnos[e], bc_error_name(rc),
                   bc_errmsg(), bc_error_name(codes[e]));
        /* Nothing published, the old file intact, no temporaries. */
        expect_old(path);
        assert_false(tu_exists(limits));
        assert_int_equal(temp_files(tmp), 0);
        assert_int_equal(tu_count_entries(tmp, ""), 1);
      }
    tu_remove_entries(tmp, "");
  }
  free(limits);
  free(path);
  tu_rmtree(tmp);
  free(tmp);
  tu_records_free(&recs);
}

/* ---- SIGKILL at random moments ------------------------------------------- */

#define KILL_RECORDS 600
#define KILL_RECORD_SIZE 3000

static void kill_record(unsigned char *buf, size_t i) {
  for (size_t k = 0; k < KILL_RECORD_SIZE; k++)
    buf[k] = (unsigned char)((i * 131 + k * 7) % 251);
}

/* The child: writes KILL_RECORDS records and closes; never returns. */
static void kill_child(const char *path, int place) {
  unsigned char buf[KILL_RECORD_SIZE];
  bc_writer_options wo = BC_WRITER_OPTIONS_INIT;
  wo.limits_placement = (bc_limits_placement)place;
  bc_writer *w = NULL;
  if (bc_writer_open(&w, path, &wo) != 0) _exit(2);
  for (size_t i = 0; i < KILL_RECORDS; i++) {
    kill_record(buf, i);
    if (bc_writer_write(w, buf, sizeof buf) != 0) _exit(3);
  }
  if (bc_writer_close(w) != 0) _exit(4);
  _exit(0);
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* Runs one child; kills it after delay_us (< 0: lets it finish).  Returns
 * whether it was killed before it exited. */
static bool run_child(const char *path, int place, double delay_us) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) kill_child(path, place);
  if (delay_us >= 0) {
    usleep((useconds_t)delay_us);
    kill(pid, SIGKILL);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  if (WIFEXITED(status)) {
    assert_int_equal(WEXITSTATUS(status), 0);
    return false;
  }
  assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  return true;
}

/* What a reader may see after the child: the old state or the whole bag. */
static void check_after_kill(const char *path, int place, bool with_old,
                             size_t *complete) {
  char *limits = bc_limits_path(path);
  size_t n;
  unsigned char *data = tu_read_file_opt(path, &n);
  bool exists = data != NULL;
  bool is_old = exists && n == sizeof old_bytes &&
                memcmp(data, old_bytes, n) == 0;
  free(data);
  if (!exists) {
    assert_false(with_old); /* an old file must never disappear */
  } else if (is_old) {
    assert_true(with_old);
  } else {
    /* New contents under the final name: complete and valid. */
    bc_reader_options ro = BC_READER_OPTIONS_INIT;
    ro.limits_placement = (bc_limits_placement)place;
    bc_bag *bag = NULL;
    TU_OK(bc_bag_open(&bag, path, &ro));
    assert_int_equal(bc_bag_len(bag), KILL_RECORDS);
    bc_buf buf = BC_BUF_INIT;
    unsigned char want[KILL_RECORD_SIZE];
    for (size_t i = 0; i < KILL_RECORDS; i++) {
      TU_OK(bc_bag_get(bag, i, &buf));
      kill_record(want, i);
      TU_BUF_EQ(&buf, want, sizeof want);
    }
    bc_buf_release(&buf);
    bc_bag_close(bag);
    (*complete)++;
  }
  free(limits);
}

static void test_sigkill(void **state) {
  (void)state;
  char *tmp = tu_tempdir();
  char *path = tu_join(tmp, "k.bag");
  char *limits = bc_limits_path(path);
  /* Delays vary from run to run; BC_TEST_SEED=N repeats one run's. */
  const char *env = getenv("BC_TEST_SEED");
  uint64_t seed = env != NULL ? strtoull(env, NULL, 10) : (uint64_t)time(NULL);
  print_message("sigkill: seed %llu\n", (unsigned long long)seed);
  tu_rng rng;
  tu_rng_seed(&rng, seed);

  /* How long an undisturbed child takes (its output is then valid). */
  double t0 = now_us();
  assert_false(run_child(path, 0, -1));
  double full = now_us() - t0;
  size_t complete = 0;
  check_after_kill(path, 0, false, &complete);
  assert_int_equal(complete, 1);
  tu_remove_entries(tmp, "");

  size_t killed = 0, leftovers = 0;
  complete = 0;
  for (int round = 0; round < 24; round++) {
    int place = round % 4 == 3 ? BC_LIMITS_SEPARATE : BC_LIMITS_TAIL;
    bool with_old = place == BC_LIMITS_TAIL && round % 2 == 1;
    if (with_old) tu_write_file(path, old_bytes, sizeof old_bytes);
    /* Delays spread over the whole run, close included, and a bit past. */
    double delay = (double)tu_rng_below(&rng, (uint64_t)(full * 1.3) + 1);
    killed += run_child(path, place, delay);
    check_after_kill(path, place, with_old, &complete);
    if (place == BC_LIMITS_SEPARATE && !tu_exists(path) && tu_exists(limits))
      print_message("round %d: limits published, records not yet\n", round);
    /* A killed writer cannot clean up: its temporaries are ours to remove. */
    leftovers += tu_remove_entries(tmp, ".");
    tu_remove_entries(tmp, "");
  }
  print_message("sigkill: full run %.0f us, %zu killed, %zu complete, %zu "
                "temporary files removed\n",
                full, killed, complete, leftovers);
  free(limits);
  free(path);
  tu_rmtree(tmp);
  free(tmp);
}

/* ---- a crash between the steps of publishing ----------------------------- */

/* Fault injection: this program's own rename() (it takes precedence over
 * the C library's for the statically linked library too) kills the process
 * right after the n-th rename once `crash_after_renames` is set - in a
 * forked child only. */
static int crash_after_renames;

int rename(const char *from, const char *to) {
  int rc = renameat(AT_FDCWD, from, AT_FDCWD, to);
  if (crash_after_renames > 0 && --crash_after_renames == 0) raise(SIGKILL);
  return rc;
}

/* Reads `path` as a bag; returns 0 when it holds exactly `want`, 1 when it
 * is not found, and fails the test for anything else. */
static int classify(const char *path, int place, const tu_records *want_a,
                    const tu_records *want_b, int *which) {
  bc_reader_options ro = BC_READER_OPTIONS_INIT;
  ro.limits_placement = (bc_limits_placement)place;
  bc_bag *bag = NULL;
  int rc = bc_bag_open(&bag, path, &ro);
  if (rc == BC_ENOTFOUND) return 1;
  if (rc != BC_OK)
    fail_msg("after the crash %s does not open: %s (%s)", path,
             bc_error_name(rc), bc_errmsg());
  const tu_records *cands[2] = {want_a, want_b};
  *which = -1;
  for (int k = 0; k < 2 && *which < 0; k++) {
    if (bc_bag_len(bag) != cands[k]->count) continue;
    bool same = true;
    bc_buf buf = BC_BUF_INIT;
    for (size_t i = 0; i < cands[k]->count && same; i++)
      same = bc_bag_get(bag, i, &buf) == 0 && buf.size == cands[k]->size[i] &&
             memcmp(buf.data, cands[k]->data[i], buf.size) == 0;
    bc_buf_release(&buf);
    if (same) *which = k;
  }
  uint64_t len = bc_bag_len(bag);
  bc_bag_close(bag);
  if (*which < 0)
    fail_msg("after the crash %s opens with %llu records that are neither the "
             "old nor the new contents", path, (unsigned long long)len);
  return 0;
}

static void test_crash_between_renames(void **state) {
  (void)state;
  tu_records old = {0}, fresh = {0};
  tu_records_labelled(&old, "old-record", 5);
  tu_records_labelled(&fresh, "a-new-and-longer-record", 40);
  char *tmp = tu_tempdir();
  char *path = tu_join(tmp, "crash.bag");
  for (int place = 0; place <= 1; place++)
    for (int n = 1; n <= 3; n++) {
      bc_writer_options wo = BC_WRITER_OPTIONS_INIT;
      wo.limits_placement = (bc_limits_placement)place;
      tu_write_bag(path, &wo, &old);
      pid_t pid = fork();
      assert_true(pid >= 0);
      if (pid == 0) {
        crash_after_renames = n;
        bc_writer *w = NULL;
        if (bc_writer_open(&w, path, &wo) != 0) _exit(2);
        for (size_t i = 0; i < fresh.count; i++)
          if (bc_writer_write(w, fresh.data[i], fresh.size[i]) != 0) _exit(3);
        _exit(bc_writer_close(w) == 0 ? 0 : 4);
      }
      int status;
      assert_int_equal(waitpid(pid, &status, 0), pid);
      bool crashed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
      if (!crashed) assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      /* The old contents, the new ones, or (separate limits only, between
       * the two renames) no records file - never a mixed pair. */
      int which = -1;
      int r = classify(path, place, &old, &fresh, &which);
      if (r == 1) assert_int_equal(place, BC_LIMITS_SEPARATE);
      if (!crashed) assert_int_equal(which, 1);
      print_message("%s limits, crash after rename %d: %s\n",
                    place ? "separate" : "tail", n,
                    !crashed ? "no crash (fewer renames)"
                    : r == 1 ? "not found"
                    : which == 0 ? "old contents" : "new contents");
      tu_remove_entries(tmp, "");
      if (!crashed) break;
    }
  free(path);
  tu_rmtree(tmp);
  free(tmp);
  tu_records_free(&fresh);
  tu_records_free(&old);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_write_after_close),
      cmocka_unit_test(test_close_returns_first_error),
      cmocka_unit_test(test_flush_keeps_final_name_empty),
      cmocka_unit_test(test_tail_limits_temp_only_when_needed),
      cmocka_unit_test(test_free_unclosed_publishes_nothing),
      cmocka_unit_test(test_missing_directory),
      cmocka_unit_test(test_replace_only_at_close),
      cmocka_unit_test(test_longest_names),
      cmocka_unit_test(test_relative_name),
      cmocka_unit_test(test_injected_write_errors),
      cmocka_unit_test(test_sigkill),
      cmocka_unit_test(test_crash_between_renames),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
