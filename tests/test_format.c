/*
 * test_format: format details beyond the golden vectors.
 *
 * zstd frames in every form a reader may meet (with and without a content
 * size, empty content, two frames, lying or absurd content sizes, no magic
 * number), the tolerances of separate limits that bagz has (a partial last
 * limit, records bytes after the last limit), writer output byte-exact with
 * many limits and records around the writer's buffer size, and the lowest
 * failing index reported from reads spread over several worker tasks.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "testutil.h"

/* A tail bag made by hand from stored records. */
static void write_raw_tail(const char *path, const unsigned char *const *recs,
                           const size_t *sizes, size_t n) {
  size_t total = 0;
  for (size_t i = 0; i < n; i++) total += sizes[i];
  unsigned char *file = malloc(total + 8 * n + 1);
  assert_non_null(file);
  size_t off = 0;
  for (size_t i = 0; i < n; i++) {
    if (sizes[i] > 0) memcpy(file + off, recs[i], sizes[i]);
    off += sizes[i];
  }
  uint64_t end = 0;
  for (size_t i = 0; i < n; i++) {
    end += sizes[i];
    for (int k = 0; k < 8; k++) file[off++] = (unsigned char)(end >> (8 * k));
  }
  tu_write_file(path, file, off);
  free(file);
}

/* A zstd frame of one raw block holding `data`, declaring `claim` as its
 * content size (8-byte field), or no content size when claim is -1. */
static size_t raw_frame(unsigned char *out, const char *data, size_t size,
                        int64_t claim) {
  size_t n = 0;
  const unsigned char magic[4] = {0x28, 0xb5, 0x2f, 0xfd};
  memcpy(out, magic, 4);
  n = 4;
  if (claim >= 0) {
    out[n++] = 0xe0; /* FCS field 8 bytes, single segment */
    for (int k = 0; k < 8; k++) out[n++] = (unsigned char)((uint64_t)claim >> (8 * k));
  } else {
    out[n++] = 0x00; /* no content size, window descriptor follows */
    out[n++] = 0x00; /* window 1 KiB */
  }
  uint32_t bh = 1u | (0u << 1) | ((uint32_t)size << 3); /* last, raw */
  out[n++] = (unsigned char)bh;
  out[n++] = (unsigned char)(bh >> 8);
  out[n++] = (unsigned char)(bh >> 16);
  memcpy(out + n, data, size);
  return n + size;
}

static void test_zstd_frame_forms(void **state) {
  (void)state;
  char *tmp = tu_tempdir();
  char *path = tu_join(tmp, "frames.bagz");
  unsigned char f_ok[64], f_nosize[64], f_two[128], f_short[64], f_long[64],
      f_huge[64], f_over[64], f_bad[64];
  size_t n_ok = raw_frame(f_ok, "hello", 5, 5);
  size_t n_nosize = raw_frame(f_nosize, "world", 5, -1);
  size_t n_two = raw_frame(f_two, "hello", 5, 5);
  n_two += raw_frame(f_two + n_two, "again", 5, 5);
  size_t n_short = raw_frame(f_short, "hello", 5, 4);
  size_t n_long = raw_frame(f_long, "hello", 5, 6);
  size_t n_huge = raw_frame(f_huge, "hello", 5, (int64_t)1 << 31);
  size_t n_over = raw_frame(f_over, "hello", 5, (int64_t)1 << 40);
  memcpy(f_bad, f_ok, n_ok);
  f_bad[3] = 0xfe; /* not the zstd magic */
  static const unsigned char empty_frame[9] = {0x28, 0xb5, 0x2f, 0xfd, 0x20,
                                               0x00, 0x01, 0x00, 0x00};
  const unsigned char *recs[] = {f_ok, f_nosize, empty_frame, f_two, f_short,
                                 f_long, f_huge, f_over, f_bad, f_ok};
  const size_t sizes[] = {n_ok, n_nosize, sizeof empty_frame, n_two, n_short,
                          n_long, n_huge, n_over, n_ok, n_ok};
  write_raw_tail(path, recs, sizes, 10);

  /* The crafted frames are what libzstd thinks they are. */
  char out[16];
  assert_int_equal(ZSTD_decompress(out, sizeof out, f_ok, n_ok), 5);
  assert_int_equal(ZSTD_getFrameContentSize(f_nosize, n_nosize), ZSTD_CONTENTSIZE_UNKNOWN);

  for (int storage = 0; storage <= 1; storage++) {
    bc_reader_options ro = BC_READER_OPTIONS_INIT;
    ro.limits_storage = (bc_limits_storage)storage;
    bc_bag *bag = NULL;
    TU_OK(bc_bag_open(&bag, path, &ro));
    bc_buf buf = BC_BUF_INIT;
    TU_OK(bc_bag_get(bag, 0, &buf));
    TU_BUF_EQ(&buf, "hello", 5);
    /* No content size in the header: decoded by streaming (as bagz). */
    TU_OK(bc_bag_get(bag, 1, &buf));
    TU_BUF_EQ(&buf, "world", 5);
    /* A frame of empty content is an empty record. */
    TU_OK(bc_bag_get(bag, 2, &buf));
    assert_int_equal(buf.size, 0);
    /* Two frames in one record, wrong content sizes, absurd content sizes
     * (no giant allocation: the input cannot expand that far), and a
     * frame without the magic number are all corrupt. */
    for (uint64_t i = 3; i <= 8; i++) TU_RC(bc_bag_get(bag, i, &buf), BC_ECORRUPT);
    TU_OK(bc_bag_get(bag, 9, &buf));
    TU_BUF_EQ(&buf, "hello", 5);
    uint64_t bad = 0;
    TU_RC(bc_bag_verify(bag, &bad), BC_ECORRUPT);
    assert_int_equal(bad, 3);
    bc_buf_release(&buf);
    bc_bag_close(bag);
  }
  free(path);
  tu_rmtree(tmp);
  free(tmp);
}

