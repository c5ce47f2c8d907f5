/*
 * The appender (bc_cache_appender_open ...): records appended once, in
 * order, to a cache without a source, published shard by shard.  Checked
 * against a model (rec(i) below): exact bytes of every record, exact
 * counts of shards, fills, regenerations and evictions; the end made
 * final by close; a limit smaller than the data; a crashed appender (a
 * child that _exits mid-shard); the determinism checks against existing
 * and evicted shards; two appenders racing for the same shards; discard.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <pthread.h>

#include "util.h"

#define R 4

typedef struct fixture {
  char *dir, *root, *scratch;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  if (f == NULL) return -1;
  f->dir = cu_tmp_dir();
  f->root = cu_path(f->dir, "c");
  f->scratch = cu_path(f->root, "scratch");
  cu_watchdog(120);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  cu_rm_rf(f->dir);
  free(f->scratch);
  free(f->root);
  free(f->dir);
  free(f);
  cu_watchdog(0);
  return 0;
}

/* Record i of the model (`salt` != 0: a different stream from record
 * `salt` - 1 on): "rec-I-" then I % 7 + 90 bytes of 'a' + I % 26. */
static size_t rec(uint64_t i, uint64_t salt, char *out) {
  int n = snprintf(out, 64, "rec-%llu-", (unsigned long long)i);
  size_t pad = (size_t)(i % 7) + 90;
  memset(out + n, 'a' + (int)(i % 26), pad);
  if (salt != 0 && i + 1 >= salt) out[n] = 'X';
  return (size_t)n + pad;
}

static bc_cache_options options(uint64_t limit) {
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = R;
  o.prefetch_shards = -1; /* the smallest workable limit: two shards */
  o.disk_limit = limit;
  return o;
}

static bc_cache *open_cache(const fixture *f, uint64_t limit) {
  bc_cache *c = NULL;
  bc_cache_options o = options(limit);
  CU_OK(bc_cache_open(&c, f->root, NULL, &o));
  return c;
}

/* Appends records [0, n) of stream `salt`; returns the first failure (0
 * when none) and where it happened in *at. */
static int append_n(bc_appender *a, uint64_t n, uint64_t salt, uint64_t *at) {
  char buf[256];
  for (uint64_t i = 0; i < n; i++) {
    int rc = bc_appender_append(a, buf, rec(i, salt, buf));
    if (rc != 0) {
      if (at) *at = i;
      return rc;
    }
  }
  return 0;
}

static void check_record(bc_cache *c, uint64_t i) {
  char want[256];
  size_t n = rec(i, 0, want);
  bc_buf b = BC_BUF_INIT;
  CU_OK(bc_cache_get(c, (int64_t)i, &b));
  assert_int_equal(b.size, n);
  assert_memory_equal(b.data, want, n);
  bc_buf_release(&b);
}

static bc_cache_stats stats(bc_cache *c) {
  bc_cache_stats s;
  CU_OK(bc_cache_stats_get(c, &s));
  return s;
}

static void test_append_publishes_and_ends(void **state) {
  fixture *f = *state;
  bc_cache *c = open_cache(f, 0);
  bc_appender *a = NULL;
  CU_OK(bc_cache_appender_open(&a, c, NULL));
  CU_OK(append_n(a, 5, 0, NULL));
  assert_int_equal(bc_appender_count(a), 5);
  /* Shard 0 is published by its 4th record; shard 1 is in progress. */
  bc_cache_stats s = stats(c);
  assert_int_equal(s.shards_present, 1);
  assert_int_equal(s.fills, 1);
  assert_int_equal(s.length, 4);
  assert_false(s.length_final);
  check_record(c, 3);
  bc_buf b = BC_BUF_INIT;
  CU_RC(bc_cache_get(c, 4, &b), BC_ENOTCACHED); /* no source: never waits */
  assert_non_null(strstr(bc_errmsg(), "has no source"));
  char buf[256];
  for (uint64_t i = 5; i < 10; i++) CU_OK(bc_appender_append(a, buf, rec(i, 0, buf)));
  CU_OK(bc_appender_close(a));
  s = stats(c);
  assert_int_equal(s.shards_present, 3);
  assert_int_equal(s.fills, 3);
  assert_int_equal(s.records_written, 10);
  assert_int_equal(s.length, 10);
  assert_true(s.length_final);
  bc_cache_shard sh[4];
  size_t count = 0;
  CU_OK(bc_cache_shards(c, sh, 4, &count));
  assert_int_equal(count, 3);
  assert_int_equal(sh[2].start, 8);
  assert_int_equal(sh[2].end, 10);
  char *path = NULL;
  CU_OK(bc_cache_shard_path(c, &sh[2], &path));
  assert_non_null(strstr(path, "/shards/8.10.bag"));
  free(path);
  CU_RC(bc_cache_get(c, 10, &b), BC_ERANGE);
  bc_buf_release(&b);
  assert_int_equal(cu_dir_count(f->scratch), 0);
  bc_cache_close(c);
  /* Another process's view: everything there, the length final. */
  c = open_cache(f, 0);
  for (uint64_t i = 0; i < 10; i++) check_record(c, i);
  uint64_t len = 0;
  CU_OK(bc_cache_len(c, &len));
  assert_int_equal(len, 10);
  CU_OK(bc_cache_verify(c, NULL));
  bc_cache_close(c);
}

