#!/bin/sh
# Runs the bag_read benchmark on tiny sizes: it must finish and find the
# bytes bagcache returns equal to those of its plain-code baselines (it
# exits 1 otherwise).  The timings it prints are not checked.
set -eu
build=${BC_BUILDDIR:-.}
exec "$build/tests/bench/bag_read" --quick
