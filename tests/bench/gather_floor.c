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
 *   floor_zstd_threads(srcs, lens, nbatches, batch, size, bufs, nthreads)
 *       the same for nbatches batches of `batch` frames (srcs and lens hold
 *       them batch after batch) on nthreads POSIX threads taking batches
 *       in turn (an atomic counter), thread t decompressing every batch it
 *       takes into its own buffer bufs + t * batch * size, reused from
 *       batch to batch: zstd alone on nthreads threads with no Python and
 *       no allocation, the physical floor.  Returns 0, or the frame's
 *       position (batch * batch size + row) + 1 of a frame that did not
 *       decode to exactly `size` bytes (or nbatches * batch + 1 when a
 *       thread could not start).
 */
#include <pthread.h>
#include <stdatomic.h>
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

typedef struct {
  const uint64_t *srcs, *lens;
  size_t nbatches, batch, size;
  unsigned char *bufs;
  atomic_size_t next, bad; /* bad: 0, or the first failing position + 1 */
} threads_job;

typedef struct {
  threads_job *job;
  size_t t;
} threads_arg;

static void *threads_run(void *p) {
  threads_arg *a = p;
  threads_job *j = a->job;
  unsigned char *dst = j->bufs + a->t * j->batch * j->size;
  for (;;) {
    size_t k = atomic_fetch_add(&j->next, 1);
    if (k >= j->nbatches) break;
    size_t r = floor_zstd(j->srcs + k * j->batch, j->lens + k * j->batch, j->batch,
                          j->size, dst);
    if (r != 0) {
      size_t none = 0;
      atomic_compare_exchange_strong(&j->bad, &none, k * j->batch + r);
    }
  }
  return NULL;
}

size_t floor_zstd_threads(const uint64_t *srcs, const uint64_t *lens, size_t nbatches,
                          size_t batch, size_t size, unsigned char *bufs,
                          size_t nthreads) {
  threads_job j = {srcs, lens, nbatches, batch, size, bufs, 0, 0};
  pthread_t tid[64];
  threads_arg args[64];
  size_t started = 0;
  if (nthreads > 64) nthreads = 64;
  for (; started < nthreads; started++) {
    args[started] = (threads_arg){&j, started};
    if (pthread_create(&tid[started], NULL, threads_run, &args[started]) != 0) break;
  }
  for (size_t t = 0; t < started; t++) pthread_join(tid[t], NULL);
  if (started < nthreads && atomic_load(&j.bad) == 0) return nbatches * batch + 1;
  return atomic_load(&j.bad);
}
