/*
 * demo.c - bagcache in one page: write a small bag, read it back, look a
 * record up by its bytes.
 *
 *   demo DIR    writes DIR/demo.bag (plain) and DIR/demo.bagz (zstd), where
 *               DIR is created if missing, reads both back and prints what
 *               it did.  Exit status 0 on success, 1 on any failure.
 *
 * Outside the source tree, build it against an installed bagcache with
 *   cc demo.c $(pkg-config --cflags --libs bagcache) -o demo
 *
 * The README's C example is this file, shortened; `make check` runs it
 * (doc/examples/demo-test.sh), so the example cannot silently rot.
 */
#define _POSIX_C_SOURCE 200809L /* strdup, mkdir */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <bagcache.h>

/* The records: an empty one in the middle, and "banana" twice so the index
 * has a record with more than one position. */
static const char *const records[] = {"apple", "banana", "", "cherry",
                                      "banana"};
#define NRECORDS (sizeof records / sizeof records[0])

/* Prints "demo: WHAT: <description> (<detail>)" and returns 1, the exit
 * status.  bc_strerror() names the kind of failure, bc_errmsg() says which
 * file or record and why. */
static int fail(const char *what, int rc) {
  fprintf(stderr, "demo: %s: %s [%s] (%s)\n", what, bc_strerror(rc),
          bc_error_name(rc), bc_errmsg());
  return 1;
}

/* Prints a record as a quoted string (the demo's records are ASCII). */
static void print_record(const void *data, size_t size) {
  printf(" \"");
  if (size > 0) fwrite(data, 1, size, stdout);
  printf("\"");
}

/* mkdir -p: creates `dir` and any missing parents (mode 0777 & ~umask). */
static int make_dirs(const char *dir) {
  int status = 1;
  char *copy = strdup(dir);
  if (copy == NULL) {
    fprintf(stderr, "demo: out of memory\n");
    goto cleanup;
  }
  for (char *p = copy + 1;; p++) {
    if (*p != '/' && *p != '\0') continue;
    char saved = *p;
    *p = '\0';
    if (mkdir(copy, 0777) != 0 && errno != EEXIST) {
      fprintf(stderr, "demo: cannot create directory %s: %s\n", copy,
              strerror(errno));
      goto cleanup;
    }
    *p = saved;
    if (saved == '\0') break;
  }
  status = 0;
cleanup:
  free(copy);
  return status;
}

/* Writes every record to `path`.  The default options choose zstd when the
 * name ends in ".bagz"; the file appears under `path` only when
 * bc_writer_close() succeeds. */
static int write_bag(const char *path) {
  int status = 1;
  bc_writer *w = NULL;
  int rc = bc_writer_open(&w, path, NULL);
  if (rc != BC_OK) {
    status = fail("bc_writer_open", rc);
    goto cleanup;
  }
  for (size_t i = 0; i < NRECORDS; i++) {
    rc = bc_writer_write(w, records[i], strlen(records[i]));
    if (rc != BC_OK) {
      status = fail("bc_writer_write", rc);
      goto cleanup;
    }
  }
  rc = bc_writer_close(w);
  if (rc != BC_OK) {
    status = fail("bc_writer_close", rc);
    goto cleanup;
  }
  printf("wrote %s: %" PRIu64 " records, %" PRIu64 " bytes of records\n",
         path, bc_writer_count(w), bc_writer_records_bytes(w));
  status = 0;
cleanup:
  bc_writer_free(w); /* after a failure: deletes the unfinished file */
  return status;
}

/* Opens `path`, reads records one, many and (uncompressed only) zero-copy,
 * and looks "banana" up in an index. */
static int read_bag(const char *path) {
  int status = 1;
  bc_bag *bag = NULL;
  bc_index *index = NULL;
  bc_buf one = BC_BUF_INIT;
  static const uint64_t wanted[] = {4, 2, 0};
  bc_buf many[3] = {BC_BUF_INIT, BC_BUF_INIT, BC_BUF_INIT};

  int rc = bc_bag_open(&bag, path, NULL);
  if (rc != BC_OK) {
    status = fail("bc_bag_open", rc);
    goto cleanup;
  }
  bc_shard_info info;
  rc = bc_bag_shard_info(bag, 0, &info);
  if (rc != BC_OK) {
    status = fail("bc_bag_shard_info", rc);
    goto cleanup;
  }
  printf("read %s: %" PRIu64 " records, %" PRIu64 " bytes on disk (%s)\n",
         path, bc_bag_len(bag), info.file_bytes,
         info.compression == BC_COMPRESSION_ZSTD ? "zstd" : "uncompressed");

  rc = bc_bag_get(bag, 1, &one);
  if (rc != BC_OK) {
    status = fail("bc_bag_get", rc);
    goto cleanup;
  }
  printf("  get(1)          ");
  print_record(one.data, one.size);
  printf("\n");

  rc = bc_bag_get_many(bag, wanted, 3, many);
  if (rc != BC_OK) {
    status = fail("bc_bag_get_many", rc);
    goto cleanup;
  }
  printf("  get_many(4,2,0) ");
  for (size_t i = 0; i < 3; i++) print_record(many[i].data, many[i].size);
  printf("\n");

  /* Zero-copy reads point into the file mapping: uncompressed shards only. */
  if (info.compression == BC_COMPRESSION_NONE) {
    const void *data;
    size_t size;
    rc = bc_bag_get_view(bag, 3, &data, &size);
    if (rc != BC_OK) {
      status = fail("bc_bag_get_view", rc);
      goto cleanup;
    }
    printf("  get_view(3)     ");
    print_record(data, size);
    printf("\n");
  }

  /* The index borrows the bag: free it before closing the bag. */
  rc = bc_index_build(&index, bag, NULL, bc_bag_len(bag));
  if (rc != BC_OK) {
    status = fail("bc_index_build", rc);
    goto cleanup;
  }
  uint64_t first;
  const uint64_t *all;
  uint64_t count;
  rc = bc_index_first(index, "banana", 6, &first);
  if (rc == BC_OK) rc = bc_index_all(index, "banana", 6, &all, &count);
  if (rc != BC_OK) {
    status = fail("bc_index lookup", rc);
    goto cleanup;
  }
  printf("  index            %" PRIu64 " distinct; \"banana\" first at %" PRIu64
         ", all at",
         bc_index_distinct(index), first);
  for (uint64_t i = 0; i < count; i++) printf(" %" PRIu64, all[i]);
  printf("\n");
  status = 0;
cleanup:
  bc_index_free(index);
  bc_bag_close(bag);
  bc_buf_release(&one);
  for (size_t i = 0; i < 3; i++) bc_buf_release(&many[i]);
  return status;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  if (make_dirs(argv[1]) != 0) return 1;

  static const char *const names[] = {"demo.bag", "demo.bagz"};
  char path[4096];
  for (size_t i = 0; i < 2; i++) {
    int n = snprintf(path, sizeof path, "%s/%s", argv[1], names[i]);
    if (n < 0 || (size_t)n >= sizeof path) {
      fprintf(stderr, "demo: directory name too long\n");
      return 1;
    }
    if (write_bag(path) != 0 || read_bag(path) != 0) return 1;
  }
  return 0;
}
