/*
 * Shard files and their three read backends (chosen by cache policy):
 *   SYSTEM           the whole file mmapped read-only; reads are memcpy
 *   DROP_AFTER_READ  pread, then posix_fadvise(DONTNEED) of what was read
 *   DIRECT_IO        O_DIRECT preads through aligned bounce buffers
 * Every backend also keeps (or, for SYSTEM, needs no) plain descriptor for
 * small metadata reads (limits), which are never dropped from the cache.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bag/internal.h"

static int madvise_for(bc_access_pattern p) {
  return p == BC_ACCESS_RANDOM       ? MADV_RANDOM
         : p == BC_ACCESS_SEQUENTIAL ? MADV_SEQUENTIAL
                                     : MADV_NORMAL;
}

static int fadvise_for(bc_access_pattern p) {
  return p == BC_ACCESS_RANDOM       ? POSIX_FADV_RANDOM
         : p == BC_ACCESS_SEQUENTIAL ? POSIX_FADV_SEQUENTIAL
                                     : POSIX_FADV_NORMAL;
}

int bc__file_open(bc__file *f, const char *path, bc_cache_policy policy,
                  bc_access_pattern pattern) {
  memset(f, 0, sizeof *f);
  f->fd = -1;
  f->dio_fd = -1;
  f->policy = policy;
  int rc = 0;
  f->path = strdup(path);
  if (f->path == NULL) return bc__error(BC_ENOMEM, "out of memory");

  f->fd = open(path, O_RDONLY | O_CLOEXEC);
  if (f->fd < 0) {
    rc = bc__error_errno(errno, "%s: open", path);
    goto cleanup;
  }
  struct stat st;
  if (fstat(f->fd, &st) != 0) {
    rc = bc__error_errno(errno, "%s: stat", path);
    goto cleanup;
  }
  if (!S_ISREG(st.st_mode)) {
    rc = bc__error(BC_EINVAL, "%s: not a regular file", path);
    goto cleanup;
  }
  f->size = (uint64_t)st.st_size;
  f->dev = (uint64_t)st.st_dev;
  f->ino = (uint64_t)st.st_ino;

  if (policy == BC_CACHE_DIRECT_IO) {
    f->dio_fd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (f->dio_fd >= 0) f->dio_align = bc__dio_alignment(f->dio_fd, f->size);
    if (f->dio_align == 0) {
      int err = f->dio_fd < 0 ? errno : EINVAL;
      bc__notice("%s: direct I/O (O_DIRECT) not supported here (%s); "
                 "using drop-after-read instead", path, strerror(err));
      if (f->dio_fd >= 0) close(f->dio_fd);
      f->dio_fd = -1;
      f->policy = BC_CACHE_DROP_AFTER_READ;
    }
  }

  if (f->policy == BC_CACHE_SYSTEM) {
    if (f->size > 0) {
      if (f->size > (uint64_t)SIZE_MAX) {
        rc = bc__error(BC_EINVAL, "%s: too large to map", path);
        goto cleanup;
      }
      void *m = mmap(NULL, (size_t)f->size, PROT_READ, MAP_SHARED, f->fd, 0);
      if (m == MAP_FAILED) {
        rc = bc__error_errno(errno, "%s: mmap", path);
        goto cleanup;
      }
      f->map = m;
      bc__guard_install(); /* reads of the mapping become SIGBUS-safe */
      if (pattern != BC_ACCESS_SYSTEM)
        madvise(m, (size_t)f->size, madvise_for(pattern));
    }
    /* The mapping keeps the file alive; the descriptor is not needed. */
    close(f->fd);
    f->fd = -1;
  } else if (pattern != BC_ACCESS_SYSTEM) {
    posix_fadvise(f->fd, 0, 0, fadvise_for(pattern));
    if (f->dio_fd >= 0) posix_fadvise(f->dio_fd, 0, 0, fadvise_for(pattern));
  }
cleanup:
  if (rc != 0) bc__file_close(f);
  return rc;
}

void bc__file_close(bc__file *f) {
  if (f->map != NULL) munmap((void *)f->map, (size_t)f->size);
  if (f->fd >= 0) close(f->fd);
  if (f->dio_fd >= 0) close(f->dio_fd);
  free(f->path);
  memset(f, 0, sizeof *f);
  f->fd = -1;
  f->dio_fd = -1;
}

int bc__file_read_meta(const bc__file *f, uint64_t offset, void *dst,
                       size_t size) {
  if (f->map != NULL) {
    memcpy(dst, f->map + offset, size);
    return 0;
  }
  return bc__pread_all(f->fd, dst, size, offset, f->path);
}

int bc__file_read(const bc__file *f, uint64_t offset, void *dst, size_t size) {
  if (size == 0) return 0;
  switch (f->policy) {
    case BC_CACHE_SYSTEM:
      memcpy(dst, f->map + offset, size);
      return 0;
    case BC_CACHE_DIRECT_IO:
      return bc__dio_read(f, offset, dst, size);
    case BC_CACHE_DROP_AFTER_READ:
    default: {
      int rc = bc__pread_all(f->fd, dst, size, offset, f->path);
      /* Widen to whole pages: the kernel drops only fully covered pages. */
      uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
      uint64_t start = offset / page * page;
      uint64_t end = (offset + size + page - 1) / page * page;
      posix_fadvise(f->fd, (off_t)start, (off_t)(end - start),
                    POSIX_FADV_DONTNEED);
      return rc;
    }
  }
}
