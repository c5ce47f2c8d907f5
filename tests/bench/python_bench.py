#!/usr/bin/env python3
"""python_bench - the cost of bagcache's Python layer over its C library,
and of LoadIt over the plain code it replaces.  Prints a table; it is not a
test and never fails on timings (exit 1 only if Python and C disagree about
the bytes, 2 on bad usage).

    cd build && PYTHONPATH=python/pkg python3 ../tests/bench/python_bench.py
    python3 tests/bench/python_bench.py --build build [--quick]

Options: --build DIR (the build tree: python/pkg and .libs/libbagcache.so;
default $BC_BUILDDIR or the current directory), --records N (200,000),
--reads N (1,000,000), --loadit-reads N (200,000), --repeat R (5),
--cold-reads N (2,000), --cold-shard N (65,536 records),
--batch-reads N (300,000), --dir DIR (where the data goes; default a new
temporary directory), --only KEY,... (rows: get view-get read-indices
indices-iter loadit-get loadit-fill loadit-cold loadit-checksums batches),
--quick (tiny sizes).

Data: N records of 1,024 bytes of word salad (the C benchmark's 32 words),
written with bagcache.Writer to DIR/data.bag; `--reads` uniformly random
indices (numpy, seed 42); page cache warm.  Each row runs R times,
baseline and subject alternating; the table shows medians.

Rows (doc/performance.md, section "Python", explains them):
  r[i] loop     Python `for i in idx: r[i]` over a list of ints, against
                the C library reading the same indices with bc_bag_get_many
                on one thread (max_parallelism 1, calls of 1,024 indices
                into 1,024 reused buffers: a bc_bag_get loop) through
                ctypes from .libs/libbagcache.so.  Reported: the overhead
                per record, (Python - C) / reads.
  view[i] loop  the same loop over a view (a shuffle of a concatenation of
                two halves of the Reader): the cost of a view, information.
  read_indices  Reader.read_indices(numpy int64 array) against one
                bc_bag_get_many call for the same array with the Reader's
                own parallelism (min(100, 4 x CPUs)): into new buffers (C
                allocates every record, as Python allocates bytes objects),
                and into buffers reused from run to run (no allocation).
  indices_iter  for x in Reader.read_indices_iter(array), against
                read_indices of the same array.
  LoadIt get    warm random access loader[i] to 1 KiB pickled dicts,
                against pickle.loads(reader[i]) on a bag of the same
                pickles (what a hand-made cache would do).
  LoadIt fill   for x in LoadIt(new_dir, gen): a first pass that caches
                everything, against the larger of for x in gen():
                pickle.dumps(x) and a Writer of the same pickles (a first
                pass is bounded by the disk), the three run in turn.
                Information rows: the reading thread's CPU time in the
                first pass against the baseline's (the first pass's cost
                where the fill keeps up); write() of as many bytes into a
                new file (the page cache's floor under any first pass that
                stores them); as many bytes written with O_DIRECT and
                fdatasync (the device's floor under any first pass that
                leaves them on disk); the same pickles written with a
                Writer; the first pass over a generator that counts the
                words of each text (about 10 us of work per record).
                Removing the files and roots is not timed.
  LoadIt cold   loader[i] with max_cache_size=1 on a LoadIt of 8 shards of
                --cold-shard records (about 1 KiB pickles: 64 MiB shards),
                at random indices each in another shard than the one
                before, so every read opens its shard file (a new LoadIt
                per run: nothing open at the start), against the same
                reads done by hand: os.open, mmap, os.close, the two
                limits from the tail, pickle.loads of the slice,
                mmap.close.  Target <= 3x time.
  checksums     warm random loader[i] of the 1 KiB records in a raw
                LoadIt (serializer="raw"), every read checking the
                record's CRC-32C (.bag) or zstd's content checksum
                (.bagz), against a copy of the same root without them
                (format version 1; .bagz shards rewritten by a Writer):
                the reading thread's CPU time.
  read_indices batch B: SUBJECT, LOAD
                SUBJECT.read_indices(numpy array of B random indices),
                in wall time, against the floor: the same batches'
                records sliced from an mmap of data.bag into a list,
                [m[i*1024:(i+1)*1024] for i in batch] (what any
                read_indices must at least do), and against the same
                subject read with max_parallelism=1 (a Reader's option;
                LoadIt has none), for B = 256, 1,024 and 10,000, for a
                Reader of DIR/data.bag and of a zstd copy (data.bagz), a
                view of each (reader[::-1]), a LoadIt of the records
                (serializer='raw'; .bag shards, and .bagz shards with
                compression='zstd') and a view of it (loader[::1]); LOAD
                idle, and loaded: one CPU-bound process (a Python busy
                loop) running meanwhile.  --batch-reads records per run
                (whole batches), the floor, the subject and the serial
                reads in turn.  Targets: >= 0.9x of the floor (.bag), and
                never above 1.05x the time of max_parallelism=1.
"""

