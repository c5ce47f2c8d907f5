/*
 * The engine's policy over the shared state (src/cache/store.c), run
 * against an in-memory store (arrays; failures injected at will) instead
 * of LMDB: which claims are taken, which shards a publish evicts for a
 * given limit, access clock and pass positions, what a failed publish
 * leaves behind and reports, and what bc__obtain does with each state a
 * shard can be in (present, missing, claimed by a live or a dead process).  Exact outcomes, compared with what the
 * policy (doc/cache.md, "Eviction") says they must be.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

/* Twice on purpose: the header must be whole inside its include guard
 * (it once closed the guard before the cache object's definition, and a
 * second inclusion redefined it). */
#include "cache/internal.h"
#include "cache/internal.h"

/* ---- the fake store ----------------------------------------------------------- */

#define MAXN 256

typedef struct {
  uint64_t shard[MAXN];
  bc__shard_rec rec[MAXN];
  size_t n; /* ascending shards */
  uint64_t sum_shard[MAXN], sum[MAXN];
  size_t nsums;
  uint64_t key[BC__KEY_COUNT];
  bool have[BC__KEY_COUNT];
} fake_state;

typedef struct {
  fake_state state;
  bool file[MAXN];    /* shard s has a file in shards/ */
  uint64_t ino[MAXN]; /* and its inode number (each file gets a new one) */
  uint64_t inos;      /* the last inode number given */
  int32_t dead_pid;   /* owners with this pid are dead */
  int commits;        /* top-level commits attempted */
  int fail_commit;    /* the commit with this number fails (0: none) */
  bool fail_install;
  bool fail_sync;     /* the batch's directory fsync fails */
  int dir_syncs;      /* installs that synced, plus batch syncs */
  uint64_t end;       /* the last length `end` recorded, +1 (0: none) */
  int purges;
} fake;

struct bc__store_txn {
  fake *f;
  fake_state st;
  bc__store_txn *parent;
};

static int f_begin(void *impl, bool write, bc__store_txn **t) {
  (void)write;
  fake *f = impl;
  bc__store_txn *x = calloc(1, sizeof *x);
  if (x == NULL) return BC_ENOMEM;
  x->f = f;
  x->st = f->state;
  *t = x;
  return 0;
}

static int f_nest(bc__store_txn *parent, bc__store_txn **t) {
  bc__store_txn *x = calloc(1, sizeof *x);
  if (x == NULL) return BC_ENOMEM;
  x->f = parent->f;
  x->st = parent->st;
  x->parent = parent;
  *t = x;
  return 0;
}

static int f_commit(bc__store_txn *t) {
  int rc = 0;
  if (t->parent != NULL) {
    t->parent->st = t->st;
  } else if (++t->f->commits == t->f->fail_commit) {
    rc = bc_set_errmsg(BC_EIO, "fake commit failed");
  } else {
    t->f->state = t->st;
  }
  free(t);
  return rc;
}

static void f_abort(bc__store_txn *t) { free(t); }

static size_t find(const fake_state *s, uint64_t shard) {
  size_t i = 0;
  while (i < s->n && s->shard[i] < shard) i++;
  return i;
}

static int f_get(bc__store_txn *t, uint64_t shard, bc__shard_rec *rec, bool *found) {
  size_t i = find(&t->st, shard);
  *found = i < t->st.n && t->st.shard[i] == shard;
  if (*found) *rec = t->st.rec[i];
  return 0;
}

static int f_put(bc__store_txn *t, uint64_t shard, const bc__shard_rec *rec) {
  fake_state *s = &t->st;
  size_t i = find(s, shard);
  if (!(i < s->n && s->shard[i] == shard)) {
    memmove(&s->shard[i + 1], &s->shard[i], (s->n - i) * sizeof s->shard[0]);
    memmove(&s->rec[i + 1], &s->rec[i], (s->n - i) * sizeof s->rec[0]);
    s->n++;
    s->shard[i] = shard;
  }
  s->rec[i] = *rec;
  return 0;
}

static int f_del(bc__store_txn *t, uint64_t shard) {
  fake_state *s = &t->st;
  size_t i = find(s, shard);
  if (i < s->n && s->shard[i] == shard) {
    memmove(&s->shard[i], &s->shard[i + 1], (s->n - i - 1) * sizeof s->shard[0]);
    memmove(&s->rec[i], &s->rec[i + 1], (s->n - i - 1) * sizeof s->rec[0]);
    s->n--;
  }
  return 0;
}

static int f_each(bc__store_txn *t, bc__store_visit visit, void *arg) {
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < t->st.n; i++)
    rc = visit(arg, t->st.shard[i], &t->st.rec[i]);
  return rc;
}

static int f_sum_get(bc__store_txn *t, uint64_t shard, uint64_t *sum, bool *found) {
  *found = false;
  for (size_t i = 0; i < t->st.nsums; i++)
    if (t->st.sum_shard[i] == shard) {
      *sum = t->st.sum[i];
      *found = true;
    }
  return 0;
}

static int f_sum_put(bc__store_txn *t, uint64_t shard, uint64_t sum) {
  t->st.sum_shard[t->st.nsums] = shard;
  t->st.sum[t->st.nsums++] = sum;
  return 0;
}

static int f_u64_get(bc__store_txn *t, bc__store_key key, uint64_t *v, bool *found) {
  *found = t->st.have[key];
  if (*found) *v = t->st.key[key];
  return 0;
}

static int f_u64_put(bc__store_txn *t, bc__store_key key, uint64_t v) {
  t->st.key[key] = v;
  t->st.have[key] = true;
  return 0;
}

static bool f_owner_alive(void *impl, bc__owner o) {
  return o.pid != ((fake *)impl)->dead_pid;
}

static int f_evict(void *impl, uint64_t shard, const bc__shard_rec *rec) {
  (void)rec;
  ((fake *)impl)->file[shard] = false;
  return 0;
}

