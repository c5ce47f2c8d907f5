BC_BAG_SOURCES = \
	src/bag/internal.h \
	src/bag/spec.c \
	src/bag/file.c \
	src/bag/direct_io.c \
	src/bag/codec.c \
	src/bag/shard.c \
	src/bag/reader.c \
	src/bag/crc_table.c \
	src/bag/writer.c \
	src/bag/index.c
