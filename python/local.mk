# python/: the Python package `bagcache` (bagz-compatible Reader, Writer,
# Index, MultiIndex).
#
# The C extension bagcache._bagcache is a libtool module linked with the
# static core (libbagcache_core.la): it carries the library inside, so the
# build tree's package works without an installed libbagcache or an rpath,
# and the installed package does not depend on where libbagcache.so went.
# Only PyInit__bagcache is exported, so its copy of the library cannot
# clash with a libbagcache.so loaded into the same process.
#
# The build tree holds an importable package in python/pkg/bagcache/: the
# extension under the interpreter's suffix (_bagcache.cpython-311-...so) and
# copies of the pure-Python files.  `make check` runs pytest on it with
# PYTHONPATH=python/pkg (python/run-pytest.sh).  `make install` puts the
# same files into $(pyexecdir)/bagcache.
#
# python/setup.py + pyproject.toml build the same extension with pip,
# against an installed libbagcache found with pkg-config.

BC_PY_C_SOURCES = \
	python/src/module.c \
	python/src/core/bcpy.h \
	python/src/core/scratch.c \
	python/src/core/notice.c \
	python/src/core/indices.c \
	python/src/core/sequence.c \
	python/src/core/seq.c \
	python/src/core/bulk.c \
	python/src/core/iterator.c \
	python/src/bagz/writer.c \
	python/src/bagz/index.c \
	python/src/views/views.c \
	python/src/loadit/loadit.h \
	python/src/loadit/loadit.c \
	python/src/loadit/source.c \
	python/src/loadit/tee.c \
	python/src/train/train.h \
	python/src/train/train.c \
	python/src/train/order.h \
	python/src/train/order.c \
	python/src/train/loader.c \
	python/src/train/pool.h \
	python/src/train/pool.c

BC_PY_TEST_FILES = \
	python/tests/conftest.py \
	python/tests/bagz_data.py \
	python/tests/test_bagz_readme.py \
	python/tests/test_bagz_golden.py \
	python/tests/test_bagz_reader.py \
	python/tests/test_bagz_writer.py \
	python/tests/test_bagz_iter.py \
	python/tests/test_bagz_index.py \
	python/tests/test_bagz_errors.py \
	python/tests/test_bagz_concurrency.py \
	python/tests/test_bagz_build.py \
	python/tests/test_bench_quick.py \
	python/tests/test_train_bench_quick.py \
	python/tests/test_cache_demo.py \
	python/tests/test_batch_reads.py \
	python/tests/test_os_errors.py \
	python/tests/test_cache_clear_busy.py \
	python/tests/test_index_edges.py \
	python/tests/test_min_python.py \
	python/tests/test_seq_base.py \
	$(BC_PY_VIEWS_TEST_FILES) \
	$(BC_PY_LOADIT_TEST_FILES) \
	$(BC_PY_TRAIN_TEST_FILES)

# Training loops (bagcache.train, loaderx-compatible): their tests.
BC_PY_TRAIN_TEST_FILES = \
	python/tests/test_train_loaderx.py \
	python/tests/test_train_sampler.py \
	python/tests/test_train_loader.py \
	python/tests/test_train_pool.py \
	python/tests/test_train_cloader.py \
	python/tests/test_torch.py

# The loadit-compatible views: their tests and the Python documentation.
BC_PY_VIEWS_TEST_FILES = \
	python/tests/test_views.py \
	python/tests/test_views_native.py \
	python/tests/test_views_docs.py
dist_doc_DATA += doc/python.md

# LoadIt (loadit-compatible caches over Python iterators): its tests.
BC_PY_LOADIT_TEST_FILES = \
	python/tests/loadit_helpers.py \
	python/tests/test_loadit.py \
	python/tests/test_loadit_first_pass.py \
	python/tests/test_loadit_procs.py \
	python/tests/test_loadit_dropin.py \
	python/tests/test_loadit_ux.py \
	python/tests/test_loadit_root.py \
	python/tests/test_loadit_progress.py \
	python/tests/test_loadit_observe.py \
	python/tests/test_loadit_damage.py \
	python/tests/test_loadit_publish.py \
	python/tests/test_batch_fanout.py \
	python/tests/test_interrupt.py \
	python/tests/test_loadit_limit_load.py \
	python/tests/test_loadit_close.py \
	python/tests/test_loadit_passes.py \
	python/tests/test_loadit_fork_locks.py

