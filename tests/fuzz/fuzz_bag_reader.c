/*
 * fuzz_bag_reader.c - libFuzzer target for the Bagz reader (and writer).
 *
 * Input layout: byte 0 is the mode, the rest are file bytes.
 *   bit 0   limits: 0 = tail (one file), 1 = separate (records + limits file)
 *   bit 1   compression: 0 = none, 1 = zstd
 *   bit 2   limits storage: 0 = ON_DISK, 1 = IN_MEMORY
 *   bit 3   cache policy: 0 = SYSTEM (mmap), 1 = DROP_AFTER_READ (pread)
 *   bits 4-5 separate only: how the rest is split into the two files
 *   bit 6   max_parallelism: 0 = 1 (inline), 1 = 2
 *   bit 7   writer round trip: 0 = zstd level 0 (3), 1 = level 1
 * For separate limits the next two bytes (little endian) give a split point
 * and the bytes after them are split (see split_separate()).
 *
 * Properties checked for every input (any violation aborts):
 *  - open fails (BC_ECORRUPT) when the tail cannot be split; otherwise
 *    ON_DISK opens succeed and len is the model's record count;
 *  - record i: limits outside the records or decreasing, or a stored zstd
 *    record that is not exactly one valid frame of at most
 *    FZ_MAX_RECORD_SIZE bytes, fail with BC_ECORRUPT; a success returns the
 *    model's bytes; when every limit is valid, valid records must read;
 *  - bc_bag_get, bc_bag_get_view, bc_bag_get_many (in order, reversed with
 *    duplicates, only the good indices) and bc_bag_verify agree with each
 *    other: same bytes, same codes, the lowest failing position wins;
 *  - out-of-range indices give BC_ERANGE; failures carry a message;
 *  - an index over readable records finds exactly the naive answers;
 *  - the file opened twice as a two-shard set (concatenated or interleaved,
 *    by the input's length) reads record for record like the file alone;
 *  - the writer round trip of fuzz_writer.c.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "model.h"

typedef struct fz_mode {
  bool separate, zstd, in_memory, drop, parallel, level1;
  unsigned split;
} fz_mode;

/* One record as read by bc_bag_get. */
typedef struct fz_read {
  int rc;
  bc_buf buf;
} fz_read;

static fz_mode parse_mode(uint8_t m) {
  fz_mode mode;
  mode.separate = (m & 1) != 0;
  mode.zstd = (m & 2) != 0;
  mode.in_memory = (m & 4) != 0;
  mode.drop = (m & 8) != 0;
  mode.split = (m >> 4) & 3;
  mode.parallel = (m & 64) != 0;
  mode.level1 = (m & 128) != 0;
  return mode;
}

/* Splits `rest` into a records file and a limits file:
 *   0: records = p[0, s), limits = p[s, end)  with s = split % (len + 1)
 *   1: limits = the last 8*k bytes of p (k from split), records = the rest
 *   2: records empty, limits = p
 *   3: limits = p[0, s), records = p[s, end)
 * where p is rest without its two split bytes. */
static void split_separate(const uint8_t *rest, size_t len, unsigned how,
                           const uint8_t **rec, size_t *rec_size,
                           const uint8_t **lim, size_t *lim_size) {
  unsigned split = 0;
  if (len >= 1) split |= rest[0];
  if (len >= 2) split |= (unsigned)rest[1] << 8;
  const uint8_t *p = len > 2 ? rest + 2 : rest + len;
  size_t n = len > 2 ? len - 2 : 0;
  size_t s = split % (n + 1);
  switch (how) {
    case 0:
      *rec = p, *rec_size = s, *lim = p + s, *lim_size = n - s;
      break;
    case 1: {
      size_t k = split % (n / 8 + 1);
      *rec = p, *rec_size = n - 8 * k, *lim = p + n - 8 * k, *lim_size = 8 * k;
      break;
    }
    case 2:
      *rec = p, *rec_size = 0, *lim = p, *lim_size = n;
      break;
    default:
      *lim = p, *lim_size = s, *rec = p + s, *rec_size = n - s;
      break;
  }
}

