/*
 * Fault scopes around LMDB calls (see lmdb_guard.h for why).
 *
 * Each wrapper runs the real call in a bc__fault_scope.  After a fault the
 * call is abandoned where it was: memory LMDB allocated in it may leak, and
 * the environment is marked damaged so that this process begins no new
 * transaction on it; the process's other objects keep working, and the
 * first open after every process has closed the environment validates it
 * and rebuilds it from the shard files (state.c).
 */
#define BC_LMDB_GUARD_IMPL 1
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cache/internal.h"

static __thread char fault_text[440];

const char *bc__mdb_fault_text(void) { return fault_text; }

/* Records what happened and marks `env` damaged; BC__MDB_FAULT. */
static int fault(MDB_env *env, int sig) {
  if (sig == SIGBUS)
    snprintf(fault_text, sizeof fault_text,
             "a mapped read failed: the file shrank while in use");
  else if (sig == SIGSEGV)
    snprintf(fault_text, sizeof fault_text,
             "an invalid memory access while reading it");
  /* -1: the assertion hook wrote the text. */
  _Atomic bool *damaged = env ? mdb_env_get_userctx(env) : NULL;
  if (damaged) atomic_store(damaged, true);
  return BC__MDB_FAULT;
}

static void on_assert(MDB_env *env, const char *msg) {
  (void)env;
  snprintf(fault_text, sizeof fault_text, "LMDB gave up: %s", msg);
  bc__guard_escape(); /* outside a scope: LMDB aborts, as it always did */
}

void bc__mdb_guard_env(MDB_env *env, _Atomic bool *damaged) {
  bc__guard_install_segv();
  mdb_env_set_userctx(env, (void *)damaged);
  mdb_env_set_assert(env, on_assert);
}

/* Runs `call` (an int expression) in a fault scope; the result in `rc`. */
#define GUARDED(env, rc, call)              \
  do {                                      \
    bc__fault_scope s_;                     \
    int sig_ = sigsetjmp(s_.jb, 0);         \
    if (sig_ == 0) {                        \
      bc__guard_enter(&s_);                 \
      rc = (call);                          \
      bc__guard_leave(&s_);                 \
    } else {                                \
      bc__guard_leave(&s_);                 \
      rc = fault((env), sig_);              \
    }                                       \
  } while (0)

int bc__mdb_check_size(MDB_env *env) {
  /* Beginning a write transaction reads only the meta pages (named
   * databases are read later, inside the transaction, which its caller
   * aborts after a fault).  Pages past the end of the file are not damage
   * by themselves: LMDB's last page may be a free one it never wrote. */
  MDB_stat st;
  int rc;
  GUARDED(env, rc, mdb_env_stat(env, &st));
  if (rc != 0) return rc == BC__MDB_FAULT ? rc : 0;
  int fd = -1;
  struct stat fs;
  if (mdb_env_get_fd(env, &fd) != 0 || fstat(fd, &fs) != 0) return 0;
  if ((uint64_t)fs.st_size >= 2 * (uint64_t)st.ms_psize) return 0;
  snprintf(fault_text, sizeof fault_text,
           "data.mdb has %llu bytes, less than its two meta pages: it was "
           "truncated", (unsigned long long)fs.st_size);
  return fault(env, -1);
}

int bc__g_mdb_env_open(MDB_env *env, const char *path, unsigned flags,
                       mdb_mode_t mode) {
  int rc;
  GUARDED(env, rc, mdb_env_open(env, path, flags, mode));
  return rc;
}

int bc__g_mdb_reader_check(MDB_env *env, int *dead) {
  int rc;
  GUARDED(env, rc, mdb_reader_check(env, dead));
  return rc;
}

int bc__g_mdb_txn_begin(MDB_env *env, MDB_txn *parent, unsigned flags,
                        MDB_txn **txn) {
  int rc;
  GUARDED(env, rc, mdb_txn_begin(env, parent, flags, txn));
  return rc;
}

int bc__g_mdb_txn_commit(MDB_txn *txn) {
  MDB_env *env = mdb_txn_env(txn);
  _Atomic bool *damaged = mdb_env_get_userctx(env);
  int rc;
  if (damaged != NULL && atomic_load(damaged)) {
    /* A call of this process faulted on the environment: what the
     * transaction holds may be half-done, so it is never committed. */
    snprintf(fault_text, sizeof fault_text,
             "an earlier call on it faulted; nothing more is committed");
    rc = BC__MDB_FAULT;
  } else {
    GUARDED(env, rc, mdb_txn_commit(txn));
  }
  if (rc == BC__MDB_FAULT) {
    /* Abandoned inside the commit: end the transaction (and release the
     * write lock) as a failed commit would have. */
    int rc2;
    GUARDED(env, rc2, (mdb_txn_abort(txn), 0));
    (void)rc2;
  }
  return rc;
}

void bc__g_mdb_txn_abort(MDB_txn *txn) {
  int rc;
  GUARDED(mdb_txn_env(txn), rc, (mdb_txn_abort(txn), 0));
  (void)rc;
}

int bc__g_mdb_dbi_open(MDB_txn *txn, const char *name, unsigned flags,
                       MDB_dbi *dbi) {
  int rc;
  GUARDED(mdb_txn_env(txn), rc, mdb_dbi_open(txn, name, flags, dbi));
  return rc;
}

int bc__g_mdb_get(MDB_txn *txn, MDB_dbi dbi, MDB_val *key, MDB_val *data) {
  int rc;
  GUARDED(mdb_txn_env(txn), rc, mdb_get(txn, dbi, key, data));
  return rc;
}

int bc__g_mdb_put(MDB_txn *txn, MDB_dbi dbi, MDB_val *key, MDB_val *data,
                  unsigned flags) {
  int rc;
  GUARDED(mdb_txn_env(txn), rc, mdb_put(txn, dbi, key, data, flags));
  return rc;
}

int bc__g_mdb_del(MDB_txn *txn, MDB_dbi dbi, MDB_val *key, MDB_val *data) {
  int rc;
  GUARDED(mdb_txn_env(txn), rc, mdb_del(txn, dbi, key, data));
  return rc;
}

int bc__g_mdb_drop(MDB_txn *txn, MDB_dbi dbi, int del) {
  int rc;
  GUARDED(mdb_txn_env(txn), rc, mdb_drop(txn, dbi, del));
  return rc;
}

int bc__g_mdb_cursor_open(MDB_txn *txn, MDB_dbi dbi, MDB_cursor **cursor) {
  int rc;
  GUARDED(mdb_txn_env(txn), rc, mdb_cursor_open(txn, dbi, cursor));
  return rc;
}

int bc__g_mdb_cursor_get(MDB_cursor *cursor, MDB_val *key, MDB_val *data,
                         MDB_cursor_op op) {
  int rc;
  GUARDED(mdb_txn_env(mdb_cursor_txn(cursor)), rc,
          mdb_cursor_get(cursor, key, data, op));
  return rc;
}
