/*
 * test_options: every reader and writer option.
 *
 * Reader: limits storage, access pattern, cache policy (direct I/O may fall
 * back to buffered reads with a notice; the data must be the same either
 * way), explicit compression, dictionary, max_parallelism, max_record_size,
 * zero-copy views, batch reads with repeats, and BC_ERANGE everywhere.
 * Writer: limits placement, compression, zstd levels, dictionary, file mode;
 * the produced bytes are compared with an image built here from the records
 * (and, for zstd, from libzstd called the way bagz calls it).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zstd.h>

#include "testutil.h"

static const char dict_text[] =
    "bagz-dictionary: hello world record the quick brown fox ";

static void mixed_records(tu_records *r) { tu_manifest_vector_records("mixed_bag", r); }

/* Records of assorted odd sizes, so record boundaries fall everywhere
 * relative to 512/4096-byte alignment. */
static void odd_records(tu_records *r, size_t count, uint64_t seed) {
  tu_rng rng;
  tu_rng_seed(&rng, seed);
  unsigned char *buf = malloc(70000);
  assert_non_null(buf);
  for (size_t i = 0; i < count; i++) {
    size_t n = (size_t)tu_rng_below(&rng, i % 7 == 0 ? 70000 : 5000);
    if (i % 11 == 3) n = 0;
    tu_rng_fill(&rng, buf, n);
    /* Half compressible: a repeated byte pattern. */
    if (i % 2 == 0)
      for (size_t k = 0; k < n; k++) buf[k] = (unsigned char)("abcab"[k % 5]);
    tu_records_add(r, buf, n);
  }
  free(buf);
}

/* ---- reader options ---------------------------------------------------- */

static void test_storage_access_cache(void **state) {
  (void)state;
  tu_capture_notices();
  tu_records mixed = {0};
  mixed_records(&mixed);
  char *tmp = tu_tempdir();
  tu_records odd = {0};
  odd_records(&odd, 60, 7);
  bc_writer_options sep = BC_WRITER_OPTIONS_INIT;
  sep.limits_placement = BC_LIMITS_SEPARATE;
  char *odd_tail = tu_join(tmp, "odd.bag"), *odd_sepz = tu_join(tmp, "odd.bagz");
  tu_write_bag(odd_tail, NULL, &odd);
  tu_write_bag(odd_sepz, &sep, &odd);

  char *files[] = {tu_data_path("mixed.bag"), tu_data_path("mixed.bagz"),
                   tu_data_path("mixed_separate.bagz"), odd_tail, odd_sepz};
  const tu_records *want[] = {&mixed, &mixed, &mixed, &odd, &odd};
  const bc_limits_placement place[] = {BC_LIMITS_TAIL, BC_LIMITS_TAIL,
                                       BC_LIMITS_SEPARATE, BC_LIMITS_TAIL,
                                       BC_LIMITS_SEPARATE};
  for (size_t f = 0; f < 5; f++)
    for (int storage = 0; storage <= 1; storage++)
      for (int access = 0; access <= 2; access++)
        for (int cache = 0; cache <= 2; cache++) {
          bc_reader_options ro = BC_READER_OPTIONS_INIT;
          ro.limits_placement = place[f];
          ro.limits_storage = (bc_limits_storage)storage;
          ro.access_pattern = (bc_access_pattern)access;
          ro.cache_policy = (bc_cache_policy)cache;
          ro.max_parallelism = 1;
          /* Direct I/O either works or falls back (with a notice): the
           * records must be identical on both paths. */
          tu_check_file(files[f], &ro, want[f]);
        }
  print_message("direct I/O notices: %u\n", tu_notice_count());
  for (size_t f = 0; f < 3; f++) free(files[f]);
  free(odd_tail);
  free(odd_sepz);
  tu_records_free(&odd);
  tu_records_free(&mixed);
  tu_rmtree(tmp);
  free(tmp);
}

/* The records section and the limits of a tail file, parsed here. */
static void stored_record(const unsigned char *file, size_t size, uint64_t i,
                          const unsigned char **rec, size_t *rec_size) {
  uint64_t records_end = 0;
  for (int k = 0; k < 8; k++)
    records_end |= (uint64_t)file[size - 8 + (size_t)k] << (8 * k);
  const unsigned char *limits = file + records_end;
  uint64_t start = 0, end = 0;
  for (int k = 0; k < 8; k++) {
    end |= (uint64_t)limits[8 * i + (size_t)k] << (8 * k);
    if (i > 0) start |= (uint64_t)limits[8 * (i - 1) + (size_t)k] << (8 * k);
  }
  *rec = file + start;
  *rec_size = (size_t)(end - start);
}

