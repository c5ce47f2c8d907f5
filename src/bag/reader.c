/*
 * The Bagz reader: a sharded set opened from a spec, read one record at a
 * time, zero-copy, or in parallel batches.
 *
 * A bag is immutable after bc_bag_open (IN_MEMORY limits are loaded once
 * under a per-shard lock), so every read function may run in many threads.
 */
#include "config.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bag/internal.h"

struct bc_bag {
  bc_reader_options opts; /* defaults resolved; dictionary points at dict */
  void *dict;
  size_t nshards;
  bc__shard *shards;
  uint64_t *ends;   /* CONCATENATED: ends[s] = records in shards 0..s */
  uint64_t len;
  uint64_t records_bytes;
  bc__decoder *decoder; /* NULL when no shard is zstd */
  /* The fast path of bc_bag_get and bc_bag_get_view, set at open when the
   * bag is one uncompressed, mapped shard with ON_DISK limits: the mapped
   * records, limits[0] in the mapping, and the records size.  NULL
   * otherwise.  Only valid limits are served there; anything else goes the
   * general way, which reports the error. */
  const unsigned char *fast_records, *fast_limits;
  uint64_t fast_records_size;
  bc__crc_table *crcs; /* record checksums (bc__bag_attach_crcs), or NULL */
};

/* ---- opening ------------------------------------------------------------ */

typedef struct {
  bc_bag *bag;
  const bc__shard_path *paths;
} open_job;

static int open_one_shard(void *arg, size_t i) {
  open_job *job = arg;
  const bc_reader_options *o = &job->bag->opts;
  bool zstd = o->compression == BC_COMPRESSION_ZSTD ||
              (o->compression == BC_COMPRESSION_AUTO &&
               bc__path_is_bagz(job->paths[i].records));
  return bc__shard_open(&job->bag->shards[i], job->paths[i].records,
                        job->paths[i].limits, zstd, o);
}

static int check_options(const bc_reader_options *o) {
  if ((unsigned)o->sharding_layout > BC_LAYOUT_INTERLEAVED ||
      (unsigned)o->limits_placement > BC_LIMITS_SEPARATE ||
      (unsigned)o->limits_storage > BC_LIMITS_IN_MEMORY ||
      (unsigned)o->compression > BC_COMPRESSION_ZSTD ||
      (unsigned)o->access_pattern > BC_ACCESS_SEQUENTIAL ||
      (unsigned)o->cache_policy > BC_CACHE_DIRECT_IO)
    return bc__error(BC_EINVAL, "reader options: an enum field is out of range");
  if (o->max_parallelism < 0)
    return bc__error(BC_EINVAL, "reader options: max_parallelism %d < 0",
                     o->max_parallelism);
  if (o->dictionary_size > 0 && o->dictionary == NULL)
    return bc__error(BC_EINVAL, "reader options: dictionary_size without dictionary");
  if (o->dictionary_size > 0 && o->compression == BC_COMPRESSION_NONE)
    return bc__error(BC_EINVAL,
                     "reader options: a zstd dictionary with compression none");
  return 0;
}

/* The interleaved layout requires the sizes round-robin writing produces:
 * non-increasing, and none more than one below shard 0. */
static int check_interleaved(const bc_bag *bag) {
  for (size_t s = 1; s < bag->nshards; s++) {
    uint64_t first = bag->shards[0].count, prev = bag->shards[s - 1].count,
             here = bag->shards[s].count;
    if (here > prev || first - here > 1)
      return bc__error(BC_ECORRUPT,
                       "interleaved layout: shard %zu (%s) has %llu records "
                       "after %llu in shard %zu; sizes must be non-increasing "
                       "and within one of shard 0 (%llu)",
                       s, bag->shards[s].records.path, (unsigned long long)here,
                       (unsigned long long)prev, s - 1,
                       (unsigned long long)first);
  }
  return 0;
}

