/*
 * CRC-32C in three implementations, chosen once per process (crc32c.h).
 *
 * The cache checks a record's CRC on every read, so the checksum must cost
 * little next to a read of a 1 KiB record that is already in the page
 * cache (a few hundred nanoseconds from Python):
 *
 *   VPCLMUL   16 x 128-bit lanes of carry-less multiplies fold 256 bytes a
 *             step (about 50 cycles for 1 KiB); needs VPCLMULQDQ and
 *             AVX-512F (Ice Lake and later, Zen 4).
 *   SSE42     the crc32 instruction, 8 bytes per instruction in one chain
 *             (about 3 cycles per 8 bytes): every x86-64 since 2008.
 *   PORTABLE  slicing-by-8 tables: anything else.
 *
 * Notation.  CRC-32C is "reflected": the first bit of the message is the
 * lowest bit of its first byte and is the highest-degree coefficient.  A
 * 128-bit chunk X loaded little-endian therefore holds its first 64
 * message bits (H, the higher-degree half) in the low quadword and the
 * next 64 (L) in the high one; X = H x^64 + L.  The CRC register after a
 * message M, from state s, is (s x^|M| + M x^32) mod P.
 *
 * Folding.  A chunk X followed, D bits after its start, by a chunk Y may be
 * replaced by Y' = Y + (X x^D mod P) without changing the CRC of the
 * message from Y on.  X x^D = H x^(64+D) + L x^D, and a carry-less product
 * of two reflected 64-bit values lands one degree low, so
 *   Y' = Y xor clmul(H, k(D+63)) xor clmul(L, k(D-1)),
 * with k(e) = x^e mod P, bit-reflected and placed in the high half of a
 * quadword.  The constants are computed once at start (crc_init), not
 * copied from tables.  Once one chunk X is left at the end of what was
 * folded, the register is (X x^32) mod P: two crc32 instructions over X
 * with state 0.  The initial state is folded in by xoring it into the
 * message's first 32 bits.
 */
#include "config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "common/crc32c.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define BC_CRC_X86 1
#include <immintrin.h>
#endif

#define POLY_REFLECTED 0x82F63B78u
#define POLY_NORMAL 0x1EDC6F41u

/* ---- portable: slicing-by-8 --------------------------------------------- */

static uint32_t table[8][256];

static void table_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ POLY_REFLECTED : c >> 1;
    table[0][i] = c;
  }
  for (int k = 1; k < 8; k++)
    for (uint32_t i = 0; i < 256; i++)
      table[k][i] = (table[k - 1][i] >> 8) ^ table[0][table[k - 1][i] & 0xff];
}

/* `reg` is the CRC register (the inverted CRC), here and below. */
static uint32_t crc_portable(uint32_t reg, const unsigned char *p, size_t n) {
  while (n > 0 && ((uintptr_t)p & 7) != 0) {
    reg = (reg >> 8) ^ table[0][(reg ^ *p++) & 0xff];
    n--;
  }
  while (n >= 8) {
    /* Bytes in message order, whatever the host's byte order. */
    uint32_t lo = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                  (uint32_t)p[3] << 24;
    uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 |
                  (uint32_t)p[7] << 24;
    lo ^= reg;
    reg = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^
          table[5][(lo >> 16) & 0xff] ^ table[4][lo >> 24] ^
          table[3][hi & 0xff] ^ table[2][(hi >> 8) & 0xff] ^
          table[1][(hi >> 16) & 0xff] ^ table[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) reg = (reg >> 8) ^ table[0][(reg ^ *p++) & 0xff];
  return reg;
}

#ifdef BC_CRC_X86

/* ---- SSE4.2: the crc32 instruction ------------------------------------- */

__attribute__((target("sse4.2"))) static uint32_t
crc_sse42(uint32_t reg, const unsigned char *p, size_t n) {
  uint64_t r = reg;
  while (n >= 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    r = _mm_crc32_u64(r, v);
    p += 8;
    n -= 8;
  }
  uint32_t r32 = (uint32_t)r;
  while (n-- > 0) r32 = _mm_crc32_u8(r32, *p++);
  return r32;
}

/* ---- VPCLMULQDQ: folding ------------------------------------------------- */

/* Folding constants (see the top): K(D) = {k(D+63), k(D-1)} as the low and
 * high quadwords of a 128-bit lane, for the distances used. */
typedef struct {
  uint64_t lo, hi;
} fold_k;
static fold_k k128, k256, k384, k512, k1024, k1536, k2048;

static uint32_t xpow_mod(unsigned e) { /* x^e mod P, normal bit order */
  uint32_t r = 1;
  while (e-- > 0) r = r & 0x80000000u ? (r << 1) ^ POLY_NORMAL : r << 1;
  return r;
}

static uint32_t reflect32(uint32_t v) {
  uint32_t r = 0;
  for (int i = 0; i < 32; i++) r |= ((v >> i) & 1u) << (31 - i);
  return r;
}

static fold_k fold_const(unsigned d) {
  return (fold_k){(uint64_t)reflect32(xpow_mod(d + 63)) << 32,
                  (uint64_t)reflect32(xpow_mod(d - 1)) << 32};
}

#define VPCLMUL_TARGET "avx512f,vpclmulqdq,pclmul,sse4.2"

__attribute__((target(VPCLMUL_TARGET))) static inline __m512i
k512_of(fold_k k) {
  return _mm512_broadcast_i32x4(_mm_set_epi64x((long long)k.hi, (long long)k.lo));
}

/* x folded D bits forward (by k) and xored with y, lane by lane. */
__attribute__((target(VPCLMUL_TARGET))) static inline __m512i
fold512(__m512i x, __m512i k, __m512i y) {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00),
                                   _mm512_clmulepi64_epi128(x, k, 0x11), y,
                                   0x96); /* a ^ b ^ c */
}

