/*
 * core/scratch.c - one reusable read buffer per thread for single-record reads
 * (r[i], loader[i]): the record is read into it with the GIL released and
 * copied into the bytes object (or unpickled) with the GIL held, so no
 * malloc/free per record.  Freed when the thread ends (a pthread key
 * destructor); a buffer grown past SCRATCH_KEEP is given back after use.
 *
 * The same for bulk reads (bcpy_stage): one staging area per thread, whose
 * record buffers keep their capacity from call to call.  Why: a bulk read
 * that malloc'd a buffer per record and freed them all at the end paid,
 * on every call, the allocation, a page fault where glibc had given the
 * memory back, and a second trip to memory for each record (written to the
 * buffer, read back much later into the bytes object).  Rounds of about
 * BCPY_STAGE_BYTES keep the staged records in the CPU cache until they are
 * copied out.  A thread that made bulk reads keeps its area until it ends:
 * 256 KiB of index and buffer arrays (BCPY_CHUNK entries, for LoadIt's
 * jobs) and at most BCPY_STAGE_KEEP bytes of record buffers.
 */
#include <pthread.h>
#include <stdlib.h>

#include "core/bcpy.h"

#define SCRATCH_KEEP ((size_t)1 << 20)
#define BCPY_STAGE_BYTES ((size_t)256 << 10)
#define BCPY_STAGE_KEEP ((size_t)1 << 20)
#define STAGE_MIN_ROUND 16

static pthread_key_t key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static bool key_ok;

static void free_buf(void *p) {
  bc_buf_release(p);
  free(p);
}

static void make_key(void) { key_ok = pthread_key_create(&key, free_buf) == 0; }

bc_buf *bcpy_scratch_take(bc_buf *fallback) {
  pthread_once(&key_once, make_key);
  bc_buf *b = key_ok ? pthread_getspecific(key) : NULL;
  if (b == NULL && key_ok && (b = calloc(1, sizeof *b)) != NULL &&
      pthread_setspecific(key, b) != 0) {
    free(b);
    b = NULL;
  }
  if (b == NULL) return fallback; /* out of memory: a one-off buffer */
  /* Nested use (a loads that reads records) must not share it. */
  pthread_setspecific(key, NULL);
  return b;
}

void bcpy_scratch_give(bc_buf *b, bc_buf *fallback) {
  if (b == fallback) {
    bc_buf_release(b);
    return;
  }
  if (b->capacity > SCRATCH_KEEP) bc_buf_release(b);
  b->size = 0;
  if (pthread_getspecific(key) == NULL && pthread_setspecific(key, b) == 0) return;
  free_buf(b); /* a nested use put one back first */
}

/* ---- staging areas of bulk reads ------------------------------------------ */

static pthread_key_t stage_key;
static pthread_once_t stage_once = PTHREAD_ONCE_INIT;
static bool stage_key_ok;

static void stage_free(void *p) {
  bcpy_stage *s = p;
  if (s == NULL) return;
  for (size_t k = 0; k < s->cap; k++) bc_buf_release(&s->bufs[k]);
  free(s->bufs);
  free(s->idx);
  free(s);
}

static void make_stage_key(void) {
  stage_key_ok = pthread_key_create(&stage_key, stage_free) == 0;
}

/* Plain malloc, not PyMem_Raw*: a thread's area is freed by the key's
 * destructor, after the interpreter may have gone. */
static bcpy_stage *stage_new(void) {
  bcpy_stage *s = calloc(1, sizeof *s);
  if (s == NULL) return NULL;
  s->cap = BCPY_CHUNK;
  s->round = STAGE_MIN_ROUND;
  s->idx = malloc(s->cap * sizeof *s->idx);
  s->bufs = calloc(s->cap, sizeof *s->bufs);
  if (s->idx == NULL || s->bufs == NULL) {
    stage_free(s);
    return NULL;
  }
  return s;
}

bcpy_stage *bcpy_stage_take(void) {
  pthread_once(&stage_once, make_stage_key);
  bcpy_stage *s = stage_key_ok ? pthread_getspecific(stage_key) : NULL;
  if (s != NULL) {
    pthread_setspecific(stage_key, NULL); /* in use: a nested call makes another */
    return s;
  }
  if ((s = stage_new()) == NULL) PyErr_NoMemory();
  return s;
}

size_t bcpy_stage_next(bcpy_stage *s, size_t left, bool whole) {
  size_t most = whole ? s->cap : s->round;
  size_t n = left < most ? left : most;
  if (n > s->used) s->used = n;
  return n;
}

void bcpy_stage_done(bcpy_stage *s, size_t n) {
  size_t bytes = 0;
  for (size_t k = 0; k < n; k++) bytes += s->bufs[k].size;
  size_t avg = n > 0 ? bytes / n : 0;
  size_t round = avg > 0 ? BCPY_STAGE_BYTES / avg : s->cap;
  s->round = round < STAGE_MIN_ROUND ? STAGE_MIN_ROUND : round > s->cap ? s->cap : round;
}

void bcpy_stage_give(bcpy_stage *s) {
  if (s == NULL) return;
  /* Buffers past the budget go back to the allocator (a round of large
   * records must not stay pinned to the thread). */
  size_t kept = 0, used = 0;
  for (size_t k = 0; k < s->used; k++) {
    bc_buf *b = &s->bufs[k];
    if (b->data == NULL) continue;
    if (kept + b->capacity > BCPY_STAGE_KEEP) {
      bc_buf_release(b);
    } else {
      kept += b->capacity;
      used = k + 1;
    }
    b->size = 0;
  }
  s->used = used;
  if (stage_key_ok && pthread_getspecific(stage_key) == NULL &&
      pthread_setspecific(stage_key, s) == 0)
    return;
  stage_free(s); /* a nested call gave one back first */
}
