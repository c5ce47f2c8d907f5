/*
 * Creating a cache's root: a missing parent is an error unless
 * make_parents is set, which creates every missing component (mode 0755
 * less the umask, like the root); a component that is a file is a clear
 * error naming it; threads creating overlapping paths at once all succeed.
 *
 * Every test runs in its own temporary directory under a watchdog
 * (fixture.h).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"

/* The permission bits of a directory, failing the test unless it is one. */
static unsigned dir_mode(const char *path) {
  struct stat sb;
  if (stat(path, &sb) != 0) fail_msg("%s: missing", path);
  if (!S_ISDIR(sb.st_mode)) fail_msg("%s: not a directory", path);
  return (unsigned)(sb.st_mode & 07777);
}

static bool exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

static void test_missing_parents(void **state) {
  fixture *f = *state;
  char *a = cu_path(f->dir, "a");
  char *ab = cu_path(a, "b");
  char *root = cu_path(ab, "c");
  ts_config cfg = ts_config_default(25);
  f->sh = ts_shared_new(&cfg);
  assert_non_null(f->sh);
  bc_cache_options o = fx_quiet_options(10);
  /* Without make_parents: not found, and nothing is created. */
  CU_RC(cu_open(&f->c, root, &cfg, f->sh, &o), BC_ENOTFOUND);
  assert_null(f->c);
  assert_non_null(strstr(bc_errmsg(), "cannot create the directory"));
  assert_false(exists(a));
  /* With it: every missing component, with the root's mode rules. */
  mode_t old = umask(027);
  o.make_parents = true;
  int rc = cu_open(&f->c, root, &cfg, f->sh, &o);
  umask(old);
  CU_OK(rc);
  assert_int_equal(dir_mode(a), 0750);
  assert_int_equal(dir_mode(ab), 0750);
  assert_int_equal(dir_mode(root), 0750);
  char *shards = cu_path(root, "shards");
  assert_int_equal(dir_mode(shards), 0750);
  free(shards);
  cu_check_all(f->c, 25, false);
  uint64_t len = 0;
  CU_OK(bc_cache_len(f->c, &len));
  assert_int_equal(len, 25);
  /* An existing root (and parents) opens again with the option, and
   * keeps what it holds. */
  bc_cache_close(f->c);
  f->c = NULL;
  CU_OK(cu_open(&f->c, root, NULL, f->sh, &o));
  cu_check_all(f->c, 25, false);
  free(root);
  free(ab);
  free(a);
}

/* Repeated and trailing slashes and "." components are spelled as the
 * caller wrote them; each real directory is made once. */
static void test_path_spellings(void **state) {
  fixture *f = *state;
  size_t n = strlen(f->dir) + 64;
  char *root = malloc(n);
  assert_non_null(root);
  snprintf(root, n, "%s//x/./y///z/", f->dir);
  bc_cache_options o = fx_quiet_options(10);
  o.make_parents = true;
  CU_OK(bc_cache_open(&f->c, root, NULL, &o));
  snprintf(root, n, "%s/x/y/z/metadata.json", f->dir);
  assert_true(exists(root));
  bc_cache_close(f->c);
  f->c = NULL;
  /* A relative root, from a directory of its own. */
  char *cwd = getcwd(NULL, 0);
  assert_non_null(cwd);
  assert_int_equal(chdir(f->dir), 0);
  int rc = bc_cache_open(&f->c, "rel/one/two", NULL, &o);
  assert_int_equal(chdir(cwd), 0);
  CU_OK(rc);
  snprintf(root, n, "%s/rel/one/two/shards", f->dir);
  assert_int_equal(dir_mode(root) & 0700, 0700);
  free(cwd);
  free(root);
}

/* A component that exists as a file: BC_EINVAL naming it, with or without
 * make_parents, and nothing is created below it or beside it. */
static void test_file_in_the_way(void **state) {
  fixture *f = *state;
  char *file = cu_path(f->dir, "file");
  char *deep = cu_path(file, "x/y");
  char *mid = cu_path(f->dir, "m");
  char *midroot = cu_path(mid, "file2/z");
  cu_write_text(file, "not a directory\n");
  bc_cache_options o = fx_quiet_options(10);
  for (int parents = 0; parents < 2; parents++) {
    o.make_parents = parents;
    char want[4096];
    snprintf(want, sizeof want, "%s: exists and is not a directory", file);
    CU_RC(bc_cache_open(&f->c, deep, NULL, &o), BC_EINVAL);
    assert_null(f->c);
    assert_non_null(strstr(bc_errmsg(), want));
    /* The root itself a file. */
    CU_RC(bc_cache_open(&f->c, file, NULL, &o), BC_EINVAL);
    assert_non_null(strstr(bc_errmsg(), want));
  }
  /* The file deeper down, below a directory make_parents creates. */
  assert_int_equal(mkdir(mid, 0755), 0);
  char *file2 = cu_path(mid, "file2");
  cu_write_text(file2, "x");
  o.make_parents = true;
  CU_RC(bc_cache_open(&f->c, midroot, NULL, &o), BC_EINVAL);
  char want[4096];
  snprintf(want, sizeof want, "%s: exists and is not a directory", file2);
  assert_non_null(strstr(bc_errmsg(), want));
  free(file2);
  free(midroot);
  free(mid);
  free(deep);
  free(file);
}

