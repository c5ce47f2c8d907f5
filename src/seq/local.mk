BC_SEQ_SOURCES = \
	src/seq/internal.h \
	src/seq/seq.c \
	src/seq/batch.c \
	src/seq/read_into.c \
	src/seq/slice.c \
	src/seq/take.c \
	src/seq/concat.c \
	src/seq/interleave.c \
	src/seq/repeat.c \
	src/seq/perm.c \
	src/seq/shuffle.c \
	src/seq/partition.c \
	src/seq/order.c \
	src/seq/readahead.c