static bool f_same_file(void *impl, uint64_t shard, const bc__shard_rec *rec,
                        const bc__file_id *id) {
  (void)rec;
  fake *f = impl;
  return !f->file[shard] || (id->dev == 1 && id->ino == f->ino[shard]);
}

/* Shard `shard` gets a new file. */
static void new_file(fake *f, uint64_t shard) {
  f->file[shard] = true;
  f->ino[shard] = ++f->inos;
}

static void f_purge(void *impl, uint64_t shard) {
  fake *f = impl;
  f->file[shard] = false;
  f->purges++;
}

static int f_install(void *impl, const char *scratch, uint64_t shard,
                     uint64_t records, bool sync_dirs) {
  (void)scratch;
  (void)records;
  fake *f = impl;
  if (f->fail_install) return bc_set_errmsg(BC_ENOSPC, "fake install failed");
  new_file(f, shard);
  f->dir_syncs += sync_dirs;
  return 0;
}

static int f_sync_dirs(void *impl) {
  fake *f = impl;
  if (f->fail_sync) return bc_set_errmsg(BC_EIO, "fake directory fsync failed");
  f->dir_syncs++;
  return 0;
}

static void f_uninstall(void *impl, uint64_t shard, uint64_t records) {
  (void)records;
  ((fake *)impl)->file[shard] = false;
}

static int f_end(void *impl, uint64_t length) {
  ((fake *)impl)->end = length + 1;
  return 0;
}

static const bc__store_ops fake_ops = {
    f_begin,   f_nest,    f_commit,  f_abort,     f_get,         f_put,
    f_del,     f_each,    f_sum_get, f_sum_put,   f_u64_get,     f_u64_put,
    f_owner_alive, f_evict, f_same_file, f_purge, f_install, f_sync_dirs, f_uninstall,
    f_end};

/* ---- helpers --------------------------------------------------------------------- */

#define SR 10
static const bc__owner ME = {100, 7}, OTHER = {200, 9}, DEAD = {300, 1};

static bc__store store_of(fake *f, bc__owner self) {
  return (bc__store){.ops = &fake_ops, .impl = f, .root = "fake", .R = SR,
                     .self = self};
}

/* PRESENT shard `shard` of `bytes` bytes, last used at `access`, with its
 * file and its bytes counted. */
static void present(fake *f, uint64_t shard, uint64_t bytes, uint64_t access) {
  bc__store_txn t = {.f = f, .st = f->state};
  bc__shard_rec r = {.state = SHARD_PRESENT, .records = SR, .bytes = bytes,
                     .last_access = access};
  f_put(&t, shard, &r);
  f_sum_put(&t, shard, 1000 + shard);
  t.st.key[BC__KEY_BYTES] += bytes;
  t.st.have[BC__KEY_BYTES] = true;
  if (access > t.st.key[BC__KEY_CLOCK]) t.st.key[BC__KEY_CLOCK] = access;
  t.st.have[BC__KEY_CLOCK] = true;
  if ((shard + 1) * SR > t.st.key[BC__KEY_LENGTH]) t.st.key[BC__KEY_LENGTH] = (shard + 1) * SR;
  t.st.have[BC__KEY_LENGTH] = true;
  f->state = t.st;
  new_file(f, shard);
}

static void set_key(fake *f, bc__store_key k, uint64_t v) {
  f->state.key[k] = v;
  f->state.have[k] = true;
}

static bc__shard_rec rec_of(fake *f, uint64_t shard, bool *found) {
  bc__store_txn t = {.f = f, .st = f->state};
  bc__shard_rec r = {0};
  f_get(&t, shard, &r, found);
  return r;
}

/* A publish request for shard `shard` (claimed with `token`) of a full
 * shard of `size` bytes, the checksum a first fill records. */
static bc__publish_req req_of(uint64_t shard, uint64_t token, uint64_t size) {
  return (bc__publish_req){.shard = shard, .token = token, .scratch = "scratch",
                           .records = SR, .size = size, .checksum = 1000 + shard,
                           .note = "", .need = 2, .seekable = true};
}

/* ---- claims ------------------------------------------------------------------------ */

static void test_claims(void **state) {
  (void)state;
  fake f = {.dead_pid = DEAD.pid};
  bc__store me = store_of(&f, ME), other = store_of(&f, OTHER),
            dead = store_of(&f, DEAD);
  bc__shard_rec rec;
  bool claimed, found;
  /* No state: taken, FILLING with our identity and the fill's token. */
  assert_int_equal(bc__store_claim(&me, 3, 41, &rec, &claimed), 0);
  assert_true(claimed);
  rec = rec_of(&f, 3, &found);
  assert_true(found);
  assert_int_equal(rec.state, SHARD_FILLING);
  assert_int_equal(rec.owner.pid, ME.pid);
  assert_int_equal(rec.bytes, 41);
  /* A live process's claim: not taken; its state comes back. */
  assert_int_equal(bc__store_claim(&other, 3, 5, &rec, &claimed), 0);
  assert_false(claimed);
  assert_int_equal(rec.owner.pid, ME.pid);
  /* Our own claim with no fill of ours behind it: stale, taken (and any
   * file it left purged). */
  f.file[3] = true;
  assert_int_equal(bc__store_claim(&me, 3, 42, &rec, &claimed), 0);
  assert_true(claimed);
  assert_int_equal(rec_of(&f, 3, &found).bytes, 42);
  assert_false(f.file[3]);
  assert_int_equal(f.purges, 1);
  /* A dead claimant's claim: taken, its leftover file purged. */
  assert_int_equal(bc__store_claim(&dead, 4, 1, &rec, &claimed), 0);
  f.file[4] = true;
  assert_int_equal(bc__store_claim(&other, 4, 6, &rec, &claimed), 0);
  assert_true(claimed);
  assert_false(f.file[4]);
  assert_int_equal(f.purges, 2);
  assert_int_equal(rec_of(&f, 4, &found).owner.pid, OTHER.pid);
  /* PRESENT: never taken. */
  present(&f, 5, 100, 1);
  assert_int_equal(bc__store_claim(&me, 5, 43, &rec, &claimed), 0);
  assert_false(claimed);
  assert_int_equal(rec.state, SHARD_PRESENT);
  /* Release drops only the claim of that fill. */
  bc__store_release(&me, 4, 6); /* OTHER's claim: kept */
  assert_true(rec_of(&f, 4, &found).owner.pid == OTHER.pid && found);
  bc__store_release(&me, 3, 41); /* an older fill's token: kept */
  rec_of(&f, 3, &found);
  assert_true(found);
  bc__store_release(&me, 3, 42);
  rec_of(&f, 3, &found);
  assert_false(found);
}

