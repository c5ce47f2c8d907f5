/*
 * The lease environment (lease.h): its directory per boot, and opening it.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/internal.h"

#define LEASE_PREFIX "lease-"

/* Blocks of the lease lock file allocated beforehand (see state.c's
 * lock_file_allocate: a mapped sparse file faults on a full disk). */
#define LEASE_LOCK_BYTES (1024 * 64 + 4096)

/* The kernel's boot id into id[] (hex digits and dashes only), or
 * "unknown" without /proc: then the lease directory is never renewed, and
 * a system crash leaves claims that are taken over only as their owners'
 * pids look dead. */
static void boot_id(char id[64]) {
  snprintf(id, 64, "unknown");
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
  if (f == NULL) return;
  char buf[64];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  size_t k = 0;
  for (size_t i = 0; i < n && k < 63; i++)
    if ((buf[i] >= '0' && buf[i] <= '9') || (buf[i] >= 'a' && buf[i] <= 'f') ||
        buf[i] == '-')
      id[k++] = buf[i];
  if (k > 0) id[k] = '\0';
}

/* Removes lease directory `name` of locks_dir (its files, then itself). */
static void remove_lease_dir(int locks_fd, const char *name) {
  int fd = openat(locks_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (d == NULL) {
    if (fd >= 0) close(fd);
    return;
  }
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
      unlinkat(dirfd(d), e->d_name, 0);
  closedir(d);
  unlinkat(locks_fd, name, AT_REMOVEDIR);
}

int bc__lease_prepare(const char *locks_dir, unsigned mode, char **dir,
                      unsigned *stale) {
  char id[64], name[80];
  boot_id(id);
  snprintf(name, sizeof name, LEASE_PREFIX "%s", id);
  *stale = 0;
  *dir = bc__path_printf("%s/%s", locks_dir, name);
  if (*dir == NULL) return bc__error(BC_ENOMEM, "out of memory");
  int rc = 0;
  DIR *d = opendir(locks_dir);
  if (d == NULL) rc = bc__error_errno(errno, "%s", locks_dir);
  struct dirent *e;
  while (rc == 0 && (e = readdir(d)) != NULL)
    if (strncmp(e->d_name, LEASE_PREFIX, strlen(LEASE_PREFIX)) == 0 &&
        strcmp(e->d_name, name) != 0) {
      /* An earlier boot's: its claims are void, its pages unsynced. */
      remove_lease_dir(dirfd(d), e->d_name);
      (*stale)++;
    }
  if (d != NULL) closedir(d);
  /* Directories: x for whoever may read (the root's mode decides). */
  mode_t dmode = (mode_t)(mode | ((mode & 0444) >> 2));
  if (rc == 0 && mkdir(*dir, dmode) != 0 && errno != EEXIST)
    rc = bc__error_errno(errno, "%s", *dir);
  if (rc != 0) {
    free(*dir);
    *dir = NULL;
  }
  return rc;
}

/* The lock file's descriptor (replacing an old one) with its blocks
 * allocated; 0 or an errno code. */
static int lock_file(bc__lease *l, const char *dir, unsigned mode) {
  if (l->lock_fd >= 0) close(l->lock_fd);
  char *path = bc__path_printf("%s/lock.mdb", dir);
  if (path == NULL) return ENOMEM;
  l->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, (mode_t)mode);
  int rc = l->lock_fd < 0 ? errno : 0;
  free(path);
  struct stat st;
  if (rc == 0 && fstat(l->lock_fd, &st) != 0) rc = errno;
  if (rc == 0)
    rc = posix_fallocate(l->lock_fd, 0,
                         st.st_size > LEASE_LOCK_BYTES ? st.st_size : LEASE_LOCK_BYTES);
  if (rc == EINVAL || rc == EOPNOTSUPP) rc = 0;
  return rc;
}

int bc__lease_open(bc__lease *l, const char *dir, unsigned mode,
                   _Atomic bool *damaged) {
  MDB_txn *txn = NULL;
  l->env = NULL;
  /* (Made by bc__lease_prepare; again if a clear removed it meanwhile.) */
  mode_t dmode = (mode_t)(mode | ((mode & 0444) >> 2));
  int rc = mkdir(dir, dmode) != 0 && errno != EEXIST ? errno : 0;
  if (rc == 0) rc = lock_file(l, dir, mode);
  if (rc == 0) rc = mdb_env_create(&l->env);
  if (rc == 0) bc__mdb_guard_env(l->env, damaged);
  if (rc == 0) rc = mdb_env_set_maxdbs(l->env, 4);
  if (rc == 0) rc = mdb_env_set_mapsize(l->env, (size_t)1 << 28);
  if (rc == 0) rc = mdb_env_set_maxreaders(l->env, 1024);
  /* No sync at any commit: a process crash loses nothing (the pages are
   * in the page cache), a system crash voids the directory (lease.h). */
  if (rc == 0)
    rc = mdb_env_open(l->env, dir, MDB_NOTLS | MDB_NOSYNC | MDB_NOMETASYNC,
                      (mdb_mode_t)mode);
  if (rc == 0) {
    int dead = 0;
    mdb_reader_check(l->env, &dead);
  }
  if (rc == 0) rc = mdb_txn_begin(l->env, NULL, 0, &txn);
  if (rc == 0) rc = mdb_dbi_open(txn, "claim", MDB_CREATE, &l->claim);
  if (rc == 0) rc = mdb_dbi_open(txn, "access", MDB_CREATE, &l->access);
  if (rc == 0) rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &l->meta);
  if (rc == 0) {
    rc = mdb_txn_commit(txn);
    txn = NULL;
  }
  if (txn) mdb_txn_abort(txn);
  if (rc != 0 && l->env) {
    mdb_env_close(l->env);
    l->env = NULL;
  }
  return rc;
}

void bc__lease_discard(const char *dir) {
  static const char *const files[] = {"data.mdb", "lock.mdb"};
  for (size_t i = 0; dir != NULL && i < 2; i++) {
    char *path = bc__path_printf("%s/%s", dir, files[i]);
    if (path) unlink(path);
    free(path);
  }
}

void bc__lease_close(bc__lease *l) {
  if (l->env) mdb_env_close(l->env);
  l->env = NULL;
  if (l->lock_fd >= 0) close(l->lock_fd);
  l->lock_fd = -1;
}