static void test_explicit_compression(void **state) {
  (void)state;
  tu_records mixed = {0};
  mixed_records(&mixed);
  char *bagz = tu_data_path("mixed.bagz");
  size_t fsize;
  unsigned char *file = tu_read_file(bagz, &fsize);

  /* NONE on a .bagz: the stored zstd frames, byte for byte. */
  bc_reader_options ro = BC_READER_OPTIONS_INIT;
  ro.compression = BC_COMPRESSION_NONE;
  bc_bag *bag = NULL;
  TU_OK(bc_bag_open(&bag, bagz, &ro));
  bc_shard_info info;
  TU_OK(bc_bag_shard_info(bag, 0, &info));
  assert_int_equal(info.compression, BC_COMPRESSION_NONE);
  bc_buf buf = BC_BUF_INIT;
  for (uint64_t i = 0; i < mixed.count; i++) {
    const unsigned char *rec;
    size_t n;
    stored_record(file, fsize, i, &rec, &n);
    TU_OK(bc_bag_get(bag, i, &buf));
    TU_BUF_EQ(&buf, rec, n);
    if (mixed.size[i] > 0) assert_int_equal(ZSTD_getFrameContentSize(rec, n), mixed.size[i]);
  }
  bc_bag_close(bag);

  /* ZSTD named explicitly on a .bagz: the records. */
  ro.compression = BC_COMPRESSION_ZSTD;
  tu_check_file(bagz, &ro, &mixed);

  /* ZSTD on a .bag name, written and read explicitly; read with AUTO the
   * same file gives the frames. */
  char *tmp = tu_tempdir();
  char *zbag = tu_join(tmp, "z.bag");
  bc_writer_options wo = BC_WRITER_OPTIONS_INIT;
  wo.compression = BC_COMPRESSION_ZSTD;
  tu_write_bag(zbag, &wo, &mixed);
  tu_check_file(zbag, &ro, &mixed);
  TU_OK(bc_bag_open(&bag, zbag, NULL));
  TU_OK(bc_bag_shard_info(bag, 0, &info));
  assert_int_equal(info.compression, BC_COMPRESSION_NONE);
  unsigned char *plain = malloc(300000);
  assert_non_null(plain);
  for (uint64_t i = 0; i < mixed.count; i++) {
    TU_OK(bc_bag_get(bag, i, &buf));
    if (mixed.size[i] == 0) {
      assert_int_equal(buf.size, 0); /* empty records are never compressed */
      continue;
    }
    size_t d = ZSTD_decompress(plain, 300000, buf.data, buf.size);
    assert_false(ZSTD_isError(d));
    tu_assert_bytes(plain, d, mixed.data[i], mixed.size[i], "frame of z.bag");
  }
  free(plain);
  bc_bag_close(bag);

  /* NONE written to a .bagz name: plain records; AUTO reading would try
   * to decode them, NONE reads them back. */
  char *nbagz = tu_join(tmp, "n.bagz");
  wo.compression = BC_COMPRESSION_NONE;
  tu_write_bag(nbagz, &wo, &mixed);
  ro.compression = BC_COMPRESSION_NONE;
  tu_check_file(nbagz, &ro, &mixed);

  bc_buf_release(&buf);
  free(nbagz);
  free(zbag);
  tu_rmtree(tmp);
  free(tmp);
  free(file);
  free(bagz);
  tu_records_free(&mixed);
}

static void test_dictionary(void **state) {
  (void)state;
  tu_records want = {0};
  tu_manifest_vector_records("dict_raw_zstd", &want);
  char *path = tu_data_path("dict_raw.bagz");
  bc_reader_options ro = BC_READER_OPTIONS_INIT;
  ro.dictionary = dict_text;
  ro.dictionary_size = strlen(dict_text);
  tu_check_file(path, &ro, &want);
  /* The dictionary is copied at open: the caller's may go away. */
  char *dict_copy = strdup(dict_text);
  ro.dictionary = dict_copy;
  bc_bag *bag = NULL;
  TU_OK(bc_bag_open(&bag, path, &ro));
  memset(dict_copy, 'x', strlen(dict_copy));
  free(dict_copy);
  tu_check_bag(bag, &want);
  bc_bag_close(bag);

  /* Without the dictionary a record either fails as corrupt or (if its
   * frame never refers to the dictionary) reads correctly - and at least
   * the 100 KiB text, which starts with dictionary words, must fail. */
  TU_OK(bc_bag_open(&bag, path, NULL));
  bc_buf buf = BC_BUF_INIT;
  size_t failed = 0;
  for (uint64_t i = 0; i < want.count; i++) {
    int rc = bc_bag_get(bag, i, &buf);
    if (rc == BC_OK) {
      TU_BUF_EQ(&buf, want.data[i], want.size[i]);
    } else {
      TU_RC(rc, BC_ECORRUPT);
      failed++;
    }
  }
  print_message("records unreadable without the dictionary: %zu\n", failed);
  assert_true(failed >= 1);
  bc_buf_release(&buf);
  bc_bag_close(bag);
  tu_records_free(&want);
  free(path);
}

static void test_max_parallelism(void **state) {
  (void)state;
  tu_records odd = {0};
  odd_records(&odd, 200, 11);
  char *tmp = tu_tempdir();
  char *p = tu_join(tmp, "par.bagz");
  tu_write_bag(p, NULL, &odd);
  const int levels[] = {0, 1, 2, 8};
  for (size_t k = 0; k < 4; k++) {
    bc_reader_options ro = BC_READER_OPTIONS_INIT;
    ro.max_parallelism = levels[k];
    bc_bag *bag = NULL;
    TU_OK(bc_bag_open(&bag, p, &ro));
    const bc_reader_options *got = bc_bag_options(bag);
    if (levels[k] == 0)
      assert_true(got->max_parallelism >= 1); /* 0 = online CPUs */
    else
      assert_int_equal(got->max_parallelism, levels[k]);
    assert_int_equal(got->max_record_size, BC_DEFAULT_MAX_RECORD_SIZE);
    tu_check_bag(bag, &odd);
    TU_OK(bc_bag_verify(bag, NULL));
    bc_bag_close(bag);
  }
  bc_reader_options bad = BC_READER_OPTIONS_INIT;
  bad.max_parallelism = -1;
  bc_bag *bag = NULL;
  TU_RC(bc_bag_open(&bag, p, &bad), BC_EINVAL);
  assert_null(bag);
  free(p);
  tu_rmtree(tmp);
  free(tmp);
  tu_records_free(&odd);
}

