/*
 * The sequence base: reference counting, the public read wrappers (bounds,
 * negative indices, one place for error reporting), and the two leaf types
 * every build has: a bag set and a foreign sequence of callbacks.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "bag/internal.h"
#include "seq/internal.h"

int bc_seq_init(bc_seq *seq, const bc_seq_ops *ops, unsigned flags) {
  if (seq == NULL || ops == NULL)
    return bc__error(BC_EINVAL, "bc_seq_init: NULL argument");
  /* Version 1 tables end before read_into (bc__seq_read_into_op), version
   * 2 tables before partition (bc__seq_partition). */
  if (ops->version < 1 || ops->version > BC_SEQ_OPS_VERSION)
    return bc__error(BC_EINVAL,
                     "sequence type %s: ops version %u, expected 1 to %u",
                     ops->type_name ? ops->type_name : "?", ops->version,
                     BC_SEQ_OPS_VERSION);
  if (ops->version >= 2 && ops->read_into != NULL && ops->get == NULL)
    return bc__error(BC_EINVAL, "sequence type %s: read_into is for leaves",
                     ops->type_name ? ops->type_name : "?");
  if (ops->length == NULL || ops->destroy == NULL ||
      (ops->resolve == NULL) == (ops->get == NULL))
    return bc__error(BC_EINVAL,
                     "sequence type %s: needs length, destroy, and exactly "
                     "one of resolve (a view) or get (a leaf)",
                     ops->type_name ? ops->type_name : "?");
  seq->ops = ops;
  seq->flags = flags;
  __atomic_store_n(&seq->refs, 1, __ATOMIC_RELAXED);
  return 0;
}

void *bc__seq_alloc(size_t size, const bc_seq_ops *ops, unsigned flags) {
  bc_seq *seq = calloc(1, size);
  if (seq == NULL) {
    bc__error(BC_ENOMEM, "out of memory");
    return NULL;
  }
  int rc = bc_seq_init(seq, ops, flags);
  if (rc != 0) { /* a library bug: our own ops tables are well-formed */
    free(seq);
    return NULL;
  }
  return seq;
}

bc_seq *bc_seq_ref(bc_seq *seq) {
  if (seq != NULL) __atomic_fetch_add(&seq->refs, 1, __ATOMIC_RELAXED);
  return seq;
}

void bc_seq_unref(bc_seq *seq) {
  if (seq == NULL) return;
  /* Release so earlier uses happen-before the destroy; acquire on the last. */
  if (__atomic_fetch_sub(&seq->refs, 1, __ATOMIC_ACQ_REL) == 1)
    seq->ops->destroy(seq);
}

const char *bc_seq_type_name(const bc_seq *seq) {
  return seq->ops->type_name ? seq->ops->type_name : "sequence";
}

/* ---- public wrappers -------------------------------------------------- */

int bc_seq_length(bc_seq *seq, bool exact, bc_len *out) {
  return seq->ops->length(seq, exact, out);
}

int bc_seq_len(bc_seq *seq, uint64_t *len) {
  bc_len l;
  int rc = seq->ops->length(seq, true, &l);
  if (rc != 0) return rc;
  if (l.kind == BC_LEN_INFINITE)
    return bc__error(BC_EINFINITE, "%s: the sequence has no end",
                     bc_seq_type_name(seq));
  *len = l.value;
  return 0;
}

int bc__seq_range_error(const bc_seq *seq, uint64_t index, uint64_t len) {
  return bc__error(BC_ERANGE, "%s: index %llu out of range [0, %llu)",
                   bc_seq_type_name(seq), (unsigned long long)index,
                   (unsigned long long)len);
}

