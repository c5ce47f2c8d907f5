/*
 * test_crc32c: CRC-32C against published vectors and a bitwise reference,
 * through every implementation this CPU offers (crc32c.h), at every length
 * up to a few KiB and every start alignment, whole and in pieces.  And
 * XXH64 (the zstd content checksum) against the checksums zstd itself
 * writes.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "common/crc32c.h"
#include "common/internal.h"
#include "testutil.h"

/* One bit at a time, straight from the definition. */
static uint32_t reference(uint32_t crc, const unsigned char *p, size_t n) {
  uint32_t c = ~crc;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

static void test_known_vectors(void **state) {
  (void)state;
  assert_int_equal(bc__crc32c(0, "123456789", 9), 0xE3069283u);
  assert_int_equal(bc__crc32c(0, "", 0), 0);
  /* RFC 3720 (iSCSI), appendix B.4. */
  unsigned char buf[48];
  memset(buf, 0, 32);
  assert_int_equal(bc__crc32c(0, buf, 32), 0x8A9136AAu);
  memset(buf, 0xff, 32);
  assert_int_equal(bc__crc32c(0, buf, 32), 0x62A8AB43u);
  for (int i = 0; i < 32; i++) buf[i] = (unsigned char)i;
  assert_int_equal(bc__crc32c(0, buf, 32), 0x46DD794Eu);
  for (int i = 0; i < 32; i++) buf[i] = (unsigned char)(31 - i);
  assert_int_equal(bc__crc32c(0, buf, 32), 0x113FDB5Cu);
  static const unsigned char iscsi[48] = {
      0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
      0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
  assert_int_equal(bc__crc32c(0, iscsi, 48), 0xD9963A56u);
  for (int k = 0; k < BC__CRC32C_KINDS; k++) {
    uint32_t got;
    if (bc__crc32c_with((bc__crc32c_kind)k, 0, "123456789", 9, &got))
      assert_int_equal(got, 0xE3069283u);
  }
}

/* Every implementation agrees with the reference at every length to 4200
 * bytes (past every folding step: 16, 64, 256 bytes and their tails), from
 * every alignment, with a non-zero starting CRC, and chained in pieces. */
static void test_every_length_and_kind(void **state) {
  (void)state;
  enum { MAX = 4200 };
  unsigned char *buf = malloc(MAX + 64);
  assert_non_null(buf);
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  for (size_t i = 0; i < MAX + 64; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    buf[i] = (unsigned char)x;
  }
  int kinds = 0;
  for (int k = 0; k < BC__CRC32C_KINDS; k++) {
    uint32_t probe;
    if (!bc__crc32c_with((bc__crc32c_kind)k, 0, buf, 1, &probe)) continue;
    kinds++;
    for (size_t n = 0; n <= MAX; n++) {
      size_t off = n % 61; /* varied alignments */
      uint32_t seed = n % 3 == 0 ? 0 : (uint32_t)(n * 2654435761u);
      uint32_t want = reference(seed, buf + off, n), got = 0;
      assert_true(bc__crc32c_with((bc__crc32c_kind)k, seed, buf + off, n, &got));
      if (got != want)
        fail_msg("kind %d, %zu bytes at +%zu, seed %08x: %08x, want %08x", k, n,
                 off, seed, got, want);
      if (n % 97 == 0) { /* in two pieces */
        size_t cut = n / 3;
        uint32_t a = 0, b = 0;
        assert_true(bc__crc32c_with((bc__crc32c_kind)k, seed, buf + off, cut, &a));
        assert_true(bc__crc32c_with((bc__crc32c_kind)k, a, buf + off + cut,
                                    n - cut, &b));
        assert_int_equal(b, want);
      }
    }
  }
  assert_true(kinds >= 1);
  /* The one in use is one of those tested, and gives the same values. */
  uint32_t any = 0;
  assert_true(bc__crc32c_with(bc__crc32c_kind_in_use(), 0, buf, 1000, &any));
  assert_int_equal(bc__crc32c(0, buf, 1000), any);
  assert_int_equal(any, reference(0, buf, 1000));
  free(buf);
}

/* bc__crc32c_copy copies exactly and returns the CRC of the copy, at every
 * length and alignment of source and destination, leaving the bytes around
 * the destination alone. */
static void test_copy(void **state) {
  (void)state;
  enum { MAX = 2100 };
  unsigned char *src = malloc(MAX + 64), *dst = malloc(MAX + 128);
  assert_non_null(src);
  assert_non_null(dst);
  uint64_t x = 0x2545F4914F6CDD1DULL;
  for (size_t i = 0; i < MAX + 64; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    src[i] = (unsigned char)x;
  }
  for (size_t n = 0; n <= MAX; n++) {
    size_t so = n % 37, d = 64 + n % 29;
    memset(dst, 0xa5, MAX + 128);
    uint32_t seed = (uint32_t)n * 40503u;
    uint32_t got = bc__crc32c_copy(seed, dst + d, src + so, n);
    assert_int_equal(got, reference(seed, src + so, n));
    if (memcmp(dst + d, src + so, n) != 0) fail_msg("%zu bytes: bad copy", n);
    for (size_t k = 0; k < d; k++) assert_int_equal(dst[k], 0xa5);
    for (size_t k = d + n; k < MAX + 128; k++) assert_int_equal(dst[k], 0xa5);
  }
  free(src);
  free(dst);
}

/* A single flipped bit anywhere in a 1 KiB record changes the CRC. */
static void test_detects_every_single_bit_flip(void **state) {
  (void)state;
  unsigned char rec[1024];
  for (size_t i = 0; i < sizeof rec; i++) rec[i] = (unsigned char)(i * 7 + 3);
  uint32_t good = bc__crc32c(0, rec, sizeof rec);
  for (size_t bit = 0; bit < 8 * sizeof rec; bit++) {
    rec[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    assert_int_not_equal(bc__crc32c(0, rec, sizeof rec), good);
    rec[bit / 8] ^= (unsigned char)(1u << (bit % 8));
  }
}

/* XXH64: published values, and the low 32 bits zstd appends to a frame
 * with content checksums, at every length to 1100 bytes. */
static void test_xxh64(void **state) {
  (void)state;
  assert_true(bc__xxh64("", 0, 0) == 0xEF46DB3751D8E999ULL);
  assert_true(bc__xxh64("abc", 3, 0) == 0x44BC2CF5AD770999ULL);
  enum { MAX = 1100 };
  unsigned char src[MAX];
  for (size_t i = 0; i < MAX; i++) src[i] = (unsigned char)(i * 131 + (i >> 3));
  ZSTD_CCtx *cctx = ZSTD_createCCtx();
  assert_non_null(cctx);
  assert_false(ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1)));
  size_t cap = ZSTD_compressBound(MAX);
  unsigned char *dst = malloc(cap);
  assert_non_null(dst);
  for (size_t n = 0; n <= MAX; n++) {
    size_t z = ZSTD_compress2(cctx, dst, cap, src, n);
    assert_false(ZSTD_isError(z));
    uint32_t want = (uint32_t)dst[z - 4] | (uint32_t)dst[z - 3] << 8 |
                    (uint32_t)dst[z - 2] << 16 | (uint32_t)dst[z - 1] << 24;
    if ((uint32_t)bc__xxh64(src, n, 0) != want)
      fail_msg("%zu bytes: xxh64 %08x, zstd's checksum %08x", n,
               (uint32_t)bc__xxh64(src, n, 0), want);
  }
  free(dst);
  ZSTD_freeCCtx(cctx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_known_vectors),
      cmocka_unit_test(test_every_length_and_kind),
      cmocka_unit_test(test_copy),
      cmocka_unit_test(test_detects_every_single_bit_flip),
      cmocka_unit_test(test_xxh64),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
