/*
 * test_spec: file specs - comma lists, PREFIX@N and PREFIX@* expansion,
 * "posix:" prefixes, separate limits per element - both through
 * bc__spec_expand directly and through bc_bag_open, plus bc_limits_path.
 *
 * bagz has three spec bugs (bagz-spec.md section 2.1): "@*" only works as
 * the last element, SEPARATE with "@*" fails, and SEPARATE with a comma list
 * pairs records with the wrong limits files.  None may be reproduced here.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bag/internal.h"
#include "testutil.h"

/* ---- bc__spec_expand ------------------------------------------------------ */

typedef struct expansion {
  bc__shard_path *paths;
  size_t count;
} expansion;

static expansion expand(const char *spec, bool separate) {
  expansion e = {NULL, 0};
  TU_OK(bc__spec_expand(spec, separate, &e.paths, &e.count));
  return e;
}

static void expect_paths(const char *spec, bool separate, const char *const *want,
                         const char *const *want_limits, size_t n) {
  expansion e = expand(spec, separate);
  if (e.count != n)
    fail_msg("spec \"%s\": %zu paths, expected %zu", spec, e.count, n);
  for (size_t i = 0; i < n; i++) {
    assert_string_equal(e.paths[i].records, want[i]);
    if (separate) {
      assert_non_null(e.paths[i].limits);
      assert_string_equal(e.paths[i].limits, want_limits[i]);
    } else {
      assert_null(e.paths[i].limits);
    }
  }
  bc__spec_free(e.paths, e.count);
}

static void expect_one(const char *spec, const char *want) {
  const char *w[] = {want};
  expect_paths(spec, false, w, NULL, 1);
}

static void test_expand_plain_and_lists(void **state) {
  (void)state;
  expect_one("a.bag", "a.bag");
  expect_one("/x/y/a.bagz", "/x/y/a.bagz");
  const char *ab[] = {"a.bag", "b.bag"};
  expect_paths("a.bag,b.bag", false, ab, NULL, 2);
  /* Empty elements are skipped wherever they are. */
  expect_paths("a.bag,,b.bag,", false, ab, NULL, 2);
  expect_paths(",a.bag,b.bag", false, ab, NULL, 2);
  expect_paths(",,a.bag,,,b.bag,,", false, ab, NULL, 2);

  expansion e = expand("", false);
  assert_int_equal(e.count, 0);
  bc__spec_free(e.paths, e.count);
  e = expand(",,,", false);
  assert_int_equal(e.count, 0);
  bc__spec_free(e.paths, e.count);
}

static void test_expand_at_n(void **state) {
  (void)state;
  const char *four[] = {"d/x-00000-of-00004.bag", "d/x-00001-of-00004.bag",
                        "d/x-00002-of-00004.bag", "d/x-00003-of-00004.bag"};
  const char *four_limits[] = {
      "d/limits.x-00000-of-00004.bag", "d/limits.x-00001-of-00004.bag",
      "d/limits.x-00002-of-00004.bag", "d/limits.x-00003-of-00004.bag"};
  expect_paths("d/x@4.bag", false, four, NULL, 4);
  expect_paths("d/x@04.bag", false, four, NULL, 4);
  expect_paths("d/x@00004.bag", false, four, NULL, 4);
  expect_paths("d/x@4.bag", true, four, four_limits, 4);

  /* No suffix; one shard; a suffix that is not an extension. */
  const char *nosuf[] = {"x-00000-of-00002", "x-00001-of-00002"};
  expect_paths("x@2", false, nosuf, NULL, 2);
  expect_one("x@1.bagz", "x-00000-of-00001.bagz");
  const char *odd[] = {"x-00000-of-00002-tail.data", "x-00001-of-00002-tail.data"};
  expect_paths("x@2-tail.data", false, odd, NULL, 2);

  /* Inside a list, each element expands on its own, in order. */
  const char *mixed[] = {"a.bag", "p-00000-of-00002.bag", "p-00001-of-00002.bag",
                         "q-00000-of-00001.bagz", "z.bag"};
  expect_paths("a.bag,p@2.bag,,q@1.bagz,z.bag", false, mixed, NULL, 5);

  /* The largest count. */
  expansion e = expand("big@99999.bag", false);
  assert_int_equal(e.count, 99999);
  assert_string_equal(e.paths[0].records, "big-00000-of-99999.bag");
  assert_string_equal(e.paths[12345].records, "big-12345-of-99999.bag");
  assert_string_equal(e.paths[99998].records, "big-99998-of-99999.bag");
  bc__spec_free(e.paths, e.count);
}