int bc__seq_position(bc_seq *seq, int64_t index, uint64_t *position) {
  bc_len l;
  int rc;
  if (index < 0) {
    uint64_t n;
    if ((rc = bc_seq_len(seq, &n)) != 0) {
      if (rc == BC_EINFINITE)
        return bc__error(BC_EINFINITE,
                         "%s: negative index %lld on a sequence with no end",
                         bc_seq_type_name(seq), (long long)index);
      return rc;
    }
    uint64_t back = (uint64_t)(-(index + 1)) + 1; /* |index|, no overflow */
    if (back > n)
      return bc__error(BC_ERANGE, "%s: index %lld out of range [-%llu, %llu)",
                       bc_seq_type_name(seq), (long long)index,
                       (unsigned long long)n, (unsigned long long)n);
    *position = n - back;
    return 0;
  }
  if ((rc = seq->ops->length(seq, false, &l)) != 0) return rc;
  if (l.kind == BC_LEN_EXACT && (uint64_t)index >= l.value)
    return bc__seq_range_error(seq, (uint64_t)index, l.value);
  *position = (uint64_t)index;
  return 0;
}

int bc__seq_resolve_leaf(bc_seq *seq, uint64_t index, bc_seq **leaf,
                         uint64_t *leaf_index) {
  while (seq->ops->resolve != NULL) {
    bc_seq *child;
    uint64_t child_index;
    int rc = seq->ops->resolve(seq, index, &child, &child_index);
    if (rc != 0) return rc;
    seq = child;
    index = child_index;
  }
  *leaf = seq;
  *leaf_index = index;
  return 0;
}

int bc__seq_read(bc_seq *seq, uint64_t index, bc_buf *out) {
  bc_seq *leaf;
  uint64_t li;
  int rc = bc__seq_resolve_leaf(seq, index, &leaf, &li);
  if (rc != 0) return rc;
  return leaf->ops->get(leaf, li, out);
}

int bc_seq_get(bc_seq *seq, int64_t index, bc_buf *out) {
  uint64_t pos;
  int rc = bc__seq_position(seq, index, &pos);
  if (rc != 0) return rc;
  return bc__seq_read(seq, pos, out);
}

int bc_seq_resolve(bc_seq *seq, int64_t index, bc_seq **leaf,
                   uint64_t *leaf_index) {
  uint64_t pos;
  int rc = bc__seq_position(seq, index, &pos);
  if (rc != 0) return rc;
  return bc__seq_resolve_leaf(seq, pos, leaf, leaf_index);
}

/* ---- leaf: a bag set ---------------------------------------------------- */

typedef struct {
  bc_seq base;
  bc_bag *bag;
} bag_seq;

static int bag_length(bc_seq *self, bool exact, bc_len *out) {
  BC__UNUSED(exact);
  *out = (bc_len){BC_LEN_EXACT, bc_bag_len(((bag_seq *)self)->bag)};
  return 0;
}

static int bag_get(bc_seq *self, uint64_t index, bc_buf *out) {
  return bc_bag_get(((bag_seq *)self)->bag, index, out);
}

static int bag_get_many(bc_seq *self, const uint64_t *indices, size_t count,
                        bc_buf *outs) {
  return bc_bag_get_many(((bag_seq *)self)->bag, indices, count, outs);
}

static int bag_read_into(bc_seq *self, const uint64_t *indices,
                         const size_t *rows, size_t count, void *dst,
                         size_t size, int max_parallelism) {
  return bc__bag_read_rows(((bag_seq *)self)->bag, indices, rows, count, dst,
                           size, max_parallelism);
}

/* One partition per shard file (an empty shard holds no index). */
static int bag_partition(bc_seq *self, uint64_t index, uint64_t *start,
                         uint64_t *end) {
  const bc_bag *bag = ((bag_seq *)self)->bag;
  size_t shard;
  uint64_t local;
  bc_shard_info info;
  int rc = bc_bag_locate(bag, index, &shard, &local);
  if (rc == 0) rc = bc_bag_shard_info(bag, shard, &info);
  if (rc == 0) {
    *start = index - local;
    *end = *start + info.records;
  }
  return rc;
}

static void bag_destroy(bc_seq *self) {
  bc_bag_close(((bag_seq *)self)->bag);
  free(self);
}

