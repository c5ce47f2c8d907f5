/*
 * test_property: seeded random record sets, written with every writer
 * option combination and read back with every reader option combination,
 * always compared with the in-memory model (the array of records).
 *
 * Record sets hold 0..300 records: empty ones, small and large ones (up to
 * 200 KiB), compressible and random bytes, and repeats of earlier records.
 * Sharded sets split the same records over k shards (some empty) read as
 * @N, @* and a comma list (concatenated), or deal them round-robin for the
 * interleaved layout.
 *
 * The seed is printed; BC_TEST_SEED=N reruns one case.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static const char dict_text[] =
    "record payload key value the quick brown fox jumps over the lazy dog ";

/* A random record set of `count` records. */
static void gen_records(tu_rng *rng, size_t count, tu_records *out) {
  unsigned char *buf = malloc(200 * 1024 + 1);
  assert_non_null(buf);
  for (size_t i = 0; i < count; i++) {
    uint64_t kind = tu_rng_below(rng, 100);
    if (kind < 10) {
      tu_records_add(out, "", 0);
      continue;
    }
    if (kind < 20 && out->count > 0) {
      /* A repeat of an earlier record. */
      size_t j = (size_t)tu_rng_below(rng, out->count);
      tu_records_add(out, out->data[j], out->size[j]);
      continue;
    }
    size_t n = kind < 75    ? 1 + (size_t)tu_rng_below(rng, 256)
               : kind < 96 ? 257 + (size_t)tu_rng_below(rng, 8192 - 256)
                           : 8193 + (size_t)tu_rng_below(rng, 200 * 1024 - 8192);
    switch (tu_rng_below(rng, 3)) {
      case 0: /* incompressible */
        tu_rng_fill(rng, buf, n);
        break;
      case 1: /* words of the dictionary, so it helps */
        for (size_t k = 0; k < n;) {
          size_t off = (size_t)tu_rng_below(rng, sizeof dict_text - 8);
          size_t len = 4 + (size_t)tu_rng_below(rng, 5);
          for (size_t c = 0; c < len && k < n; c++, k++) buf[k] = (unsigned char)dict_text[off + c];
        }
        break;
      default: { /* a short random pattern repeated */
        unsigned char pat[16];
        size_t plen = 1 + (size_t)tu_rng_below(rng, sizeof pat);
        tu_rng_fill(rng, pat, plen);
        for (size_t k = 0; k < n; k++) buf[k] = pat[k % plen];
      }
    }
    tu_records_add(out, buf, n);
  }
  free(buf);
}

typedef struct wcombo {
  const char *name;
  bc_limits_placement place;
  bc_compression comp;
  int level;
  bool dict;
} wcombo;

static const wcombo wcombos[] = {
    {"tail-none", BC_LIMITS_TAIL, BC_COMPRESSION_NONE, 0, false},
    {"tail-zstd1", BC_LIMITS_TAIL, BC_COMPRESSION_ZSTD, 1, false},
    {"tail-zstd3", BC_LIMITS_TAIL, BC_COMPRESSION_ZSTD, 3, false},
    {"tail-zstd-dict", BC_LIMITS_TAIL, BC_COMPRESSION_ZSTD, 3, true},
    {"sep-none", BC_LIMITS_SEPARATE, BC_COMPRESSION_NONE, 0, false},
    {"sep-zstd1", BC_LIMITS_SEPARATE, BC_COMPRESSION_ZSTD, 1, false},
    {"sep-zstd3", BC_LIMITS_SEPARATE, BC_COMPRESSION_ZSTD, 3, false},
    {"sep-zstd-dict", BC_LIMITS_SEPARATE, BC_COMPRESSION_ZSTD, 3, true},
};

/* Reads `spec` in random order with get and with get_many (random
 * indices, repeats included) and compares with the model.  The cache
 * policies that bypass the page cache read from the device, so they check
 * a random sample of `sample` records instead of all. */