/* Opens the shards paths[0..npaths) as one bag (opts checked). */
static int open_paths(bc_bag **out, const bc__shard_path *paths, size_t npaths,
                      const bc_reader_options *opts) {
  size_t opened = 0;
  int rc = 0;
  bc_bag *bag = calloc(1, sizeof *bag);
  if (bag == NULL) return bc__error(BC_ENOMEM, "out of memory");
  bag->opts = *opts;
  if (bag->opts.max_parallelism == 0) bag->opts.max_parallelism = bc__cpu_count();
  if (bag->opts.max_record_size == 0)
    bag->opts.max_record_size = BC_DEFAULT_MAX_RECORD_SIZE;
  if (opts->dictionary_size > 0) {
    bag->dict = malloc(opts->dictionary_size);
    if (bag->dict == NULL) {
      rc = bc__error(BC_ENOMEM, "out of memory");
      goto cleanup;
    }
    memcpy(bag->dict, opts->dictionary, opts->dictionary_size);
    bag->opts.dictionary = bag->dict;
  } else {
    bag->opts.dictionary = NULL;
  }

  bag->shards = calloc(npaths ? npaths : 1, sizeof *bag->shards);
  bag->ends = calloc(npaths + 1, sizeof *bag->ends);
  if (bag->shards == NULL || bag->ends == NULL) {
    rc = bc__error(BC_ENOMEM, "out of memory");
    goto cleanup;
  }
  open_job job = {bag, paths};
  /* Opening is mostly system calls; small sets are faster inline. */
  rc = bc__parallel_for(npaths, npaths >= 16 ? bag->opts.max_parallelism : 1,
                        open_one_shard, &job);
  if (rc != 0) {
    /* Shards that did open must be closed; the failed one closed itself. */
    for (size_t i = 0; i < npaths; i++)
      if (bag->shards[i].records.path != NULL) bc__shard_close(&bag->shards[i]);
    goto cleanup;
  }
  opened = bag->nshards = npaths;

  bool any_zstd = false;
  for (size_t s = 0; s < npaths; s++) {
    bag->len += bag->shards[s].count;
    bag->ends[s] = bag->len;
    bag->records_bytes += bag->shards[s].records_size;
    any_zstd |= bag->shards[s].zstd;
  }
  if (bag->opts.sharding_layout == BC_LAYOUT_INTERLEAVED &&
      (rc = check_interleaved(bag)) != 0)
    goto cleanup;
  if (npaths == 1) {
    const bc__shard *s0 = &bag->shards[0];
    const bc__file *lf = bc__shard_limits_file(s0);
    if (!s0->zstd && !s0->limits_in_memory &&
        s0->records.policy == BC_CACHE_SYSTEM && s0->records.map != NULL &&
        lf->map != NULL) {
      bag->fast_records = s0->records.map;
      bag->fast_limits = lf->map + s0->limits_offset;
      bag->fast_records_size = s0->records_size;
    }
  }
  if (any_zstd) {
    rc = bc__decoder_new(&bag->decoder, bag->dict, opts->dictionary_size,
                         bag->opts.max_record_size);
    if (rc != 0) goto cleanup;
  }
  *out = bag;
  bag = NULL;
  bc__error_clear();
cleanup:
  if (bag != NULL) {
    bag->nshards = opened;
    bc_bag_close(bag);
  }
  return rc;
}

int bc_bag_open(bc_bag **out, const char *spec, const bc_reader_options *opts) {
  static const bc_reader_options defaults = BC_READER_OPTIONS_INIT;
  bc__shard_path *paths = NULL;
  size_t npaths = 0;
  if (out == NULL || spec == NULL) return bc__error(BC_EINVAL, "bc_bag_open: NULL argument");
  if (opts == NULL) opts = &defaults;
  int rc = check_options(opts);
  if (rc == 0)
    rc = bc__spec_expand(spec, opts->limits_placement == BC_LIMITS_SEPARATE,
                         &paths, &npaths);
  if (rc == 0) rc = open_paths(out, paths, npaths, opts);
  bc__spec_free(paths, npaths);
  return rc;
}

