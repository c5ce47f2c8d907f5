BC_COMMON_SOURCES = \
	src/common/internal.h \
	src/common/error.c \
	src/common/notice.c \
	src/common/buf.c \
	src/common/io.c \
	src/common/publish.c \
	src/common/pool.c \
	src/common/hash.c \
	src/common/crc32c.c \
	src/common/crc32c.h \
	src/common/xxh64.c \
	src/common/version.c \
	src/common/size.c \
	src/common/guard.c
