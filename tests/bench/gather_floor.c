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
 *   floor_zstd_loader(srcs, lens, nbatches, batch, size, nthreads, ahead)
 *       the same frames with the DataLoader's memory kind and hand-off,
 *       still with no bagcache code and no Python: nthreads POSIX threads
 *       take batches in order (a mutex and conditions), never more than
 *       `ahead` ahead of the consumer (the DataLoader's prefetch_size +
 *       num_workers), each decompressing into memory
 *       from a LIFO free list (malloc'd when it is empty, 64-byte
 *       aligned); the calling thread consumes the batches in order and
 *       gives each one's memory back to the free list when the next one
 *       arrives (a training step dropping the previous batch).  So the
 *       batches in flight (up to `ahead` built or building, one held)
 *       each have memory of their own, as the DataLoader's do.  Returns 0,
 *       or as floor_zstd_threads.
 *   floor_zstd_bagz_loader(rows, firsts, bases, limits, nshards, nbatches,
 *                          batch, size, nthreads, ahead)
 *       floor_zstd_loader reading the .bagz files as any reader must: the
 *       batches are rows (global record numbers, batch after batch) of a
 *       sharded .bagz, shard s holding rows firsts[s] .. firsts[s+1] - 1,
 *       its file mapped at address bases[s] with its limits section (tail
 *       placement, little-endian, read in place) at address limits[s]; each
 *       row's frame is found by a binary search over firsts and two loads
 *       from the mapped limits, then decompressed as above.  Still no
 *       bagcache code: zstd alone from the .bagz.  Returns as
 *       floor_zstd_loader.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
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

/* Where the rows of a sharded .bagz are (floor_zstd_bagz_loader). */
typedef struct {
  const uint64_t *firsts, *bases, *limits;
  size_t nshards;
} bagz_layout;

/* Decompresses rows[0 .. count - 1] of the layout into dst, each frame by
 * floor_zstd once it is found: the same return values. */
static size_t floor_zstd_rows(const bagz_layout *b, const uint64_t *rows, size_t count,
                              size_t size, unsigned char *dst) {
  for (size_t k = 0; k < count; k++) {
    uint64_t row = rows[k];
    size_t lo = 0, hi = b->nshards; /* the shard s with firsts[s] <= row < firsts[s+1] */
    while (hi - lo > 1) {
      size_t mid = lo + (hi - lo) / 2;
      if (b->firsts[mid] <= row) lo = mid; else hi = mid;
    }
    if (row < b->firsts[lo] || row >= b->firsts[lo + 1]) return k + 1;
    const uint64_t *lim = (const uint64_t *)(uintptr_t)b->limits[lo];
    uint64_t i = row - b->firsts[lo];
    uint64_t begin = i > 0 ? lim[i - 1] : 0, end = lim[i];
    if (end < begin) return k + 1;
    uint64_t src = b->bases[lo] + begin, len = end - begin;
    if (floor_zstd(&src, &len, 1, size, dst + k * size) != 0) return k + 1;
  }
  return 0;
}

typedef struct {
  const uint64_t *srcs, *lens;
  const uint64_t *rows; /* or these: floor_zstd_bagz_loader */
  bagz_layout layout;
  size_t nbatches, batch, size, ahead;
  pthread_mutex_t lock; /* guards everything below */
  pthread_cond_t work, done;
  size_t handed, delivered;
  unsigned char **ready; /* ready[k % ahead]: batch k's memory once built */
  unsigned char **free_list;
  size_t nfree, bad;
} loader_job;

