/* Careful I/O: full writes and reads that retry EINTR and short transfers
 * and report failures with the file's name. */
#include "config.h"

#include <errno.h>
#include <unistd.h>

#include "common/internal.h"

ssize_t (*bc__write_hook)(int fd, const void *data, size_t size);

int bc__write_all(int fd, const void *data, size_t size, const char *what) {
  const unsigned char *p = data;
  while (size > 0) {
    ssize_t n = bc__write_hook ? bc__write_hook(fd, p, size)
                               : write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return bc__error_errno(errno, "%s: write", what);
    }
    if (n == 0) return bc__error(BC_EIO, "%s: write made no progress", what);
    p += n;
    size -= (size_t)n;
  }
  return 0;
}

int bc__pread_all(int fd, void *data, size_t size, uint64_t offset,
                  const char *what) {
  unsigned char *p = data;
  while (size > 0) {
    ssize_t n = pread(fd, p, size, (off_t)offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return bc__error_errno(errno, "%s: read at offset %llu", what,
                             (unsigned long long)offset);
    }
    if (n == 0)
      return bc__error(BC_ECORRUPT,
                       "%s: file ends before offset %llu (it shrank while open)",
                       what, (unsigned long long)offset);
    p += n;
    size -= (size_t)n;
    offset += (uint64_t)n;
  }
  return 0;
}
