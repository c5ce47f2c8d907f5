# doc/: the Markdown documentation and the demo program.
#
# The demo (doc/examples/demo.c) is built on demand (`make doc/examples/demo`,
# used by `./bootstrap.sh demo`) and by `make check`.  So is the README's C
# example, extracted from README.md at build time.  demo-test.sh runs both
# and checks what they print, so neither example can silently rot.
EXTRA_PROGRAMS += doc/examples/demo
check_PROGRAMS += doc/examples/demo doc/examples/readme-example
doc_examples_demo_SOURCES = doc/examples/demo.c
doc_examples_demo_LDADD = libbagcache.la

nodist_doc_examples_readme_example_SOURCES = doc/examples/readme-example.c
doc_examples_readme_example_LDADD = libbagcache.la
CLEANFILES += doc/examples/readme-example.c

# The README's only ```c block, verbatim.
doc/examples/readme-example.c: $(srcdir)/README.md
	$(AM_V_GEN)$(MKDIR_P) $(@D) && \
	sed -n '/^```c$$/,/^```$$/{/^```/d;p;}' $(srcdir)/README.md > $@.tmp && \
	test -s $@.tmp && mv $@.tmp $@

TESTS += doc/examples/demo-test.sh
EXTRA_DIST += doc/examples/demo-test.sh

# `make demo` (what `./bootstrap.sh demo` runs): first the cache demo, a
# slow Python iterator cached under a disk limit (doc/examples/cache_demo.py,
# run on the build tree's package), then the bag demo.  DEMO_DIR is where
# they write.  python/tests/test_cache_demo.py runs the cache demo quickly.
DEMO_DIR = $${TMPDIR:-/tmp}/bagcache-demo
.PHONY: demo
demo: doc/examples/demo $(noinst_DATA)
	@if test -n "$(BC_DEMO_INTERP)"; then \
	  echo "== the cache demo (doc/examples/cache_demo.py)"; \
	  PYTHONPATH="$(abs_builddir)/python/pkg$${PYTHONPATH:+:$$PYTHONPATH}" \
	    $(BC_DEMO_INTERP) $(srcdir)/doc/examples/cache_demo.py $(DEMO_DIR) || exit 1; \
	  echo; \
	else \
	  echo "demo: built without the Python package: no cache demo (configure PYTHON=...)"; \
	fi
	@echo "== the bag demo (doc/examples/demo.c)"
	./doc/examples/demo $(DEMO_DIR)

# Installed under $(docdir); README.md is distributed by the top Makefile.am.
dist_doc_DATA += \
	doc/format.md \
	doc/c-api.md \
	doc/architecture.md \
	doc/cache.md \
	doc/archive.md

docexamplesdir = $(docdir)/examples
dist_docexamples_DATA = doc/examples/demo.c doc/examples/cache_demo.py