static void test_expand_literal_at(void **state) {
  (void)state;
  /* "@" without a valid count (1..99999) stays in the file name. */
  expect_one("d/x@0.bag", "d/x@0.bag");
  expect_one("d/x@00000.bag", "d/x@00000.bag");
  expect_one("d/x@100000.bag", "d/x@100000.bag");
  expect_one("d/x@x.bag", "d/x@x.bag");
  expect_one("d/x@.bag", "d/x@.bag");
  expect_one("d/x@", "d/x@");
  /* An "@" before the last "/" belongs to a directory name. */
  expect_one("d@2/x.bag", "d@2/x.bag");
  /* Only the first "@" after the last "/" is considered. */
  expect_one("d/x@y@3.bag", "d/x@y@3.bag");
  const char *two[] = {"d@9/x-00000-of-00002.bag", "d@9/x-00001-of-00002.bag"};
  expect_paths("d@9/x@2.bag", false, two, NULL, 2);
}

static void test_expand_posix_prefix(void **state) {
  (void)state;
  expect_one("posix:/tmp/a.bag", "/tmp/a.bag");
  expect_one("/posix:/tmp/a.bag", "/tmp/a.bag");
  expect_one("posix:rel/a.bag", "rel/a.bag");
  const char *l[] = {"/tmp/a.bag", "b.bag", "/c/d-00000-of-00001.bag"};
  expect_paths("posix:/tmp/a.bag,b.bag,/posix:/c/d@1.bag", false, l, NULL, 3);
  const char *lim[] = {"/tmp/limits.a.bag"};
  const char *rec[] = {"/tmp/a.bag"};
  expect_paths("posix:/tmp/a.bag", true, rec, lim, 1);
}

static void test_expand_separate_list(void **state) {
  (void)state;
  /* bagz bug 3 pairs "d/a.bag" with itself; every element gets its own. */
  const char *rec[] = {"d/a.bag", "d/b.bag", "e/c-00000-of-00002.bagz",
                       "e/c-00001-of-00002.bagz", "f.bag"};
  const char *lim[] = {"d/limits.a.bag", "d/limits.b.bag",
                       "e/limits.c-00000-of-00002.bagz",
                       "e/limits.c-00001-of-00002.bagz", "limits.f.bag"};
  expect_paths("d/a.bag,d/b.bag,e/c@2.bagz,f.bag", true, rec, lim, 5);
}

/* Creates DIR/NAME as a valid bag holding `recs`. */
static void put_bag(const char *dir, const char *name,
                    const bc_writer_options *wo, const tu_records *recs) {
  char *p = tu_join(dir, name);
  tu_write_bag(p, wo, recs);
  free(p);
}

static void test_expand_glob(void **state) {
  (void)state;
  char *dir = tu_tempdir();
  tu_records one = {0};
  tu_records_labelled(&one, "g", 1);
  put_bag(dir, "g-00000-of-00003.bag", NULL, &one);
  put_bag(dir, "h-00000-of-00002.bag", NULL, &one);
  /* Two candidate counts: the lexicographically last (00005) wins. */
  put_bag(dir, "m-00000-of-00003.bag", NULL, &one);
  put_bag(dir, "m-00000-of-00005.bag", NULL, &one);

  char *spec = tu_format("%s/g@*.bag", dir);
  expansion e = expand(spec, false);
  assert_int_equal(e.count, 3);
  for (size_t i = 0; i < 3; i++) {
    char *want = tu_format("%s/g-%05zu-of-00003.bag", dir, i);
    assert_string_equal(e.paths[i].records, want);
    free(want);
  }
  bc__spec_free(e.paths, e.count);
  free(spec);

  /* "@*" in every element of a list (bagz bug 1), with separate limits
   * (bagz bug 2). */
  spec = tu_format("%s/g@*.bag,%s/h@*.bag,,%s/m@*.bag", dir, dir, dir);
  e = expand(spec, true);
  assert_int_equal(e.count, 3 + 2 + 5);
  size_t k = 0;
  const struct {
    const char *name;
    size_t n;
  } parts[] = {{"g", 3}, {"h", 2}, {"m", 5}};
  for (size_t p = 0; p < 3; p++)
    for (size_t i = 0; i < parts[p].n; i++, k++) {
      char *want = tu_format("%s/%s-%05zu-of-%05zu.bag", dir, parts[p].name, i,
                             parts[p].n);
      char *want_l = tu_format("%s/limits.%s-%05zu-of-%05zu.bag", dir,
                               parts[p].name, i, parts[p].n);
      assert_string_equal(e.paths[k].records, want);
      assert_string_equal(e.paths[k].limits, want_l);
      free(want);
      free(want_l);
    }
  bc__spec_free(e.paths, e.count);
  free(spec);

  /* No shard 00000: not found. */
  spec = tu_format("%s/nothing@*.bag", dir);
  bc__shard_path *paths = NULL;
  size_t count = 0;
  TU_RC(bc__spec_expand(spec, false, &paths, &count), BC_ENOTFOUND);
  free(spec);

  tu_records_free(&one);
  tu_rmtree(dir);
  free(dir);
}

