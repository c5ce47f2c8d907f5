/*
 * take(indices) and map(fn): index maps given by the user.
 *   take: element k is child[indices[k]]; the array is copied or shared
 *         (then released through the user's callback on destruction).
 *         Negative entries count from the child's end, settled when read.
 *   map:  element k is child[fn(payload, k)], for k below the given length.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "seq/internal.h"

typedef struct {
  bc_seq base;
  bc_seq *child;
  const int64_t *indices;
  size_t count;
  int64_t *owned; /* the copy, when copied */
  void (*release)(void *payload);
  void *payload;
} take_seq;

static int take_length(bc_seq *self, bool exact, bc_len *out) {
  BC__UNUSED(exact);
  *out = (bc_len){BC_LEN_EXACT, ((take_seq *)self)->count};
  return 0;
}

static int take_resolve(bc_seq *self, uint64_t index, bc_seq **child,
                        uint64_t *child_index) {
  take_seq *s = (take_seq *)self;
  if (index >= s->count) return bc__seq_range_error(self, index, s->count);
  int64_t v = s->indices[index];
  uint64_t pos;
  int rc = bc__seq_position(s->child, v, &pos);
  if (rc != 0) return rc;
  *child = s->child;
  *child_index = pos;
  return 0;
}

static void take_destroy(bc_seq *self) {
  take_seq *s = (take_seq *)self;
  if (s->release) s->release(s->payload);
  free(s->owned);
  bc_seq_unref(s->child);
  free(s);
}

static const bc_seq_ops take_ops = {
    .version = BC_SEQ_OPS_VERSION,
    .type_name = "take",
    .length = take_length,
    .resolve = take_resolve,
    .destroy = take_destroy,
};

static int take_new(bc_seq **out, bc_seq *seq, const int64_t *indices,
                    size_t count, bool copy, void (*release)(void *),
                    void *payload) {
  if (out == NULL || seq == NULL || (indices == NULL && count > 0))
    return bc__error(BC_EINVAL, "bc_seq_take: NULL argument");
  take_seq *s = bc__seq_alloc(sizeof *s, &take_ops, 0);
  if (s == NULL) return BC_ENOMEM;
  if (copy) {
    s->owned = malloc(count ? count * sizeof *s->owned : 1);
    if (s->owned == NULL) {
      free(s);
      return bc__error(BC_ENOMEM, "out of memory for %zu indices", count);
    }
    if (count) memcpy(s->owned, indices, count * sizeof *s->owned);
    s->indices = s->owned;
  } else {
    s->indices = indices;
    s->release = release;
    s->payload = payload;
  }
  s->count = count;
  s->child = bc_seq_ref(seq);
  *out = &s->base;
  return 0;
}

int bc_seq_take(bc_seq **out, bc_seq *seq, const int64_t *indices,
                size_t count) {
  return take_new(out, seq, indices, count, true, NULL, NULL);
}

int bc_seq_take_shared(bc_seq **out, bc_seq *seq, const int64_t *indices,
                       size_t count, void (*release)(void *payload),
                       void *payload) {
  return take_new(out, seq, indices, count, false, release, payload);
}

/* ---- map ------------------------------------------------------------------ */

typedef struct {
  bc_seq base;
  bc_seq *child;
  bc_index_map_fn fn;
  void *payload;
  void (*free_payload)(void *payload);
  bc_len length;
} map_seq;

static int map_length(bc_seq *self, bool exact, bc_len *out) {
  BC__UNUSED(exact);
  *out = ((map_seq *)self)->length;
  return 0;
}

static int map_resolve(bc_seq *self, uint64_t index, bc_seq **child,
                       uint64_t *child_index) {
  map_seq *s = (map_seq *)self;
  if (s->length.kind == BC_LEN_EXACT && index >= s->length.value)
    return bc__seq_range_error(self, index, s->length.value);
  int rc = s->fn(s->payload, index, child_index);
  if (rc != 0) return rc;
  *child = s->child;
  return 0;
}

static void map_destroy(bc_seq *self) {
  map_seq *s = (map_seq *)self;
  if (s->free_payload) s->free_payload(s->payload);
  bc_seq_unref(s->child);
  free(s);
}

static const bc_seq_ops map_ops = {
    .version = BC_SEQ_OPS_VERSION,
    .type_name = "map",
    .length = map_length,
    .resolve = map_resolve,
    .destroy = map_destroy,
};

int bc_seq_map(bc_seq **out, bc_seq *seq, bc_index_map_fn fn, void *payload,
               void (*free_payload)(void *payload), bc_len length) {
  if (out == NULL || seq == NULL || fn == NULL)
    return bc__error(BC_EINVAL, "bc_seq_map: NULL argument");
  if (length.kind == BC_LEN_AT_LEAST)
    return bc__error(BC_EINVAL, "bc_seq_map: the length must be exact or infinite");
  map_seq *s = bc__seq_alloc(sizeof *s, &map_ops, 0);
  if (s == NULL) return BC_ENOMEM;
  s->child = bc_seq_ref(seq);
  s->fn = fn;
  s->payload = payload;
  s->free_payload = free_payload;
  s->length = length.kind == BC_LEN_INFINITE ? (bc_len){BC_LEN_INFINITE, 0} : length;
  *out = &s->base;
  return 0;
}