import argparse
import collections
import contextlib
import ctypes
import mmap
import os
import pickle
import shutil
import statistics
import sys
import tempfile
import time

from bench_clib import BcBuf, CBag, ensure_static_tls, use_build

WORDS = (
    "the record between through because another example important different "
    "following without against government information number problem sequence "
    "iterator dataset training storage memory random access reader writer "
    "stream people world water place group"
).split()

RECORD_SIZE = 1024


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=os.environ.get("BC_BUILDDIR", "."))
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--reads", type=int, default=1_000_000)
    p.add_argument("--loadit-reads", type=int, default=200_000)
    p.add_argument("--cold-reads", type=int, default=2_000)
    p.add_argument("--cold-shard", type=int, default=65_536)
    p.add_argument("--batch-reads", type=int, default=300_000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--dir")
    p.add_argument("--only", default="")
    p.add_argument("--quick", action="store_true")
    a = p.parse_args()
    if a.quick:
        a.records, a.reads, a.loadit_reads, a.repeat = 20_000, 100_000, 20_000, 3
        a.cold_reads, a.cold_shard = 200, 1_024
        a.batch_reads = 2_000
    if min(a.records, a.reads, a.loadit_reads, a.repeat, a.cold_reads, a.cold_shard,
           a.batch_reads) < 1:
        p.error("sizes must be >= 1")
    return a


# ---- the C library through ctypes: bench_clib.py ----------------------------------


def record_bytes(buf):
    return ctypes.string_at(buf.data, buf.size)


# ---- data -------------------------------------------------------------------------


def word_salad(np, count, seed):
    """`count` records of RECORD_SIZE bytes: windows of one long salad text."""
    rng = np.random.default_rng(seed)
    words = rng.integers(0, len(WORDS), size=2_000_000)
    text = " ".join(WORDS[w] for w in words).encode()
    starts = rng.integers(0, len(text) - RECORD_SIZE, size=count)
    return [text[s:s + RECORD_SIZE] for s in starts]


# ---- timing -----------------------------------------------------------------------


def measure(repeat, baseline, subject, self_timed_baseline=False, after_baseline=None,
            clock=time.perf_counter):
    """Medians of baseline() and subject() times, run alternately.  A
    self-timed baseline returns its own time (to leave setup out).  The
    clock may be time.thread_time: the CPU time of the calling thread."""
    tb, ts = [], []
    for _ in range(repeat):
        t0 = clock()
        keep = baseline()
        tb.append(keep if self_timed_baseline else clock() - t0)
        del keep
        if after_baseline is not None:
            after_baseline()
        t0 = clock()
        keep = subject()
        ts.append(clock() - t0)
        del keep  # freeing results is not timed
    return statistics.median(tb), statistics.median(ts)


def measure_each(repeat, runs, clock=time.perf_counter):
    """Medians of the times of each run in runs, a list of (run, after)
    pairs, all run in turn `repeat` times; after() (None: nothing) is not
    timed."""
    times = [[] for _ in runs]
    for _ in range(repeat):
        for k, (run, after) in enumerate(runs):
            t0 = clock()
            keep = run()
            times[k].append(clock() - t0)
            del keep
            if after is not None:
                after()
    return [statistics.median(t) for t in times]


def measure_both(repeat, baseline, subject):
    """measure() on two clocks at once: ((wall, CPU) of the baseline,
    (wall, CPU) of the subject), medians.  CPU is the process's (all its
    threads): on a machine shared with other work it moves much less than
    the wall clock."""
    times = {baseline: ([], []), subject: ([], [])}
    for _ in range(repeat):
        for fn in (baseline, subject):
            w0, c0 = time.perf_counter(), time.process_time()
            keep = fn()
            times[fn][0].append(time.perf_counter() - w0)
            times[fn][1].append(time.process_time() - c0)
            del keep
    return tuple((statistics.median(times[fn][0]), statistics.median(times[fn][1]))
                 for fn in (baseline, subject))


def fmt_time(t):
    if t >= 1:
        return f"{t:.3f} s"
    if t >= 1e-3:
        return f"{t * 1e3:.1f} ms"
    return f"{t * 1e6:.1f} us"


def fmt_per(t, n):
    return f"{t / n * 1e9:.0f} ns"


ROWS = []


def row(name, t, base_name, tb, n, result, target, ok):
    ROWS.append((name, fmt_time(t), fmt_per(t, n), base_name, fmt_time(tb), fmt_per(tb, n),
                 result, target, "ok" if ok else "below"))
    print(f"  {name}: {fmt_time(t)} vs {base_name} {fmt_time(tb)} -> {result}", file=sys.stderr)


def skipped(name, base_name, why):
    ROWS.append((name, "", "", base_name, "", "", why, "", ""))


def print_table():
    head = ("operation", "median", "per record", "baseline", "median", "per record",
            "result", "target", "ok")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in ROWS:
        print("| " + " | ".join(r) + " |")


# ---- the rows ---------------------------------------------------------------------


def bench_reader(a, np, bagcache, lib_path, path, idx):
    only = set(a.only.split(",")) if a.only else None
    reader = bagcache.Reader(path)
    parallelism = min(100, 4 * (os.cpu_count() or 1))
    idx_u64 = np.ascontiguousarray(idx, dtype=np.uint64)
    idx_list = idx.tolist()
    n = len(idx)

    # The same bytes from both sides (a sample), or the numbers mean nothing.
    c1 = CBag(lib_path, path, 1)
    sample = idx_u64[:1000]
    outs = (BcBuf * len(sample))()
    c1.get_many(sample, outs)
    if [record_bytes(b) for b in outs] != reader.read_indices(sample):
        print("python_bench: Python and C read different bytes", file=sys.stderr)
        sys.exit(1)
    c1.release(outs)

    if only is None or "get" in only:
        chunk = 1024
        outs = (BcBuf * chunk)()
        base = idx_u64.ctypes.data

        def c_loop():
            for off in range(0, n, chunk):
                c1.get_many(base + off * 8, outs, min(chunk, n - off))

        def py_loop():
            for i in idx_list:
                reader[i]

        tb, t = measure(a.repeat, c_loop, py_loop)
        c1.release(outs)
        over = (t - tb) / n * 1e9
        row("r[i] random loop", t, "C bc_bag_get loop (1 thread)", tb, n,
            f"+{over:.0f} ns/record", "<= +250 ns", over <= 250)

    if only is None or "view-get" in only:
        view = bagcache.shuffle(bagcache.ConcatableSequence(reader[: len(reader) // 2],
                                                            reader[len(reader) // 2:]), 3)

        def py_loop():
            for i in idx_list:
                reader[i]

        def view_loop():
            for i in idx_list:
                view[i]

        tb, t = measure(a.repeat, py_loop, view_loop)
        over = (t - tb) / n * 1e9
        row("view[i] random loop (shuffle of concat)", t, "r[i] random loop", tb, n,
            f"+{over:.0f} ns/record", "", True)

    if only is None or "read-indices" in only:
        cp = CBag(lib_path, path, parallelism)

        def py_many():
            return reader.read_indices(idx)

        # Fresh buffers: the C library allocates every record, as
        # read_indices allocates its bytes objects (freeing is not timed).
        fresh = []

        def c_fresh():
            outs = (BcBuf * n)()
            fresh.append(outs)
            t0 = time.perf_counter()
            cp.get_many(idx_u64, outs)
            return time.perf_counter() - t0

        tb, t = measure(a.repeat, c_fresh, py_many, self_timed_baseline=True,
                        after_baseline=lambda: cp.release(fresh.pop()))
        row(f"read_indices(np, {n:,})", t, f"C bc_bag_get_many, {parallelism} threads, "
            "new buffers", tb, n, f"{tb / t:.2f}x", ">= 0.8x", tb / t >= 0.8)

        outs = (BcBuf * n)()
        cp.get_many(idx_u64, outs)  # the buffers reach their capacity once

        def c_reused():
            cp.get_many(idx_u64, outs)

        tb, t = measure(a.repeat, c_reused, py_many)
        cp.release(outs)
        del outs
        cp.close()
        row(f"read_indices(np, {n:,})", t, f"C bc_bag_get_many, {parallelism} threads, "
            "reused buffers", tb, n, f"{tb / t:.2f}x", ">= 0.8x", tb / t >= 0.8)

    if only is None or "indices-iter" in only:
        def py_many():
            return reader.read_indices(idx)

        def py_iter():
            for _ in reader.read_indices_iter(idx):
                pass

        tb, t = measure(a.repeat, py_many, py_iter)
        row("read_indices_iter(np)", t, "read_indices(np)", tb, n,
            f"{tb / t:.2f}x", ">= 0.5x", tb / t >= 0.5)
    c1.close()


def bench_loadit(a, np, bagcache, tmp, texts):
    only = set(a.only.split(",")) if a.only else None
    want_get = only is None or "loadit-get" in only
    want_fill = only is None or "loadit-fill" in only
    if not (want_get or want_fill):
        return
    LoadIt = getattr(bagcache, "LoadIt", None)
    if LoadIt is None:
        if want_get:
            skipped("LoadIt get (warm, random)", "Reader get + pickle.loads", "n/a (LoadIt missing)")
        if want_fill:
            skipped("LoadIt first pass", "generator + pickle.dumps", "n/a (LoadIt missing)")
        return
    m = len(texts)

    def gen():
        for k in range(m):
            yield {"id": k, "text": texts[k]}

    protocol = pickle.HIGHEST_PROTOCOL
    if want_get:
        root = os.path.join(tmp, "loadit-warm")
        loader = LoadIt(root, gen)
        count = sum(1 for _ in loader)  # first pass: everything cached
        assert count == m
        pickles = os.path.join(tmp, "pickles.bag")
        with bagcache.Writer(pickles) as w:
            for item in gen():
                w.write(pickle.dumps(item, protocol=protocol))
        reader = bagcache.Reader(pickles)
        rng = np.random.default_rng(7)
        idx = rng.integers(0, m, size=a.loadit_reads).tolist()
        loads = pickle.loads
        if [loader[i] for i in idx[:100]] != [loads(reader[i]) for i in idx[:100]]:
            print("python_bench: LoadIt and the Reader disagree", file=sys.stderr)
            sys.exit(1)

        def base():
            for i in idx:
                loads(reader[i])

        def sub():
            for i in idx:
                loader[i]

        tb, t = measure(a.repeat, base, sub)
        loader.close()
        row("LoadIt get (warm, random)", t, "Reader get + pickle.loads", tb, len(idx),
            f"{t / tb:.2f}x time", "<= 1.2x", t / tb <= 1.2)

    if want_fill:
        roots = []

        def pickling(source):
            """The baseline: the generator's records pickled, nothing kept."""
            def run():
                dumps = pickle.dumps
                for x in source():
                    dumps(x, protocol=protocol)
            return run

        def first_pass(source):
            """A first pass of a LoadIt over source in a fresh root."""
            def run():
                root = os.path.join(tmp, f"loadit-fill-{len(roots)}")
                roots.append(root)
                with LoadIt(root, source) as loader:
                    for _ in loader:
                        pass
            return run

        def remove_roots():
            """Removes the roots of earlier runs (not timed: removing a
            cache is not part of filling it, and the baseline keeps
            nothing)."""
            while roots:
                shutil.rmtree(roots.pop())

        base = pickling(gen)

        # The floor under a first pass through the page cache that leaves
        # the records on disk: the same pickles written with a Writer
        # (write, fsync, rename).
        floor_path = os.path.join(tmp, "floor.bag")

        def floor():
            dumps = pickle.dumps
            with bagcache.Writer(floor_path) as w:
                for x in gen():
                    w.write(dumps(x, protocol=protocol))

        # A first pass is bounded by the slower of its two halves: the
        # generator with pickling (the reading thread), and the disk (the
        # fill thread, which a Writer of the same pickles measures).
        tbp, tw, t = measure_each(a.repeat, [(base, None), (floor, remover(floor_path)),
                                             (first_pass(gen), remove_roots)])
        bound = max(tbp, tw)
        row("LoadIt first pass", t, "max(gen + dumps, Writer)", bound, m,
            f"{t / bound:.2f}x time", "<= 1.15x", t / bound <= 1.15)

        # What the first pass costs the reading thread itself (CPU time):
        # the whole first pass where the fill thread keeps up with it.
        tb, t = measure(a.repeat, base, first_pass(gen), after_baseline=remove_roots,
                        clock=time.thread_time)
        remove_roots()
        row("(first pass, reading thread CPU)", t, "generator + pickle.dumps CPU", tb, m,
            f"{t / tb:.2f}x CPU", "", True)

        # The machine's floor under any first pass that leaves the records
        # in files: write() of as many bytes into a new file (no fsync), as
        # fast as the page cache takes them.
        total = sum(len(pickle.dumps(x, protocol=protocol)) for x in gen())
        chunk = b"\x5a" * (1 << 20)
        page_cache_path = os.path.join(tmp, "page-cache.bin")

        def page_cache():
            fd = os.open(page_cache_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                left = total
                while left > 0:
                    left -= os.write(fd, chunk[:left] if left < len(chunk) else chunk)
            finally:
                os.close(fd)

        tb, t = measure(a.repeat, base, page_cache, after_baseline=remover(page_cache_path))
        remover(page_cache_path)()
        row(f"(write() of as many bytes, {total / 1e6:.0f} MB)", t, "generator + pickle.dumps",
            tb, m, f"{t / tb:.2f}x time", "", True)

        # The device's floor under any first pass that leaves the records
        # on disk: as many bytes written around the page cache (O_DIRECT,
        # 4 MiB writes from one aligned buffer, then fdatasync).
        device = device_writer(os.path.join(tmp, "device.bin"), total)
        if device is None:
            skipped("(O_DIRECT write of as many bytes)", "generator + pickle.dumps",
                    "n/a (no O_DIRECT here)")
        else:
            tb, t = measure(a.repeat, base, device, after_baseline=device.remove)
            device.remove()
            row("(O_DIRECT write of as many bytes)", t, "generator + pickle.dumps", tb, m,
                f"{t / tb:.2f}x time", "", True)

        # The Writer of the same pickles, as measured with the first pass.
        row("(Writer of the same pickles)", tw, "generator + pickle.dumps", tbp, m,
            f"{tw / tbp:.2f}x time", "", True)

        # A generator doing some work per record (counting the words of
        # the text, about 10 us), as a real pipeline does: how much of the
        # first pass's cost it hides.
        def gen_work():
            for k in range(m):
                yield {"id": k, "counts": collections.Counter(texts[k].split())}

        tb, t = measure(a.repeat, pickling(gen_work), first_pass(gen_work),
                        after_baseline=remove_roots)
        remove_roots()
        row("(LoadIt first pass, word counts)", t, "that generator + pickle.dumps", tb, m,
            f"{t / tb:.2f}x time", "", True)


# ---- cold reads: every loader[i] opens its shard -------------------------------------

COLD_SHARDS = 8


def bench_cold(a, np, bagcache, tmp, texts):
    """The "LoadIt cold get" row (see the module doc)."""
    only = set(a.only.split(",")) if a.only else None
    if only is not None and "loadit-cold" not in only:
        return
    LoadIt = getattr(bagcache, "LoadIt", None)
    name, base_name = "LoadIt cold get (max_cache_size=1)", "os.open + mmap + slice + loads"
    if LoadIt is None:
        skipped(name, base_name, "n/a (LoadIt missing)")
        return
    R, m = a.cold_shard, len(texts)
    n = COLD_SHARDS * R

    def gen():
        for k in range(n):
            yield texts[k % m]

    root = os.path.join(tmp, "loadit-cold")
    with LoadIt(root, gen, max_shard_length=R, preload_fn=None) as loader:
        for _ in loader:
            pass
        loader.wait_until_all_cached()
        paths = [s.path for s in sorted(loader.shards.get_all_shards(), key=lambda s: s.start)]
    assert len(paths) == COLD_SHARDS, paths
    rng = np.random.default_rng(5)
    idx, prev = [], -1
    for _ in range(a.cold_reads):
        s = int(rng.integers(0, COLD_SHARDS - 1))
        s += s >= prev >= 0  # any shard but the previous one
        prev = s
        idx.append(s * R + int(rng.integers(0, R)))
    loads, from_bytes = pickle.loads, int.from_bytes

    def by_hand(i):
        fd = os.open(paths[i // R], os.O_RDONLY)
        try:
            m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        try:
            k = i % R
            lim = from_bytes(m[-8:], "little") + 8 * k
            lo = from_bytes(m[lim - 8:lim], "little") if k else 0
            return loads(m[lo:from_bytes(m[lim:lim + 8], "little")])
        finally:
            m.close()

    def base():
        for i in idx:
            by_hand(i)

    def sub():
        with LoadIt(root, None, max_cache_size=1, preload_fn=None) as loader:
            t0 = time.perf_counter()
            for i in idx:
                loader[i]
            t = time.perf_counter() - t0
            st = loader.stats()
        if st["shard_opens"] != len(idx) or st["hits"] != 0:
            print(f"python_bench: cold reads made {st['shard_opens']} opens and "
                  f"{st['hits']} hits", file=sys.stderr)
            sys.exit(1)
        return t

    with LoadIt(root, None, max_cache_size=1, preload_fn=None) as loader:
        if [loader[i] for i in idx[:50]] != [by_hand(i) for i in idx[:50]]:
            print("python_bench: LoadIt and the mmap reads disagree", file=sys.stderr)
            sys.exit(1)
    tb, t = measure_self_timed_subject(a.repeat, base, sub)
    shutil.rmtree(root)
    row(name, t, base_name, tb, len(idx), f"{t / tb:.2f}x time", "<= 3x", t / tb <= 3)


def measure_self_timed_subject(repeat, baseline, subject):
    """measure() for a subject that returns its own time (its LoadIt's
    opening and closing are not timed)."""
    tb, ts = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        baseline()
        tb.append(time.perf_counter() - t0)
        ts.append(subject())
    return statistics.median(tb), statistics.median(ts)


# ---- record checksums (doc/cache.md, "Record checksums") ----------------------------


def unchecked_copy(bagcache, root, copy, compression):
    """A copy of cache `root` whose reads check no record checksums, as a
    root written before them: metadata.json says format version 1 and
    sums/ is gone (.bag), or every shard is rewritten with a plain Writer,
    whose zstd frames carry no content checksum, and the shared state is
    rebuilt from the new files (.bagz)."""
    shutil.copytree(root, copy)
    meta = os.path.join(copy, "metadata.json")
    with open(meta) as f:
        text = f.read()
    with open(meta, "w") as f:
        f.write(text.replace('"version": 2', '"version": 1'))
    shutil.rmtree(os.path.join(copy, "sums"), ignore_errors=True)
    if compression:
        shards = os.path.join(copy, "shards")
        for name in os.listdir(shards):
            path = os.path.join(shards, name)
            records = list(bagcache.Reader(path))
            with bagcache.Writer(path) as w:
                for r in records:
                    w.write(r)
        shutil.rmtree(os.path.join(copy, "locks"))


def bench_checksums(a, np, bagcache, tmp, records):
    """Warm random loader[i] of 1 KiB raw records: every read checks the
    record's checksum (CRC-32C from the sidecar for .bag shards, zstd's
    content checksum for .bagz) against the same root without them."""
    only = set(a.only.split(",")) if a.only else None
    if only is not None and "loadit-checksums" not in only:
        return
    LoadIt = getattr(bagcache, "LoadIt", None)
    names = ("LoadIt get raw 1 KiB, record CRC-32C", "LoadIt get raw 1 KiB, zstd checksums")
    if LoadIt is None:
        for name in names:
            skipped(name, "same root without checksums", "n/a (LoadIt missing)")
        return
    m = len(records)
    idx = np.random.default_rng(11).integers(0, m, size=a.loadit_reads).tolist()
    for name, compression in zip(names, (None, "zstd")):
        root = os.path.join(tmp, f"checksums-{compression}")
        copy = root + "-unchecked"
        with LoadIt(root, lambda: iter(records), serializer="raw",
                    compression=compression) as ld:
            assert sum(1 for _ in ld) == m
        unchecked_copy(bagcache, root, copy, compression)
        checked = LoadIt(root, None, serializer="raw")
        unchecked = LoadIt(copy, None, serializer="raw")
        if [checked[i] for i in idx[:100]] != [unchecked[i] for i in idx[:100]]:
            print("python_bench: checked and unchecked roots disagree", file=sys.stderr)
            sys.exit(1)
        for i in range(m):  # every shard open in both
            checked[i]
            unchecked[i]

        def base():
            for i in idx:
                unchecked[i]

        def sub():
            for i in idx:
                checked[i]

        # The reading thread's CPU time: on a shared machine it moves less
        # than the wall clock, and it is all the check costs (no I/O).
        tb, t = measure(a.repeat, base, sub, clock=time.thread_time)
        checked.close()
        unchecked.close()
        shutil.rmtree(root)
        shutil.rmtree(copy)
        row(name, t, "same root without checksums", tb, len(idx),
            f"{t / tb:.3f}x CPU", "<= 1.05x", t / tb <= 1.05)


# ---- batch reads: read_indices against the floor ------------------------------------


BATCH_SIZES = (256, 1_024, 10_000)
BATCH_SIZES_QUICK = (256, 1_024, 2_048)  # --quick: tiny sizes


def batch_subjects(bagcache, tmp, path, records):
    """(name, sequence, serial, closer) for each subject of the batch rows:
    `serial` is the same sequence read with max_parallelism=1 (None where
    there is no such option: a LoadIt)."""
    zpath = os.path.join(tmp, "data.bagz")
    with bagcache.Writer(zpath) as w:  # zstd, from the name
        for r in records:
            w.write(r)
    one = bagcache.Reader.Options(max_parallelism=1)
    subjects = []
    for kind, p in ((".bag", path), (".bagz", zpath)):
        r, r1 = bagcache.Reader(p), bagcache.Reader(p, one)
        subjects.append((f"Reader {kind}", r, r1, None))
        subjects.append((f"view {kind}", r[::-1], r1[::-1], None))
    LoadIt = getattr(bagcache, "LoadIt", None)
    if LoadIt is None:
        return subjects

    def gen():
        return iter(records)

    for name, kwargs in (("LoadIt raw .bag", {"serializer": "raw"}),
                         ("LoadIt raw .bagz", {"serializer": "raw", "compression": "zstd"})):
        root = os.path.join(tmp, "batches-" + name.replace(" ", "-").replace(".", ""))
        loader = LoadIt(root, gen, **kwargs)
        assert sum(1 for _ in loader) == len(records)  # everything cached
        subjects.append((name, loader, None, loader.close))
        if name == "LoadIt raw .bag":
            subjects.append(("LoadIt view .bag", loader[::1], None, None))
    return subjects


class Competitor:
    """One CPU-bound process (a Python busy loop) while in the with block."""

    def __enter__(self):
        import subprocess
        self.p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        time.sleep(0.2)
        return self

    def __exit__(self, *exc):
        self.p.kill()
        self.p.wait()


def bench_batches(a, np, bagcache, tmp, path, records):
    """read_indices of random batches (numpy int64 arrays) against the
    floor, [m[i * 1024:(i + 1) * 1024] for i in batch] over an mmap of
    data.bag, and against the same subject read with max_parallelism=1,
    idle and with one CPU-bound process competing.  Wall time, medians."""
    only = set(a.only.split(",")) if a.only else None
    if only is not None and "batches" not in only:
        return
    m = len(records)
    t0 = time.perf_counter()
    subjects = batch_subjects(bagcache, tmp, path, records)
    print(f"  (batch subjects made in {fmt_time(time.perf_counter() - t0)})", file=sys.stderr)
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    if mm[:RECORD_SIZE] != records[0] or mm[(m - 1) * RECORD_SIZE:m * RECORD_SIZE] != records[-1]:
        print("python_bench: data.bag is not laid out as expected", file=sys.stderr)
        sys.exit(1)
    rng = np.random.default_rng(11)
    sizes = BATCH_SIZES_QUICK if a.quick else BATCH_SIZES
    plans = {}
    for b in sizes:
        batches = [rng.integers(0, m, size=b, dtype=np.int64)
                   for _ in range(max(1, -(-a.batch_reads // b)))]
        plans[b] = (batches, [x.tolist() for x in batches])
    for load in ("idle", "loaded"):
        with Competitor() if load == "loaded" else contextlib.nullcontext():
            for name, seq, serial, _ in subjects:
                for b in sizes:
                    batches, lists = plans[b]
                    n = b * len(batches)
                    want = [records[i] for i in lists[0]]
                    if name.startswith("view"):
                        want = [records[m - 1 - i] for i in lists[0]]
                    if seq.read_indices(batches[0]) != want or (
                            serial is not None and serial.read_indices(batches[0]) != want):
                        print(f"python_bench: {name}: read_indices read wrong bytes",
                              file=sys.stderr)
                        sys.exit(1)

                    def floor():
                        out = None
                        for idx in lists:
                            out = [mm[i * RECORD_SIZE:(i + 1) * RECORD_SIZE] for i in idx]
                        return out

                    def reads(s):
                        def run():
                            # A batch is dropped when the next one arrives,
                            # as in a training loop.
                            out = None
                            for x in batches:
                                out = s.read_indices(x)
                            return out
                        return run

                    runs = [(floor, None), (reads(seq), None)]
                    if serial is not None:
                        runs.append((reads(serial), None))
                    times = measure_each(a.repeat, runs)
                    tf, t = times[0], times[1]
                    result = f"{tf / t:.2f}x of floor"
                    ok = tf / t >= 0.9 or ".bagz" in name
                    target = ">= 0.9x floor" if ".bagz" not in name else ""
                    if serial is not None:
                        t1 = times[2]
                        result += f"; max_parallelism=1 {fmt_time(t1)}: {t / t1:.2f}x its time"
                        ok = ok and t <= 1.05 * t1
                        target += (", " if target else "") + "<= 1.05x mp=1"
                    row(f"read_indices batch {b:,}: {name}, {load}", t,
                        "floor: mmap slices", tf, n, result, target, ok)
    mm.close()
    for _, _, _, close in subjects:
        if close is not None:
            close()


def remover(path):
    """A function that removes the file at path if there is one (for the
    untimed after_baseline step of measure)."""
    def remove():
        if os.path.exists(path):
            os.unlink(path)
    return remove


class DeviceWriter:
    """Writes `total` bytes to `path` with O_DIRECT, then fdatasync: the
    device's own write bandwidth, without the page cache."""

    BLOCK = 4 << 20

    def __init__(self, path, total):
        self.path, self.total = path, total
        self.remove = remover(path)
        self.buffer = mmap.mmap(-1, self.BLOCK)  # page-aligned, as O_DIRECT needs
        self.buffer.write(b"\x5a" * self.BLOCK)

    def __call__(self):
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
        try:
            with memoryview(self.buffer) as view:
                for offset in range(0, self.total, self.BLOCK):
                    # O_DIRECT wants whole 4 KiB pages: the last write is
                    # rounded up (at most 4,095 bytes more than the total).
                    n = min(self.BLOCK, self.total - offset)
                    os.pwrite(fd, view[:(n + 4095) // 4096 * 4096], offset)
            os.fdatasync(fd)
        finally:
            os.close(fd)

def device_writer(path, total):
    """A DeviceWriter that has run once, or None where the file system
    refuses O_DIRECT (tmpfs, some network file systems)."""
    if not hasattr(os, "O_DIRECT"):
        return None
    writer = DeviceWriter(path, total)
    try:
        writer()
    except OSError:
        return None
    finally:
        writer.remove()
    return writer


def main():
    a = parse_args()
    ensure_static_tls()
    lib_path = use_build(a.build)
    try:
        import numpy as np

        import bagcache
    except ImportError as e:
        print(f"python_bench: {e} (run from the build tree, or --build DIR)", file=sys.stderr)
        return 2
    if not os.path.exists(lib_path):
        print(f"python_bench: {lib_path} is missing (--build DIR)", file=sys.stderr)
        return 2

    tmp = a.dir or tempfile.mkdtemp(prefix="bagcache-pybench.")
    os.makedirs(tmp, exist_ok=True)
    try:
        print(f"python_bench: {a.records:,} records x {RECORD_SIZE} B, {a.reads:,} reads, "
              f"repeat {a.repeat}, in {tmp}", file=sys.stderr)
        records = word_salad(np, a.records, 1)
        path = os.path.join(tmp, "data.bag")
        with bagcache.Writer(path) as w:
            for r in records:
                w.write(r)
        with open(path, "rb") as f:  # page cache warm
            while f.read(1 << 24):
                pass
        idx = np.random.default_rng(42).integers(0, a.records, size=a.reads, dtype=np.int64)
        bench_reader(a, np, bagcache, lib_path, path, idx)
        texts = [r[:1000].decode() for r in records]
        bench_loadit(a, np, bagcache, tmp, texts)
        bench_cold(a, np, bagcache, tmp, texts)
        del texts
        bench_checksums(a, np, bagcache, tmp, records)
        bench_batches(a, np, bagcache, tmp, path, records)
        del records
    finally:
        if not a.dir:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"bagcache {bagcache.__version__}, Python {sys.version.split()[0]}, "
          f"{os.cpu_count()} CPUs; medians of {a.repeat}")
    print()
    print_table()
    return 0


if __name__ == "__main__":
    sys.exit(main())
