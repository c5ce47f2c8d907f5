/*
 * Record checksums on read (issue 14, item 3).  A byte changed anywhere in
 * a published shard, compressed or not, is never served: a read of an
 * affected record regenerates the shard when the cache has a source (the
 * model's bytes come back) and is BC_ECORRUPT without one.  Uncompressed
 * shards carry a CRC-32C per record in sums/START.END.bag.crc, published,
 * evicted and verified with the shard; zstd shards carry zstd's content
 * checksum (still standard frames).  Roots of format version 1 (no
 * sidecars) stay readable and writable as they are.
 */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

#define N 100
#define R 10

typedef struct fixture {
  char *dir, *root, *shards, *sums;
  ts_shared *sh;
  ts_config cfg;
  bc_cache_options o;
  bc_cache *c;
} fixture;

static int setup_with(void **state, bc_compression compression) {
  fixture *f = calloc(1, sizeof *f);
  if (f == NULL) return -1;
  f->dir = cu_tmp_dir();
  f->root = cu_path(f->dir, "c");
  f->shards = cu_path(f->root, "shards");
  f->sums = cu_path(f->root, "sums");
  f->cfg = ts_config_default(N);
  f->sh = ts_shared_new(&f->cfg);
  if (f->sh == NULL) return -1;
  f->o = (bc_cache_options)BC_CACHE_OPTIONS_INIT;
  f->o.shard_records = R;
  f->o.prefetch_shards = -1;
  f->o.compression = compression;
  cu_notices_capture();
  cu_notices_reset();
  cu_watchdog(120);
  *state = f;
  CU_OK(cu_open(&f->c, f->root, &f->cfg, f->sh, &f->o));
  CU_OK(bc_cache_fill_all(f->c));
  bc_cache_close(f->c);
  f->c = NULL;
  return 0;
}

static int setup(void **state) { return setup_with(state, BC_COMPRESSION_NONE); }
static int setup_zstd(void **state) { return setup_with(state, BC_COMPRESSION_ZSTD); }

static int teardown(void **state) {
  fixture *f = *state;
  bc_cache_close(f->c);
  ts_shared_free(f->sh);
  cu_rm_rf(f->dir);
  free(f->sums);
  free(f->shards);
  free(f->root);
  free(f->dir);
  free(f);
  bc_set_notice_handler(NULL, NULL);
  cu_watchdog(0);
  return 0;
}

static void open_source(fixture *f) {
  CU_OK(cu_open(&f->c, f->root, &f->cfg, f->sh, &f->o));
}

static void open_bare(fixture *f) {
  CU_OK(cu_open(&f->c, f->root, NULL, NULL, &f->o));
}

static void close_cache(fixture *f) {
  bc_cache_close(f->c);
  f->c = NULL;
}

static bc_cache_stats stats_of(bc_cache *c) {
  bc_cache_stats st;
  CU_OK(bc_cache_stats_get(c, &st));
  return st;
}

static void xor_byte(const char *path, off_t at, unsigned char mask) {
  int fd = open(path, O_RDWR);
  assert_true(fd >= 0);
  unsigned char c = 0;
  assert_int_equal(pread(fd, &c, 1, at), 1);
  c ^= mask;
  assert_int_equal(pwrite(fd, &c, 1, at), 1);
  close(fd);
}

static unsigned char *read_all(const char *path, size_t *size) {
  FILE *fp = fopen(path, "rb");
  assert_non_null(fp);
  unsigned char *buf = malloc(1 << 20);
  assert_non_null(buf);
  *size = fread(buf, 1, 1 << 20, fp);
  fclose(fp);
  return buf;
}

static uint64_t load64(const unsigned char *p) {
  uint64_t v = 0;
  for (int k = 0; k < 8; k++) v |= (uint64_t)p[k] << (8 * k);
  return v;
}

static off_t file_size(const char *path) {
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  return st.st_size;
}

