/*
 * A failing source: its error (code and message) reaches the caller,
 * nothing partial is left in shards/ or scratch/, the claim is released so
 * the next access retries, and a source that misbehaves (a bad return
 * value) is reported as BC_ESOURCE rather than trusted.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

typedef struct fixture {
  char *dir, *root, *shards, *scratch;
  ts_shared *sh;
  bc_cache *c;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  if (f == NULL) return -1;
  f->dir = cu_tmp_dir();
  f->root = cu_path(f->dir, "c");
  f->shards = cu_path(f->root, "shards");
  f->scratch = cu_path(f->root, "scratch");
  cu_watchdog(60);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  bc_cache_close(f->c);
  ts_shared_free(f->sh);
  cu_rm_rf(f->dir);
  free(f->scratch);
  free(f->shards);
  free(f->root);
  free(f->dir);
  free(f);
  cu_watchdog(0);
  return 0;
}

static void open_with(fixture *f, const ts_config *cfg) {
  f->sh = ts_shared_new(cfg);
  assert_non_null(f->sh);
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = 10;
  o.prefetch_shards = -1;
  CU_OK(cu_open(&f->c, f->root, cfg, f->sh, &o));
}

static uint64_t present(bc_cache *c) {
  bc_cache_stats st;
  CU_OK(bc_cache_stats_get(c, &st));
  return st.shards_present;
}

/* Nothing of a failed fill may remain: no shard file, no scratch file. */
static void check_nothing_left(fixture *f, size_t shard_files) {
  assert_int_equal(cu_dir_count(f->shards), shard_files);
  assert_int_equal(cu_dir_count(f->scratch), 0);
  assert_int_equal(present(f->c), shard_files);
  cu_check_shards(f->root, false, false);
}

static void test_fails_once_then_succeeds(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(100);
  cfg.fail_at = 25;
  cfg.fail_times = 1;
  open_with(f, &cfg);
  bc_buf b = BC_BUF_INIT;
  CU_RC(bc_cache_get(f->c, 27, &b), BC_ESOURCE);
  if (strstr(bc_errmsg(), "test source: failure at record 25") == NULL)
    fail_msg("the source's message is lost: \"%s\"", bc_errmsg());
  assert_int_equal(atomic_load(&f->sh->failures), 1);
  /* Shards 0 and 1, complete on the pass's way to 2, were kept; nothing
   * of shard 2 is left. */
  check_nothing_left(f, 2);
  /* The failed pass is not reused; the retry opens a new one and works. */
  assert_int_equal(cu_get_cmp(f->c, 27, false, &b), 0);
  assert_int_equal(cu_get_cmp(f->c, 20, false, &b), 0);
  assert_int_equal(cu_get_cmp(f->c, 29, false, &b), 0);
  assert_int_equal(atomic_load(&f->sh->opens), 2);
  assert_int_equal(atomic_load(&f->sh->closes), 1);
  check_nothing_left(f, 3);
  cu_check_all(f->c, 100, false);
  bc_cache_stats st;
  CU_OK(bc_cache_stats_get(f->c, &st));
  assert_int_equal(st.fills + st.shards_kept, 10);
  assert_int_equal(st.regenerations, 0);
  bc_buf_release(&b);
}

static void test_error_code_kept(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(100);
  cfg.fail_at = 25;
  cfg.fail_times = -1; /* always */
  cfg.fail_code = BC_EIO;
  open_with(f, &cfg);
  bc_buf b = BC_BUF_INIT;
  for (int k = 0; k < 3; k++) {
    CU_RC(bc_cache_get(f->c, 21, &b), BC_EIO);
    assert_non_null(strstr(bc_errmsg(), "failure at record 25"));
  }
  /* Shards 0 and 1 were kept on the way.  Shards not involving record 25
   * are fine: a pass keeping shard 2 on its way to 3 meets it once, and
   * later passes skip() over shard 2. */
  assert_int_equal(cu_get_cmp(f->c, 5, false, &b), 0);
  CU_RC(bc_cache_get(f->c, 35, &b), BC_EIO);
  assert_int_equal(cu_get_cmp(f->c, 35, false, &b), 0);
  check_nothing_left(f, 3);
  /* Settling the length drains from the furthest shard known (4) on, so
   * it never needs record 25; everything that does fails the same way. */
  uint64_t len = 0;
  CU_OK(bc_cache_len(f->c, &len));
  assert_int_equal(len, 100);
  CU_RC(bc_cache_get(f->c, -75, &b), BC_EIO);
  char *out = cu_path(f->dir, "out@2.bag");
  CU_RC(bc_cache_export(f->c, out), BC_EIO);
  free(out);
  check_nothing_left(f, 9);
  assert_int_equal(cu_dir_count(f->scratch), 0);
  cu_check_shards(f->root, false, false);
  bc_buf_release(&b);
}

