# make check-python-threads: the Python tests that run threads (LoadIt's first
# pass and fill workers, concurrent readers, read-ahead, processes sharing a
# root) under ThreadSanitizer.  Run it in a tree configured for ThreadSanitizer
# with clang, as .ci/run's build-tsan is:
#   ../configure CC=clang CFLAGS="-O1 -g -fsanitize=thread" LDFLAGS=-fsanitize=thread
#
# The interpreter is python/tsan/python3 (python/tests/tsan/python.c: the
# configured Python's libpython in an executable that carries the runtime).
# Before the tests, python/tsan/race.so's deliberate race must be reported,
# with the same options: else the step would prove nothing.  No race inside
# CPython or numpy showed up, so there are no suppressions (bagcache's own
# frames are never to be suppressed).
# Every process of the tests (subprocesses too) writes its reports to a file
# of its own, python/tsan/report.PID, since pytest and the tests capture
# standard error: the target prints them and fails if there is any.

# Test files under python/tests: about 2 minutes on 2 busy cores.
BC_PY_THREAD_TESTS = \
	test_bagz_concurrency.py \
	test_loadit_first_pass.py \
	test_loadit_procs.py \
	test_loadit_fork_locks.py \
	test_batch_reads.py \
	test_views_native.py \
	test_train_cloader.py

# ThreadSanitizer does not support a child that starts threads after a fork
# of a process with threads (it dies, by default: die_after_fork; with
# die_after_fork=0 its runtime crashes now and then).  These tests do that,
# on purpose (the library's fork handlers are what they check): they run in
# make check only.
BC_PY_THREAD_TESTS_FORK = \
	test_bagz_concurrency.py::test_multiprocessing_pool \
	test_loadit_first_pass.py::test_a_process_that_exits_right_after_the_loop_leaves_everything[fork] \
	test_loadit_procs.py::test_four_processes_share_a_root[fork-no-limit] \
	test_loadit_procs.py::test_four_processes_share_a_root[fork-limit-6-shards] \
	test_loadit_procs.py::test_first_passes_of_three_processes_on_one_root \
	test_views_native.py::test_fork_reads

BC_TSAN_PY_OPTIONS = halt_on_error=0:second_deadlock_stack=1

EXTRA_DIST += \
	python/tests/tsan/python.c \
	python/tests/tsan/race.c
CLEANFILES += python/tsan/python3 python/tsan/race.so python/tsan/race.log
clean-local: bc-tsan-py-clean
bc-tsan-py-clean:
	rm -f python/tsan/report.*
.PHONY: bc-tsan-py-clean

.PHONY: check-python-threads

if BC_PYTHON

# The embedding flags of python3-config --embed --ldflags, from sysconfig
# (python3-config may be missing or belong to another Python), and
# LINKFORSHARED: a static libpython must export its symbols to extensions.
BC_PY_EMBED_LIBS = `$(PYTHON) -c 'import sysconfig; v = sysconfig.get_config_var; \
	print(" ".join(x for x in ("-L" + v("LIBPL"), "-L" + v("LIBDIR"), "-lpython" + v("LDVERSION"), \
	v("LIBS"), v("SYSLIBS"), v("LINKFORSHARED")) if x))'`

python/tsan/python3: $(srcdir)/python/tests/tsan/python.c
	$(AM_V_CCLD)$(MKDIR_P) $(@D) && \
	$(CC) $(CFLAGS) $(PYTHON_CFLAGS) -o $@ $(srcdir)/python/tests/tsan/python.c \
	  $(LDFLAGS) $(BC_PY_EMBED_LIBS)
python/tsan/race.so: $(srcdir)/python/tests/tsan/race.c
	$(AM_V_CCLD)$(MKDIR_P) $(@D) && \
	$(CC) $(CFLAGS) -fPIC -shared -o $@ $(srcdir)/python/tests/tsan/race.c \
	  $(LDFLAGS) $(PTHREAD_LIBS)

check-python-threads: all python/tsan/python3 python/tsan/race.so
	@if ! nm -D --undefined-only python/.libs/_bagcache.so | grep -q __tsan_; then \
	  echo "check-python-threads: this tree is not built with -fsanitize=thread" \
	       "(configure CC=clang CFLAGS='-O1 -g -fsanitize=thread' LDFLAGS=-fsanitize=thread)" >&2; \
	  exit 1; \
	fi
	@echo "check-python-threads: ThreadSanitizer must report the deliberate race of python/tsan/race.so"
	@status=0; \
	TSAN_OPTIONS='$(BC_TSAN_PY_OPTIONS)' python/tsan/python3 -c \
	  'import ctypes, sys; assert ctypes.CDLL(sys.argv[1]).bc_tsan_canary() == 2' \
	  python/tsan/race.so > python/tsan/race.log 2>&1 || status=$$?; \
	if [ $$status -ne 66 ] || ! grep -q 'WARNING: ThreadSanitizer: data race' python/tsan/race.log; then \
	  cat python/tsan/race.log >&2; \
	  echo "check-python-threads: no race report (exit status $$status): ThreadSanitizer does not see extension code" >&2; \
	  exit 1; \
	fi
	@rm -f python/tsan/report.*
	@status=0; \
	BC_TSAN_PYTHON=$(abs_builddir)/python/tsan/python3 \
	BC_PYTEST_TESTS='$(BC_PY_THREAD_TESTS)' \
	BC_PYTEST_DESELECT='$(BC_PY_THREAD_TESTS_FORK)' \
	TSAN_OPTIONS='$(BC_TSAN_PY_OPTIONS):log_path=$(abs_builddir)/python/tsan/report' \
	  $(MAKE) $(AM_MAKEFLAGS) check TESTS=python/run-pytest.sh || status=$$?; \
	for f in python/tsan/report.*; do \
	  [ -f "$$f" ] || continue; \
	  echo "check-python-threads: ThreadSanitizer's report in $$f:" >&2; cat "$$f" >&2; status=1; \
	done; \
	exit $$status

else !BC_PYTHON

check-python-threads:
	@echo "check-python-threads: built without the Python package (configure PYTHON=...)" >&2; exit 1

endif !BC_PYTHON
