/*
 * scratch.c - one reusable read buffer per thread for single-record reads
 * (r[i], loader[i]): the record is read into it with the GIL released and
 * copied into the bytes object (or unpickled) with the GIL held, so no
 * malloc/free per record.  Freed when the thread ends (a pthread key
 * destructor); a buffer grown past SCRATCH_KEEP is given back after use.
 */
#include <pthread.h>
#include <stdlib.h>

#include "bcpy.h"

#define SCRATCH_KEEP ((size_t)1 << 20)

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
