# The cache engine's tests: cmocka programs checking the engine against the
# deterministic test source's model (tests/cache/source.c).  The threaded
# ones also run under ThreadSanitizer (check-threads).

BC_CACHE_TESTS = \
	tests/cache/test_cache_basics \
	tests/cache/test_cache_root \
	tests/cache/test_cache_introspect \
	tests/cache/test_cache_limit \
	tests/cache/test_cache_passes \
	tests/cache/test_cache_failures \
	tests/cache/test_cache_io \
	tests/cache/test_cache_procs \
	tests/cache/test_cache_threads \
	tests/cache/test_cache_crash \
	tests/cache/test_cache_damage \
	tests/cache/test_cache_checksums \
	tests/cache/test_cache_nospace \
	tests/cache/test_cache_abandon \
	tests/cache/test_cache_append \
	tests/cache/test_cache_behind \
	tests/cache/test_cache_policy \
	tests/cache/test_cache_cancel \
	tests/cache/test_cache_read_into \
	tests/cache/test_slots

if BC_TESTS
check_PROGRAMS += $(BC_CACHE_TESTS)
TESTS += $(BC_CACHE_TESTS)
endif
BC_THREAD_TESTS += tests/cache/test_cache_threads tests/cache/test_cache_introspect \
	tests/cache/test_cache_checksums \
	tests/cache/test_cache_abandon tests/cache/test_cache_cancel
BC_THREAD_TESTS += tests/cache/test_cache_root
BC_THREAD_TESTS += tests/cache/test_cache_append tests/cache/test_cache_behind \
	tests/cache/test_cache_io
BC_THREAD_TESTS += tests/cache/test_cache_read_into

BC_CACHE_TEST_UTIL = tests/cache/source.c tests/cache/source.h \
	tests/cache/util.c tests/cache/util.h
BC_CACHE_TEST_FIXTURE = tests/cache/fixture.c tests/cache/fixture.h
BC_CACHE_TEST_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
BC_CACHE_TEST_LDADD = libbagcache_core.la $(CMOCKA_LIBS) $(BC_DEP_LIBS)

tests_cache_test_cache_read_into_SOURCES = tests/cache/test_cache_read_into.c \
	$(BC_CACHE_TEST_FIXTURE) $(BC_CACHE_TEST_UTIL)
tests_cache_test_cache_read_into_CFLAGS = $(BC_CACHE_TEST_CFLAGS)
tests_cache_test_cache_read_into_LDADD = $(BC_CACHE_TEST_LDADD)

tests_cache_test_cache_policy_SOURCES = tests/cache/test_cache_policy.c
tests_cache_test_cache_policy_CFLAGS = $(BC_CACHE_TEST_CFLAGS)
tests_cache_test_cache_policy_LDADD = $(BC_CACHE_TEST_LDADD)

tests_cache_test_cache_basics_SOURCES = tests/cache/test_cache_basics.c \
	$(BC_CACHE_TEST_FIXTURE) $(BC_CACHE_TEST_UTIL)
tests_cache_test_cache_basics_CFLAGS = $(BC_CACHE_TEST_CFLAGS)
tests_cache_test_cache_basics_LDADD = $(BC_CACHE_TEST_LDADD)

tests_cache_test_cache_root_SOURCES = tests/cache/test_cache_root.c \
	$(BC_CACHE_TEST_FIXTURE) $(BC_CACHE_TEST_UTIL)
tests_cache_test_cache_root_CFLAGS = $(BC_CACHE_TEST_CFLAGS)
tests_cache_test_cache_root_LDADD = $(BC_CACHE_TEST_LDADD)

tests_cache_test_cache_introspect_SOURCES = tests/cache/test_cache_introspect.c \
	$(BC_CACHE_TEST_FIXTURE) $(BC_CACHE_TEST_UTIL)
tests_cache_test_cache_introspect_CFLAGS = $(BC_CACHE_TEST_CFLAGS)
tests_cache_test_cache_introspect_LDADD = $(BC_CACHE_TEST_LDADD)

tests_cache_test_cache_passes_SOURCES = tests/cache/test_cache_passes.c \
	$(BC_CACHE_TEST_FIXTURE) $(BC_CACHE_TEST_UTIL)
tests_cache_test_cache_passes_CFLAGS = $(BC_CACHE_TEST_CFLAGS)
tests_cache_test_cache_passes_LDADD = $(BC_CACHE_TEST_LDADD)

tests_cache_test_cache_limit_SOURCES = tests/cache/test_cache_limit.c \
	$(BC_CACHE_TEST_UTIL)
tests_cache_test_cache_limit_CFLAGS = $(BC_CACHE_TEST_CFLAGS)
tests_cache_test_cache_limit_LDADD = $(BC_CACHE_TEST_LDADD)

tests_cache_test_cache_failures_SOURCES = tests/cache/test_cache_failures.c \
	$(BC_CACHE_TEST_UTIL)
