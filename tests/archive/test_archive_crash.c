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

#include "../testutil.h"
#include "common.h"

#define ROUNDS 8

static char *key(long i) { return tu_format("k/%03ld/%06ld", i % 13, i); }

/* Adds files from `start` on forever; after each commit writes the count
 * of committed files to fd. */
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
    if (bc_archive_add(a, k, buf, size, NULL) != 0) _exit(4);
    free(k);
    if (i % 20 == 19) {
      long done = i + 1;
      if (bc_archive_commit(a) != 0) _exit(5);
      if (write(fd, &done, sizeof done) != (ssize_t)sizeof done) _exit(6);
    }
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
    for (long c = 0; c < commits; c++)
      assert_int_equal(read(p[0], &done, sizeof done), (ssize_t)sizeof done);
    /* A few more adds' worth of work, then the kill (busy loop of
     * getppid calls: no timing is asserted, it only spreads the points). */
    for (uint64_t spin = tu_rng_below(&r, 200000); spin > 0; spin--) (void)getppid();
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kill_loop),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