/* ---- clearing a root in use (bc_cache_clear) ------------------------------------- */

/* PRESENT shards and a dead claim go (files and entries), a live claim
 * stays with its reservation; bytes become 0; checksums and the length
 * stay.  A failed commit leaves the entries listed (files gone: refilled
 * as missing ones). */
static void test_clear(void **state) {
  (void)state;
  fake f = {.dead_pid = DEAD.pid};
  bc__store me = store_of(&f, ME), other = store_of(&f, OTHER),
            dead = store_of(&f, DEAD);
  bc__shard_rec rec;
  bool claimed, found;
  present(&f, 0, 100, 1);
  present(&f, 1, 120, 2);
  present(&f, 5, 90, 3);
  assert_int_equal(bc__store_claim(&other, 2, 7, &rec, &claimed), 0);
  assert_true(claimed);
  assert_int_equal(bc__store_claim(&dead, 3, 8, &rec, &claimed), 0);
  f.file[3] = true; /* installed before it died */
  uint64_t removed = 0;
  assert_int_equal(bc__store_clear(&me, &removed), 0);
  assert_int_equal(removed, 4);
  for (uint64_t s = 0; s < 6; s++) {
    rec_of(&f, s, &found);
    assert_int_equal(found, s == 2);
    assert_int_equal(f.file[s], false);
  }
  rec = rec_of(&f, 2, &found);
  assert_int_equal(rec.state, SHARD_FILLING);
  assert_int_equal(rec.owner.pid, OTHER.pid);
  assert_int_equal(f.purges, 1);
  assert_int_equal(f.state.key[BC__KEY_BYTES], 0);
  assert_int_equal(f.state.key[BC__KEY_LENGTH], 6 * SR);
  assert_int_equal(f.state.nsums, 3);
  /* Nothing left but the live claim: a second clear removes nothing. */
  assert_int_equal(bc__store_clear(&me, &removed), 0);
  assert_int_equal(removed, 0);
  /* The commit fails after the files went: the entries stay listed. */
  present(&f, 4, 50, 4);
  f.fail_commit = f.commits + 1;
  assert_int_equal(bc__store_clear(&me, &removed), BC_EIO);
  rec_of(&f, 4, &found);
  assert_true(found);
  assert_false(f.file[4]);
}

/* ---- eviction ---------------------------------------------------------------------- */

/* Six shards of 100 bytes under a limit of 700: a shard of 300 bytes
 * needs two evicted.  Plain LRU for a seekable source: the two least
 * recently used, in order. */
static void test_publish_evicts_lru(void **state) {
  (void)state;
  fake f = {0};
  bc__store me = store_of(&f, ME);
  const uint64_t access[6] = {5, 3, 9, 1, 7, 2};
  for (uint64_t s = 0; s < 6; s++) present(&f, s, 100, access[s]);
  set_key(&f, BC__KEY_LIMIT, 700);
  bc__shard_rec rec;
  bool claimed, regenerated = true, found;
  assert_int_equal(bc__store_claim(&me, 6, 77, &rec, &claimed), 0);
  bc__publish_req q = req_of(6, 77, 300);
  bc__victims v = {0};
  assert_int_equal(bc__store_publish(&me, &q, &v, &regenerated), 0);
  assert_int_equal(v.n, 2);
  assert_int_equal(v.shards[0], 3);
  assert_int_equal(v.shards[1], 5);
  assert_false(regenerated);
  assert_false(f.file[3] || f.file[5]);
  assert_true(f.file[0] && f.file[1] && f.file[2] && f.file[4] && f.file[6]);
  rec_of(&f, 3, &found);
  assert_false(found);
  assert_int_equal(f.state.key[BC__KEY_BYTES], 700);
  assert_int_equal(f.state.key[BC__KEY_CLOCK], 10);
  assert_int_equal(f.state.key[BC__KEY_LENGTH], 70);
  rec = rec_of(&f, 6, &found);
  assert_int_equal(rec.state, SHARD_PRESENT);
  assert_int_equal(rec.last_access, 10);
  assert_int_equal(rec.bytes, 300);
  bc__victims_free(&v);
}

/* The same state with a source that cannot seek and passes standing at
 * records 0 and 30: a shard far past a pass costs more to rebuild and is
 * kept as if used later (score = access + present * min(skip / R, 1)):
 * shard 3 (score 1) goes first, then shard 0 (5; shard 5 scores 2 + 6 = 8). */
static void test_publish_evicts_by_cost(void **state) {
  (void)state;
  fake f = {0};
  bc__store me = store_of(&f, ME);
  const uint64_t access[6] = {5, 3, 9, 1, 7, 2};
  for (uint64_t s = 0; s < 6; s++) present(&f, s, 100, access[s]);
  set_key(&f, BC__KEY_LIMIT, 700);
  bc__shard_rec rec;
  bool claimed, regenerated;
  assert_int_equal(bc__store_claim(&me, 6, 77, &rec, &claimed), 0);
  bc__publish_req q = req_of(6, 77, 300);
  const uint64_t passes[2] = {0, 30};
  q.seekable = false;
  q.passes = passes;
  q.npasses = 2;
  bc__victims v = {0};
  assert_int_equal(bc__store_publish(&me, &q, &v, &regenerated), 0);
  assert_int_equal(v.n, 2);
  assert_int_equal(v.shards[0], 3);
  assert_int_equal(v.shards[1], 0);
  bc__victims_free(&v);
}

