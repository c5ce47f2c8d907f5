/*
 * tests/archive/test_archive_crash.c - SIGKILL during a loop of adds: after
 * each kill the archive opens (read-only, then for writing) and every file
 * its index holds reads back exactly, verify passes, and no file that was
 * committed is lost.  The child is killed at a point chosen by the number
 * of commits it has reported, plus a pseudo-random number of adds after
 * that, so kills land between commits, inside writes and inside commits; the
 * first round is killed before the archive was ever closed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "../testutil.h"
#include "common.h"

#define ROUNDS 12

static char *key(long i) { return tu_format("k/%03ld/%06ld", i % 13, i); }

/* Adds files from `start` on forever, committing every 20; after each add
 * writes the number of files added to fd, negated after a commit. */
static void child(const char *path, long start, int fd) {
  bc_archive_options o = BC_ARCHIVE_OPTIONS_INIT;
  bc_archive *a = NULL;
  unsigned char buf[4000];
  o.readonly = false;
  o.shard_size_limit = 50000;
  if (bc_archive_open(&a, path, &o) != 0) _exit(3);
  for (long i = start;; i++) {
    char *k = key(i);
    size_t size = ta_size(k, sizeof buf);
    ta_content(k, size, buf);
    long done = i + 1;
    if (bc_archive_add(a, k, buf, size, NULL) != 0) _exit(4);
    free(k);
    if (i % 20 == 19) {
      if (bc_archive_commit(a) != 0) _exit(5);
      done = -done;
    }
    if (write(fd, &done, sizeof done) != (ssize_t)sizeof done) _exit(6);
  }
}

/* Checks every indexed file; returns how many there are and the next key
 * number to add (one past the largest). */
static long check_all(const char *path, long *next) {
  bc_archive *a = ta_open_ro(path);
  bc_archive_dirent *top = NULL;
  size_t ntop = 0;
  long count = 0;
  unsigned char want[4000], got[4000];
  *next = 0;
  assert_int_equal(bc_archive_verify(a), 0);
  if (bc_archive_isdir(a, "k") == 1)
    assert_int_equal(bc_archive_listdir(a, "k", &top, &ntop), 0);
  for (size_t d = 0; d < ntop; d++) {
    char *sub = tu_format("k/%s", top[d].name);
    bc_archive_dirent *e = NULL;
    size_t n = 0;
    assert_int_equal(bc_archive_listdir(a, sub, &e, &n), 0);
    for (size_t j = 0; j < n; j++) {
      long i = strtol(e[j].name, NULL, 10);
      char *k = key(i);
      size_t size = ta_size(k, sizeof want), g = 0;
      ta_content(k, size, want);
      if (bc_archive_read(a, k, got, sizeof got, &g) != 0)
        fail_msg("%s: %s", k, bc_errmsg());
      tu_assert_bytes(got, g, want, size, k);
      if (i + 1 > *next) *next = i + 1;
      count++;
      free(k);
    }
    free(e);
    free(sub);
  }
  assert_int_equal(bc_archive_num_files(a), count);
  free(top);
  assert_int_equal(bc_archive_close(a), 0);
  return count;
}

static void test_kill_loop(void **state) {
  char *dir = tu_tempdir(), *path = tu_join(dir, "arch");
  long next = 0;
  tu_rng r;
  (void)state;
  tu_rng_seed(&r, 11);
  for (int round = 0; round < ROUNDS; round++) {
    int p[2];
    pid_t pid;
    long done = 0, count, commits = 1 + (long)tu_rng_below(&r, 4);
    int status;
    assert_int_equal(pipe(p), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
      close(p[0]);
      child(path, next, p[1]);
    }
    close(p[1]);
    /* `commits` commits, then `extra` adds into the next transaction (so
     * most kills leave a hot journal), then a short spin that spreads the
     * kill over the next add or commit (no timing is asserted). */
    for (long c = 0, extra = (long)tu_rng_below(&r, 19); c < commits || extra > 0;) {
      long msg;
      assert_int_equal(read(p[0], &msg, sizeof msg), (ssize_t)sizeof msg);
      if (msg < 0) {
        done = -msg;
        c++;
      } else if (c >= commits) {
        extra--;
      }
    }
    for (uint64_t spin = tu_rng_below(&r, 20000); spin > 0; spin--) (void)getppid();
    kill(pid, SIGKILL);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    close(p[0]);
    count = check_all(path, &next);
    /* Everything committed is there; nothing past what was added. */
    assert_true(count >= done);
    assert_int_equal(count, next);
    /* A writer opens it (recovering), and then a reader again. */
    {
      bc_archive *a = ta_open_rw(path, 0);
      assert_int_equal(bc_archive_num_files(a), count);
      assert_int_equal(bc_archive_close(a), 0);
    }
    assert_int_equal(check_all(path, &next), count);
  }
  tu_rmtree(dir);
  free(path);
  free(dir);
}

/* A writer killed inside its commit leaves a hot journal (SQLite makes a
 * journal hot only once it is synced: at a commit, or when the page cache
 * spills).  Made here deterministically: a child changes every file row
 * with a one-page cache, so pages spill into the index, and kills itself.
 * A read-only open must still see the last commit, exactly. */
static void test_hot_journal(void **state) {
  char *dir = tu_tempdir(), *path = tu_join(dir, "arch");
  char *ip = ta_index_path(path), *jp = tu_format("%s-journal", ip);
  bc_archive *a = ta_open_rw(path, 0);
  unsigned char buf[4000];
  long next = 0;
  pid_t pid;
  int status;
  (void)state;
  for (long i = 0; i < 400; i++) {
    char *k = key(i);
    size_t size = ta_size(k, sizeof buf);
    ta_content(k, size, buf);
    assert_int_equal(bc_archive_add(a, k, buf, size, NULL), 0);
    free(k);
  }
  assert_int_equal(bc_archive_close(a), 0);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(ip, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK ||
        sqlite3_exec(db, "PRAGMA cache_size = 1; PRAGMA cache_spill = 1; BEGIN;"
                         "UPDATE files SET offset = offset + 1000000;"
                         "UPDATE files SET size = 1;", NULL, NULL, NULL) != SQLITE_OK)
      _exit(3);
    raise(SIGKILL);
    _exit(4);
  }
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFSIGNALED(status));
  assert_true(tu_exists(jp));
  assert_int_equal(check_all(path, &next), 400);
  assert_int_equal(next, 400);
  assert_false(tu_exists(jp));
  free(jp);
  free(ip);
  tu_rmtree(dir);
  free(path);
  free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kill_loop),
      cmocka_unit_test(test_hot_journal),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
