/*
 * test_errors: the error table (codes, names, descriptions), detail
 * messages that name the file and record, and thread-local messages.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

static const struct {
  int code;
  const char *name;
} table[] = {
    {BC_OK, "BC_OK"},
    {BC_ENOMEM, "BC_ENOMEM"},
    {BC_EINVAL, "BC_EINVAL"},
    {BC_ENOTFOUND, "BC_ENOTFOUND"},
    {BC_ECORRUPT, "BC_ECORRUPT"},
    {BC_ERANGE, "BC_ERANGE"},
    {BC_EIO, "BC_EIO"},
    {BC_ENOSPC, "BC_ENOSPC"},
    {BC_ECLOSED, "BC_ECLOSED"},
    {BC_EUNSUPPORTED, "BC_EUNSUPPORTED"},
    {BC_EPERM, "BC_EPERM"},
    {BC_EINFINITE, "BC_EINFINITE"},
    {BC_ESOURCE, "BC_ESOURCE"},
    {BC_ENONDET, "BC_ENONDET"},
    {BC_ENOTCACHED, "BC_ENOTCACHED"},
    {BC_EVERSION, "BC_EVERSION"},
    {BC_EAGAIN, "BC_EAGAIN"},
    {BC_ECANCELED, "BC_ECANCELED"},
};
#define NCODES (sizeof table / sizeof table[0])

static void test_table(void **state) {
  (void)state;
  /* The codes named here keep their values (stable ABI). */
  assert_true(NCODES <= BC_ERROR_COUNT);
  for (size_t i = 0; i < NCODES; i++) {
    assert_int_equal(table[i].code, -(int)i);
    assert_string_equal(bc_error_name(table[i].code), table[i].name);
  }
  /* Every code of the table, 0 .. -(BC_ERROR_COUNT-1): a name "BC_..." and
   * a description, all distinct. */
  for (int i = 0; i < BC_ERROR_COUNT; i++) {
    const char *name = bc_error_name(-i);
    const char *text = bc_strerror(-i);
    assert_non_null(name);
    assert_non_null(text);
    assert_true(strncmp(name, "BC_", 3) == 0);
    assert_true(strlen(text) > 0);
    assert_string_not_equal(text, "unknown error");
    for (int j = 0; j < i; j++) {
      assert_string_not_equal(text, bc_strerror(-j));
      assert_string_not_equal(name, bc_error_name(-j));
    }
  }
  const int unknown[] = {1, 2, 100, -BC_ERROR_COUNT, -BC_ERROR_COUNT - 1, -1000,
                         INT_MIN, INT_MAX};
  for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
    assert_string_equal(bc_strerror(unknown[i]), "unknown error");
    const char *name = bc_error_name(unknown[i]);
    assert_non_null(name);
    for (int j = 0; j < BC_ERROR_COUNT; j++)
      assert_string_not_equal(name, bc_error_name(-j));
  }
}

static void test_version(void **state) {
  (void)state;
  char want[32];
  snprintf(want, sizeof want, "%d.%d.%d", BAGCACHE_VERSION_MAJOR,
           BAGCACHE_VERSION_MINOR, BAGCACHE_VERSION_PATCH);
  assert_string_equal(bc_version(), want);
}