/* The credit of a rebuild's cost is capped at one turnover (present
 * clock ticks): a pass at record 0 only, so shard s costs s shards of
 * skipped records; scores access + 6 * min(s, 1): shard 5 (2 + 6 = 8)
 * goes first, then shard 0 (9 + 0).  Uncapped, shard 5 scored 2 + 30 and
 * outlived every shard read since (the victims were 0 and 1): a shard
 * nobody reads stayed for as many turnovers as it cost shards. */
static void test_publish_cost_credit_is_capped(void **state) {
  (void)state;
  fake f = {0};
  bc__store me = store_of(&f, ME);
  const uint64_t access[6] = {9, 8, 7, 10, 11, 2};
  for (uint64_t s = 0; s < 6; s++) present(&f, s, 100, access[s]);
  set_key(&f, BC__KEY_LIMIT, 700);
  bc__shard_rec rec;
  bool claimed, regenerated;
  assert_int_equal(bc__store_claim(&me, 6, 77, &rec, &claimed), 0);
  bc__publish_req q = req_of(6, 77, 300);
  const uint64_t passes[1] = {0};
  q.seekable = false;
  q.passes = passes;
  q.npasses = 1;
  bc__victims v = {0};
  assert_int_equal(bc__store_publish(&me, &q, &v, &regenerated), 0);
  assert_int_equal(v.n, 2);
  assert_int_equal(v.shards[0], 5);
  assert_int_equal(v.shards[1], 0);
  bc__victims_free(&v);
}

/* One publish evicting 39 shards: every one is returned (and gone). */
static void test_publish_returns_every_victim(void **state) {
  (void)state;
  fake f = {0};
  bc__store me = store_of(&f, ME);
  for (uint64_t s = 0; s < 80; s++) present(&f, s, 10, 200 - s);
  set_key(&f, BC__KEY_LIMIT, 810);
  bc__shard_rec rec;
  bool claimed, regenerated;
  assert_int_equal(bc__store_claim(&me, 80, 1, &rec, &claimed), 0);
  bc__publish_req q = req_of(80, 1, 400);
  bc__victims v = {0};
  assert_int_equal(bc__store_publish(&me, &q, &v, &regenerated), 0);
  assert_int_equal(v.n, 39);
  for (size_t i = 0; i < v.n; i++) {
    assert_int_equal(v.shards[i], 79 - i); /* least recent first */
    assert_false(f.file[79 - i]);
  }
  assert_true(f.file[40]);
  assert_int_equal(f.state.key[BC__KEY_BYTES], 810);
  bc__victims_free(&v);
}

/* Nothing left to evict: BC_ENOSPC, and the state unchanged. */
static void test_publish_nothing_to_evict(void **state) {
  (void)state;
  fake f = {0};
  bc__store me = store_of(&f, ME);
  set_key(&f, BC__KEY_LIMIT, 100);
  set_key(&f, BC__KEY_BYTES, 90); /* bytes of files the state lost */
  bc__shard_rec rec;
  bool claimed, regenerated;
  assert_int_equal(bc__store_claim(&me, 0, 1, &rec, &claimed), 0);
  bc__publish_req q = req_of(0, 1, 50);
  bc__victims v = {0};
  assert_int_equal(bc__store_publish(&me, &q, &v, &regenerated), BC_ENOSPC);
  assert_int_equal(v.n, 0);
  assert_false(f.file[0]);
  assert_int_equal(rec_of(&f, 0, &claimed).state, SHARD_FILLING);
  bc__victims_free(&v);
}

/* ---- checks ------------------------------------------------------------------------- */

/* A forget names the file found bad: a regeneration published meanwhile
 * (same records, same bytes, another file) is kept; a file still there, or
 * one gone, is dropped with its state and bytes. */
static void test_forget_names_its_file(void **state) {
  (void)state;
  fake f = {0};
  bc__store me = store_of(&f, ME);
  bool found;
  present(&f, 3, 50, 1);
  bc__file_id damaged = {1, f.ino[3]}, missing = {0, 0};
  /* Another thread forgot and regenerated it: a new file, the same state. */
  f_evict(&f, 3, NULL);
  new_file(&f, 3);
  assert_int_equal(bc__store_forget(&me, 3, &damaged), 0);
  assert_true(f.file[3]);
  assert_int_equal(rec_of(&f, 3, &found).state, SHARD_PRESENT);
  assert_int_equal(f.state.key[BC__KEY_BYTES], 50);
  /* A reader that found no file, while the new one is there: kept. */
  assert_int_equal(bc__store_forget(&me, 3, &missing), 0);
  assert_true(f.file[3]);
  /* The file it found damaged is still the shard's: dropped. */
  bc__file_id now = {1, f.ino[3]};
  assert_int_equal(bc__store_forget(&me, 3, &now), 0);
  assert_false(f.file[3]);
  rec_of(&f, 3, &found);
  assert_false(found);
  assert_int_equal(f.state.key[BC__KEY_BYTES], 0);
  /* A PRESENT shard whose file is gone (lost): dropped whatever it names. */
  present(&f, 4, 70, 1);
  f.file[4] = false;
  assert_int_equal(bc__store_forget(&me, 4, &damaged), 0);
  rec_of(&f, 4, &found);
  assert_false(found);
  assert_int_equal(f.state.key[BC__KEY_BYTES], 0);
}

