"""Accepted disk limits under load (issue 25): eight processes read one root
at random, each with its own memory_limit (20,000, 26,000, 32,000 or 40,000
bytes, all above the smallest workable limit, 18,900 bytes: 3 shards of
6,300), records of 307 bytes in shards of 20.  Room reserved by other
processes' fills (and, the limit in force being the last one stored, room
reserved under a larger limit than the one in force) used to make about
one run in three fail with OSError(ENOSPC) "... reserved by shards being
filled or published) and nothing left to evict".  Now a fill that finds no
room waits for it a while, then serves its records without keeping the
shard: every read returns the right record."""

import multiprocessing as mp
import random

import bagcache

N = 400
MSL = 20
LIMITS = [20_000, 26_000, 32_000, 40_000] * 2
ROUNDS = 3


def rec(i):
    return b"%06d" % i * 51 + b"x"  # 307 bytes


def source():
    for i in range(N):
        yield rec(i)


def _reader(root, limit, seed, out):
    rng = random.Random(seed)
    wrong, errors = [], []
    try:
        loader = bagcache.LoadIt(root, source, max_shard_length=MSL, memory_limit=limit,
                                 serializer="raw")
        for _ in range(200):
            i = rng.randrange(N)
            try:
                if loader[i] != rec(i):
                    wrong.append(i)
            except Exception as e:  # noqa: BLE001 - reported to the parent
                errors.append(repr(e))
        loader.close()
    except Exception as e:  # noqa: BLE001
        errors.append("open: " + repr(e))
    out.put((seed, limit, wrong, errors[:3]))


def test_eight_processes_with_their_own_limits(tmp_path):
    assert len(rec(0)) == 307
    ctx = mp.get_context("spawn")
    for r in range(ROUNDS):
        root = str(tmp_path / f"root{r}")
        out = ctx.Queue()
        procs = [ctx.Process(target=_reader, args=(root, limit, 10 * r + k, out))
                 for k, limit in enumerate(LIMITS)]
        for p in procs:
            p.start()
        results = sorted(out.get(timeout=300) for _ in procs)
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
        assert [(s, limit, [], []) for s, limit, _, _ in results] == results
        # What stayed is a cache like any other: shards of 6,300 bytes, and
        # every record right.
        loader = bagcache.LoadIt(root, source, max_shard_length=MSL, serializer="raw")
        assert {s["bytes"] for s in loader.shards()} <= {6300}
        assert [loader[i] for i in range(0, N, 7)] == [rec(i) for i in range(0, N, 7)]
        loader.close()