/* A .bagz of 40 records whose record 37's frame is damaged. */
static char *make_corrupt_bag(const char *dir) {
  char *path = tu_join(dir, "damaged-record.bagz");
  tu_records recs = {0};
  char text[600];
  for (int i = 0; i < 40; i++) {
    int n = 0;
    for (int k = 0; k < 20; k++)
      n += snprintf(text + n, sizeof text - (size_t)n, "record %d line %d; ", i, k);
    tu_records_add(&recs, text, (size_t)n);
  }
  tu_write_bag(path, NULL, &recs);
  tu_records_free(&recs);
  /* Break record 37's frame (its limits are in the tail). */
  size_t n;
  unsigned char *file = tu_read_file(path, &n);
  uint64_t start = 0, end = 0, records_end = 0;
  for (int k = 0; k < 8; k++) records_end |= (uint64_t)file[n - 8 + (size_t)k] << (8 * k);
  for (int k = 0; k < 8; k++) {
    start |= (uint64_t)file[records_end + 8 * 36 + (size_t)k] << (8 * k);
    end |= (uint64_t)file[records_end + 8 * 37 + (size_t)k] << (8 * k);
  }
  assert_true(end - start > 12);
  memset(file + start, 0, 4); /* no zstd magic number: not a frame */
  tu_write_file(path, file, n);
  free(file);
  return path;
}

static void test_messages_name_file_and_index(void **state) {
  (void)state;
  char *tmp = tu_tempdir();
  char *path = make_corrupt_bag(tmp);
  bc_bag *bag = NULL;
  TU_OK(bc_bag_open(&bag, path, NULL));
  bc_buf buf = BC_BUF_INIT;
  TU_OK(bc_bag_get(bag, 36, &buf));
  TU_RC(bc_bag_get(bag, 37, &buf), BC_ECORRUPT);
  const char *msg = bc_errmsg();
  print_message("message: %s\n", msg);
  assert_non_null(strstr(msg, "damaged-record.bagz"));
  assert_non_null(strstr(msg, "37"));

  /* The same through a batch read and verify. */
  uint64_t idx[] = {1, 37, 2};
  bc_buf outs[3] = {BC_BUF_INIT, BC_BUF_INIT, BC_BUF_INIT};
  TU_RC(bc_bag_get_many(bag, idx, 3, outs), BC_ECORRUPT);
  assert_non_null(strstr(bc_errmsg(), "damaged-record.bagz"));
  assert_non_null(strstr(bc_errmsg(), "37"));
  for (int k = 0; k < 3; k++) bc_buf_release(&outs[k]);
  uint64_t bad = 0;
  TU_RC(bc_bag_verify(bag, &bad), BC_ECORRUPT);
  assert_int_equal(bad, 37);
  assert_non_null(strstr(bc_errmsg(), "37"));

  /* Out of range names the index and the length. */
  TU_RC(bc_bag_get(bag, 12345, &buf), BC_ERANGE);
  assert_non_null(strstr(bc_errmsg(), "12345"));
  assert_non_null(strstr(bc_errmsg(), "40"));
  bc_buf_release(&buf);
  bc_bag_close(bag);

  /* A missing file is named. */
  char *missing = tu_join(tmp, "missing-file.bag");
  TU_RC(bc_bag_open(&bag, missing, NULL), BC_ENOTFOUND);
  assert_non_null(strstr(bc_errmsg(), "missing-file.bag"));
  free(missing);

  /* A malformed tail is named. */
  char *dir = tu_data_dir();
  char *bad_tail = tu_join(dir, "corrupt/tail_past_eof.bag");
  TU_RC(bc_bag_open(&bag, bad_tail, NULL), BC_ECORRUPT);
  assert_non_null(strstr(bc_errmsg(), "tail_past_eof.bag"));
  free(bad_tail);
  free(dir);

  free(path);
  tu_rmtree(tmp);
  free(tmp);
}

/* Two threads fail differently at the same time; each keeps its own
 * message, and a thread that never failed has an empty one. */
typedef struct thread_arg {
  const char *spec;
  int expect;
  pthread_barrier_t *barrier;
  char message[1024];
  int rc;
  int mismatches;
  bool empty_at_start;
} thread_arg;

