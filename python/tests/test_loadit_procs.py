"""Several processes on one LoadIt root at once: forked children using the
parent's open LoadIt, spawned children using a pickled one (reopened),
filling and reading together, with and without a disk limit; every record
must be right and the limit must hold."""

import multiprocessing as mp
import random
import time

import pytest

import bagcache

from loadit_helpers import Source, item, shard_bytes

N = 600
MSL = 25


def _check(loader, seed, queue):
    """Random reads, a view, a full pass and len(): the mismatches."""
    bad = []
    try:
        rng = random.Random(seed)
        for _ in range(150):
            i = rng.randrange(-N, N)
            if loader[i] != item(i % N):
                bad.append(i)
        view = loader[seed::4]
        if list(view) != [item(i) for i in range(seed, N, 4)]:
            bad.append("view")
        if list(loader) != [item(i) for i in range(N)]:
            bad.append("iteration")
        if len(loader) != N:
            bad.append("len")
    except Exception as e:  # reported to the parent
        bad.append(repr(e))
    queue.put((seed, bad))


@pytest.mark.parametrize("limit", [None, 6], ids=["no-limit", "limit-6-shards"])
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_four_processes_share_a_root(tmp_path, method, limit):
    if method not in mp.get_all_start_methods():
        pytest.skip(f"no {method} start method")
    ctx = mp.get_context(method)
    root = str(tmp_path / "root")
    memory_limit = None
    if limit is not None:
        probe = bagcache.LoadIt(str(tmp_path / "probe"), Source(N), max_shard_length=MSL)
        list(probe)
        memory_limit = limit * max(s["bytes"] for s in probe.shards())
    # (A slow iterator makes the processes overlap; under the limit, where
    # every miss regenerates from the start, a fast one keeps the test short.)
    source = Source(N, delay=0.0002 if limit is None else 0)
    loader = bagcache.LoadIt(root, source, max_shard_length=MSL, memory_limit=memory_limit)
    assert loader[0] == item(0)  # the parent's fill thread exists before the fork
    # ... and has finished prefetching shard 1: CPython < 3.12 can deadlock a
    # child forked while another thread creates a Python thread state.
    deadline = time.time() + 30
    while loader.stats()["shards_present"] < 2 and time.time() < deadline:
        time.sleep(0.01)
    queue = ctx.Queue()
    procs = [ctx.Process(target=_check, args=(loader, seed, queue)) for seed in range(4)]
    for p in procs:
        p.start()
    results = sorted(queue.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert results == [(seed, []) for seed in range(4)]
    assert [loader[i] for i in range(N - 1, -1, -37)] == [item(i) for i in range(N - 1, -1, -37)]
    if memory_limit is not None:
        assert shard_bytes(root) <= memory_limit
        assert loader.stats()["bytes_on_disk"] <= memory_limit


BIG = 20_000  # more records than a first pass's ring holds (4,096)


def _first_pass(root, barrier, queue):
    """A first pass over a root other processes fill at the same time."""
    try:
        barrier.wait(60)
        loader = bagcache.LoadIt(root, lambda: (item(i) for i in range(BIG)),
                                 max_shard_length=500)
        ok = [x for x in loader] == [item(i) for i in range(BIG)]
        loader.close()
        queue.put(ok)
    except Exception as e:  # reported to the parent
        queue.put(repr(e))


def test_first_passes_of_three_processes_on_one_root(tmp_path):
    # Each process's first pass pushes records for its own fill, which may
    # find every shard claimed by the others: then the pass must go on from
    # the cache rather than wait for room in its ring (it hung 1 run in 5).
    ctx = mp.get_context("fork")
    for trial in range(5):
        root = str(tmp_path / f"root{trial}")
        barrier, queue = ctx.Barrier(3), ctx.Queue()
        procs = [ctx.Process(target=_first_pass, args=(root, barrier, queue))
                 for _ in range(3)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        hung = [p.pid for p in procs if p.is_alive()]
        for p in procs:
            if p.is_alive():
                p.kill()
        assert hung == [], f"trial {trial}: processes {hung} did not finish"
        assert sorted(str(queue.get(timeout=5)) for _ in procs) == ["True"] * 3
