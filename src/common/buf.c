/* Caller-owned growable byte buffers. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "common/internal.h"

void bc_buf_release(bc_buf *buf) {
  if (buf == NULL) return;
  free(buf->data);
  buf->data = NULL;
  buf->size = 0;
  buf->capacity = 0;
}

int bc__buf_reserve(bc_buf *buf, size_t n) {
  if (n <= buf->capacity && buf->data != NULL) return 0;
  /* Grow geometrically so a loop of growing records stays amortised O(1). */
  size_t cap = buf->capacity < 64 ? 64 : buf->capacity;
  while (cap < n) cap = cap > SIZE_MAX / 2 ? n : cap * 2;
  unsigned char *p = realloc(buf->data, cap);
  if (p == NULL)
    return bc__error(BC_ENOMEM, "cannot allocate a buffer of %zu bytes", cap);
  buf->data = p;
  buf->capacity = cap;
  return 0;
}

int bc__buf_set(bc_buf *buf, const void *data, size_t n) {
  int rc = bc__buf_reserve(buf, n);
  if (rc != 0) return rc;
  if (n > 0) memcpy(buf->data, data, n);
  buf->size = n;
  return 0;
}