int bc__bag_open_file(bc_bag **out, const char *path,
                      const bc_reader_options *opts) {
  static const bc_reader_options defaults = BC_READER_OPTIONS_INIT;
  if (opts == NULL) opts = &defaults;
  int rc = check_options(opts);
  if (rc != 0) return rc;
  bc__shard_path p = {(char *)path, NULL};
  if (opts->limits_placement == BC_LIMITS_SEPARATE &&
      (p.limits = bc_limits_path(path)) == NULL)
    return bc__error(BC_ENOMEM, "out of memory");
  rc = open_paths(out, &p, 1, opts);
  free(p.limits);
  return rc;
}

void bc_bag_close(bc_bag *bag) {
  if (bag == NULL) return;
  for (size_t s = 0; s < bag->nshards; s++) bc__shard_close(&bag->shards[s]);
  bc__decoder_free(bag->decoder);
  if (bag->crcs != NULL) bc__crc_table_close(bag->crcs);
  free(bag->crcs);
  free(bag->shards);
  free(bag->ends);
  free(bag->dict);
  free(bag);
}

/* ---- lookups ------------------------------------------------------------ */

uint64_t bc_bag_len(const bc_bag *bag) { return bag->len; }

size_t bc_bag_shard_count(const bc_bag *bag) { return bag->nshards; }

const bc_reader_options *bc_bag_options(const bc_bag *bag) { return &bag->opts; }

double bc_bag_bytes_per_record(const bc_bag *bag) {
  return bag->len ? (double)bag->records_bytes / (double)bag->len : 0.0;
}

int bc__bag_attach_crcs(bc_bag *bag, const char *path) {
  if (bag->nshards != 1 || bag->crcs != NULL)
    return bc__error(BC_EINVAL, "%s: checksums attach to one-shard bags, once",
                     path);
  bc__crc_table *t = malloc(sizeof *t);
  if (t == NULL) return bc__error(BC_ENOMEM, "out of memory");
  int rc = bc__crc_table_open(t, path, bag->len, bag->shards[0].records_size);
  if (rc != 0) {
    free(t);
    return rc;
  }
  bag->crcs = t;
  return 0;
}

void bc__bag_file_id(const bc_bag *bag, uint64_t *dev, uint64_t *ino) {
  *dev = bag->nshards ? bag->shards[0].records.dev : 0;
  *ino = bag->nshards ? bag->shards[0].records.ino : 0;
}

int bc_bag_shard_info(const bc_bag *bag, size_t shard, bc_shard_info *info) {
  if (shard >= bag->nshards)
    return bc__error(BC_ERANGE, "shard %zu out of range [0, %zu)", shard,
                     bag->nshards);
  const bc__shard *s = &bag->shards[shard];
  info->path = s->records.path;
  info->limits_path = s->separate ? s->limits_file.path : NULL;
  info->records = s->count;
  info->records_bytes = s->records_size;
  info->file_bytes = s->records.size + (s->separate ? s->limits_file.size : 0);
  info->compression = s->zstd ? BC_COMPRESSION_ZSTD : BC_COMPRESSION_NONE;
  return 0;
}

/* Index -> (shard, local index); index < len is the caller's promise. */
static inline void locate(const bc_bag *bag, uint64_t index, size_t *shard,
                          uint64_t *local) {
  if (bag->nshards == 1) {
    *shard = 0;
    *local = index;
  } else if (bag->opts.sharding_layout == BC_LAYOUT_INTERLEAVED) {
    *shard = (size_t)(index % bag->nshards);
    *local = index / bag->nshards;
  } else {
    /* First shard whose end exceeds index (skips empty shards). */
    size_t lo = 0, hi = bag->nshards - 1;
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (bag->ends[mid] > index) hi = mid; else lo = mid + 1;
    }
    *shard = lo;
    *local = index - (lo ? bag->ends[lo - 1] : 0);
  }
}

static int range_error(const bc_bag *bag, uint64_t index) {
  return bc__error(BC_ERANGE, "index %llu out of range [0, %llu)",
                   (unsigned long long)index, (unsigned long long)bag->len);
}

