# The sequence layer's tests: views against a reference model; reads into
# caller memory against the model that wrote the bags (and through a cache
# over the cache tests' source).
if BC_TESTS
check_PROGRAMS += tests/seq/test_seq tests/seq/test_read_into
TESTS += tests/seq/test_seq tests/seq/test_read_into
endif
BC_THREAD_TESTS += tests/seq/test_seq tests/seq/test_read_into

tests_seq_test_seq_SOURCES = tests/seq/test_seq.c tests/seq/model.c tests/seq/model.h
tests_seq_test_seq_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_seq_test_seq_LDADD = libbagcache_core.la $(CMOCKA_LIBS) $(BC_DEP_LIBS)

tests_seq_test_read_into_SOURCES = tests/seq/test_read_into.c \
	tests/cache/source.c tests/cache/source.h $(BC_TEST_UTIL)
tests_seq_test_read_into_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_seq_test_read_into_LDADD = libbagcache_core.la $(CMOCKA_LIBS) $(BC_DEP_LIBS)