/* ---- through bc_bag_open -------------------------------------------------- */

static void check_open(const char *spec, const bc_reader_options *ro,
                       const tu_records *want, size_t want_shards) {
  bc_bag *bag = NULL;
  TU_OK(bc_bag_open(&bag, spec, ro));
  assert_int_equal(bc_bag_shard_count(bag), want_shards);
  tu_check_bag(bag, want);
  bc_bag_close(bag);
}

/* A directory holding: a@3.bag (tail), b@2.bag (separate), c.bag (tail),
 * d.bag (separate) with distinct records; `all` gets the records of
 * a, c (the tail files) and `sep` those of b, d. */
typedef struct fixture {
  char *dir;
  tu_records a[3], b[2], c, d;
} fixture;

static void make_fixture(fixture *f) {
  memset(f, 0, sizeof *f);
  f->dir = tu_tempdir();
  bc_writer_options sep = BC_WRITER_OPTIONS_INIT;
  sep.limits_placement = BC_LIMITS_SEPARATE;
  for (size_t i = 0; i < 3; i++) {
    char label[16], name[64];
    snprintf(label, sizeof label, "a%zu", i);
    tu_records_labelled(&f->a[i], label, i + 2);
    snprintf(name, sizeof name, "a-%05zu-of-00003.bag", i);
    put_bag(f->dir, name, NULL, &f->a[i]);
  }
  for (size_t i = 0; i < 2; i++) {
    char label[16], name[64];
    snprintf(label, sizeof label, "b%zu", i);
    tu_records_labelled(&f->b[i], label, 3 - i);
    snprintf(name, sizeof name, "b-%05zu-of-00002.bag", i);
    put_bag(f->dir, name, &sep, &f->b[i]);
  }
  tu_records_labelled(&f->c, "c", 4);
  put_bag(f->dir, "c.bag", NULL, &f->c);
  /* d's records file is as long as its limits file would be, so reading
   * one as the other would not fail by size alone. */
  tu_records_labelled(&f->d, "ddddd", 3); /* 3 x 8 bytes */
  put_bag(f->dir, "d.bag", &sep, &f->d);
}

static void free_fixture(fixture *f) {
  for (size_t i = 0; i < 3; i++) tu_records_free(&f->a[i]);
  for (size_t i = 0; i < 2; i++) tu_records_free(&f->b[i]);
  tu_records_free(&f->c);
  tu_records_free(&f->d);
  tu_rmtree(f->dir);
  free(f->dir);
}

static void append_all(tu_records *dst, const tu_records *src) {
  for (size_t i = 0; i < src->count; i++)
    tu_records_add(dst, src->data[i], src->size[i]);
}

