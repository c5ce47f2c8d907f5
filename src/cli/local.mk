# The `bagcache` command: a dispatch table of command groups ("bag",
# "cache"), one file per group and per command family, linked against the
# installed library's public API only.
bin_PROGRAMS += bagcache
bagcache_SOURCES = \
	src/cli/internal.h \
	src/cli/main.c \
	src/cli/report.c \
	src/cli/options.c \
	src/cli/reader.c \
	src/cli/output.c \
	src/cli/encode.c \
	src/cli/bag.c \
	src/cli/bag_info.c \
	src/cli/bag_get.c \
	src/cli/bag_write.c \
	src/cli/cache.c \
	src/cli/cache_info.c \
	src/cli/cache_get.c \
	src/cli/cache_fill.c \
	src/cli/cache_source.c \
	src/cli/cache_admin.c
# jansson for `cache info --json`; threads for the progress display of
# `cache fill`.
bagcache_LDADD = libbagcache.la $(JANSSON_LIBS) $(PTHREAD_LIBS)

dist_man_MANS += doc/bagcache.1
dist_doc_DATA += doc/cli.md

# End-to-end tests of the command (shell scripts; see tests/cli/lib.sh).
BC_CLI_TESTS = \
	tests/cli/usage.sh \
	tests/cli/write.sh \
	tests/cli/read.sh \
	tests/cli/zstd.sh \
	tests/cli/sharded.sh \
	tests/cli/verify.sh \
	tests/cli/cache.sh \
	tests/cli/cache_fill.sh \
	tests/cli/cache_stdin.sh \
	tests/cli/cache_usage.sh
TESTS += $(BC_CLI_TESTS)
EXTRA_DIST += $(BC_CLI_TESTS) \
	tests/cli/lib.sh \
	tests/cli/data/README \
	tests/cli/data/abc_tail.bag \
	tests/cli/data/abc_tail.bagz \
	tests/cli/data/mixed.bagz \
	tests/cli/data/dict_raw.bagz \
	tests/cli/data/dict_raw.dict \
	tests/cli/data/corrupt/too_short.bag \
	tests/cli/data/corrupt/tail_past_eof.bag \
	tests/cli/data/corrupt/tail_misaligned.bag \
	tests/cli/data/corrupt/non_monotonic.bag \
	tests/cli/data/corrupt/bad_frame.bagz \
	tests/cli/data/corrupt/truncated_frame.bagz \
	tests/cli/data/corrupt/separate_past_eof.bag \
	tests/cli/data/corrupt/limits.separate_past_eof.bag