static void test_max_record_size(void **state) {
  (void)state;
  tu_records mixed = {0};
  mixed_records(&mixed);
  char *bagz = tu_data_path("mixed.bagz");
  bc_buf buf = BC_BUF_INIT;
  /* Record sizes: 0, 10, 102400, 0, 1000, 300, 204800, 0. */
  const uint64_t caps[] = {102399, 102400, 204799, 204800, 1000, 999};
  for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
    bc_reader_options ro = BC_READER_OPTIONS_INIT;
    ro.max_record_size = caps[c];
    bc_bag *bag = NULL;
    TU_OK(bc_bag_open(&bag, bagz, &ro));
    assert_int_equal(bc_bag_options(bag)->max_record_size, caps[c]);
    bool any_too_big = false;
    for (uint64_t i = 0; i < mixed.count; i++) {
      if (mixed.size[i] > caps[c]) {
        TU_RC(bc_bag_get(bag, i, &buf), BC_ECORRUPT);
        any_too_big = true;
      } else {
        TU_OK(bc_bag_get(bag, i, &buf));
        TU_BUF_EQ(&buf, mixed.data[i], mixed.size[i]);
      }
    }
    uint64_t idx[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    bc_buf outs[8] = {BC_BUF_INIT, BC_BUF_INIT, BC_BUF_INIT, BC_BUF_INIT,
                      BC_BUF_INIT, BC_BUF_INIT, BC_BUF_INIT, BC_BUF_INIT};
    TU_RC(bc_bag_get_many(bag, idx, 8, outs), any_too_big ? BC_ECORRUPT : BC_OK);
    for (size_t k = 0; k < 8; k++) bc_buf_release(&outs[k]);
    TU_RC(bc_bag_verify(bag, NULL), any_too_big ? BC_ECORRUPT : BC_OK);
    bc_bag_close(bag);
  }
  bc_buf_release(&buf);
  free(bagz);
  tu_records_free(&mixed);
}

static void test_get_view(void **state) {
  (void)state;
  tu_records mixed = {0};
  mixed_records(&mixed);
  char *bag_path = tu_data_path("mixed.bag");
  char *bagz_path = tu_data_path("mixed.bagz");
  bc_bag *bag = NULL;
  TU_OK(bc_bag_open(&bag, bag_path, NULL));
  const void *views[8];
  size_t sizes[8];
  for (uint64_t i = 0; i < mixed.count; i++) {
    TU_OK(bc_bag_get_view(bag, i, &views[i], &sizes[i]));
    assert_non_null(views[i]); /* even for empty records */
    tu_assert_bytes(views[i], sizes[i], mixed.data[i], mixed.size[i], "view");
  }
  /* Zero-copy: the same bytes again, and all views stay valid. */
  for (uint64_t i = 0; i < mixed.count; i++) {
    const void *again;
    size_t n;
    TU_OK(bc_bag_get_view(bag, i, &again, &n));
    if (mixed.size[i] > 0) assert_ptr_equal(again, views[i]);
    tu_assert_bytes(views[i], sizes[i], mixed.data[i], mixed.size[i], "view");
  }
  const void *v = NULL;
  size_t n = 0;
  TU_RC(bc_bag_get_view(bag, mixed.count, &v, &n), BC_ERANGE);
  TU_RC(bc_bag_get_view(bag, UINT64_MAX, &v, &n), BC_ERANGE);
  /* The batch form: the same pointers, in request order, repeats fine. */
  uint64_t order[10] = {7, 0, 2, 2, 6, 1, 3, 4, 5, 7};
  const void *many[10];
  size_t many_sizes[10];
  TU_OK(bc_bag_get_views(bag, order, 10, many, many_sizes));
  for (int k = 0; k < 10; k++) {
    uint64_t i = order[k];
    assert_ptr_equal(many[k], views[i]);
    assert_int_equal(many_sizes[k], sizes[i]);
  }
  order[4] = mixed.count; /* one bad index fails the batch before any read */
  TU_RC(bc_bag_get_views(bag, order, 10, many, many_sizes), BC_ERANGE);
  bc_bag_close(bag);

  /* Separate limits: views too. */
  char *sep = tu_data_path("abc_separate.bag");
  tu_records abc = {0};
  tu_manifest_vector_records("abc_separate", &abc);
  bc_reader_options ros = BC_READER_OPTIONS_INIT;
  ros.limits_placement = BC_LIMITS_SEPARATE;
  for (int storage = 0; storage <= 1; storage++) {
    ros.limits_storage = (bc_limits_storage)storage;
    TU_OK(bc_bag_open(&bag, sep, &ros));
    for (uint64_t i = 0; i < abc.count; i++) {
      TU_OK(bc_bag_get_view(bag, i, &v, &n));
      tu_assert_bytes(v, n, abc.data[i], abc.size[i], "view, separate limits");
    }
    bc_bag_close(bag);
  }
  tu_records_free(&abc);
  free(sep);

  /* zstd shards and the non-mmap cache policies have no view. */
  TU_OK(bc_bag_open(&bag, bagz_path, NULL));
  TU_RC(bc_bag_get_view(bag, 1, &v, &n), BC_EUNSUPPORTED);
  bc_bag_close(bag);
  for (int cache = 1; cache <= 2; cache++) {
    tu_capture_notices();
    bc_reader_options ro = BC_READER_OPTIONS_INIT;
    ro.cache_policy = (bc_cache_policy)cache;
    TU_OK(bc_bag_open(&bag, bag_path, &ro));
    TU_RC(bc_bag_get_view(bag, 1, &v, &n), BC_EUNSUPPORTED);
    bc_bag_close(bag);
  }

  /* AUTO decides per file: in "x.bag,y.bagz" only x's records have views. */
  char *spec = tu_format("%s,%s", bag_path, bagz_path);
  TU_OK(bc_bag_open(&bag, spec, NULL));
  assert_int_equal(bc_bag_len(bag), 2 * mixed.count);
  for (uint64_t i = 0; i < mixed.count; i++) {
    TU_OK(bc_bag_get_view(bag, i, &v, &n));
    tu_assert_bytes(v, n, mixed.data[i], mixed.size[i], "view of the .bag");
    TU_RC(bc_bag_get_view(bag, mixed.count + i, &v, &n), BC_EUNSUPPORTED);
  }
  tu_records both = {0};
  mixed_records(&both);
  mixed_records(&both);
  tu_check_bag(bag, &both);
  tu_records_free(&both);
  bc_bag_close(bag);
  free(spec);

  free(bagz_path);
  free(bag_path);
  tu_records_free(&mixed);
}

