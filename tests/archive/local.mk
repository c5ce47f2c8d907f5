# The keyed-archive layer's tests (doc/archive.md): built where the layer
# is (configure found SQLite).

BC_ARCHIVE_TESTS = \
	tests/archive/test_archive_basic \
	tests/archive/test_archive_aggregates \
	tests/archive/test_archive_corrupt \
	tests/archive/test_archive_schema \
	tests/archive/test_archive_crash \
	tests/archive/test_archive_tree

if BC_TESTS
if BC_ARCHIVE
check_PROGRAMS += $(BC_ARCHIVE_TESTS)
TESTS += $(BC_ARCHIVE_TESTS)
BC_THREAD_TESTS += tests/archive/test_archive_basic
endif
endif

# barecat 0.2.7's sqlite_master, the fact test_archive_schema checks.
EXTRA_DIST += tests/archive/barecat-0.2.7-sqlite_master.txt

BC_ARCHIVE_TEST_SOURCES = tests/archive/common.c tests/archive/common.h \
	$(BC_TEST_UTIL)
BC_ARCHIVE_TEST_LDADD = $(BC_TEST_LDADD) $(SQLITE_LIBS)

tests_archive_test_archive_basic_SOURCES = tests/archive/test_archive_basic.c \
	$(BC_ARCHIVE_TEST_SOURCES)
tests_archive_test_archive_basic_CFLAGS = $(BC_TEST_CFLAGS)
tests_archive_test_archive_basic_LDADD = $(BC_ARCHIVE_TEST_LDADD)

tests_archive_test_archive_aggregates_SOURCES = \
	tests/archive/test_archive_aggregates.c $(BC_ARCHIVE_TEST_SOURCES)
tests_archive_test_archive_aggregates_CFLAGS = $(BC_TEST_CFLAGS)
tests_archive_test_archive_aggregates_LDADD = $(BC_ARCHIVE_TEST_LDADD)

tests_archive_test_archive_corrupt_SOURCES = \
	tests/archive/test_archive_corrupt.c $(BC_ARCHIVE_TEST_SOURCES)
tests_archive_test_archive_corrupt_CFLAGS = $(BC_TEST_CFLAGS)
tests_archive_test_archive_corrupt_LDADD = $(BC_ARCHIVE_TEST_LDADD)

tests_archive_test_archive_schema_SOURCES = \
	tests/archive/test_archive_schema.c $(BC_ARCHIVE_TEST_SOURCES)
tests_archive_test_archive_schema_CFLAGS = $(BC_TEST_CFLAGS)
tests_archive_test_archive_schema_LDADD = $(BC_ARCHIVE_TEST_LDADD)

tests_archive_test_archive_crash_SOURCES = \
	tests/archive/test_archive_crash.c $(BC_ARCHIVE_TEST_SOURCES)
tests_archive_test_archive_crash_CFLAGS = $(BC_TEST_CFLAGS)
tests_archive_test_archive_crash_LDADD = $(BC_ARCHIVE_TEST_LDADD)

tests_archive_test_archive_tree_SOURCES = \
	tests/archive/test_archive_tree.c $(BC_ARCHIVE_TEST_SOURCES)
tests_archive_test_archive_tree_CFLAGS = $(BC_TEST_CFLAGS)
tests_archive_test_archive_tree_LDADD = $(BC_ARCHIVE_TEST_LDADD)
