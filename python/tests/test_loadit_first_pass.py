"""The first pass over an empty LoadIt (python/src/loadit_tee.c): the
iterator runs in the reader's thread, the reader gets the iterator's own
objects, and the records reach the cache on the way.  Each test checks the
values against the model, how often the iterator ran, and what the cache
holds afterwards."""

import os
import threading
import time

import pytest

from bagcache import LoadIt

from loadit_helpers import item


def model(n):
    return [item(i) for i in range(n)]


class Counting:
    """create_iter over item(0..n-1), counting passes and items pulled (in
    all, and by each pass in order) and keeping the objects it yielded (to
    check identity)."""

    def __init__(self, n, fail_at=None, exc=ValueError):
        self.n = n
        self.fail_at = fail_at
        self.exc = exc
        self.passes = 0
        self.pulled = 0
        self.pulled_by_pass = []
        self.yielded = []

    def __call__(self):
        self.passes += 1
        self.pulled_by_pass.append(0)
        return self._gen(self.passes - 1)

    def _gen(self, number):
        for i in range(self.n):
            if i == self.fail_at:
                raise self.exc(f"boom at {i}")
            self.pulled += 1
            self.pulled_by_pass[number] += 1
            x = item(i)
            self.yielded.append(x)
            yield x


def reopen(root):
    """The root without a source: only what is cached."""
    return LoadIt(root, None)


def scratch(root):
    return os.listdir(os.path.join(root, "scratch"))


def test_yields_the_iterators_objects_and_caches_them(tmp_path):
    root = str(tmp_path / "c")
    src = Counting(95)
    loader = LoadIt(root, src, max_shard_length=10)
    got = [x for x in loader]
    assert got == model(95)
    assert all(a is b for a, b in zip(got, src.yielded))  # not copies
    assert src.passes == 1 and src.pulled == 95  # one pass, nothing twice
    loader.close()  # waits for the last shard
    cached = reopen(root)
    st = cached.stats()
    assert (st["length"], st["length_final"], st["shards_present"]) == (95, True, 10)
    again = [x for x in cached]
    assert again == model(95)
    assert not any(a is b for a, b in zip(again, src.yielded))  # from the disk
    assert scratch(root) == []


@pytest.mark.parametrize("n", [0, 1, 30, 35])
def test_lengths_at_and_off_shard_boundaries(tmp_path, n):
    root = str(tmp_path / "c")
    src = Counting(n)
    with LoadIt(root, src, max_shard_length=10) as loader:
        assert [x for x in loader] == model(n)
    assert src.passes == 1
    cached = reopen(root)
    assert len(cached) == n
    assert cached.stats()["shards_present"] == (n + 9) // 10
    assert [x for x in cached] == model(n)


def test_second_pass_reads_the_cache(tmp_path):
    root = str(tmp_path / "c")
    src = Counting(40)
    loader = LoadIt(root, src, max_shard_length=10)
    assert [x for x in loader] == model(40)
    # Right away: it waits for the last writes (or, racing a shard's
    # publish, may fill that shard with a pass of its own).
    assert [x for x in loader] == model(40)
    loader.close()
    passes = src.passes
    again = LoadIt(root, src, max_shard_length=10)
    assert type(iter(again)).__name__ == "_CacheIter"  # not a first pass
    assert [x for x in again] == model(40)
    assert src.passes == passes  # everything came from the cache


