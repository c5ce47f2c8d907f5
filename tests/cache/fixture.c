/*
 * tests/cache/fixture.c - the per-test fixture (see fixture.h).
 */
#include "fixture.h"

#include <stdatomic.h>
#include <stdlib.h>

int fx_setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  if (f == NULL) return -1;
  f->dir = cu_tmp_dir();
  f->root = cu_path(f->dir, "c");
  f->scratch = cu_path(f->root, "scratch");
  f->root2 = cu_path(f->dir, "d");
  cu_notices_reset();
  cu_watchdog(60);
  *state = f;
  return 0;
}

int fx_teardown(void **state) {
  fixture *f = *state;
  if (f->sh != NULL) atomic_store(&f->sh->hold, false); /* a held next() ends */
  bc_set_interrupt_handler(NULL, NULL);
  bc_cache_close(f->c2);
  bc_cache_close(f->c);
  ts_shared_free(f->sh);
  cu_rm_rf(f->dir);
  free(f->root2);
  free(f->scratch);
  free(f->root);
  free(f->dir);
  free(f);
  bc_set_notice_handler(NULL, NULL);
  cu_watchdog(0);
  return 0;
}

bc_cache_options fx_quiet_options(uint64_t records) {
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = records;
  o.prefetch_shards = -1;
  return o;
}

void fx_open(fixture *f, const ts_config *cfg, const bc_cache_options *o) {
  if (f->sh == NULL) {
    f->sh = ts_shared_new(cfg);
    assert_non_null(f->sh);
  }
  CU_OK(cu_open(&f->c, f->root, cfg, f->sh, o));
}

void fx_reopen(fixture *f, const ts_config *cfg, const bc_cache_options *o) {
  bc_cache_close(f->c);
  f->c = NULL;
  CU_OK(cu_open(&f->c, f->root, cfg, f->sh, o));
}

bc_cache_stats fx_stats(bc_cache *c) {
  bc_cache_stats st;
  CU_OK(bc_cache_stats_get(c, &st));
  return st;
}

void fx_get_ok(bc_cache *c, int64_t i) {
  bc_buf b = BC_BUF_INIT;
  int rc = cu_get_cmp(c, i, false, &b);
  bc_buf_release(&b);
  if (rc != 0)
    fail_msg("get(%lld): %s (%s)", (long long)i,
             rc == 1 ? "differs from the model" : bc_error_name(rc),
             rc == 1 ? "" : bc_errmsg());
}

char *fx_shards_dir(const fixture *f) { return cu_path(f->root, "shards"); }