/* Checks one read outcome against the model's expectation for record i. */
static void check_against_model(const fz_model *m, uint64_t i, int rc,
                                const void *data, size_t size,
                                const char *what) {
  if (rc != 0) {
    fz_check_failure(rc, what);
    FZ_CHECK(rc == BC_ECORRUPT || rc == BC_ENOMEM || rc == BC_EIO,
             "%s(%llu): unexpected %s (%s)", what, (unsigned long long)i,
             bc_error_name(rc), bc_errmsg());
  }
  if (i >= m->modelled) return;
  const fz_record *r = &m->records[i];
  switch (r->expect) {
    case FZ_BAD:
      FZ_CHECK(rc == BC_ECORRUPT,
               "%s(%llu): record is bad (%s) but the call gave %s", what,
               (unsigned long long)i, r->why, bc_error_name(rc));
      break;
    case FZ_OK:
      if (rc == 0) {
        FZ_CHECK(size == r->size &&
                     (size == 0 || memcmp(data, r->bytes, size) == 0),
                 "%s(%llu): returned %zu bytes, the model has %zu (or they "
                 "differ)",
                 what, (unsigned long long)i, size, r->size);
      } else {
        FZ_CHECK(!fz_model_must_read(m, i) || rc == BC_ENOMEM,
                 "%s(%llu): a valid record of a valid file failed: %s (%s)",
                 what, (unsigned long long)i, bc_error_name(rc), bc_errmsg());
      }
      break;
    case FZ_UNKNOWN:
      FZ_CHECK(rc != 0 || size <= FZ_MAX_RECORD_SIZE,
               "%s(%llu): %zu bytes exceed max_record_size", what,
               (unsigned long long)i, size);
      break;
  }
}

/* Checks one get_many call over `indices` against the single reads. */
static void check_get_many(const bc_bag *bag, const fz_read *reads,
                           const uint64_t *indices, size_t count,
                           const char *what) {
  bc_buf *outs = calloc(count ? count : 1, sizeof *outs);
  FZ_CHECK(outs != NULL, "out of memory");
  int rc = bc_bag_get_many(bag, indices, count, outs);
  int want = 0;
  size_t first_bad = count;
  for (size_t p = 0; p < count; p++) {
    if (reads[indices[p]].rc != 0) {
      want = reads[indices[p]].rc;
      first_bad = p;
      break;
    }
  }
  if (rc != 0) fz_check_failure(rc, what);
  FZ_CHECK(rc == want,
           "%s: returned %s, the single reads say %s (position %zu)", what,
           bc_error_name(rc), bc_error_name(want), first_bad);
  if (rc == 0) {
    for (size_t p = 0; p < count; p++) {
      const bc_buf *a = &outs[p], *b = &reads[indices[p]].buf;
      FZ_CHECK(a->size == b->size &&
                   (a->size == 0 || memcmp(a->data, b->data, a->size) == 0),
               "%s: position %zu (record %llu) differs from bc_bag_get", what,
               p, (unsigned long long)indices[p]);
    }
  }
  for (size_t p = 0; p < count; p++) bc_buf_release(&outs[p]);
  free(outs);
}

/* An index over the readable records among the first few must answer every
 * lookup like a naive scan of the same positions. */