@pytest.mark.parametrize("stop", [15, 20])
def test_breaking_off_finishes_the_shard_and_generates_no_more(tmp_path, stop):
    root = str(tmp_path / "c")
    src = Counting(100)
    # No prefetch: reading shard 1 below would fill shard 2 in the background.
    loader = LoadIt(root, src, max_shard_length=10, preload_fn=None)
    got = []
    for x in loader:
        got.append(x)
        if len(got) == stop:
            break
    assert got == model(stop)
    # The shard being read when the loop stopped is completed in the
    # background by the same iterator (what it had generated is not
    # wasted), and nothing after it.  (Nothing else reads meanwhile: a read
    # of that shard could race the hand-over and fill it with a pass of
    # its own.)
    deadline = time.monotonic() + 60
    while loader.stats()["shards_present"] < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)  # a wrong third shard would show up now
    assert loader.stats()["shards_present"] == 2
    assert src.passes == 1 and src.pulled == 20
    assert loader[55] == item(55)  # later shards: a new pass
    assert src.passes == 2
    loader.close()
    assert scratch(root) == []
    assert [reopen(root)[i] for i in range(20)] == model(20)


@pytest.mark.parametrize("where", ["main", "thread"])
def test_reading_the_shard_in_progress_inside_the_loop(tmp_path, where):
    # loader[7] needs the shard the loop itself is filling: the fill takes
    # the iterator over instead of waiting for the loop (which waits for it).
    src = Counting(60)
    loader = LoadIt(str(tmp_path / "c"), src, max_shard_length=10)
    got, side = [], []

    def loop():
        for i, x in enumerate(loader):
            got.append(x)
            if i == 3:
                side.append(loader[7])
                side.append(loader[45])

    if where == "main":
        loop()
    else:
        t = threading.Thread(target=loop)
        t.start()
        t.join(60)
        assert not t.is_alive()
    assert got == model(60)
    assert side == [item(7), item(45)]


def test_reader_blocked_elsewhere_is_not_waited_for(tmp_path):
    # The loop waits for another thread, which waits for the shard the loop
    # is filling: after a pause the fill takes the iterator over.
    loader = LoadIt(str(tmp_path / "c"), Counting(30), max_shard_length=10)
    got, side = [], []
    done = threading.Event()

    def other():
        side.append(loader[8])
        done.set()

    for i, x in enumerate(loader):
        got.append(x)
        if i == 2:
            threading.Thread(target=other).start()
            assert done.wait(60)
    assert got == model(30)
    assert side == [item(8)]


def test_two_iterators_at_once(tmp_path):
    src = Counting(50)
    loader = LoadIt(str(tmp_path / "c"), src, max_shard_length=10)
    pairs = list(zip(iter(loader), iter(loader)))
    assert [a for a, _ in pairs] == model(50)
    assert [b for _, b in pairs] == model(50)


def test_failing_iterator(tmp_path):
    root = str(tmp_path / "c")
    src = Counting(100, fail_at=34)
    loader = LoadIt(root, src, max_shard_length=10)
    it = iter(loader)
    got = []
    with pytest.raises(ValueError, match="boom at 34") as info:
        for x in it:
            got.append(x)
    assert got == model(34)
    assert info.value.__traceback__ is not None
    assert list(it) == []  # like a generator after it raised
    with pytest.raises(ValueError, match="boom at 34"):
        loader[35]  # the shard is filled again, and fails again
    loader.close()  # the shards before the failure are written
    assert scratch(root) == []
    assert reopen(root).stats()["shards_present"] == 3
    fresh = LoadIt(root, Counting(100), max_shard_length=10)
    assert [x for x in fresh] == model(100)


def test_interrupted_first_pass_leaves_a_consistent_cache(tmp_path):
    root = str(tmp_path / "c")
    loader = LoadIt(root, Counting(100, fail_at=23, exc=KeyboardInterrupt),
                    max_shard_length=10)
    got = []
    with pytest.raises(KeyboardInterrupt):
        for x in loader:
            got.append(x)
    assert got == model(23)
    loader.close()
    assert scratch(root) == []
    fresh = LoadIt(root, Counting(100), max_shard_length=10)
    assert fresh.stats()["shards_present"] == 2
    assert [x for x in fresh] == model(100)


