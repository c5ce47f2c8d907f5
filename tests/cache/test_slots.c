/*
 * The slot state machine of src/cache/slots.h, step by step in one thread
 * (the threaded behaviour is exercised by test_cache_threads, also under
 * ThreadSanitizer): a bag is closed exactly when its last user is done,
 * whether that user holds a hazard or a pin, with either barrier pair; a
 * stale close never closes a newer bag; the radix table finds every slot
 * it made, at any shard number.
 *
 * Whether a bag is open is read from /proc/self/maps: each bag maps its
 * own small file.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#include "cache/slots.h"

typedef struct fixture {
  char *dir;
  int files;
  bc__slot_table t;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  if (f == NULL) return -1;
  f->dir = cu_tmp_dir();
  bc__slots_init();
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  bc__slots_free(&f->t);
  cu_rm_rf(f->dir);
  free(f->dir);
  free(f);
  return 0;
}

/* Opens a new one-record bag file in the fixture's directory. */
static bc_bag *new_bag(fixture *f) {
  char name[32];
  snprintf(name, sizeof name, "b%d.bag", f->files++);
  char *path = cu_path(f->dir, name);
  bc_writer *w = NULL;
  CU_OK(bc_writer_open(&w, path, NULL));
  CU_OK(bc_writer_write(w, "record", 6));
  CU_OK(bc_writer_close(w));
  bc_writer_free(w);
  bc_bag *bag = NULL;
  CU_OK(bc_bag_open(&bag, path, NULL));
  free(path);
  return bag;
}

static uint64_t word(bc__slot *s) { return atomic_load(&s->word); }

/* A slot holding an open, unpinned bag. */
static bc__slot *open_slot(fixture *f, uint64_t shard) {
  bc__slot *s = bc__slots_get(&f->t, shard);
  assert_non_null(s);
  assert_true(bc__slot_install(s, new_bag(f)));
  bc__slot_unpin(&f->t, s); /* the installer's pin */
  assert_int_equal(word(s) & (BC__SLOT_PINS | BC__SLOT_OPEN | BC__SLOT_HASBAG),
                   BC__SLOT_OPEN | BC__SLOT_HASBAG);
  return s;
}

static void hazard_holds_the_bag(fixture *f) {
  bc__slot *s = open_slot(f, 3);
  bc__treg *g = bc__treg_get(&f->t);
  assert_non_null(g);
  assert_ptr_equal(bc__treg_get(&f->t), g); /* one record per thread */
  assert_true(bc__slot_enter(g, s));
  assert_ptr_equal(atomic_load(&g->hazard), s);
  bc__slot_drop(s);
  bc__slot_try_close(&f->t, s); /* the hazard is there: not closed */
  assert_true(word(s) & BC__SLOT_HASBAG);
  assert_int_equal(cu_mapped(f->dir), 1);
  bc_buf b = BC_BUF_INIT;
  CU_OK(bc_bag_get(atomic_load(&s->bag), 0, &b)); /* still readable */
  assert_memory_equal(b.data, "record", 6);
  bc_buf_release(&b);
  bc__slot_exit(&f->t, g, s); /* the last user closes it */
  assert_null(atomic_load(&g->hazard));
  assert_false(word(s) & BC__SLOT_HASBAG);
  assert_int_equal(cu_mapped(f->dir), 0);
  /* A dropped slot cannot be entered, and entering leaves no hazard. */
  assert_false(bc__slot_enter(g, s));
  assert_null(atomic_load(&g->hazard));
}

static void test_hazard_asymmetric(void **state) {
  fixture *f = *state;
  if (!atomic_load(&bc__slots_asymmetric))
    skip(); /* no membarrier(2) here (or a ThreadSanitizer build) */
  hazard_holds_the_bag(f);
}

static void test_hazard_fences(void **state) {
  fixture *f = *state;
  bool was = atomic_load(&bc__slots_asymmetric);
  atomic_store(&bc__slots_asymmetric, false);
  hazard_holds_the_bag(f);
  atomic_store(&bc__slots_asymmetric, was);
}