tests_cache_test_cache_failures_CFLAGS = $(BC_CACHE_TEST_CFLAGS)
tests_cache_test_cache_failures_LDADD = $(BC_CACHE_TEST_LDADD)

# fsync, rename and unlink of the library's own objects go through the
# test's wrappers, so that it can make them fail (and count them).
tests_cache_test_cache_io_SOURCES = tests/cache/test_cache_io.c \
	$(BC_CACHE_TEST_UTIL)
tests_cache_test_cache_io_CFLAGS = $(BC_CACHE_TEST_CFLAGS)
tests_cache_test_cache_io_LDFLAGS = -Wl,--wrap=fsync -Wl,--wrap=rename -Wl,--wrap=unlink
tests_cache_test_cache_io_LDADD = $(BC_CACHE_TEST_LDADD)

tests_cache_test_cache_procs_SOURCES = tests/cache/test_cache_procs.c \
	$(BC_CACHE_TEST_UTIL)
tests_cache_test_cache_procs_CFLAGS = $(BC_CACHE_TEST_CFLAGS)
tests_cache_test_cache_procs_LDADD = $(BC_CACHE_TEST_LDADD)

tests_cache_test_cache_threads_SOURCES = tests/cache/test_cache_threads.c \
	$(BC_CACHE_TEST_UTIL)
tests_cache_test_cache_threads_CFLAGS = $(BC_CACHE_TEST_CFLAGS)
tests_cache_test_cache_threads_LDADD = $(BC_CACHE_TEST_LDADD)

tests_cache_test_cache_abandon_SOURCES = tests/cache/test_cache_abandon.c \
	$(BC_CACHE_TEST_FIXTURE) $(BC_CACHE_TEST_UTIL)
tests_cache_test_cache_abandon_CFLAGS = $(BC_CACHE_TEST_CFLAGS)
tests_cache_test_cache_abandon_LDADD = $(BC_CACHE_TEST_LDADD)

tests_cache_test_cache_cancel_SOURCES = tests/cache/test_cache_cancel.c \
	$(BC_CACHE_TEST_FIXTURE) $(BC_CACHE_TEST_UTIL)
tests_cache_test_cache_cancel_CFLAGS = $(BC_CACHE_TEST_CFLAGS)
tests_cache_test_cache_cancel_LDADD = $(BC_CACHE_TEST_LDADD)

tests_cache_test_cache_crash_SOURCES = tests/cache/test_cache_crash.c \
	$(BC_CACHE_TEST_UTIL)
tests_cache_test_cache_crash_CFLAGS = $(BC_CACHE_TEST_CFLAGS)
tests_cache_test_cache_crash_LDADD = $(BC_CACHE_TEST_LDADD)

tests_cache_test_cache_checksums_SOURCES = tests/cache/test_cache_checksums.c \
	$(BC_CACHE_TEST_UTIL)
tests_cache_test_cache_checksums_CFLAGS = $(BC_CACHE_TEST_CFLAGS)
tests_cache_test_cache_checksums_LDADD = $(BC_CACHE_TEST_LDADD)

tests_cache_test_cache_damage_SOURCES = tests/cache/test_cache_damage.c \
	$(BC_CACHE_TEST_UTIL)
tests_cache_test_cache_damage_CFLAGS = $(BC_CACHE_TEST_CFLAGS)
tests_cache_test_cache_damage_LDADD = $(BC_CACHE_TEST_LDADD)

tests_cache_test_cache_nospace_SOURCES = tests/cache/test_cache_nospace.c \
	$(BC_CACHE_TEST_UTIL)
tests_cache_test_cache_nospace_CFLAGS = $(BC_CACHE_TEST_CFLAGS)
tests_cache_test_cache_nospace_LDADD = $(BC_CACHE_TEST_LDADD)

tests_cache_test_slots_SOURCES = tests/cache/test_slots.c $(BC_CACHE_TEST_UTIL)
tests_cache_test_slots_CFLAGS = $(BC_CACHE_TEST_CFLAGS)
tests_cache_test_slots_LDADD = $(BC_CACHE_TEST_LDADD)

tests_cache_test_cache_append_SOURCES = tests/cache/test_cache_append.c \
	$(BC_CACHE_TEST_UTIL)
tests_cache_test_cache_append_CFLAGS = $(BC_CACHE_TEST_CFLAGS)
tests_cache_test_cache_append_LDADD = $(BC_CACHE_TEST_LDADD)

tests_cache_test_cache_behind_SOURCES = tests/cache/test_cache_behind.c \
	$(BC_CACHE_TEST_FIXTURE) $(BC_CACHE_TEST_UTIL)
tests_cache_test_cache_behind_CFLAGS = $(BC_CACHE_TEST_CFLAGS)
tests_cache_test_cache_behind_LDADD = $(BC_CACHE_TEST_LDADD)
