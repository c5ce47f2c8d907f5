/*
 * test_cache_passes - regeneration under a disk limit smaller than the data:
 * parked passes, cost-aware eviction, seekable sources (open_at).
 *
 * The exact-count tests replay a fixed pseudo-random read sequence on the
 * engine and on a small reference model of its policy (doc/cache.md,
 * "Parked passes" and "Eviction"), written here from the description, and
 * compare every counter: records written and skipped, passes opened,
 * evictions, where each pass is parked, which shards are present.  The
 * records are fixed-size, so every shard file has the same size and the
 * limit is a whole number of shards.  No background prefetching, and no
 * shard is read twice in a row (every read opens its shard: no hit, whose
 * access-clock bump would depend on time).
 */
#include "fixture.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N 2000   /* records */
#define R 20     /* records per shard */
#define SHARDS (N / R)
#define CAP 24   /* shards the limit holds */
#define READS 400
#define MAXP 64

/* ---- the reference model -------------------------------------------------- */

typedef struct {
  bool open;
  uint64_t pos;
} mpass;

typedef struct {
  mpass p[MAXP];
  size_t np;     /* slots (max_passes) */
  bool seekable;
  bool present[SHARDS];
  uint64_t la[SHARDS]; /* last_access */
  uint64_t clock;
  uint64_t written, skipped, opened, seeks, evictions, misses, kept;
} model;

static uint64_t m_skip_cost(const model *m, const uint64_t *pos, size_t n,
                            uint64_t start) {
  if (m->seekable) return 0;
  uint64_t from = 0;
  for (size_t i = 0; i < n; i++)
    if (pos[i] <= start && pos[i] > from) from = pos[i];
  return start - from;
}

static void m_fill(model *m, uint64_t s) {
  uint64_t t = s * R;
  size_t best = SIZE_MAX, empty = SIZE_MAX, past = SIZE_MAX;
  for (size_t i = 0; i < m->np; i++) {
    if (!m->p[i].open) {
      if (empty == SIZE_MAX) empty = i;
    } else if (m->p[i].pos <= t) {
      if (best == SIZE_MAX || m->p[i].pos > m->p[best].pos) best = i;
    } else if (past == SIZE_MAX || m->p[i].pos > m->p[past].pos) {
      past = i;
    }
  }
  size_t dup = SIZE_MAX;
  for (size_t i = 0; empty == SIZE_MAX && dup == SIZE_MAX && i < m->np; i++)
    for (size_t j = 0; j < i && dup == SIZE_MAX; j++)
      if (m->p[i].open && i != best && m->p[j].open && m->p[j].pos == m->p[i].pos)
        dup = i;
  bool reuse = best != SIZE_MAX && (!m->seekable || t - m->p[best].pos <= R / 16);
  size_t k = reuse ? best
             : empty != SIZE_MAX ? empty
             : dup != SIZE_MAX ? dup
             : past != SIZE_MAX ? past : best;
  if (!reuse) {
    m->p[k] = (mpass){true, m->seekable ? t : 0};
    m->opened++;
    m->seeks += m->seekable && t > 0;
  }
  /* The whole shards the pass crosses: one no process has is kept
   * (published, nothing evicted for it) while the limit has room for it
   * and one more shard; the others are skipped (all were filled by this
   * process, so none is read to be checked). */
  uint64_t at = m->p[k].pos;
  while (!m->seekable && at + R <= t) {
    uint64_t c = at / R;
    size_t used = 0;
    for (size_t v = 0; v < SHARDS; v++) used += m->present[v];
    if (!m->present[c] && used + 2 <= CAP) {
      m->present[c] = true;
      m->la[c] = ++m->clock;
      m->written += R;
      m->kept++;
    } else {
      m->skipped += R;
    }
    at += R;
  }
  m->skipped += t - at;
  m->p[k].pos = t + R;
  m->written += R;
  m->misses++;
  /* Publish: evict by last_access + present * min(skip / R, 1): the
   * credit of a rebuild's cost is capped at one turnover. */
  uint64_t pos[MAXP + 1];
  size_t npos = 0;
  for (size_t i = 0; i < m->np; i++)
    if (i != k && m->p[i].open) pos[npos++] = m->p[i].pos;
  pos[npos++] = t + R;
  for (;;) {
    size_t count = 0;
    for (size_t v = 0; v < SHARDS; v++) count += m->present[v];
    if (count + 1 <= CAP) break;
    size_t victim = SIZE_MAX;
    double best_score = 0;
    for (size_t v = 0; v < SHARDS; v++) {
      if (!m->present[v] || v == s) continue;
      double credit = (double)m_skip_cost(m, pos, npos, v * R) / (double)R;
      double score = (double)m->la[v] + (double)count * (credit > 1 ? 1 : credit);
      if (victim == SIZE_MAX || score < best_score) {
        victim = v;
        best_score = score;
      }
    }
    m->present[victim] = false;
    m->evictions++;
  }
  m->present[s] = true;
  m->la[s] = ++m->clock;
}

