# The keyed-archive layer (barecat 0.2.7's format, doc/archive.md): built
# only where configure found SQLite.
BC_ARCHIVE_SOURCES = \
	src/archive/internal.h \
	src/archive/path.c \
	src/archive/schema.c \
	src/archive/index.c \
	src/archive/shards.c \
	src/archive/archive.c \
	src/archive/tree.c