static void test_publish_checks(void **state) {
  (void)state;
  fake f = {0};
  bc__store me = store_of(&f, ME), other = store_of(&f, OTHER);
  bc__shard_rec rec;
  bool claimed, regenerated;
  bc__victims v = {0};
  /* A claim taken over meanwhile: BC_EIO, nothing installed. */
  assert_int_equal(bc__store_claim(&me, 2, 1, &rec, &claimed), 0);
  assert_int_equal(bc__store_claim(&other, 2, 9, &rec, &claimed), 0);
  assert_false(claimed); /* live: so take it by hand */
  bc__store_release(&me, 2, 1);
  assert_int_equal(bc__store_claim(&other, 2, 9, &rec, &claimed), 0);
  bc__publish_req q = req_of(2, 1, 50);
  assert_int_equal(bc__store_publish(&me, &q, &v, &regenerated), BC_EIO);
  assert_false(f.file[2]);
  /* A regenerated shard with another checksum: BC_ENONDET. */
  present(&f, 3, 50, 1);
  bc__store forget = me;
  bc__file_id bad = {1, f.ino[3]};
  assert_int_equal(bc__store_forget(&forget, 3, &bad), 0);
  assert_false(f.file[3]);
  assert_int_equal(f.state.key[BC__KEY_BYTES], 0);
  assert_int_equal(bc__store_claim(&me, 3, 2, &rec, &claimed), 0);
  q = req_of(3, 2, 50);
  q.checksum = 5;
  assert_int_equal(bc__store_publish(&me, &q, &v, &regenerated), BC_ENONDET);
  /* The same checksum: published, and reported regenerated. */
  q.checksum = 1003;
  assert_int_equal(bc__store_publish(&me, &q, &v, &regenerated), 0);
  assert_true(regenerated);
  /* The end: a pass that ends before a length seen is not deterministic;
   * one that ends after it makes the length final. */
  assert_int_equal(bc__store_claim(&me, 5, 3, &rec, &claimed), 0);
  assert_int_equal(bc__store_record_end(&me, 5, 35), BC_ENONDET);
  assert_int_equal(bc__store_record_end(&me, 5, 50), 0);
  assert_int_equal(f.end, 51);
  assert_int_equal(f.state.key[BC__KEY_FINAL], 1);
  assert_int_equal(f.state.key[BC__KEY_LENGTH], 50);
  rec_of(&f, 5, &claimed);
  assert_false(claimed);
  assert_int_equal(v.n, 0);
  bc__victims_free(&v);
}

/* ---- failures ------------------------------------------------------------------------ */

/* The install fails after two victims were evicted: the evictions are
 * committed (their files are gone), the new shard's state is not, and the
 * install's error is reported. */
static void test_publish_install_fails(void **state) {
  (void)state;
  fake f = {.fail_install = true};
  bc__store me = store_of(&f, ME);
  const uint64_t access[6] = {5, 3, 9, 1, 7, 2};
  for (uint64_t s = 0; s < 6; s++) present(&f, s, 100, access[s]);
  set_key(&f, BC__KEY_LIMIT, 700);
  bc__shard_rec rec;
  bool claimed, regenerated, found;
  assert_int_equal(bc__store_claim(&me, 6, 77, &rec, &claimed), 0);
  bc__publish_req q = req_of(6, 77, 300);
  bc__victims v = {0};
  assert_int_equal(bc__store_publish(&me, &q, &v, &regenerated), BC_ENOSPC);
  assert_string_equal(bc_errmsg(), "fake install failed");
  assert_int_equal(v.n, 2);
  rec_of(&f, 3, &found);
  assert_false(found);
  assert_int_equal(f.state.key[BC__KEY_BYTES], 400);
  assert_int_equal(rec_of(&f, 6, &found).state, SHARD_FILLING);
  assert_false(f.file[6]);
  bc__victims_free(&v);
}

/* ... and the commit of those evictions fails too (issue 15: that failure
 * was dropped at an empty `if`): its error is reported, naming both, and
 * the victims are still returned (their files are gone: the caller drops
 * its readers of them). */
static void test_publish_commit_fails_after_install(void **state) {
  (void)state;
  fake f = {.fail_install = true};
  bc__store me = store_of(&f, ME);
  const uint64_t access[6] = {5, 3, 9, 1, 7, 2};
  for (uint64_t s = 0; s < 6; s++) present(&f, s, 100, access[s]);
  set_key(&f, BC__KEY_LIMIT, 700);
  bc__shard_rec rec;
  bool claimed, regenerated, found;
  assert_int_equal(bc__store_claim(&me, 6, 77, &rec, &claimed), 0);
  f.fail_commit = f.commits + 1;
  bc__publish_req q = req_of(6, 77, 300);
  bc__victims v = {0};
  assert_int_equal(bc__store_publish(&me, &q, &v, &regenerated), BC_EIO);
  assert_non_null(strstr(bc_errmsg(), "fake install failed"));
  assert_non_null(strstr(bc_errmsg(), "fake commit failed"));
  assert_int_equal(v.n, 2);
  assert_false(f.file[3] || f.file[5]);
  rec_of(&f, 3, &found); /* the state still lists it: a read refills it */
  assert_true(found);
  assert_int_equal(f.state.key[BC__KEY_BYTES], 600);
  bc__victims_free(&v);
}

/* A check fails after evictions (here: the limit's ENOSPC once the only
 * other shards are gone) and committing those evictions fails: both are
 * reported as well. */
static void test_publish_commit_fails_after_evicting(void **state) {
  (void)state;
  fake f = {0};
  bc__store me = store_of(&f, ME);
  present(&f, 0, 100, 1);
  present(&f, 1, 100, 2);
  set_key(&f, BC__KEY_LIMIT, 300);
  set_key(&f, BC__KEY_BYTES, 400); /* 200 bytes the state lost */
  bc__shard_rec rec;
  bool claimed, regenerated;
  assert_int_equal(bc__store_claim(&me, 2, 1, &rec, &claimed), 0);
  f.fail_commit = f.commits + 1;
  bc__publish_req q = req_of(2, 1, 150);
  bc__victims v = {0};
  assert_int_equal(bc__store_publish(&me, &q, &v, &regenerated), BC_EIO);
  assert_non_null(strstr(bc_errmsg(), "nothing left to evict"));
  assert_non_null(strstr(bc_errmsg(), "fake commit failed"));
  assert_int_equal(v.n, 2);
  assert_int_equal(v.shards[0], 0);
  assert_int_equal(v.shards[1], 1);
  bc__victims_free(&v);
}