static void check_random_reads(tu_rng *rng, const char *spec,
                               const bc_reader_options *ro,
                               const tu_records *model) {
  const size_t sample = 48;
  bc_bag *bag = NULL;
  TU_OK(bc_bag_open(&bag, spec, ro));
  size_t len = model->count;
  assert_int_equal(bc_bag_len(bag), len);
  size_t n = ro->cache_policy == BC_CACHE_SYSTEM || len < sample ? len : sample;

  /* get, in a random permutation. */
  uint64_t *perm = calloc(len + 1, sizeof *perm);
  assert_non_null(perm);
  for (size_t i = 0; i < len; i++) perm[i] = i;
  for (size_t i = len; i > 1; i--) {
    size_t j = (size_t)tu_rng_below(rng, i);
    uint64_t t = perm[i - 1];
    perm[i - 1] = perm[j];
    perm[j] = t;
  }
  bc_buf buf = BC_BUF_INIT;
  for (size_t i = 0; i < n; i++) {
    TU_OK(bc_bag_get(bag, perm[i], &buf));
    tu_assert_bytes(buf.data, buf.size, model->data[perm[i]],
                    model->size[perm[i]], "get");
  }
  bc_buf_release(&buf);

  /* get_many: n random indices (repeats likely). */
  if (n > 0) {
    bc_buf *outs = calloc(n, sizeof *outs);
    assert_non_null(outs);
    for (size_t i = 0; i < n; i++) perm[i] = tu_rng_below(rng, len);
    TU_OK(bc_bag_get_many(bag, perm, n, outs));
    for (size_t i = 0; i < n; i++) {
      tu_assert_bytes(outs[i].data, outs[i].size, model->data[perm[i]],
                      model->size[perm[i]], "get_many");
      bc_buf_release(&outs[i]);
    }
    free(outs);
  }
  free(perm);
  bc_bag_close(bag);
}

static uint64_t base_seed(void) {
  const char *s = getenv("BC_TEST_SEED");
  return s != NULL ? strtoull(s, NULL, 10) : 20240611;
}

/* One record set through all writer x reader combinations. */
static void run_single(uint64_t seed, size_t count) {
  tu_rng rng;
  tu_rng_seed(&rng, seed);
  tu_records model = {0};
  gen_records(&rng, count, &model);
  print_message("seed %llu: %zu records\n", (unsigned long long)seed, model.count);
  char *tmp = tu_tempdir();
  for (size_t w = 0; w < sizeof wcombos / sizeof wcombos[0]; w++) {
    const wcombo *c = &wcombos[w];
    char *path = tu_format("%s/%s.bag", tmp, c->name);
    bc_writer_options wo = BC_WRITER_OPTIONS_INIT;
    wo.limits_placement = c->place;
    wo.compression = c->comp;
    wo.zstd_level = c->level;
    if (c->dict) {
      wo.dictionary = dict_text;
      wo.dictionary_size = strlen(dict_text);
    }
    tu_write_bag(path, &wo, &model);
    for (int storage = 0; storage <= 1; storage++)
      for (int cache = 0; cache <= 2; cache++)
        for (int par = 1; par <= 4; par += 3) {
          bc_reader_options ro = BC_READER_OPTIONS_INIT;
          ro.limits_placement = c->place;
          ro.compression = c->comp;
          ro.dictionary = wo.dictionary;
          ro.dictionary_size = wo.dictionary_size;
          ro.limits_storage = (bc_limits_storage)storage;
          ro.cache_policy = (bc_cache_policy)cache;
          ro.max_parallelism = par;
          check_random_reads(&rng, path, &ro, &model);
        }
    bc_reader_options ro = BC_READER_OPTIONS_INIT;
    ro.limits_placement = c->place;
    ro.compression = c->comp;
    ro.dictionary = wo.dictionary;
    ro.dictionary_size = wo.dictionary_size;
    bc_bag *bag = NULL;
    TU_OK(bc_bag_open(&bag, path, &ro));
    TU_OK(bc_bag_verify(bag, NULL));
    bc_bag_close(bag);
    free(path);
  }
  tu_rmtree(tmp);
  free(tmp);
  tu_records_free(&model);
}

static void test_single_files(void **state) {
  (void)state;
  tu_capture_notices(); /* direct I/O may fall back quietly */
  uint64_t seed = base_seed();
  run_single(seed, 0);
  run_single(seed + 1, 1);
  tu_rng rng;
  tu_rng_seed(&rng, seed);
  for (int i = 0; i < 3; i++) {
    uint64_t s = seed + 100 + (uint64_t)i;
    run_single(s, (size_t)tu_rng_below(&rng, 301));
  }
  run_single(seed + 200, 300);
}

