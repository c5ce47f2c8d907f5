# tests/bench/views: the cost of views (a program that prints a table).
# Build and run: make bench-views (configure with CFLAGS="-O2 -g").
EXTRA_PROGRAMS += tests/bench/views
tests_bench_views_SOURCES = tests/bench/views.c
tests_bench_views_LDADD = libbagcache.la
CLEANFILES += tests/bench/views

.PHONY: bench-views
bench-views: tests/bench/views
	./tests/bench/views $(BENCH_ARGS)