static void check_index(const bc_bag *bag, const fz_read *reads, size_t n) {
  enum { MAXPOS = 12 };
  uint64_t pos[MAXPOS];
  size_t count = 0;
  for (size_t i = 0; i < n && count < MAXPOS - 2; i++)
    if (reads[i].rc == 0) pos[count++] = i;
  if (count == 0) return;
  size_t half = count / 2;
  pos[count++] = pos[0]; /* repeated positions: more hits for their keys */
  pos[count++] = pos[half];

  bc_index *index = NULL;
  int rc = bc_index_build(&index, bag, pos, count);
  if (rc == BC_ENOMEM) return;
  FZ_CHECK(rc == 0, "bc_index_build over readable records: %s (%s)",
           bc_error_name(rc), bc_errmsg());

  uint64_t distinct = 0;
  for (size_t p = 0; p < count; p++) {
    const bc_buf *key = &reads[pos[p]].buf;
    uint64_t first = UINT64_MAX, hits[MAXPOS], nhits = 0;
    for (size_t q = 0; q < count; q++) {
      const bc_buf *other = &reads[pos[q]].buf;
      if (other->size == key->size &&
          (key->size == 0 || memcmp(other->data, key->data, key->size) == 0)) {
        if (first == UINT64_MAX) first = q;
        hits[nhits++] = q;
      }
    }
    if (first == p) distinct++;
    uint64_t got = UINT64_MAX;
    rc = bc_index_first(index, key->data, key->size, &got);
    FZ_CHECK(rc == 0 && got == first,
             "bc_index_first(position %zu): rc %s, got %llu, want %llu", p,
             bc_error_name(rc), (unsigned long long)got,
             (unsigned long long)first);
    const uint64_t *all = NULL;
    uint64_t nall = 0;
    rc = bc_index_all(index, key->data, key->size, &all, &nall);
    FZ_CHECK(rc == 0 && nall == nhits &&
                 memcmp(all, hits, nhits * sizeof *hits) == 0,
             "bc_index_all(position %zu): rc %s, %llu hits, want %llu", p,
             bc_error_name(rc), (unsigned long long)nall,
             (unsigned long long)nhits);
  }
  FZ_CHECK(bc_index_distinct(index) == distinct,
           "bc_index_distinct = %llu, want %llu",
           (unsigned long long)bc_index_distinct(index),
           (unsigned long long)distinct);

  /* A key longer than every record cannot be present. */
  size_t longest = 0;
  for (size_t p = 0; p < count; p++)
    if (reads[pos[p]].buf.size > longest) longest = reads[pos[p]].buf.size;
  unsigned char *absent = calloc(longest + 1, 1);
  FZ_CHECK(absent != NULL, "out of memory");
  uint64_t got = 0;
  rc = bc_index_first(index, absent, longest + 1, &got);
  FZ_CHECK(rc == BC_ENOTFOUND, "bc_index_first(absent key) gave %s",
           bc_error_name(rc));
  free(absent);
  bc_index_free(index);
}

/* The same file twice as a two-shard set ("x.bag,x.bag"), concatenated or
 * interleaved: global record g is local record g mod len (g / 2 when
 * interleaved) of shard 0 or 1, and must read exactly as that record did. */
