# The Bagz layer's cmocka test programs and the golden vectors they read.
# Every program runs from `make check`; the environment set in Makefile.am
# (BC_SRCDIR) tells them where tests/data lives.

BC_CMOCKA_TESTS = \
	tests/test_golden \
	tests/test_layout \
	tests/test_spec \
	tests/test_options \
	tests/test_format \
	tests/test_writer \
	tests/test_property \
	tests/test_index \
	tests/test_errors \
	tests/test_threads \
	tests/test_crc32c

# The tests that exercise worker threads; CI runs them under ThreadSanitizer.
BC_THREAD_TESTS = tests/test_threads tests/test_options tests/test_property \
	tests/test_format

if BC_TESTS
check_PROGRAMS += $(BC_CMOCKA_TESTS)
TESTS += $(BC_CMOCKA_TESTS)
endif

.PHONY: check-threads
check-threads:
	$(MAKE) $(AM_MAKEFLAGS) check TESTS="$(BC_THREAD_TESTS)"

# Every program links the helper and the static core (it reaches internals).
BC_TEST_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
BC_TEST_LDADD = libbagcache_core.la $(CMOCKA_LIBS) $(BC_DEP_LIBS)
BC_TEST_UTIL = tests/testutil.c tests/testutil.h

tests_test_golden_SOURCES = tests/test_golden.c $(BC_TEST_UTIL)
tests_test_golden_CFLAGS = $(BC_TEST_CFLAGS)
tests_test_golden_LDADD = $(BC_TEST_LDADD)

tests_test_layout_SOURCES = tests/test_layout.c $(BC_TEST_UTIL)
tests_test_layout_CFLAGS = $(BC_TEST_CFLAGS)
tests_test_layout_LDADD = $(BC_TEST_LDADD)

tests_test_spec_SOURCES = tests/test_spec.c $(BC_TEST_UTIL)
tests_test_spec_CFLAGS = $(BC_TEST_CFLAGS)
tests_test_spec_LDADD = $(BC_TEST_LDADD)

tests_test_options_SOURCES = tests/test_options.c $(BC_TEST_UTIL)
tests_test_options_CFLAGS = $(BC_TEST_CFLAGS)
tests_test_options_LDADD = $(BC_TEST_LDADD)

tests_test_format_SOURCES = tests/test_format.c $(BC_TEST_UTIL)
tests_test_format_CFLAGS = $(BC_TEST_CFLAGS)
tests_test_format_LDADD = $(BC_TEST_LDADD)

tests_test_writer_SOURCES = tests/test_writer.c $(BC_TEST_UTIL)
tests_test_writer_CFLAGS = $(BC_TEST_CFLAGS)
tests_test_writer_LDADD = $(BC_TEST_LDADD)

tests_test_property_SOURCES = tests/test_property.c $(BC_TEST_UTIL)
tests_test_property_CFLAGS = $(BC_TEST_CFLAGS)
tests_test_property_LDADD = $(BC_TEST_LDADD)

tests_test_index_SOURCES = tests/test_index.c $(BC_TEST_UTIL)
tests_test_index_CFLAGS = $(BC_TEST_CFLAGS)
tests_test_index_LDADD = $(BC_TEST_LDADD)

tests_test_errors_SOURCES = tests/test_errors.c $(BC_TEST_UTIL)
tests_test_errors_CFLAGS = $(BC_TEST_CFLAGS)
tests_test_errors_LDADD = $(BC_TEST_LDADD)

tests_test_threads_SOURCES = tests/test_threads.c $(BC_TEST_UTIL)
tests_test_threads_CFLAGS = $(BC_TEST_CFLAGS)
tests_test_threads_LDADD = $(BC_TEST_LDADD)

tests_test_crc32c_SOURCES = tests/test_crc32c.c $(BC_TEST_UTIL)
tests_test_crc32c_CFLAGS = $(BC_TEST_CFLAGS)
tests_test_crc32c_LDADD = $(BC_TEST_LDADD)

# Golden vectors (copied from the reference build of bagz; see
# tests/data/bagz/manifest.json).  Listed one by one for `make dist`.
EXTRA_DIST += \
	tests/data/bagz/manifest.json \
	tests/data/bagz/abc_separate.bag \
	tests/data/bagz/abc_tail.bag \
	tests/data/bagz/abc_tail.bagz \
	tests/data/bagz/all_empty.bag \
	tests/data/bagz/all_empty.bagz \
	tests/data/bagz/dict_raw.bagz \
	tests/data/bagz/empty.bag \
	tests/data/bagz/empty.bagz \
	tests/data/bagz/empty_separate.bag \
	tests/data/bagz/inter-00000-of-00003.bag \
	tests/data/bagz/inter-00001-of-00003.bag \
	tests/data/bagz/inter-00002-of-00003.bag \
	tests/data/bagz/limits.abc_separate.bag \
	tests/data/bagz/limits.empty_separate.bag \
	tests/data/bagz/limits.mixed_separate.bagz \
	tests/data/bagz/limits.sepz-00000-of-00002.bagz \
	tests/data/bagz/limits.sepz-00001-of-00002.bagz \
	tests/data/bagz/mixed.bag \
	tests/data/bagz/mixed.bagz \
	tests/data/bagz/mixed_level1.bagz \
	tests/data/bagz/mixed_separate.bagz \
	tests/data/bagz/sepz-00000-of-00002.bagz \
	tests/data/bagz/sepz-00001-of-00002.bagz \
	tests/data/bagz/shard-00000-of-00004.bag \
	tests/data/bagz/shard-00001-of-00004.bag \
	tests/data/bagz/shard-00002-of-00004.bag \
	tests/data/bagz/shard-00003-of-00004.bag \
	tests/data/bagz/corrupt/bad_frame.bagz \
	tests/data/bagz/corrupt/limits.separate_past_eof.bag \
	tests/data/bagz/corrupt/non_monotonic.bag \
	tests/data/bagz/corrupt/separate_past_eof.bag \
	tests/data/bagz/corrupt/tail_misaligned.bag \
	tests/data/bagz/corrupt/tail_past_eof.bag \
	tests/data/bagz/corrupt/too_short.bag \
	tests/data/bagz/corrupt/truncated_frame.bagz
