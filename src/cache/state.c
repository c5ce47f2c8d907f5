/*
 * The shared state: one LMDB environment per root per process.
 *
 * LMDB must not be opened twice in one process (its locks are per process),
 * so environments live in a process-wide registry keyed by the locks
 * directory, shared by reference count.  MDB_NOTLS because read
 * transactions are begun and ended on worker threads.  After fork() the
 * child must not use the parent's environment: every transaction checks the
 * pid and reopens the environment in a new process.  On open, slots of dead
 * readers are freed (mdb_reader_check).  An environment LMDB reports as
 * corrupt (or of another version) is moved aside and recreated; the caller
 * is told it is fresh and rebuilds it from a scan of shards/.  Only when no
 * other process has it open: every process holds a shared flock(2) on
 * locks/users for as long as it has the environment open, and the repair
 * needs it exclusively (moving the files aside under a process still using
 * them would leave two states that do not know of each other).  The first
 * process to open it (locks/users exclusive) also validates data.mdb before
 * LMDB reads it (validate.c), and every LMDB call runs in a fault scope
 * (lmdb_guard.c).  Taking locks/users happens under locks/gate, an
 * exclusive flock that serialises opens across processes, because flock
 * conversions are not atomic.
 *
 * Beside the main environment, the lease environment (lease.h) holds
 * claims and access-clock bumps, unsynced; it is opened, reopened after
 * fork and closed with the main one, and its directory is renewed (a new
 * boot, an empty lease state) under the gate.
 *
 * Lock order: gate_lock (a locks/gate descriptor held, gate_take), then
 * registry_lock, then an environment's fills.lock (only across fork);
 * LMDB calls made under registry_lock are open/close only.  Across
 * processes: the main environment's write lock, then the lease
 * environment's (store_lmdb.c).  The wait for
 * another process's gate polls the interrupt handler with no lock held.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache/internal.h"

struct bc__env {
  char *dir;
  unsigned mode;
  int refs;           /* registry_lock */
  pid_t pid;          /* process that opened `env` */
  MDB_env *env;
  _Atomic bool damaged; /* an LMDB call faulted on env (lmdb_guard.c) */
  int users_fd;       /* locks/users, flock(LOCK_SH) while open */
  int lock_fd;        /* locks/lock.mdb, ours: see lock_file_allocate */
  MDB_dbi shard, sum, meta;
  char *lease_dir;    /* locks/lease-BOOT (lease.h) */
  bc__lease lease;    /* claims and access bumps, unsynced (lease.h) */
  _Atomic bool renewed; /* its directory was renewed at this open */
  pthread_mutex_t reopen_lock; /* serialises the reopen after fork */
  bc__fill_registry fills;
  struct bc__env *next;
};

/* The map size: the state can never grow past it (MDB_MAP_FULL). */
#define MAP_SIZE ((size_t)1 << 30)

/* gate_lock: held while this process holds a descriptor of a locks/gate
 * (gate_take), taken before registry_lock, and by fork (both, in that
 * order). */
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static bc__env *registry;

bc__fill_registry *bc__env_fills(bc__env *e) { return &e->fills; }

/* fork: hold the registry and every fill registry across fork(); in the
 * child the parent's fills are forgotten (their threads are gone). */
void bc__envs_before_fork(void) {
  pthread_mutex_lock(&gate_lock);
  pthread_mutex_lock(&registry_lock);
  for (bc__env *e = registry; e; e = e->next) pthread_mutex_lock(&e->fills.lock);
}

void bc__envs_after_fork(bool child) {
  for (bc__env *e = registry; e; e = e->next) {
    if (child) {
      e->fills.list = NULL;
      pthread_cond_init(&e->fills.cond, NULL);
    }
    pthread_mutex_unlock(&e->fills.lock);
  }
  pthread_mutex_unlock(&registry_lock);
  pthread_mutex_unlock(&gate_lock);
}