static void *fail_in_thread(void *p) {
  thread_arg *a = p;
  a->empty_at_start = bc_errmsg()[0] == '\0';
  bc_bag *bag = NULL;
  bc_buf buf = BC_BUF_INIT;
  int rc;
  for (int round = 0; round < 50; round++) {
    if (a->expect == BC_ENOTFOUND) {
      rc = bc_bag_open(&bag, a->spec, NULL);
    } else {
      rc = bc_bag_open(&bag, a->spec, NULL);
      if (rc == 0) {
        rc = bc_bag_get(bag, 0, &buf);
        bc_bag_close(bag);
      }
    }
    /* Both threads have failed before either reads its message. */
    pthread_barrier_wait(a->barrier);
    snprintf(a->message, sizeof a->message, "%s", bc_errmsg());
    a->rc = rc;
    pthread_barrier_wait(a->barrier);
    if (rc != a->expect) a->mismatches++;
  }
  bc_buf_release(&buf);
  return NULL;
}

static void test_thread_local_messages(void **state) {
  (void)state;
  char *tmp = tu_tempdir();
  char *dir = tu_data_dir();
  char *missing = tu_join(tmp, "thread-a-missing.bag");
  char *corrupt = tu_join(dir, "corrupt/bad_frame.bagz");
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, 2);
  thread_arg a = {missing, BC_ENOTFOUND, &barrier, "", 0, 0, false};
  thread_arg b = {corrupt, BC_ECORRUPT, &barrier, "", 0, 0, false};
  pthread_t ta, tb;
  assert_int_equal(pthread_create(&ta, NULL, fail_in_thread, &a), 0);
  assert_int_equal(pthread_create(&tb, NULL, fail_in_thread, &b), 0);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  pthread_barrier_destroy(&barrier);

  assert_true(a.empty_at_start);
  assert_true(b.empty_at_start);
  TU_RC(a.rc, BC_ENOTFOUND);
  TU_RC(b.rc, BC_ECORRUPT);
  assert_int_equal(a.mismatches, 0);
  assert_int_equal(b.mismatches, 0);
  print_message("thread a: %s\nthread b: %s\n", a.message, b.message);
  assert_non_null(strstr(a.message, "thread-a-missing.bag"));
  assert_null(strstr(a.message, "bad_frame"));
  assert_non_null(strstr(b.message, "bad_frame.bagz"));
  assert_null(strstr(b.message, "thread-a-missing"));

  free(corrupt);
  free(missing);
  free(dir);
  tu_rmtree(tmp);
  free(tmp);
}

/* ---- bad input is an error, never a crash --------------------------------- */

/* A counted payload, as a binding's exception object. */
typedef struct {
  int refs;
} counted;
static void c_retain(void *p) { __atomic_add_fetch(&((counted *)p)->refs, 1, __ATOMIC_SEQ_CST); }
static void c_release(void *p) { __atomic_sub_fetch(&((counted *)p)->refs, 1, __ATOMIC_SEQ_CST); }

static void *restore_elsewhere(void *arg) {
  /* Restored in another thread, then left there: the thread's exit
   * releases it. */
  bc_error_restore(arg);
  return bc_error_payload();
}

