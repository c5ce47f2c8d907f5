"""The first pass over an empty LoadIt (python/src/loadit/tee.c): the
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
    # Right away: the first loop ended with everything on disk.
    assert type(iter(loader)).__name__ == "_CacheIter"
    assert [x for x in loader] == model(40)
    loader.close()
    again = LoadIt(root, src, max_shard_length=10)
    assert type(iter(again)).__name__ == "_CacheIter"  # not a first pass
    assert [x for x in again] == model(40)
    assert src.passes == 1  # everything came from the cache


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


# ---- what is on disk when the loop ends, or when close() returns ---------------


def big_item(i):
    """Record i of big_source: about 2 KiB, so that the last shard takes the
    fill thread a while to write."""
    return {"i": i, "pad": bytes([i % 251]) * 2000}


def big_source(n):
    def create():
        for i in range(n):
            yield big_item(i)
    return create


@pytest.mark.parametrize("n", [950, 1000])  # the end inside a shard, at its end
def test_the_loop_ends_with_everything_on_disk(tmp_path, n):
    root = str(tmp_path / "c")
    loader = LoadIt(root, big_source(n), max_shard_length=100)
    count = 0
    for x in loader:
        count += 1
    # Right away, no close(): the last shard published, the length final.
    assert count == n
    assert loader.all_cached_to_disk()
    other = reopen(root)  # another handle, as another process would open it
    st = other.stats()
    assert (st["length"], st["length_final"], st["shards_present"]) == (n, True, (n + 99) // 100)
    assert len(other) == n
    assert [other[i] for i in (0, n - 101, n - 1)] == [big_item(i) for i in (0, n - 101, n - 1)]
    loader.close()


def _loop_then_exit(root, n):
    """A process that iterates a new root and leaves without any clean-up,
    as multiprocessing's workers do (os._exit)."""
    loader = LoadIt(root, big_source(n), max_shard_length=100)
    count = sum(1 for _ in loader)
    os._exit(0 if count == n else 3)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_process_that_exits_right_after_the_loop_leaves_everything(tmp_path, method):
    import multiprocessing as mp

    root = str(tmp_path / "c")
    n = 950
    proc = mp.get_context(method).Process(target=_loop_then_exit, args=(root, n))
    proc.start()
    proc.join(120)
    assert proc.exitcode == 0
    cached = reopen(root)
    assert len(cached) == n
    assert cached.stats()["length_final"]
    assert [x for x in cached] == [big_item(i) for i in range(n)]
    assert scratch(root) == []


@pytest.mark.parametrize("how", ["break", "held", "collected"])
def test_a_broken_off_pass_has_its_shard_on_disk_once_closed(tmp_path, how):
    import gc

    root = str(tmp_path / "c")
    src = Counting(100)
    loader = LoadIt(root, src, max_shard_length=10, preload_fn=None)
    if how == "held":  # the iterator is still held when close() comes
        it = iter(loader)
        assert [next(it) for _ in range(15)] == model(15)
    else:
        for x in loader:
            if x["i"] == 14:
                break
    if how == "collected":
        del loader
        gc.collect()
    else:
        loader.close()
    # The shard the loop was in is complete, by the same iterator, and
    # nothing after it was generated.
    assert src.passes == 1 and src.pulled == 20
    cached = reopen(root)
    assert cached.stats()["shards_present"] == 2
    assert [cached[i] for i in range(20)] == model(20)
    assert scratch(root) == []


class Stop(Exception):
    pass