int bc__mdb_error(int rc, const char *what) {
  if (rc == BC__MDB_FAULT)
    return bc__error(BC_ECORRUPT,
                     "%s: the shared state (locks/data.mdb) is damaged: %s; "
                     "it is rebuilt from the shard files by the first open "
                     "after every process has closed it", what,
                     bc__mdb_fault_text());
  int code = rc == MDB_CORRUPTED || rc == MDB_INVALID || rc == MDB_PAGE_NOTFOUND
                 ? BC_ECORRUPT
             : rc == MDB_VERSION_MISMATCH ? BC_EVERSION
             : rc == MDB_MAP_FULL ? BC_ENOSPC
             : rc == ENOMEM ? BC_ENOMEM
             : rc > 0 ? bc__errno_code(rc)
                      : BC_EIO;
  /* A positive rc is a system errno LMDB passed on: keep it (bc_errno). */
  return bc_set_error(code, rc > 0 ? rc : 0, "%s: %s", what, mdb_strerror(rc));
}

/* LMDB's lock file is sparse (ftruncate) and mapped: on a full file system
 * the first touch of one of its pages is SIGBUS.  Its blocks are allocated
 * beforehand instead, so a full disk is ENOSPC: up to LOCK_BYTES before
 * LMDB sizes it (its reader table: 64 bytes a reader and a header of a few
 * cache lines, under 4 KiB), and whatever size LMDB gave it right after
 * (before any reader slot is used). */
#define LOCK_BYTES (1024 * 64 + 4096)

static int lock_file_allocate(bc__env *e, bool whole) {
  if (!whole) {
    /* A descriptor of our own, kept open until LMDB has closed the file:
     * closing any descriptor of a file drops every fcntl lock the process
     * holds on it, LMDB's included (another process would then take itself
     * for the first user and reset the lock file under us).  In a forked
     * child the parent's descriptor is replaced (the child holds no lock
     * yet). */
    if (e->lock_fd >= 0) close(e->lock_fd);
    char *path = bc__path_printf("%s/lock.mdb", e->dir);
    if (path == NULL) return ENOMEM;
    e->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, (mode_t)e->mode);
    int err = errno;
    free(path);
    if (e->lock_fd < 0) return err;
  }
  struct stat st;
  int rc = fstat(e->lock_fd, &st) != 0 ? errno : 0;
  off_t len = whole && st.st_size > LOCK_BYTES ? st.st_size : LOCK_BYTES;
  /* posix_fallocate changes no byte: safe while others use the file. */
  if (rc == 0) rc = posix_fallocate(e->lock_fd, 0, len);
  if (rc == EINVAL || rc == EOPNOTSUPP) rc = 0; /* cannot tell: as before */
  return rc;
}

/* Opens the environment and its databases; 0, or an LMDB error code. */
static int env_open_raw(bc__env *e) {
  MDB_txn *txn = NULL;
  int rc = lock_file_allocate(e, false);
  if (rc == 0) rc = mdb_env_create(&e->env);
  if (rc == 0) bc__mdb_guard_env(e->env, &e->damaged);
  if (rc == 0) rc = mdb_env_set_maxdbs(e->env, 4);
  if (rc == 0) rc = mdb_env_set_mapsize(e->env, MAP_SIZE);
  if (rc == 0) rc = mdb_env_set_maxreaders(e->env, 1024);
  /* MDB_NOMETASYNC: one sync per commit instead of two.  A system crash
   * may lose the last transactions but never breaks the database; the
   * shard files stay the truth (see doc/cache.md). */
  if (rc == 0)
    rc = mdb_env_open(e->env, e->dir, MDB_NOTLS | MDB_NOMETASYNC,
                      (mdb_mode_t)e->mode);
  if (rc == 0) rc = lock_file_allocate(e, true);
  if (rc == 0) {
    int dead = 0;
    mdb_reader_check(e->env, &dead);
  }
  if (rc == 0) rc = mdb_txn_begin(e->env, NULL, 0, &txn);
  if (rc == 0) rc = mdb_dbi_open(txn, "shard", MDB_CREATE, &e->shard);
  if (rc == 0) rc = mdb_dbi_open(txn, "sum", MDB_CREATE, &e->sum);
  if (rc == 0) rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &e->meta);
  if (rc == 0) {
    rc = mdb_txn_commit(txn);
    txn = NULL;
  }
  if (txn) mdb_txn_abort(txn);
  if (rc == 0) rc = bc__lease_open(&e->lease, e->lease_dir, e->mode, &e->damaged);
  if (rc != 0 && e->env) {
    mdb_env_close(e->env);
    e->env = NULL;
  }
  if (rc == 0) e->pid = getpid();
  return rc;
}