static const bc_seq_ops bag_ops = {
    .version = BC_SEQ_OPS_VERSION,
    .type_name = "bag",
    .length = bag_length,
    .get = bag_get,
    .get_many = bag_get_many,
    .destroy = bag_destroy,
    .read_into = bag_read_into,
    .partition = bag_partition,
};

int bc_seq_wrap_bag(bc_seq **out, bc_bag *bag) {
  if (out == NULL || bag == NULL) {
    bc_bag_close(bag);
    return bc__error(BC_EINVAL, "bc_seq_wrap_bag: NULL argument");
  }
  bag_seq *s = bc__seq_alloc(sizeof *s, &bag_ops, BC_SEQ_F_THREAD_SAFE);
  if (s == NULL) {
    bc_bag_close(bag);
    return BC_ENOMEM;
  }
  s->bag = bag;
  *out = &s->base;
  return 0;
}

int bc_seq_open_bag(bc_seq **out, const char *spec,
                    const bc_reader_options *opts) {
  bc_bag *bag;
  int rc = bc_bag_open(&bag, spec, opts);
  if (rc != 0) return rc;
  return bc_seq_wrap_bag(out, bag);
}

bc_bag *bc_seq_bag(const bc_seq *seq) {
  return seq != NULL && seq->ops == &bag_ops ? ((const bag_seq *)seq)->bag
                                             : NULL;
}

/* ---- leaf: callbacks ---------------------------------------------------- */

typedef struct {
  bc_seq base;
  bc_callback_seq_options cb;
} callback_seq;

static int callback_length(bc_seq *self, bool exact, bc_len *out) {
  callback_seq *s = (callback_seq *)self;
  if (s->cb.length == NULL) {
    *out = s->cb.fixed_length;
    return 0;
  }
  int rc = s->cb.length(s->cb.payload, exact, out);
  if (rc == 0 && exact && out->kind == BC_LEN_AT_LEAST)
    return bc__error(BC_EINVAL,
                     "foreign sequence: length(exact) answered a lower bound");
  return rc;
}

static int callback_get(bc_seq *self, uint64_t index, bc_buf *out) {
  callback_seq *s = (callback_seq *)self;
  return s->cb.get(s->cb.payload, index, out);
}

static void callback_destroy(bc_seq *self) {
  callback_seq *s = (callback_seq *)self;
  if (s->cb.free_payload) s->cb.free_payload(s->cb.payload);
  free(s);
}

static const bc_seq_ops callback_ops = {
    .version = BC_SEQ_OPS_VERSION,
    .type_name = "foreign",
    .length = callback_length,
    .get = callback_get,
    .destroy = callback_destroy,
};

int bc_callback_seq_options_init(bc_callback_seq_options *opts, unsigned version) {
  return BC__OPTIONS_INIT(bc_callback_seq_options, BC_CALLBACK_SEQ_OPTIONS,
                          opts, version);
}

int bc_seq_new_callbacks(bc_seq **out, const bc_callback_seq_options *opts) {
  if (opts != NULL && opts->version != BC_CALLBACK_SEQ_OPTIONS_VERSION)
    return bc__options_version("bc_callback_seq_options",
                               "BC_CALLBACK_SEQ_OPTIONS", opts->version,
                               BC_CALLBACK_SEQ_OPTIONS_VERSION);
  if (out == NULL || opts == NULL || opts->get == NULL)
    return bc__error(BC_EINVAL, "bc_seq_new_callbacks: get is required");
  if (opts->length == NULL && opts->fixed_length.kind == BC_LEN_AT_LEAST)
    return bc__error(BC_EINVAL,
                     "bc_seq_new_callbacks: a fixed length cannot be a lower "
                     "bound (give a length callback)");
  callback_seq *s = bc__seq_alloc(sizeof *s, &callback_ops,
                                  opts->thread_safe ? BC_SEQ_F_THREAD_SAFE : 0);
  if (s == NULL) return BC_ENOMEM;
  s->cb = *opts;
  *out = &s->base;
  return 0;
}
