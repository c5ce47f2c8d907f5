#!/usr/bin/env python3
"""train_bench - bagcache.train's DataLoader (rows gathered in C into a
numpy batch) against the floors under it and the Python loaders it
replaces, all measured in the same run.  Prints a table; it is not a test
and never fails on timings (exit 1 only if a loader returns other rows
than numpy does, 2 on bad usage).

    cd build && PYTHONPATH=python/pkg python3 ../tests/bench/train_bench.py
    python3 tests/bench/train_bench.py --build build [--quick]

Options: --build DIR (the build tree: python/pkg and .libs/libbagcache.so;
default $BC_BUILDDIR or the current directory), --rows N (100,000),
--batches N (batches per run, 200), --long N (batches per run of the
steady-state pair, 1,000; 0 leaves it out), --batch-size B (256),
--workers W (the thread loaders' num_workers, 4), --torch-workers W (2), --repeat R
(5), --seed S (0), --data {images,random} (images), --dir DIR (where the
data goes; default a new temporary directory), --no-torch (leave torch's
row out), --quick (2,000 rows, 8 batches of 64, 16 for the steady-state
pair, one repeat).

Data: N rows of 32x32x3 uint8 (3,072 bytes), numpy's default_rng(seed):
  images  (the default) synthetic small images that compress as natural
          ones do: per image a base colour, a gentle linear gradient per
          channel, two soft Gaussian blobs and a little Gaussian noise
          (sigma 2), rounded and clipped.  zstd keeps about 80% of the
          bytes (the header prints the ratio), so every .bagz record goes
          through zstd's real decoder: this measures bagcache's cost per
          compressed row against zstd alone.
  random  uniform bytes: zstd stores every record as one raw block,
          which bagcache copies without zstd (checking its checksum), so
          the .bagz rows measure that copy, not decompression.
The header line gives the zstd ratio: the .bagz records' compressed bytes
over their raw bytes.  The rows are written with bagcache.converter
to DIR/bag (compression "none": .bag shards of 4,096 rows) and DIR/bagz
(zstd, one frame per record), and with numpy.save to DIR/data.npy, opened
with np.load(mmap_mode="r").  Every file is read once before timing (page
cache warm).  The index batches are drawn once, from
Sampler(N, B, mode=IID, seed=seed) (uniform with replacement); every row
reads exactly these batches (the DataLoader with the same seed draws the
same ones; the first batch of every loader is checked against numpy's).
A run reads --batches batches and drops each when the next arrives, as a
training step would; the loaders are made inside the timed run (thread
loaders start their threads; torch's workers are started once before
timing, persistent_workers=True).  The files stay open from run to run
(the .npy's np.load, one Reader per format under every loader, a
training loop's dataset across epochs): a mapping opened anew faults in
each page it touches, which costs as much as the copy itself, so a row
opening its files inside the run is compared only with another that does.  Each run of every row, R times, in
turn: the table shows medians, batches/s and MB/s (10^6 bytes of rows per
second), the ratio of the subject's rate to its baseline's, and the ratio
of their CPU times (the process's, all threads: steadier than the wall
clock on a shared machine; n/a for torch, whose workers are processes).

Rows:
  numpy memmap X[idx]   the floor: fancy indexing of the memory-mapped .npy
                        with each batch, on the calling thread.
  (C memcpy gather)     the floor in plain C (gather_floor.c beside this
                        file, compiled into DIR with $CC or Python's CC and
                        called through ctypes, GIL released): one memcpy
                        per row from a mapping of the .npy into a fresh
                        batch (np.empty, as X[idx] makes), on the calling
                        thread.  n/a where it does not compile.
  (C zstd decompression, 1 thread / W threads, fresh batches)
                        ZSTD_decompressDCtx of each row's frame, straight
                        from mappings of the shards (bounds from their
                        limits, read before timing) into a fresh batch
                        (np.empty), on the calling thread, then on W Python
                        threads taking batches in turn (as the DataLoader's
                        workers): zstd alone, no bagcache code.  With W
                        threads the batches are allocated by the workers
                        and freed by the consumer, and glibc's per-thread
                        arenas give fresh pages: up to one minor fault per
                        4 kB page of a batch (information).
  (C zstd alone, W threads, batches recycled)
                        the same records, the same W Python threads, the
                        same frames decompressed into a batch, with the
                        Python loader's memory handling: a batch's array
                        returns to a free list once the consumer drops it
                        (when the next arrives), and later batches
                        decompress into it (np.empty only when the list is
                        empty).  The floor of session 9 (information).
  (C zstd alone, W C threads, the loader's memory and hand-off)
                        the floor under .bagz: gather_floor.c's
                        floor_zstd_loader, with no bagcache code and no
                        Python: W POSIX threads take the batches in order,
                        at most 4 + W ahead of the consumer (prefetch_size
                        ready, and one being built per thread), each
                        decompressing its batch's frames with
                        ZSTD_decompressDCtx into memory from a LIFO free
                        list (malloc when empty); the calling thread takes
                        the batches in order and gives the previous one's
                        memory back when the next arrives.  The same
                        records, threads, prefetch depth and output memory
                        kind (a batch of its own per batch in flight,
                        reused once dropped) as the DataLoader's C
                        workers.
  DataLoader .bagz, --long batches a run, and (C zstd alone, the frames'
  addresses given, --long batches a run)
                        the DataLoader in steady state: the .bagz
                        DataLoader and the row above, each reading --long
                        batches a run
                        (the first --batches are the others' batches).  A
                        run of 200 also counts the loader's start (its
                        threads, the first batches' fresh memory) and its
                        close, which waits for the batches in flight: 4
                        to 6 ms against about 130 ms; the floor knows where
                        the run ends and builds nothing past it, while the
                        endless DataLoader has up to prefetch_size +
                        num_workers batches under way when it is closed.
                        For information since session 12 (the target's
                        pair is below).
  C zstd alone from the .bagz, --long batches a run
                        the floor of the .bagz target (1.0x: the rate of
                        zstd alone from the .bagz), with the .bagz
                        DataLoader reading --long batches a run:
                        gather_floor.c's floor_zstd_bagz_loader, the row
                        above but each row's frame is found as any reader
                        of the .bagz must find it (the shard by a binary
                        search over the shards' first rows, then its two
                        limits read in place from the mapped file's limits
                        section), where the row above is handed every
                        frame's address and size in batch order, read
                        sequentially from an array built before timing.
                        Still no bagcache code, and nothing a reader of
                        the .bagz does not have to do.
  (C zstd alone, W C threads, no Python, a buffer each)
                        the same frames, batch after batch, decompressed by
                        W POSIX threads in gather_floor.c taking batches in
                        turn, each into one buffer of its own reused for
                        every batch it takes: no allocation, no hand-off,
                        no batch held by anyone, so W batches of memory
                        stay hot in the CPU caches (information: a loader
                        that hands batches out cannot reuse memory so).
  (numpy np.load in the run)
                        X[idx] on a memmap opened by np.load in the run.
  (numpy in memory)     X[idx] on the array in memory (information).
  (bytes gather)        per row, a bytes slice of an mmap of the .npy,
                        then b"".join into the batch: the Python floor of
                        any loader that touches each row in Python.
  (reader alone .bagz)  bagcache's C reader decompressing each batch's
                        records of the .bagz into 256 preallocated buffers
                        reused from batch to batch (bc_bag_get_many through
                        ctypes, GIL released, the Reader's default
                        parallelism), on W Python threads taking batches
                        in turn, with no batch assembled and no Python
                        object per record.
  (reader alone .bag)   the same over the .bag.
  (ARDataset.__getitems__, calling thread)
                        one batch at a time on the calling thread: the C
                        gather (bc_seq_read_into) with no loader around it,
                        against the C floor of its format.
  DataLoader .bag       bagcache.DataLoader(ARDataset.from_sequence(the
                        .bag Reader, uint8, (32, 32, 3)), num_workers=W,
                        batch_size=B, mode=IID, seed=seed):
                        against numpy memmap X[idx] (target >= 0.8x), the
                        loaderx-style loader (>= 3x) and torch's (>= 3x).
  DataLoader .bagz      the same over DIR/bagz: against zstd alone in C on
                        as many threads into recycled batches (target 1.0x:
                        the rate of zstd alone) and into fresh ones,
                        bagcache's reader alone, and the loaderx-style
                        loader on .bagz (>= 3x).
  (DataLoader, ARDataset(path) in the run)
                        DataLoader(ARDataset(DIR/bag)) made in the run:
                        against numpy's np.load in the run.
  (DataLoader, 2 workers)
                        the .bag row with num_workers=2 (information).
  loaderx-style         W Python threads (a ThreadPoolExecutor, W batches
                        in flight, delivered in order, as loaderx's
                        DataLoader) calling a dataset's __getitems__ that
                        does np.stack([np.frombuffer(r[i], np.uint8) ...])
                        row by row through a bagcache.Reader.
  torch DataLoader      torch.utils.data.DataLoader over a map-style dataset
                        whose __getitem__ is np.frombuffer(r[i]) reshaped
                        (a Reader opened in each worker process),
                        num_workers=2, batch_size=B, the batches' indices
                        as its sampler, default collate (a uint8 tensor).
"""