static void test_separate_tolerances(void **state) {
  (void)state;
  tu_records recs = {0};
  tu_records_labelled(&recs, "tolerant", 5);
  char *tmp = tu_tempdir();
  char *path = tu_join(tmp, "s.bag");
  char *limits = bc_limits_path(path);
  bc_writer_options wo = BC_WRITER_OPTIONS_INIT;
  wo.limits_placement = BC_LIMITS_SEPARATE;
  tu_write_bag(path, &wo, &recs);
  bc_reader_options ro = BC_READER_OPTIONS_INIT;
  ro.limits_placement = BC_LIMITS_SEPARATE;

  /* A limits file whose size is not a multiple of 8: the partial last
   * entry is ignored (as bagz does). */
  size_t n;
  unsigned char *lim = tu_read_file(limits, &n);
  unsigned char *longer = malloc(n + 3);
  assert_non_null(longer);
  memcpy(longer, lim, n);
  memset(longer + n, 0xee, 3);
  tu_write_file(limits, longer, n + 3);
  for (int storage = 0; storage <= 1; storage++) {
    ro.limits_storage = (bc_limits_storage)storage;
    tu_check_file(path, &ro, &recs);
  }
  tu_write_file(limits, lim, n);

  /* Records bytes after the last limit are ignored. */
  unsigned char *rec = tu_read_file(path, &n);
  unsigned char *more = malloc(n + 100);
  assert_non_null(more);
  memcpy(more, rec, n);
  memset(more + n, 'x', 100);
  tu_write_file(path, more, n + 100);
  for (int storage = 0; storage <= 1; storage++) {
    ro.limits_storage = (bc_limits_storage)storage;
    tu_check_file(path, &ro, &recs);
  }
  free(more);
  free(rec);
  free(longer);
  free(lim);
  free(limits);
  free(path);
  tu_rmtree(tmp);
  free(tmp);
  tu_records_free(&recs);
}

/* Many limits (more than the writer buffers) and records around the
 * writer's 1 MiB buffer size, with and without flushes, byte-exact. */
static void test_writer_large_and_many(void **state) {
  (void)state;
  tu_records recs = {0};
  tu_rng rng;
  tu_rng_seed(&rng, 3);
  const size_t mib = (size_t)1 << 20;
  unsigned char *big = malloc(mib + mib / 2 + 1);
  assert_non_null(big);
  tu_rng_fill(&rng, big, mib + mib / 2);
  for (size_t i = 0; i < 20000; i++) {
    char s[32];
    int len = snprintf(s, sizeof s, "%zu", i * 7919);
    tu_records_add(&recs, s, i % 10 == 0 ? 0 : (size_t)len);
    if (i == 7000) tu_records_add(&recs, big, mib);
    if (i == 9000) tu_records_add(&recs, big, mib - 1);
    if (i == 15000) tu_records_add(&recs, big, mib + mib / 2);
  }
  free(big);
  char *tmp = tu_tempdir();
  const int three = 3;
  for (int place = 0; place <= 1; place++)
    for (int zstd = 0; zstd <= 1; zstd++)
      for (int flushes = 0; flushes <= 1; flushes++) {
        char *path = tu_join(tmp, "many.bag");
        bc_writer_options wo = BC_WRITER_OPTIONS_INIT;
        wo.limits_placement = (bc_limits_placement)place;
        wo.compression = zstd ? BC_COMPRESSION_ZSTD : BC_COMPRESSION_NONE;
        bc_writer *w = NULL;
        TU_OK(bc_writer_open(&w, path, &wo));
        for (size_t i = 0; i < recs.count; i++) {
          TU_OK(bc_writer_write(w, recs.data[i], recs.size[i]));
          if (flushes && i % 4999 == 0) TU_OK(bc_writer_flush(w));
        }
        TU_OK(bc_writer_close(w));
        bc_writer_free(w);
        tu_image im = tu_image_build(&recs, zstd ? &three : NULL, NULL, 0);
        tu_image_compare(path, (bc_limits_placement)place, &im);
        tu_image_free(&im);
        bc_reader_options ro = BC_READER_OPTIONS_INIT;
        ro.limits_placement = (bc_limits_placement)place;
        ro.compression = wo.compression;
        /* Read back through every cache policy (the 1.5 MiB record spans
         * several direct-I/O chunks). */
        for (int cache = 0; cache <= 2; cache++) {
          ro.cache_policy = (bc_cache_policy)cache;
          bc_bag *bag = NULL;
          TU_OK(bc_bag_open(&bag, path, &ro));
          assert_int_equal(bc_bag_len(bag), recs.count);
          bc_buf buf = BC_BUF_INIT;
          const uint64_t probe[] = {0, 1, 7000, 7001, 7002, 9002, 15003, 15004,
                                    recs.count - 1};
          for (size_t k = 0; k < sizeof probe / sizeof probe[0]; k++) {
            TU_OK(bc_bag_get(bag, probe[k], &buf));
            tu_assert_bytes(buf.data, buf.size, recs.data[probe[k]],
                            recs.size[probe[k]], "probe");
          }
          bc_buf_release(&buf);
          if (cache == 0) TU_OK(bc_bag_verify(bag, NULL));
          bc_bag_close(bag);
        }
        tu_remove_entries(tmp, "");
        free(path);
      }
  tu_rmtree(tmp);
  free(tmp);
  tu_records_free(&recs);
}

