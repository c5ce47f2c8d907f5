/*
 * O_DIRECT reads.  Direct I/O needs the file offset, the length and the
 * memory buffer aligned to what the file system demands.  The alignment comes
 * from statx(STATX_DIOALIGN) where the kernel reports it, else from trial
 * reads that double the alignment until the kernel stops answering EINVAL.
 * Reads are widened to aligned bounds, go through an aligned bounce buffer in
 * chunks of at most CHUNK bytes, and the caller's range is copied out.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#if HAVE_DECL_STATX_DIOALIGN
#include <linux/stat.h>
#endif

#include "bag/internal.h"

#define CHUNK ((size_t)1 << 20)
#define MAX_ALIGN ((size_t)1 << 16)

static size_t statx_alignment(int fd) {
#if HAVE_DECL_STATX_DIOALIGN && defined(SYS_statx)
  struct statx stx;
  memset(&stx, 0, sizeof stx);
  if (syscall(SYS_statx, fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
      (stx.stx_mask & STATX_DIOALIGN) && stx.stx_dio_offset_align > 0) {
    size_t a = stx.stx_dio_offset_align;
    if (stx.stx_dio_mem_align > a) a = stx.stx_dio_mem_align;
    return a;
  }
#else
  BC__UNUSED(fd);
#endif
  return 0;
}

size_t bc__dio_alignment(int fd, uint64_t file_size) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t a = statx_alignment(fd);
  if (a != 0) return a < page ? page : a; /* memory alignment >= page: safe */
  if (file_size == 0) return page; /* nothing will ever be read */
  /* Probe: an aligned read at offset 0 must work (EINVAL = try larger). */
  for (a = page; a <= MAX_ALIGN; a *= 2) {
    void *buf = NULL;
    if (posix_memalign(&buf, a, a) != 0) return 0;
    ssize_t n = pread(fd, buf, a, 0);
    int err = errno;
    free(buf);
    if (n >= 0) return a;
    if (err != EINVAL) return 0;
  }
  return 0;
}

int bc__dio_read(const bc__file *f, uint64_t offset, void *dst, size_t size) {
  const uint64_t align = f->dio_align;
  unsigned char *out = dst;
  void *bounce = NULL;
  int rc = 0;
  if (posix_memalign(&bounce, align, CHUNK + 2 * align) != 0)
    return bc__error(BC_ENOMEM, "out of memory for a direct-I/O buffer");
  while (size > 0) {
    uint64_t start = offset / align * align;
    size_t skip = (size_t)(offset - start);
    size_t want = size < CHUNK ? size : CHUNK;
    size_t span = (skip + want + align - 1) / align * align;
    ssize_t n;
    do {
      n = pread(f->dio_fd, bounce, span, (off_t)start);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      rc = bc__error_errno(errno, "%s: direct read at offset %llu", f->path,
                           (unsigned long long)start);
      break;
    }
    /* A short read is fine past the end of file, but must cover the range. */
    if ((size_t)n < skip + want) {
      rc = bc__error(BC_ECORRUPT,
                     "%s: file ends before offset %llu (it shrank while open)",
                     f->path, (unsigned long long)(offset + want));
      break;
    }
    memcpy(out, (unsigned char *)bounce + skip, want);
    out += want;
    offset += want;
    size -= want;
  }
  free(bounce);
  return rc;
}