static void test_get_many_order(void **state) {
  (void)state;
  tu_records mixed = {0};
  mixed_records(&mixed);
  char *paths[] = {tu_data_path("mixed.bag"), tu_data_path("mixed.bagz")};
  const uint64_t idx[] = {6, 0, 6, 2, 7, 0, 3, 3, 1, 5, 4, 6, 2, 2};
  const size_t n = sizeof idx / sizeof idx[0];
  for (size_t p = 0; p < 2; p++)
    for (int par = 1; par <= 4; par += 3) {
      bc_reader_options ro = BC_READER_OPTIONS_INIT;
      ro.max_parallelism = par;
      bc_bag *bag = NULL;
      TU_OK(bc_bag_open(&bag, paths[p], &ro));
      bc_buf outs[sizeof idx / sizeof idx[0]];
      for (size_t k = 0; k < n; k++) outs[k] = (bc_buf)BC_BUF_INIT;
      TU_OK(bc_bag_get_many(bag, idx, n, outs));
      for (size_t k = 0; k < n; k++)
        tu_assert_bytes(outs[k].data, outs[k].size, mixed.data[idx[k]],
                        mixed.size[idx[k]], "get_many in request order");
      /* Buffers are reused (grown) by a second call. */
      TU_OK(bc_bag_get_many(bag, idx + 1, n - 1, outs));
      for (size_t k = 0; k + 1 < n; k++)
        tu_assert_bytes(outs[k].data, outs[k].size, mixed.data[idx[k + 1]],
                        mixed.size[idx[k + 1]], "get_many reusing buffers");
      for (size_t k = 0; k < n; k++) bc_buf_release(&outs[k]);
      /* Zero indices is a no-op. */
      TU_OK(bc_bag_get_many(bag, idx, 0, outs));
      bc_bag_close(bag);
    }
  free(paths[0]);
  free(paths[1]);
  tu_records_free(&mixed);
}

static void test_out_of_range(void **state) {
  (void)state;
  char *paths[] = {tu_data_path("mixed.bag"), tu_data_path("mixed.bagz"),
                   tu_data_path("empty.bag")};
  for (size_t p = 0; p < 3; p++) {
    bc_bag *bag = NULL;
    TU_OK(bc_bag_open(&bag, paths[p], NULL));
    uint64_t len = bc_bag_len(bag);
    const uint64_t bad[] = {len, len + 1, UINT64_MAX};
    for (size_t b = 0; b < 3; b++) {
      bc_buf buf = BC_BUF_INIT;
      const void *v;
      size_t n;
      TU_RC(bc_bag_get(bag, bad[b], &buf), BC_ERANGE);
      bc_buf_release(&buf);
      TU_RC(bc_bag_get_view(bag, bad[b], &v, &n), BC_ERANGE);
      TU_RC(bc_bag_locate(bag, bad[b], NULL, NULL), BC_ERANGE);
      uint64_t idx[3] = {0, bad[b], 0};
      bc_buf outs[3] = {BC_BUF_INIT, BC_BUF_INIT, BC_BUF_INIT};
      TU_RC(bc_bag_get_many(bag, len > 0 ? idx : idx + 1, len > 0 ? 3 : 1, outs),
            BC_ERANGE);
      for (size_t k = 0; k < 3; k++) bc_buf_release(&outs[k]);
    }
    bc_bag_close(bag);
    free(paths[p]);
  }

  /* All indices are checked before any record is read: with a corrupt
   * record first and an out-of-range index later, the answer is
   * BC_ERANGE, not the read error of the lower position. */
  char *corrupt = tu_data_path("corrupt/bad_frame.bagz");
  const uint64_t idx[] = {0, 1, 2};
  bc_buf outs[3] = {BC_BUF_INIT, BC_BUF_INIT, BC_BUF_INIT};
  for (int par = 1; par <= 2; par++) {
    bc_reader_options ro = BC_READER_OPTIONS_INIT;
    ro.max_parallelism = par;
    bc_bag *bag = NULL;
    TU_OK(bc_bag_open(&bag, corrupt, &ro));
    assert_int_equal(bc_bag_len(bag), 2);
    TU_RC(bc_bag_get_many(bag, idx, 3, outs), BC_ERANGE);
    TU_RC(bc_bag_get_many(bag, idx, 2, outs), BC_ECORRUPT);
    bc_bag_close(bag);
  }
  for (size_t k = 0; k < 3; k++) bc_buf_release(&outs[k]);
  free(corrupt);
}