static void check_two_shards(const char *path, const bc_reader_options *opts,
                             bool interleaved, const fz_read *reads, size_t n,
                             uint64_t len) {
  size_t plen = strlen(path);
  char *spec = malloc(2 * plen + 2);
  FZ_CHECK(spec != NULL, "out of memory");
  memcpy(spec, path, plen);
  spec[plen] = ',';
  memcpy(spec + plen + 1, path, plen + 1);
  bc_reader_options o = *opts;
  o.sharding_layout = interleaved ? BC_LAYOUT_INTERLEAVED : BC_LAYOUT_CONCATENATED;
  bc_bag *bag = NULL;
  int rc = bc_bag_open(&bag, spec, &o);
  free(spec);
  FZ_CHECK(rc == 0, "opening the file twice as two shards failed: %s (%s)",
           bc_error_name(rc), bc_errmsg());
  FZ_CHECK(bc_bag_len(bag) == 2 * len && bc_bag_shard_count(bag) == 2,
           "two shards of %llu records: len %llu, %zu shards",
           (unsigned long long)len, (unsigned long long)bc_bag_len(bag),
           bc_bag_shard_count(bag));
  bc_buf buf = BC_BUF_INIT;
  uint64_t total = 2 * len < FZ_MAX_CHECKED ? 2 * len : FZ_MAX_CHECKED;
  for (uint64_t g = 0; g < total; g++) {
    uint64_t local = interleaved ? g / 2 : g < len ? g : g - len;
    size_t want_shard = interleaved ? (size_t)(g % 2) : g < len ? 0 : 1;
    size_t shard = 99;
    uint64_t in_shard = 0;
    rc = bc_bag_locate(bag, g, &shard, &in_shard);
    FZ_CHECK(rc == 0 && shard == want_shard && in_shard == local,
             "%s bc_bag_locate(%llu) = (%zu, %llu), want (%zu, %llu)",
             interleaved ? "interleaved" : "concatenated",
             (unsigned long long)g, shard, (unsigned long long)in_shard,
             want_shard, (unsigned long long)local);
    if (local >= n) continue;
    rc = bc_bag_get(bag, g, &buf);
    const fz_read *r = &reads[local];
    FZ_CHECK(rc == r->rc &&
                 (rc != 0 || (buf.size == r->buf.size &&
                              (buf.size == 0 ||
                               memcmp(buf.data, r->buf.data, buf.size) == 0))),
             "%s record %llu (shard %zu record %llu) reads %s, %zu bytes; "
             "alone it read %s, %zu bytes",
             interleaved ? "interleaved" : "concatenated",
             (unsigned long long)g, want_shard, (unsigned long long)local,
             bc_error_name(rc), buf.size, bc_error_name(r->rc), r->buf.size);
  }
  rc = bc_bag_get(bag, 2 * len, &buf);
  FZ_CHECK(rc == BC_ERANGE, "two shards: bc_bag_get(len) gave %s",
           bc_error_name(rc));
  bc_buf_release(&buf);
  bc_bag_close(bag);
}