static void test_save_restore_wrap_and_payloads(void **state) {
  (void)state;
  counted obj = {0};
  int rc = bc_set_error(BC_EIO, EIO, "disk.bag: read failed");
  bc_error_set_payload(&obj, c_retain, c_release);
  assert_int_equal(obj.refs, 1);
  assert_ptr_equal(bc_error_payload(), &obj);
  /* A wrap keeps errno and payload, and may quote the message. */
  assert_int_equal(bc_error_wrap(rc, "shard 3: %s", bc_errmsg()), BC_EIO);
  assert_string_equal(bc_errmsg(), "shard 3: disk.bag: read failed");
  assert_int_equal(bc_errno(), EIO);
  assert_ptr_equal(bc_error_payload(), &obj);

  bc_error_state st = BC_ERROR_STATE_INIT;
  bc_error_save(&st, rc);
  assert_int_equal(obj.refs, 2);
  assert_int_equal(st.code, BC_EIO);
  /* Cleanup that fails on its own replaces the thread's error... */
  bc_set_errmsg(BC_ENOMEM, "out of memory");
  assert_null(bc_error_payload());
  assert_int_equal(bc_errno(), 0);
  assert_int_equal(obj.refs, 1);
  /* ... and the saved failure comes back whole. */
  assert_int_equal(bc_error_restore(&st), BC_EIO);
  assert_string_equal(bc_errmsg(), "shard 3: disk.bag: read failed");
  assert_int_equal(bc_errno(), EIO);
  assert_ptr_equal(bc_error_payload(), &obj);
  assert_int_equal(obj.refs, 2);
  bc_error_restore(&st); /* restoring it over itself */
  assert_int_equal(obj.refs, 2);

  /* One state restored in another thread: same error there. */
  pthread_t t;
  void *seen = NULL;
  assert_int_equal(pthread_create(&t, NULL, restore_elsewhere, &st), 0);
  assert_int_equal(pthread_join(t, &seen), 0);
  assert_ptr_equal(seen, &obj);
  assert_int_equal(obj.refs, 2); /* the thread's reference went with it */

  bc_error_state_clear(&st);
  assert_int_equal(st.code, 0);
  assert_null(st.payload);
  assert_int_equal(obj.refs, 1);
  bc_error_clear();
  assert_int_equal(obj.refs, 0);
  assert_string_equal(bc_errmsg(), "");
  assert_null(bc_error_payload());
  /* Replacing a payload releases the old one; NULL clears it. */
  counted other = {0};
  bc_set_errmsg(BC_ESOURCE, "failed");
  bc_error_set_payload(&obj, c_retain, c_release);
  bc_error_set_payload(&other, c_retain, c_release);
  assert_int_equal(obj.refs, 0);
  assert_int_equal(other.refs, 1);
  assert_string_equal(bc_errmsg(), "failed");
  bc_error_set_payload(NULL, NULL, NULL);
  assert_int_equal(other.refs, 0);
}

static int calls_left(void *ctx) { return --*(int *)ctx <= 0; }

static void test_interrupt_handler(void **state) {
  (void)state;
  assert_int_equal(bc_check_interrupt(), 0); /* none set */
  int left = 2;
  bc_interrupt_handler prev = bc_set_interrupt_handler(calls_left, &left);
  assert_null(prev.fn);
  assert_int_equal(bc_check_interrupt(), 0); /* called at once: 1 left */
  assert_int_equal(left, 1);
  assert_int_equal(bc_check_interrupt(), 0); /* within 10 ms: not called */
  assert_int_equal(left, 1);
  usleep(30 * 1000);
  assert_int_equal(bc_check_interrupt(), BC_ECANCELED);
  assert_int_equal(left, 0);
  assert_true(strlen(bc_errmsg()) > 0);
  bc_interrupt_handler mine = bc_set_interrupt_handler(prev.fn, prev.ctx);
  assert_ptr_equal(mine.fn, calls_left);
  assert_ptr_equal(mine.ctx, &left);
  assert_int_equal(bc_check_interrupt(), 0);
  assert_string_equal(bc_strerror(BC_ECANCELED), "interrupted");
}

static void test_directories_are_not_bags(void **state) {
  (void)state;
  char *tmp = tu_tempdir();
  char *sub = tu_join(tmp, "adir.bag");
  assert_int_equal(mkdir(sub, 0755), 0);
  bc_bag *bag = NULL;
  int rc = bc_bag_open(&bag, sub, NULL);
  assert_int_not_equal(rc, BC_OK);
  assert_null(bag);
  print_message("directory as a bag: %s (%s)\n", bc_error_name(rc), bc_errmsg());
  bc_writer *w = NULL;
  rc = bc_writer_open(&w, sub, NULL);
  if (rc == BC_OK) {
    /* Opening may defer the failure to close, which cannot replace a
     * directory with a file. */
    TU_OK(bc_writer_write(w, "x", 1));
    rc = bc_writer_close(w);
    bc_writer_free(w);
  }
  assert_int_not_equal(rc, BC_OK);
  print_message("directory as a writer path: %s (%s)\n", bc_error_name(rc), bc_errmsg());
  struct stat st;
  assert_int_equal(stat(sub, &st), 0);
  assert_true(S_ISDIR(st.st_mode));
  assert_int_equal(tu_count_entries(tmp, "."), 0);

  char *slash = tu_format("%s/", tmp);
  w = NULL;
  TU_RC(bc_writer_open(&w, slash, NULL), BC_EINVAL);
  assert_null(w);
  free(slash);
  free(sub);
  tu_rmtree(tmp);
  free(tmp);
}

