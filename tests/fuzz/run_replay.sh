#!/bin/sh
# Replays the bag reader fuzzer's seed corpus and saved crash reproducers
# through the fuzz target (tests/fuzz/replay), then the cache state fuzzer's
# (tests/fuzz/replay_state), so every property the fuzzers check is checked
# on them in each `make check`.
set -eu
src=${BC_SRCDIR:?BC_SRCDIR is not set (run through make check)}
build=${BC_BUILDDIR:-.}
set -- "$src/tests/fuzz/corpus/bag_reader"
[ -d "$src/tests/fuzz/crashes" ] && set -- "$@" "$src/tests/fuzz/crashes"
"$build/tests/fuzz/replay" "$@"
# The cache state fuzzer's seeds and saved reproducers.
set -- "$src/tests/fuzz/corpus/cache_state"
[ -d "$src/tests/fuzz/crashes/cache_state" ] &&
  set -- "$@" "$src/tests/fuzz/crashes/cache_state"
exec "$build/tests/fuzz/replay_state" "$@"