/* Called alone (no other process has the environment open, and none can
 * open it meanwhile): no claim can be live.  A FILLING entry whose owner
 * still looks alive was made by damage (say pid 1 with no start time) or
 * left by a process that failed to release it, and would make every
 * reader of its shard poll for as long as that process lives: such
 * entries are deleted, with entries of unknown state and entries that do
 * not decode.  Claims of dead owners stay: the takeover removes the file
 * their owner may have renamed into shards/.  *reaped: how many.  0 or an
 * LMDB error code. */
static int reap_claims(MDB_env *env, MDB_dbi db, size_t *reaped) {
  MDB_txn *t = NULL;
  MDB_cursor *cur = NULL;
  MDB_val *keys = NULL;
  size_t n = 0, cap = 0;
  int rc = mdb_txn_begin(env, NULL, 0, &t);
  if (rc == 0) rc = mdb_cursor_open(t, db, &cur);
  MDB_val k, v;
  for (int op = MDB_FIRST; rc == 0 && mdb_cursor_get(cur, &k, &v, op) == 0;
       op = MDB_NEXT) {
    uint64_t shard;
    bc__shard_rec r;
    if (bc__rec_decode(&k, &v, &shard, &r) &&
        (r.state == SHARD_PRESENT ||
         (r.state == SHARD_FILLING && !bc__owner_alive(r.owner))))
      continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 16;
      MDB_val *p = realloc(keys, cap * sizeof *p);
      if (p == NULL) {
        rc = ENOMEM;
        break;
      }
      keys = p;
    }
    keys[n].mv_size = k.mv_size;
    keys[n].mv_data = malloc(k.mv_size ? k.mv_size : 1);
    if (keys[n].mv_data == NULL) {
      rc = ENOMEM;
      break;
    }
    memcpy(keys[n++].mv_data, k.mv_data, k.mv_size);
  }
  if (cur) mdb_cursor_close(cur);
  for (size_t i = 0; rc == 0 && i < n; i++) rc = mdb_del(t, db, &keys[i], NULL);
  if (rc == 0 && n > 0) {
    rc = mdb_txn_commit(t);
    t = NULL;
  }
  if (t) mdb_txn_abort(t);
  for (size_t i = 0; i < n; i++) free(keys[i].mv_data);
  free(keys);
  if (rc == 0) *reaped = n;
  return rc;
}

/* Moves a damaged environment aside (locks/data.mdb -> .damaged), and
 * empties the lease environment's directory (its claims and access times
 * name the shards of the state discarded; alone: nobody uses it). */
static void env_discard_files(const char *dir, const char *lease_dir) {
  bc__lease_discard(lease_dir);
  char *a = bc__path_printf("%s/data.mdb", dir);
  char *b = bc__path_printf("%s/data.mdb.damaged", dir);
  char *lock = bc__path_printf("%s/lock.mdb", dir);
  if (a && b) rename(a, b);
  if (lock) unlink(lock);
  free(lock);
  free(b);
  free(a);
}

static bc__env *registry_find(const char *dir) {
  bc__env *e = registry;
  while (e != NULL && strcmp(e->dir, dir) != 0) e = e->next;
  return e;
}

/* Takes DIR/gate exclusively into *fd.  Another process holds it while it
 * opens the state (validating data.mdb) or while bc_cache_clear deletes
 * the root: polled every BC__POLL_MS with the interrupt handler, no lock
 * held (a handler may take a language's global lock, which a thread
 * holding registry_lock across fork() may wait for).  BC_EAGAIN when the
 * gate was unlinked meanwhile: the root was cleared (the caller makes its
 * directories again and retries). */
