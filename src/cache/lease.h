/*
 * src/cache/lease.h - the lease environment: the part of the shared state
 * that no crash of the system may need (doc/cache.md, "Leases").
 *
 * Claims (FILLING records, with the room they reserve under the disk
 * limit) and the access clock's bumps are leases and hints: after a
 * system crash no fill is running, so every claim is void, and an access
 * time lost only makes a shard look older.  They live in a second LMDB
 * environment beside the main one, opened with MDB_NOSYNC |
 * MDB_NOMETASYNC, so that committing them costs no disk sync (a claim's
 * round trip: about 7 us against 0.4 to 14 ms synced on ext4).  Shard
 * records (PRESENT), checksums, the length, the limit and the root-wide
 * counters stay in the main, synced environment.
 *
 * An unsynced environment may be damaged by a system crash, so it is
 * never read after one: it lives in locks/lease-BOOT, BOOT the kernel's
 * boot id (/proc/sys/kernel/random/boot_id), and the first open of a root
 * after a reboot makes a new, empty one and removes those of earlier
 * boots (under the root's gate, which serialises opens; no process of the
 * current boot can be using an older boot's directory).
 *
 * Databases: "claim" (shard -> bc__shard_rec, FILLING), "access" (shard
 * -> the last access clock value of a PRESENT shard, when newer than the
 * one in its main record), "meta" ("clock": the access clock, when ahead
 * of the main environment's).
 *
 * Lock order: the main environment's write lock (a write transaction),
 * then the lease environment's; nothing writes the lease environment
 * without holding the main one's write lock, except the reap at an open
 * that is alone (state.c).
 */
#ifndef BC_CACHE_LEASE_H
#define BC_CACHE_LEASE_H

#include <lmdb.h>
#include <stdatomic.h>
#include <stdbool.h>

typedef struct {
  MDB_env *env; /* NULL when closed */
  int lock_fd;  /* lease-BOOT/lock.mdb, held open while env is (fcntl locks) */
  MDB_dbi claim, access, meta;
} bc__lease;

/* The lease directory of the current boot under locks_dir (malloc'd into
 * *dir), made if missing; the lease directories of other boots are
 * removed (*stale: how many).  Call under the root's gate.  0 or BC_E*. */
int bc__lease_prepare(const char *locks_dir, unsigned mode, char **dir,
                      unsigned *stale);

/* Opens the lease environment in `dir` (l->lock_fd -1 or an old
 * descriptor to replace); `damaged` is the main environment's flag, set
 * when an LMDB call faults on either.  0 or an LMDB / errno code. */
int bc__lease_open(bc__lease *l, const char *dir, unsigned mode,
                   _Atomic bool *damaged);

/* Removes the files of lease directory `dir` (NULL: none), nobody using
 * it: the next open starts an empty lease state. */
void bc__lease_discard(const char *dir);

/* Closes it (the lock file after LMDB). */
void bc__lease_close(bc__lease *l);

#endif /* BC_CACHE_LEASE_H */