static void test_bad_reader_options(void **state) {
  (void)state;
  char *p = tu_data_path("mixed.bag");
  bc_bag *bag = NULL;
  bc_reader_options ro = BC_READER_OPTIONS_INIT;
  ro.cache_policy = (bc_cache_policy)7;
  TU_RC(bc_bag_open(&bag, p, &ro), BC_EINVAL);
  ro = (bc_reader_options)BC_READER_OPTIONS_INIT;
  ro.compression = (bc_compression)3;
  TU_RC(bc_bag_open(&bag, p, &ro), BC_EINVAL);
  ro = (bc_reader_options)BC_READER_OPTIONS_INIT;
  ro.sharding_layout = (bc_sharding_layout)2;
  TU_RC(bc_bag_open(&bag, p, &ro), BC_EINVAL);
  ro = (bc_reader_options)BC_READER_OPTIONS_INIT;
  ro.limits_storage = (bc_limits_storage)2;
  TU_RC(bc_bag_open(&bag, p, &ro), BC_EINVAL);
  ro = (bc_reader_options)BC_READER_OPTIONS_INIT;
  ro.access_pattern = (bc_access_pattern)3;
  TU_RC(bc_bag_open(&bag, p, &ro), BC_EINVAL);
  ro = (bc_reader_options)BC_READER_OPTIONS_INIT;
  ro.limits_placement = (bc_limits_placement)2;
  TU_RC(bc_bag_open(&bag, p, &ro), BC_EINVAL);
  assert_null(bag);
  free(p);
}

/* ---- writer options ---------------------------------------------------- */

static void test_writer_placement_compression(void **state) {
  (void)state;
  tu_records mixed = {0};
  mixed_records(&mixed);
  char *tmp = tu_tempdir();
  const char *names[] = {"w.bag", "w.bagz"};
  const int three = 3;
  for (int place = 0; place <= 1; place++)
    for (int comp = 0; comp <= 2; comp++)
      for (size_t nm = 0; nm < 2; nm++) {
        char *path = tu_join(tmp, names[nm]);
        bc_writer_options wo = BC_WRITER_OPTIONS_INIT;
        wo.limits_placement = (bc_limits_placement)place;
        wo.compression = (bc_compression)comp;
        bool zstd = comp == BC_COMPRESSION_ZSTD ||
                    (comp == BC_COMPRESSION_AUTO && nm == 1);
        tu_image im = tu_image_build(&mixed, zstd ? &three : NULL, NULL, 0);

        bc_writer *w = NULL;
        TU_OK(bc_writer_open(&w, path, &wo));
        for (size_t i = 0; i < mixed.count; i++) {
          TU_OK(bc_writer_write(w, mixed.data[i], mixed.size[i]));
          assert_int_equal(bc_writer_count(w), i + 1);
        }
        assert_int_equal(bc_writer_records_bytes(w), im.records_size);
        TU_OK(bc_writer_close(w));
        bc_writer_free(w);
        tu_image_compare(path, (bc_limits_placement)place, &im);
        /* Nothing but the published file(s). */
        assert_int_equal(tu_count_entries(tmp, ""), place == BC_LIMITS_SEPARATE ? 2 : 1);

        bc_reader_options ro = BC_READER_OPTIONS_INIT;
        ro.limits_placement = (bc_limits_placement)place;
        ro.compression = zstd ? BC_COMPRESSION_ZSTD : BC_COMPRESSION_NONE;
        tu_check_file(path, &ro, &mixed);
        bc_bag *bag = NULL;
        TU_OK(bc_bag_open(&bag, path, &ro));
        bc_shard_info info;
        TU_OK(bc_bag_shard_info(bag, 0, &info));
        assert_int_equal(info.records, mixed.count);
        assert_int_equal(info.records_bytes, im.records_size);
        assert_int_equal(info.file_bytes, im.records_size + im.limits_size);
        assert_int_equal(info.compression, ro.compression);
        bc_bag_close(bag);

        tu_image_free(&im);
        tu_remove_entries(tmp, "");
        free(path);
      }
  tu_rmtree(tmp);
  free(tmp);
  tu_records_free(&mixed);
}

