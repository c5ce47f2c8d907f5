/*
 * tests/cache/source.c - the deterministic test source (see source.h).
 *
 * Invariant: a pass numbered p differs when nondet_pass >= 0 and
 * p >= nondet_pass.  A normal pass produces model records 0..n-1 (variant
 * 0).  A differing pass produces variant 1 records 0..n-1, or, when
 * nondet_n is set, variant 0 records 0..nondet_n-1.  Every callback enters and leaves through
 * enter()/leave(), which detect concurrent calls of a source that is not
 * declared thread-safe.
 */
#include "source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

typedef struct ts_payload {
  ts_config cfg;
  ts_shared *shared;
  _Atomic int active; /* callbacks of this payload running now (this
                         process: other processes may call theirs) */
} ts_payload;

typedef struct ts_pass {
  uint64_t pos;    /* the next record this pass produces */
  uint64_t len;    /* records in this pass */
  bool started;    /* next() has been called */
  int variant;     /* 1 for a differing pass */
} ts_pass;

ts_config ts_config_default(uint64_t n) {
  ts_config c;
  memset(&c, 0, sizeof c);
  c.n = n;
  c.with_skip = true;
  c.fail_at = -1;
  c.fail_times = 1;
  c.fail_code = BC_ESOURCE;
  c.nondet_pass = -1;
  c.block_at = -1;
  return c;
}

static size_t shared_size(uint64_t n) {
  return sizeof(ts_shared) + (size_t)n * sizeof(_Atomic uint32_t);
}

ts_shared *ts_shared_new(const ts_config *cfg) {
  size_t size = shared_size(cfg->n);
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                 -1, 0);
  if (p == MAP_FAILED) return NULL;
  ts_shared *s = p; /* the mapping is zero-filled: every counter starts at 0 */
  s->n = cfg->n;
  atomic_store(&s->fail_left, cfg->fail_times);
  return s;
}

void ts_shared_free(ts_shared *s) {
  if (s != NULL) munmap(s, shared_size(s->n));
}

size_t ts_record(uint64_t i, bool fixed, int variant, unsigned char *buf) {
  if (!fixed && i % 11 == 7) {
    if (variant == 0) return 0;
    buf[0] = '!';
    return 1;
  }
  int n = snprintf((char *)buf, TS_MAX_RECORD, "rec-%08llu", (unsigned long long)i);
  size_t pad = fixed ? 20 : (size_t)((i * 37) % 61);
  memset(buf + n, 'a' + (int)(i % 26), pad);
  size_t size = (size_t)n + pad;
  if (variant != 0) buf[0] = 'R'; /* same length, different bytes */
  return size;
}

bool ts_matches(uint64_t i, bool fixed, const bc_buf *out) {
  unsigned char want[TS_MAX_RECORD];
  size_t n = ts_record(i, fixed, 0, want);
  return out->size == n && (n == 0 || memcmp(out->data, want, n) == 0);
}

uint64_t ts_bytes(uint64_t start, uint64_t end, bool fixed) {
  unsigned char buf[TS_MAX_RECORD];
  uint64_t total = 0;
  for (uint64_t i = start; i < end; i++) total += ts_record(i, fixed, 0, buf);
  return total;
}

static void enter(ts_payload *p) {
  if (atomic_fetch_add(&p->active, 1) != 0 && !p->cfg.thread_safe)
    atomic_fetch_add(&p->shared->overlaps, 1);
}

static void leave(ts_payload *p) { atomic_fetch_sub(&p->active, 1); }

/* Takes one failure from the budget; true when this call must fail. */
static bool take_failure(ts_payload *p) {
  if (p->cfg.fail_times < 0) {
    atomic_fetch_add(&p->shared->failures, 1);
    return true;
  }
  int64_t left = atomic_load(&p->shared->fail_left);
  while (left > 0)
    if (atomic_compare_exchange_weak(&p->shared->fail_left, &left, left - 1)) {
      atomic_fetch_add(&p->shared->failures, 1);
      return true;
    }
  return false;
}

static int ts_open_from(ts_payload *p, uint64_t start, void **pass) {
  int rc = 0;
  if (p->cfg.fail_open && take_failure(p)) {
    rc = bc_set_errmsg(p->cfg.fail_code, "test source: open failed on purpose");
    goto cleanup;
  }
  ts_pass *ps = calloc(1, sizeof *ps);
  if (ps == NULL) {
    rc = bc_set_errmsg(BC_ENOMEM, "test source: out of memory");
    goto cleanup;
  }
  uint64_t number = atomic_fetch_add(&p->shared->opens, 1);
  bool differs = p->cfg.nondet_pass >= 0 && number >= (uint64_t)p->cfg.nondet_pass;
  ps->variant = differs && p->cfg.nondet_n == 0 ? 1 : 0;
  ps->len = differs && p->cfg.nondet_n ? p->cfg.nondet_n : p->cfg.n;
  ps->pos = start < ps->len ? start : ps->len;
  *pass = ps;
cleanup:
  return rc;
}