/* Reads everything through every API and checks it against the model. */
static void check_bag(const bc_bag *bag, const fz_model *m, const fz_mode *mode,
                      uint64_t file_bytes, const char *path,
                      const bc_reader_options *opts, bool interleaved) {
  uint64_t len = bc_bag_len(bag);
  FZ_CHECK(len == m->count, "bc_bag_len = %llu, the model has %llu records",
           (unsigned long long)len, (unsigned long long)m->count);
  FZ_CHECK(bc_bag_shard_count(bag) == 1, "one file, %zu shards",
           bc_bag_shard_count(bag));
  bc_shard_info info;
  int rc = bc_bag_shard_info(bag, 0, &info);
  FZ_CHECK(rc == 0, "bc_bag_shard_info(0): %s", bc_error_name(rc));
  FZ_CHECK(info.records == m->count && info.file_bytes == file_bytes &&
               info.compression ==
                   (mode->zstd ? BC_COMPRESSION_ZSTD : BC_COMPRESSION_NONE),
           "shard info: %llu records, %llu file bytes, compression %d",
           (unsigned long long)info.records,
           (unsigned long long)info.file_bytes, (int)info.compression);
  FZ_CHECK(mode->separate || info.records_bytes == m->records_size,
           "shard info: records_bytes %llu, tail says %llu",
           (unsigned long long)info.records_bytes,
           (unsigned long long)m->records_size);
  FZ_CHECK(bc_bag_shard_info(bag, 1, &info) == BC_ERANGE,
           "bc_bag_shard_info(1) of one shard must be BC_ERANGE");

  bc_buf scratch = BC_BUF_INIT;
  rc = bc_bag_get(bag, len, &scratch);
  FZ_CHECK(rc == BC_ERANGE, "bc_bag_get(len) gave %s", bc_error_name(rc));
  fz_check_failure(rc, "bc_bag_get(len)");
  rc = bc_bag_get(bag, UINT64_MAX, &scratch);
  FZ_CHECK(rc == BC_ERANGE, "bc_bag_get(UINT64_MAX) gave %s",
           bc_error_name(rc));
  bc_buf_release(&scratch);

  size_t n = len < FZ_MAX_CHECKED ? (size_t)len : FZ_MAX_CHECKED;
  fz_read *reads = calloc(n ? n : 1, sizeof *reads);
  FZ_CHECK(reads != NULL, "out of memory");
  size_t good = 0;
  for (size_t i = 0; i < n; i++) {
    reads[i].rc = bc_bag_get(bag, i, &reads[i].buf);
    check_against_model(m, i, reads[i].rc, reads[i].buf.data,
                        reads[i].buf.size, "bc_bag_get");
    if (reads[i].rc == 0) good++;
    size_t shard = 99;
    uint64_t in_shard = 0;
    rc = bc_bag_locate(bag, i, &shard, &in_shard);
    FZ_CHECK(rc == 0 && shard == 0 && in_shard == i,
             "bc_bag_locate(%zu) of one shard", i);
  }

  /* Zero copy: allowed for uncompressed mmapped files only. */
  bool view_ok = !mode->zstd && !mode->drop;
  for (size_t i = 0; i < n; i++) {
    const void *data = NULL;
    size_t size = 0;
    rc = bc_bag_get_view(bag, i, &data, &size);
    if (!view_ok) {
      FZ_CHECK(rc == BC_EUNSUPPORTED, "bc_bag_get_view(%zu) gave %s, want "
               "BC_EUNSUPPORTED", i, bc_error_name(rc));
      fz_check_failure(rc, "bc_bag_get_view");
      break;
    }
    FZ_CHECK(rc == reads[i].rc, "bc_bag_get_view(%zu) gave %s, bc_bag_get %s",
             i, bc_error_name(rc), bc_error_name(reads[i].rc));
    if (rc == 0) {
      FZ_CHECK(data != NULL, "bc_bag_get_view(%zu): NULL data", i);
      check_against_model(m, i, rc, data, size, "bc_bag_get_view");
      FZ_CHECK(size == reads[i].buf.size &&
                   (size == 0 || memcmp(data, reads[i].buf.data, size) == 0),
               "bc_bag_get_view(%zu) differs from bc_bag_get", i);
    } else {
      fz_check_failure(rc, "bc_bag_get_view");
    }
  }

  /* Batches: in order; reversed then repeated; only the good ones; with an
   * index out of range (which wins over any read error). */
  size_t cap = 3 * n + 1;
  uint64_t *idx = malloc(cap * sizeof *idx);
  FZ_CHECK(idx != NULL, "out of memory");
  for (size_t i = 0; i < n; i++) idx[i] = i;
  check_get_many(bag, reads, idx, n, "bc_bag_get_many(in order)");
  size_t k = 0;
  for (size_t i = n; i-- > 0;) idx[k++] = i;
  for (size_t i = 0; i < n; i += 2) idx[k++] = i, idx[k++] = n / 2;
  check_get_many(bag, reads, idx, k, "bc_bag_get_many(reversed, repeated)");
  if (good < n) {
    k = 0;
    for (size_t i = n; i-- > 0;)
      if (reads[i].rc == 0) idx[k++] = i;
    check_get_many(bag, reads, idx, k, "bc_bag_get_many(good only)");
  }
  {
    k = n < 4 ? n : 4;
    for (size_t i = 0; i < k; i++) idx[i] = i;
    idx[k++] = len;
    bc_buf *outs = calloc(k, sizeof *outs);
    FZ_CHECK(outs != NULL, "out of memory");
    rc = bc_bag_get_many(bag, idx, k, outs);
    FZ_CHECK(rc == BC_ERANGE, "bc_bag_get_many with index len gave %s",
             bc_error_name(rc));
    fz_check_failure(rc, "bc_bag_get_many(out of range)");
    for (size_t i = 0; i < k; i++) bc_buf_release(&outs[i]);
    free(outs);
  }
  rc = bc_bag_get_many(bag, idx, 0, NULL);
  FZ_CHECK(rc == 0, "bc_bag_get_many of zero indices gave %s",
           bc_error_name(rc));
  free(idx);

  /* verify agrees with the single reads when they covered every record. */
  if (n == len) {
    uint64_t bad = UINT64_MAX;
    rc = bc_bag_verify(bag, &bad);
    size_t first = n;
    for (size_t i = 0; i < n && first == n; i++)
      if (reads[i].rc != 0) first = i;
    if (first == n) {
      FZ_CHECK(rc == 0, "bc_bag_verify: %s (%s) but every record reads",
               bc_error_name(rc), bc_errmsg());
    } else {
      fz_check_failure(rc, "bc_bag_verify");
      FZ_CHECK(rc == reads[first].rc && bad == first,
               "bc_bag_verify gave %s at %llu, the first failing read is "
               "%zu (%s)",
               bc_error_name(rc), (unsigned long long)bad, first,
               bc_error_name(reads[first].rc));
    }
  }

  check_index(bag, reads, n);
  check_two_shards(path, opts, interleaved, reads, n, len);

  for (size_t i = 0; i < n; i++) bc_buf_release(&reads[i].buf);
  free(reads);
}