int bc_bag_locate(const bc_bag *bag, uint64_t index, size_t *shard,
                  uint64_t *index_in_shard) {
  if (index >= bag->len) return range_error(bag, index);
  size_t s;
  uint64_t i;
  locate(bag, index, &s, &i);
  if (shard) *shard = s;
  if (index_in_shard) *index_in_shard = i;
  return 0;
}

/* ---- reading ------------------------------------------------------------ */

typedef struct {
  const bc_bag *bag;
  bc__shard *shard;
  uint64_t local;
  bc_buf *out, *scratch;
} read_args;

/* Reads record `local` of a shard into out; `scratch` holds compressed
 * bytes when the shard is not mapped.  Runs guarded (see guard.c). */
static int read_in_shard(void *arg) {
  read_args *a = arg;
  bc__shard *s = a->shard;
  uint64_t start, end;
  int rc = bc__shard_range(s, a->local, &start, &end);
  if (rc != 0) return rc;
  size_t n = (size_t)(end - start);
  bc_buf *out = a->out;
  if (!s->zstd) {
    if ((rc = bc__buf_reserve(out, n)) != 0) return rc;
    if ((rc = bc__file_read(&s->records, start, out->data, n)) != 0) return rc;
    out->size = n;
    return 0;
  }
  if (n == 0) { /* empty records are stored as zero bytes */
    out->size = 0;
    return 0;
  }
  const void *src;
  if (s->records.map != NULL) {
    src = s->records.map + start;
  } else {
    if ((rc = bc__buf_reserve(a->scratch, n)) != 0) return rc;
    if ((rc = bc__file_read(&s->records, start, a->scratch->data, n)) != 0)
      return rc;
    src = a->scratch->data;
  }
  return bc__decoder_decode(a->bag->decoder, src, n, out, s->records.path,
                            a->local);
}

/* read_in_shard, then the record's checksum when the bag has them (one
 * shard: the local index is the record's). */
static int read_checked(void *arg) {
  read_args *a = arg;
  int rc = read_in_shard(a);
  if (rc == 0 && a->bag->crcs != NULL)
    rc = bc__crc_table_check(a->bag->crcs, a->local, a->out->data,
                             a->out->size, a->shard->records.path);
  return rc;
}

/* The fast path (see struct bc_bag), run guarded: reads record `index`
 * (< len) into `out` or points `view` at it.  Returns 1, touching nothing
 * else, when its limits are invalid: the general path then reports it. */
typedef struct {
  const bc_bag *bag;
  uint64_t index;
  bc_buf *out;
  const void *view;
  size_t view_size;
} fast_args;

static int fast_read(void *arg) {
  fast_args *a = arg;
  const bc_bag *bag = a->bag;
  const unsigned char *lim = bag->fast_limits + 8 * a->index;
  uint64_t hi = bc__load_u64le(lim);
  uint64_t lo = a->index ? bc__load_u64le(lim - 8) : 0;
  /* hi == 0 may be zeros of a truncated file: the general path checks. */
  if (lo > hi || hi > bag->fast_records_size || hi == 0) return 1;
  size_t n = (size_t)(hi - lo);
  if (a->out == NULL) {
    a->view = bag->fast_records + lo; /* inside the mapping: never NULL */
    a->view_size = n;
    return 0;
  }
  int rc = bc__buf_reserve(a->out, n);
  if (rc != 0) return rc;
  a->out->size = n;
  if (bag->crcs != NULL) /* copied and checked in one pass */
    return bc__crc_table_copy(bag->crcs, a->index, a->out->data,
                              bag->fast_records + lo, n,
                              bag->shards[0].records.path);
  if (n > 0) memcpy(a->out->data, bag->fast_records + lo, n);
  return 0;
}

/* Reads record `index` (< len) into out: the fast path when the bag has
 * one (single gets and batches alike), else the shard's general read. */