def test_closing_inside_the_loop(tmp_path):
    root = str(tmp_path / "c")
    loader = LoadIt(root, Counting(100), max_shard_length=10)
    it = iter(loader)
    assert [next(it) for _ in range(25)] == model(25)
    loader.close()
    with pytest.raises(ValueError, match="closed"):
        next(it)
    assert scratch(root) == []
    fresh = LoadIt(root, Counting(100), max_shard_length=10)
    assert [x for x in fresh] == model(100)


def test_dropped_before_the_first_record(tmp_path):
    src = Counting(40)
    loader = LoadIt(str(tmp_path / "c"), src, max_shard_length=10)
    it = iter(loader)
    del it
    time.sleep(0.05)  # the driver may ask for shard 0 meanwhile: it gets nothing
    assert src.pulled == 0  # the dropped first pass generated nothing
    assert loader[33] == item(33)
    assert [x for x in loader] == model(40)


def test_raw_records_are_yielded_as_the_cache_returns_them(tmp_path):
    def create():
        return (bytearray(b"r%d" % i) for i in range(25))

    loader = LoadIt(str(tmp_path / "c"), create, max_shard_length=10, serializer="raw")
    got = [x for x in loader]
    assert got == [b"r%d" % i for i in range(25)]
    assert all(type(x) is bytes for x in got)
    assert [x for x in loader] == got


def test_serializer_failure_reaches_the_reader(tmp_path):
    import json
    import types

    def create():
        yield from range(12)
        yield object()

    serializer = types.SimpleNamespace(dumps=lambda x: json.dumps(x).encode(),
                                       loads=json.loads)
    loader = LoadIt(str(tmp_path / "c"), create, max_shard_length=5, serializer=serializer)
    got = []
    with pytest.raises(TypeError, match="not JSON serializable"):
        for x in loader:
            got.append(x)
    assert got == list(range(12))
    loader.close()
    assert reopen(str(tmp_path / "c")).stats()["shards_present"] == 2


def test_disk_limit_smaller_than_the_data(tmp_path):
    from loadit_helpers import shard_bytes

    root = str(tmp_path / "c")
    with LoadIt(root, Counting(30), max_shard_length=10) as probe:
        assert [x for x in probe] == model(30)
    one_shard = max(os.path.getsize(os.path.join(root, "shards", f))
                    for f in os.listdir(os.path.join(root, "shards")))
    limit = 3 * one_shard + one_shard // 2
    root = str(tmp_path / "d")
    src = Counting(200)
    loader = LoadIt(root, src, max_shard_length=10, memory_limit=limit)
    assert [x for x in loader] == model(200)
    loader.close()
    assert shard_bytes(root) <= limit
    assert src.passes == 1
    again = LoadIt(root, Counting(200), max_shard_length=10, memory_limit=limit)
    assert [again[i] for i in (0, 199, 57, 3)] == [item(i) for i in (0, 199, 57, 3)]
    assert shard_bytes(root) <= limit


def test_with_preload_and_workers(tmp_path):
    a = LoadIt(str(tmp_path / "a"), Counting(80), max_shard_length=10,
               preload_all_async=True)
    assert [x for x in a] == model(80)
    b = LoadIt(str(tmp_path / "b"), Counting(80), max_shard_length=10, max_workers=2,
               iterator_thread_safe=True)
    assert [x for x in b] == model(80)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_iterator_does_not_cross_fork(tmp_path):
    loader = LoadIt(str(tmp_path / "c"), Counting(30), max_shard_length=10)
    it = iter(loader)
    assert next(it) == item(0)
    pid = os.fork()
    if pid == 0:
        try:
            next(it)
            os._exit(1)
        except RuntimeError:
            os._exit(0)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert [next(it) for _ in range(29)] == model(30)[1:]


def test_raw_record_of_the_wrong_type(tmp_path):
    def create():
        yield b"fine"
        yield "not bytes"

    loader = LoadIt(str(tmp_path / "c"), create, max_shard_length=10, serializer="raw")
    it = iter(loader)
    assert next(it) == b"fine"
    with pytest.raises(TypeError, match="bytes-like"):
        next(it)
