# The sequence layer's tests: views against a reference model.
if BC_TESTS
check_PROGRAMS += tests/seq/test_seq
TESTS += tests/seq/test_seq
endif
BC_THREAD_TESTS += tests/seq/test_seq

tests_seq_test_seq_SOURCES = tests/seq/test_seq.c tests/seq/model.c tests/seq/model.h
tests_seq_test_seq_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_seq_test_seq_LDADD = libbagcache_core.la $(CMOCKA_LIBS) $(BC_DEP_LIBS)
