/*
 * A full file system (issue 14 item 1).  LMDB's lock file is sparse and
 * mapped, so touching its pages on a full file system used to kill the
 * process with SIGBUS; creating or opening a cache there must fail with
 * BC_ENOSPC instead.  Each test runs in a child process with a mount
 * namespace of its own, holding a 2 MiB tmpfs filled to the brim (the mount
 * goes away with the child).  Mounting needs root (CI runs as root): where
 * it is refused, the tests are skipped with a message.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

#define SKIPPED 77

/* In the child: a private mount namespace with a tmpfs of `size` at `dir`;
 * SKIPPED when mounting is not allowed here. */
static int mount_tmpfs(const char *dir, const char *size) {
  char opts[64];
  snprintf(opts, sizeof opts, "size=%s", size);
  if (unshare(CLONE_NEWNS) != 0 ||
      mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
      mount("tmpfs", dir, "tmpfs", 0, opts) != 0)
    return SKIPPED;
  return 0;
}

/* Fills the file system holding `dir` until writes fail with ENOSPC. */
static int fill_up(const char *dir) {
  char path[4200];
  snprintf(path, sizeof path, "%s/fill", dir);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return 1;
  static char block[4096];
  while (write(fd, block, sizeof block) > 0) {
  }
  int err = errno;
  /* Smaller writes take the last partial block. */
  while (write(fd, block, 1) > 0) {
  }
  close(fd);
  return err == ENOSPC ? 0 : 1;
}

typedef struct {
  char *dir;
  ts_config cfg;
  ts_shared *sh;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  if (f == NULL) return -1;
  f->dir = cu_tmp_dir();
  f->cfg = ts_config_default(100);
  f->sh = ts_shared_new(&f->cfg);
  if (f->sh == NULL) return -1;
  cu_watchdog(60);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  ts_shared_free(f->sh);
  cu_rm_rf(f->dir);
  free(f->dir);
  free(f);
  cu_watchdog(0);
  return 0;
}

/* Runs `body` in a child on a full 2 MiB tmpfs; skips the test when the
 * mount is refused, fails it when the child dies or reports a failure. */
static void on_full_tmpfs(fixture *f, int (*body)(fixture *f, const char *mnt)) {
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int rc = mount_tmpfs(f->dir, "2m");
    if (rc == 0) rc = fill_up(f->dir) ? 3 : body(f, f->dir);
    _exit(rc);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  if (WIFEXITED(status) && WEXITSTATUS(status) == SKIPPED) {
    print_message("skipped: mounting a tmpfs is not permitted here (needs "
                  "root; CI runs these as root)\n");
    skip();
  }
  if (WIFSIGNALED(status))
    fail_msg("the child was killed by signal %d (%s)", WTERMSIG(status),
             strsignal(WTERMSIG(status)));
  if (WEXITSTATUS(status) != 0)
    fail_msg("the child failed with status %d", WEXITSTATUS(status));
}

/* A new root on the full file system: BC_ENOSPC with a message. */
static int create_root(fixture *f, const char *mnt) {
  char root[4200];
  snprintf(root, sizeof root, "%s/r", mnt);
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = 10;
  o.prefetch_shards = -1;
  bc_cache *c = NULL;
  int rc = cu_open(&c, root, &f->cfg, f->sh, &o);
  if (rc == 0) {
    bc_cache_close(c);
    return 10;
  }
  if (rc != BC_ENOSPC) {
    fprintf(stderr, "open: %s: %s\n", bc_error_name(rc), bc_errmsg());
    return 11;
  }
  return 0;
}

static void test_create_on_full_disk(void **state) {
  on_full_tmpfs(*state, create_root);
}

/* The root's directories and metadata.json fit, LMDB's files do not: the
 * open is BC_ENOSPC, and once room is made the same root opens and fills. */
static int lock_file_no_room(fixture *f, const char *mnt) {
  char root[4200], fill[4200];
  snprintf(root, sizeof root, "%s/r", mnt);
  snprintf(fill, sizeof fill, "%s/fill", mnt);
  /* Make just enough room for the directories and metadata.json. */
  struct stat st;
  if (stat(fill, &st) != 0 || truncate(fill, st.st_size - 5 * 4096) != 0) return 20;
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = 10;
  o.prefetch_shards = -1;
  bc_cache *c = NULL;
  int rc = cu_open(&c, root, &f->cfg, f->sh, &o);
  if (rc == 0) bc_cache_close(c);
  else if (rc != BC_ENOSPC) return 21;
  if (unlink(fill) != 0) return 22;
  if (cu_open(&c, root, &f->cfg, f->sh, &o) != 0) return 23;
  bc_buf b = BC_BUF_INIT;
  int bad = 0;
  for (int64_t i = 0; i < 100 && !bad; i++) bad = cu_get_cmp(c, i, false, &b);
  bc_buf_release(&b);
  bc_cache_close(c);
  return bad ? 24 : 0;
}

static void test_lock_file_no_room(void **state) {
  on_full_tmpfs(*state, lock_file_no_room);
}

int main(void) {
  bc_set_notice_handler(NULL, NULL);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_create_on_full_disk, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lock_file_no_room, setup, teardown),
  };
  return cmocka_run_group_tests_name("cache on a full disk", tests, NULL, NULL);
}
