#!/usr/bin/env python3
"""regen_bench - a cache smaller than its data: what regenerating evicted
shards costs LoadIt, beside a baseline measured in the same run.  Prints a
table; it is not a test and never fails on timings (exit 1 only if a read
returns the wrong item, 2 on bad usage).

    cd build && PYTHONPATH=python/pkg python3 ../tests/bench/regen_bench.py
    python3 tests/bench/regen_bench.py --build build [--quick]

Options: --build DIR (the build tree holding python/pkg; default
$BC_BUILDDIR or the current directory), --records N (100,000),
--record-bytes B (1,000), --shard N (records per shard, 1,000), --reads N
(2,000), --limit-percent P (25: the disk limit is P% of N x B), --seed S
(0), --repeat R (3), --dir DIR (where the roots go; default a new
temporary directory, which is on the disk here; give it twice, e.g.
`--dir /dev/shm/x --dir /tmp/x`, for a table on tmpfs, where the disk's
syncs cost nothing, and one on the disk, in the same run), --loadit DIR (a directory from which
`import loadit` works, e.g. loadit's src/: adds loadit's own row; it
needs filelock, watchdog and fsspec), --quick (10,000 records of 100
bytes, shards of 100, 200 reads, one repeat).

The workload (doc/cache.md, "Parked passes"): create_iter() yields N
records of B bytes (record i is its index, 8 bytes big-endian, repeated);
LoadIt(max_shard_length=shard, max_cache_size=4, memory_limit=the limit),
defaults otherwise (the pickle serializer, one fill worker, the default
preload_fn); `--reads` uniformly random indices (random.Random(seed)),
each read as loader[i] and compared with the item it must be.  Each row
runs on a fresh root, R times; the table shows the median reads/s and
the records the iterator produced per read (exact for a fixed seed, up to
the few background prefetches a random sequence triggers), with its
ratios to the restart-from-0 loop and (with --loadit) to loadit.

The floor: before each repeat, a bare loop over the generator measures
how many records per second producing them costs in this run (G), and in
each directory creating, writing and unlinking a file of one shard's
bytes, with no sync, measures what storing a shard costs there at the
least (W).  A row producing r records and missing m times per read cannot
exceed 1 / (r / G + m x W) reads/s however cheap the cache's own work is
(the loop row stores nothing, and loadit's misses are not counted: r / G
alone).  `of floor` is the row's reads/s over that ceiling; what it lacks
is the cache's own work per miss (pickling, checksums, the state's
transactions, syncs on a disk, opening the shard).

The floor with the serializer: the default serializer (pickle, as
loadit's) is work any cache of Python items does, so before each repeat
the bench also measures pickle.dumps (D) and pickle.loads (L) of the
workload's items, per item.  A LoadIt row that writes w records per read
(its records_written) is then at most 1 / (r / G + w x D + L + m x W)
reads/s (loadit's row: r / G + L, its writes uncounted); `of floor+ser`
says what the cache's own work costs beyond producing, pickling and
storing: checksums, the state's transactions, syncs, opening shards.

Rows:
  restart from 0   the baseline: a bare loop keeping the shards the limit
                   holds (the limit over B x shard bytes) in memory, least
                   recently used first out, that restarts the generator
                   from 0 for every miss and reads up to the shard's end:
                   the cost model of a cache without passes.
  LoadIt           bagcache's LoadIt with its defaults (parked passes).
  LoadIt seekable  create_iter(start=0): a regeneration starts at its shard.
  LoadIt passes=1  max_passes=1: one pass, restarted from 0 whenever the
                   target is behind it (what bagcache did before parked
                   passes), for information.
  LoadIt, publish_behind=False
                   the defaults, but each read that fills a shard waits
                   for its publish (its fsyncs and commit): the engine
                   before publish-behind, in the same run (skipped with a
                   build that has no publish_behind).
  LoadIt, evict_ahead=False / True
                   the defaults, but with evicting ahead off where the
                   default turns it on (a disk), on where it is off
                   (tmpfs): the other side of the default, in the same run
                   (skipped with a build that has no evict_ahead).
  loadit           (with --loadit) loadit.LoadIt with the same arguments.

--working-set runs issue 26's workload instead, a working set that fits
the limit (doc/cache.md, "Eviction"): a generator of --ws-records
(20,000) dict records (a numpy array of 60 float32 when numpy is there,
else 240 bytes, a string, the index), LoadIt(memory_limit=--ws-limit
(2mb), max_shard_length=--ws-shard (500)), drained with len() (the last
shards stay, each expensive to rebuild), then --reads reads of
loader[rng.randrange(--ws-span)] (2,000: a working set of 4 shards),
with a generator that costs nothing and one that spins 0.2 ms per record
(--ws-slow-us); plus one epoch of chunk_shuffle(loader, --ws-span,
seed=0) on a fresh root.  Each row prints the misses (fills +
regenerations) and records generated after the drain, and the seconds;
the baseline is an LRU of the shards the limit holds in memory, filled
from the generator: it misses once per working-set shard.
"""

