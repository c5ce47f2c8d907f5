/*
 * tests/bench/gather_floor.c - the floors under a batch gather, in plain C
 * with no bagcache code: train_bench.py compiles it into a shared object
 * (cc -O2 -shared -fPIC ... -lzstd) and calls it through ctypes, which
 * releases the GIL.
 *
 *   floor_copy(srcs, count, size, dst)
 *       dst[k * size ..] = the size bytes at address srcs[k] (in a mapping
 *       of the file): one memcpy per row, the bare gather.
 *   floor_zstd(srcs, lens, count, size, dst)
 *       decompresses the zstd frame of lens[k] bytes at address srcs[k]
 *       into dst[k * size ..] with ZSTD_decompressDCtx and one context per
 *       thread (made on first use, kept until the process ends): zstd
 *       decompression alone, into the rows.  Returns 0, or the position + 1
 *       of a frame that did not decode to exactly `size` bytes.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <zstd.h>

void floor_copy(const uint64_t *srcs, size_t count, size_t size,
                unsigned char *dst) {
  for (size_t k = 0; k < count; k++)
    memcpy(dst + k * size, (const void *)(uintptr_t)srcs[k], size);
}

size_t floor_zstd(const uint64_t *srcs, const uint64_t *lens, size_t count,
                  size_t size, unsigned char *dst) {
  static _Thread_local ZSTD_DCtx *dctx;
  if (dctx == NULL && (dctx = ZSTD_createDCtx()) == NULL) return 1;
  for (size_t k = 0; k < count; k++) {
    size_t r = ZSTD_decompressDCtx(dctx, dst + k * size, size,
                                   (const void *)(uintptr_t)srcs[k],
                                   (size_t)lens[k]);
    if (r != size) return k + 1;
  }
  return 0;
}
