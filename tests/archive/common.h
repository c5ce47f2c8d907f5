/*
 * tests/archive/common.h - helpers shared by the archive tests: a
 * deterministic content generator and direct SQL on an archive's index.
 */
#ifndef BC_TESTS_ARCHIVE_COMMON_H
#define BC_TESTS_ARCHIVE_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "bagcache/archive.h"

/* Deterministic bytes for `name`: `size` bytes seeded by the name. */
void ta_content(const char *name, size_t size, unsigned char *out);
/* A size in [0, max] from the name (0 for every 7th seed value). */
size_t ta_size(const char *name, size_t max);
/* Opens ARCHIVE for writing with the given shard limit (0: default),
 * failing the test on error. */
bc_archive *ta_open_rw(const char *path, uint64_t limit);
bc_archive *ta_open_ro(const char *path);
/* Runs SQL on PATH-sqlite-index with the sqlite3 library directly. */
void ta_sql(const char *archive, const char *sql);
/* PATH-sqlite-index and PATH-shard-%05d, malloc'd. */
char *ta_index_path(const char *archive);
char *ta_shard_path(const char *archive, unsigned shard);

#endif