static void test_pin_holds_the_bag(void **state) {
  fixture *f = *state;
  bc__slot *s = open_slot(f, 9);
  assert_true(bc__slot_pin(s));
  assert_true(bc__slot_pin(s));
  bc__slot_drop(s);
  assert_false(bc__slot_pin(s)); /* a late pin fails ... */
  bc__slot_unpin(&f->t, s);      /* ... and backs out */
  bc__slot_try_close(&f->t, s);
  bc__slot_unpin(&f->t, s);
  assert_int_equal(cu_mapped(f->dir), 1); /* one pin left */
  bc__slot_unpin(&f->t, s);
  assert_int_equal(word(s) & (BC__SLOT_PINS | BC__SLOT_HASBAG), 0);
  assert_int_equal(cu_mapped(f->dir), 0);
}

/* A dropped idle slot is closed by try_close; a new install takes a new
 * generation, and a close attempt that saw the old word fails its CAS. */
static void test_reinstall_generations(void **state) {
  fixture *f = *state;
  bc__slot *s = open_slot(f, 0);
  uint64_t gen1 = word(s) >> BC__SLOT_GEN_SHIFT;
  assert_false(bc__slot_install(s, NULL)); /* HASBAG: refused */
  bc__slot_drop(s);
  bc__slot_try_close(&f->t, s);
  assert_int_equal(cu_mapped(f->dir), 0);
  bc__slot_try_close(&f->t, s); /* nothing left: no effect */
  bc__slot *again = open_slot(f, 0);
  assert_ptr_equal(again, s);
  assert_int_equal(word(s) >> BC__SLOT_GEN_SHIFT, gen1 + 1);
  bc__slot_try_close(&f->t, s); /* OPEN: refused */
  assert_int_equal(cu_mapped(f->dir), 1);
  /* A speculative pin on a closed slot neither opens nor closes it. */
  bc__slot_drop(s);
  bc__slot_try_close(&f->t, s);
  assert_false(bc__slot_pin(s));
  bc__slot_unpin(&f->t, s);
  assert_int_equal(word(s) & (BC__SLOT_PINS | BC__SLOT_OPEN | BC__SLOT_HASBAG), 0);
  assert_int_equal(cu_mapped(f->dir), 0);
}

static void test_radix_table(void **state) {
  fixture *f = *state;
  static const uint64_t shards[] = {0, 1, 255, 256, 65535, 65536, 1u << 24,
                                    (uint64_t)1 << 40, UINT64_MAX - 1,
                                    UINT64_MAX};
  size_t n = sizeof shards / sizeof shards[0];
  bc__slot *made[sizeof shards / sizeof shards[0]];
  assert_null(bc__slots_find(&f->t, 0));
  for (size_t i = 0; i < n; i++) {
    made[i] = bc__slots_get(&f->t, shards[i]);
    assert_non_null(made[i]);
    assert_int_equal(made[i]->shard, shards[i]);
    for (size_t k = 0; k <= i; k++) /* growing keeps the earlier ones */
      assert_ptr_equal(bc__slots_find(&f->t, shards[k]), made[k]);
  }
  for (size_t i = 0; i < n; i++)
    assert_ptr_equal(bc__slots_get(&f->t, shards[i]), made[i]);
  static const uint64_t absent[] = {2, 257, 65537, ((uint64_t)1 << 40) + 1,
                                    UINT64_MAX - 2};
  for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++)
    assert_null(bc__slots_find(&f->t, absent[i]));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_hazard_asymmetric, setup, teardown),
      cmocka_unit_test_setup_teardown(test_hazard_fences, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pin_holds_the_bag, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reinstall_generations, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_radix_table, setup, teardown),
  };
  return cmocka_run_group_tests_name("cache slots", tests, NULL, NULL);
}