/* Every byte of shard 20.30, one at a time, xored with `mask` under a
 * cache with no source that has the shard mapped: each record of the shard
 * reads as the model's or fails with BC_ECORRUPT, never as other bytes.
 * Each change is undone before the next.  Returns how many changes no read
 * noticed (all records still read right): for .bag shards none (every
 * byte is covered by a record's checksum or checked limits); a zstd frame
 * has bits its decoder never looks at (the unused start of an FSE bit
 * stream), whose change leaves every record's bytes as they were. */
static off_t every_byte_checked(fixture *f, const char *name, unsigned char mask) {
  char *path = cu_path(f->shards, name);
  off_t size = file_size(path), unnoticed = 0;
  open_bare(f);
  bc_buf b = BC_BUF_INIT;
  cu_check_all(f->c, N, false); /* every shard open and mapped */
  for (off_t at = 0; at < size; at++) {
    xor_byte(path, at, mask);
    int failed = 0;
    for (int64_t i = 20; i < 30; i++) {
      int rc = cu_get_cmp(f->c, i, false, &b);
      if (rc == 1)
        fail_msg("%s: byte %lld xored with %#x: record %lld served with "
                 "other bytes", name, (long long)at, mask, (long long)i);
      if (rc != 0) {
        if (rc != BC_ECORRUPT)
          fail_msg("byte %lld: record %lld: %s (%s), expected BC_ECORRUPT",
                   (long long)at, (long long)i, bc_error_name(rc), bc_errmsg());
        assert_non_null(strstr(bc_errmsg(), "no source"));
        failed++;
      }
    }
    unnoticed += failed == 0;
    xor_byte(path, at, mask);
  }
  /* Undone: everything reads again, from a fresh open of the shard. */
  cu_check_all(f->c, N, false);
  close_cache(f);
  bc_buf_release(&b);
  free(path);
  return unnoticed;
}

static void test_every_byte_raw(void **state) {
  fixture *f = *state;
  assert_int_equal(every_byte_checked(f, "20.30.bag", 0x01), 0);
  assert_int_equal(every_byte_checked(f, "20.30.bag", 0x80), 0);
}

static void test_every_byte_zstd(void **state) {
  fixture *f = *state;
  char *path = cu_path(f->shards, "20.30.bagz");
  off_t size = file_size(path);
  free(path);
  /* (Without zstd's checksums most changes of literal bytes went unseen.) */
  assert_true(every_byte_checked(f, "20.30.bagz", 0x01) * 20 < size);
  assert_true(every_byte_checked(f, "20.30.bagz", 0x80) * 20 < size);
}

/* With a source, a changed record is regenerated and served right, through
 * the normal publish: one regeneration, the shard and its checksums on
 * disk again, verify passes. */
static void regenerated(fixture *f, const char *name, off_t at) {
  char *path = cu_path(f->shards, name);
  open_source(f);
  bc_buf b = BC_BUF_INIT;
  cu_check_all(f->c, N, false); /* mapped: the change is seen through it */
  xor_byte(path, at, 0x10);
  cu_notices_reset();
  for (int64_t i = 20; i < 30; i++) assert_int_equal(cu_get_cmp(f->c, i, false, &b), 0);
  assert_true(cu_notice_seen("regenerating"));
  bc_cache_stats st = stats_of(f->c);
  assert_int_equal(st.regenerations, 1);
  assert_int_equal(st.shards_present, N / R);
  assert_int_equal(st.bytes_on_disk, cu_dir_bytes(f->shards, NULL));
  uint64_t bad = 0;
  CU_OK(bc_cache_verify(f->c, &bad));
  cu_check_shards(f->root, false, f->o.compression == BC_COMPRESSION_ZSTD);
  cu_check_all(f->c, N, false);
  close_cache(f);
  bc_buf_release(&b);
  free(path);
}

static void test_regenerated_raw(void **state) {
  fixture *f = *state;
  regenerated(f, "20.30.bag", 40);
  assert_int_equal(cu_dir_count(f->sums), N / R);
}

