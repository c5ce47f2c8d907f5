/*
 * tests/cache/fixture.h - the per-test fixture of the cache tests: a fresh
 * temporary directory whose cache root is DIR/c (so creating the root is
 * covered too), the source's shared
 * counters, and the caches a test opens.  fx_teardown runs after a failed
 * test as well, so whatever a test may leave open lives here.
 */
#ifndef BC_TESTS_CACHE_FIXTURE_H
#define BC_TESTS_CACHE_FIXTURE_H

#include "util.h"

typedef struct fixture {
  char *dir, *root;
  char *scratch;    /* ROOT/scratch */
  char *root2;      /* DIR/d: a second root, for tests that compare two */
  ts_shared *sh;    /* created by the first fx_open */
  bc_cache *c, *c2; /* closed by fx_teardown */
} fixture;

/* cmocka setup/teardown (a watchdog runs in between; notices are not
 * captured unless a test asks for it).  fx_teardown first releases a
 * source held at its block_at and clears the thread's interrupt handler,
 * so that a failed test's caches close. */
int fx_setup(void **state);
int fx_teardown(void **state);

/* Options with a fixed shard length and no background prefetching, so that
 * every fill happens in the calling thread and counts are exact. */
bc_cache_options fx_quiet_options(uint64_t records);

/* Opens f->c over the test source following cfg (f->sh made on first use). */
void fx_open(fixture *f, const ts_config *cfg, const bc_cache_options *o);
/* Closes f->c and opens it again (cfg NULL: without a source). */
void fx_reopen(fixture *f, const ts_config *cfg, const bc_cache_options *o);

bc_cache_stats fx_stats(bc_cache *c);
/* Reads record i and fails the test unless it equals the (variable-size)
 * model. */
void fx_get_ok(bc_cache *c, int64_t i);
/* ROOT/shards (malloc'd). */
char *fx_shards_dir(const fixture *f);

#endif