static int read_record(const bc_bag *bag, uint64_t index, bc_buf *out,
                       bc_buf *scratch) {
  if (bag->fast_limits != NULL) {
    fast_args f = {bag, index, out, NULL, 0};
    int rc = bc__guarded(fast_read, &f, bag->shards[0].records.path);
    if (rc <= 0) return rc; /* 1: bad limits, which the general path reports */
  }
  size_t si;
  read_args a = {bag, NULL, 0, out, scratch};
  locate(bag, index, &si, &a.local);
  a.shard = &bag->shards[si];
  if (a.shard->records.map == NULL && !a.shard->separate && bag->crcs == NULL)
    return read_in_shard(&a); /* nothing mapped: nothing to guard */
  return bc__guarded(read_checked, &a, a.shard->records.path);
}

int bc_bag_get(const bc_bag *bag, uint64_t index, bc_buf *out) {
  if (index >= bag->len) return range_error(bag, index);
  bc_buf scratch = BC_BUF_INIT;
  int rc = read_record(bag, index, out, &scratch);
  bc_buf_release(&scratch);
  return rc;
}

bool bc__bag_can_view(const bc_bag *bag) {
  if (bag->crcs != NULL) return false;
  for (size_t i = 0; i < bag->nshards; i++)
    if (bag->shards[i].zstd || bag->shards[i].records.policy != BC_CACHE_SYSTEM)
      return false;
  return true;
}

typedef struct {
  bc__shard *shard;
  uint64_t local, start, end;
} range_args;

static int range_in_shard(void *arg) {
  range_args *a = arg;
  return bc__shard_range(a->shard, a->local, &a->start, &a->end);
}

int bc_bag_get_view(const bc_bag *bag, uint64_t index, const void **data,
                    size_t *size) {
  static const unsigned char empty[1];
  if (bag->crcs != NULL)
    return bc__error(BC_EUNSUPPORTED, "%s: zero-copy reads cannot check the "
                     "record checksums", bag->shards[0].records.path);
  if (bag->fast_limits != NULL && index < bag->len) {
    /* Unguarded: the caller reads the record through the returned pointer
     * outside any guard anyway, so zero-copy reads are exactly as safe as
     * the mapping (see bag.h). */
    fast_args a = {bag, index, NULL, NULL, 0};
    int rc = fast_read(&a);
    if (rc == 0) {
      *data = a.view;
      *size = a.view_size;
    }
    if (rc <= 0) return rc;
  }
  if (index >= bag->len) return range_error(bag, index);
  size_t si;
  range_args a;
  locate(bag, index, &si, &a.local);
  bc__shard *s = a.shard = &bag->shards[si];
  if (s->zstd)
    return bc__error(BC_EUNSUPPORTED,
                     "%s: zero-copy reads need uncompressed records",
                     s->records.path);
  if (s->records.policy != BC_CACHE_SYSTEM)
    return bc__error(BC_EUNSUPPORTED,
                     "%s: zero-copy reads need the system cache policy (mmap)",
                     s->records.path);
  int rc = bc__guarded(range_in_shard, &a, s->records.path);
  if (rc != 0) return rc;
  *data = a.start == a.end ? (const void *)empty
                           : (const void *)(s->records.map + a.start);
  *size = (size_t)(a.end - a.start);
  return 0;
}

int bc_bag_get_views(const bc_bag *bag, const uint64_t *indices, size_t count,
                     const void **data, size_t *sizes) {
  for (size_t p = 0; p < count; p++)
    if (indices[p] >= bag->len)
      return bc__error(BC_ERANGE, "indices[%zu] = %llu out of range [0, %llu)",
                       p, (unsigned long long)indices[p],
                       (unsigned long long)bag->len);
  if (bag->fast_limits != NULL && bag->crcs == NULL) {
    /* One mapped uncompressed shard: pointer arithmetic in a tight loop;
     * a record with bad limits falls back to the general path's error. */
    const unsigned char *lim = bag->fast_limits, *rec = bag->fast_records;
    uint64_t size = bag->fast_records_size;
    for (size_t p = 0; p < count; p++) {
      uint64_t i = indices[p];
      uint64_t hi = bc__load_u64le(lim + 8 * i);
      uint64_t lo = i ? bc__load_u64le(lim + 8 * i - 8) : 0;
      if (lo > hi || hi > size || hi == 0) { /* the general path decides */
        int rc = bc_bag_get_view(bag, i, &data[p], &sizes[p]);
        if (rc != 0) return rc;
        continue;
      }
      data[p] = rec + lo;
      sizes[p] = (size_t)(hi - lo);
    }
    return 0;
  }
  for (size_t p = 0; p < count; p++) {
    int rc = bc_bag_get_view(bag, indices[p], &data[p], &sizes[p]);
    if (rc != 0) return rc;
  }
  return 0;
}