/* A file cut short after it was opened: the pread-based cache policies
 * report it as corrupt.  Runs in a child, so a crash is reported rather
 * than taking the test program down. */
static int truncated_read_status(const char *path, bc_cache_policy policy,
                                 int *child_rc) {
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    /* cmocka's handlers would turn a crash into a test failure here. */
    signal(SIGBUS, SIG_DFL);
    signal(SIGSEGV, SIG_DFL);
    close(fds[0]);
    bc_reader_options ro = BC_READER_OPTIONS_INIT;
    ro.cache_policy = policy;
    ro.limits_storage = BC_LIMITS_IN_MEMORY;
    bc_bag *bag = NULL;
    int rc = bc_bag_open(&bag, path, &ro);
    if (rc == 0) {
      bc_buf buf = BC_BUF_INIT;
      rc = bc_bag_get(bag, 0, &buf); /* loads the limits */
      if (rc == 0 && truncate(path, 4096) != 0) rc = 100;
      if (rc == 0) rc = bc_bag_get(bag, bc_bag_len(bag) - 1, &buf);
      bc_buf_release(&buf);
      bc_bag_close(bag);
    }
    if (write(fds[1], &rc, sizeof rc) != (ssize_t)sizeof rc) _exit(3);
    _exit(0);
  }
  close(fds[1]);
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  *child_rc = 12345;
  if (read(fds[0], child_rc, sizeof *child_rc) != (ssize_t)sizeof *child_rc)
    *child_rc = 12345;
  close(fds[0]);
  return status;
}