static int gate_take(const char *dir, unsigned mode, int *fd) {
  char *path = bc__path_printf("%s/gate", dir);
  if (path == NULL) return bc__error(BC_ENOMEM, "out of memory");
  int rc = 0, g = -1;
  for (;;) {
    /* The descriptor exists only under gate_lock, which fork() waits for:
     * a child never inherits it (a flock belongs to the open file, so an
     * inherited one would hold the gate for as long as the child lives). */
    pthread_mutex_lock(&gate_lock);
    g = open(path, O_RDWR | O_CREAT | O_CLOEXEC, (mode_t)mode);
    if (g < 0) {
      /* locks/ gone: a bc_cache_clear deleted the root meanwhile. */
      rc = errno == ENOENT ? bc__error(BC_EAGAIN, "%s: the root was cleared "
                                       "meanwhile", dir)
                           : bc__error_errno(errno, "%s", path);
      break;
    }
    if (flock(g, LOCK_EX | LOCK_NB) == 0) break; /* gate_lock kept */
    int err = errno;
    close(g);
    g = -1;
    pthread_mutex_unlock(&gate_lock);
    if (err != EWOULDBLOCK && err != EINTR) {
      rc = bc__error_errno(err, "%s", path);
      pthread_mutex_lock(&gate_lock); /* (unlocked below) */
      break;
    }
    if ((rc = bc__interrupt_poll()) != 0) {
      pthread_mutex_lock(&gate_lock);
      break;
    }
    struct timespec ts = {0, BC__POLL_MS * 1000000L};
    nanosleep(&ts, NULL);
  }
  /* bc_cache_clear deletes a root nobody uses while holding the gate: a
   * gate unlinked meanwhile is a root that is gone. */
  struct stat st;
  if (rc == 0 && fstat(g, &st) == 0 && st.st_nlink == 0)
    rc = bc__error(BC_EAGAIN, "%s: the root was cleared meanwhile", dir);
  if (rc != 0) {
    if (g >= 0) close(g);
    pthread_mutex_unlock(&gate_lock);
  } else {
    *fd = g; /* with gate_lock held: gate_drop releases both */
  }
  free(path);
  return rc;
}

/* Releases the gate gate_take took (fd >= 0), and gate_lock with it. */
static void gate_drop(int fd) {
  if (fd < 0) return;
  close(fd); /* drops the gate */
  pthread_mutex_unlock(&gate_lock);
}

