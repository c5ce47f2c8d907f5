"""tests/bench/train_bench.py keeps working: on tiny sizes (--quick, without
torch's row, whose import and worker processes take seconds) it must
finish, print every row in order, and find every loader's first batch
equal to numpy's X[idx] (it exits 1 otherwise), on both kinds of data:
the default synthetic images, which zstd compresses (the header's ratio
below 1: every .bagz record goes through zstd's decoder), and uniform
random bytes, which it stores (ratio at least 1).  Its timings are not
checked here; that is what the program is for (doc/performance.md,
"Training loops")."""

import os
import re
import subprocess
import sys

import pytest

# (row, baseline, target) of each line of the table, in order.
F = "numpy memmap X[idx] (floor)"
COPY = "(C memcpy gather from the .npy mapping, 1 thread)"
ZSTD1 = "(C zstd decompression of the rows' frames, 1 thread)"
ZSTD4 = "(C zstd decompression of the rows' frames, 4 threads, fresh batches)"
ZSTD4R = "(C zstd alone, 4 threads, batches recycled)"
ZSTDC = "(C zstd alone, 4 C threads, no Python, a buffer each)"
ZSTDL = "(C zstd alone, 4 C threads, the loader's memory and hand-off)"
READER_Z = "(reader alone: bc_bag_get_many .bagz, 4 threads)"
DL, DLZ = "DataLoader ARDataset .bag, 4 workers", "DataLoader ARDataset .bagz, 4 workers"
# The steady-state pair (--quick: 16 batches a run).
DLZ_LONG = DLZ + ", 16 batches a run"
ZSTDB_LONG = "C zstd alone from the .bagz, 16 batches a run"
ZSTDL_LONG = "(C zstd alone, the frames' addresses given, 16 batches a run)"
ROWS = (
    (F, "-", "-"),
    (COPY, F, "-"),
    (ZSTD1, F, "-"),
    (ZSTD4, F, "-"),
    (ZSTD4R, F, "-"),
    (ZSTDC, F, "-"),
    (ZSTDL, F, "-"),
    ("(numpy memmap, np.load in the run)", F, "-"),
    ("(numpy in-memory X[idx])", F, "-"),
    ("(bytes gather: per-row mmap slices, b''.join)", F, "-"),
    (READER_Z, F, "-"),
    ("(reader alone: bc_bag_get_many .bag, 4 threads)", F, "-"),
    ("(ARDataset.__getitems__ .bag, calling thread)", COPY, "-"),
    ("(ARDataset.__getitems__ .bagz, calling thread)", ZSTD1, "-"),
    (DL, F, ">= 0.8x"),
    (DLZ_LONG, ZSTDB_LONG, ">= 1x"),
    (DLZ_LONG, ZSTDL_LONG, "-"),
    (DLZ, ZSTDL, "-"),
    (DLZ, ZSTD4R, "-"),
    (DLZ, ZSTD4, "-"),
    (DLZ, ZSTDC, "-"),
    (DLZ, READER_Z, "-"),
    (DL, "loaderx-style r[i] .bag, 4 threads", ">= 3x"),
    (DLZ, "loaderx-style r[i] .bagz, 4 threads", ">= 3x"),
    (DL, "torch DataLoader r[i] .bag, 2 workers", ">= 3x"),
    ("(DataLoader .bag, ARDataset(path) in the run, 4 workers)",
     "(numpy memmap, np.load in the run)", "-"),
    ("(DataLoader .bag, 2 workers)", F, "-"),
)
TORCH = 24  # the torch row: not measured with --no-torch


@pytest.mark.parametrize("data", [None, "images", "random"])
def test_train_bench_runs_on_tiny_sizes(tmp_path, data):
    pytest.importorskip("numpy")
    srcdir, builddir = os.environ.get("BC_SRCDIR"), os.environ.get("BC_BUILDDIR")
    if srcdir is None or builddir is None:
        pytest.skip("not run by make check")
    bench = os.path.join(srcdir, "tests", "bench", "train_bench.py")
    proc = subprocess.run(
        [sys.executable, bench, "--build", builddir, "--quick", "--no-torch",
         "--dir", str(tmp_path)] + (["--data", data] if data else []),
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The header names the data and the zstd ratio of the .bagz records.
    m = re.search(r"; data (\w+), zstd ratio (\d+\.\d+) \(\.bagz records / raw bytes\)$",
                  proc.stdout.splitlines()[0])
    assert m, proc.stdout
    assert m.group(1) == (data or "images")
    ratio = float(m.group(2))
    if m.group(1) == "images":  # compressible as small natural images are
        assert 0.6 < ratio < 0.9, ratio
    else:  # stored blocks: a frame header each
        assert 1.0 <= ratio < 1.01, ratio
    table = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    cells = [[c.strip() for c in line[2:-2].split(" | ")] for line in table]
    assert cells[0] == ["row", "batches/s", "MB/s", "baseline", "batches/s", "MB/s", "ratio",
                        "CPU ratio", "target", "ok"]
    body = cells[1:]
    assert [(c[0], c[3], c[8]) for c in body] == list(ROWS), proc.stdout
    for k, c in enumerate(body):
        # batches/s and MB/s agree: 8 batches of 64 rows of 3,072 bytes.
        if k == TORCH:
            assert c[6] == "n/a (--no-torch)" and c[4] == c[5] == ""
            continue
        bps, mbs = float(c[1].replace(",", "")), float(c[2].replace(",", ""))
        assert bps > 0 and mbs == pytest.approx(bps * 64 * 3072 / 1e6, rel=1e-3, abs=0.1)
