/*
 * tests/archive/test_archive_aggregates.c - the dirs table's aggregates
 * (num_subdirs, num_files, num_files_tree, size_tree) after random adds and
 * removes, compared with a plain reference model: with barecat's triggers
 * (use_triggers = 1) and with them off (use_triggers = 0, where
 * src/archive/index.c keeps them).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../testutil.h"
#include "common.h"

#define NPATHS 120
#define NOPS 900

/* Candidate file paths: a small tree, so adds and removes meet. */
static char *cand(int i) {
  return tu_format("%c/%c%d/%s%d", 'a' + i % 3, 'p' + i % 4, i % 2,
                   i % 5 == 0 ? "x/y/" : "", i);
}

typedef struct model {
  bool live[NPATHS];
  size_t size[NPATHS];
  /* Every directory ever made (barecat keeps empty ones). */
  char *dirs[4 * NPATHS + 1];
  size_t ndirs;
} model;

static void model_add_dirs(model *m, const char *path) {
  char *p = strdup(path);
  for (char *s = strrchr(p, '/'); ; s = strrchr(p, '/')) {
    bool have = false;
    if (s != NULL) *s = '\0';
    else p[0] = '\0';
    for (size_t i = 0; i < m->ndirs; i++) have |= strcmp(m->dirs[i], p) == 0;
    if (!have) m->dirs[m->ndirs++] = strdup(p);
    if (p[0] == '\0') break;
  }
  free(p);
}

/* Is `path` directly in (direct) or below directory `d`? */
static bool in_dir(const char *path, const char *d, bool direct) {
  size_t n = strlen(d);
  const char *rest;
  if (n == 0) rest = path;
  else if (strncmp(path, d, n) == 0 && path[n] == '/') rest = path + n + 1;
  else return false;
  return !direct || strchr(rest, '/') == NULL;
}

static void check(bc_archive *a, model *m) {
  for (size_t k = 0; k < m->ndirs; k++) {
    const char *d = m->dirs[k];
    bc_archive_dir_info di;
    uint64_t nf = 0, nft = 0, st = 0, nsd = 0;
    for (int i = 0; i < NPATHS; i++) {
      char *p;
      if (!m->live[i]) continue;
      p = cand(i);
      if (in_dir(p, d, true)) nf++;
      if (in_dir(p, d, false)) {
        nft++;
        st += m->size[i];
      }
      free(p);
    }
    for (size_t j = 0; j < m->ndirs; j++)
      if (m->dirs[j][0] != '\0' && in_dir(m->dirs[j], d, true)) nsd++;
    if (bc_archive_stat_dir(a, d, &di) != 0) fail_msg("dir '%s': %s", d, bc_errmsg());
    if (di.num_files != nf || di.num_files_tree != nft || di.size_tree != st ||
        di.num_subdirs != nsd)
      fail_msg("dir '%s': have %llu %llu %llu %llu, model %llu %llu %llu %llu", d,
               (unsigned long long)di.num_subdirs, (unsigned long long)di.num_files,
               (unsigned long long)di.num_files_tree,
               (unsigned long long)di.size_tree, (unsigned long long)nsd,
               (unsigned long long)nf, (unsigned long long)nft,
               (unsigned long long)st);
  }
}

static void run(bool triggers) {
  char *dir = tu_tempdir(), *path = tu_join(dir, "arch");
  bc_archive *a = ta_open_rw(path, 4096);
  model m;
  tu_rng rng;
  unsigned char buf[1000];
  memset(&m, 0, sizeof m);
  model_add_dirs(&m, "x");
  tu_rng_seed(&rng, triggers ? 1 : 2);
  if (!triggers) {
    assert_int_equal(bc_archive_close(a), 0);
    ta_sql(path, "UPDATE config SET value_int = 0 WHERE key = 'use_triggers'");
    a = ta_open_rw(path, 0);
  }
  for (int op = 0; op < NOPS; op++) {
    int i = (int)(tu_rng_next(&rng) % NPATHS);
    char *p = cand(i);
    if (m.live[i]) {
      assert_int_equal(bc_archive_remove(a, p), 0);
      m.live[i] = false;
    } else {
      size_t size = (size_t)(tu_rng_next(&rng) % sizeof buf);
      ta_content(p, size, buf);
      if (bc_archive_add(a, p, buf, size, NULL) != 0) fail_msg("%s", bc_errmsg());
      m.live[i] = true;
      m.size[i] = size;
      model_add_dirs(&m, p);
    }
    free(p);
    if (op % 97 == 0) check(a, &m);
    if (op % 301 == 0) {
      assert_int_equal(bc_archive_close(a), 0);
      a = ta_open_rw(path, 0);
    }
  }
  check(a, &m);
  assert_int_equal(bc_archive_verify(a), 0);
  assert_int_equal(bc_archive_close(a), 0);
  a = ta_open_ro(path);
  check(a, &m);
  assert_int_equal(bc_archive_verify(a), 0);
  assert_int_equal(bc_archive_close(a), 0);
  /* verify catches an aggregate that is off. */
  ta_sql(path, "UPDATE config SET value_int = 0 WHERE key = 'use_triggers';"
               "UPDATE dirs SET size_tree = size_tree + 1 WHERE path = 'b';");
  a = ta_open_ro(path);
  assert_int_equal(bc_archive_verify(a), BC_ECORRUPT);
  assert_non_null(strstr(bc_errmsg(), "directory 'b': size_tree"));
  assert_int_equal(bc_archive_close(a), 0);
  for (size_t k = 0; k < m.ndirs; k++) free(m.dirs[k]);
  tu_rmtree(dir);
  free(path);
  free(dir);
}

static void test_with_triggers(void **state) {
  (void)state;
  run(true);
}

static void test_without_triggers(void **state) {
  (void)state;
  run(false);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_with_triggers),
      cmocka_unit_test(test_without_triggers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