EXTRA_DIST += \
	$(BC_PY_C_SOURCES) \
	python/bagcache/__init__.py \
	python/bagcache/views.py \
	python/bagcache/loadit.py \
	python/bagcache/_progress.py \
	python/bagcache/train.py \
	python/bagcache/torch.py \
	python/bagcache/__init__.pyi \
	python/bagcache/py.typed \
	python/pyproject.toml \
	python/setup.py \
	python/README.md \
	python/tests/run-pytest.sh.in \
	$(BC_PY_TEST_FILES)

if BC_PYTHON

BC_DEMO_INTERP = $(PYTHON)

bagcachepyexecdir = $(pyexecdir)/bagcache
bagcachepyexec_LTLIBRARIES = python/_bagcache.la
python__bagcache_la_SOURCES = $(BC_PY_C_SOURCES)
python__bagcache_la_CPPFLAGS = $(AM_CPPFLAGS) -I$(srcdir)/python/src $(PYTHON_CFLAGS)
python__bagcache_la_LIBADD = libbagcache_core.la $(BC_DEP_LIBS)
python__bagcache_la_LDFLAGS = -module -avoid-version -shared \
	-export-symbols-regex '^PyInit__bagcache$$'
bagcachepyexec_PYTHON = python/bagcache/__init__.py python/bagcache/views.py \
	python/bagcache/loadit.py python/bagcache/_progress.py \
	python/bagcache/train.py python/bagcache/torch.py
bagcachepyexec_DATA = python/bagcache/__init__.pyi python/bagcache/py.typed

# ---- the build tree's importable package ------------------------------------

BC_PY_PKG = python/pkg/bagcache
BC_PY_PKG_FILES = \
	$(BC_PY_PKG)/_bagcache$(PYTHON_EXT_SUFFIX) \
	$(BC_PY_PKG)/__init__.py \
	$(BC_PY_PKG)/views.py \
	$(BC_PY_PKG)/loadit.py \
	$(BC_PY_PKG)/_progress.py \
	$(BC_PY_PKG)/train.py \
	$(BC_PY_PKG)/torch.py \
	$(BC_PY_PKG)/__init__.pyi \
	$(BC_PY_PKG)/py.typed
noinst_DATA = $(BC_PY_PKG_FILES)
CLEANFILES += $(BC_PY_PKG_FILES)

$(BC_PY_PKG)/_bagcache$(PYTHON_EXT_SUFFIX): python/_bagcache.la
	$(AM_V_GEN)$(MKDIR_P) $(@D) && \
	cp -f python/.libs/_bagcache.so $@.tmp && mv -f $@.tmp $@
$(BC_PY_PKG)/__init__.py: $(srcdir)/python/bagcache/__init__.py
	$(AM_V_GEN)$(MKDIR_P) $(@D) && cp -f $(srcdir)/python/bagcache/__init__.py $@
$(BC_PY_PKG)/views.py: $(srcdir)/python/bagcache/views.py
	$(AM_V_GEN)$(MKDIR_P) $(@D) && cp -f $(srcdir)/python/bagcache/views.py $@
$(BC_PY_PKG)/loadit.py: $(srcdir)/python/bagcache/loadit.py
	$(AM_V_GEN)$(MKDIR_P) $(@D) && cp -f $(srcdir)/python/bagcache/loadit.py $@
$(BC_PY_PKG)/_progress.py: $(srcdir)/python/bagcache/_progress.py
	$(AM_V_GEN)$(MKDIR_P) $(@D) && cp -f $(srcdir)/python/bagcache/_progress.py $@
$(BC_PY_PKG)/train.py: $(srcdir)/python/bagcache/train.py
	$(AM_V_GEN)$(MKDIR_P) $(@D) && cp -f $(srcdir)/python/bagcache/train.py $@
