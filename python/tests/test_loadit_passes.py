"""A disk limit smaller than the data: parked passes of create_iter(),
seekable create_iter(start=...), what stats() says it costs, and the limit
under four processes.  Counts are exact: no background prefetch
(preload_fn=None), fixed-size raw records, so every shard file has the
same size and the limit is a whole number of shards (doc/cache.md,
"Parked passes").  The iterator itself may run up to 64 items ahead of
what the engine took from a pass (the Python source serializes in
batches), so its own count is checked within that margin."""

import multiprocessing as mp
import os
import random

import pytest

import bagcache
from bagcache import LoadIt, NondeterministicError

from loadit_helpers import shard_bytes

N = 1000
MSL = 100


def rec(i):
    return i.to_bytes(4, "big") * 4


class Counting:
    """create_iter, plain or seekable (`start`), counting the items it
    yields and the start of every pass; `lie`: a seekable one that starts
    one item late."""

    def __init__(self, n=N, lie=0):
        self.n, self.lie, self.produced, self.starts = n, lie, 0, []

    def plain(self):
        def create_iter():
            self.starts.append(0)
            return self._gen(0)

        return create_iter

    def seekable(self):
        def create_iter(start=0):
            self.starts.append(start)
            return self._gen(start + (self.lie if start else 0))

        return create_iter

    def _gen(self, start):
        for i in range(start, self.n):
            self.produced += 1
            yield rec(i)


def shard_size(tmp_path):
    probe = LoadIt(str(tmp_path / "probe"), lambda: (rec(i) for i in range(N)),
                   max_shard_length=MSL, serializer="raw", preload_fn=None)
    probe[0]
    size = probe.stats()["bytes_on_disk"]
    probe.close()
    return size


def open_limited(tmp_path, create_iter, shards=3.5, **kw):
    size = shard_size(tmp_path)
    return LoadIt(str(tmp_path / "c"), create_iter, max_shard_length=MSL, serializer="raw",
                  preload_fn=None, memory_limit=int(shards * size), **kw)


def read(loader, indices):
    for i in indices:
        assert loader[i] == rec(i)


def test_plain_passes_are_parked(tmp_path):
    src = Counting()
    loader = open_limited(tmp_path, src.plain())
    read(loader, [0, 100, 200, 300, 400])  # one pass, 0 -> 500; shards 0, 1 evicted
    read(loader, [150])  # behind the pass: a second one from 0, skips 0..99
    read(loader, [750])  # the first pass, parked at 500, skips 500..699
    st = loader.stats()
    assert src.starts == [0, 0]
    assert st["passes_opened"] == 2
    assert st["records_generated"] == 500 + 200 + 300
    assert 1000 <= src.produced <= 1000 + 64 * 2
    assert st["records_skipped"] == 300
    assert st["records_written"] == 700
    assert st["misses"] == 7 and st["fills"] == 6 and st["regenerations"] == 1
    assert st["records_per_miss"] == pytest.approx(1000 / 7)
    assert st["passes"] == [800, 200]  # in the order of their slots
    assert shard_bytes(loader.root_dir) <= st["disk_limit"]
    loader.close()


def test_seekable_create_iter_starts_at_the_shard(tmp_path):
    src = Counting()
    loader = open_limited(tmp_path, src.seekable())
    read(loader, [0, 100, 200, 300, 400])
    read(loader, [150, 750])
    st = loader.stats()
    # A pass from 0 for the first shards (create_iter() without start), then
    # create_iter(start=...) at each shard no parked pass stands at.
    assert src.starts == [0, 100, 700]
    assert st["records_generated"] == 700 and st["records_skipped"] == 0
    assert 700 <= src.produced <= 700 + 64 * 3
    assert st["records_per_miss"] == 100.0
    assert sorted(st["passes"]) == [200, 500, 800]
    loader.close()


def test_seekable_can_be_turned_off(tmp_path):
    src = Counting()
    loader = open_limited(tmp_path, src.seekable(), seekable=False)
    read(loader, [0, 100, 200, 300, 400, 150])
    assert src.starts == [0, 0]
    loader.close()


def test_seekable_can_be_declared(tmp_path):
    src = Counting()

    def create_iter(*args, **kw):  # no `start` in its signature
        return src.seekable()(*args, **kw)

    loader = open_limited(tmp_path, create_iter, seekable=True)
    read(loader, [0, 100, 200, 300, 400, 150])
    assert src.starts == [0, 100]
    loader.close()
    with pytest.raises(TypeError):
        LoadIt(str(tmp_path / "d"), create_iter, seekable="yes")


def test_seekable_that_seeks_wrongly_is_caught(tmp_path):
    src = Counting(lie=1)
    loader = open_limited(tmp_path, src.seekable())
    read(loader, [0, 100, 200, 300, 400])  # one pass from 0: right
    with pytest.raises(NondeterministicError) as e:
        loader[150]  # create_iter(start=100) starts at 101
    assert "opened at record 100 with the source's open_at" in str(e.value)
    assert "records 100..200" in str(e.value)
    loader.close()