static void test_append_empty_and_boundary(void **state) {
  fixture *f = *state;
  bc_cache *c = open_cache(f, 0);
  bc_appender *a = NULL;
  CU_OK(bc_cache_appender_open(&a, c, NULL));
  CU_OK(append_n(a, 8, 0, NULL)); /* ends on a shard boundary */
  CU_OK(bc_appender_close(a));
  bc_cache_stats s = stats(c);
  assert_int_equal(s.shards_present, 2);
  assert_int_equal(s.length, 8);
  assert_true(s.length_final);
  bc_cache_close(c);
  cu_rm_rf(f->root);
  c = open_cache(f, 0);
  CU_OK(bc_cache_appender_open(&a, c, NULL));
  CU_OK(bc_appender_close(a)); /* an empty stream */
  s = stats(c);
  assert_int_equal(s.shards_present, 0);
  assert_int_equal(s.length, 0);
  assert_true(s.length_final);
  bc_cache_close(c);
}

static void test_append_undecided_length(void **state) {
  fixture *f = *state;
  bc_cache *c = NULL;
  CU_OK(bc_cache_open(&c, f->root, NULL, NULL));
  bc_appender *a = (bc_appender *)1;
  CU_RC(bc_cache_appender_open(&a, c, NULL), BC_EINVAL);
  assert_ptr_equal(a, (bc_appender *)1); /* not assigned on failure */
  assert_non_null(strstr(bc_errmsg(), "shard length"));
  bc_cache_close(c);
  /* The estimate, as the open's from a source: 92-byte records cost 100
   * bytes each (8 for their offset). */
  bc_buf sample[4];
  char data[92];
  memset(data, 'x', sizeof data);
  for (int i = 0; i < 4; i++)
    sample[i] = (bc_buf){.data = (unsigned char *)data, .size = 92, .capacity = 92};
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_bytes = 1000;
  uint64_t records = 0;
  CU_OK(bc_cache_estimate_shard_records(&o, sample, 4, &records));
  assert_int_equal(records, 10);
  CU_OK(bc_cache_estimate_shard_records(&o, NULL, 0, &records));
  assert_int_equal(records, 125);
}

/* Bytes of one full shard of the model (measured). */
static uint64_t shard_size(const fixture *f) {
  char *root = cu_path(f->dir, "measure");
  bc_cache *c = NULL;
  bc_cache_options o = options(0);
  CU_OK(bc_cache_open(&c, root, NULL, &o));
  bc_appender *a = NULL;
  CU_OK(bc_cache_appender_open(&a, c, NULL));
  CU_OK(append_n(a, 8, 0, NULL));
  CU_OK(bc_appender_close(a));
  uint64_t bytes = stats(c).bytes_on_disk;
  bc_cache_close(c);
  cu_rm_rf(root);
  free(root);
  return bytes / 2 + 16; /* the two differ by a few bytes */
}

