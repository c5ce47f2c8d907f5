/*
 * One shard: split a tail file into records and limits, or pair a records
 * file with its separate limits file; serve record byte ranges with their
 * limits validated.
 *
 * Validation is per access: record i uses limits[i-1] (0 for i = 0) and
 * limits[i], and is served only if limits[i-1] <= limits[i] <= records_size.
 * With limits held in memory the whole table is checked once at load, and
 * records past the first bad limit are refused too (a table that goes
 * backwards anywhere is corrupt; serving later records would return bytes of
 * other records).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "bag/internal.h"

static int open_tail(bc__shard *s) {
  const bc__file *f = &s->records;
  if (f->size == 0) return 0; /* no records at all: valid */
  if (f->size < 8)
    return bc__error(BC_ECORRUPT,
                     "%s: invalid tail limits: the file is non-empty but too "
                     "small (%llu bytes, at least 8 needed)",
                     f->path, (unsigned long long)f->size);
  unsigned char last[8];
  int rc = bc__file_read_meta(f, f->size - 8, last, 8);
  if (rc != 0) return rc;
  uint64_t records_end = bc__load_u64le(last);
  if (records_end > f->size - 8)
    return bc__error(BC_ECORRUPT,
                     "%s: invalid tail limits: the last limit (%llu) points "
                     "past the limits section (file is %llu bytes)",
                     f->path, (unsigned long long)records_end,
                     (unsigned long long)f->size);
  if ((f->size - records_end) % 8 != 0)
    return bc__error(BC_ECORRUPT,
                     "%s: invalid tail limits: %llu bytes after the records "
                     "section is not a multiple of 8 (invalid alignment)",
                     f->path, (unsigned long long)(f->size - records_end));
  s->records_size = records_end;
  s->limits_offset = records_end;
  s->count = (f->size - records_end) / 8;
  return 0;
}

int bc__shard_open(bc__shard *s, const char *records_path,
                   const char *limits_path, bool zstd,
                   const bc_reader_options *opts) {
  memset(s, 0, sizeof *s);
  s->records.fd = s->records.dio_fd = -1;
  s->limits_file.fd = s->limits_file.dio_fd = -1;
  s->zstd = zstd;
  s->limits_in_memory = opts->limits_storage == BC_LIMITS_IN_MEMORY;
  atomic_init(&s->loaded_limits, NULL);
  pthread_mutex_init(&s->load_lock, NULL);
  int rc = bc__file_open(&s->records, records_path, opts->cache_policy,
                         opts->access_pattern);
  if (rc != 0) goto cleanup;
  if (limits_path == NULL) {
    rc = open_tail(s);
  } else {
    s->separate = true;
    /* Limits are small and hot: always mapped, whatever the policy. */
    rc = bc__file_open(&s->limits_file, limits_path, BC_CACHE_SYSTEM,
                       BC_ACCESS_SYSTEM);
    if (rc != 0) goto cleanup;
    /* A trailing partial limit (size not a multiple of 8) is ignored, as
     * the reference does; so are records bytes past the last limit. */
    s->count = s->limits_file.size / 8;
    s->records_size = s->records.size;
  }
cleanup:
  if (rc != 0) bc__shard_close(s);
  return rc;
}

void bc__shard_close(bc__shard *s) {
  bc__file_close(&s->records);
  if (s->separate) bc__file_close(&s->limits_file);
  free(atomic_load(&s->loaded_limits));
  atomic_store(&s->loaded_limits, NULL);
  pthread_mutex_destroy(&s->load_lock);
}

/* Loads all limits into memory once and finds the valid prefix.  The copy
 * is made without the lock (a mapped read may fault: see guard.c); the
 * lock only decides whose copy is published. */
