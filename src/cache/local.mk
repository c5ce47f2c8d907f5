BC_CACHE_SOURCES = \
	src/cache/internal.h \
	src/cache/fills.h \
	src/cache/passes.h \
	src/cache/prefetch.h \
	src/cache/readers.h \
	src/cache/owner.c \
	src/cache/meta.c \
	src/cache/state.c \
	src/cache/store.h \
	src/cache/store.c \
	src/cache/store_lmdb.c \
	src/cache/lmdb_guard.h \
	src/cache/lmdb_guard.c \
	src/cache/validate.c \
	src/cache/cache.c \
	src/cache/slots.h \
	src/cache/slots.c \
	src/cache/readers.c \
	src/cache/read_into.c \
	src/cache/access.c \
	src/cache/fill.c \
	src/cache/fill_append.h \
	src/cache/append_ring.h \
	src/cache/append_ring.c \
	src/cache/append.c \
	src/cache/maint.c \
	src/cache/prefetch.c