/* The final commit fails: the installed file is taken back out. */
static void test_publish_final_commit_fails(void **state) {
  (void)state;
  fake f = {0};
  bc__store me = store_of(&f, ME);
  bc__shard_rec rec;
  bool claimed, regenerated, found;
  assert_int_equal(bc__store_claim(&me, 0, 1, &rec, &claimed), 0);
  f.fail_commit = f.commits + 1;
  bc__publish_req q = req_of(0, 1, 150);
  bc__victims v = {0};
  assert_int_equal(bc__store_publish(&me, &q, &v, &regenerated), BC_EIO);
  assert_false(f.file[0]);
  assert_int_equal(rec_of(&f, 0, &found).state, SHARD_FILLING);
  bc__victims_free(&v);
}

/* ---- bc__obtain over the fake ---------------------------------------------------------- */

/* A source whose passes cannot be opened: a fill fails at once, before any
 * file is written. */
static int open_fails(void *payload, void **pass) {
  (void)payload;
  (void)pass;
  return bc_set_errmsg(BC_EIO, "no pass today");
}
static int next_never(void *payload, void *pass, bc_buf *out) {
  (void)payload;
  (void)pass;
  (void)out;
  return 0;
}
static void close_never(void *payload, void *pass) {
  (void)payload;
  (void)pass;
}

/* A cache object with just what bc__obtain uses: the fake store, a real
 * fill registry (an LMDB environment in a temporary directory, which the
 * fake leaves alone), a pass pool of one, and a source or none. */
typedef struct {
  bc_cache c;
  char dir[64];
} obtain_fixture;

static void obtain_setup(obtain_fixture *x, fake *f, bool source) {
  memset(x, 0, sizeof *x);
  snprintf(x->dir, sizeof x->dir, "/tmp/bc-policy-XXXXXX");
  assert_non_null(mkdtemp(x->dir));
  bc_cache *c = &x->c;
  bool fresh;
  assert_int_equal(bc__env_acquire(&c->env, x->dir, 0600, &fresh), 0);
  c->root = x->dir;
  c->scratch_dir = x->dir;
  c->R = SR;
  c->self = ME;
  c->store = store_of(f, ME);
  c->has_source = source;
  c->src = (bc_source){.version = BC_SOURCE_VERSION, .open = open_fails,
                       .next = next_never, .close = close_never};
  pthread_mutex_init(&c->pool.lock, NULL);
  pthread_cond_init(&c->pool.cond, NULL);
  c->pool.passes = calloc(1, sizeof *c->pool.passes);
  c->pool.max_passes = c->pool.max_running = 1;
  assert_non_null(c->pool.passes);
}

static void obtain_teardown(obtain_fixture *x) {
  bc__env_release(x->c.env);
  free(x->c.pool.passes);
  pthread_mutex_destroy(&x->c.pool.lock);
  pthread_cond_destroy(&x->c.pool.cond);
  /* The environment's files (state.c), and the lease environment's in
   * its directory lease-BOOT (lease.h): nothing else is made there. */
  static const char *const files[] = {"data.mdb", "lock.mdb", "gate", "users"};
  for (size_t i = 0; i < 4; i++) {
    char path[96];
    snprintf(path, sizeof path, "%s/%s", x->dir, files[i]);
    unlink(path);
  }
  DIR *d = opendir(x->dir);
  assert_non_null(d);
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, "lease-", 6) != 0) continue;
    char path[256];
    for (size_t i = 0; i < 2; i++) {
      snprintf(path, sizeof path, "%s/%s/%s", x->dir, e->d_name, files[i]);
      unlink(path);
    }
    snprintf(path, sizeof path, "%s/%s", x->dir, e->d_name);
    assert_int_equal(rmdir(path), 0);
  }
  closedir(d);
  assert_int_equal(rmdir(x->dir), 0);
}

static void test_obtain(void **state) {
  (void)state;
  fake f = {.dead_pid = DEAD.pid};
  obtain_fixture x;
  bc__shard_rec rec;
  bool found;
  obtain_setup(&x, &f, false);
  bc_cache *c = &x.c;
  /* PRESENT: its state, nothing claimed. */
  present(&f, 1, 100, 4);
  assert_int_equal(bc__obtain(c, 1, BC__WAIT, &rec), 0);
  assert_int_equal(rec.state, SHARD_PRESENT);
  assert_int_equal(rec.bytes, 100);
  assert_int_equal(f.commits, 0);
  /* The length it read is known now (lower bound 20). */
  assert_int_equal(atomic_load(&c->known_length), 20);
  /* Missing, no source: BC_ENOTCACHED, nothing claimed. */
  assert_int_equal(bc__obtain(c, 2, BC__WAIT, &rec), BC_ENOTCACHED);
  rec_of(&f, 2, &found);
  assert_false(found);
  /* Past a final length: BC_ERANGE. */
  set_key(&f, BC__KEY_FINAL, 1);
  assert_int_equal(bc__obtain(c, 2, BC__WAIT, &rec), BC_ERANGE);
  assert_true(atomic_load(&c->final));
  obtain_teardown(&x);

  fake g = {.dead_pid = DEAD.pid};
  obtain_setup(&x, &g, true);
  c = &x.c;
  /* Claimed by a live process: never waited for without BC__WAIT. */
  bc__store other = store_of(&g, OTHER), dead = store_of(&g, DEAD);
  bool claimed;
  assert_int_equal(bc__store_claim(&other, 3, 9, &rec, &claimed), 0);
  assert_int_equal(bc__obtain(c, 3, BC__NO_WAIT, &rec), BC_EAGAIN);
  assert_non_null(strstr(bc_errmsg(), "process 200"));
  assert_int_equal(bc__obtain(c, 3, BC__PREFETCH, &rec), BC_EAGAIN);
  assert_int_equal(rec_of(&g, 3, &found).owner.pid, OTHER.pid);
  /* Claimed by a dead process: taken over (its file purged), filled, and
   * on the fill's failure the claim is released and the error returned. */
  assert_int_equal(bc__store_claim(&dead, 4, 1, &rec, &claimed), 0);
  g.file[4] = true;
  int commits = g.commits;
  assert_int_equal(bc__obtain(c, 4, BC__WAIT, &rec), BC_EIO);
  assert_string_equal(bc_errmsg(), "no pass today");
  assert_false(g.file[4]);
  assert_int_equal(g.purges, 1);
  assert_int_equal(g.commits, commits + 2); /* the claim, its release */
  rec_of(&g, 4, &found);
  assert_false(found);
  obtain_teardown(&x);
}


