/*
 * The write-behind appender (bc_appender_options.write_behind): the same
 * shard files, byte for byte, as the synchronous appender (records of
 * every size, a queue smaller than a record, wraps, .bag and .bagz,
 * with and without publish_behind); back-pressure when the queue is full
 * (try_append's BC_EAGAIN, a blocked append that returns once the writer
 * goes on); the writer's failure returned by a later append and by close;
 * discard (complete shards published, the rest dropped); the interrupt
 * handler stopping the caller's wait and the writer's; fork (the child
 * cannot use the parent's appender); options of version 1.
 *
 * The writer is held deterministically by another appender of the same
 * process that claimed shard 0 and does not finish it: the write-behind
 * appender meets that fill and waits for it at the end of shard 0.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <dirent.h>
#include <unistd.h>

#include <pthread.h>

#include "fixture.h"

#define R 4

static bool no_big; /* the model without BIG records (set per test) */

/* The fx fixture (fixture.h), with a longer watchdog: the sanitizer
 * builds run these tests slowly. */
static int setup(void **state) {
  no_big = false;
  int rc = fx_setup(state);
  cu_watchdog(120);
  return rc;
}

#define BIG 5000

/* Record i of the model into out (BIG bytes): every 13th (from 5) empty,
 * every 17th (from 3) BIG bytes, else 1 + (i * 37) % 300 bytes; the bytes
 * derive from i and `salt` (!= 0: a different stream from record salt - 1
 * on). */
static size_t rec(uint64_t i, uint64_t salt, unsigned char *out) {
  size_t n = i % 13 == 5               ? 0
             : i % 17 == 3 && !no_big ? BIG
                                       : 1 + (size_t)((i * 37) % 300);
  for (size_t k = 0; k < n; k++) out[k] = (unsigned char)(i * 131 + k * 7);
  if (n > 0 && salt != 0 && i + 1 >= salt) out[0] ^= 0xff;
  return n;
}

static bc_cache *open_root(const char *root, bool zstd) {
  bc_cache *c = NULL;
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = R;
  if (zstd) o.compression = BC_COMPRESSION_ZSTD;
  CU_OK(bc_cache_open(&c, root, NULL, &o));
  return c;
}

static bc_appender *open_behind(bc_cache *c, size_t bytes, bool publish_behind) {
  bc_appender_options o = BC_APPENDER_OPTIONS_INIT;
  o.write_behind = true;
  o.behind_bytes = bytes;
  o.publish_behind = publish_behind;
  bc_appender *a = NULL;
  CU_OK(bc_cache_appender_open(&a, c, &o));
  return a;
}

/* Appends records [from, to) of stream `salt`: the first failure, or 0. */
static int append_range(bc_appender *a, uint64_t from, uint64_t to, uint64_t salt) {
  unsigned char buf[BIG];
  for (uint64_t i = from; i < to; i++) {
    int rc = bc_appender_append(a, buf, rec(i, salt, buf));
    if (rc != 0) return rc;
  }
  return 0;
}

static void check_records(bc_cache *c, uint64_t n) {
  unsigned char want[BIG];
  bc_buf b = BC_BUF_INIT;
  for (uint64_t i = 0; i < n; i++) {
    size_t size = rec(i, 0, want);
    CU_OK(bc_cache_get(c, (int64_t)i, &b));
    assert_int_equal(b.size, size);
    if (size > 0) assert_memory_equal(b.data, want, size);
  }
  bc_buf_release(&b);
}

static bc_cache_stats stats(bc_cache *c) {
  bc_cache_stats s;
  CU_OK(bc_cache_stats_get(c, &s));
  return s;
}

static int by_name(const void *x, const void *y) {
  return strcmp(*(char *const *)x, *(char *const *)y);
}