static void test_append_under_limit(void **state) {
  fixture *f = *state;
  uint64_t limit = 3 * shard_size(f);
  bc_cache *c = open_cache(f, limit);
  bc_appender *a = NULL;
  CU_OK(bc_cache_appender_open(&a, c, NULL));
  CU_OK(append_n(a, 40, 0, NULL));
  CU_OK(bc_appender_close(a));
  bc_cache_stats s = stats(c);
  assert_int_equal(s.fills, 10);
  assert_int_equal(s.evictions, 7);
  assert_int_equal(s.shards_present, 3);
  assert_true(s.bytes_on_disk <= limit);
  assert_int_equal(s.length, 40);
  assert_true(s.length_final);
  for (uint64_t i = 28; i < 40; i++) check_record(c, i);
  /* An evicted shard: the cache has no source to rebuild it from. */
  bc_buf b = BC_BUF_INIT;
  CU_RC(bc_cache_get(c, 0, &b), BC_ENOTCACHED);
  assert_non_null(strstr(bc_errmsg(), "records 0..4 are not cached and the cache has no source"));
  bc_buf_release(&b);

  /* Appending the stream again rebuilds the evicted shards (regenerated:
   * checked against their first checksums).  Each rebuilt shard evicts
   * the least recently used one, so 7, 8 and 9 are gone too by the time
   * the stream reaches them: all ten are rebuilt. */
  CU_OK(bc_cache_appender_open(&a, c, NULL));
  CU_OK(append_n(a, 40, 0, NULL));
  CU_OK(bc_appender_close(a));
  s = stats(c);
  assert_int_equal(s.fills, 10);
  assert_int_equal(s.regenerations, 10);
  assert_int_equal(s.evictions, 17);
  assert_int_equal(s.shards_present, 3);
  assert_true(s.bytes_on_disk <= limit);

  /* A different stream: the first evicted shard it rebuilds differs. */
  bc_cache_shard sh[3];
  size_t count = 0;
  CU_OK(bc_cache_shards(c, sh, 3, &count));
  uint64_t absent = 0; /* the first shard not present */
  for (size_t k = 0; k < count && sh[k].start == absent * R; k++) absent++;
  CU_OK(bc_cache_appender_open(&a, c, NULL));
  uint64_t at = 0;
  CU_RC(append_n(a, 40, absent * R + 2, &at), BC_ENONDET);
  assert_int_equal(at, absent * R + R - 1); /* at the shard's publish */
  assert_non_null(strstr(bc_errmsg(), "not deterministic"));
  /* The failure is final; close says it again and publishes nothing. */
  CU_RC(bc_appender_close(a), BC_ENONDET);
  assert_int_equal(stats(c).regenerations, 10);
  assert_int_equal(cu_dir_count(f->scratch), 0);
  bc_cache_close(c);
}

static void test_append_verifies_existing(void **state) {
  fixture *f = *state;
  bc_cache *c = open_cache(f, 0);
  bc_appender *a = NULL;
  CU_OK(bc_cache_appender_open(&a, c, NULL));
  CU_OK(append_n(a, 10, 0, NULL));
  CU_OK(bc_appender_close(a));
  /* The same stream again: verified, nothing written. */
  CU_OK(bc_cache_appender_open(&a, c, NULL));
  CU_OK(append_n(a, 10, 0, NULL));
  CU_OK(bc_appender_close(a));
  bc_cache_stats s = stats(c);
  assert_int_equal(s.fills, 3);
  assert_int_equal(s.records_written, 10);
  /* A record of shard 1 differs: found at that shard's end. */
  uint64_t at = 0;
  CU_OK(bc_cache_appender_open(&a, c, NULL));
  CU_RC(append_n(a, 10, 6, &at), BC_ENONDET);
  assert_int_equal(at, 7);
  assert_non_null(strstr(bc_errmsg(), "shard 1 (records 4..8)"));
  bc_appender_discard(a);
  /* Longer and shorter streams than the final length. */
  CU_OK(bc_cache_appender_open(&a, c, NULL));
  CU_OK(append_n(a, 11, 0, NULL));
  CU_RC(bc_appender_close(a), BC_ENONDET);
  CU_OK(bc_cache_appender_open(&a, c, NULL));
  CU_OK(append_n(a, 9, 0, NULL));
  CU_RC(bc_appender_close(a), BC_ENONDET);
  CU_OK(bc_cache_appender_open(&a, c, NULL));
  CU_OK(append_n(a, 8, 0, NULL));
  CU_RC(bc_appender_close(a), BC_ENONDET);
  assert_non_null(strstr(bc_errmsg(), "not deterministic"));
  s = stats(c);
  assert_int_equal(s.fills, 3);
  assert_int_equal(s.length, 10);
  for (uint64_t i = 0; i < 10; i++) check_record(c, i);
  bc_cache_close(c);
}