static void test_regenerated_zstd(void **state) {
  fixture *f = *state;
  regenerated(f, "20.30.bagz", 20);
  assert_int_equal(cu_dir_count(f->sums), 0);
}

/* Threads reading a shard that turns out damaged: each finds the damage
 * (their reads share the mapping), one regeneration serves them all, and
 * every record read is the model's. */
typedef struct {
  bc_cache *c;
  int failures;
} reader_arg;

static void *read_shard(void *p) {
  reader_arg *a = p;
  bc_buf b = BC_BUF_INIT;
  for (int round = 0; round < 20; round++)
    for (int64_t i = 20; i < 30; i++) a->failures += cu_get_cmp(a->c, i, false, &b) != 0;
  bc_buf_release(&b);
  return NULL;
}

static void test_threads_meet_damage(void **state) {
  fixture *f = *state;
  char *path = cu_path(f->shards, "20.30.bag");
  open_source(f);
  cu_check_all(f->c, N, false);
  xor_byte(path, 40, 0x10);
  enum { T = 4 };
  pthread_t th[T];
  reader_arg args[T];
  for (int k = 0; k < T; k++) {
    args[k] = (reader_arg){f->c, 0};
    assert_int_equal(pthread_create(&th[k], NULL, read_shard, &args[k]), 0);
  }
  for (int k = 0; k < T; k++) {
    pthread_join(th[k], NULL);
    assert_int_equal(args[k].failures, 0);
  }
  assert_int_equal(stats_of(f->c).regenerations, 1);
  uint64_t bad = 0;
  CU_OK(bc_cache_verify(f->c, &bad));
  close_cache(f);
  free(path);
}

/* The sidecars: one per shard, the documented layout, and damage to them
 * is damage to the shard. */