import argparse
import collections
import concurrent.futures
import ctypes
import glob
import mmap
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import queue
import time

from bench_clib import BcBuf, CBag, ensure_static_tls, use_build

ROW_SHAPE = (32, 32, 3)
ROW_BYTES = 32 * 32 * 3
PREFETCH = 4  # the DataLoader's default prefetch_size


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=os.environ.get("BC_BUILDDIR", "."))
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--long", type=int, default=1000)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--torch-workers", type=int, default=2)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", choices=("images", "random"), default="images")
    p.add_argument("--dir")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--quick", action="store_true")
    a = p.parse_args()
    if a.quick:
        a.rows, a.batches, a.long, a.batch_size, a.repeat = 2_000, 8, 16, 64, 1
    if (min(a.rows, a.batches, a.batch_size, a.workers, a.repeat) < 1 or a.torch_workers < 0
            or a.long < 0):
        p.error("sizes must be >= 1")
    return a


# ---- data ---------------------------------------------------------------------------


def make_rows(np, kind, rows, seed):
    """(rows, 32, 32, 3) uint8, deterministic in seed: "random" uniform
    bytes, or "images" (smooth synthetic images with a little noise; see
    the docstring), made 4,096 at a time in float32."""
    rng = np.random.default_rng(seed)
    if kind == "random":
        return rng.integers(0, 256, size=(rows,) + ROW_SHAPE, dtype=np.uint8)
    out = np.empty((rows,) + ROW_SHAPE, np.uint8)
    axis = np.linspace(-1, 1, ROW_SHAPE[0], dtype=np.float32)
    yy, xx = (g[None, :, :, None] for g in np.meshgrid(axis, axis, indexing="ij"))
    for s in range(0, rows, 4096):
        n = min(4096, rows - s)

        def u(lo, hi, channels=3):
            return rng.uniform(lo, hi, (n, 1, 1, channels)).astype(np.float32)

        img = u(40, 215) + u(-15, 15) * yy + u(-15, 15) * xx
        for _ in range(2):  # soft blobs: centre, squared radius, colour
            cy, cx, r2 = u(-1, 1, 1), u(-1, 1, 1), u(0.05, 0.4, 1)
            img += u(-30, 30) * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / r2)
        img += rng.normal(0, 2, img.shape).astype(np.float32)
        out[s:s + n] = np.clip(np.rint(img), 0, 255)
    return out