__attribute__((target(VPCLMUL_TARGET))) static inline __m128i
fold128(__m128i x, fold_k k, __m128i y) {
  __m128i kk = _mm_set_epi64x((long long)k.hi, (long long)k.lo);
  return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, kk, 0x00),
                                     _mm_clmulepi64_si128(x, kk, 0x11)),
                       y);
}

/* Loads 64 bytes at p + off, and stores them at d + off when copying. */
__attribute__((target(VPCLMUL_TARGET))) static inline __m512i
load512(const unsigned char *p, unsigned char *d, size_t off) {
  __m512i v = _mm512_loadu_si512(p + off);
  if (d != NULL) _mm512_storeu_si512(d + off, v);
  return v;
}

/* The CRC register after p[0..n), from `reg`; when d is not NULL the bytes
 * are also copied to d[0..n), and the CRC is of exactly the bytes stored
 * (the registers folded are the registers stored, or the tail is summed
 * from d after it was copied), so bytes that change in p meanwhile cannot
 * pass unchecked. */
__attribute__((target(VPCLMUL_TARGET), always_inline)) static inline uint32_t
vpclmul_body(uint32_t reg, const unsigned char *p, unsigned char *d, size_t n) {
  if (n < 64) {
    if (d == NULL) return crc_sse42(reg, p, n);
    memcpy(d, p, n);
    return crc_sse42(reg, d, n);
  }
  __m512i init = _mm512_inserti32x4(_mm512_setzero_si512(),
                                    _mm_cvtsi32_si128((int)reg), 0);
  __m512i x;
  if (n >= 256) {
    __m512i x0 = _mm512_xor_si512(load512(p, d, 0), init);
    __m512i x1 = load512(p, d, 64);
    __m512i x2 = load512(p, d, 128);
    __m512i x3 = load512(p, d, 192);
    p += 256;
    d = d ? d + 256 : NULL;
    n -= 256;
    __m512i k = k512_of(k2048);
    while (n >= 256) {
      x0 = fold512(x0, k, load512(p, d, 0));
      x1 = fold512(x1, k, load512(p, d, 64));
      x2 = fold512(x2, k, load512(p, d, 128));
      x3 = fold512(x3, k, load512(p, d, 192));
      p += 256;
      d = d ? d + 256 : NULL;
      n -= 256;
    }
    /* Into x3's place, independently (one multiply's latency). */
    __m512i zero = _mm512_setzero_si512();
    x = _mm512_ternarylogic_epi64(fold512(x0, k512_of(k1536), x3),
                                  fold512(x1, k512_of(k1024), zero),
                                  fold512(x2, k512_of(k512), zero), 0x96);
  } else {
    x = _mm512_xor_si512(load512(p, d, 0), init);
    p += 64;
    d = d ? d + 64 : NULL;
    n -= 64;
  }
  __m512i k = k512_of(k512);
  while (n >= 64) {
    x = fold512(x, k, load512(p, d, 0));
    p += 64;
    d = d ? d + 64 : NULL;
    n -= 64;
  }
  /* Lanes 0..2 folded into lane 3's place. */
  __m512i kl = _mm512_set_epi64(0, 0, (long long)k128.hi, (long long)k128.lo,
                                (long long)k256.hi, (long long)k256.lo,
                                (long long)k384.hi, (long long)k384.lo);
  __m512i t = _mm512_xor_si512(_mm512_clmulepi64_epi128(x, kl, 0x00),
                               _mm512_clmulepi64_epi128(x, kl, 0x11));
  __m128i c = _mm_xor_si128(
      _mm_xor_si128(_mm512_extracti32x4_epi32(x, 3),
                    _mm512_extracti32x4_epi32(t, 0)),
      _mm_xor_si128(_mm512_extracti32x4_epi32(t, 1),
                    _mm512_extracti32x4_epi32(t, 2)));
  if (d != NULL) { /* the tail: copied first, then summed from the copy */
    memcpy(d, p, n);
    p = d;
  }
  while (n >= 16) {
    c = fold128(c, k128, _mm_loadu_si128((const __m128i *)p));
    p += 16;
    n -= 16;
  }
  uint64_t r = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(c));
  r = _mm_crc32_u64(r, (uint64_t)_mm_extract_epi64(c, 1));
  return crc_sse42((uint32_t)r, p, n);
}