static void test_sidecar_layout(void **state) {
  fixture *f = *state;
  assert_int_equal(cu_dir_count(f->sums), N / R);
  char *crc = cu_path(f->sums, "20.30.bag.crc");
  char *path = cu_path(f->shards, "20.30.bag");
  size_t size = 0;
  unsigned char *t = NULL;
  {
    FILE *fp = fopen(crc, "rb");
    assert_non_null(fp);
    t = malloc(4096);
    size = fread(t, 1, 4096, fp);
    fclose(fp);
  }
  assert_int_equal(size, 24 + 4 * R);
  assert_memory_equal(t, "BCCRC32C", 8);
  assert_int_equal(t[8], R);
  bc_bag *bag = NULL;
  CU_OK(bc_bag_open(&bag, path, NULL));
  bc_shard_info info;
  CU_OK(bc_bag_shard_info(bag, 0, &info));
  uint64_t rb = 0;
  for (int k = 0; k < 8; k++) rb |= (uint64_t)t[16 + k] << (8 * k);
  assert_int_equal(rb, info.records_bytes);
  bc_buf b = BC_BUF_INIT;
  for (uint64_t i = 0; i < R; i++) {
    CU_OK(bc_bag_get(bag, i, &b));
    uint32_t want = (uint32_t)t[24 + 4 * i] | (uint32_t)t[25 + 4 * i] << 8 |
                    (uint32_t)t[26 + 4 * i] << 16 | (uint32_t)t[27 + 4 * i] << 24;
    /* CRC-32C, bit by bit. */
    uint32_t c = ~0u;
    for (size_t k = 0; k < b.size; k++) {
      c ^= b.data[k];
      for (int j = 0; j < 8; j++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    assert_int_equal(~c, want);
  }
  bc_buf_release(&b);
  bc_bag_close(bag);
  free(t);
  free(path);
  free(crc);
}

static void test_sidecar_damaged(void **state) {
  fixture *f = *state;
  char *crc = cu_path(f->sums, "20.30.bag.crc");
  bc_buf b = BC_BUF_INIT;
  uint64_t bad = 0;
  /* A flipped checksum: that record fails, the others are served. */
  xor_byte(crc, 24 + 4 * 3, 0x04);
  open_bare(f);
  CU_RC(bc_cache_get(f->c, 23, &b), BC_ECORRUPT);
  assert_non_null(strstr(bc_errmsg(), "checksum mismatch"));
  assert_int_equal(cu_get_cmp(f->c, 24, false, &b), 0);
  CU_RC(bc_cache_verify(f->c, &bad), BC_ECORRUPT);
  assert_int_equal(bad, 20);
  close_cache(f);
  xor_byte(crc, 24 + 4 * 3, 0x04);
  /* A damaged header: the shard is damaged. */
  xor_byte(crc, 2, 0x01);
  open_bare(f);
  CU_RC(bc_cache_get(f->c, 24, &b), BC_ECORRUPT);
  close_cache(f);
  /* A missing sidecar: damaged too (not "evicted"). */
  assert_int_equal(unlink(crc), 0);
  open_bare(f);
  CU_RC(bc_cache_get(f->c, 24, &b), BC_ECORRUPT);
  assert_non_null(strstr(bc_errmsg(), "missing"));
  CU_RC(bc_cache_verify(f->c, &bad), BC_ECORRUPT);
  close_cache(f);
  /* With a source: regenerated, sidecar and all. */
  open_source(f);
  assert_int_equal(cu_get_cmp(f->c, 24, false, &b), 0);
  assert_true(cu_dir_count(f->sums) == N / R);
  assert_int_equal(stats_of(f->c).regenerations, 1);
  CU_OK(bc_cache_verify(f->c, &bad));
  close_cache(f);
  bc_buf_release(&b);
  free(crc);
}

/* Evicted shards take their sidecars with them; shards/ and sums/ agree. */
static void test_eviction_removes_sidecars(void **state) {
  fixture *f = *state;
  char *other = cu_path(f->dir, "limited");
  char *shards = cu_path(other, "shards"), *sums = cu_path(other, "sums");
  bc_cache_options o = f->o;
  o.disk_limit = cu_dir_bytes(f->shards, NULL) / 3;
  CU_OK(cu_open(&f->c, other, &f->cfg, f->sh, &o));
  cu_check_all(f->c, N, false);
  bc_cache_stats st = stats_of(f->c);
  assert_true(st.evictions > 0);
  assert_true(cu_dir_count(shards) < N / R);
  assert_int_equal(cu_dir_count(sums), cu_dir_count(shards));
  DIR *d = opendir(shards);
  assert_non_null(d);
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char name[300];
    snprintf(name, sizeof name, "%s.crc", e->d_name);
    char *crc = cu_path(sums, name);
    assert_true(access(crc, F_OK) == 0);
    free(crc);
  }
  closedir(d);
  close_cache(f);
  free(sums);
  free(shards);
  free(other);
}

/* The frames of the cache's zstd shards carry a content checksum (frame
 * header descriptor bit 2); files of the plain writer do not (they stay
 * byte-identical to bagz's).  Both are standard Bagz files. */
static void test_zstd_frames_checksummed(void **state) {
  fixture *f = *state;
  char *path = cu_path(f->shards, "0.10.bagz");
  int fd = open(path, O_RDONLY);
  assert_true(fd >= 0);
  unsigned char head[5];
  assert_int_equal(pread(fd, head, 5, 0), 5);
  close(fd);
  assert_memory_equal(head, "\x28\xb5\x2f\xfd", 4); /* zstd frame magic */
  assert_true(head[4] & 0x04);
  bc_bag *bag = NULL;
  CU_OK(bc_bag_open(&bag, path, NULL)); /* a plain Bagz reader */
  assert_int_equal(bc_bag_len(bag), R);
  uint64_t bad = 0;
  CU_OK(bc_bag_verify(bag, &bad));
  bc_bag_close(bag);
  char *plain = cu_path(f->dir, "plain.bagz");
  bc_writer *w = NULL;
  CU_OK(bc_writer_open(&w, plain, NULL));
  CU_OK(bc_writer_write(w, "some record", 11));
  CU_OK(bc_writer_close(w));
  bc_writer_free(w);
  fd = open(plain, O_RDONLY);
  assert_true(fd >= 0);
  assert_int_equal(pread(fd, head, 5, 0), 5);
  close(fd);
  assert_false(head[4] & 0x04);
  /* Frame by frame, the shard is what the plain writer makes of the same
   * records but for the flag and the 4 checksum bytes at each end. */
  char *same = cu_path(f->dir, "same.bagz");
  CU_OK(bc_writer_open(&w, same, NULL));
  unsigned char rec[TS_MAX_RECORD];
  for (uint64_t i = 0; i < R; i++) {
    size_t n = ts_record(i, false, 0, rec);
    CU_OK(bc_writer_write(w, rec, n));
  }
  CU_OK(bc_writer_close(w));
  bc_writer_free(w);
  size_t ns = 0, np = 0;
  unsigned char *s = read_all(path, &ns), *p = read_all(same, &np);
  uint64_t so = 0, po = 0;
  uint64_t srs = load64(s + ns - 8), prs = load64(p + np - 8);
  for (uint64_t i = 0; i < R; i++) {
    uint64_t se = load64(s + srs + 8 * i), pe = load64(p + prs + 8 * i);
    if (pe == po) { /* an empty record: no frame in either */
      assert_int_equal(se, so);
      continue;
    }
    assert_int_equal(se - so, pe - po + 4);
    assert_int_equal(s[so + 4], p[po + 4] | 0x04);
    s[so + 4] = p[po + 4];
    assert_memory_equal(s + so, p + po, pe - po);
    so = se;
    po = pe;
  }
  free(s);
  free(p);
  free(same);
  free(plain);
  free(path);
}

/* A root of format version 1 (before checksums): read and refilled as it
 * is, without sidecars, and it stays version 1. */
static void test_version1_root(void **state) {
  fixture *f = *state;
  char *meta = cu_path(f->root, "metadata.json");
  FILE *fp = fopen(meta, "r");
  assert_non_null(fp);
  char text[4096];
  size_t n = fread(text, 1, sizeof text - 1, fp);
  fclose(fp);
  text[n] = '\0';
  char *v = strstr(text, "\"version\": 2");
  assert_non_null(v);
  v[11] = '1';
  cu_write_text(meta, text);
  cu_rm_rf(f->sums);
  bc_buf b = BC_BUF_INIT;
  open_bare(f);
  cu_check_all(f->c, N, false);
  uint64_t bad = 0;
  CU_OK(bc_cache_verify(f->c, &bad));
  close_cache(f);
  char *path = cu_path(f->shards, "50.60.bag");
  assert_int_equal(unlink(path), 0);
  open_source(f);
  cu_check_all(f->c, N, false);
  assert_int_equal(stats_of(f->c).regenerations, 1);
  close_cache(f);
  assert_false(access(f->sums, F_OK) == 0);
  fp = fopen(meta, "r");
  assert_non_null(fp);
  n = fread(text, 1, sizeof text - 1, fp);
  fclose(fp);
  text[n] = '\0';
  assert_non_null(strstr(text, "\"version\": 1"));
  bc_buf_release(&b);
  free(path);
  free(meta);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_every_byte_raw, setup, teardown),
      cmocka_unit_test_setup_teardown(test_every_byte_zstd, setup_zstd, teardown),
      cmocka_unit_test_setup_teardown(test_regenerated_raw, setup, teardown),
      cmocka_unit_test_setup_teardown(test_regenerated_zstd, setup_zstd, teardown),
      cmocka_unit_test_setup_teardown(test_threads_meet_damage, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sidecar_layout, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sidecar_damaged, setup, teardown),
      cmocka_unit_test_setup_teardown(test_eviction_removes_sidecars, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_zstd_frames_checksummed, setup_zstd,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_version1_root, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