static void test_append_discard(void **state) {
  fixture *f = *state;
  bc_cache *c = open_cache(f, 0);
  bc_appender *a = NULL;
  CU_OK(bc_cache_appender_open(&a, c, NULL));
  CU_OK(append_n(a, 6, 0, NULL));
  /* Shard 1's writer: its one temporary file (the sidecar comes at close). */
  assert_int_equal(cu_dir_count(f->scratch), 1);
  bc_appender_discard(a);
  bc_cache_stats s = stats(c);
  assert_int_equal(s.shards_present, 1);
  assert_int_equal(s.length, 4);
  assert_false(s.length_final);
  assert_int_equal(cu_dir_count(f->scratch), 0);
  /* Its claim is gone: the next appender fills shard 1 at once. */
  CU_OK(bc_cache_appender_open(&a, c, NULL));
  CU_OK(append_n(a, 10, 0, NULL));
  CU_OK(bc_appender_close(a));
  s = stats(c);
  assert_int_equal(s.fills, 3);
  assert_int_equal(s.waits, 0);
  assert_true(s.length_final);
  for (uint64_t i = 0; i < 10; i++) check_record(c, i);
  bc_cache_close(c);
}

static void test_append_crash(void **state) {
  fixture *f = *state;
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    /* Two shards published, the third claimed with 2 records written. */
    bc_cache *c = NULL;
    bc_cache_options o = options(0);
    bc_appender *a = NULL;
    if (bc_cache_open(&c, f->root, NULL, &o) != 0 ||
        bc_cache_appender_open(&a, c, NULL) != 0 || append_n(a, 10, 0, NULL) != 0)
      _exit(1);
    _exit(0);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  bc_cache *c = open_cache(f, 0);
  /* The published shards are intact; the dead writer's scratch is gone. */
  CU_OK(bc_cache_verify(c, NULL));
  bc_cache_stats s = stats(c);
  assert_int_equal(s.shards_present, 2);
  assert_int_equal(s.length, 8);
  assert_false(s.length_final);
  assert_int_equal(cu_dir_count(f->scratch), 0);
  for (uint64_t i = 0; i < 8; i++) check_record(c, i);
  /* Appending again takes the dead claim over without waiting. */
  bc_appender *a = NULL;
  CU_OK(bc_cache_appender_open(&a, c, NULL));
  CU_OK(append_n(a, 10, 0, NULL));
  CU_OK(bc_appender_close(a));
  s = stats(c);
  assert_int_equal(s.fills, 1);
  assert_int_equal(s.waits, 0);
  assert_int_equal(s.shards_present, 3);
  assert_int_equal(s.length, 10);
  assert_true(s.length_final);
  for (uint64_t i = 0; i < 10; i++) check_record(c, i);
  bc_cache_close(c);
}

typedef struct racer {
  bc_cache *c;
  int rc;
} racer;

static void *race_main(void *arg) {
  racer *r = arg;
  bc_appender *a = NULL;
  r->rc = bc_cache_appender_open(&a, r->c, NULL);
  if (r->rc == 0) r->rc = append_n(a, 22, 0, NULL);
  if (r->rc == 0) r->rc = bc_appender_close(a);
  else bc_appender_discard(a);
  return NULL;
}

static void test_append_race(void **state) {
  fixture *f = *state;
  bc_cache *c = open_cache(f, 0);
  racer r[3] = {{c, -1}, {c, -1}, {c, -1}};
  pthread_t th[3];
  for (int i = 0; i < 3; i++) assert_int_equal(pthread_create(&th[i], NULL, race_main, &r[i]), 0);
  for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 3; i++) assert_int_equal(r[i].rc, 0);
  bc_cache_stats s = stats(c);
  assert_int_equal(s.fills, 6); /* each shard published once */
  assert_int_equal(s.regenerations, 0);
  assert_int_equal(s.shards_present, 6);
  assert_int_equal(s.length, 22);
  assert_true(s.length_final);
  for (uint64_t i = 0; i < 22; i++) check_record(c, i);
  assert_int_equal(cu_dir_count(f->scratch), 0);
  bc_cache_close(c);
}

/* ---- with a source: readers and fills meet the appender ---- */