/* The sorted names of the entries of dir (NULL-terminated, malloc'd). */
static char **names(const char *dir, size_t *n) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  char **v = calloc(1024, sizeof *v);
  size_t k = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    assert_true(k < 1023);
    v[k++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(v, k, sizeof *v, by_name);
  *n = k;
  return v;
}

static void *slurp(const char *path, size_t *size) {
  FILE *fp = fopen(path, "rb");
  assert_non_null(fp);
  fseek(fp, 0, SEEK_END);
  long n = ftell(fp);
  fseek(fp, 0, SEEK_SET);
  void *p = malloc(n > 0 ? (size_t)n : 1);
  assert_int_equal(fread(p, 1, (size_t)n, fp), (size_t)n);
  fclose(fp);
  *size = (size_t)n;
  return p;
}

/* ROOT1/SUB and ROOT2/SUB hold the same files, byte for byte. */
static void same_files(const char *root1, const char *root2, const char *sub,
                       size_t want_files) {
  char *d1 = cu_path(root1, sub), *d2 = cu_path(root2, sub);
  size_t n1, n2;
  char **v1 = names(d1, &n1), **v2 = names(d2, &n2);
  assert_int_equal(n1, want_files);
  assert_int_equal(n1, n2);
  for (size_t i = 0; i < n1; i++) {
    assert_string_equal(v1[i], v2[i]);
    char *p1 = cu_path(d1, v1[i]), *p2 = cu_path(d2, v2[i]);
    size_t s1, s2;
    void *b1 = slurp(p1, &s1), *b2 = slurp(p2, &s2);
    assert_int_equal(s1, s2);
    assert_memory_equal(b1, b2, s1);
    free(b1);
    free(b2);
    free(p1);
    free(p2);
    free(v1[i]);
    free(v2[i]);
  }
  free(v1);
  free(v2);
  free(d1);
  free(d2);
}

static void test_behind_same_bytes(void **state) {
  fixture *f = *state;
  const uint64_t n = 103; /* 25 full shards and a partial one */
  for (int variant = 0; variant < 4; variant++) {
    bool zstd = variant & 1, publish_behind = variant & 2;
    bc_cache *c1 = open_root(f->root, zstd), *c2 = open_root(f->root2, zstd);
    bc_appender_options o = BC_APPENDER_OPTIONS_INIT;
    o.publish_behind = publish_behind;
    bc_appender *a1 = NULL;
    CU_OK(bc_cache_appender_open(&a1, c1, &o));
    /* 64 bytes: a BIG record grows the queue, small ones wrap. */
    bc_appender *a2 = open_behind(c2, 64, publish_behind);
    CU_OK(append_range(a1, 0, n, 0));
    CU_OK(append_range(a2, 0, n, 0));
    assert_int_equal(bc_appender_count(a2), n);
    CU_OK(bc_appender_close(a1));
    CU_OK(bc_appender_close(a2));
    bc_cache_stats s1 = stats(c1), s2 = stats(c2);
    assert_int_equal(s2.fills, 26);
    assert_int_equal(s2.fills, s1.fills);
    assert_int_equal(s2.records_written, n);
    assert_int_equal(s2.length, n);
    assert_true(s2.length_final);
    check_records(c2, n);
    /* .bag shards have record checksums in sums/; .bagz none. */
    same_files(f->root, f->root2, "shards", 26);
    if (!zstd) same_files(f->root, f->root2, "sums", 26);
    assert_int_equal(cu_dir_count(f->scratch), 0);
    bc_cache_close(c1);
    bc_cache_close(c2);
    cu_rm_rf(f->root);
    cu_rm_rf(f->root2);
  }
}

/* Appends records [0, 2) with a plain appender: shard 0 stays claimed by
 * this thread's fill until hold_end. */
static bc_appender *hold_shard0(bc_cache *c) {
  bc_appender *h = NULL;
  CU_OK(bc_cache_appender_open(&h, c, NULL));
  CU_OK(append_range(h, 0, 2, 0));
  return h;
}

