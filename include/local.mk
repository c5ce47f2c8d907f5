include_HEADERS += include/bagcache.h
bagcacheinclude_HEADERS += \
	include/bagcache/error.h \
	include/bagcache/bag.h \
	include/bagcache/index.h \
	include/bagcache/seq.h \
	include/bagcache/cache.h \
	include/bagcache/archive.h