static void test_writer_levels_and_dictionary(void **state) {
  (void)state;
  tu_records mixed = {0};
  mixed_records(&mixed);
  char *tmp = tu_tempdir();
  char *path = tu_join(tmp, "lv.bagz");
  const int levels[] = {1, 3, 19, -5, 0};
  for (size_t l = 0; l < sizeof levels / sizeof levels[0]; l++)
    for (int with_dict = 0; with_dict <= 1; with_dict++) {
      bc_writer_options wo = BC_WRITER_OPTIONS_INIT;
      wo.zstd_level = levels[l];
      wo.compression = l % 2 ? BC_COMPRESSION_ZSTD : BC_COMPRESSION_AUTO;
      if (with_dict) {
        wo.dictionary = dict_text;
        wo.dictionary_size = strlen(dict_text);
      }
      tu_write_bag(path, &wo, &mixed);
      tu_image im = tu_image_build(&mixed, &levels[l], wo.dictionary, wo.dictionary_size);
      tu_image_compare(path, BC_LIMITS_TAIL, &im);
      tu_image_free(&im);
      bc_reader_options ro = BC_READER_OPTIONS_INIT;
      ro.dictionary = wo.dictionary;
      ro.dictionary_size = wo.dictionary_size;
      tu_check_file(path, &ro, &mixed);
    }
  /* The writer copies the dictionary at open. */
  {
    char *dict = strdup(dict_text);
    assert_non_null(dict);
    bc_writer_options wd = BC_WRITER_OPTIONS_INIT;
    wd.dictionary = dict;
    wd.dictionary_size = strlen(dict);
    bc_writer *w = NULL;
    TU_OK(bc_writer_open(&w, path, &wd));
    memset(dict, '#', strlen(dict));
    free(dict);
    for (size_t i = 0; i < mixed.count; i++)
      TU_OK(bc_writer_write(w, mixed.data[i], mixed.size[i]));
    TU_OK(bc_writer_close(w));
    bc_writer_free(w);
    const int three = 3;
    tu_image im = tu_image_build(&mixed, &three, dict_text, strlen(dict_text));
    tu_image_compare(path, BC_LIMITS_TAIL, &im);
    tu_image_free(&im);
  }
  /* Level 0 is zstd's default, 3. */
  bc_writer_options wo = BC_WRITER_OPTIONS_INIT;
  tu_write_bag(path, &wo, &mixed);
  size_t n0, n3;
  unsigned char *f0 = tu_read_file(path, &n0);
  wo.zstd_level = 3;
  tu_write_bag(path, &wo, &mixed);
  unsigned char *f3 = tu_read_file(path, &n3);
  tu_assert_bytes(f0, n0, f3, n3, "level 0 vs level 3");
  free(f0);
  free(f3);
  free(path);
  tu_rmtree(tmp);
  free(tmp);
  tu_records_free(&mixed);
}

static void test_writer_bad_options(void **state) {
  (void)state;
  char *tmp = tu_tempdir();
  char *path = tu_join(tmp, "bad.bag");
  bc_writer *w = NULL;
  bc_writer_options wo = BC_WRITER_OPTIONS_INIT;
  wo.compression = (bc_compression)9;
  TU_RC(bc_writer_open(&w, path, &wo), BC_EINVAL);
  wo = (bc_writer_options)BC_WRITER_OPTIONS_INIT;
  wo.limits_placement = (bc_limits_placement)5;
  TU_RC(bc_writer_open(&w, path, &wo), BC_EINVAL);
  wo = (bc_writer_options)BC_WRITER_OPTIONS_INIT;
  wo.dictionary_size = 10; /* without a dictionary */
  TU_RC(bc_writer_open(&w, path, &wo), BC_EINVAL);
  assert_null(w);
  assert_int_equal(tu_count_entries(tmp, ""), 0);
  free(path);
  tu_rmtree(tmp);
  free(tmp);
}

/* ---- versions of the options structs ---------------------------------- */

/* Fails unless the thread's message says how to initialize `prefix`'s
 * struct. */
static void says_how(const char *prefix) {
  char want[96];
  snprintf(want, sizeof want, "%s_INIT", prefix);
  if (strstr(bc_errmsg(), want) == NULL)
    fail_msg("the message does not name %s: %s", want, bc_errmsg());
}

static int get_nothing(void *payload, uint64_t index, bc_buf *out) {
  (void)payload;
  (void)index;
  (void)out;
  return BC_ERANGE;
}

static int next_none(void *payload, uint64_t *index) {
  (void)payload;
  (void)index;
  return 0;
}

/* bc_parse_size: the sizes people write, every unit a power of 1024
 * whatever its spelling, fractions rounded down; anything else and
 * overflow are BC_EINVAL with the output untouched. */