/* ---- publish-behind ------------------------------------------------------------------ */

/* Claims that reserve room (bc__store_claim_room) under a limit of 350
 * with three shards of 100 present: each reserves 100 bytes, evicting the
 * least recently used while PRESENT bytes + all rooms + 100 > 350; when
 * nothing is left to evict the claim is made without room (0), nothing
 * fails.  Releasing a claim gives its room back; publishing turns it into
 * the shard's bytes. */
static void test_claim_reserves_room(void **state) {
  (void)state;
  fake f = {0};
  bc__store me = store_of(&f, ME);
  present(&f, 0, 100, 3);
  present(&f, 1, 100, 1);
  present(&f, 2, 100, 2);
  set_key(&f, BC__KEY_LIMIT, 350);
  bc__shard_rec rec;
  bool claimed, found;
  uint64_t room;
  bc__victims v = {0};
  const uint64_t evicted[3] = {1, 2, 0}; /* LRU order */
  for (uint64_t k = 0; k < 3; k++) {
    bc__publish_req q = req_of(5 + k, 70 + k, 100);
    assert_int_equal(bc__store_claim_room(&me, &q, &rec, &claimed, &room, &v), 0);
    assert_true(claimed);
    assert_int_equal(room, 100);
    assert_int_equal(v.n, k + 1);
    assert_int_equal(v.shards[k], evicted[k]);
    assert_false(f.file[evicted[k]]);
    bc__shard_rec mine = rec_of(&f, 5 + k, &found);
    assert_true(found && mine.state == SHARD_FILLING && mine.records == 100);
    assert_int_equal(f.state.key[BC__KEY_BYTES], 200 - 100 * k);
  }
  /* 0 present + 300 reserved + 100 > 350, nothing to evict: no room. */
  bc__publish_req q = req_of(9, 80, 100);
  assert_int_equal(bc__store_claim_room(&me, &q, &rec, &claimed, &room, &v), 0);
  assert_true(claimed);
  assert_int_equal(room, 0);
  assert_int_equal(rec_of(&f, 9, &found).records, 0);
  assert_int_equal(v.n, 3);
  /* Its synchronous publish: the room is held by claims in progress,
   * BC_EAGAIN (the caller waits for them). */
  bool regen = false;
  bc__victims v2 = {0};
  assert_int_equal(bc__store_publish(&me, &q, &v2, &regen), BC_EAGAIN);
  /* A claim released gives its room back: now it fits. */
  bc__store_release(&me, 5, 70);
  assert_int_equal(bc__store_publish(&me, &q, &v2, &regen), 0);
  assert_int_equal(v2.n, 0);
  assert_int_equal(f.state.key[BC__KEY_BYTES], 100);
  /* Without a limit: unlimited room, nothing evicted. */
  fake g = {0};
  bc__store me2 = store_of(&g, ME);
  present(&g, 0, 100, 1);
  bc__publish_req q2 = req_of(3, 5, 100);
  assert_int_equal(bc__store_claim_room(&me2, &q2, &rec, &claimed, &room, &v2), 0);
  assert_true(claimed);
  assert_int_equal(room, UINT64_MAX);
  assert_int_equal(rec_of(&g, 3, &found).records, 0);
  bc__victims_free(&v);
  bc__victims_free(&v2);
}

/* A batch of three claimed shards (bc__store_publish_batch): one write
 * transaction (one commit) with one directory sync for all of them; a
 * shard that fails its checks (a checksum other than the one recorded)
 * fails alone and is not installed.  A failing directory sync fails the
 * whole batch: nothing becomes PRESENT, no file stays. */