static void test_failure_while_skipping(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(100);
  cfg.with_skip = false; /* moving forward reads the failing record */
  cfg.fail_at = 25;
  cfg.fail_times = 1;
  cfg.fail_code = BC_ENOSPC;
  open_with(f, &cfg);
  bc_buf b = BC_BUF_INIT;
  CU_RC(bc_cache_get(f->c, 45, &b), BC_ENOSPC);
  assert_non_null(strstr(bc_errmsg(), "failure at record 25"));
  check_nothing_left(f, 2); /* 0 and 1, kept on the way */
  /* The retry reads shard 2 and drops it (keeping it failed once), keeps
   * 3 and fills 4. */
  assert_int_equal(cu_get_cmp(f->c, 45, false, &b), 0);
  check_nothing_left(f, 4);
  bc_buf_release(&b);
}

static void test_open_fails(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(100);
  cfg.fail_open = true;
  cfg.fail_times = 2;
  open_with(f, &cfg);
  bc_buf b = BC_BUF_INIT;
  for (int k = 0; k < 2; k++) {
    CU_RC(bc_cache_get(f->c, 3, &b), BC_ESOURCE);
    assert_non_null(strstr(bc_errmsg(), "open failed on purpose"));
  }
  check_nothing_left(f, 0);
  assert_int_equal(cu_get_cmp(f->c, 3, false, &b), 0);
  check_nothing_left(f, 1);
  bc_buf_release(&b);
}

static void test_estimate_fails(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(100);
  cfg.fail_at = 3; /* inside the records read for the estimate */
  cfg.fail_times = 1;
  f->sh = ts_shared_new(&cfg);
  assert_non_null(f->sh);
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_bytes = 2000;
  o.prefetch_shards = -1;
  CU_RC(cu_open(&f->c, f->root, &cfg, f->sh, &o), BC_ESOURCE);
  assert_non_null(strstr(bc_errmsg(), "failure at record 3"));
  assert_null(f->c);
  assert_int_equal(atomic_load(&f->sh->frees), 1);
  assert_int_equal(atomic_load(&f->sh->opens), atomic_load(&f->sh->closes));
  /* No shard length was recorded: the next open estimates and works. */
  CU_OK(cu_open(&f->c, f->root, &cfg, f->sh, &o));
  cu_check_all(f->c, 100, false);
}

static void test_misbehaving_next(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(100);
  cfg.bad_next = 7; /* neither 0, 1 nor a BC_E* code */
  open_with(f, &cfg);
  bc_buf b = BC_BUF_INIT;
  CU_RC(bc_cache_get(f->c, 3, &b), BC_ESOURCE);
  CU_RC(bc_cache_get(f->c, 3, &b), BC_ESOURCE);
  check_nothing_left(f, 0);
  assert_int_equal(atomic_load(&f->sh->opens), atomic_load(&f->sh->closes));
  bc_buf_release(&b);
}

int main(void) {
  bc_set_notice_handler(NULL, NULL);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_fails_once_then_succeeds, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_error_code_kept, setup, teardown),
      cmocka_unit_test_setup_teardown(test_failure_while_skipping, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_open_fails, setup, teardown),
      cmocka_unit_test_setup_teardown(test_estimate_fails, setup, teardown),
      cmocka_unit_test_setup_teardown(test_misbehaving_next, setup, teardown),
  };
  return cmocka_run_group_tests_name("cache source failures", tests, NULL, NULL);
}