static void test_parse_size(void **state) {
  (void)state;
  static const struct {
    const char *text;
    uint64_t bytes;
  } good[] = {
      {"0", 0},          {"100", 100},        {"100b", 100},         {"100 B", 100},
      {"1.9", 1},        {"512k", 512 << 10}, {"512K", 512 << 10},   {"512kb", 512 << 10},
      {"512KiB", 512 << 10}, {"2g", 2ULL << 30}, {"2GiB", 2ULL << 30}, {"2 gb", 2ULL << 30},
      {"1.5 GB", 3ULL << 29}, {" 64mb ", 64 << 20}, {".5m", 1 << 19},  {"0.001k", 1},
      {"1.0000001k", 1024}, {"1.25 TiB", 5ULL << 38}, {"2p", 2ULL << 50},
      {"16383.999999999999999999999999999999999p", 18446744073709551615ULL},
      {"18446744073709551615", 18446744073709551615ULL},
  };
  static const char *const bad[] = {
      "", " ", "k", ".", "1.5.2k", "1kk", "1 k b", "1e3", "-1k", "+1k", "1x", "0x10",
      "1,5k", "16384p", "18446744073709551616", "99999999999999999999999", "1 2",
  };
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    uint64_t n = 7;
    if (bc_parse_size(good[i].text, &n) != BC_OK || n != good[i].bytes)
      fail_msg("'%s': %llu (%s), expected %llu", good[i].text, (unsigned long long)n,
               bc_errmsg(), (unsigned long long)good[i].bytes);
  }
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    uint64_t n = 7;
    if (bc_parse_size(bad[i], &n) != BC_EINVAL || n != 7)
      fail_msg("'%s' accepted as %llu", bad[i], (unsigned long long)n);
  }
  uint64_t n = 0;
  TU_RC(bc_parse_size("1.5 GiB", NULL), BC_EINVAL);
  TU_RC(bc_parse_size(NULL, &n), BC_EINVAL);
  TU_RC(bc_parse_size("lots", &n), BC_EINVAL);
  assert_non_null(strstr(bc_errmsg(), "'lots' is not a size"));
}

/* Every options struct starts with its version: the _INIT macros and the
 * _init() functions set it; a function given another version refuses the
 * struct (BC_EINVAL, saying how to initialize one) before using any of
 * it; NULL options are the defaults. */
static void test_options_versions(void **state) {
  (void)state;
  bc_writer_options wo = BC_WRITER_OPTIONS_INIT, wi;
  bc_reader_options ro = BC_READER_OPTIONS_INIT, ri;
  bc_cache_options co = BC_CACHE_OPTIONS_INIT, ci;
  bc_callback_seq_options so = BC_CALLBACK_SEQ_OPTIONS_INIT, si;
  bc_readahead_options ao = BC_READAHEAD_OPTIONS_INIT, ai;
  assert_int_equal(wo.version, BC_WRITER_OPTIONS_VERSION);
  assert_int_equal(ro.version, BC_READER_OPTIONS_VERSION);
  assert_int_equal(co.version, BC_CACHE_OPTIONS_VERSION);
  assert_int_equal(so.version, BC_CALLBACK_SEQ_OPTIONS_VERSION);
  assert_int_equal(ao.version, BC_READAHEAD_OPTIONS_VERSION);
  memset(&wi, 0x5a, sizeof wi);
  memset(&ri, 0x5a, sizeof ri);
  memset(&ci, 0x5a, sizeof ci);
  memset(&si, 0x5a, sizeof si);
  memset(&ai, 0x5a, sizeof ai);
  TU_OK(bc_writer_options_init(&wi, BC_WRITER_OPTIONS_VERSION));
  TU_OK(bc_reader_options_init(&ri, BC_READER_OPTIONS_VERSION));
  TU_OK(bc_cache_options_init(&ci, BC_CACHE_OPTIONS_VERSION));
  TU_OK(bc_callback_seq_options_init(&si, BC_CALLBACK_SEQ_OPTIONS_VERSION));
  TU_OK(bc_readahead_options_init(&ai, BC_READAHEAD_OPTIONS_VERSION));
  /* The same values as the macros (field by field: padding may differ). */
  assert_true(wi.version == wo.version && wi.limits_placement == wo.limits_placement &&
              wi.compression == wo.compression && wi.zstd_level == 0 &&
              wi.dictionary == NULL && wi.dictionary_size == 0 && wi.file_mode == 0);
  assert_true(ri.version == ro.version && ri.sharding_layout == ro.sharding_layout &&
              ri.limits_storage == ro.limits_storage && ri.dictionary == NULL &&
              ri.access_pattern == ro.access_pattern &&
              ri.cache_policy == ro.cache_policy && ri.max_parallelism == 0 &&
              ri.max_record_size == 0);
  assert_true(ci.version == co.version && ci.shard_records == 0 &&
              ci.compression == BC_COMPRESSION_AUTO && ci.prefetch == NULL &&
              ci.info_json == NULL && ci.known_length == -1 && ci.fingerprint_json == NULL &&
              ci.max_passes == 0 && !ci.make_parents && !ci.preload_all);
  assert_true(si.version == so.version && si.length == NULL && si.get == NULL &&
              si.fixed_length.kind == BC_LEN_EXACT && si.fixed_length.value == 0 &&
              si.payload == NULL && !si.thread_safe);
  assert_true(ai.version == ao.version && ai.window == 1024 && ai.threads == 2);
  /* _init() of another version: refused, the struct untouched. */
  ai.window = 7;
  TU_RC(bc_readahead_options_init(&ai, BC_READAHEAD_OPTIONS_VERSION + 1), BC_EINVAL);
  says_how("BC_READAHEAD_OPTIONS");
  assert_int_equal(ai.window, 7);
  TU_RC(bc_writer_options_init(&wi, 0), BC_EINVAL);
  TU_RC(bc_reader_options_init(&ri, 0), BC_EINVAL);
  TU_RC(bc_cache_options_init(&ci, 0), BC_EINVAL);
  TU_RC(bc_callback_seq_options_init(&si, 0), BC_EINVAL);
  TU_RC(bc_cache_options_init(NULL, BC_CACHE_OPTIONS_VERSION), BC_EINVAL);

  char *tmp = tu_tempdir();
  char *path = tu_join(tmp, "v.bag"), *root = tu_join(tmp, "cache");
  /* A struct of another version (zeroed, as a caller that never
   * initialized it has it): refused before anything is made. */
  bc_writer *w = NULL;
  wo.version = 0;
  TU_RC(bc_writer_open(&w, path, &wo), BC_EINVAL);
  says_how("BC_WRITER_OPTIONS");
  assert_null(w);
  assert_int_equal(tu_count_entries(tmp, ""), 0);
  /* NULL: the defaults. */
  TU_OK(bc_writer_open(&w, path, NULL));
  TU_OK(bc_writer_write(w, "abc", 3));
  TU_OK(bc_writer_close(w));
  bc_writer_free(w);
  bc_bag *bag = NULL;
  ro.version = BC_READER_OPTIONS_VERSION + 1;
  TU_RC(bc_bag_open(&bag, path, &ro), BC_EINVAL);
  says_how("BC_READER_OPTIONS");
  assert_null(bag);
  TU_OK(bc_bag_open(&bag, path, NULL));
  assert_int_equal(bc_bag_len(bag), 1);
  bc_bag_close(bag);
  bc_seq *seq = NULL;
  TU_RC(bc_seq_open_bag(&seq, path, &ro), BC_EINVAL);
  says_how("BC_READER_OPTIONS");
  bc_cache *cache = NULL;
  co.version = 0;
  TU_RC(bc_cache_open(&cache, root, NULL, &co), BC_EINVAL);
  says_how("BC_CACHE_OPTIONS");
  assert_null(cache);
  assert_false(tu_exists(root));
  so.get = get_nothing;
  so.version = 0;
  TU_RC(bc_seq_new_callbacks(&seq, &so), BC_EINVAL);
  says_how("BC_CALLBACK_SEQ_OPTIONS");
  so.version = BC_CALLBACK_SEQ_OPTIONS_VERSION;
  TU_OK(bc_seq_new_callbacks(&seq, &so));
  bc_readahead *it = NULL;
  ao.version = 0;
  TU_RC(bc_readahead_open(&it, seq, next_none, NULL, &ao), BC_EINVAL);
  says_how("BC_READAHEAD_OPTIONS");
  TU_RC(bc_seq_iterate(&it, seq, 0, &ao), BC_EINVAL);
  assert_null(it);
  TU_OK(bc_readahead_open(&it, seq, next_none, NULL, NULL));
  bc_buf buf = BC_BUF_INIT;
  TU_RC(bc_readahead_next(it, &buf, NULL), 0);
  bc_readahead_close(it);
  bc_seq_unref(seq);
  free(root);
  free(path);
  tu_rmtree(tmp);
  free(tmp);
}