static void test_file_truncated_after_open(void **state) {
  (void)state;
  tu_records recs = {0};
  unsigned char block[1000];
  for (size_t i = 0; i < 100; i++) {
    memset(block, (int)i, sizeof block);
    tu_records_add(&recs, block, sizeof block);
  }
  char *tmp = tu_tempdir();
  char *path = tu_join(tmp, "shrinks.bag");
  const bc_cache_policy policies[] = {BC_CACHE_DROP_AFTER_READ, BC_CACHE_DIRECT_IO,
                                      BC_CACHE_SYSTEM};
  tu_capture_notices();
  for (size_t p = 0; p < 3; p++) {
    tu_write_bag(path, NULL, &recs);
    int rc;
    int status = truncated_read_status(path, policies[p], &rc);
    if (!WIFEXITED(status))
      fail_msg("cache policy %d: reading a file truncated after open killed "
               "the process (signal %d) instead of returning BC_ECORRUPT",
               (int)policies[p], WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    assert_int_equal(WEXITSTATUS(status), 0);
    TU_RC(rc, BC_ECORRUPT);
  }
  free(path);
  tu_rmtree(tmp);
  free(tmp);
  tu_records_free(&recs);
}

/* A mapped file cut inside its last page reads as zeros past the cut, not
 * as a fault: zeroed limits must not pass as empty records (issue 14, item
 * 2: a cache served b"" for every record of a shard truncated under it).
 * Every read path is tried: copy, zero-copy view, batches, limits kept on
 * disk and in memory.  Records that really are empty still read as such. */
static void test_truncated_inside_last_page(void **state) {
  (void)state;
  char *tmp = tu_tempdir();
  char *path = tu_join(tmp, "cut.bag");
  tu_records recs = {0};
  char rec[32];
  for (int i = 0; i < 10; i++) {
    int n = snprintf(rec, sizeof rec, "record-%04d", 10 + i);
    tu_records_add(&recs, rec, (size_t)n);
  }
  const bc_limits_storage storages[] = {BC_LIMITS_ON_DISK, BC_LIMITS_IN_MEMORY};
  for (size_t st = 0; st < 2; st++) {
    tu_write_bag(path, NULL, &recs); /* 110 bytes of records, 80 of limits */
    bc_reader_options ro = BC_READER_OPTIONS_INIT;
    ro.limits_storage = storages[st];
    bc_bag *bag = NULL;
    TU_OK(bc_bag_open(&bag, path, &ro));
    assert_int_equal(truncate(path, 95), 0);
    bc_buf buf = BC_BUF_INIT;
    for (uint64_t i = 0; i < 10; i++) {
      int rc = bc_bag_get(bag, i, &buf);
      if (rc == 0) /* bytes read before the cut are still the record's */
        TU_BUF_EQ(&buf, recs.data[i], recs.size[i]);
      else
        TU_RC(rc, BC_ECORRUPT);
      if (i == 9) TU_RC(rc, BC_ECORRUPT); /* its limits are past the cut */
    }
    const void *view;
    size_t size;
    TU_RC(bc_bag_get_view(bag, 9, &view, &size), BC_ECORRUPT);
    uint64_t idx[2] = {0, 9};
    const void *views[2];
    size_t sizes[2];
    TU_RC(bc_bag_get_views(bag, idx, 2, views, sizes), BC_ECORRUPT);
    bc_buf outs[2] = {BC_BUF_INIT, BC_BUF_INIT};
    TU_RC(bc_bag_get_many(bag, idx, 2, outs), BC_ECORRUPT);
    uint64_t bad = 0;
    TU_RC(bc_bag_verify(bag, &bad), BC_ECORRUPT);
    bc_buf_release(&outs[0]);
    bc_buf_release(&outs[1]);
    bc_buf_release(&buf);
    bc_bag_close(bag);
  }
  /* Empty records ending at offset 0 are real: served, also by views. */
  tu_records empties = {0};
  tu_records_add(&empties, "", 0);
  tu_records_add(&empties, "", 0);
  tu_records_add(&empties, "x", 1);
  tu_write_bag(path, NULL, &empties);
  bc_bag *bag = NULL;
  TU_OK(bc_bag_open(&bag, path, NULL));
  bc_buf buf = BC_BUF_INIT;
  for (uint64_t i = 0; i < 3; i++) {
    TU_OK(bc_bag_get(bag, i, &buf));
    TU_BUF_EQ(&buf, empties.data[i], empties.size[i]);
  }
  uint64_t idx[3] = {1, 2, 0};
  const void *views[3];
  size_t sizes[3] = {99, 99, 99};
  TU_OK(bc_bag_get_views(bag, idx, 3, views, sizes));
  assert_int_equal(sizes[0], 0);
  assert_int_equal(sizes[1], 1);
  assert_memory_equal(views[1], "x", 1);
  assert_int_equal(sizes[2], 0);
  bc_buf_release(&buf);
  bc_bag_close(bag);
  tu_records_free(&empties);
  tu_records_free(&recs);
  free(path);
  tu_rmtree(tmp);
  free(tmp);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table),
      cmocka_unit_test(test_version),
      cmocka_unit_test(test_messages_name_file_and_index),
      cmocka_unit_test(test_thread_local_messages),
      cmocka_unit_test(test_save_restore_wrap_and_payloads),
      cmocka_unit_test(test_interrupt_handler),
      cmocka_unit_test(test_directories_are_not_bags),
      cmocka_unit_test(test_file_truncated_after_open),
      cmocka_unit_test(test_truncated_inside_last_page),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