def records_bytes(np, shard_dir):
    """The .bagz shards' record bytes: each file's last 8 bytes are the
    size of its records section."""
    total = 0
    for f in glob.glob(os.path.join(shard_dir, "data-*")):
        with open(f, "rb") as fh:
            fh.seek(-8, os.SEEK_END)
            total += int(np.frombuffer(fh.read(8), "<u8")[0])
    return total


# ---- loaders ------------------------------------------------------------------------


def threaded(fn, batches, workers, recycle=None):
    """loaderx's scheme: `workers` threads, as many batches in flight,
    fn(batch) results delivered in order; each dropped when the next
    arrives (and then given to recycle(), if any).  Returns the last
    result."""
    out = None
    with concurrent.futures.ThreadPoolExecutor(workers) as ex:
        it = iter(batches)
        q = collections.deque(ex.submit(fn, b) for _, b in zip(range(workers), it))
        while q:
            prev, out = out, q.popleft().result()
            if recycle is not None and prev is not None:
                recycle(prev)
            del prev
            nxt = next(it, None)
            if nxt is not None:
                q.append(ex.submit(fn, nxt))
    return out


class LoaderxStyle:
    """A loaderx-style dataset: __getitems__ reads row by row through a
    Reader and stacks the rows."""

    def __init__(self, np, reader):
        self.np, self.r = np, reader

    def __getitems__(self, idx):
        np, r = self.np, self.r
        return np.stack([np.frombuffer(r[i], np.uint8).reshape(ROW_SHAPE) for i in idx])


def torch_loader(a, np, bagcache, spec, batches):
    import warnings

    import torch.utils.data as tud

    # Rows from np.frombuffer are read-only; default_collate copies them
    # into the batch's tensor, so torch's warning about it is moot.  The
    # filter is set before the workers fork, so they inherit it.
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")

    class RowDataset(tud.Dataset):
        """Map-style: r[i] per item, a Reader opened in each process."""

        def __init__(self, spec, n):
            self.spec, self.n, self.r, self.pid = spec, n, None, None

        def __len__(self):
            return self.n

        def __getitem__(self, i):
            if self.pid != os.getpid():
                self.r, self.pid = bagcache.Reader(self.spec), os.getpid()
            return np.frombuffer(self.r[i], np.uint8).reshape(ROW_SHAPE)

    flat = [int(i) for b in batches for i in b]
    return tud.DataLoader(RowDataset(spec, a.rows), batch_size=a.batch_size, sampler=flat,
                          num_workers=a.torch_workers,
                          persistent_workers=a.torch_workers > 0)