$(BC_PY_PKG)/torch.py: $(srcdir)/python/bagcache/torch.py
	$(AM_V_GEN)$(MKDIR_P) $(@D) && cp -f $(srcdir)/python/bagcache/torch.py $@
$(BC_PY_PKG)/__init__.pyi: $(srcdir)/python/bagcache/__init__.pyi
	$(AM_V_GEN)$(MKDIR_P) $(@D) && cp -f $(srcdir)/python/bagcache/__init__.pyi $@
$(BC_PY_PKG)/py.typed: $(srcdir)/python/bagcache/py.typed
	$(AM_V_GEN)$(MKDIR_P) $(@D) && cp -f $(srcdir)/python/bagcache/py.typed $@

# ---- tests -------------------------------------------------------------------

check_SCRIPTS += python/run-pytest.sh
TESTS += python/run-pytest.sh
CLEANFILES += python/run-pytest.sh

python/run-pytest.sh: $(srcdir)/python/tests/run-pytest.sh.in Makefile
	$(AM_V_GEN)$(MKDIR_P) $(@D) && \
	sed -e 's|@PYTHON[@]|$(PYTHON)|g' -e 's|@CC[@]|$(CC)|g' \
	    -e 's|@EXT_SUFFIX[@]|$(PYTHON_EXT_SUFFIX)|g' \
	    $(srcdir)/python/tests/run-pytest.sh.in > $@.tmp && mv -f $@.tmp $@

# make check's last word on the Python tests that did not run, after the
# summary (which says SKIP but not why): why run-pytest.sh skipped them all
# (no pytest), or pytest's skipped tests with their reasons (e.g. no numpy).
bc-python-check-notice: check-TESTS
	@log=python/run-pytest.log; [ -f $$log ] || exit 0; \
	sed -n 's/^run-pytest: SKIP: /make check: the Python tests were skipped: /p' $$log; \
	if grep -q '^SKIPPED' $$log; then \
	  echo "make check: pytest skipped tests (python/run-pytest.log):"; \
	  grep '^SKIPPED' $$log | sed 's/^/  /'; \
	fi

# ---- install: the extension under the interpreter's suffix ------------------
# libtool installs _bagcache.so (+ .la); Python would import that name too,
# but the suffixed name keeps another interpreter version from loading it.

bc-python-install-exec:
	cd "$(DESTDIR)$(bagcachepyexecdir)" && \
	mv -f _bagcache.so "_bagcache$(PYTHON_EXT_SUFFIX)" && rm -f _bagcache.la
bc-python-uninstall:
	rm -f "$(DESTDIR)$(bagcachepyexecdir)/_bagcache$(PYTHON_EXT_SUFFIX)"
# The installed package imports and round-trips a record (no bytecode is
# written, so uninstall leaves nothing behind).
bc-python-installcheck:
	cd "$${TMPDIR:-/tmp}" && \
	PYTHONPATH="$(DESTDIR)$(pyexecdir)" PYTHONDONTWRITEBYTECODE=1 $(PYTHON) -c \
	  'import bagcache, os, sys, tempfile; \
	   assert bagcache.__file__.startswith(sys.argv[1]), bagcache.__file__; \
	   d = tempfile.mkdtemp(); p = os.path.join(d, "x.bagz"); \
	   w = bagcache.Writer(p); w.write(b"ok"); w.close(); \
	   assert list(bagcache.Reader(p)) == [b"ok"]; \
	   os.remove(p); os.rmdir(d); print("bagcache", bagcache.__version__, "installed OK")' \
	  "$(DESTDIR)$(pyexecdir)"

else !BC_PYTHON

bc-python-install-exec:
	@:
bc-python-uninstall:
	@:
bc-python-installcheck:
	@:
bc-python-check-notice:
	@:

endif !BC_PYTHON

install-exec-hook: bc-python-install-exec
uninstall-hook: bc-python-uninstall
installcheck-local: bc-python-installcheck
check-local: bc-python-check-notice
.PHONY: bc-python-install-exec bc-python-uninstall bc-python-installcheck \
	bc-python-check-notice
