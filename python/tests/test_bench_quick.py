"""tests/bench/python_bench.py keeps working: on tiny sizes (--quick) it
must finish, print every row, and find Python and C returning the same
bytes (it exits 1 otherwise).  Its timings are not checked here; that is
what the program is for (doc/performance.md)."""

import os
import subprocess
import sys

import pytest

# The start of each row's name, in the order the table prints them.
ROWS = (
    "r[i] random loop",
    "view[i] random loop",
    "read_indices(np, ",
    "read_indices(np, ",
    "read_indices_iter(np)",
    "LoadIt get (warm, random)",
    "LoadIt first pass",
    "(first pass, reading thread CPU)",
    "(write() of as many bytes, ",
    "(O_DIRECT write of as many bytes)",
    "(Writer of the same pickles)",
    "(LoadIt first pass, word counts)",
    "LoadIt cold get (max_cache_size=1)",
    "LoadIt get raw 1 KiB, record CRC-32C",
    "LoadIt get raw 1 KiB, zstd checksums",
)

# read_indices against the floor: every subject at every batch size
# (--quick: 256 to 2,048), idle, then loaded, after the rows above.
BATCH_SUBJECTS = ("Reader .bag", "view .bag", "Reader .bagz", "view .bagz",
                  "LoadIt raw .bag", "LoadIt view .bag", "LoadIt raw .bagz")
BATCH_SIZES = (256, 1024, 2048)
BATCH_ROWS = tuple(f"read_indices batch {b:,}: {s}, {load}" for load in ("idle", "loaded")
                   for s in BATCH_SUBJECTS for b in BATCH_SIZES)


def test_python_bench_runs_on_tiny_sizes(tmp_path):
    pytest.importorskip("numpy")
    srcdir, builddir = os.environ.get("BC_SRCDIR"), os.environ.get("BC_BUILDDIR")
    if srcdir is None or builddir is None:
        pytest.skip("not run by make check")
    bench = os.path.join(srcdir, "tests", "bench", "python_bench.py")
    proc = subprocess.run(
        [sys.executable, bench, "--build", builddir, "--quick", "--repeat", "1",
         "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    table = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    names = [line[2:].split(" | ")[0] for line in table[1:]]  # after the header
    assert len(names) == len(ROWS) + len(BATCH_ROWS), names
    for name, start in zip(names, ROWS + BATCH_ROWS):
        assert name.startswith(start), (name, start)


def test_regen_bench_runs_on_tiny_sizes(tmp_path):
    """tests/bench/regen_bench.py (a disk limit smaller than the data) on
    tiny sizes: every row prints, every read returned the right item (it
    exits 1 otherwise), and the record counts, exact for its fixed seed,
    keep their order: parked passes read fewer records than one pass, and a
    seekable source one shard per miss."""
    srcdir, builddir = os.environ.get("BC_SRCDIR"), os.environ.get("BC_BUILDDIR")
    if srcdir is None or builddir is None:
        pytest.skip("not run by make check")
    bench = os.path.join(srcdir, "tests", "bench", "regen_bench.py")
    proc = subprocess.run(
        [sys.executable, bench, "--build", builddir, "--quick", "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {}
    for line in proc.stdout.splitlines():
        for name in ("restart from 0 (loop)", "LoadIt (defaults)", "LoadIt, create_iter(start)",
                     "LoadIt, max_passes=1"):
            if line.startswith(name):
                cells = line[len(name):].split()
                rows[name] = (float(cells[0].replace(",", "")), cells[-1])
    assert len(rows) == 4, proc.stdout
    assert rows["LoadIt (defaults)"][0] < rows["LoadIt, max_passes=1"][0]
    assert rows["LoadIt, max_passes=1"][0] < rows["restart from 0 (loop)"][0]
    assert rows["LoadIt, create_iter(start)"][1] == "100.0"  # records per miss
