/*
 * src/common/crc32c.h - CRC-32C (Castagnoli, reflected polynomial
 * 0x82F63B78, initial value and final xor 0xFFFFFFFF): the checksum of
 * iSCSI, ext4 and SSE4.2's crc32 instruction.  CRC32C("123456789") is
 * 0xE3069283.
 *
 * bc__crc32c picks its implementation once per process from what the CPU
 * offers: folding with carry-less multiplies over 512-bit vectors
 * (VPCLMULQDQ + AVX-512), else the SSE4.2 crc32 instruction, else a
 * portable slicing-by-8 table (crc32c.c says why each exists).  All of them
 * give the same values; the tests compare each with a bitwise reference.
 */
#ifndef BC_COMMON_CRC32C_H
#define BC_COMMON_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continues a CRC-32C: bc__crc32c(bc__crc32c(0, a, n), b, m) is the CRC of
 * a followed by b.  Start with 0. */
uint32_t bc__crc32c(uint32_t crc, const void *data, size_t size);

/* Copies src[0..size) to dst and returns bc__crc32c(crc, dst, size): the
 * CRC of exactly the bytes stored in dst, computed in the same pass where
 * the CPU allows (so a source that changes meanwhile cannot slip through:
 * what is checked is what was copied).  The ranges must not overlap. */
uint32_t bc__crc32c_copy(uint32_t crc, void *dst, const void *src, size_t size);

/* The implementations, for tests and benchmarks: each is 0 ("not on this
 * CPU") or usable.  BC__CRC32C_PORTABLE always is. */
typedef enum {
  BC__CRC32C_PORTABLE = 0, /* slicing-by-8 tables */
  BC__CRC32C_SSE42 = 1,    /* the crc32 instruction, 8 bytes at a time */
  BC__CRC32C_VPCLMUL = 2,  /* 512-bit carry-less multiply folding */
  BC__CRC32C_KINDS = 3
} bc__crc32c_kind;

/* bc__crc32c through implementation `kind`; returns false (and leaves *out
 * alone) when the CPU lacks it. */
int bc__crc32c_with(bc__crc32c_kind kind, uint32_t crc, const void *data,
                    size_t size, uint32_t *out);

/* The implementation bc__crc32c uses here. */
bc__crc32c_kind bc__crc32c_kind_in_use(void);

#endif /* BC_COMMON_CRC32C_H */