static void hold_end(bc_appender *h) {
  CU_OK(append_range(h, 2, R, 0)); /* publishes shard 0 */
  bc_appender_discard(h);
}

/* Try-appends from record `from` on until BC_EAGAIN: the first record
 * refused (the queue is full: the writer is held on shard 0, or has not
 * taken anything yet).  No BIG records (each waits for an empty queue). */
static uint64_t fill_queue(bc_appender *a, uint64_t from) {
  unsigned char buf[BIG];
  for (uint64_t i = from; i < from + 1000; i++) {
    int rc = bc_appender_try_append(a, buf, rec(i, 0, buf));
    if (rc == BC_EAGAIN) return i;
    CU_OK(rc);
  }
  fail_msg("the queue never filled up");
  return 0;
}

typedef struct blocked {
  bc_appender *a;
  uint64_t from, to;
  atomic_bool done;
  int rc;
} blocked;

static void *blocked_main(void *arg) {
  blocked *b = arg;
  b->rc = append_range(b->a, b->from, b->to, 0);
  atomic_store(&b->done, true);
  return NULL;
}

static void test_behind_backpressure(void **state) {
  fixture *f = *state;
  no_big = true;
  bc_cache *c = open_root(f->root, false);
  bc_appender *h = hold_shard0(c);
  bc_appender *a = open_behind(c, 1024, false);
  /* The writer writes shard 0 to scratch/ and waits for the holder; the
   * records after it stay queued: about 1024 bytes of them. */
  uint64_t k = fill_queue(a, 0);
  assert_true(k > R && k < 2 * 1024 / 8);
  assert_int_equal(bc_appender_count(a), k); /* the refused one is not in */
  /* A blocking append waits for room (while the holder holds). */
  blocked b = {a, k, k + 20, false, -1};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, blocked_main, &b), 0);
  usleep(100000);
  assert_false(atomic_load(&b.done));
  hold_end(h); /* the writer checks shard 0 against it and goes on */
  pthread_join(th, NULL);
  CU_OK(b.rc);
  CU_OK(append_range(a, k + 20, 41, 0));
  CU_OK(bc_appender_close(a));
  bc_cache_stats s = stats(c);
  assert_int_equal(s.fills, 11); /* shard 0 by the holder, 1..10 by a */
  assert_int_equal(s.records_written, 41);
  assert_int_equal(s.length, 41);
  assert_true(s.length_final);
  check_records(c, 41);
  assert_int_equal(cu_dir_count(f->scratch), 0);
  bc_cache_close(c);
}

static void test_behind_writer_failure(void **state) {
  fixture *f = *state;
  bc_cache *c = open_root(f->root, false);
  bc_appender *a = open_behind(c, 0, false);
  CU_OK(append_range(a, 0, 12, 0));
  CU_OK(bc_appender_close(a));
  /* Another stream from record 6 on: shard 1 differs.  The writer finds
   * it after append returned; a later append returns it... */
  a = open_behind(c, 0, false);
  CU_OK(append_range(a, 0, 8, 7));
  unsigned char buf[BIG];
  int rc = 0;
  for (int tries = 0; rc == 0 && tries < 100000; tries++) {
    rc = bc_appender_append(a, buf, rec(8 + (uint64_t)tries % 4, 7, buf));
    if (rc == 0 && tries % 4 == 3) usleep(1000);
  }
  CU_RC(rc, BC_ENONDET);
  assert_non_null(strstr(bc_errmsg(), "shard 1 (records 4..8)"));
  /* ...and every one after it, and close. */
  CU_RC(bc_appender_append(a, buf, rec(0, 0, buf)), BC_ENONDET);
  assert_non_null(strstr(bc_errmsg(), "shard 1 (records 4..8)"));
  CU_RC(bc_appender_close(a), BC_ENONDET);
  assert_non_null(strstr(bc_errmsg(), "shard 1 (records 4..8)"));
  /* Found by close only: the failure is not lost either. */
  a = open_behind(c, 0, false);
  CU_OK(append_range(a, 0, 8, 7));
  CU_RC(bc_appender_close(a), BC_ENONDET);
  assert_non_null(strstr(bc_errmsg(), "shard 1 (records 4..8)"));
  bc_cache_stats s = stats(c);
  assert_int_equal(s.fills, 3);
  assert_int_equal(s.length, 12);
  check_records(c, 12);
  assert_int_equal(cu_dir_count(f->scratch), 0);
  bc_cache_close(c);
}