static int load_limits(bc__shard *s, const uint64_t **table) {
  size_t n = (size_t)s->count;
  uint64_t *t = malloc(n ? n * sizeof *t : 1);
  if (t == NULL)
    return bc__error(BC_ENOMEM, "%s: cannot hold %zu limits in memory",
                     s->records.path, n);
  const bc__file *lf = bc__shard_limits_file(s);
  int rc = bc__file_read_meta(lf, s->limits_offset, t, n * 8);
  if (rc != 0) {
    free(t);
    return rc;
  }
  if (!s->separate && n > 0 && bc__load_u64le(&t[n - 1]) != s->records_size) {
    /* Read after a truncation: zeros where the limits were (see
     * check_not_shrunk). */
    uint64_t last = bc__load_u64le(&t[n - 1]);
    free(t);
    return bc__error(BC_ECORRUPT,
                     "%s: the file shrank since it was opened (its last limit "
                     "reads %llu, not %llu)", s->records.path,
                     (unsigned long long)last,
                     (unsigned long long)s->records_size);
  }
  uint64_t prev = 0, i = 0;
  for (; i < n; i++) {
    uint64_t v = bc__load_u64le(&t[i]);
    if (v < prev || v > s->records_size) break;
    t[i] = v; /* now in host order */
    prev = v;
  }
  pthread_mutex_lock(&s->load_lock);
  uint64_t *published = atomic_load(&s->loaded_limits);
  if (published == NULL) {
    s->valid_prefix = i;
    atomic_store_explicit(&s->loaded_limits, t, memory_order_release);
    published = t;
    t = NULL;
  }
  pthread_mutex_unlock(&s->load_lock);
  free(t); /* another thread published first: same contents */
  *table = published;
  return 0;
}

/* A file truncated under its mapping reads as zeros up to the end of its
 * last page (and faults beyond: guard.c), so zeroed limits would pass the
 * order checks as empty records.  A record ending at 0 in a tail file with
 * records is therefore served only while the file's last limit still reads
 * as the records size it had at open: a truncation removes that limit
 * first (it is the file's last 8 bytes). */
static int check_not_shrunk(const bc__shard *s, uint64_t i) {
  const bc__file *f = &s->records;
  if (s->separate || s->records_size == 0 || f->map == NULL) return 0;
  uint64_t last = bc__load_u64le(f->map + f->size - 8);
  if (last == s->records_size) return 0;
  return bc__error(BC_ECORRUPT,
                   "%s: record %llu: the file shrank since it was opened (its "
                   "last limit reads %llu, not %llu)", f->path,
                   (unsigned long long)i, (unsigned long long)last,
                   (unsigned long long)s->records_size);
}

int bc__shard_range(bc__shard *s, uint64_t i, uint64_t *start, uint64_t *end) {
  uint64_t lo, hi;
  if (s->limits_in_memory) {
    const uint64_t *t =
        atomic_load_explicit(&s->loaded_limits, memory_order_acquire);
    if (t == NULL) {
      int rc = load_limits(s, &t);
      if (rc != 0) return rc;
    }
    if (i >= s->valid_prefix) {
      uint64_t bad = s->valid_prefix;
      return bc__error(BC_ECORRUPT,
                       "%s: record %llu: limits table is corrupt from entry "
                       "%llu (limits must increase and stay within the %llu "
                       "bytes of records)",
                       s->records.path, (unsigned long long)i,
                       (unsigned long long)bad,
                       (unsigned long long)s->records_size);
    }
    lo = i ? t[i - 1] : 0;
    hi = t[i];
  } else {
    const bc__file *lf = bc__shard_limits_file(s);
    uint64_t off = s->limits_offset + 8 * i;
    unsigned char pair[16];
    if (lf->map != NULL) {
      const unsigned char *p = lf->map + off;
      lo = i ? bc__load_u64le(p - 8) : 0;
      hi = bc__load_u64le(p);
    } else {
      int rc = i ? bc__file_read_meta(lf, off - 8, pair, 16)
                 : bc__file_read_meta(lf, off, pair + 8, 8);
      if (rc != 0) return rc;
      lo = i ? bc__load_u64le(pair) : 0;
      hi = bc__load_u64le(pair + 8);
    }
    if (lo > hi || hi > s->records_size)
      return bc__error(BC_ECORRUPT,
                       "%s: record %llu: bad limits [%llu, %llu) (they must "
                       "increase and stay within the %llu bytes of records)",
                       s->records.path, (unsigned long long)i,
                       (unsigned long long)lo, (unsigned long long)hi,
                       (unsigned long long)s->records_size);
  }
  if (hi == 0) {
    int rc = check_not_shrunk(s, i);
    if (rc != 0) return rc;
  }
  *start = lo;
  *end = hi;
  return 0;
}