typedef struct reader {
  bc_cache *c;
  int64_t index;
  int rc;
  bc_buf buf;
} reader;

static void *reader_main(void *arg) {
  reader *r = arg;
  r->rc = bc_cache_get(r->c, r->index, &r->buf);
  return NULL;
}

/* Appends model records [from, to) of the test source (variant 1 for
 * records at or past `differ`). */
static int append_model(bc_appender *a, uint64_t from, uint64_t to, uint64_t differ) {
  unsigned char buf[TS_MAX_RECORD];
  for (uint64_t i = from; i < to; i++) {
    int rc = bc_appender_append(a, buf, ts_record(i, false, i >= differ, buf));
    if (rc != 0) return rc;
  }
  return 0;
}

static bc_cache *open_sourced(const fixture *f, ts_shared **sh) {
  ts_config cfg = ts_config_default(12);
  *sh = ts_shared_new(&cfg);
  assert_non_null(*sh);
  bc_cache *c = NULL;
  bc_cache_options o = options(0);
  CU_OK(cu_open(&c, f->root, &cfg, *sh, &o));
  return c;
}

static void test_append_reader_waits(void **state) {
  fixture *f = *state;
  ts_shared *sh = NULL;
  bc_cache *c = open_sourced(f, &sh);
  bc_appender *a = NULL;
  CU_OK(bc_cache_appender_open(&a, c, NULL));
  CU_OK(append_model(a, 0, 6, UINT64_MAX)); /* shard 1 in progress */
  reader r = {c, 5, -1, BC_BUF_INIT};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, reader_main, &r), 0);
  usleep(20000); /* (the outcome is the same if the reader comes later) */
  CU_OK(append_model(a, 6, 12, UINT64_MAX));
  pthread_join(th, NULL);
  CU_OK(r.rc);
  assert_true(ts_matches(5, false, &r.buf));
  bc_buf_release(&r.buf);
  CU_OK(bc_appender_close(a));
  /* The reader waited for the appender's shard: the source never ran. */
  assert_int_equal(atomic_load(&sh->opens), 0);
  bc_cache_stats s = stats(c);
  assert_int_equal(s.fills, 3);
  assert_int_equal(s.length, 12);
  assert_true(s.length_final);
  bc_cache_close(c);
  ts_shared_free(sh);
}

static void test_append_meets_fill(void **state) {
  fixture *f = *state;
  ts_shared *sh = NULL;
  bc_cache *c = open_sourced(f, &sh);
  bc_appender *a = NULL;
  CU_OK(bc_cache_appender_open(&a, c, NULL));
  CU_OK(append_model(a, 0, 2, UINT64_MAX));
  /* A reader ahead of the appender fills shard 2 from the source... */
  bc_buf b = BC_BUF_INIT;
  CU_OK(bc_cache_get(c, 9, &b));
  assert_true(ts_matches(9, false, &b));
  assert_int_equal(atomic_load(&sh->opens), 1);
  /* ...and the appender checks its records against that shard. */
  CU_OK(append_model(a, 2, 12, UINT64_MAX));
  CU_OK(bc_appender_close(a));
  bc_cache_stats s = stats(c);
  /* Shard 0 appended, 2 filled; 1 kept by the reader's pass on its way
   * to 2 (the appender then checked its records against it). */
  assert_int_equal(s.fills, 2);
  assert_int_equal(s.shards_kept, 1);
  assert_int_equal(s.regenerations, 0);
  assert_int_equal(s.length, 12);
  assert_true(s.length_final);
  /* Another stream's records for shard 2 differ from the source's. */
  CU_OK(bc_cache_appender_open(&a, c, NULL));
  CU_RC(append_model(a, 0, 12, 9), BC_ENONDET);
  assert_int_equal(bc_appender_count(a), 12); /* the 12th, shard 2's end, failed */
  bc_appender_discard(a);
  for (uint64_t i = 0; i < 12; i++) {
    CU_OK(bc_cache_get(c, (int64_t)i, &b));
    assert_true(ts_matches(i, false, &b));
  }
  bc_buf_release(&b);
  bc_cache_close(c);
  ts_shared_free(sh);
}