int bc__env_acquire(bc__env **out, const char *locks_dir, unsigned mode,
                    bool *fresh) {
  char *real = realpath(locks_dir, NULL);
  if (real == NULL) return bc__error_errno(errno, "%s", locks_dir);
  int rc = 0, gate = -1;
  char *data = NULL; /* the file an error names */
  *fresh = false;
  pthread_mutex_lock(&registry_lock);
  bc__env *e = registry_find(real);
  if (e == NULL) {
    /* Not open in this process: the gate first, waited for with no lock
     * held; then the registry again (another thread may have opened it
     * meanwhile: ours is dropped at cleanup). */
    pthread_mutex_unlock(&registry_lock);
    rc = gate_take(real, mode ? mode : 0644, &gate);
    if (rc != 0) {
      free(real);
      return rc;
    }
    pthread_mutex_lock(&registry_lock);
    e = registry_find(real);
  }
  if (e != NULL) {
    /* Shared; in a forked child the next transaction reopens it. */
    e->refs++;
    free(real);
  } else {
    e = calloc(1, sizeof *e);
    if (e == NULL) {
      free(real);
      rc = bc__error(BC_ENOMEM, "out of memory");
      goto cleanup;
    }
    e->dir = real;
    e->mode = mode ? mode : 0644;
    e->refs = 1;
    pthread_mutex_init(&e->reopen_lock, NULL);
    pthread_mutex_init(&e->fills.lock, NULL);
    pthread_cond_init(&e->fills.cond, NULL);
    e->lock_fd = -1;
    e->users_fd = -1;
    e->lease.lock_fd = -1;
    /* The gate (held: gate_take) serialises this block across processes:
     * a flock conversion (exclusive to shared, or back) is not atomic, and
     * another process taking locks/users exclusively in between would
     * think itself alone and move the state aside under us.  Every
     * process takes locks/users only while holding the gate, so nobody
     * can. */
    if ((data = bc__path_printf("%s/users", real)) == NULL) goto out_of_memory;
    e->users_fd = open(data, O_RDWR | O_CREAT | O_CLOEXEC, e->mode);
    /* Alone: no other process has the environment open, and none can open
     * it before the gate is released. */
    bool alone = e->users_fd >= 0 && flock(e->users_fd, LOCK_EX | LOCK_NB) == 0;
    if (e->users_fd < 0 || (!alone && flock(e->users_fd, LOCK_SH) != 0)) {
      rc = bc__error_errno(errno, "%s", data);
      goto discard;
    }
    free(data);
    data = NULL;
    unsigned stale = 0;
    if ((rc = bc__lease_prepare(real, e->mode, &e->lease_dir, &stale)) != 0)
      goto discard;
    atomic_store(&e->renewed, stale > 0);
    if ((data = bc__path_printf("%s/data.mdb", real)) == NULL) goto out_of_memory;
    bool claims = false; /* entries for reap_claims to look at */
    if (alone) {
      /* LMDB trusts its pages: check them first, while nobody writes. */
      int vrc = bc__state_validate(data, MAP_SIZE, &claims);
      if (vrc == BC_ECORRUPT) {
        bc__notice("%s; rebuilding the shared state from the shard files",
                   bc_errmsg());
        env_discard_files(real, e->lease_dir);
      } else if (vrc != 0) {
        rc = vrc;
        goto discard;
      }
    }
    *fresh = access(data, F_OK) != 0;
    int mrc = env_open_raw(e);
    if (mrc == MDB_INVALID || mrc == MDB_CORRUPTED || mrc == MDB_VERSION_MISMATCH ||
        mrc == MDB_PAGE_NOTFOUND) {
      if (flock(e->users_fd, LOCK_EX | LOCK_NB) != 0) {
        rc = bc__error(BC_ECORRUPT, "%s: the shared state is damaged (%s) and "
                       "other processes still have it open; it is rebuilt "
                       "from the shard files by the first open after they "
                       "close it", real, mdb_strerror(mrc));
        goto discard;
      }
      bc__notice("%s: the shared state is damaged (%s); rebuilding it from "
                 "the shard files", real, mdb_strerror(mrc));
      env_discard_files(real, e->lease_dir);
      *fresh = true;
      mrc = env_open_raw(e);
      alone = true;
      claims = false; /* a new, empty state */
    }
    size_t reaped = 0, lease_reaped = 0;
    if (alone && claims && mrc == 0 && (mrc = reap_claims(e->env, e->shard, &reaped)) != 0) {
      mdb_env_close(e->env);
      e->env = NULL;
    }
    /* The lease environment's claims likewise (alone: nobody writes it). */
    if (alone && mrc == 0 &&
        (mrc = reap_claims(e->lease.env, e->lease.claim, &lease_reaped)) != 0) {
      mdb_env_close(e->env);
      e->env = NULL;
    }
    reaped += lease_reaped;
    if (reaped > 0)
      bc__notice("%s: dropped %zu shard entries no process can hold (claims "
                 "of live processes with the state closed, or damaged)",
                 real, reaped);
    if (alone) flock(e->users_fd, LOCK_SH); /* a conversion, under the gate */
    if (mrc != 0) {
      rc = bc__mdb_error(mrc, real);
      goto discard;
    }
    e->next = registry;
    registry = e;
  }
  *out = e;
  goto cleanup;
out_of_memory:
  rc = bc__error(BC_ENOMEM, "out of memory");
discard: /* a new environment that failed to open (rc set) */
  bc__lease_close(&e->lease);
  free(e->lease_dir);
  if (e->users_fd >= 0) close(e->users_fd); /* drops its flock */
  if (e->lock_fd >= 0) close(e->lock_fd);    /* LMDB is closed */
  pthread_mutex_destroy(&e->reopen_lock);
  pthread_mutex_destroy(&e->fills.lock);
  pthread_cond_destroy(&e->fills.cond);
  free(e->dir);
  free(e);
cleanup:
  free(data);
  pthread_mutex_unlock(&registry_lock);
  gate_drop(gate); /* the gate and gate_lock, after registry_lock */
  return rc;
}