static int ts_open(void *payload, void **pass) {
  ts_payload *p = payload;
  enter(p);
  int rc = ts_open_from(p, 0, pass);
  leave(p);
  return rc;
}

static int ts_open_at(void *payload, uint64_t start, void **pass) {
  ts_payload *p = payload;
  enter(p);
  int rc = ts_open_from(p, start + p->cfg.seek_off, pass);
  if (rc == 0) atomic_fetch_add(&p->shared->seeks, 1);
  leave(p);
  return rc;
}

static int ts_next(void *payload, void *pass, bc_buf *out) {
  ts_payload *p = payload;
  ts_pass *ps = pass;
  enter(p);
  int rc = 1;
  if (p->cfg.bad_next != 0) {
    rc = p->cfg.bad_next;
    goto cleanup;
  }
  if (ps->pos >= ps->len) {
    rc = 0;
    goto cleanup;
  }
  bool first = !ps->started;
  ps->started = true;
  if ((p->cfg.block_at >= 0 && ps->pos == (uint64_t)p->cfg.block_at) ||
      (p->cfg.block_first && first))
    while (atomic_load(&p->shared->hold)) {
      atomic_store(&p->shared->held, true);
      struct timespec ms = {0, 1000 * 1000L};
      nanosleep(&ms, NULL);
    }
  if (!p->cfg.fail_open && p->cfg.fail_at >= 0 &&
      ps->pos == (uint64_t)p->cfg.fail_at && take_failure(p)) {
    rc = bc_set_errmsg(p->cfg.fail_code, "test source: failure at record %llu",
                       (unsigned long long)ps->pos);
    if (p->cfg.fail_payload != NULL)
      bc_error_set_payload(p->cfg.fail_payload, p->cfg.payload_retain,
                           p->cfg.payload_release);
    goto cleanup;
  }
  if (p->cfg.delay_us && !atomic_load(&p->shared->no_delay)) {
    struct timespec ts = {0, (long)p->cfg.delay_us * 1000L};
    nanosleep(&ts, NULL);
  }
  unsigned char rec[TS_MAX_RECORD];
  size_t n = ts_record(ps->pos, p->cfg.fixed, ps->variant, rec);
  /* The cache hands in its own buffer: grow it as a foreign source would. */
  if (out->capacity < n || out->data == NULL) {
    unsigned char *d = realloc(out->data, TS_MAX_RECORD);
    if (d == NULL) {
      rc = bc_set_errmsg(BC_ENOMEM, "test source: out of memory");
      goto cleanup;
    }
    out->data = d;
    out->capacity = TS_MAX_RECORD;
  }
  memcpy(out->data, rec, n);
  out->size = n;
  if (ps->pos < p->shared->n) atomic_fetch_add(&p->shared->per_record[ps->pos], 1);
  atomic_fetch_add(&p->shared->produced, 1);
  ps->pos++;
cleanup:
  leave(p);
  return rc;
}

static int ts_skip(void *payload, void *pass, uint64_t n, uint64_t *skipped) {
  ts_payload *p = payload;
  ts_pass *ps = pass;
  enter(p);
  uint64_t room = ps->len - ps->pos;
  *skipped = n < room ? n : room;
  ps->pos += *skipped;
  atomic_fetch_add(&p->shared->skip_calls, 1);
  atomic_fetch_add(&p->shared->skipped, *skipped);
  leave(p);
  return 0;
}

static void ts_close(void *payload, void *pass) {
  ts_payload *p = payload;
  enter(p);
  free(pass);
  atomic_fetch_add(&p->shared->closes, 1);
  leave(p);
}

static void ts_free_payload(void *payload) {
  ts_payload *p = payload;
  atomic_fetch_add(&p->shared->frees, 1);
  free(p);
}

bc_source ts_source(const ts_config *cfg, ts_shared *shared) {
  bc_source s;
  memset(&s, 0, sizeof s);
  ts_payload *p = malloc(sizeof *p);
  if (p != NULL) {
    p->cfg = *cfg;
    p->shared = shared;
    atomic_init(&p->active, 0);
  }
  s.version = cfg->version1 ? 1 : BC_SOURCE_VERSION;
  s.open_at = cfg->seekable && !cfg->version1 ? ts_open_at : NULL;
  s.open = ts_open;
  s.next = ts_next;
  s.skip = cfg->with_skip ? ts_skip : NULL;
  s.close = ts_close;
  s.free_payload = ts_free_payload;
  s.payload = p;
  s.thread_safe = cfg->thread_safe;
  return s;
}
