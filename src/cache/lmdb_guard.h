/*
 * src/cache/lmdb_guard.h - every LMDB call of the cache engine runs in a
 * fault scope (common/guard.c).
 *
 * LMDB trusts its file: a data.mdb truncated or overwritten while a process
 * has it mapped makes LMDB read past the end of the file (SIGBUS), follow a
 * wild page number (SIGSEGV), or fail one of its assertions (abort()).  The
 * wrappers below turn each of these into BC__MDB_FAULT, which
 * bc__mdb_error() reports as BC_ECORRUPT, and mark the environment damaged
 * (state.c then refuses new transactions on it).  The assertion hook jumps
 * out of LMDB before its abort().  A transaction that faulted is still
 * aborted by its caller as usual, which releases LMDB's write lock; a
 * commit that faults aborts its transaction itself (mdb_txn_commit always
 * ends it).
 *
 * The engine's sources call the LMDB names; this header maps them to the
 * wrappers, so no call can bypass them.  lmdb_guard.c, which implements
 * them, defines BC_LMDB_GUARD_IMPL to see the real functions.
 */
#ifndef BC_CACHE_LMDB_GUARD_H
#define BC_CACHE_LMDB_GUARD_H

#include <lmdb.h>
#include <stdatomic.h>
#include <stdbool.h>

/* An LMDB call faulted (outside LMDB's error range). */
#define BC__MDB_FAULT (-30700)

/* What the last fault of this thread was ("a mapped read failed", ...). */
const char *bc__mdb_fault_text(void);

/* Sets the assertion hook and the damage flag of a new environment (its
 * user context), and puts the SIGBUS and SIGSEGV handlers in place. */
void bc__mdb_guard_env(MDB_env *env, _Atomic bool *damaged);

/* Checks that data.mdb still holds its two meta pages, which beginning a
 * write transaction reads while holding LMDB's write lock (a fault there
 * would leave the lock held); 0 or BC__MDB_FAULT. */
int bc__mdb_check_size(MDB_env *env);

int bc__g_mdb_env_open(MDB_env *env, const char *path, unsigned flags,
                       mdb_mode_t mode);
int bc__g_mdb_reader_check(MDB_env *env, int *dead);
int bc__g_mdb_txn_begin(MDB_env *env, MDB_txn *parent, unsigned flags,
                        MDB_txn **txn);
int bc__g_mdb_txn_commit(MDB_txn *txn);
void bc__g_mdb_txn_abort(MDB_txn *txn);
int bc__g_mdb_dbi_open(MDB_txn *txn, const char *name, unsigned flags,
                       MDB_dbi *dbi);
int bc__g_mdb_get(MDB_txn *txn, MDB_dbi dbi, MDB_val *key, MDB_val *data);
int bc__g_mdb_put(MDB_txn *txn, MDB_dbi dbi, MDB_val *key, MDB_val *data,
                  unsigned flags);
int bc__g_mdb_del(MDB_txn *txn, MDB_dbi dbi, MDB_val *key, MDB_val *data);
int bc__g_mdb_drop(MDB_txn *txn, MDB_dbi dbi, int del);
int bc__g_mdb_cursor_open(MDB_txn *txn, MDB_dbi dbi, MDB_cursor **cursor);
int bc__g_mdb_cursor_get(MDB_cursor *cursor, MDB_val *key, MDB_val *data,
                         MDB_cursor_op op);

#ifndef BC_LMDB_GUARD_IMPL
#define mdb_env_open bc__g_mdb_env_open
#define mdb_reader_check bc__g_mdb_reader_check
#define mdb_txn_begin bc__g_mdb_txn_begin
#define mdb_txn_commit bc__g_mdb_txn_commit
#define mdb_txn_abort bc__g_mdb_txn_abort
#define mdb_dbi_open bc__g_mdb_dbi_open
#define mdb_get bc__g_mdb_get
#define mdb_put bc__g_mdb_put
#define mdb_del bc__g_mdb_del
#define mdb_drop bc__g_mdb_drop
#define mdb_cursor_open bc__g_mdb_cursor_open
#define mdb_cursor_get bc__g_mdb_cursor_get
#endif

#endif /* BC_CACHE_LMDB_GUARD_H */