void bc__env_release(bc__env *e) {
  if (e == NULL) return;
  pthread_mutex_lock(&registry_lock);
  if (--e->refs == 0) {
    for (bc__env **p = &registry; *p; p = &(*p)->next)
      if (*p == e) {
        *p = e->next;
        break;
      }
    if (e->env && e->pid == getpid()) mdb_env_close(e->env);
    if (e->pid == getpid()) bc__lease_close(&e->lease);
    else if (e->lease.lock_fd >= 0) close(e->lease.lock_fd);
    free(e->lease_dir);
    close(e->users_fd); /* a forked parent or child keeps its own lock */
    if (e->lock_fd >= 0) close(e->lock_fd); /* after LMDB's own close */
    pthread_mutex_destroy(&e->reopen_lock);
    pthread_mutex_destroy(&e->fills.lock);
    pthread_cond_destroy(&e->fills.cond);
    free(e->dir);
    free(e);
  }
  pthread_mutex_unlock(&registry_lock);
}

/* In a forked child, the parent's environments (their locks, their reader
 * slots) must not be used: ours are opened.  0 or BC_E*. */
static int reopen_if_forked(bc__env *e) {
  if (e->pid != getpid()) {
    /* A forked child: the parent's environment (its locks, its reader
     * slots) must not be used here.  Open our own; the old handle is
     * dropped without mdb_env_close, which would release the parent's
     * locks. */
    pthread_mutex_lock(&e->reopen_lock);
    int rc = 0;
    if (e->pid != getpid()) {
      e->env = NULL;
      e->lease.env = NULL; /* (likewise; its lock descriptor is replaced) */
      /* The parent's fills are not ours to wait for. */
      e->fills.list = NULL;
      rc = env_open_raw(e);
    }
    pthread_mutex_unlock(&e->reopen_lock);
    if (rc != 0) return bc__mdb_error(rc, e->dir);
  }
  return 0;
}

int bc__txn_begin(bc__env *e, bool write, MDB_txn **txn) {
  int rc = reopen_if_forked(e);
  if (rc != 0) return rc;
  if (atomic_load(&e->damaged))
    return bc__error(BC_ECORRUPT,
                     "%s: the shared state (data.mdb) was found damaged "
                     "while in use; it is rebuilt from the shard files by "
                     "the first open after every process has closed it",
                     e->dir);
  /* A write transaction holds LMDB's write lock (across processes) from
   * its begin: it must not fault there on a truncated file (its meta
   * pages gone). */
  rc = write ? bc__mdb_check_size(e->env) : 0;
  if (rc == 0) rc = mdb_txn_begin(e->env, NULL, write ? 0 : MDB_RDONLY, txn);
  if (rc == MDB_READERS_FULL) {
    int dead = 0;
    mdb_reader_check(e->env, &dead);
    rc = mdb_txn_begin(e->env, NULL, write ? 0 : MDB_RDONLY, txn);
  }
  return rc ? bc__mdb_error(rc, "begin a transaction on the cache state") : 0;
}

int bc__txn_commit(MDB_txn *txn) {
  int rc = mdb_txn_commit(txn);
  return rc ? bc__mdb_error(rc, "commit the cache state") : 0;
}

/* A transaction on the lease environment (both are reopened first in a
 * forked child).  A write transaction only while holding the main one's
 * write lock. */
int bc__lease_txn_begin(bc__env *e, bool write, MDB_txn **txn) {
  int rc = reopen_if_forked(e);
  if (rc != 0) return rc;
  rc = write ? bc__mdb_check_size(e->lease.env) : 0;
  if (rc == 0) rc = mdb_txn_begin(e->lease.env, NULL, write ? 0 : MDB_RDONLY, txn);
  if (rc == MDB_READERS_FULL) {
    int dead = 0;
    mdb_reader_check(e->lease.env, &dead);
    rc = mdb_txn_begin(e->lease.env, NULL, write ? 0 : MDB_RDONLY, txn);
  }
  return rc ? bc__mdb_error(rc, "begin a transaction on the lease state") : 0;
}

const bc__lease *bc__env_lease(bc__env *e) { return &e->lease; }

bool bc__env_take_renewed(bc__env *e) { return atomic_exchange(&e->renewed, false); }

MDB_dbi bc__dbi_shard(bc__env *e) { return e->shard; }
MDB_dbi bc__dbi_sum(bc__env *e) { return e->sum; }
MDB_dbi bc__dbi_meta(bc__env *e) { return e->meta; }