static void test_open_forms(void **state) {
  (void)state;
  fixture f;
  make_fixture(&f);
  tu_records want = {0};
  for (size_t i = 0; i < 3; i++) append_all(&want, &f.a[i]);

  char *spec = tu_format("%s/a@3.bag", f.dir);
  check_open(spec, NULL, &want, 3);
  free(spec);
  spec = tu_format("%s/a@03.bag", f.dir);
  check_open(spec, NULL, &want, 3);
  free(spec);
  spec = tu_format("%s/a@*.bag", f.dir);
  check_open(spec, NULL, &want, 3);
  free(spec);
  spec = tu_format("posix:%s/a@3.bag", f.dir);
  check_open(spec, NULL, &want, 3);
  free(spec);
  spec = tu_format("/posix:%s/a@*.bag", f.dir);
  check_open(spec, NULL, &want, 3);
  free(spec);
  spec = tu_format(",%s/a-00000-of-00003.bag,,%s/a-00001-of-00003.bag,"
                   "%s/a-00002-of-00003.bag,",
                   f.dir, f.dir, f.dir);
  check_open(spec, NULL, &want, 3);
  free(spec);

  /* "@*" inside a list, twice (bagz bug 1). */
  append_all(&want, &f.c);
  for (size_t i = 0; i < 3; i++) append_all(&want, &f.a[i]);
  spec = tu_format("%s/a@*.bag,%s/c.bag,posix:%s/a@*.bag", f.dir, f.dir, f.dir);
  check_open(spec, NULL, &want, 7);
  free(spec);
  tu_records_free(&want);

  /* The empty spec is an empty bag. */
  bc_bag *bag = NULL;
  TU_OK(bc_bag_open(&bag, "", NULL));
  assert_int_equal(bc_bag_len(bag), 0);
  assert_int_equal(bc_bag_shard_count(bag), 0);
  bc_buf buf = BC_BUF_INIT;
  TU_RC(bc_bag_get(bag, 0, &buf), BC_ERANGE);
  TU_OK(bc_bag_verify(bag, NULL));
  bc_bag_close(bag);
  bag = NULL;
  TU_OK(bc_bag_open(&bag, ",,", NULL));
  assert_int_equal(bc_bag_shard_count(bag), 0);
  bc_bag_close(bag);
  free_fixture(&f);
}

static void test_open_separate(void **state) {
  (void)state;
  fixture f;
  make_fixture(&f);
  bc_reader_options ro = BC_READER_OPTIONS_INIT;
  ro.limits_placement = BC_LIMITS_SEPARATE;
  tu_records want = {0};
  append_all(&want, &f.b[0]);
  append_all(&want, &f.b[1]);

  char *spec = tu_format("%s/b@2.bag", f.dir);
  check_open(spec, &ro, &want, 2);
  free(spec);
  /* bagz bug 2: SEPARATE with "@*". */
  spec = tu_format("%s/b@*.bag", f.dir);
  check_open(spec, &ro, &want, 2);
  free(spec);

  /* bagz bug 3: a comma list with separate limits must pair each records
   * file with its own limits file. */
  spec = tu_format("%s/b-00000-of-00002.bag,%s/b@*.bag,%s/d.bag", f.dir, f.dir,
                   f.dir);
  tu_records want3 = {0};
  append_all(&want3, &f.b[0]);
  append_all(&want3, &f.b[0]);
  append_all(&want3, &f.b[1]);
  append_all(&want3, &f.d);
  check_open(spec, &ro, &want3, 4);
  free(spec);
  tu_records_free(&want3);

  spec = tu_format("%s/d.bag,%s/b@2.bag", f.dir, f.dir);
  tu_records want4 = {0};
  append_all(&want4, &f.d);
  append_all(&want4, &f.b[0]);
  append_all(&want4, &f.b[1]);
  check_open(spec, &ro, &want4, 3);
  tu_records_free(&want4);
  free(spec);

  bc_bag *bag = NULL;
  spec = tu_format("%s/d.bag", f.dir);
  TU_OK(bc_bag_open(&bag, spec, &ro));
  free(spec);
  bc_shard_info info;
  TU_OK(bc_bag_shard_info(bag, 0, &info));
  char *lim = tu_format("%s/limits.d.bag", f.dir);
  assert_string_equal(info.limits_path, lim);
  assert_int_equal(info.records, f.d.count);
  TU_RC(bc_bag_shard_info(bag, 1, &info), BC_ERANGE);
  free(lim);
  bc_bag_close(bag);

  tu_records_free(&want);
  free_fixture(&f);
}