@pytest.mark.parametrize("how", ["break", "dropped", "raised"])
def test_a_dropped_loop_iterator_leaves_its_shard_on_disk_at_once(tmp_path, how):
    # loadit's test_loader_can_compress looks at the shard files right after
    # `break`: the loop's iterator is gone, the loader still open.
    root = str(tmp_path / "c")
    src = Counting(100)
    loader = LoadIt(root, src, max_shard_length=10, preload_fn=None, compression="zstd")
    if how == "break":
        for x in loader:
            if x["i"] == 14:
                break
    elif how == "dropped":
        it = iter(loader)
        assert [next(it) for _ in range(15)] == model(15)
        del it
    else:
        with pytest.raises(Stop):
            for x in loader:
                if x["i"] == 14:
                    raise Stop()
    assert sorted(os.listdir(os.path.join(root, "shards"))) == ["0.10.bagz", "10.20.bagz"]
    assert src.passes == 1 and src.pulled == 20
    assert [s.start for s in loader.shards.get_all_shards()] == [0, 10]
    assert [reopen(root)[i] for i in range(20)] == model(20)
    loader.close()


# ---- a first pass that raised: a later access retries ---------------------------


class Boom(Exception):
    pass


def test_a_later_access_retries_after_the_first_pass_raised(tmp_path):
    root = str(tmp_path / "c")
    state = {"fail": True, "passes": 0}

    def create():
        state["passes"] += 1
        for i in range(100):
            if i == 35 and state["fail"]:
                raise Boom(f"boom at {i}")
            yield item(i)

    loader = LoadIt(root, create, max_shard_length=10)
    got = []
    with pytest.raises(Boom, match="boom at 35") as first:
        for x in loader:
            got.append(x)
    assert got == model(35)
    # Still failing: a new attempt, so a new exception.
    with pytest.raises(Boom, match="boom at 35") as again:
        loader[40]
    assert again.value is not first.value
    assert state["passes"] == 2
    state["fail"] = False
    assert loader[40] == item(40)
    assert loader[33] == item(33)  # the shard of the failure
    assert [x for x in loader] == model(100)
    loader.close()
    assert reopen(root).stats()["length"] == 100


# ---- the fill behind a first pass fails: a warning, and the loop goes on ---------

FULL_DISK_CHILD = r"""
import json, os, resource, signal, sys, warnings
from bagcache import CacheWarning, LoadIt

root, n = sys.argv[1], 300

def create():
    for i in range(n):
        yield {"i": i, "pad": bytes([i % 251]) * 4000}

loader = LoadIt(root, create, max_shard_length=100, preload_fn=None)
# No file may grow past 256 KiB: a shard (about 400 KB) cannot be written,
# the shared state (tens of KB) can.  write() then fails with EFBIG.
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, 256 << 10))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    got = [x["i"] for x in loader]
    loader.close()
print(json.dumps({
    "got": got,
    "warnings": [[issubclass(w.category, CacheWarning), w.message.errno,
                  w.message.filename, str(w.message), w.filename] for w in caught],
}))
"""