static void test_behind_discard(void **state) {
  fixture *f = *state;
  for (int publish_behind = 0; publish_behind < 2; publish_behind++) {
    bc_cache *c = open_root(f->root, false);
    bc_appender *a = open_behind(c, 0, publish_behind);
    CU_OK(append_range(a, 0, 10, 0));
    bc_appender_discard(a);
    /* The complete shards appended are published, the rest is not. */
    bc_cache_stats s = stats(c);
    assert_int_equal(s.shards_present, 2);
    assert_int_equal(s.length, 8);
    assert_false(s.length_final);
    assert_int_equal(cu_dir_count(f->scratch), 0);
    check_records(c, 8);
    /* Its claims are gone: another appender goes on. */
    a = open_behind(c, 0, publish_behind);
    CU_OK(append_range(a, 0, 10, 0));
    CU_OK(bc_appender_close(a));
    s = stats(c);
    assert_int_equal(s.fills, 3);
    assert_int_equal(s.waits, 0);
    assert_true(s.length_final);
    check_records(c, 10);
    bc_cache_close(c);
    cu_rm_rf(f->root);
  }
}

static int always(void *ctx) {
  (void)ctx;
  return 1;
}

static void test_behind_interrupt(void **state) {
  fixture *f = *state;
  no_big = true;
  bc_cache *c = open_root(f->root, false);
  bc_appender *h = hold_shard0(c);
  size_t held = cu_dir_count(f->scratch); /* the holder's files */
  assert_true(held > 0);
  bc_appender *a = open_behind(c, 1024, false);
  /* The writer is held at shard 0's end: the queue fills up, and the
   * wait for room is interrupted. */
  unsigned char buf[BIG];
  bc_interrupt_handler prev = bc_set_interrupt_handler(always, NULL);
  uint64_t k = 0;
  int rc;
  while ((rc = bc_appender_append(a, buf, rec(k, 0, buf))) == 0) k++;
  bc_set_interrupt_handler(prev.fn, prev.ctx);
  CU_RC(rc, BC_ECANCELED);
  assert_non_null(strstr(bc_errmsg(), "interrupted"));
  assert_true(k > R && k < 2 * 1024 / 8);
  assert_int_equal(bc_appender_count(a), k);
  /* ...final... */
  CU_RC(bc_appender_append(a, buf, rec(k, 0, buf)), BC_ECANCELED);
  /* ...and the writer's own wait for the holder stopped too: discard
   * returns while shard 0 is still held, having dropped the writer's
   * scratch file (shard 0 is the holder's). */
  bc_appender_discard(a);
  assert_int_equal(cu_dir_count(f->scratch), held);
  hold_end(h);
  bc_cache_stats s = stats(c);
  assert_int_equal(s.shards_present, 1);
  assert_int_equal(s.length, R);
  assert_false(s.length_final);
  assert_int_equal(cu_dir_count(f->scratch), 0);
  bc_cache_close(c);
  /* close's wait for the writer is interrupted the same way (in a fresh
   * root: the writer's publisher waits for the holder). */
  c = open_root(f->root2, false);
  char *scratch2 = cu_path(f->root2, "scratch");
  h = hold_shard0(c);
  a = open_behind(c, 0, true);
  CU_OK(append_range(a, 0, 3 * R, 0));
  prev = bc_set_interrupt_handler(always, NULL);
  CU_RC(bc_appender_close(a), BC_ECANCELED);
  bc_set_interrupt_handler(prev.fn, prev.ctx);
  assert_non_null(strstr(bc_errmsg(), "interrupted"));
  s = stats(c);
  assert_int_equal(s.shards_present, 0);
  assert_false(s.length_final);
  bc_appender_discard(h);
  assert_int_equal(cu_dir_count(scratch2), 0);
  free(scratch2);
  bc_cache_close(c);
}