import argparse
import collections
import inspect
import os
import pickle
import random
import shutil
import statistics
import sys
import tempfile
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=os.environ.get("BC_BUILDDIR", "."))
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--record-bytes", type=int, default=1000)
    p.add_argument("--shard", type=int, default=1000)
    p.add_argument("--reads", type=int, default=2000)
    p.add_argument("--limit-percent", type=float, default=25.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--dir", action="append")
    p.add_argument("--loadit")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--working-set", action="store_true")
    p.add_argument("--ws-records", type=int, default=20_000)
    p.add_argument("--ws-shard", type=int, default=500)
    p.add_argument("--ws-limit", default="2mb")
    p.add_argument("--ws-span", type=int, default=2000)
    p.add_argument("--ws-slow-us", type=float, default=200.0)
    a = p.parse_args()
    if a.quick:
        a.records, a.record_bytes, a.shard, a.reads, a.repeat = 10_000, 100, 100, 200, 1
    if min(a.records, a.record_bytes, a.shard, a.reads, a.repeat) < 1 or a.record_bytes < 8:
        p.error("sizes must be positive (record bytes at least 8)")
    return a


class Source:
    """The iterator, counting the records it produces."""

    def __init__(self, n, size):
        self.n, self.reps, self.produced = n, size // 8, 0

    def item(self, i):
        return i.to_bytes(8, "big") * self.reps

    def plain(self):
        def create_iter():
            for i in range(self.n):
                self.produced += 1
                yield self.item(i)

        return create_iter

    def seekable(self):
        def create_iter(start=0):
            for i in range(start, self.n):
                self.produced += 1
                yield self.item(i)

        return create_iter


def restart_from_zero(a, src, indices, capacity):
    """The baseline: an LRU of `capacity` shards in memory; a miss runs the
    generator from 0 to the end of the shard."""
    shards = collections.OrderedDict()
    for i in indices:
        s = i // a.shard
        recs = shards.get(s)
        if recs is None:
            start, recs = s * a.shard, []
            for k, x in enumerate(src.plain()()):
                if k >= start:
                    recs.append(x)
                    if len(recs) == a.shard:
                        break
            shards[s] = recs
            while len(shards) > capacity:
                shards.popitem(last=False)
        else:
            shards.move_to_end(s)
        if recs[i - s * a.shard] != src.item(i):
            raise SystemExit(f"restart from 0: item {i} is wrong")
    return None


def real_loadit_run(a, loadit, root, src, indices, limit):
    loader = loadit.LoadIt(root, src.plain(), max_shard_length=a.shard, max_cache_size=4,
                           memory_limit=limit)
    try:
        for i in indices:
            if loader[i] != src.item(i):
                raise SystemExit(f"loadit: item {i} is wrong")
    finally:
        obs = getattr(loader.shards, "observer", None)
        if obs is not None:
            obs.unschedule_all()
            obs.stop()
    return None


def loadit_run(a, LoadIt, root, src, indices, limit, kind):
    kw = {}
    if kind == "passes1":
        kw["max_passes"] = 1
    if kind == "ahead":
        kw["evict_ahead"] = not _ahead_by_default(root)
    if kind == "sync":
        kw["publish_behind"] = False
    create = src.seekable() if kind == "seekable" else src.plain()
    loader = LoadIt(create, root_dir=root, max_shard_length=a.shard, max_cache_size=4,
                    memory_limit=limit, **kw)
    try:
        for i in indices:
            if loader[i] != src.item(i):
                raise SystemExit(f"LoadIt ({kind}): item {i} is wrong")
        return loader.stats()
    finally:
        loader.close()


def bare_rate(a):
    """Records per second of a bare loop over the generator: the floor."""
    src = Source(a.records, a.record_bytes)
    t = time.perf_counter()
    for _ in src.plain()():
        pass
    return src.produced / (time.perf_counter() - t)


def serializer_cost(a):
    """Seconds per item of pickle.dumps and of pickle.loads (the default
    serializer) for the workload's items: medians of 5 runs over 2,000."""
    src = Source(a.records, a.record_bytes)
    items = [src.item(i) for i in range(min(2000, a.records))]
    dumps, loads = [], []
    for _ in range(5):
        t = time.perf_counter()
        packed = [pickle.dumps(x, protocol=pickle.HIGHEST_PROTOCOL) for x in items]
        dumps.append((time.perf_counter() - t) / len(items))
        t = time.perf_counter()
        for x in packed:
            pickle.loads(x)
        loads.append((time.perf_counter() - t) / len(items))
    return statistics.median(dumps), statistics.median(loads)


def store_cost(a, d):
    """Seconds to create, write and unlink a file of one shard's bytes in d
    (median of 20, no sync): the least a miss pays to store a shard."""
    data = os.urandom(a.shard * (a.record_bytes + 24))
    path = os.path.join(d, "store-cost")
    times = []
    for _ in range(20):
        t = time.perf_counter()
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        os.write(fd, data)
        os.close(fd)
        os.unlink(path)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def run_dir(a, d, kinds, LoadIt, real, indices, limit, capacity, rates, sers):
    """Runs every row R times with its roots under d (None: a new
    temporary directory); the floor's loop runs before each repeat."""
    tmp = d or tempfile.mkdtemp(prefix="bagcache-regen-")
    os.makedirs(tmp, exist_ok=True)
    times = {k: [] for k in kinds}
    produced = {k: [] for k in kinds}
    stats, stores = {}, []
    try:
        for r in range(a.repeat):
            rates.append(bare_rate(a))
            sers.append(serializer_cost(a))
            stores.append(store_cost(a, tmp))
            for k in kinds:
                src = Source(a.records, a.record_bytes)
                root = os.path.join(tmp, f"{k}-{r}")
                t = time.perf_counter()
                if k == "base":
                    restart_from_zero(a, src, indices, capacity)
                elif k == "loadit":
                    real_loadit_run(a, real, root, src, indices, limit)
                else:
                    stats[k] = loadit_run(a, LoadIt, root, src, indices, limit, k)
                times[k].append(time.perf_counter() - t)
                produced[k].append(src.produced)
                shutil.rmtree(root, ignore_errors=True)
    finally:
        if not d:
            shutil.rmtree(tmp, ignore_errors=True)
    return tmp, times, produced, stats, statistics.median(stores)


def fs_type(path):
    """The file system under path (from /proc/mounts), for the table."""
    best, kind = "", "?"
    try:
        real = os.path.realpath(path)
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                mnt = parts[1]
                if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                    best, kind = mnt, parts[2]
    except OSError:
        pass
    return kind


def _ahead_by_default(path):
    """What evict_ahead's default (auto) does under path: on unless the
    file system is held in memory."""
    return fs_type(path) not in ("tmpfs", "ramfs")


def print_table(a, kinds, tmp, times, produced, stats, store, capacity, rate, ser):
    names = {"base": "restart from 0 (loop)", "default": "LoadIt (defaults)",
             "seekable": "LoadIt, create_iter(start)", "passes1": "LoadIt, max_passes=1",
             "sync": "LoadIt, publish_behind=False", "loadit": "loadit (its own)",
             "ahead": f"LoadIt, evict_ahead={not _ahead_by_default(tmp)}"}
    head = ["row", "records/read", "reads/s", "records vs base", "reads/s vs base"]
    if "loadit" in kinds:
        head += ["records vs loadit", "reads/s vs loadit"]
    head += ["floor reads/s", "of floor", "floor+ser reads/s", "of floor+ser", "ms/miss",
             "batches", "largest", "misses", "passes opened", "records/miss"]
    print(f"roots in {tmp} ({fs_type(tmp)}); storing a shard costs at least "
          f"{store * 1e3:.3f} ms here (W)")
    rows = [head]
    med = {k: (statistics.median(produced[k]) / a.reads,
               a.reads / statistics.median(times[k])) for k in kinds}
    base_rec, base_rps = med["base"]
    for k in kinds:
        rec, rps = med[k]
        st = stats.get(k)
        row = [names[k], f"{rec:,.1f}", f"{rps:,.1f}",
               f"{base_rec / rec:.1f}x fewer" if k != "base" else "-",
               f"{rps / base_rps:.1f}x" if k != "base" else "-"]
        if "loadit" in kinds:
            lrec, lrps = med["loadit"]
            row += [f"{lrec / rec:.1f}x fewer" if k != "loadit" else "-",
                    f"{rps / lrps:.1f}x" if k != "loadit" else "-"]
        misses = st["misses"] / a.reads if st else 0.0
        floor = 1.0 / (rec / rate + misses * store)
        dumps, loads = ser
        written = st["records_written"] / a.reads if st else 0.0
        floor_ser = (floor if k == "base"
                     else 1.0 / (rec / rate + written * dumps + loads + misses * store))
        opens = st.get("shard_opens", 0) if st else 0
        row += [f"{floor:,.0f}", f"{rps / floor:.0%}", f"{floor_ser:,.0f}",
                f"{rps / floor_ser:.0%}",
                f"{st['miss_ns'] / opens / 1e6:.3f}" if st and "miss_ns" in st and opens else "-",
                f"{st['publish_batches']:,}" if st and "publish_batches" in st else "-",
                f"{st['publish_largest']:,}" if st and "publish_largest" in st else "-",
                f"{st['misses']:,}" if st else f"(capacity {capacity})" if k == "base" else "-",
                f"{st['passes_opened']:,}" if st else "-",
                f"{st['records_per_miss']:,.1f}" if st else "-"]
        rows.append(row)
    widths = [max(len(r[c]) for r in rows) for c in range(len(head))]
    for n, r in enumerate(rows):
        print("  ".join(v.ljust(w) if c == 0 else v.rjust(w)
                        for c, (v, w) in enumerate(zip(r, widths))))
        if n == 0:
            print("  ".join("-" * w for w in widths))


def ws_source(a, slow_us):
    """The working-set workload's generator (see --working-set)."""
    try:
        import numpy as np
    except ImportError:
        np = None

    def create_iter():
        for i in range(a.ws_records):
            if slow_us:
                t = time.perf_counter()
                while time.perf_counter() - t < slow_us * 1e-6:
                    pass
            x = np.full(60, i, dtype=np.float32) if np is not None else bytes(240)
            yield {"x": x, "name": f"item-{i}", "i": i}

    return create_iter


def ws_run(a, LoadIt, tmp, slow_us, shuffle):
    """One row: (misses, records generated, seconds) after the drain (or
    for the whole shuffled epoch), and the shards the limit held."""
    import bagcache

    root = os.path.join(tmp, f"ws-{slow_us:g}-{int(shuffle)}")
    shutil.rmtree(root, ignore_errors=True)
    L = LoadIt(root, ws_source(a, slow_us), memory_limit=a.ws_limit,
               max_shard_length=a.ws_shard)
    t = time.perf_counter()
    if shuffle:
        v = bagcache.chunk_shuffle(L, a.ws_span, seed=0)
        s0 = {"misses": 0, "records_generated": 0}
        for k in range(len(v)):
            v[k]
    else:
        len(L)
        s0 = L.stats()
        t = time.perf_counter()
        rng = random.Random(a.seed)
        for _ in range(a.reads):
            j = rng.randrange(a.ws_span)
            if L[j]["i"] != j:
                sys.exit(f"loader[{j}] is wrong")
    dt = time.perf_counter() - t
    s = L.stats()
    out = (s["misses"] - s0["misses"], s["records_generated"] - s0["records_generated"], dt,
           s["shards_present"])
    # Closed before its root goes (the shuffled view holds L: a del alone
    # left its publisher working in a directory being removed).
    L.close()
    del L
    shutil.rmtree(root, ignore_errors=True)
    return out


def working_set(a, LoadIt):
    tmp = (a.dir or [None])[0] or tempfile.mkdtemp(prefix="bagcache-ws-")
    os.makedirs(tmp, exist_ok=True)
    try:
        rows = [["row", "misses", "records generated", "seconds", "shards held",
                 "misses vs LRU"]]
        held = None
        results = []
        for name, slow, shuffle in (("random reads, free generator", 0.0, False),
                                    (f"random reads, {a.ws_slow_us:g} us/record", a.ws_slow_us,
                                     False),
                                    ("chunk_shuffle epoch, free generator", 0.0, True)):
            m, g, dt, h = ws_run(a, LoadIt, tmp, slow, shuffle)
            held = h if held is None else held
            results.append((name, m, g, dt, shuffle))
        # The baseline: an LRU of `held` shards in memory misses once per
        # working-set shard read (the reads' distinct shards fit).
        rng = random.Random(a.seed)
        lru, base = collections.OrderedDict(), 0
        for _ in range(a.reads):
            sh = rng.randrange(a.ws_span) // a.ws_shard
            if sh in lru:
                lru.move_to_end(sh)
                continue
            base += 1
            lru[sh] = True
            if len(lru) > held:
                lru.popitem(last=False)
        for name, m, g, dt, shuffle in results:
            rows.append([name, f"{m:,}", f"{g:,}", f"{dt:.2f}", f"{held}",
                         "-" if shuffle else f"{m / base:.1f}x"])
        rows.insert(1, ["LRU of the shards held (baseline)", f"{base:,}",
                        f"{base * a.ws_shard:,}", "-", f"{held}", "1.0x"])
        print(f"working set: {a.ws_records:,} dict records, shards of {a.ws_shard:,}, "
              f"memory_limit={a.ws_limit!r}, drained with len(), then {a.reads:,} reads of "
              f"loader[rng.randrange({a.ws_span:,})] (seed {a.seed}); chunk_shuffle: one "
              f"epoch on a fresh root")
        widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
        for n, r in enumerate(rows):
            print("  ".join(v.ljust(w) if c == 0 else v.rjust(w)
                            for c, (v, w) in enumerate(zip(r, widths))))
            if n == 0:
                print("  ".join("-" * w for w in widths))
    finally:
        if not a.dir:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


def main():
    a = parse_args()
    sys.path.insert(0, os.path.join(os.path.abspath(a.build), "python", "pkg"))
    from bagcache import LoadIt

    if a.working_set:
        return working_set(a, LoadIt)

    rng = random.Random(a.seed)
    indices = [rng.randrange(a.records) for _ in range(a.reads)]
    data = a.records * a.record_bytes
    limit = int(data * a.limit_percent / 100)
    capacity = max(1, limit // (a.shard * (a.record_bytes + 8)))
    kinds = ["base", "default", "seekable", "passes1"]
    if "publish_behind" in inspect.signature(LoadIt.__init__).parameters:
        kinds.append("sync")  # a build with publish-behind: its synchronous path too
    if "evict_ahead" in inspect.signature(LoadIt.__init__).parameters:
        kinds.append("ahead")  # the other side of evict_ahead's default
    real = None
    if a.loadit:
        sys.path.insert(0, os.path.abspath(a.loadit))
        import loadit as real

        kinds.append("loadit")
    results, rates, sers = [], [], []
    for d in a.dir or [None]:
        results.append(run_dir(a, d, kinds, LoadIt, real, indices, limit, capacity, rates,
                               sers))
    rate = statistics.median(rates)
    ser = (statistics.median(x[0] for x in sers), statistics.median(x[1] for x in sers))
    print(f"workload: {a.records:,} records of {a.record_bytes:,} bytes, shards of "
          f"{a.shard:,}, disk limit {limit:,} bytes ({a.limit_percent:g}% of the data), "
          f"max_cache_size=4, {a.reads:,} uniformly random loader[i] (seed {a.seed}); "
          f"medians of {a.repeat}")
    print(f"floor: the bare generator loop makes G = {rate:,.0f} records/s (median "
          f"of {len(rates)}); a row of r records and m misses per read is at most "
          f"1 / (r / G + m x W) reads/s")
    print(f"floor+ser: pickle.dumps D = {ser[0] * 1e6:.3f} us and pickle.loads L = "
          f"{ser[1] * 1e6:.3f} us per item (medians); a row writing w records per read "
          f"is at most 1 / (r / G + w x D + L + m x W) reads/s")
    for tmp, times, produced, stats, store in results:
        print()
        print_table(a, kinds, tmp, times, produced, stats, store, capacity, rate, ser)
    return 0


if __name__ == "__main__":
    sys.exit(main())