__attribute__((target(VPCLMUL_TARGET))) static uint32_t
crc_vpclmul(uint32_t reg, const unsigned char *p, size_t n) {
  return vpclmul_body(reg, p, NULL, n);
}

__attribute__((target(VPCLMUL_TARGET))) static uint32_t
copy_vpclmul(uint32_t reg, unsigned char *d, const unsigned char *p, size_t n) {
  return vpclmul_body(reg, p, d, n);
}

#endif /* BC_CRC_X86 */

/* ---- dispatch ----------------------------------------------------------- */

typedef uint32_t (*crc_fn)(uint32_t reg, const unsigned char *p, size_t n);
typedef uint32_t (*copy_fn)(uint32_t reg, unsigned char *d,
                            const unsigned char *p, size_t n);
static crc_fn impls[BC__CRC32C_KINDS];
static _Atomic(crc_fn) chosen;
static copy_fn chosen_copy; /* NULL: memcpy, then chosen; set before chosen */
static bc__crc32c_kind chosen_kind;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
  table_init();
  impls[BC__CRC32C_PORTABLE] = crc_portable;
  bc__crc32c_kind best = BC__CRC32C_PORTABLE;
#ifdef BC_CRC_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("sse4.2")) {
    impls[BC__CRC32C_SSE42] = crc_sse42;
    best = BC__CRC32C_SSE42;
    if (__builtin_cpu_supports("pclmul") && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("vpclmulqdq")) {
      k128 = fold_const(128);
      k256 = fold_const(256);
      k384 = fold_const(384);
      k512 = fold_const(512);
      k1024 = fold_const(1024);
      k1536 = fold_const(1536);
      k2048 = fold_const(2048);
      impls[BC__CRC32C_VPCLMUL] = crc_vpclmul;
      chosen_copy = copy_vpclmul;
      best = BC__CRC32C_VPCLMUL;
    }
  }
#endif
  chosen_kind = best;
  atomic_store_explicit(&chosen, impls[best], memory_order_release);
}

static crc_fn get_impl(void) {
  crc_fn f = atomic_load_explicit(&chosen, memory_order_acquire);
  if (f == NULL) {
    pthread_once(&once, crc_init);
    f = atomic_load_explicit(&chosen, memory_order_acquire);
  }
  return f;
}

uint32_t bc__crc32c(uint32_t crc, const void *data, size_t size) {
  crc_fn f = get_impl();
  return ~f(~crc, data, size);
}

uint32_t bc__crc32c_copy(uint32_t crc, void *dst, const void *src, size_t size) {
  crc_fn f = get_impl(); /* its release store publishes chosen_copy */
  if (chosen_copy != NULL) return ~chosen_copy(~crc, dst, src, size);
  if (size > 0) memcpy(dst, src, size);
  return ~f(~crc, dst, size);
}

int bc__crc32c_with(bc__crc32c_kind kind, uint32_t crc, const void *data,
                    size_t size, uint32_t *out) {
  get_impl();
  if ((unsigned)kind >= BC__CRC32C_KINDS || impls[kind] == NULL) return false;
  *out = ~impls[kind](~crc, data, size);
  return true;
}

bc__crc32c_kind bc__crc32c_kind_in_use(void) {
  get_impl();
  return chosen_kind;
}