static void test_behind_fork(void **state) {
  fixture *f = *state;
  bc_cache *c = open_root(f->root, false);
  bc_appender *a = open_behind(c, 0, true);
  CU_OK(append_range(a, 0, 6, 0));
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    unsigned char buf[BIG];
    int ok = bc_appender_append(a, buf, rec(6, 0, buf)) == BC_EINVAL &&
             strstr(bc_errmsg(), "fork") != NULL &&
             bc_appender_try_append(a, buf, rec(6, 0, buf)) == BC_EINVAL &&
             bc_appender_close(a) == BC_EINVAL;
    bc_appender_discard(a); /* nothing: the parent's */
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  /* The parent's appender goes on. */
  CU_OK(append_range(a, 6, 10, 0));
  CU_OK(bc_appender_close(a));
  bc_cache_stats s = stats(c);
  assert_int_equal(s.fills, 3);
  assert_int_equal(s.length, 10);
  assert_true(s.length_final);
  check_records(c, 10);
  assert_int_equal(cu_dir_count(f->scratch), 0);
  bc_cache_close(c);
}

/* The options of version 1: no write_behind, no behind_bytes. */
typedef struct options_v1 {
  unsigned version;
  bool claim_late;
  bool publish_behind;
} options_v1;

static void test_behind_options(void **state) {
  fixture *f = *state;
  bc_cache *c = open_root(f->root, false);
  options_v1 *v1 = malloc(sizeof *v1); /* (exactly: ASan sees a read past) */
  v1->version = 1;
  v1->claim_late = false;
  v1->publish_behind = true;
  bc_appender *a = NULL;
  CU_OK(bc_cache_appender_open(&a, c, (const bc_appender_options *)v1));
  free(v1);
  CU_OK(append_range(a, 0, 5, 0));
  CU_OK(bc_appender_close(a));
  check_records(c, 5);
  bc_appender_options o = BC_APPENDER_OPTIONS_INIT;
  o.version = 3;
  a = NULL;
  CU_RC(bc_cache_appender_open(&a, c, &o), BC_EINVAL);
  assert_null(a);
  /* try_append without write-behind: BC_EAGAIN where a shard starts or
   * ends (a claim, a publish), else appended. */
  cu_rm_rf(f->root2);
  bc_cache *c2 = open_root(f->root2, false);
  CU_OK(bc_cache_appender_open(&a, c2, NULL));
  unsigned char buf[BIG];
  CU_RC(bc_appender_try_append(a, buf, rec(0, 0, buf)), BC_EAGAIN);
  assert_int_equal(bc_appender_count(a), 0);
  CU_OK(bc_appender_append(a, buf, rec(0, 0, buf)));
  CU_OK(bc_appender_try_append(a, buf, rec(1, 0, buf)));
  CU_OK(bc_appender_try_append(a, buf, rec(2, 0, buf)));
  CU_RC(bc_appender_try_append(a, buf, rec(3, 0, buf)), BC_EAGAIN);
  assert_int_equal(bc_appender_count(a), 3);
  CU_OK(bc_appender_append(a, buf, rec(3, 0, buf)));
  CU_OK(bc_appender_close(a));
  check_records(c2, 4);
  bc_cache_close(c2);
  bc_cache_close(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_behind_same_bytes, setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_behind_backpressure, setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_behind_writer_failure, setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_behind_discard, setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_behind_interrupt, setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_behind_fork, setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_behind_options, setup, fx_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