def build_floors(tmp):
    """Compiles gather_floor.c (beside this file) into tmp: (the library
    through ctypes, None), or (None, why not)."""
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gather_floor.c")
    out = os.path.join(tmp, "gather_floor.so")
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    try:
        flags = shlex.split(subprocess.run(["pkg-config", "--cflags", "--libs", "libzstd"],
                                           capture_output=True, text=True,
                                           check=True).stdout)
    except (OSError, subprocess.CalledProcessError):
        flags = ["-lzstd"]
    try:
        subprocess.run(cc + ["-O2", "-pthread", "-shared", "-fPIC", "-o", out, src] + flags,
                       capture_output=True, text=True, check=True)
        lib = ctypes.CDLL(out)
    except (OSError, subprocess.CalledProcessError) as e:
        return None, f"n/a (gather_floor.c: {getattr(e, 'stderr', '') or e})".splitlines()[0]
    lib.floor_copy.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t,
                               ctypes.c_void_p]
    lib.floor_copy.restype = None
    lib.floor_zstd.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                               ctypes.c_size_t, ctypes.c_void_p]
    lib.floor_zstd.restype = ctypes.c_size_t
    lib.floor_zstd_threads.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                       ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p,
                                       ctypes.c_size_t]
    lib.floor_zstd_threads.restype = ctypes.c_size_t
    lib.floor_zstd_loader.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                      ctypes.c_size_t, ctypes.c_size_t, ctypes.c_size_t,
                                      ctypes.c_size_t]
    lib.floor_zstd_loader.restype = ctypes.c_size_t
    lib.floor_zstd_bagz_loader.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_size_t] * 6
    lib.floor_zstd_bagz_loader.restype = ctypes.c_size_t
    return lib, None


def frame_table(np, shard_dir, keep):
    """(addresses, sizes) of every record of the .bagz shards in shard_dir,
    in global order, inside mappings appended to keep (tail limits: the
    file's last 8 bytes are the records section's size)."""
    starts, lens = [], []
    for f in sorted(glob.glob(os.path.join(shard_dir, "data-*"))):
        with open(f, "rb") as fh:
            m = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        keep.append(m)
        a = np.frombuffer(m, np.uint8)
        records = int(np.frombuffer(m[-8:], "<u8")[0])
        ends = np.frombuffer(m[records:], "<u8").astype(np.uint64)
        begins = np.concatenate([np.zeros(1, np.uint64), ends[:-1]])
        starts.append(a.ctypes.data + begins)
        lens.append(ends - begins)
    return np.concatenate(starts).astype(np.uint64), np.concatenate(lens).astype(np.uint64)


