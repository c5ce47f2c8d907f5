/*
 * Record checksums: a CRC-32C per record, kept in a sidecar file beside a
 * Bagz file and checked on every read of a bag it is attached to (the
 * cache attaches one to each uncompressed shard it publishes: doc/cache.md,
 * "Record checksums").  The Bagz file itself is unchanged.
 *
 * Sidecar layout (little-endian):
 *   0   8 bytes  "BCCRC32C"
 *   8   u64      number of records
 *   16  u64      size of the records section of the Bagz file
 *   24  u32[n]   CRC-32C of each record's bytes, in order
 * The table is mapped; reads of it run guarded like reads of the records
 * (a sidecar truncated under its mapping is BC_ECORRUPT, never a crash).
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "bag/internal.h"
#include "common/crc32c.h"

static const unsigned char magic[8] = {'B', 'C', 'C', 'R', 'C', '3', '2', 'C'};

void bc__crc_table_header(unsigned char out[BC__CRC_HEADER], uint64_t count,
                          uint64_t records_bytes) {
  memcpy(out, magic, 8);
  bc__store_u64le(out + 8, count);
  bc__store_u64le(out + 16, records_bytes);
}

/* Reads the header (guarded: the file is mapped). */
typedef struct {
  const unsigned char *map;
  uint64_t count, records_bytes;
  bool magic_ok;
} header_args;

static int read_header(void *arg) {
  header_args *h = arg;
  h->magic_ok = memcmp(h->map, magic, 8) == 0;
  h->count = bc__load_u64le(h->map + 8);
  h->records_bytes = bc__load_u64le(h->map + 16);
  return 0;
}

int bc__crc_table_open(bc__crc_table *t, const char *path, uint64_t count,
                       uint64_t records_bytes) {
  memset(t, 0, sizeof *t);
  int rc = bc__file_open(&t->file, path, BC_CACHE_SYSTEM, BC_ACCESS_SYSTEM);
  if (rc != 0) return rc;
  if (t->file.size != BC__CRC_HEADER + 4 * count) {
    rc = bc__error(BC_ECORRUPT,
                   "%s: %llu bytes; a checksum table of %llu records has %llu",
                   path, (unsigned long long)t->file.size,
                   (unsigned long long)count,
                   (unsigned long long)(BC__CRC_HEADER + 4 * count));
  } else {
    header_args h = {t->file.map, 0, 0, false};
    rc = bc__guarded(read_header, &h, path);
    if (rc == 0 && (!h.magic_ok || h.count != count ||
                    h.records_bytes != records_bytes))
      rc = bc__error(BC_ECORRUPT,
                     "%s: not the checksum table of its Bagz file (%s, %llu "
                     "records of %llu bytes; the file has %llu of %llu)",
                     path, h.magic_ok ? "header" : "bad magic",
                     (unsigned long long)h.count,
                     (unsigned long long)h.records_bytes,
                     (unsigned long long)count,
                     (unsigned long long)records_bytes);
  }
  if (rc != 0) {
    bc__file_close(&t->file);
    return rc;
  }
  t->count = count;
  return 0;
}

void bc__crc_table_close(bc__crc_table *t) { bc__file_close(&t->file); }

static uint32_t recorded(const bc__crc_table *t, uint64_t i) {
  const unsigned char *p = t->file.map + BC__CRC_HEADER + 4 * i;
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}

static int mismatch(const bc__crc_table *t, uint64_t i, uint32_t got,
                    uint32_t want, const char *records_path) {
  return bc__error(BC_ECORRUPT,
                   "%s: record %llu: checksum mismatch (CRC-32C %08x, %08x "
                   "recorded in %s): its bytes changed on disk",
                   records_path, (unsigned long long)i, got, want,
                   t->file.path);
}

int bc__crc_table_check(const bc__crc_table *t, uint64_t i, const void *data,
                        size_t size, const char *records_path) {
  uint32_t want = recorded(t, i), got = bc__crc32c(0, data, size);
  return got == want ? 0 : mismatch(t, i, got, want, records_path);
}

int bc__crc_table_copy(const bc__crc_table *t, uint64_t i, void *dst,
                       const void *src, size_t size, const char *records_path) {
  uint32_t want = recorded(t, i), got = bc__crc32c_copy(0, dst, src, size);
  return got == want ? 0 : mismatch(t, i, got, want, records_path);
}