/* ---- batches -------------------------------------------------------------- */

/* Positions per task: large enough to amortise claiming a task, small enough
 * to balance uneven record costs across threads. */
static size_t batch_chunk(size_t count, int parallelism) {
  size_t chunk = count / ((size_t)parallelism * 8);
  return chunk < 16 ? 16 : chunk > 4096 ? 4096 : chunk;
}

typedef struct {
  const bc_bag *bag;
  const uint64_t *indices;
  size_t count, chunk;
  bc_buf *outs;
} many_job;

static int many_task(void *arg, size_t task) {
  many_job *j = arg;
  size_t lo = task * j->chunk;
  size_t hi = lo + j->chunk < j->count ? lo + j->chunk : j->count;
  bc_buf scratch = BC_BUF_INIT;
  int rc = 0;
  for (size_t p = lo; p < hi && rc == 0; p++) {
    rc = read_record(j->bag, j->indices[p], &j->outs[p], &scratch);
    if (rc != 0) /* say which request failed, keeping the record's own detail */
      bc__error_wrap(rc, "indices[%zu] = %llu: %s", p,
                     (unsigned long long)j->indices[p], bc_errmsg());
  }
  bc_buf_release(&scratch);
  return rc;
}

int bc_bag_get_many(const bc_bag *bag, const uint64_t *indices, size_t count,
                    bc_buf *outs) {
  for (size_t p = 0; p < count; p++)
    if (indices[p] >= bag->len)
      return bc__error(BC_ERANGE, "indices[%zu] = %llu out of range [0, %llu)",
                       p, (unsigned long long)indices[p],
                       (unsigned long long)bag->len);
  many_job j = {bag, indices, count, batch_chunk(count, bag->opts.max_parallelism),
                outs};
  size_t ntasks = (count + j.chunk - 1) / j.chunk;
  return bc__parallel_for(ntasks, bag->opts.max_parallelism, many_task, &j);
}

typedef struct {
  const bc_bag *bag;
  uint64_t chunk;
  _Atomic uint64_t first_bad; /* lowest failing index seen, or UINT64_MAX */
} verify_job;

static int verify_task(void *arg, size_t task) {
  verify_job *j = arg;
  uint64_t lo = (uint64_t)task * j->chunk;
  uint64_t hi = lo + j->chunk < j->bag->len ? lo + j->chunk : j->bag->len;
  bc_buf out = BC_BUF_INIT, scratch = BC_BUF_INIT;
  int rc = 0;
  uint64_t i = lo;
  for (; i < hi && rc == 0; i++) rc = read_record(j->bag, i, &out, &scratch);
  if (rc != 0) {
    uint64_t bad = i - 1, seen = atomic_load(&j->first_bad);
    while (bad < seen && !atomic_compare_exchange_weak(&j->first_bad, &seen, bad)) {
    }
  }
  bc_buf_release(&out);
  bc_buf_release(&scratch);
  return rc;
}

int bc_bag_verify(const bc_bag *bag, uint64_t *bad_index) {
  verify_job j = {.bag = bag, .chunk = 4096};
  atomic_init(&j.first_bad, UINT64_MAX);
  size_t ntasks = (size_t)((bag->len + j.chunk - 1) / j.chunk);
  int rc = bc__parallel_for(ntasks, bag->opts.max_parallelism, verify_task, &j);
  if (rc != 0 && bad_index != NULL) *bad_index = atomic_load(&j.first_bad);
  if (rc == 0) bc__error_clear();
  return rc;
}
