#!/bin/sh
# Replays the bag reader fuzzer's seed corpus and saved crash reproducers
# through the fuzz target (tests/fuzz/replay), so every property the fuzzer
# checks is checked on them in each `make check`.
set -eu
src=${BC_SRCDIR:?BC_SRCDIR is not set (run through make check)}
build=${BC_BUILDDIR:-.}
set -- "$src/tests/fuzz/corpus/bag_reader"
[ -d "$src/tests/fuzz/crashes" ] && set -- "$@" "$src/tests/fuzz/crashes"
exec "$build/tests/fuzz/replay" "$@"