static void test_writer_file_mode(void **state) {
  (void)state;
  mode_t old = umask(022);
  char *tmp = tu_tempdir();
  tu_records r = {0};
  tu_records_labelled(&r, "mode", 3);
  const struct {
    unsigned mode;
    unsigned want;
  } cases[] = {{0, 0644}, {0600, 0600}, {0640, 0640}, {0666, 0644}, {0444, 0444}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (int place = 0; place <= 1; place++) {
      char *path = tu_format("%s/m%zu-%d.bag", tmp, c, place);
      bc_writer_options wo = BC_WRITER_OPTIONS_INIT;
      wo.file_mode = cases[c].mode;
      wo.limits_placement = (bc_limits_placement)place;
      tu_write_bag(path, &wo, &r);
      struct stat st;
      assert_int_equal(stat(path, &st), 0);
      if ((st.st_mode & 0777) != cases[c].want)
        fail_msg("file_mode 0%o: %s has mode 0%o, expected 0%o", cases[c].mode,
                 path, st.st_mode & 0777, cases[c].want);
      if (place == BC_LIMITS_SEPARATE) {
        char *lp = bc_limits_path(path);
        assert_int_equal(stat(lp, &st), 0);
        if ((st.st_mode & 0777) != cases[c].want)
          fail_msg("file_mode 0%o: %s has mode 0%o, expected 0%o", cases[c].mode,
                   lp, st.st_mode & 0777, cases[c].want);
        free(lp);
      }
      free(path);
    }
  umask(old);
  tu_records_free(&r);
  tu_rmtree(tmp);
  free(tmp);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_storage_access_cache),
      cmocka_unit_test(test_explicit_compression),
      cmocka_unit_test(test_dictionary),
      cmocka_unit_test(test_max_parallelism),
      cmocka_unit_test(test_max_record_size),
      cmocka_unit_test(test_get_view),
      cmocka_unit_test(test_get_many_order),
      cmocka_unit_test(test_out_of_range),
      cmocka_unit_test(test_bad_reader_options),
      cmocka_unit_test(test_writer_placement_compression),
      cmocka_unit_test(test_writer_levels_and_dictionary),
      cmocka_unit_test(test_writer_bad_options),
      cmocka_unit_test(test_writer_file_mode),
      cmocka_unit_test(test_options_versions),
      cmocka_unit_test(test_parse_size),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