static void test_open_missing(void **state) {
  (void)state;
  fixture f;
  make_fixture(&f);
  bc_bag *bag = NULL;
  char *spec;

  spec = tu_format("%s/nope.bag", f.dir);
  TU_RC(bc_bag_open(&bag, spec, NULL), BC_ENOTFOUND);
  assert_null(bag);
  free(spec);
  /* One missing element fails the whole list. */
  spec = tu_format("%s/c.bag,%s/nope.bag", f.dir, f.dir);
  TU_RC(bc_bag_open(&bag, spec, NULL), BC_ENOTFOUND);
  free(spec);
  /* a@4: shard 3 of 4 does not exist. */
  spec = tu_format("%s/a@4.bag", f.dir);
  TU_RC(bc_bag_open(&bag, spec, NULL), BC_ENOTFOUND);
  free(spec);
  spec = tu_format("%s/nope@*.bag", f.dir);
  TU_RC(bc_bag_open(&bag, spec, NULL), BC_ENOTFOUND);
  free(spec);
  /* A tail file opened with SEPARATE has no limits file. */
  bc_reader_options ro = BC_READER_OPTIONS_INIT;
  ro.limits_placement = BC_LIMITS_SEPARATE;
  spec = tu_format("%s/c.bag", f.dir);
  TU_RC(bc_bag_open(&bag, spec, &ro), BC_ENOTFOUND);
  free(spec);
  /* "@0", "@100000", "@x" are literal names, which do not exist. */
  const char *literal[] = {"a@0.bag", "a@100000.bag", "a@x.bag"};
  for (size_t i = 0; i < 3; i++) {
    spec = tu_join(f.dir, literal[i]);
    TU_RC(bc_bag_open(&bag, spec, NULL), BC_ENOTFOUND);
    assert_null(bag);
    free(spec);
  }
  /* ... and open when a file by that literal name exists. */
  tu_records r = {0};
  tu_records_labelled(&r, "lit", 2);
  for (size_t i = 0; i < 3; i++) {
    put_bag(f.dir, literal[i], NULL, &r);
    spec = tu_join(f.dir, literal[i]);
    check_open(spec, NULL, &r, 1);
    free(spec);
  }
  tu_records_free(&r);
  free_fixture(&f);
}

/* "@*" under a directory whose name holds glob metacharacters and "@":
 * the directory is matched literally. */
static void test_glob_literal_directory(void **state) {
  (void)state;
  char *tmp = tu_tempdir();
  char *dir = tu_join(tmp, "we[ir]d*?\\ dir@2");
  assert_int_equal(mkdir(dir, 0755), 0);
  /* A decoy that the pattern would match if it were not escaped. */
  char *decoy = tu_join(tmp, "weidXY dir@2");
  assert_int_equal(mkdir(decoy, 0755), 0);
  tu_records r0 = {0}, r1 = {0}, all = {0};
  tu_records_labelled(&r0, "odd0", 2);
  tu_records_labelled(&r1, "odd1", 3);
  put_bag(dir, "s-00000-of-00002.bag", NULL, &r0);
  put_bag(dir, "s-00001-of-00002.bag", NULL, &r1);
  put_bag(decoy, "s-00000-of-00005.bag", NULL, &r0);
  append_all(&all, &r0);
  append_all(&all, &r1);
  char *spec = tu_format("%s/s@*.bag", dir);
  check_open(spec, NULL, &all, 2);
  free(spec);
  spec = tu_format("%s/s@2.bag", dir);
  check_open(spec, NULL, &all, 2);
  free(spec);
  tu_records_free(&all);
  tu_records_free(&r1);
  tu_records_free(&r0);
  free(decoy);
  free(dir);
  tu_rmtree(tmp);
  free(tmp);
}

static void test_limits_path(void **state) {
  (void)state;
  static const char *const cases[][2] = {
      {"/a/b/foo.bagz", "/a/b/limits.foo.bagz"},
      {"foo.bagz", "limits.foo.bagz"},
      {"/a/foo-00001-of-00004.bag", "/a/limits.foo-00001-of-00004.bag"},
      {"a/b/x.bag", "a/b/limits.x.bag"},
      {"/x", "/limits.x"},
      {"dir.d/file", "dir.d/limits.file"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *got = bc_limits_path(cases[i][0]);
    assert_non_null(got);
    assert_string_equal(got, cases[i][1]);
    free(got);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_expand_plain_and_lists),
      cmocka_unit_test(test_expand_at_n),
      cmocka_unit_test(test_expand_literal_at),
      cmocka_unit_test(test_expand_posix_prefix),
      cmocka_unit_test(test_expand_separate_list),
      cmocka_unit_test(test_expand_glob),
      cmocka_unit_test(test_open_forms),
      cmocka_unit_test(test_open_separate),
      cmocka_unit_test(test_open_missing),
      cmocka_unit_test(test_glob_literal_directory),
      cmocka_unit_test(test_limits_path),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