def test_max_passes_one_restarts_from_zero(tmp_path):
    src = Counting()
    loader = open_limited(tmp_path, src.plain(), max_passes=1)
    read(loader, [0, 100, 200, 300, 400, 150, 750])
    st = loader.stats()
    # 0..499; back to 0 for shard 1 (skip 100); 200..699 skipped for shard 7.
    assert src.starts == [0, 0]
    assert st["records_skipped"] == 100 + 500
    assert st["passes"] == [800]
    loader.close()
    with pytest.raises(ValueError):
        LoadIt(str(tmp_path / "d"), src.plain(), max_passes=0)


# ---- four processes under one limit --------------------------------------------------


def _reader(root, limit, seekable, seed, queue):
    """Random reads; after each one, the bytes in shards/ against the limit."""
    try:
        src = Counting()
        loader = LoadIt(root, src.seekable() if seekable else src.plain(), max_shard_length=MSL,
                        serializer="raw", memory_limit=limit)
        rng = random.Random(seed)
        worst, bad = 0, []
        for _ in range(150):
            i = rng.randrange(N)
            if loader[i] != rec(i):
                bad.append(i)
            worst = max(worst, shard_bytes(root))
        loader.close()
        queue.put((seed, bad, worst))
    except Exception as e:  # reported to the parent
        queue.put((seed, [repr(e)], 0))


@pytest.mark.parametrize("seekable", [False, True], ids=["plain", "seekable"])
def test_limit_holds_under_four_processes(tmp_path, seekable):
    limit = int(4.5 * shard_size(tmp_path))
    root = str(tmp_path / "shared")
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_reader, args=(root, limit, seekable, seed, queue))
             for seed in range(4)]
    for p in procs:
        p.start()
    results = sorted(queue.get(timeout=300) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    for seed, bad, worst in results:
        assert bad == [], (seed, bad)
        assert 0 < worst <= limit
    assert shard_bytes(root) <= limit
    st = os.listdir(os.path.join(root, "shards"))
    assert 1 <= len(st) <= 4


# ---- the smallest workable limit ------------------------------------------------------


def test_a_limit_too_small_is_refused(tmp_path):
    size = shard_size(tmp_path)
    src = Counting()
    # A new root, an explicit shard length: refused at the first shard filled.
    loader = LoadIt(str(tmp_path / "c"), src.plain(), max_shard_length=MSL, serializer="raw",
                    memory_limit=3 * size - 1)
    with pytest.raises(ValueError, match=f"smallest workable limit, {3 * size} bytes: "
                       f"3 shards of {size} bytes"):
        loader[0]
    loader.close()
    # Shards on disk: refused at open, and the limit is not stored.
    root = str(tmp_path / "probe")
    with pytest.raises(ValueError, match=f"smallest workable limit, {3 * size} bytes: "
                       f"3 shards of {size} bytes \\(the largest shard present\\) "
                       "\\(one being read, one being filled, 1 prefetched\\)"):
        LoadIt(root, src.plain(), max_shard_length=MSL, serializer="raw",
               memory_limit=3 * size - 1)
    # Six fill workers: the default preload_fn fills max_workers // 2 = 3
    # shards ahead, so five are needed (and five do).
    with pytest.raises(ValueError, match=f"smallest workable limit, {5 * size} bytes: "
                       f"5 shards .*3 prefetched"):
        LoadIt(root, src.plain(), max_shard_length=MSL, serializer="raw", max_workers=6,
               iterator_thread_safe=True, memory_limit=5 * size - 1)
    LoadIt(root, src.plain(), max_shard_length=MSL, serializer="raw", max_workers=6,
           iterator_thread_safe=True, memory_limit=5 * size).close()
    # A preload_fn of the user's may fill up to max_workers (2) shards: four.
    with pytest.raises(ValueError, match=f"smallest workable limit, {4 * size} bytes"):
        LoadIt(root, src.plain(), max_shard_length=MSL, serializer="raw", max_workers=2,
               iterator_thread_safe=True, memory_limit=4 * size - 1,
               preload_fn=lambda loader, i: [])
    loader = LoadIt(root, src.plain(), max_shard_length=MSL, serializer="raw",
                    memory_limit=3 * size)
    assert loader.stats()["disk_limit"] == 3 * size
    read(loader, [0, 500, 999])
    loader.close()
    # A size string: the target shard size is lowered to fit.
    loader = LoadIt(str(tmp_path / "s"), src.plain(), max_shard_length="64mb",
                    memory_limit="64kb", serializer="raw")
    assert loader.stats()["shard_records"] * 24 <= 64 * 1024 // 4
    loader.close()


# ---- the default preload_fn: only for sequential reads ----------------------------------


def test_default_preload_only_for_sequential_reads(tmp_path):
    import time

    src = Counting()
    # (Seekable: a pass from 0 would keep the shards on its way to 50.)
    loader = LoadIt(str(tmp_path / "c"), src.seekable(), max_shard_length=10, serializer="raw")
    read(loader, [505, 65, 75])  # shards 50 and 6 random; 7 follows 6: 8 is prefetched
    deadline = time.time() + 10
    while len(loader.shards()) < 4 and time.time() < deadline:
        time.sleep(0.01)
    loader.close()  # the fill thread stops: nothing changes after this
    # One fill thread takes the queue in order: had 51 been queued (after
    # shard 50), it would be there before 8.
    starts = sorted(int(f.split(".")[0]) for f in os.listdir(tmp_path / "c" / "shards"))
    assert starts == [60, 70, 80, 500]
