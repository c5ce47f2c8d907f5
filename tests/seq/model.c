/* Leaves and the reference-model checker for the sequence tests. */
#include "model.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

void model_free(model *m) {
  free(m->ids);
  m->ids = NULL;
  m->len = 0;
}

model model_leaf(unsigned leaf, size_t len) {
  model m = {malloc((len ? len : 1) * sizeof(uint64_t)), len};
  for (size_t i = 0; i < len; i++) m.ids[i] = MODEL_ID(leaf, i);
  return m;
}

void model_record(uint64_t id, char *buf) {
  sprintf(buf, "L%u:%llu", (unsigned)(id >> 40),
          (unsigned long long)(id & ((1ULL << 40) - 1)));
}

typedef struct {
  unsigned leaf;
  size_t len, known;
} leaf_payload;

static int array_get(void *payload, uint64_t index, bc_buf *out) {
  leaf_payload *p = payload;
  if (index >= p->len)
    return bc_set_errmsg(BC_ERANGE, "array leaf %u: index %llu out of range",
                         p->leaf, (unsigned long long)index);
  char text[32];
  model_record(MODEL_ID(p->leaf, index), text);
  size_t n = strlen(text);
  if (out->capacity < n) {
    unsigned char *d = realloc(out->data, n);
    if (d == NULL) return BC_ENOMEM;
    out->data = d;
    out->capacity = n;
  }
  memcpy(out->data, text, n);
  out->size = n;
  return 0;
}

bc_seq *array_leaf(unsigned leaf, size_t len, int thread_safe) {
  leaf_payload *p = malloc(sizeof *p);
  *p = (leaf_payload){leaf, len, len};
  bc_callback_seq_options o = BC_CALLBACK_SEQ_OPTIONS_INIT;
  o.fixed_length = (bc_len){BC_LEN_EXACT, len};
  o.get = array_get;
  o.free_payload = free;
  o.payload = p;
  o.thread_safe = thread_safe != 0;
  bc_seq *s = NULL;
  assert_int_equal(bc_seq_new_callbacks(&s, &o), 0);
  return s;
}

/* The "cache" leaf: length is a growing lower bound until settled. */
static int growing_length(void *payload, bool exact, bc_len *out) {
  leaf_payload *p = payload;
  if (exact) __atomic_store_n(&p->known, p->len, __ATOMIC_RELAXED);
  size_t known = __atomic_load_n(&p->known, __ATOMIC_RELAXED);
  *out = (bc_len){known >= p->len ? BC_LEN_EXACT : BC_LEN_AT_LEAST, known};
  return 0;
}

static int growing_get(void *payload, uint64_t index, bc_buf *out) {
  leaf_payload *p = payload;
  int rc = array_get(payload, index, out);
  size_t known = __atomic_load_n(&p->known, __ATOMIC_RELAXED);
  while (rc == 0 && index + 1 > known && /* "filled" up to index */
         !__atomic_compare_exchange_n(&p->known, &known, index + 1, true,
                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return rc;
}

bc_seq *growing_leaf(unsigned leaf, size_t len, size_t known) {
  leaf_payload *p = malloc(sizeof *p);
  *p = (leaf_payload){leaf, len, known};
  bc_callback_seq_options o = BC_CALLBACK_SEQ_OPTIONS_INIT;
  o.length = growing_length;
  o.get = growing_get;
  o.free_payload = free;
  o.payload = p;
  bc_seq *s = NULL;
  assert_int_equal(bc_seq_new_callbacks(&s, &o), 0);
  return s;
}

static void expect_record(const bc_buf *b, uint64_t id, const char *how,
                          long long where) {
  char want[32];
  model_record(id, want);
  if (b->size != strlen(want) || memcmp(b->data, want, b->size) != 0)
    fail_msg("%s %lld: got '%.*s', want '%s'", how, where, (int)b->size,
             (const char *)b->data, want);
}

static uint64_t rng_next(uint64_t *s) { /* xorshift64* */
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 0x2545F4914F6CDD1DULL;
}

void check_against_model(bc_seq *seq, const model *m, uint64_t seed) {
  uint64_t n = 0;
  assert_int_equal(bc_seq_len(seq, &n), 0);
  assert_int_equal(n, m->len);
  bc_buf b = BC_BUF_INIT;
  for (size_t i = 0; i < m->len; i++) {
    int rc = bc_seq_get(seq, (int64_t)i, &b);
    if (rc != 0) fail_msg("get %zu: %s: %s", i, bc_error_name(rc), bc_errmsg());
    expect_record(&b, m->ids[i], "get", (long long)i);
    rc = bc_seq_get(seq, (int64_t)i - (int64_t)m->len, &b);
    if (rc != 0) fail_msg("get %lld: %s", (long long)i - (long long)m->len, bc_errmsg());
    expect_record(&b, m->ids[i], "negative get", (long long)i - (long long)m->len);
  }
  assert_int_equal(bc_seq_get(seq, (int64_t)m->len, &b), BC_ERANGE);
  assert_int_equal(bc_seq_get(seq, -(int64_t)m->len - 1, &b), BC_ERANGE);

  /* get_many: random positions (repeats, some negative) in random order. */
  uint64_t rng = seed * 2 + 1;
  size_t k = m->len ? 2 * m->len + 3 : 0;
  int64_t *idx = malloc((k ? k : 1) * sizeof *idx);
  bc_buf *outs = calloc(k ? k : 1, sizeof *outs);
  for (size_t j = 0; j < k; j++) {
    uint64_t p = rng_next(&rng) % m->len;
    idx[j] = (rng_next(&rng) & 1) ? (int64_t)p : (int64_t)p - (int64_t)m->len;
  }
  int rc = bc_seq_get_many(seq, idx, k, outs);
  if (rc != 0) fail_msg("get_many: %s: %s", bc_error_name(rc), bc_errmsg());
  for (size_t j = 0; j < k; j++) {
    size_t p = idx[j] < 0 ? (size_t)(idx[j] + (int64_t)m->len) : (size_t)idx[j];
    expect_record(&outs[j], m->ids[p], "get_many position", (long long)j);
  }
  if (k > 0) { /* one bad index fails the whole batch, naming its position */
    idx[k / 2] = (int64_t)m->len;
    assert_int_equal(bc_seq_get_many(seq, idx, k, outs), BC_ERANGE);
    char want[64];
    snprintf(want, sizeof want, "indices[%zu]", k / 2);
    assert_non_null(strstr(bc_errmsg(), want));
  }
  for (size_t j = 0; j < k; j++) bc_buf_release(&outs[j]);
  free(outs);
  free(idx);

  /* iteration */
  bc_readahead *it;
  bc_readahead_options o = {BC_READAHEAD_OPTIONS_VERSION, 3, 2};
  assert_int_equal(bc_seq_iterate(&it, seq, 0, &o), 0);
  size_t got = 0;
  uint64_t at;
  while ((rc = bc_readahead_next(it, &b, &at)) == 1) {
    assert_true(got < m->len);
    assert_int_equal(at, got);
    expect_record(&b, m->ids[got], "iterate", (long long)got);
    got++;
  }
  assert_int_equal(rc, 0);
  assert_int_equal(got, m->len);
  bc_readahead_close(it);
  bc_buf_release(&b);
}