/* ---- records ----------------------------------------------------------------- */

static void shard_key(uint64_t shard, unsigned char k[8]) {
  for (int i = 0; i < 8; i++) k[i] = (unsigned char)(shard >> (56 - 8 * i));
}

bool bc__rec_decode(const MDB_val *key, const MDB_val *val, uint64_t *shard,
                    bc__shard_rec *rec) {
  if (key->mv_size != 8 || val->mv_size != sizeof *rec) return false;
  uint64_t s = 0;
  for (int i = 0; i < 8; i++) s = s << 8 | ((const unsigned char *)key->mv_data)[i];
  *shard = s;
  memcpy(rec, val->mv_data, sizeof *rec);
  return true;
}

int bc__rec_get(MDB_txn *t, MDB_dbi db, uint64_t shard, bc__shard_rec *rec,
                bool *found) {
  unsigned char k[8];
  shard_key(shard, k);
  MDB_val key = {8, k}, val;
  int rc = mdb_get(t, db, &key, &val);
  if (rc == MDB_NOTFOUND) {
    *found = false;
    return 0;
  }
  if (rc != 0) return bc__mdb_error(rc, "read a shard state");
  if (val.mv_size != sizeof *rec)
    return bc__error(BC_ECORRUPT, "cache state: shard %llu record has %zu bytes",
                     (unsigned long long)shard, val.mv_size);
  memcpy(rec, val.mv_data, sizeof *rec);
  *found = true;
  return 0;
}

int bc__rec_put(MDB_txn *t, MDB_dbi db, uint64_t shard, const bc__shard_rec *r) {
  unsigned char k[8];
  shard_key(shard, k);
  MDB_val key = {8, k}, val = {sizeof *r, (void *)r};
  int rc = mdb_put(t, db, &key, &val, 0);
  return rc ? bc__mdb_error(rc, "write a shard state") : 0;
}

int bc__rec_del(MDB_txn *t, MDB_dbi db, uint64_t shard) {
  unsigned char k[8];
  shard_key(shard, k);
  MDB_val key = {8, k};
  int rc = mdb_del(t, db, &key, NULL);
  return rc && rc != MDB_NOTFOUND ? bc__mdb_error(rc, "delete a shard state") : 0;
}

int bc__u64_get(MDB_txn *t, MDB_dbi db, const char *name, uint64_t *v,
                bool *found) {
  MDB_val key = {strlen(name), (void *)name}, val;
  int rc = mdb_get(t, db, &key, &val);
  *found = false;
  if (rc == MDB_NOTFOUND) return 0;
  if (rc != 0) return bc__mdb_error(rc, "read the cache state");
  if (val.mv_size != 8)
    return bc__error(BC_ECORRUPT, "cache state: \"%s\" has %zu bytes", name,
                     val.mv_size);
  memcpy(v, val.mv_data, 8);
  *found = true;
  return 0;
}

int bc__u64_put(MDB_txn *t, MDB_dbi db, const char *name, uint64_t v) {
  MDB_val key = {strlen(name), (void *)name}, val = {8, &v};
  int rc = mdb_put(t, db, &key, &val, 0);
  return rc ? bc__mdb_error(rc, "write the cache state") : 0;
}

int bc__sum_get(MDB_txn *t, MDB_dbi db, uint64_t shard, uint64_t *sum,
                bool *found) {
  unsigned char k[8];
  shard_key(shard, k);
  MDB_val key = {8, k}, val;
  int rc = mdb_get(t, db, &key, &val);
  *found = false;
  if (rc == MDB_NOTFOUND) return 0;
  if (rc != 0) return bc__mdb_error(rc, "read a shard checksum");
  if (val.mv_size != 8) return bc__error(BC_ECORRUPT, "cache state: bad checksum");
  memcpy(sum, val.mv_data, 8);
  *found = true;
  return 0;
}

int bc__sum_put(MDB_txn *t, MDB_dbi db, uint64_t shard, uint64_t sum) {
  unsigned char k[8];
  shard_key(shard, k);
  MDB_val key = {8, k}, val = {8, &sum};
  int rc = mdb_put(t, db, &key, &val, 0);
  return rc ? bc__mdb_error(rc, "write a shard checksum") : 0;
}