static void test_publish_batch(void **state) {
  (void)state;
  fake f = {0};
  bc__store me = store_of(&f, ME);
  bc__shard_rec rec;
  bool claimed, found;
  for (uint64_t s = 0; s < 3; s++) {
    assert_int_equal(bc__store_claim(&me, s, 10 + s, &rec, &claimed), 0);
    assert_true(claimed);
  }
  /* Shard 1 was published before with another checksum. */
  bc__store_txn t = {.f = &f, .st = f.state};
  f_sum_put(&t, 1, 999);
  f.state = t.st;
  bc__publish_req q[3] = {req_of(0, 10, 100), req_of(1, 11, 100), req_of(2, 12, 100)};
  bc_error_state errs[3] = {BC_ERROR_STATE_INIT, BC_ERROR_STATE_INIT, BC_ERROR_STATE_INIT};
  bool regen[3];
  bc__victims v = {0};
  int commits = f.commits;
  assert_int_equal(bc__store_publish_batch(&me, q, 3, 0, &v, errs, regen), 0);
  assert_int_equal(f.commits, commits + 1);
  assert_int_equal(f.dir_syncs, 1);
  assert_int_equal(errs[0].code, 0);
  assert_int_equal(errs[1].code, BC_ENONDET);
  assert_int_equal(errs[2].code, 0);
  assert_int_equal(rec_of(&f, 0, &found).state, SHARD_PRESENT);
  assert_int_equal(rec_of(&f, 1, &found).state, SHARD_FILLING); /* its claim */
  assert_int_equal(rec_of(&f, 2, &found).state, SHARD_PRESENT);
  assert_true(f.file[0] && !f.file[1] && f.file[2]);
  assert_int_equal(f.state.key[BC__KEY_BYTES], 200);
  assert_int_equal(f.state.key[BC__KEY_LENGTH], 3 * SR);
  /* The directory sync fails: every shard of the batch fails. */
  for (uint64_t s = 3; s < 5; s++)
    assert_int_equal(bc__store_claim(&me, s, 10 + s, &rec, &claimed), 0);
  bc__publish_req r[2] = {req_of(3, 13, 100), req_of(4, 14, 100)};
  f.fail_sync = true;
  assert_int_equal(bc__store_publish_batch(&me, r, 2, 0, &v, errs, regen), BC_EIO);
  assert_int_equal(errs[0].code, BC_EIO);
  assert_int_equal(errs[1].code, BC_EIO);
  assert_int_equal(rec_of(&f, 3, &found).state, SHARD_FILLING);
  assert_int_equal(rec_of(&f, 4, &found).state, SHARD_FILLING);
  assert_true(!f.file[3] && !f.file[4]);
  assert_int_equal(f.state.key[BC__KEY_BYTES], 200);
  for (int i = 0; i < 3; i++) bc_error_state_clear(&errs[i]);
  bc__victims_free(&v);
}

/* A batch whose claims reserved their room under a limit that was lowered
 * since (another process opened the root with a smaller one): no room for
 * it even with nothing left to evict.  It used to fail every shard with
 * BC_ENOSPC (and the publisher reported it to the next read); now it is
 * BC_EAGAIN with the files left installed, for the publisher to try again
 * (or bypass them), and a retry once there is room publishes them. */
static void test_publish_batch_no_room(void **state) {
  (void)state;
  fake f = {0};
  bc__store me = store_of(&f, ME), other = store_of(&f, OTHER);
  set_key(&f, BC__KEY_LIMIT, 400);
  present(&f, 9, 100, 1);
  bc__shard_rec rec;
  bool claimed, found;
  uint64_t room = 0;
  bc__victims v = {0};
  for (uint64_t s = 0; s < 3; s++) { /* 300 reserved by our claims */
    bc__publish_req c = req_of(s, 10 + s, 100);
    assert_int_equal(bc__store_claim_room(&me, &c, &rec, &claimed, &room, &v), 0);
    assert_true(claimed && room == 100);
    f.file[s] = true; /* installed by the publisher, before the batch */
  }
  /* Another process's claim of 100, made under a larger limit. */
  set_key(&f, BC__KEY_LIMIT, 500);
  bc__publish_req oc = req_of(7, 70, 100);
  assert_int_equal(bc__store_claim_room(&other, &oc, &rec, &claimed, &room, &v), 0);
  assert_true(claimed && room == 100);
  set_key(&f, BC__KEY_LIMIT, 350); /* lowered: 300 + 100 reserved > 350 */
  bc__publish_req q[3] = {req_of(0, 10, 100), req_of(1, 11, 100), req_of(2, 12, 100)};
  for (int i = 0; i < 3; i++) q[i].installed = true;
  bc_error_state errs[3] = {BC_ERROR_STATE_INIT, BC_ERROR_STATE_INIT, BC_ERROR_STATE_INIT};
  bool regen[3];
  assert_int_equal(bc__store_publish_batch(&me, q, 3, 0, &v, errs, regen), BC_EAGAIN);
  assert_non_null(strstr(bc_errmsg(), "no room for 300 bytes"));
  for (uint64_t s = 0; s < 3; s++) {
    assert_int_equal(errs[s].code, BC_EAGAIN);
    assert_int_equal(rec_of(&f, s, &found).state, SHARD_FILLING); /* claims stay */
    assert_true(f.file[s]); /* and their files */
  }
  assert_false(f.file[9]); /* evicted on the way (kept, as evictions are) */
  rec_of(&f, 9, &found);
  assert_false(found);
  /* The other claim ends: the retry publishes all three. */
  bc__store_release(&other, 7, 70);
  assert_int_equal(bc__store_publish_batch(&me, q, 3, 0, &v, errs, regen), 0);
  for (uint64_t s = 0; s < 3; s++) {
    assert_int_equal(errs[s].code, 0);
    assert_int_equal(rec_of(&f, s, &found).state, SHARD_PRESENT);
    assert_true(f.file[s]);
  }
  assert_int_equal(f.state.key[BC__KEY_BYTES], 300);
  for (int i = 0; i < 3; i++) bc_error_state_clear(&errs[i]);
  bc__victims_free(&v);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_publish_batch_no_room),
      cmocka_unit_test(test_claims),
      cmocka_unit_test(test_clear),
      cmocka_unit_test(test_claim_reserves_room),
      cmocka_unit_test(test_publish_batch),
      cmocka_unit_test(test_publish_evicts_lru),
      cmocka_unit_test(test_publish_evicts_by_cost),
      cmocka_unit_test(test_publish_cost_credit_is_capped),
      cmocka_unit_test(test_publish_returns_every_victim),
      cmocka_unit_test(test_publish_nothing_to_evict),
      cmocka_unit_test(test_publish_checks),
      cmocka_unit_test(test_forget_names_its_file),
      cmocka_unit_test(test_publish_install_fails),
      cmocka_unit_test(test_publish_commit_fails_after_install),
      cmocka_unit_test(test_publish_commit_fails_after_evicting),
      cmocka_unit_test(test_publish_final_commit_fails),
      cmocka_unit_test(test_obtain),
  };
  return cmocka_run_group_tests_name("cache policy (fake store)", tests, NULL, NULL);
}