static void test_append_claim_late(void **state) {
  fixture *f = *state;
  ts_shared *sh = NULL;
  bc_cache *c = open_sourced(f, &sh);
  bc_appender_options o = BC_APPENDER_OPTIONS_INIT;
  o.claim_late = true;
  bc_appender *a = NULL;
  CU_OK(bc_cache_appender_open(&a, c, &o));
  CU_OK(append_model(a, 0, 6, UINT64_MAX)); /* shard 1 in progress */
  /* The appender's own thread reads the shard in progress: nothing to wait
   * for, it is filled from the source... */
  bc_buf b = BC_BUF_INIT;
  CU_OK(bc_cache_get(c, 5, &b));
  assert_true(ts_matches(5, false, &b));
  assert_int_equal(atomic_load(&sh->opens), 1);
  /* ...and the appender's records are checked against it. */
  CU_OK(append_model(a, 6, 12, UINT64_MAX));
  CU_OK(bc_appender_close(a));
  bc_cache_stats s = stats(c);
  assert_int_equal(s.fills, 3);
  assert_int_equal(s.records_written, 4 + 4 + 4); /* 0 and 2 appended, 1 filled */
  assert_true(s.length_final);
  for (uint64_t i = 0; i < 12; i++) {
    CU_OK(bc_cache_get(c, (int64_t)i, &b));
    assert_true(ts_matches(i, false, &b));
  }
  bc_buf_release(&b);
  assert_int_equal(cu_dir_count(f->scratch), 0);
  /* An unknown options version is refused. */
  o.version = 99;
  a = NULL;
  CU_RC(bc_cache_appender_open(&a, c, &o), BC_EINVAL);
  assert_null(a);
  bc_cache_close(c);
  ts_shared_free(sh);
}

static void test_append_publish_behind(void **state) {
  fixture *f = *state;
  bc_cache *c = open_cache(f, 0);
  bc_appender_options o = BC_APPENDER_OPTIONS_INIT;
  o.publish_behind = true;
  bc_appender *a = NULL;
  CU_OK(bc_cache_appender_open(&a, c, &o));
  CU_OK(append_n(a, 22, 0, NULL));
  CU_OK(bc_appender_close(a)); /* waits for the publishes */
  bc_cache_stats s = stats(c);
  assert_int_equal(s.fills, 6);
  assert_int_equal(s.shards_present, 6);
  assert_int_equal(s.length, 22);
  assert_true(s.length_final);
  for (uint64_t i = 0; i < 22; i++) check_record(c, i);
  assert_int_equal(cu_dir_count(f->scratch), 0);
  /* A shard found different behind: its failure comes with the next
   * completed shard, here with close. */
  CU_OK(bc_cache_appender_open(&a, c, &o));
  CU_OK(append_n(a, 10, 6, NULL));
  CU_RC(bc_appender_close(a), BC_ENONDET);
  assert_non_null(strstr(bc_errmsg(), "shard 1 (records 4..8)"));
  /* A complete shard handed over is published by discard too. */
  bc_cache_close(c);
  cu_rm_rf(f->root);
  c = open_cache(f, 0);
  CU_OK(bc_cache_appender_open(&a, c, &o));
  CU_OK(append_n(a, 9, 0, NULL));
  bc_appender_discard(a);
  s = stats(c);
  assert_int_equal(s.shards_present, 2);
  assert_int_equal(s.length, 8);
  assert_false(s.length_final);
  assert_int_equal(cu_dir_count(f->scratch), 0);
  for (uint64_t i = 0; i < 8; i++) check_record(c, i);
  bc_cache_close(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_append_publishes_and_ends, setup, teardown),
      cmocka_unit_test_setup_teardown(test_append_empty_and_boundary, setup, teardown),
      cmocka_unit_test_setup_teardown(test_append_undecided_length, setup, teardown),
      cmocka_unit_test_setup_teardown(test_append_under_limit, setup, teardown),
      cmocka_unit_test_setup_teardown(test_append_verifies_existing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_append_discard, setup, teardown),
      cmocka_unit_test_setup_teardown(test_append_crash, setup, teardown),
      cmocka_unit_test_setup_teardown(test_append_race, setup, teardown),
      cmocka_unit_test_setup_teardown(test_append_reader_waits, setup, teardown),
      cmocka_unit_test_setup_teardown(test_append_meets_fill, setup, teardown),
      cmocka_unit_test_setup_teardown(test_append_claim_late, setup, teardown),
      cmocka_unit_test_setup_teardown(test_append_publish_behind, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