static void silent(void *payload, const char *message) {
  (void)payload;
  (void)message;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static bool initialised;
  if (!initialised) {
    bc_set_notice_handler(silent, NULL);
    initialised = true;
  }
  if (size == 0) return 0;
  fz_mode mode = parse_mode(data[0]);
  const uint8_t *rest = data + 1;
  size_t rest_len = size - 1;

  const char *rec_path = fz_path(0, "x.bag");
  const char *lim_path = fz_path(1, "limits.x.bag");
  fz_model m;
  uint64_t file_bytes;
  if (mode.separate) {
    const uint8_t *rec, *lim;
    size_t rec_size, lim_size;
    split_separate(rest, rest_len, mode.split, &rec, &rec_size, &lim,
                   &lim_size);
    fz_write_file(rec_path, rec, rec_size);
    fz_write_file(lim_path, lim, lim_size);
    fz_model_separate(&m, rec, rec_size, lim, lim_size, mode.zstd);
    file_bytes = rec_size + lim_size;
  } else {
    fz_write_file(rec_path, rest, rest_len);
    fz_model_tail(&m, rest, rest_len, mode.zstd);
    file_bytes = rest_len;
  }

  bc_reader_options opts = BC_READER_OPTIONS_INIT;
  opts.limits_placement = mode.separate ? BC_LIMITS_SEPARATE : BC_LIMITS_TAIL;
  opts.limits_storage = mode.in_memory ? BC_LIMITS_IN_MEMORY : BC_LIMITS_ON_DISK;
  opts.compression = mode.zstd ? BC_COMPRESSION_ZSTD : BC_COMPRESSION_NONE;
  opts.cache_policy = mode.drop ? BC_CACHE_DROP_AFTER_READ : BC_CACHE_SYSTEM;
  opts.max_parallelism = mode.parallel ? 2 : 1;
  opts.max_record_size = FZ_MAX_RECORD_SIZE;

  bc_bag *bag = NULL;
  int rc = bc_bag_open(&bag, rec_path, &opts);
  if (rc != 0) {
    fz_check_failure(rc, "bc_bag_open");
    FZ_CHECK(bag == NULL, "bc_bag_open failed but set *out");
    /* ON_DISK reads limits lazily: only an unsplittable tail may fail. */
    FZ_CHECK(m.malformed || (mode.in_memory && !m.limits_valid),
             "bc_bag_open of a well-formed file failed: %s (%s)",
             bc_error_name(rc), bc_errmsg());
    FZ_CHECK(rc == BC_ECORRUPT || rc == BC_ENOMEM,
             "bc_bag_open of a malformed file gave %s, want BC_ECORRUPT",
             bc_error_name(rc));
  } else {
    FZ_CHECK(!m.malformed, "bc_bag_open accepted an unsplittable tail");
    /* The input's length picks the layout of the two-shard check. */
    check_bag(bag, &m, &mode, file_bytes, rec_path, &opts, (size & 1) != 0);
    bc_bag_close(bag);
  }
  fz_model_free(&m);

  fz_writer_round_trip(rest, rest_len, mode.separate, mode.zstd,
                       mode.level1 ? 1 : 0, &opts);
  return 0;
}
