# The bag reader fuzzer.
#
# tests/fuzz/replay runs the fuzz target over the seed corpus and the saved
# crash reproducers in every `make check` (no libFuzzer needed).  With
# `configure --enable-fuzzing CC=clang` the libFuzzer binary
# tests/fuzz/fuzz_bag_reader is built too - compiled together with the
# library sources so libFuzzer sees coverage inside the library - and
# `make fuzz-smoke FUZZ_SECONDS=N` fuzzes for N seconds (default 30).

BC_FUZZ_TARGET_SOURCES = \
	tests/fuzz/fuzz.h \
	tests/fuzz/fuzz_bag_reader.c \
	tests/fuzz/fuzz_writer.c \
	tests/fuzz/fuzz_util.c \
	tests/fuzz/model.h \
	tests/fuzz/model.c

check_PROGRAMS += tests/fuzz/replay
tests_fuzz_replay_SOURCES = tests/fuzz/replay.c $(BC_FUZZ_TARGET_SOURCES)
tests_fuzz_replay_LDADD = libbagcache_core.la $(BC_DEP_LIBS)

# The cache state fuzzer (fuzz_cache_state.c): its replay driver runs the
# seeds in corpus/cache_state the same way.
BC_FUZZ_STATE_SOURCES = tests/fuzz/fuzz.h tests/fuzz/fuzz_cache_state.c \
	tests/fuzz/fuzz_util.c
check_PROGRAMS += tests/fuzz/replay_state
tests_fuzz_replay_state_SOURCES = tests/fuzz/replay.c $(BC_FUZZ_STATE_SOURCES)
tests_fuzz_replay_state_LDADD = libbagcache_core.la $(BC_DEP_LIBS)

TESTS += tests/fuzz/run_replay.sh
EXTRA_DIST += tests/fuzz/run_replay.sh tests/fuzz/make_corpus.py \
	tests/fuzz/corpus tests/fuzz/crashes

FUZZ_SECONDS = 30
FUZZ_FLAGS = -max_len=65536 -timeout=10

if BC_FUZZING
noinst_PROGRAMS += tests/fuzz/fuzz_bag_reader
tests_fuzz_fuzz_bag_reader_SOURCES = $(BC_FUZZ_TARGET_SOURCES) \
	$(BC_COMMON_SOURCES) $(BC_BAG_SOURCES)
tests_fuzz_fuzz_bag_reader_CFLAGS = $(AM_CFLAGS) -fsanitize=fuzzer-no-link
tests_fuzz_fuzz_bag_reader_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_bag_reader_LDADD = $(BC_DEP_LIBS)

# Fuzzes a copy of the seed corpus (new inputs are not kept) with the saved
# reproducers as extra seeds.  Scratch files go to /dev/shm when it exists:
# the writer round trip fsyncs every file.  On a crash the reproducer is
# kept and its path printed.
fuzz-smoke: tests/fuzz/fuzz_bag_reader$(EXEEXT)
	@set -u; \
	tmp=$${TMPDIR:-/tmp}; \
	if [ -d /dev/shm ] && [ -w /dev/shm ]; then tmp=/dev/shm; fi; \
	work=$$(mktemp -d "$$tmp/bc-fuzz-smoke.XXXXXX") || exit 1; \
	mkdir "$$work/corpus" "$$work/artifacts"; \
	cp $(srcdir)/tests/fuzz/corpus/bag_reader/* "$$work/corpus/"; \
	echo "fuzz-smoke: fuzzing for $(FUZZ_SECONDS) s in $$work"; \
	TMPDIR=$$work ./tests/fuzz/fuzz_bag_reader$(EXEEXT) $(FUZZ_FLAGS) \
	  -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	  -artifact_prefix="$$work/artifacts/" \
	  "$$work/corpus" $(srcdir)/tests/fuzz/crashes \
	  > "$$work/fuzz.log" 2>&1; \
	rc=$$?; \
	tail -n 25 "$$work/fuzz.log"; \
	if [ $$rc -ne 0 ]; then \
	  echo "fuzz-smoke: FAILED (exit $$rc); reproducers in $$work/artifacts:"; \
	  ls -l "$$work/artifacts"; \
	  exit 1; \
	fi; \
	rm -rf "$$work"; \
	echo "fuzz-smoke: no crash in $(FUZZ_SECONDS) s"

noinst_PROGRAMS += tests/fuzz/fuzz_cache_state
tests_fuzz_fuzz_cache_state_SOURCES = $(BC_FUZZ_STATE_SOURCES) \
	$(BC_COMMON_SOURCES) $(BC_BAG_SOURCES) $(BC_SEQ_SOURCES) $(BC_CACHE_SOURCES)
tests_fuzz_fuzz_cache_state_CFLAGS = $(AM_CFLAGS) -fsanitize=fuzzer-no-link
tests_fuzz_fuzz_cache_state_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_cache_state_LDADD = $(BC_DEP_LIBS)

# The same for the cache state: inputs are whole data.mdb files (the seeds
# are 64 KiB).  Each input opens a cache twice, so runs are slower.
FUZZ_STATE_FLAGS = -max_len=262144 -timeout=20
fuzz-smoke-state: tests/fuzz/fuzz_cache_state$(EXEEXT)
	@set -u; \
	tmp=$${TMPDIR:-/tmp}; \
	if [ -d /dev/shm ] && [ -w /dev/shm ]; then tmp=/dev/shm; fi; \
	work=$$(mktemp -d "$$tmp/bc-fuzz-state.XXXXXX") || exit 1; \
	mkdir "$$work/corpus" "$$work/artifacts"; \
	cp $(srcdir)/tests/fuzz/corpus/cache_state/* "$$work/corpus/"; \
	echo "fuzz-smoke-state: fuzzing for $(FUZZ_SECONDS) s in $$work"; \
	TMPDIR=$$work ./tests/fuzz/fuzz_cache_state$(EXEEXT) $(FUZZ_STATE_FLAGS) \
	  -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	  -artifact_prefix="$$work/artifacts/" "$$work/corpus" \
	  > "$$work/fuzz.log" 2>&1; \
	rc=$$?; \
	tail -n 25 "$$work/fuzz.log"; \
	if [ $$rc -ne 0 ]; then \
	  echo "fuzz-smoke-state: FAILED (exit $$rc); reproducers in $$work/artifacts:"; \
	  ls -l "$$work/artifacts"; \
	  exit 1; \
	fi; \
	rm -rf "$$work"; \
	echo "fuzz-smoke-state: no crash in $(FUZZ_SECONDS) s"
else
fuzz-smoke fuzz-smoke-state:
	@echo "$@: fuzzing is not enabled (configure --enable-fuzzing CC=clang)"
endif
.PHONY: fuzz-smoke fuzz-smoke-state