static void m_read(model *m, uint64_t s) {
  if (!m->present[s]) m_fill(m, s);
  m->la[s] = ++m->clock; /* the open's access-clock bump */
}

/* ---- the engine against it ----------------------------------------------------- */

static void fx_get_fixed_ok(bc_cache *c, int64_t i) {
  bc_buf b = BC_BUF_INIT;
  int rc = cu_get_cmp(c, i, true, &b);
  bc_buf_release(&b);
  if (rc != 0) fail_msg("get(%lld) -> %d: %s", (long long)i, rc, bc_errmsg());
}

static uint64_t rng_next(uint64_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

/* The size of one shard file of the fixed-size source. */
static uint64_t shard_size(fixture *f, const ts_config *cfg, uint64_t records) {
  char *root = cu_path(f->dir, "probe");
  ts_shared *sh = ts_shared_new(cfg);
  assert_non_null(sh);
  bc_cache_options o = fx_quiet_options(records);
  bc_cache *c = NULL;
  CU_OK(cu_open(&c, root, cfg, sh, &o));
  bc_buf b = BC_BUF_INIT;
  CU_OK(bc_cache_get(c, 0, &b));
  bc_buf_release(&b);
  uint64_t size = fx_stats(c).bytes_on_disk;
  bc_cache_close(c);
  ts_shared_free(sh);
  free(root);
  return size;
}

/* Fails unless the engine's counters are the model's. */
static void check_counts(fixture *f, const model *m, int r, uint64_t i) {
  bc_cache_stats st = fx_stats(f->c);
  if (st.hits != 0 || st.records_written != m->written ||
      st.records_skipped != m->skipped || st.passes_opened != m->opened ||
      st.evictions != m->evictions || st.fills + st.regenerations != m->misses ||
      st.shards_kept != m->kept)
    fail_msg("read %d (record %llu): engine written %llu skipped %llu passes "
             "%llu evictions %llu misses %llu hits %llu; model %llu %llu %llu "
             "%llu %llu", r, (unsigned long long)i,
             (unsigned long long)st.records_written,
             (unsigned long long)st.records_skipped,
             (unsigned long long)st.passes_opened,
             (unsigned long long)st.evictions,
             (unsigned long long)(st.fills + st.regenerations),
             (unsigned long long)st.hits, (unsigned long long)m->written,
             (unsigned long long)m->skipped, (unsigned long long)m->opened,
             (unsigned long long)m->evictions, (unsigned long long)m->misses);
}

static void replay(fixture *f, bool seekable, bool with_skip, int max_passes,
                   uint64_t seed) {
  ts_config cfg = ts_config_default(N);
  cfg.fixed = true;
  cfg.with_skip = with_skip;
  cfg.seekable = seekable;
  uint64_t size = shard_size(f, &cfg, R);
  bc_cache_options o = fx_quiet_options(R);
  o.disk_limit = CAP * size + size / 2;
  o.max_open_shards = 1;
  o.max_passes = max_passes;
  fx_open(f, &cfg, &o);

  model *m = calloc(1, sizeof *m);
  assert_non_null(m);
  m->np = max_passes ? (size_t)max_passes : 64;
  m->seekable = seekable;
  uint64_t x = seed, prev = UINT64_MAX;
  for (int r = 0; r < READS; r++) {
    uint64_t i, s;
    do {
      i = rng_next(&x) % N;
      s = i / R;
    } while (s == prev);
    prev = s;
    fx_get_fixed_ok(f->c, (int64_t)i);
    m_read(m, s);
    check_counts(f, m, r, i);
  }
  /* The source saw the same. */
  assert_int_equal(atomic_load(&f->sh->opens), m->opened);
  if (with_skip) {
    assert_int_equal(atomic_load(&f->sh->produced), m->written);
    assert_int_equal(atomic_load(&f->sh->skipped), m->skipped);
  } else {
    assert_int_equal(atomic_load(&f->sh->produced), m->written + m->skipped);
  }
  assert_int_equal(atomic_load(&f->sh->seeks), m->seeks);
  assert_int_equal(atomic_load(&f->sh->overlaps), 0);
  /* Parked where the model parks them, slot by slot. */
  uint64_t pos[MAXP];
  size_t n = 0, k = 0;
  CU_OK(bc_cache_worker_positions(f->c, pos, MAXP, &n));
  for (size_t i = 0; i < m->np; i++)
    if (m->p[i].open) {
      assert_true(k < n);
      assert_int_equal(pos[k], m->p[i].pos);
      k++;
    }
  assert_int_equal(n, k);
  /* The same shards present, never more than the limit holds. */
  bc_cache_shard list[SHARDS];
  CU_OK(bc_cache_shards(f->c, list, SHARDS, &n));
  size_t want = 0;
  for (size_t s = 0; s < SHARDS; s++) want += m->present[s];
  assert_int_equal(n, want);
  assert_true(n <= CAP);
  for (size_t j = 0; j < n; j++) assert_true(m->present[list[j].start / R]);
  char *sd = fx_shards_dir(f);
  assert_true(cu_dir_bytes(sd, NULL) <= o.disk_limit);
  free(sd);
  free(m);
}

static void test_replay_default_passes(void **state) {
  replay(*state, false, true, 0, 0x9e3779b97f4a7c15ULL);
}
static void test_replay_default_passes_seed2(void **state) {
  replay(*state, false, true, 0, 12345);
}
static void test_replay_no_skip(void **state) {
  replay(*state, false, false, 0, 777);
}
static void test_replay_four_passes(void **state) {
  replay(*state, false, true, 4, 0x9e3779b97f4a7c15ULL);
}
static void test_replay_one_pass(void **state) {
  replay(*state, false, true, 1, 4242);
}
static void test_replay_seekable(void **state) {
  replay(*state, true, true, 0, 0x9e3779b97f4a7c15ULL);
}
static void test_replay_seekable_two_passes(void **state) {
  replay(*state, true, false, 2, 99);
}

/* Issue 26's working set: the whole source read once in order (as len()
 * drains it), leaving the last CAP shards present, each expensive to
 * rebuild (no pass stands before them: the draining pass ended), then
 * READS reads among the first WS shards only, which fit the limit many
 * times over.  The working set must stop missing after a bounded number of
 * misses whatever the cold shards cost: the engine and the model agree
 * read by read, and the misses after the drain are exactly `want` (WS
 * under LRU; uncapped, the credit of a cold shard costing k shards
 * outlived k turnovers of the cache, and this missed `old` times). */
#define WS 4
static void replay_working_set(fixture *f, bool with_skip, uint64_t want,
                               uint64_t old) {
  ts_config cfg = ts_config_default(N);
  cfg.fixed = true;
  cfg.with_skip = with_skip;
  uint64_t size = shard_size(f, &cfg, R);
  bc_cache_options o = fx_quiet_options(R);
  o.disk_limit = CAP * size + size / 2;
  o.max_open_shards = 1;
  fx_open(f, &cfg, &o);
  model *m = calloc(1, sizeof *m);
  assert_non_null(m);
  m->np = 64;
  for (uint64_t s = 0; s < SHARDS; s++) {
    fx_get_fixed_ok(f->c, (int64_t)(s * R));
    m_read(m, s);
    check_counts(f, m, -1, s * R);
  }
  uint64_t drained = m->misses;
  assert_int_equal(drained, SHARDS);
  uint64_t x = 0x9e3779b97f4a7c15ULL, prev = UINT64_MAX, last_miss = 0;
  for (int r = 0; r < READS; r++) {
    uint64_t i, s;
    do {
      i = rng_next(&x) % (WS * R);
      s = i / R;
    } while (s == prev);
    prev = s;
    uint64_t before = m->misses;
    fx_get_fixed_ok(f->c, (int64_t)i);
    m_read(m, s);
    check_counts(f, m, r, i);
    if (m->misses != before) last_miss = (uint64_t)r;
  }
  uint64_t misses = m->misses - drained;
  if (misses != want)
    fail_msg("the working set missed %llu times after the drain (want %llu; "
             "%llu with the uncapped credit), the last at read %llu",
             (unsigned long long)misses, (unsigned long long)want,
             (unsigned long long)old, (unsigned long long)last_miss);
  /* The bound: at most WS misses plus one turnover of the cache. */
  assert_true(misses <= WS + CAP);
  for (uint64_t s = 0; s < WS; s++) assert_true(m->present[s]);
  free(m);
}

static void test_working_set_converges(void **state) {
  replay_working_set(*state, true, WS, READS);
}
static void test_working_set_converges_no_skip(void **state) {
  replay_working_set(*state, false, WS, READS);
}

/* Issue 26: the shards a pass crosses on its way are kept.  No limit:
 * record 150 of a fresh root leaves shards 0..15, and record 140 then
 * costs the source nothing. */
static void test_shards_on_the_way_kept(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(200);
  cfg.fixed = true;
  bc_cache_options o = fx_quiet_options(10);
  fx_open(f, &cfg, &o);
  fx_get_fixed_ok(f->c, 150);
  bc_cache_stats st = fx_stats(f->c);
  assert_int_equal(st.shards_present, 16);
  assert_int_equal(st.shards_kept, 15);
  assert_int_equal(st.fills, 1);
  assert_int_equal(st.records_written, 160);
  assert_int_equal(st.records_skipped, 0);
  uint64_t produced = atomic_load(&f->sh->produced);
  assert_int_equal(produced, 160);
  fx_get_fixed_ok(f->c, 140);
  st = fx_stats(f->c);
  assert_int_equal(atomic_load(&f->sh->produced), produced);
  assert_int_equal(atomic_load(&f->sh->opens), 1);
  assert_int_equal(st.fills + st.regenerations + st.shards_kept, 16);
  cu_check_shards(f->root, true, false); /* complete, checksummed shards */
  uint64_t bad = 0;
  CU_OK(bc_cache_verify(f->c, &bad));
}

/* Under a limit of 4.5 shards, a crossed shard is kept only while the
 * limit has room for it and one more (the next miss's claim), and
 * nothing is evicted for it: record 95 of a fresh root keeps 0, 1 and 2
 * and skips 3..8. */
static void test_shards_on_the_way_under_a_limit(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(100);
  cfg.fixed = true;
  uint64_t size = shard_size(f, &cfg, 10);
  bc_cache_options o = fx_quiet_options(10);
  o.disk_limit = 4 * size + size / 2;
  fx_open(f, &cfg, &o);
  fx_get_fixed_ok(f->c, 95);
  bc_cache_stats st = fx_stats(f->c);
  assert_int_equal(st.shards_kept, 3);
  assert_int_equal(st.fills, 1);
  assert_int_equal(st.evictions, 0);
  assert_int_equal(st.records_written, 40);
  assert_int_equal(st.records_skipped, 60);
  bc_cache_shard list[16];
  size_t n = 0;
  CU_OK(bc_cache_shards(f->c, list, 16, &n));
  assert_int_equal(n, 4);
  const uint64_t starts[4] = {0, 10, 20, 90};
  for (size_t k = 0; k < n; k++) assert_int_equal(list[k].start, starts[k]);
}

/* With parked passes, a regeneration costs far less than restarting the
 * source: the same reads with max_passes 1 (the old pool of a source that
 * is not thread-safe) read more records. */
static void test_parked_passes_cost_less(void **state) {
  fixture *f = *state;
  uint64_t cost[2];
  for (int k = 0; k < 2; k++) {
    ts_config cfg = ts_config_default(N);
    cfg.fixed = true;
    bc_cache_options o = fx_quiet_options(R);
    o.disk_limit = 6 * shard_size(f, &cfg, R); /* six shards */
    o.max_passes = k == 0 ? 1 : 0;
    if (f->c) bc_cache_close(f->c), f->c = NULL;
    if (f->sh) ts_shared_free(f->sh), f->sh = NULL;
    if (k == 1) CU_OK(bc_cache_clear(f->root));
    fx_open(f, &cfg, &o);
    uint64_t x = 7;
    for (int r = 0; r < 200; r++) fx_get_fixed_ok(f->c, (int64_t)(rng_next(&x) % N));
    bc_cache_stats st = fx_stats(f->c);
    cost[k] = st.records_written + st.records_skipped;
  }
  if (!(cost[1] * 2 < cost[0]))
    fail_msg("parked passes read %llu records, one pass %llu",
             (unsigned long long)cost[1], (unsigned long long)cost[0]);
}

/* ---- seekable sources ------------------------------------------------------------ */

/* A source whose open_at starts one record late is caught when a shard it
 * regenerates differs from the first fill, and the error names the start
 * the pass was asked for. */
static void test_seek_wrong_is_caught(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(200);
  cfg.fixed = true;
  cfg.seekable = true;
  cfg.seek_off = 1;
  uint64_t size = shard_size(f, &cfg, 10);
  bc_cache_options o = fx_quiet_options(10);
  o.disk_limit = 3 * size + size / 2;
  fx_open(f, &cfg, &o);
  /* Shards 0..4 in order, by one pass opened with open() at record 0 (each
   * fill continues where the last stopped): the right records. */
  bc_buf b = BC_BUF_INIT;
  for (int s = 0; s < 5; s++) fx_get_fixed_ok(f->c, s * 10);
  assert_int_equal(fx_stats(f->c).passes_opened, 1);
  assert_int_equal(fx_stats(f->c).evictions, 2); /* shards 0 and 1 */
  /* Shard 1 again: no pass near it, so open_at(10), which starts at 11:
   * records 11..20 where the first fill had 12..21. */
  CU_RC(bc_cache_get(f->c, 15, &b), BC_ENONDET);
  const char *msg = bc_errmsg();
  if (strstr(msg, "opened at record 10 with the source's open_at") == NULL ||
      strstr(msg, "shard 1 (records 10..20)") == NULL)
    fail_msg("message: %s", msg);
  bc_buf_release(&b);
}

/* A seekable source asked for a start past its end: the end is found from
 * the known length, not assumed at the start asked for. */
static void test_seek_past_the_end(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(105);
  cfg.seekable = true;
  bc_cache_options o = fx_quiet_options(10);
  fx_open(f, &cfg, &o);
  bc_buf b = BC_BUF_INIT;
  CU_RC(bc_cache_get(f->c, 150, &b), BC_ERANGE);
  bc_cache_stats st = fx_stats(f->c);
  assert_true(st.length_final);
  assert_int_equal(st.length, 105);
  fx_get_ok(f->c, 104);
  CU_RC(bc_cache_get(f->c, 105, &b), BC_ERANGE);
  fx_get_ok(f->c, 55);
  /* open_at(150) ended at once; open_at(0) found the end at 105; then
   * open_at(100) and open_at(50): every pass by open_at, none from 0. */
  assert_int_equal(atomic_load(&f->sh->seeks), 4);
  assert_int_equal(atomic_load(&f->sh->opens), 4);
  assert_int_equal(fx_stats(f->c).records_skipped, 105);
  bc_buf_release(&b);
}

/* A version-1 source (the struct before open_at) is still accepted, and
 * read from its start: the shards on the way to record 55 are kept. */
static void test_source_version_1(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(100);
  cfg.version1 = true;
  cfg.seekable = true; /* ignored: version 1 has no open_at */
  bc_cache_options o = fx_quiet_options(10);
  fx_open(f, &cfg, &o);
  fx_get_ok(f->c, 55);
  bc_cache_stats st = fx_stats(f->c);
  assert_int_equal(st.records_skipped, 0);
  assert_int_equal(st.records_written, 60);
  assert_int_equal(st.shards_kept, 5);
  assert_int_equal(st.shards_present, 6);
  assert_int_equal(atomic_load(&f->sh->seeks), 0);
}

/* ---- prefetching only for sequential reads ------------------------------------- */

static bool present_starts(bc_cache *c, uint64_t *starts, size_t *n) {
  bc_cache_shard list[64];
  if (bc_cache_shards(c, list, 64, n) != 0 || *n > 64) return false;
  for (size_t k = 0; k < *n; k++) starts[k] = list[k].start;
  return true;
}

/* The default policy prefetches after an open that continues a sequential
 * read (shard 0, or the shard after one of the last 4 opened), never after
 * a random one.  One fill worker takes the queue in order, so once the
 * last prefetch is present every earlier one would be too. */
static void test_prefetch_only_sequential(void **state) {
  fixture *f = *state;
  ts_config cfg = ts_config_default(1000);
  cfg.seekable = true; /* (a pass from 0 would keep the shards on its way) */
  bc_cache_options o = BC_CACHE_OPTIONS_INIT;
  o.shard_records = 10;
  o.fill_workers = 1;
  o.prefetch_shards = 1;
  fx_open(f, &cfg, &o);
  fx_get_ok(f->c, 505); /* shard 50: random, nothing prefetched */
  fx_get_ok(f->c, 65);  /* shard 6: random */
  fx_get_ok(f->c, 75);  /* shard 7 follows 6: shard 8 is prefetched */
  uint64_t starts[64];
  size_t n = 0;
  for (int k = 0; k < 1000; k++) {
    assert_true(present_starts(f->c, starts, &n));
    if (n >= 4) break;
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  bc_cache_close(f->c); /* the worker stops: nothing changes after this */
  f->c = NULL;
  assert_int_equal(n, 4);
  assert_int_equal(starts[0], 60);
  assert_int_equal(starts[1], 70);
  assert_int_equal(starts[2], 80);
  assert_int_equal(starts[3], 500);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_replay_default_passes, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_replay_default_passes_seed2, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_replay_no_skip, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_replay_four_passes, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_replay_one_pass, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_replay_seekable, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_replay_seekable_two_passes, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_working_set_converges, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_working_set_converges_no_skip, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_shards_on_the_way_kept, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_shards_on_the_way_under_a_limit, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_parked_passes_cost_less, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_seek_wrong_is_caught, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_seek_past_the_end, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_source_version_1, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_prefetch_only_sequential, fx_setup, fx_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
