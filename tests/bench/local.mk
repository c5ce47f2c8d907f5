# Benchmarks: programs that print a table, never timed assertions.
#
#   mkdir build-bench && cd build-bench && ../configure CFLAGS="-O2 -g"
#   make bench                      # the full run (about 2 minutes)
#   make bench BENCH_ARGS=--quick   # seconds
#
# bag_read is also built by `make check`, which runs it once in --quick mode
# (tests/bench/run_quick.sh): that checks it still works and that bagcache
# and the plain-code baselines return the same bytes; it times nothing.
# bench.c/bench.h (PRNG, word salad, medians, the table) are shared with
# the other benchmark programs here.

check_PROGRAMS += tests/bench/bag_read
tests_bench_bag_read_SOURCES = tests/bench/bag_read.c tests/bench/bench.c \
	tests/bench/bench.h
tests_bench_bag_read_LDADD = libbagcache_core.la $(BC_DEP_LIBS)

TESTS += tests/bench/run_quick.sh
EXTRA_DIST += tests/bench/run_quick.sh

# The Python package's benchmark (doc/performance.md, "Python"):
#   cd build && PYTHONPATH=python/pkg python3 ../tests/bench/python_bench.py
# make check runs it once with --quick from the pytest suite
# (python/tests/test_bench_quick.py), as run_quick.sh does for bag_read.
# bench_clib.py: the C library through ctypes, shared by python_bench.py
# and train_bench.py.
EXTRA_DIST += tests/bench/python_bench.py tests/bench/bench_clib.py

# A disk limit smaller than the data: regeneration with parked passes and
# seekable create_iter(start), against a loop restarting the generator
# from 0 for every miss (doc/cache.md, "Parked passes"):
#   cd build && PYTHONPATH=python/pkg python3 ../tests/bench/regen_bench.py
# make check runs it once with --quick (python/tests/test_bench_quick.py).
EXTRA_DIST += tests/bench/regen_bench.py

# bagcache.train's DataLoader (IID batches of 256 rows of 32x32x3 uint8
# from .bag and .bagz) against numpy memmap fancy indexing, zstd alone, a
# loaderx-style loader and torch's DataLoader (doc/performance.md,
# "Training loops"):
#   cd build && PYTHONPATH=python/pkg python3 ../tests/bench/train_bench.py
# make check runs it once with --quick --no-torch
# (python/tests/test_train_bench_quick.py).  gather_floor.c: the plain-C
# floors (a memcpy gather, zstd alone), which train_bench.py compiles with
# the system's compiler when it runs.
EXTRA_DIST += tests/bench/train_bench.py tests/bench/gather_floor.c

# Results, baselines and how to reproduce them.
dist_doc_DATA += doc/performance.md

BENCH_ARGS =
bench: tests/bench/bag_read$(EXEEXT)
	./tests/bench/bag_read$(EXEEXT) $(BENCH_ARGS)
.PHONY: bench