/* Writes shard k of a set; `name` like "%s/cat-%05zu-of-%05zu.bagz". */
static char *shard_path(const char *dir, const char *stem, size_t k, size_t n,
                        const char *ext) {
  return tu_format("%s/%s-%05zu-of-%05zu%s", dir, stem, k, n, ext);
}

static void run_sharded(uint64_t seed) {
  tu_rng rng;
  tu_rng_seed(&rng, seed);
  tu_records model = {0};
  gen_records(&rng, (size_t)tu_rng_below(&rng, 301), &model);
  size_t k = 1 + (size_t)tu_rng_below(&rng, 6);
  bool zstd = tu_rng_below(&rng, 2) == 1;
  bool separate = tu_rng_below(&rng, 2) == 1;
  const char *ext = zstd ? ".bagz" : ".bag";
  print_message("seed %llu: %zu records in %zu shards (%s, %s limits)\n",
                (unsigned long long)seed, model.count, k, ext,
                separate ? "separate" : "tail");
  char *tmp = tu_tempdir();
  bc_writer_options wo = BC_WRITER_OPTIONS_INIT;
  wo.limits_placement = separate ? BC_LIMITS_SEPARATE : BC_LIMITS_TAIL;

  /* Concatenated: cut points drawn at random (equal cuts = empty shards). */
  size_t *cut = calloc(k + 1, sizeof *cut);
  assert_non_null(cut);
  for (size_t s = 1; s < k; s++) cut[s] = (size_t)tu_rng_below(&rng, model.count + 1);
  cut[k] = model.count;
  for (size_t s = 1; s < k; s++) /* sort the inner cuts */
    for (size_t t = s + 1; t < k; t++)
      if (cut[t] < cut[s]) {
        size_t x = cut[s];
        cut[s] = cut[t];
        cut[t] = x;
      }
  if (k >= 3) cut[2] = cut[1]; /* always at least one empty shard then */
  char *list = tu_format("%s", "");
  for (size_t s = 0; s < k; s++) {
    tu_records part = {0};
    for (size_t i = cut[s]; i < cut[s + 1]; i++)
      tu_records_add(&part, model.data[i], model.size[i]);
    char *p = shard_path(tmp, "cat", s, k, ext);
    tu_write_bag(p, &wo, &part);
    char *l = tu_format("%s%s%s", list, s ? "," : "", p);
    free(list);
    list = l;
    free(p);
    tu_records_free(&part);
  }
  bc_reader_options ro = BC_READER_OPTIONS_INIT;
  ro.limits_placement = wo.limits_placement;
  char *specs[3] = {tu_format("%s/cat@%zu%s", tmp, k, ext),
                    tu_format("%s/cat@*%s", tmp, ext), list};
  for (size_t sp = 0; sp < 3; sp++)
    for (int par = 1; par <= 4; par += 3) {
      ro.max_parallelism = par;
      ro.limits_storage = (bc_limits_storage)(sp % 2);
      check_random_reads(&rng, specs[sp], &ro, &model);
    }
  for (size_t sp = 0; sp < 3; sp++) free(specs[sp]);

  /* Interleaved: record g goes to shard g % k. */
  for (size_t s = 0; s < k; s++) {
    tu_records part = {0};
    for (size_t g = s; g < model.count; g += k)
      tu_records_add(&part, model.data[g], model.size[g]);
    char *p = shard_path(tmp, "rr", s, k, ext);
    tu_write_bag(p, &wo, &part);
    free(p);
    tu_records_free(&part);
  }
  ro.sharding_layout = BC_LAYOUT_INTERLEAVED;
  char *spec = tu_format("%s/rr@*%s", tmp, ext);
  for (int par = 1; par <= 4; par += 3) {
    ro.max_parallelism = par;
    check_random_reads(&rng, spec, &ro, &model);
  }
  free(spec);
  free(cut);
  tu_rmtree(tmp);
  free(tmp);
  tu_records_free(&model);
}

static void test_sharded_sets(void **state) {
  (void)state;
  uint64_t seed = base_seed();
  for (uint64_t i = 0; i < 8; i++) run_sharded(seed + 1000 + i);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_single_files),
      cmocka_unit_test(test_sharded_sets),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
