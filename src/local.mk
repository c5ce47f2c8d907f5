# The installed library: the core convenience library with only the public
# bc_ names exported (internal helpers are bc__ and stay hidden).
lib_LTLIBRARIES += libbagcache.la
libbagcache_la_SOURCES =
libbagcache_la_LIBADD = libbagcache_core.la $(BC_DEP_LIBS)
libbagcache_la_LDFLAGS = -version-info $(BC_LT_VERSION) \
	-export-symbols-regex '^bc_[^_]' -no-undefined

# Everything, linked statically into tests and the CLI so they can reach
# internal (bc__) helpers too.
noinst_LTLIBRARIES += libbagcache_core.la
libbagcache_core_la_SOURCES = $(BC_COMMON_SOURCES) $(BC_BAG_SOURCES) $(BC_SEQ_SOURCES) \
	$(BC_CACHE_SOURCES)
if BC_ARCHIVE
libbagcache_core_la_SOURCES += $(BC_ARCHIVE_SOURCES)
endif
libbagcache_core_la_LIBADD = $(BC_DEP_LIBS)