static void *loader_run(void *p) {
  loader_job *j = p;
  pthread_mutex_lock(&j->lock);
  for (;;) {
    while (j->handed < j->nbatches && j->handed >= j->delivered + j->ahead)
      pthread_cond_wait(&j->work, &j->lock);
    if (j->handed >= j->nbatches) break;
    size_t k = j->handed++;
    unsigned char *mem = j->nfree > 0 ? j->free_list[--j->nfree] : NULL;
    pthread_mutex_unlock(&j->lock);
    if (mem == NULL) mem = aligned_alloc(64, (j->batch * j->size + 63) / 64 * 64);
    size_t r = mem == NULL ? 1
               : j->rows != NULL
                   ? floor_zstd_rows(&j->layout, j->rows + k * j->batch, j->batch, j->size, mem)
                   : floor_zstd(j->srcs + k * j->batch, j->lens + k * j->batch, j->batch,
                                j->size, mem);
    pthread_mutex_lock(&j->lock);
    if (r != 0 && j->bad == 0) j->bad = k * j->batch + r;
    j->ready[k % j->ahead] = mem != NULL ? mem : (unsigned char *)&j->ready;
    pthread_cond_signal(&j->done);
  }
  pthread_mutex_unlock(&j->lock);
  return NULL;
}

static size_t run_loader(loader_job j, size_t nthreads) {
  size_t nbatches = j.nbatches, batch = j.batch;
  pthread_t tid[64];
  size_t started = 0;
  unsigned char *held = NULL;
  if (nthreads > 64) nthreads = 64;
  j.ready = calloc(j.ahead, sizeof *j.ready);
  j.free_list = calloc(j.ahead + nthreads + 1, sizeof *j.free_list);
  if (j.ready == NULL || j.free_list == NULL) {
    free(j.ready);
    free(j.free_list);
    return nbatches * batch + 1;
  }
  pthread_mutex_init(&j.lock, NULL);
  pthread_cond_init(&j.work, NULL);
  pthread_cond_init(&j.done, NULL);
  for (; started < nthreads; started++)
    if (pthread_create(&tid[started], NULL, loader_run, &j) != 0) break;
  pthread_mutex_lock(&j.lock);
  while (started > 0 && j.delivered < nbatches) { /* the consumer */
    unsigned char **slot = &j.ready[j.delivered % j.ahead];
    while (*slot == NULL) pthread_cond_wait(&j.done, &j.lock);
    unsigned char *got = *slot == (unsigned char *)&j.ready ? NULL : *slot;
    *slot = NULL;
    j.delivered++;
    pthread_cond_signal(&j.work);
    if (held != NULL) j.free_list[j.nfree++] = held; /* the previous batch dropped */
    held = got;
  }
  pthread_cond_broadcast(&j.work);
  pthread_mutex_unlock(&j.lock);
  for (size_t t = 0; t < started; t++) pthread_join(tid[t], NULL);
  free(held);
  while (j.nfree > 0) free(j.free_list[--j.nfree]);
  free(j.ready);
  free(j.free_list);
  pthread_mutex_destroy(&j.lock);
  pthread_cond_destroy(&j.work);
  pthread_cond_destroy(&j.done);
  if (started < nthreads && j.bad == 0) return nbatches * batch + 1;
  return j.bad;
}

size_t floor_zstd_loader(const uint64_t *srcs, const uint64_t *lens, size_t nbatches,
                         size_t batch, size_t size, size_t nthreads, size_t ahead) {
  loader_job j = {.srcs = srcs, .lens = lens, .nbatches = nbatches, .batch = batch,
                  .size = size, .ahead = ahead ? ahead : 1};
  return run_loader(j, nthreads);
}

size_t floor_zstd_bagz_loader(const uint64_t *rows, const uint64_t *firsts,
                              const uint64_t *bases, const uint64_t *limits, size_t nshards,
                              size_t nbatches, size_t batch, size_t size, size_t nthreads,
                              size_t ahead) {
  if (nshards == 0) return nbatches * batch > 0 ? 1 : 0;
  loader_job j = {.rows = rows, .layout = {firsts, bases, limits, nshards},
                  .nbatches = nbatches, .batch = batch, .size = size,
                  .ahead = ahead ? ahead : 1};
  return run_loader(j, nthreads);
}