def check_full_disk_warning(report, root, n):
    assert report["got"] == list(range(n))  # every item, in order, nothing raised
    assert len(report["warnings"]) == 1  # once
    is_cache_warning, errno_, filename, text, where = report["warnings"][0]
    assert is_cache_warning
    assert errno_ == 28  # errno.ENOSPC: a full disk, a quota or a file size limit
    assert filename == root
    assert root in text and "No space left on device" in text
    assert where == "<string>"  # attributed to the loop


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs RLIMIT_FSIZE")
def test_a_full_disk_warns_once_and_the_loop_goes_on(tmp_path):
    import json
    import subprocess
    import sys

    root = str(tmp_path / "c")
    out = subprocess.run([sys.executable, "-c", FULL_DISK_CHILD, root], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    check_full_disk_warning(json.loads(out.stdout), root, 300)
    cached = reopen(root)  # what is there is sound: nothing, here
    assert cached.stats()["shards_present"] == 0
    assert scratch(root) == []


def test_a_full_tmpfs_warns_once_and_the_loop_goes_on(tmp_path):
    import subprocess
    import warnings

    from bagcache import CacheWarning

    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mnt)],
                                 capture_output=True, timeout=30).returncode == 0
    except OSError:
        mounted = False
    if not mounted:
        pytest.skip("mounting a small tmpfs is refused here (needs root); "
                    "the RLIMIT_FSIZE test covers the same path")
    try:
        root = str(mnt / "c")
        n = 600  # about 1.2 MB of 2 KiB records: more than the 512 KiB tmpfs

        loader = LoadIt(root, big_source(n), max_shard_length=50, preload_fn=None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = [x for x in loader]
            loader.close()
        assert got == [big_item(i) for i in range(n)]
        mine = [w for w in caught if issubclass(w.category, CacheWarning)]
        assert len(mine) == 1
        assert mine[0].message.errno == 28 and mine[0].message.filename == root
        assert root in str(mine[0].message)
        # The shards written before the disk filled are sound.
        cached = reopen(root)
        present = cached.stats()["shards_present"]
        assert 1 <= present < n // 50
        assert [cached[i] for i in range(50 * present)] == \
            [big_item(i) for i in range(50 * present)]
        del cached
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


# ---- the first pass checks its records against shards filled meanwhile ----------


def test_records_checked_against_a_shard_filled_meanwhile(tmp_path):
    # Nobody waits for the loop: loader[7] inside it fills shard 0 with a
    # second pass, which (a nondeterministic iterator) differs at record 5.
    # The loop goes on with its own items; the appender finds shard 0
    # different from what the loop produced and warns once.
    import warnings

    from bagcache import CacheWarning

    passes = []

    def create():
        passes.append(1)
        second = len(passes) > 1
        for i in range(30):
            yield {"i": i, "pass": 2} if second and i == 5 else item(i)

    loader = LoadIt(str(tmp_path / "c"), create, max_shard_length=10, preload_fn=None)
    got, side = [], []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i, x in enumerate(loader):
            got.append(x)
            if i == 2:
                side.append(loader[7])
        loader.close()
    assert got == model(30)
    assert side == [item(7)]
    assert len(passes) == 2
    mine = [w for w in caught if issubclass(w.category, CacheWarning)]
    assert len(mine) == 1
    assert "not the one the cache holds" in str(mine[0].message)
    cached = reopen(str(tmp_path / "c"))
    assert cached[5] == {"i": 5, "pass": 2}  # the shard the other pass filled


def test_the_first_pass_is_the_one_iterator(tmp_path):
    # Issue 15: no iterator type of its own; the first pass is a _CacheIter
    # whose refill runs the iterator (fails before: a _TeeIter).
    from bagcache import _bagcache

    loader = LoadIt(str(tmp_path / "c"), Counting(25), max_shard_length=10)
    it = iter(loader)
    assert type(it) is _bagcache._CacheIter
    assert not hasattr(_bagcache, "_TeeIter")
    assert next(it) == item(0)
    assert list(it) == model(25)[1:]
    assert loader.stats()["shards_present"] == 3
    # Taken over before its first record (len() drains right after iter()):
    # the same iterator then reads the cache the drain fills.
    other = LoadIt(str(tmp_path / "d"), Counting(25), max_shard_length=10)
    it = iter(other)
    assert len(other) == 25
    assert type(it) is _bagcache._CacheIter and list(it) == model(25)
    loader.close()
    other.close()


def test_a_serializer_without_bytes_is_named_on_every_pass(tmp_path):
    # One conversion of records for the first pass and the source's other
    # passes (fails before: a fill's pass said serializer="raw").
    class Text:
        @staticmethod
        def dumps(obj):
            return str(obj)

        @staticmethod
        def loads(b):
            return bytes(b)

    for how in ("first pass", "fill"):
        loader = LoadIt(str(tmp_path / how.replace(" ", "_")), lambda: iter(range(10)),
                        max_shard_length=5, serializer=Text)
        message = "the serializer returned str, not a bytes-like object"
        with pytest.raises(TypeError, match=message):
            next(iter(loader)) if how == "first pass" else loader[7]
        loader.close()
