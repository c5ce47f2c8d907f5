# tests/bench/cache: what the cache engine costs (a program that prints a
# table; not a test).  Build and run: make bench-cache (configure with
# CFLAGS="-O2 -g"); BENCH_ARGS=--quick for a run of seconds.
EXTRA_PROGRAMS += tests/bench/cache
tests_bench_cache_SOURCES = tests/bench/cache.c tests/bench/bench.c \
	tests/bench/bench.h
tests_bench_cache_LDADD = libbagcache.la $(PTHREAD_LIBS)
CLEANFILES += tests/bench/cache$(EXEEXT)

.PHONY: bench-cache
bench-cache: tests/bench/cache$(EXEEXT)
	./tests/bench/cache$(EXEEXT) $(BENCH_ARGS)