/* Makes file modes apply to this process even as root: drops
 * CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from its capability sets (a
 * process may always lower its own).  False when that failed. */
static bool drop_dac_capabilities(void) {
  struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2];
  if (syscall(SYS_capget, &hdr, data) != 0) return false;
  unsigned drop = (1u << CAP_DAC_OVERRIDE) | (1u << CAP_DAC_READ_SEARCH);
  data[0].effective &= ~drop;
  data[0].permitted &= ~drop;
  data[0].inheritable &= ~drop;
  return syscall(SYS_capset, &hdr, data) == 0;
}

/* The open of test_parent_not_writable, run where file modes apply: 0 when
 * it fails with BC_EPERM naming the parent it could not create, 77 when
 * file modes cannot be made to apply, 1 otherwise. */
static int open_under_read_only_parent(const char *ro, const char *root) {
  if (geteuid() == 0 && !drop_dac_capabilities()) return 77;
  char *probe = cu_path(ro, "probe");
  bool modes_apply = mkdir(probe, 0755) != 0 && errno == EACCES;
  free(probe);
  if (!modes_apply) return 77;
  bc_cache *c = NULL;
  bc_cache_options o = fx_quiet_options(10);
  o.make_parents = true;
  int rc = bc_cache_open(&c, root, NULL, &o);
  char want[4096];
  snprintf(want, sizeof want, "%s/p: cannot create the directory", ro);
  bool ok = rc == BC_EPERM && strstr(bc_errmsg(), want) != NULL;
  if (!ok) fprintf(stderr, "rc %d: %s\n", rc, bc_errmsg());
  if (c != NULL) bc_cache_close(c);
  return ok ? 0 : 1;
}

/* A parent that cannot be created (no write permission on its parent):
 * BC_EPERM naming it.  Run in a child that, as root, first gives up the
 * capabilities that ignore file modes. */
static void test_parent_not_writable(void **state) {
  fixture *f = *state;
  char *ro = cu_path(f->dir, "ro");
  char *root = cu_path(ro, "p/q");
  assert_int_equal(mkdir(ro, 0555), 0);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) _exit(open_under_read_only_parent(ro, root));
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_int_equal(chmod(ro, 0755), 0);
  free(root);
  free(ro);
  assert_true(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) skip(); /* file modes cannot apply here */
  assert_int_equal(WEXITSTATUS(status), 0);
}

/* Threads creating roots with shared missing parents at once: each
 * succeeds (the parents' EEXIST races are not errors). */
#define RACERS 6

typedef struct racer {
  char root[4096];
  pthread_t thread;
  pthread_barrier_t *start;
  int rc;
  char msg[512];
} racer;

static void *race(void *arg) {
  racer *r = arg;
  bc_cache_options o = fx_quiet_options(10);
  o.make_parents = true;
  bc_cache *c = NULL;
  pthread_barrier_wait(r->start);
  r->rc = bc_cache_open(&c, r->root, NULL, &o);
  if (r->rc != 0) snprintf(r->msg, sizeof r->msg, "%s", bc_errmsg());
  bc_cache_close(c);
  return NULL;
}

static void test_racing_parents(void **state) {
  fixture *f = *state;
  for (int round = 0; round < 5; round++) {
    racer r[RACERS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, RACERS);
    for (int i = 0; i < RACERS; i++) {
      /* Two share the whole path (the same root), all share d/e/f. */
      snprintf(r[i].root, sizeof r[i].root, "%s/r%d/d/e/f/g%d", f->dir, round,
               i / 2);
      r[i].start = &start;
      r[i].rc = -1;
      r[i].msg[0] = '\0';
      assert_int_equal(pthread_create(&r[i].thread, NULL, race, &r[i]), 0);
    }
    for (int i = 0; i < RACERS; i++) pthread_join(r[i].thread, NULL);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < RACERS; i++) {
      if (r[i].rc != 0) fail_msg("%s: %s", r[i].root, r[i].msg);
      char *meta = cu_path(r[i].root, "metadata.json");
      assert_true(exists(meta));
      free(meta);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_missing_parents, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_path_spellings, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_file_in_the_way, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_parent_not_writable, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_racing_parents, fx_setup, fx_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