/* Verify and batch reads over several worker tasks report the lowest
 * failing index. */
static void test_first_error_in_large_bag(void **state) {
  (void)state;
  tu_records recs = {0};
  for (size_t i = 0; i < 12000; i++) {
    char s[32];
    int len = snprintf(s, sizeof s, "rec %zu", i);
    tu_records_add(&recs, s, (size_t)len);
  }
  char *tmp = tu_tempdir();
  char *path = tu_join(tmp, "large.bag");
  tu_write_bag(path, NULL, &recs);
  /* Break the limits of records 5000 and 9000 (made smaller than the
   * previous limit: not monotonic). */
  size_t n;
  unsigned char *file = tu_read_file(path, &n);
  size_t limits_at = n - 8 * recs.count;
  memset(file + limits_at + 8 * 5000, 0, 8);
  memset(file + limits_at + 8 * 9000, 0, 8);
  tu_write_file(path, file, n);
  free(file);

  for (int par = 1; par <= 4; par++)
    for (int storage = 0; storage <= 1; storage++) {
      bc_reader_options ro = BC_READER_OPTIONS_INIT;
      ro.max_parallelism = par;
      ro.limits_storage = (bc_limits_storage)storage;
      bc_bag *bag = NULL;
      int rc = bc_bag_open(&bag, path, &ro);
      if (rc != 0) {
        /* Whole-shard validation at open may refuse the file instead. */
        assert_int_equal(storage, BC_LIMITS_IN_MEMORY);
        TU_RC(rc, BC_ECORRUPT);
        continue;
      }
      uint64_t bad = 0;
      TU_RC(bc_bag_verify(bag, &bad), BC_ECORRUPT);
      if (storage == BC_LIMITS_ON_DISK) {
        assert_int_equal(bad, 5000);
        assert_non_null(strstr(bc_errmsg(), "5000"));
      } else {
        assert_true(bad <= 5000);
      }
      if (storage == BC_LIMITS_ON_DISK) {
        bc_buf buf = BC_BUF_INIT;
        TU_OK(bc_bag_get(bag, 4999, &buf));
        TU_OK(bc_bag_get(bag, 5001, &buf));
        TU_RC(bc_bag_get(bag, 5000, &buf), BC_ECORRUPT);
        TU_RC(bc_bag_get(bag, 9000, &buf), BC_ECORRUPT);
        bc_buf_release(&buf);
        /* A batch: the error of the lowest failing position. */
        uint64_t idx[4] = {11000, 9000, 100, 5000};
        bc_buf outs[4] = {BC_BUF_INIT, BC_BUF_INIT, BC_BUF_INIT, BC_BUF_INIT};
        TU_RC(bc_bag_get_many(bag, idx, 4, outs), BC_ECORRUPT);
        assert_non_null(strstr(bc_errmsg(), "9000"));
        for (int k = 0; k < 4; k++) bc_buf_release(&outs[k]);
      }
      bc_bag_close(bag);
    }
  free(path);
  tu_rmtree(tmp);
  free(tmp);
  tu_records_free(&recs);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_zstd_frame_forms),
      cmocka_unit_test(test_separate_tolerances),
      cmocka_unit_test(test_writer_large_and_many),
      cmocka_unit_test(test_first_error_in_large_bag),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