def shard_table(np, shard_dir, keep):
    """(firsts, bases, limits) of the .bagz shards in shard_dir, as
    floor_zstd_bagz_loader takes them: each shard's first global row (and
    the total after the last), its mapping's address and the address of its
    limits section, inside mappings appended to keep."""
    firsts, bases, limits = [0], [], []
    for f in sorted(glob.glob(os.path.join(shard_dir, "data-*"))):
        with open(f, "rb") as fh:
            m = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        keep.append(m)
        base = np.frombuffer(m, np.uint8).ctypes.data
        records = int(np.frombuffer(m[-8:], "<u8")[0])
        firsts.append(firsts[-1] + (len(m) - records) // 8)
        bases.append(base)
        limits.append(base + records)
    return tuple(np.array(v, np.uint64) for v in (firsts, bases, limits))


# ---- timing and the table -----------------------------------------------------------


def measure_all(repeat, runs):
    """runs: {name: fn}; every fn once per round, in turn, `repeat` rounds.
    Medians of (wall, process CPU) per name."""
    times = {k: ([], []) for k in runs}
    for _ in range(repeat):
        for k, fn in runs.items():
            w0, c0 = time.perf_counter(), time.process_time()
            keep = fn()
            times[k][0].append(time.perf_counter() - w0)
            times[k][1].append(time.process_time() - c0)
            del keep
    return {k: (statistics.median(w), statistics.median(c)) for k, (w, c) in times.items()}


def main():
    a = parse_args()
    ensure_static_tls()
    lib_path = use_build(a.build)
    try:
        import numpy as np

        import bagcache
        from bagcache.train import ARDataset, DataLoader, Sampler, converter
    except ImportError as e:
        print(f"train_bench: {e} (run from the build tree, or --build DIR)", file=sys.stderr)
        return 2
    if not os.path.exists(lib_path):
        print(f"train_bench: {lib_path} is missing (--build DIR)", file=sys.stderr)
        return 2
    torch_why = None
    if a.no_torch:
        torch_why = "n/a (--no-torch)"
    elif a.torch_workers == 0:
        torch_why = "n/a (--torch-workers 0)"
    else:
        try:
            import torch  # noqa: F401
        except ImportError:
            torch_why = "n/a (torch not installed)"

    tmp = a.dir or tempfile.mkdtemp(prefix="bagcache-trainbench.")
    os.makedirs(tmp, exist_ok=True)
    closers = []
    try:
        print(f"train_bench: {a.rows:,} rows of {ROW_BYTES:,} B, {a.batches} batches of "
              f"{a.batch_size} per run, repeat {a.repeat}, in {tmp}", file=sys.stderr)
        t0 = time.perf_counter()
        x = make_rows(np, a.data, a.rows, a.seed)
        npy = os.path.join(tmp, "data.npy")
        np.save(npy, x)
        dirs = {"bag": os.path.join(tmp, "bag"), "bagz": os.path.join(tmp, "bagz")}
        converter(x, dirs["bag"], replace=True, compression="none")
        converter(x, dirs["bagz"], replace=True, compression="zstd")
        files = [npy] + [os.path.join(d, f) for d in dirs.values() for f in os.listdir(d)]
        sizes = {}
        for f in files:  # page cache warm
            with open(f, "rb") as fh:
                while fh.read(1 << 24):
                    pass
            kind = os.path.basename(os.path.dirname(f)) if f != npy else "npy"
            sizes[kind] = sizes.get(kind, 0) + os.path.getsize(f)
        print(f"  (data written in {time.perf_counter() - t0:.1f} s: "
              + ", ".join(f"{k} {v / 1e6:,.1f} MB" for k, v in sizes.items()) + ")",
              file=sys.stderr)

        sampler = Sampler(a.rows, a.batch_size, mode=Sampler.Mode.IID, seed=a.seed)
        drawn = [next(sampler).astype(np.int64) for _ in range(max(a.batches, a.long))]
        batches = drawn[:a.batches]
        batches_u64 = [b.astype(np.uint64) for b in batches]
        zratio = records_bytes(np, dirs["bagz"]) / (a.rows * ROW_BYTES)
        xm = np.load(npy, mmap_mode="r")
        x_mem = np.array(xm)
        del x
        want = x_mem[batches[0]]
        shards = {k: len(os.listdir(d)) - 1 for k, d in dirs.items()}  # less meta.json
        specs = {k: os.path.join(d, f"data@{shards[k]}.{k}") for k, d in dirs.items()}
        readers = {k: bagcache.Reader(s) for k, s in specs.items()}
        closers += [r.close for r in readers.values() if hasattr(r, "close")]
        parallelism = min(100, 4 * (os.cpu_count() or 1))
        cbags = {}
        for k in dirs:
            cbags[k] = CBag(lib_path, specs[k], parallelism)
            closers.append(cbags[k].close)
        all_bufs = []
        closers.append(lambda: [cbags["bag"].release(o) for o in all_bufs])
        with open(npy, "rb") as fh:
            npy_map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        closers.append(npy_map.close)
        header = len(npy_map) - a.rows * ROW_BYTES
        offsets = [[header + int(i) * ROW_BYTES for i in b] for b in batches]
        floors, floors_why = build_floors(tmp)
        if floors is not None:
            npy_addr = np.frombuffer(npy_map, np.uint8).ctypes.data + header
            copy_srcs = [(npy_addr + b.astype(np.uint64) * ROW_BYTES).astype(np.uint64)
                         for b in batches]
            maps = []
            closers.append(lambda: [m.close() for m in maps])
            z_starts, z_lens = frame_table(np, dirs["bagz"], maps)
            zstd_frames = [(np.ascontiguousarray(z_starts[b]), np.ascontiguousarray(z_lens[b]))
                           for b in batches]
            # Every batch's frames, batch after batch, for the C threads
            # (the first a.batches of them for all but the long run).
            all_idx = np.concatenate(drawn)
            z_all = (np.ascontiguousarray(z_starts[all_idx]),
                     np.ascontiguousarray(z_lens[all_idx]))
            z_bufs = np.empty((a.workers, a.batch_size) + ROW_SHAPE, np.uint8)
            z_layout = shard_table(np, dirs["bagz"], maps)
            z_rows = np.ascontiguousarray(all_idx.astype(np.uint64))

        def check(name, got, want=want, which="first"):
            got = np.asarray(got)
            if got.shape != want.shape or not np.array_equal(got, want):
                print(f"train_bench: {name}: the {which} batch is not numpy's X[idx]",
                      file=sys.stderr)
                sys.exit(1)

        # ---- the runs ----
        def numpy_memmap():
            out = None
            for b in batches:
                out = xm[b]
            return out

        def numpy_fresh():
            xf = np.load(npy, mmap_mode="r")
            out = None
            for b in batches:
                out = xf[b]
            return out

        def numpy_memory():
            out = None
            for b in batches:
                out = x_mem[b]
            return out

        def c_copy_batch(srcs):
            out = np.empty((len(srcs),) + ROW_SHAPE, np.uint8)
            floors.floor_copy(srcs.ctypes.data, len(srcs), ROW_BYTES, out.ctypes.data)
            return out

        def c_zstd_batch(frames):
            starts, lens = frames
            out = np.empty((len(starts),) + ROW_SHAPE, np.uint8)
            bad = floors.floor_zstd(starts.ctypes.data, lens.ctypes.data, len(starts),
                                    ROW_BYTES, out.ctypes.data)
            if bad:
                raise RuntimeError(f"floor_zstd: frame {bad - 1} is not one row")
            return out

        def c_copy():
            out = None
            for srcs in copy_srcs:
                out = c_copy_batch(srcs)
            return out

        def c_zstd():
            out = None
            for frames in zstd_frames:
                out = c_zstd_batch(frames)
            return out

        def c_zstd_threads():
            return threaded(c_zstd_batch, zstd_frames, a.workers)

        def c_zstd_pthreads(nbatches=a.batches, nthreads=a.workers):
            """The last batch's array when nthreads is 1 (thread 0's buffer;
            with more threads, whichever took a batch holds it)."""
            bad = floors.floor_zstd_threads(z_all[0].ctypes.data, z_all[1].ctypes.data,
                                            nbatches, a.batch_size, ROW_BYTES,
                                            z_bufs.ctypes.data, nthreads)
            if bad:
                raise RuntimeError(f"floor_zstd_threads: frame {bad - 1} is not one row")
            return z_bufs[0]

        def c_zstd_loader(nbatches=a.batches):
            def run():
                bad = floors.floor_zstd_loader(z_all[0].ctypes.data, z_all[1].ctypes.data,
                                               nbatches, a.batch_size, ROW_BYTES, a.workers,
                                               PREFETCH + a.workers)
                if bad:
                    raise RuntimeError(f"floor_zstd_loader: frame {bad - 1} is not one row")

            return run

        def c_zstd_bagz_loader(nbatches):
            def run():
                firsts, bases, limits = z_layout
                bad = floors.floor_zstd_bagz_loader(
                    z_rows.ctypes.data, firsts.ctypes.data, bases.ctypes.data,
                    limits.ctypes.data, len(bases), nbatches, a.batch_size, ROW_BYTES,
                    a.workers, PREFETCH + a.workers)
                if bad:
                    raise RuntimeError(f"floor_zstd_bagz_loader: row {bad - 1} is not one row")

            return run

        def c_zstd_recycled():
            # The DataLoader's memory handling with no bagcache code: a
            # batch's array goes back to a free list once the consumer
            # drops it, and the next batches decompress into it.
            free = queue.SimpleQueue()

            def batch(frames):
                starts, lens = frames
                try:
                    out = free.get_nowait()
                except queue.Empty:
                    out = np.empty((len(starts),) + ROW_SHAPE, np.uint8)
                bad = floors.floor_zstd(starts.ctypes.data, lens.ctypes.data, len(starts),
                                        ROW_BYTES, out.ctypes.data)
                if bad:
                    raise RuntimeError(f"floor_zstd: frame {bad - 1} is not one row")
                return out

            return threaded(batch, zstd_frames, a.workers, recycle=free.put)

        def getitems(kind):
            ds = ARDataset.from_sequence(readers[kind], np.uint8, ROW_SHAPE)

            def run():
                out = None
                for b in batches:
                    out = ds.__getitems__(b)
                return out

            return run

        def bytes_gather():
            out = None
            for offs in offsets:
                out = b"".join([npy_map[o:o + ROW_BYTES] for o in offs])
            return out

        # W sets of batch-size buffers, filled once before timing so they
        # hold their capacity: each batch borrows one set.
        # (The buffers are the caller's: either bag may fill them, and
        # either library handle may release them.)
        free = queue.SimpleQueue()
        for _ in range(a.workers):
            outs = (BcBuf * a.batch_size)()
            cbags["bagz"].get_many(batches_u64[0], outs)
            all_bufs.append(outs)
            free.put(outs)

        def c_alone(kind):
            cbag = cbags[kind]

            def batch(b):
                outs = free.get()
                try:
                    cbag.get_many(b, outs)
                finally:
                    free.put(outs)

            def run():
                threaded(batch, batches_u64, a.workers)

            return run

        def dataloader(kind, fresh=False, workers=a.workers, nbatches=a.batches):
            def run():
                if fresh:
                    ds = ARDataset(dirs[kind])
                else:
                    ds = ARDataset.from_sequence(readers[kind], np.uint8, ROW_SHAPE)
                with DataLoader(ds, None, num_workers=workers, batch_size=a.batch_size,
                                mode=Sampler.Mode.IID, seed=a.seed) as dl:
                    out = None
                    for _ in range(nbatches):
                        out = next(dl)
                return out

            return run

        def loaderx(kind):
            ds = LoaderxStyle(np, readers[kind])

            def run():
                return threaded(ds.__getitems__, batches, a.workers)

            return run

        tl = None
        if torch_why is None:
            tl = torch_loader(a, np, bagcache, specs["bag"], batches)

            def torch_run():
                out = None
                for out in tl:
                    pass
                return out

        # Correctness first: every loader's first batch is numpy's.
        check("numpy memmap", xm[batches[0]])
        if floors is not None:
            check("C memcpy gather", c_copy_batch(copy_srcs[0]))
            check("C zstd decompression", c_zstd_batch(zstd_frames[0]))
            check("C zstd decompression, recycled", c_zstd_recycled(),
                  x_mem[batches[-1]], "last")
            check("C zstd decompression, C threads", c_zstd_pthreads(1, 1))
        for kind in dirs:
            check(f"ARDataset.__getitems__ .{kind}",
                  ARDataset.from_sequence(readers[kind], np.uint8, ROW_SHAPE)
                  .__getitems__(batches[0]))

        check("bytes gather", np.frombuffer(
            b"".join([npy_map[o:o + ROW_BYTES] for o in offsets[0]]),
            np.uint8).reshape(want.shape))
        for kind in ("bagz", "bag"):
            outs = all_bufs[0]
            cbags[kind].get_many(batches_u64[0], outs)
            check(f"bc_bag_get_many .{kind}",
                  np.stack([np.frombuffer(ctypes.string_at(o.data, o.size), np.uint8)
                            for o in outs]).reshape(want.shape))
        for kind in dirs:
            with DataLoader(ARDataset(dirs[kind]), None, num_workers=a.workers,
                            batch_size=a.batch_size, mode=Sampler.Mode.IID,
                            seed=a.seed) as dl:
                check(f"DataLoader .{kind}", next(dl)["data"])
            check(f"loaderx-style .{kind}", LoaderxStyle(np, readers[kind])
                  .__getitems__(batches[0]))
        if tl is not None:
            first = next(iter(tl))  # starts the persistent workers
            check("torch DataLoader", first.numpy())

        runs = {"numpy memmap": numpy_memmap, "numpy fresh": numpy_fresh,
                "numpy memory": numpy_memory,
                "bytes gather": bytes_gather, "zstd alone": c_alone("bagz"),
                "reader alone": c_alone("bag"),
                "getitems bag": getitems("bag"), "getitems bagz": getitems("bagz"),
                "DataLoader .bag": dataloader("bag"), "DataLoader .bagz": dataloader("bagz"),
                "DataLoader fresh": dataloader("bag", fresh=True),
                "DataLoader 2": dataloader("bag", workers=2),
                "loaderx .bag": loaderx("bag"), "loaderx .bagz": loaderx("bagz")}
        if tl is not None:
            runs["torch"] = torch_run
        if floors is not None:
            runs.update({"c copy": c_copy, "c zstd": c_zstd, "c zstd W": c_zstd_threads,
                         "c zstd W reuse": c_zstd_recycled, "c zstd pthreads": c_zstd_pthreads,
                         "c zstd loader": c_zstd_loader()})
            if a.long:
                runs.update({"c zstd loader long": c_zstd_loader(a.long),
                             "c zstd bagz long": c_zstd_bagz_loader(a.long),
                             "DataLoader .bagz long": dataloader("bagz", nbatches=a.long)})
        res = measure_all(a.repeat, runs)
        if tl is not None:
            del tl
    finally:
        for c in reversed(closers):
            try:
                c()
            except Exception:  # noqa: BLE001 - cleanup only
                pass
        if not a.dir:
            shutil.rmtree(tmp, ignore_errors=True)

    def rate(k):
        n = a.long if k.endswith(" long") else a.batches
        w = res[k][0]
        return f"{n / w:,.1f}", f"{n * a.batch_size * ROW_BYTES / w / 1e6:,.1f}"

    names = {
        "numpy memmap": "numpy memmap X[idx] (floor)",
        "numpy fresh": "(numpy memmap, np.load in the run)",
        "numpy memory": "(numpy in-memory X[idx])",
        "bytes gather": "(bytes gather: per-row mmap slices, b''.join)",
        "c copy": "(C memcpy gather from the .npy mapping, 1 thread)",
        "c zstd": "(C zstd decompression of the rows' frames, 1 thread)",
        "c zstd W": f"(C zstd decompression of the rows' frames, {a.workers} threads, "
                    "fresh batches)",
        "c zstd W reuse": f"(C zstd alone, {a.workers} threads, batches recycled)",
        "c zstd pthreads": f"(C zstd alone, {a.workers} C threads, no Python, a buffer each)",
        "c zstd loader": f"(C zstd alone, {a.workers} C threads, the loader's memory and "
                         "hand-off)",
        "c zstd loader long": f"(C zstd alone, the frames' addresses given, {a.long} batches "
                              "a run)",
        "c zstd bagz long": f"C zstd alone from the .bagz, {a.long} batches a run",
        "DataLoader .bagz long": f"DataLoader ARDataset .bagz, {a.workers} workers, "
                                 f"{a.long} batches a run",
        "zstd alone": f"(reader alone: bc_bag_get_many .bagz, {a.workers} threads)",
        "reader alone": f"(reader alone: bc_bag_get_many .bag, {a.workers} threads)",
        "getitems bag": "(ARDataset.__getitems__ .bag, calling thread)",
        "getitems bagz": "(ARDataset.__getitems__ .bagz, calling thread)",
        "DataLoader .bag": f"DataLoader ARDataset .bag, {a.workers} workers",
        "DataLoader .bagz": f"DataLoader ARDataset .bagz, {a.workers} workers",
        "DataLoader fresh": f"(DataLoader .bag, ARDataset(path) in the run, {a.workers} workers)",
        "DataLoader 2": "(DataLoader .bag, 2 workers)",
        "loaderx .bag": f"loaderx-style r[i] .bag, {a.workers} threads",
        "loaderx .bagz": f"loaderx-style r[i] .bagz, {a.workers} threads",
        "torch": f"torch DataLoader r[i] .bag, {a.torch_workers} workers",
    }
    # (subject, baseline, target ratio or None for information)
    plan = [("numpy memmap", None, None), ("c copy", "numpy memmap", None),
            ("c zstd", "numpy memmap", None), ("c zstd W", "numpy memmap", None),
            ("c zstd W reuse", "numpy memmap", None), ("c zstd pthreads", "numpy memmap", None),
            ("c zstd loader", "numpy memmap", None),
            ("numpy fresh", "numpy memmap", None),
            ("numpy memory", "numpy memmap", None),
            ("bytes gather", "numpy memmap", None), ("zstd alone", "numpy memmap", None),
            ("reader alone", "numpy memmap", None),
            ("getitems bag", "c copy", None), ("getitems bagz", "c zstd", None),
            ("DataLoader .bag", "numpy memmap", 0.8),
            ("DataLoader .bagz", "c zstd loader", None),
            ("DataLoader .bagz", "c zstd W reuse", None), ("DataLoader .bagz", "c zstd W", None),
            ("DataLoader .bagz", "c zstd pthreads", None),
            ("DataLoader .bagz", "zstd alone", None),
            ("DataLoader .bag", "loaderx .bag", 3.0), ("DataLoader .bagz", "loaderx .bagz", 3.0),
            ("DataLoader .bag", "torch", 3.0),
            ("DataLoader fresh", "numpy fresh", None), ("DataLoader 2", "numpy memmap", None)]
    if a.long:
        plan.insert(plan.index(("DataLoader .bagz", "c zstd loader", None)),
                    ("DataLoader .bagz long", "c zstd bagz long", 1.0))
        plan.insert(plan.index(("DataLoader .bagz", "c zstd loader", None)),
                    ("DataLoader .bagz long", "c zstd loader long", None))
    head = ("row", "batches/s", "MB/s", "baseline", "batches/s", "MB/s", "ratio",
            "CPU ratio", "target", "ok")
    table = []
    for sub, base, target in plan:
        if any(k is not None and k not in res and k != "torch" for k in (sub, base)):
            # The C floors did not build.
            def rate_or_na(k):
                return ("", "") if k is None else rate(k) if k in res else ("n/a", "")

            table.append((names[sub], *rate_or_na(sub), names[base] if base else "-",
                          *rate_or_na(base), floors_why if base else "-", "",
                          f">= {target:g}x" if target else "-", ""))
            continue
        if base == "torch" and torch_why is not None:
            table.append((names[sub], *rate(sub), names[base], "", "", torch_why, "",
                          f">= {target:g}x", ""))
            continue
        if base is None:
            table.append((names[sub], *rate(sub), "-", "", "", "-", "-", "-", ""))
            continue
        ratio = res[base][0] / res[sub][0]
        cpu = "n/a" if base == "torch" else f"{res[base][1] / res[sub][1]:.2f}x"
        table.append((names[sub], *rate(sub), names[base], *rate(base), f"{ratio:.2f}x",
                      cpu, f">= {target:g}x" if target else "-",
                      ("ok" if ratio >= target else "below") if target else ""))
    print(f"bagcache {bagcache.__version__}, Python {sys.version.split()[0]}, numpy "
          f"{np.__version__}, {os.cpu_count()} CPUs; {a.rows:,} rows of {ROW_BYTES:,} B, "
          f"IID batches of {a.batch_size}, {a.batches} per run ({a.long} for the steady-state "
          f"pair); medians of {a.repeat}; "
          f"data {a.data}, zstd ratio {zratio:.3f} (.bagz records / raw bytes)")
    print()
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in table:
        print("| " + " | ".join(r) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
