"""LoadIt: loadit's README examples, first pass and reuse, disk limits,
failing and nondeterministic iterators, info, threads, views against a
list model, pickling, options, and Ctrl-C."""

import ast
import gc
import os
import weakref
import pathlib
import pickle
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

import bagcache
from bagcache import LoadIt

from loadit_helpers import Seekable, Shifted, Source, item, shard_bytes


def model(n):
    return [item(i) for i in range(n)]


# ---- loadit's README, example by example (the import changed to bagcache) ----


def test_readme_usage(tmp_path):
    root = str(tmp_path / "cache")

    def my_iterator():
        for i in range(100):
            yield {"n": i}

    loader = LoadIt(my_iterator, root_dir=root)  # README form: callable first
    assert [x for x in loader] == [{"n": i} for i in range(100)]
    assert [loader[i] for i in range(10)] == [{"n": i} for i in range(10)]
    idx = [2, 4, 9, 10, 32, 4, 6]
    assert [loader[i] for i in idx] == [{"n": i} for i in idx]

    def another_iterator():
        return iter(range(1000, 1057))

    loader = LoadIt(another_iterator, root_dir=str(tmp_path / "cache2"))
    assert [loader[i] for i in range(len(loader))] == list(range(1000, 1057))
    assert loader[-2] == 1055
    assert loader[-10] == 1047
    loader.set_info({"url": "www.mydataset.com/data", "contact": "Tarzan"})
    assert loader.info() == {"url": "www.mydataset.com/data", "contact": "Tarzan"}


def test_readme_signature_order(tmp_path):
    # The code's order (root_dir first) works as well as the README's.
    a = LoadIt(str(tmp_path / "a"), lambda: iter(range(5)))
    b = LoadIt(root_dir=str(tmp_path / "b"), create_iter=lambda: iter(range(5)))
    c = LoadIt(lambda: iter(range(5)), str(tmp_path / "c"))
    assert list(a) == list(b) == list(c) == [0, 1, 2, 3, 4]
    with pytest.raises(TypeError):
        LoadIt(lambda: iter(range(5)), create_iter=lambda: iter(range(5)), root_dir="x")
    with pytest.raises(TypeError):
        LoadIt(lambda: iter(range(5)))  # no root_dir


def test_readme_memory_limit(tmp_path):
    def fn_that_creates_new_iterators():
        return iter(range(12000))

    loader = LoadIt(fn_that_creates_new_iterators, root_dir=str(tmp_path),
                    memory_limit=16 * 2**30)  # 16 GB on-disk cache
    assert list(loader) == list(range(12000))
    assert (loader[11030], loader[11193], loader[10500]) == (11030, 11193, 10500)
    assert loader.stats()["disk_limit"] == 16 * 2**30


def test_readme_preload_all(tmp_path):
    data = list(range(3000))
    create = lambda: iter(data)  # noqa: E731
    # The README passes max_workers=2 without iterator_thread_safe: loadit
    # refuses that (README bug), and so does bagcache.
    with pytest.raises(ValueError, match="iterator_thread_safe"):
        LoadIt(create, root_dir=str(tmp_path), memory_limit=None, max_workers=2,
               preload_all_async=True)
    loader = LoadIt(create, root_dir=str(tmp_path), memory_limit=None, max_workers=2,
                    iterator_thread_safe=True, preload_all_async=True,
                    max_shard_length=100)
    assert loader[5] == 5
    loader.all_cached_to_disk()  # may be either while the preload runs
    assert loader.wait_until_all_cached() is True
    assert loader.all_cached_to_disk()
    st = loader.stats()
    assert st["length_final"] and st["length"] == 3000 and st["shards_present"] == 30


def test_readme_goodies_over_a_loader(tmp_path):
    # The README's "other goodies" take any sequence; a LoadIt is one.
    loader = LoadIt(Source(300), root_dir=str(tmp_path), max_shard_length=32)
    shuffled = bagcache.chunk_shuffle(loader, chunk_size=128, length=256, seed=3)
    got = [x["i"] for x in shuffled]
    assert sorted(got[:128]) == list(range(128))
    assert sorted(got[128:]) == list(range(128, 256))
    view = bagcache.SequenceView(loader, [2, 3, 1, 2])
    assert view[1] == item(3)


# ---- first pass, reuse ----------------------------------------------------------


def test_first_pass_then_reuse_read_only(tmp_path):
    n = 1000
    src = Source(n)
    loader = LoadIt(src, root_dir=str(tmp_path), max_shard_length=64, preload_fn=None)
    assert list(loader) == model(n)
    st = loader.stats()
    assert (st["length"], st["length_final"], st["shards_present"]) == (n, True, 16)
    assert st["fills"] == 16 and st["regenerations"] == 0
    assert st["passes_opened"] == 1  # one pass of the iterator did it all
    assert src.passes == 1 and len(loader) == n
    with pytest.raises(IndexError):
        loader[n]
    assert src.passes == 1  # the end is known: no new pass to find out
    loader.close()
    with pytest.raises(ValueError, match="closed"):
        loader[0]

    again = LoadIt(str(tmp_path), None)  # no iterator: reads the cache
    assert len(again) == n and again[-1] == item(n - 1)
    assert again.read_indices([5, 999, -3]) == [item(5), item(999), item(n - 3)]
    assert list(again) == model(n)
    assert again.all_cached_to_disk()


def test_partial_cache_without_source(tmp_path):
    loader = LoadIt(Source(500), root_dir=str(tmp_path), max_shard_length=50, preload_fn=None)
    # Shards 0 and 2, and 1 kept on the pass's way to 2.
    assert loader[10] == item(10) and loader[120] == item(120)
    assert loader.worker_positions() == [150]  # one pass, kept where it stopped
    assert loader.stats()["shards_kept"] == 1
    loader.close()
    ro = LoadIt(str(tmp_path))
    assert ro[49] == item(49) and ro[100] == item(100) and ro[60] == item(60)
    with pytest.raises(bagcache.NotCachedError) as e:
        ro[160]
    assert isinstance(e.value, IndexError)  # what loadit raised
    it = iter(ro)
    assert [next(it) for _ in range(150)] == model(150)
    with pytest.raises(bagcache.NotCachedError):  # loadit would stop silently
        next(it)
    with pytest.raises(bagcache.NotCachedError):
        len(ro)
    with pytest.raises(FileNotFoundError):
        LoadIt(str(tmp_path / "nothing_here"))
    assert not os.path.exists(tmp_path / "nothing_here")


def test_known_length_and_len_keeps_data(tmp_path):
    src = Source(300)
    loader = LoadIt(src, root_dir=str(tmp_path / "a"), max_shard_length=40, length=300)
    assert len(loader) == 300 and src.passes == 0  # given: nothing drained
    assert loader[-1] == item(299)
    src2 = Source(300)
    other = LoadIt(src2, root_dir=str(tmp_path / "b"), max_shard_length=40, preload_fn=None)
    assert len(other) == 300  # drains once ...
    assert other.stats()["shards_present"] == 8  # ... and keeps what it read
    assert list(other) == model(300) and src2.passes == 1


def test_disk_limit_holds(tmp_path):
    n, msl = 400, 10
    root = str(tmp_path)
    probe = LoadIt(Source(n), root_dir=str(tmp_path / "probe"), max_shard_length=msl,
                   preload_fn=None)
    probe[0]
    one_shard = probe.shards()[0]["bytes"]
    limit = 5 * one_shard + one_shard // 2
    # No background fills (the publisher may still evict: shard_bytes allows it).
    loader = LoadIt(Source(n), root_dir=root, max_shard_length=msl, memory_limit=limit,
                    max_cache_size=3, preload_fn=None)
    rng = random.Random(7)
    for k in range(150):
        i = rng.randrange(n)
        assert loader[i] == item(i)
        if k % 10 == 0:
            assert shard_bytes(root) <= limit
    assert list(loader) == model(n)
    assert shard_bytes(root) <= limit
    st = loader.stats()
    assert st["bytes_on_disk"] <= limit and st["evictions"] > 0 and st["regenerations"] > 0
    assert loader.shards.size() == st["bytes_on_disk"]
    # Under a limit that cannot hold everything, waiting returns (loadit hangs).
    assert loader.wait_until_all_cached() is False


# ---- errors from the iterator -----------------------------------------------------


def test_failing_iterator_raises_its_exception_then_retries(tmp_path):
    flag = tmp_path / "fail"
    flag.write_text("")
    src = Source(100, fail_at=48, fail_flag=str(flag))
    loader = LoadIt(src, root_dir=str(tmp_path / "c"), max_shard_length=10, preload_fn=None)
    assert loader[5] == item(5)
    with pytest.raises(ValueError, match="^boom at 48$") as e:
        loader[45]
    frames = []
    tb = e.value.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert "_gen" in frames  # the generator's own traceback came along
    with pytest.raises(ValueError, match="boom at 48"):  # still failing: same error
        loader[47]
    flag.unlink()
    assert loader[45] == item(45)  # retried, no wedged state
    assert len(loader) == 100  # and the length is not cut at the failure (loadit B8)
    assert list(loader) == model(100)


class DatasetGone(Exception):
    """An iterator's own exception class, with attributes of its own."""

    def __init__(self, shard, reason):
        super().__init__(f"shard {shard}: {reason}")
        self.shard = shard
        self.reason = reason


def test_waiting_reader_gets_the_iterators_exception_object(tmp_path):
    # Thread A fills shard 0; the main thread needs shard 0 too, so it waits
    # for A's fill; the iterator then raises.  Both readers get the very
    # exception object the iterator raised (carried from the filling thread
    # to the waiter as the failure's payload), attributes and all.
    started, go = threading.Event(), threading.Event()

    def records():
        for i in range(100):
            if i == 5:
                started.set()
                go.wait(20)
                raise DatasetGone(0, "the bucket was deleted")
            yield pickle.dumps(i)

    loader = LoadIt(records, root_dir=str(tmp_path / "c"), max_shard_length=10,
                    preload_fn=None)
    in_a = []

    def reader_a():
        try:
            loader[1]
        except DatasetGone as e:
            in_a.append(e)

    a = threading.Thread(target=reader_a)
    a.start()
    assert started.wait(20)
    timer = threading.Timer(0.3, go.set)  # while the main thread waits below
    timer.start()
    with pytest.raises(DatasetGone) as e:
        loader[3]
    a.join()
    timer.cancel()
    assert len(in_a) == 1
    assert e.value is in_a[0]
    assert (e.value.shard, e.value.reason) == (0, "the bucket was deleted")
    assert loader.stats()["fills"] == 0
    loader.close()


def test_failing_iterator_during_iteration_and_threads(tmp_path):
    flag = tmp_path / "fail"
    flag.write_text("")
    loader = LoadIt(Source(100, fail_at=48, fail_flag=str(flag)), root_dir=str(tmp_path / "c"),
                    max_shard_length=10)
    got = []
    with pytest.raises(ValueError, match="boom at 48"):
        for x in loader:
            got.append(x)
    # The first pass yields what the iterator yielded before it raised, as
    # a loop over the iterator would.
    assert got == model(48)
    errors = []

    def reader():
        try:
            loader[44]
        except ValueError as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == ["boom at 48"] * 4  # every waiting thread gets it
    loader.close()  # the shards before the failure are kept
    assert LoadIt(str(tmp_path / "c"), None).stats()["shards_present"] == 4


def test_failing_create_iter(tmp_path):
    def create():
        raise KeyError("no such dataset")

    with pytest.raises(KeyError, match="no such dataset"):  # the estimate runs it
        LoadIt(create, root_dir=str(tmp_path / "a"))
    loader = LoadIt(create, root_dir=str(tmp_path / "b"), max_shard_length=5)
    with pytest.raises(KeyError, match="no such dataset"):
        loader[0]


def test_nondeterministic_iterator_names_the_shard(tmp_path):
    shift = tmp_path / "shift"
    shift.write_text("0")
    root = str(tmp_path / "c")
    loader = LoadIt(Shifted(50, str(shift)), root_dir=root, max_shard_length=10,
                    preload_fn=None)
    assert [loader[i] for i in (0, 15, 25)] == [item(0), item(15), item(25)]
    loader.close()
    os.remove(os.path.join(root, "shards", "10.20.bag"))  # shard 1 must be regenerated
    shift.write_text("1")  # ... by an iterator that now gives other records
    again = LoadIt(Shifted(50, str(shift)), root_dir=root, max_shard_length=10,
                   preload_fn=None)
    # The pass to shard 1 crosses stored shard 0 first, and compares it.
    with pytest.raises(bagcache.NondeterministicError,
                       match=r"records 0\.\.10 \(shard 0\) came out different"):
        again[12]
    assert again[25] == item(25)  # untouched shards still read


def test_changed_source_is_caught_where_a_pass_crosses_stored_records(tmp_path):
    # Issue 26: a root filled from `a`, opened again with `b`.  Shards 0
    # and 9 are stored (`a` seeks: its pass to 999 opened at 900); record
    # 250's shard was never filled, and the pass to it crosses stored shard
    # 0: its records are compared with shard 0's checksum.  Before, [250]
    # returned ('B', 250) beside [5] == ('A', 5), nothing raised.
    def a(start=0):
        for i in range(start, 1000):
            yield ("A", i)

    def b():
        for i in range(500):
            yield ("B", i)

    root = str(tmp_path / "c")
    first = LoadIt(root, a, max_shard_length=100, preload_fn=None)
    assert first[5] == ("A", 5) and first[999] == ("A", 999)
    first.close()
    again = LoadIt(root, b, max_shard_length=100, preload_fn=None)
    assert again[5] == ("A", 5)  # stored records are served as stored
    for _ in range(2):  # the same error each time, nothing published
        with pytest.raises(bagcache.NondeterministicError) as e:
            again[250]
        msg = str(e.value)
        assert "records 0..100 (shard 0) came out different from the ones stored" in msg
        assert "the source changed since the cache was filled" in msg
        assert f"bagcache cache clear {root}" in msg
    assert sorted(os.listdir(os.path.join(root, "shards"))) == ["0.100.bag", "900.1000.bag"]
    st = again.stats()
    assert (st["fills"], st["records_written"], st["records_skipped"]) == (0, 0, 200)
    again.close()


def test_source_now_shorter_than_the_stored_records(tmp_path):
    # The length case: a source that now ends inside stored records.
    def a(start=0):
        for i in range(start, 1000):
            yield ("A", i)

    def short():
        for i in range(50):
            yield ("A", i)

    root = str(tmp_path / "c")
    first = LoadIt(root, a, max_shard_length=100, preload_fn=None)
    assert first[5] == ("A", 5) and first[999] == ("A", 999)
    first.close()
    again = LoadIt(root, short, max_shard_length=100, preload_fn=None)
    with pytest.raises(bagcache.NondeterministicError,
                       match=r"the source now ends after 50 records, but 1000 are known: "
                             r"the source changed since the cache was filled"):
        again[250]
    again.close()


def test_records_on_the_way_are_kept(tmp_path):
    # Issue 26: without a limit, the shards a pass produces on its way to
    # a record are kept (written, checksummed, published like any other),
    # so a later read of one costs the iterator nothing.  Before,
    # loader[150] kept one shard (records_skipped 150) and loader[140]
    # ran the iterator over 140 records again.
    src = Source(300)
    root = str(tmp_path / "c")
    loader = LoadIt(root, src, max_shard_length=10, preload_fn=None)
    assert loader[150] == item(150)
    st = loader.stats()
    assert (st["shards_present"], st["shards_kept"], st["fills"]) == (16, 15, 1)
    assert (st["records_written"], st["records_skipped"]) == (160, 0)
    assert loader[140] == item(140)
    again = loader.stats()
    assert again["records_generated"] == st["records_generated"] == 160
    assert src.passes == 1 and again["misses"] == 1
    loader.close()
    assert sorted(os.listdir(os.path.join(root, "shards"))) == sorted(
        f"{s}.{s + 10}.bag" for s in range(0, 160, 10))
    assert bagcache.LoadIt(root, None)[55] == item(55)  # readable without a source


def test_raw_serializer_and_bad_records(tmp_path):
    data = [b"rec%d" % i * (i % 5) for i in range(60)]
    loader = LoadIt(lambda: iter(data), root_dir=str(tmp_path / "a"), max_shard_length=8,
                    serializer="raw")
    assert list(loader) == data and loader[-1] == data[-1]
    bad = LoadIt(lambda: iter([b"ok", "not bytes"]), root_dir=str(tmp_path / "b"),
                 max_shard_length=8, serializer="raw")
    with pytest.raises(TypeError, match="bytes-like"):
        bad[0]


def test_records_are_pickles_of_the_highest_protocol(tmp_path):
    # Both ways records reach the cache: a first pass (the reader's thread
    # pickles) and a fill asked for by a random read (a fill thread does).
    def stored(loader):
        out = {}
        for shard in loader.shards():
            records = list(bagcache.Reader(shard["path"]))
            out.update(zip(range(shard["start"], shard["end"]), records))
        return out

    expect = {i: pickle.dumps(item(i), protocol=pickle.HIGHEST_PROTOCOL) for i in range(30)}
    first = LoadIt(Source(30), root_dir=str(tmp_path / "first"), max_shard_length=10)
    assert list(first) == model(30)
    assert stored(first) == expect
    # (No prefetching; shards 0 and 1 are kept on the pass's way to 2.)
    random_read = LoadIt(Source(30), root_dir=str(tmp_path / "read"), max_shard_length=10,
                         preload_fn=None)
    assert random_read[25] == item(25) and random_read[3] == item(3)
    assert stored(random_read) == expect
    assert random_read.stats()["shards_kept"] == 2


def test_custom_serializer(tmp_path):
    class Upper:
        @staticmethod
        def dumps(s):
            return s.encode()

        @staticmethod
        def loads(b):
            return bytes(b).decode().upper()

    loader = LoadIt(lambda: iter(["a", "bc"] * 10), root_dir=str(tmp_path),
                    max_shard_length=4, serializer=Upper)
    assert list(loader) == ["A", "BC"] * 10


# ---- info, options, loadit internals --------------------------------------------


def test_info_round_trip_across_reopen(tmp_path):
    root = str(tmp_path)
    loader = LoadIt(Source(20), root_dir=root, info={"v": [1, 2], "s": "x"})
    assert loader.info() == {"v": [1, 2], "s": "x"}
    other = LoadIt(root)  # a live second instance sees changes at once
    loader.set_info({"changed": True})
    assert other.info() == {"changed": True}
    loader.close()
    other.close()
    assert LoadIt(root).info() == {"changed": True}  # info=None keeps it
    assert LoadIt(root, info=[3]).info() == [3]  # a new one replaces it


def test_damaged_state_at_rest(tmp_path):
    # Issue 14 item 8, its repro: 32 random bytes at offsets 8192-32768 of
    # locks/data.mdb of a 100-record root with 10-record shards, then an
    # open with the source.  Seeds 14 and 26 killed the process (SIGSEGV in
    # mdb_cursor_put from the rebuild), 28 failed a fill.  Every seed now
    # serves every record right (the state validated, or rebuilt).
    import random
    import shutil
    import subprocess
    import sys

    code = (
        "import sys, bagcache\n"
        "gen = lambda: iter([b'%d' % i for i in range(100)])\n"
        "L = bagcache.LoadIt(sys.argv[1], gen, serializer='raw', max_shard_length=10)\n"
        "assert [L[i] for i in range(100)] == [b'%d' % i for i in range(100)]\n"
        "assert len(L) == 100\n"
        "print('ok')\n"
    )
    base = tmp_path / "base"
    subprocess.run([sys.executable, "-c", code, str(base)], check=True, capture_output=True)
    for seed in (14, 26, 28, 0, 1, 2, 3):
        root = tmp_path / f"r{seed}"
        shutil.copytree(base, root)
        data = root / "locks" / "data.mdb"
        size = data.stat().st_size
        rnd = random.Random(seed)
        with open(data, "r+b") as f:
            f.seek(rnd.randrange(8192, min(32768, size) - 32))
            f.write(bytes(rnd.randrange(256) for _ in range(32)))
        r = subprocess.run([sys.executable, "-c", code, str(root)],
                           capture_output=True, text=True, timeout=120)
        assert (r.returncode, r.stdout) == (0, "ok\n"), (seed, r.stderr[-500:])


def test_full_disk_is_oserror(tmp_path):
    # Issue 14 item 1: creating a root on a full file system raised SIGBUS
    # (LMDB's sparse, mapped lock file).  It is OSError(ENOSPC).  Needs a
    # tmpfs of its own, mounted in a private mount namespace (root only).
    import subprocess
    import sys

    mnt = tmp_path / "mnt"
    mnt.mkdir()
    code = (
        "import errno, bagcache\n"
        "try:\n"
        f"    bagcache.LoadIt({str(mnt / 'r')!r}, lambda: iter([b'a']), serializer='raw')\n"
        "except OSError as e:\n"
        "    print('ENOSPC' if e.errno == errno.ENOSPC else 'errno %s' % e.errno)\n"
    )
    script = (
        f"mount -t tmpfs -o size=2m tmpfs {mnt} || exit 77\n"
        f"dd if=/dev/zero of={mnt}/fill bs=4k 2>/dev/null\n"
        f"dd if=/dev/zero of={mnt}/fill2 bs=1 2>/dev/null\n"
        f'exec "$0" -c "$1"\n'
    )
    try:
        r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                            script, sys.executable, code],
                           capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        pytest.skip("no unshare(1)")
    if r.returncode == 77 or "unshare failed" in r.stderr or "Operation not permitted" in r.stderr:
        pytest.skip("mounting a tmpfs is not permitted here (needs root; CI runs as root)")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "ENOSPC\n"


def test_shard_length_the_format_cannot_hold(tmp_path):
    # Issue 14 item 10: metadata.json holds the shard length as a signed
    # 64-bit JSON integer.  2**63 used to be written as -2**63 (the root
    # refused for good) and 2**64 silently became 0; both are refused
    # before anything is written, and 2**63 - 1 works.
    root = tmp_path / "r"
    for bad in (2**63, 2**64, 2**70, "17179869184gb"):
        with pytest.raises(ValueError, match="max_shard_length"):
            LoadIt(str(root), lambda: iter([b"a"]), serializer="raw", max_shard_length=bad)
        assert not root.exists()
    loader = LoadIt(str(root), lambda: iter([b"a", b"b"]), serializer="raw",
                    max_shard_length=2**63 - 1)
    assert [loader[0], loader[1]] == [b"a", b"b"] and len(loader) == 2
    loader.close()
    again = LoadIt(str(root), serializer="raw")
    assert again.stats()["shard_records"] == 2**63 - 1 and again[1] == b"b"
    again.close()


def test_options(tmp_path):
    with pytest.raises(ValueError):
        LoadIt(str(tmp_path / "a"), Source(5), max_workers=3)
    for bad in ("1.5.2mb", "1mbb", "mb", "0mb"):
        with pytest.raises(ValueError):
            LoadIt(str(tmp_path / "a"), Source(5), max_shard_length=bad)
    with pytest.raises(ValueError, match="compression"):
        LoadIt(str(tmp_path / "a"), Source(5), compression="gzip")
    with pytest.raises(TypeError, match="only once"):
        LoadIt(str(tmp_path / "a"), iter(range(5)))
    # "64MB" like loadit; a list is accepted as a re-iterable source.
    loader = LoadIt(str(tmp_path / "b"), list(range(40)), max_shard_length="1KB")
    assert list(loader) == list(range(40)) and loader.shards.max_shard_length > 1
    z = LoadIt(str(tmp_path / "z"), Source(100), max_shard_length=30, compression="zstd",
               mode=0o600)
    assert list(z) == model(100)
    files = sorted(os.listdir(tmp_path / "z" / "shards"))
    assert files == ["0.30.bagz", "30.60.bagz", "60.90.bagz", "90.100.bagz"]
    assert oct(os.stat(tmp_path / "z" / "shards" / files[0]).st_mode & 0o777) == "0o600"
    # A shard is a standard Bagz file of pickles.
    shard = bagcache.Reader(str(tmp_path / "z" / "shards" / files[1]))
    assert [pickle.loads(r) for r in shard] == model(100)[30:60]


def test_loadit_internals(tmp_path):
    loader = LoadIt(str(tmp_path), Source(100), max_shard_length=16, max_workers=4,
                    iterator_thread_safe=True, preload_fn=None)
    assert loader.max_workers == 4 and loader.shards.max_shard_length == 16
    for i in range(0, 16 * 3, 16):
        loader[i]
    assert loader.shards._cache_miss_count == 3
    infos = sorted(loader.shards.get_all_shards(), key=lambda s: s.start)
    assert [(s.start, s.end) for s in infos] == [(0, 16), (16, 32), (32, 48)]
    assert all(os.path.getsize(s.path) == s.size for s in infos)
    assert loader.shards.size() == sum(s.size for s in infos)
    loader.shards.observer.unschedule_all()
    loader.shards.observer.stop()
    loader.shards.observer.join()
    assert len(loader) == 100
    loader.finalize()  # the length is final already: nothing changes
    assert len(loader) == 100 and loader[99] == item(99)


def test_preload_policies(tmp_path):
    msl = 10
    calls = []

    def my_preload(loader, idx):
        calls.append(idx)
        return [[idx + 3 * msl]]  # loadit's format: lists of indices

    # (Seekable: a fill of shard 3 keeps nothing on its way.)
    loader = LoadIt(str(tmp_path / "a"), Seekable(200), max_shard_length=msl,
                    preload_fn=my_preload)
    assert loader[5] == item(5)
    deadline = time.time() + 10
    while loader.stats()["shards_present"] < 2 and time.time() < deadline:
        time.sleep(0.01)
    assert calls == [0]  # called once per shard opened, with its first index
    assert [s["start"] for s in loader.shards()] == [0, 30]
    assert loader[15] == item(15)
    deadline = time.time() + 10
    while loader.stats()["shards_present"] < 4 and time.time() < deadline:
        time.sleep(0.01)
    assert calls == [0, 10] and [s["start"] for s in loader.shards()] == [0, 10, 30, 40]
    loader.preload_fn = None  # loadit's tests reassign it
    loader[100]
    time.sleep(0.1)
    assert [s["start"] for s in loader.shards()] == [0, 10, 30, 40, 100] and calls == [0, 10]

    default = LoadIt(str(tmp_path / "b"), Source(200), max_shard_length=msl)
    default[0]  # the next shard follows in the background
    deadline = time.time() + 10
    while default.stats()["shards_present"] < 2 and time.time() < deadline:
        time.sleep(0.01)
    assert [s["start"] for s in default.shards()] == [0, 10]
    assert bagcache.preload_next_shard(default, 25) == [[30]]


# ---- threads, views, pickling ---------------------------------------------------------


def test_threads_share_one_loader(tmp_path):
    n = 2000
    loader = LoadIt(str(tmp_path), Source(n), max_shard_length=50, memory_limit=None)
    failures = []

    def work(seed):
        rng = random.Random(seed)
        try:
            for _ in range(300):
                i = rng.randrange(-n, n)
                if loader[i] != item(i % n):
                    failures.append(i)
            if seed == 0 and list(loader) != model(n):
                failures.append("iteration")
            v = loader[seed::7]
            if list(v) != model(n)[seed::7]:
                failures.append(("view", seed))
        except Exception as e:  # reported below
            failures.append(repr(e))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert loader.stats()["passes_opened"] >= 1


SLICES = [slice(None), slice(3, 70), slice(5, None, 4), slice(None, None, -1),
          slice(-10, None), slice(-30, -5, 3), slice(80, 10, -7), slice(150, 200),
          slice(None, 0), slice(5, 0), slice(35, 1000), slice(-1000, 4), slice(None, None, -9)]


def test_views_match_a_list_model(tmp_path):
    np = pytest.importorskip("numpy")
    n = 120
    ref = model(n)
    rng = random.Random(11)
    loader = LoadIt(str(tmp_path), Source(n), max_shard_length=16)
    # Lazy views built before the length is known.
    lazy = loader[5:50:2]
    assert loader._known_length() == (0, False)
    assert list(lazy) == ref[5:50:2] and len(lazy) == len(ref[5:50:2])
    for s in SLICES:
        v = loader[s]
        m = ref[s]
        assert len(v) == len(m), s
        assert list(v) == m, s
        for s2 in (slice(None, None, -1), slice(1, None, 2), slice(-3, None)):
            assert list(v[s2]) == m[s2], (s, s2)
        if m:
            assert v[0] == m[0] and v[-1] == m[-1]
    for _ in range(40):
        idx = [rng.randrange(-n, n) for _ in range(rng.randrange(0, 20))]
        for key in (idx, tuple(idx), np.array(idx, dtype=np.int64), np.array(idx, dtype=np.int32)):
            v = loader[key]
            m = [ref[i] for i in idx]
            assert len(v) == len(m) and list(v) == m
            assert v.read_indices(range(len(m))) == m
            if m:
                j = rng.randrange(len(m))
                assert v[j] == m[j] and v[j - len(m)] == m[j]
                sub = v[1::2]
                assert list(sub) == m[1::2]
                again = sub[[0, -1]] if len(m[1::2]) else None
                if again is not None:
                    assert list(again) == [m[1::2][0], m[1::2][-1]]
    assert list(loader[3, 4]) == [ref[3], ref[4]]  # tuple indexing, as loadit
    assert list(loader[range(10, 0, -3)]) == [ref[i] for i in range(10, 0, -3)]
    with pytest.raises(IndexError):
        loader[[0, n]][1]
    with pytest.raises(IndexError):
        loader[10:20][10]
    with pytest.raises(TypeError):
        loader[1.5]
    with pytest.raises(TypeError):
        loader["abc"]
    with pytest.raises(ValueError):
        loader[::0]
    assert isinstance(loader[1:3], bagcache.LoadItView)
    assert bagcache.LoadItView.__name__ in repr(loader[1:3])
    assert loader.index(item(7)) == 7 and item(8) in loader and loader.count(item(9)) == 1


def test_pickling_round_trip(tmp_path):
    n = 90
    loader = LoadIt(str(tmp_path / "a"), Source(n), max_shard_length=16)
    assert loader[3] == item(3)
    copy = pickle.loads(pickle.dumps(loader))
    assert copy.root_dir == loader.root_dir and list(copy) == model(n)
    assert copy.preload_fn is bagcache.preload_next_shard
    loader.preload_fn = None
    assert pickle.loads(pickle.dumps(loader)).preload_fn is None
    views = [loader[10:40:3], loader[[5, -1, 7]], loader[::-1][5:20], loader[2:][[0, 3]][::-1]]
    for v in views:
        w = pickle.loads(pickle.dumps(v))
        assert type(w) is bagcache.LoadItView and list(w) == list(v)
    # An unpicklable create_iter: the copy reads what is cached.
    lam = LoadIt(str(tmp_path / "b"), lambda: iter(range(50)), max_shard_length=10,
                 preload_fn=None)
    assert lam[15] == 15
    with pytest.warns(bagcache.CacheWarning, match="cannot be pickled"):
        ro = pickle.loads(pickle.dumps(lam))
    assert ro[12] == 12
    with pytest.raises(bagcache.NotCachedError):
        ro[30]


def test_bool_empty_and_cycles(tmp_path):
    src = Source(500)
    loader = LoadIt(str(tmp_path / "a"), src, max_shard_length=10, preload_fn=None)
    assert bool(loader) and loader.stats()["shards_present"] == 1  # no drain
    assert len(loader[[]]) == 0 and list(loader[[]]) == [] and not loader[[]]
    assert not loader[600:] and list(loader[600:]) == []
    empty = LoadIt(str(tmp_path / "e"), lambda: iter(()), max_shard_length=10)
    assert not empty and len(empty) == 0 and list(empty) == []
    with pytest.raises(IndexError):
        empty[0]

    class Dataset:  # create_iter is a bound method: a reference cycle
        def __init__(self, root):
            self.loader = LoadIt(root, self.records, max_shard_length=10)

        def records(self):
            return iter(range(30))

    ds = Dataset(str(tmp_path / "d"))
    assert ds.loader[25] == 25
    ref = weakref.ref(ds.loader)
    core = weakref.ref(ds.loader._core)
    del ds
    gc.collect()
    assert ref() is None and core() is None
    assert LoadIt(str(tmp_path / "d"))[25] == 25  # closed cleanly, data kept


def _collecting_numbers(n, collect_at, go):
    for i in range(n):
        if i == collect_at:
            go.wait(10)
            gc.collect()  # runs in the fill worker that called next()
        yield i


def test_loader_collected_inside_its_own_fill(tmp_path):
    # A loader in a reference cycle, found garbage by a collection that runs
    # in its own background fill: its teardown must not close the cache
    # from inside that fill (a helper does it), and the source's objects
    # must not be used once the collector may clear them.
    go = threading.Event()

    class Dataset:
        def __init__(self, root):
            self.loader = LoadIt(root, self.records, max_shard_length=10,
                                 preload_all_async=True)

        def records(self):
            return _collecting_numbers(300, 150, go)

    ds = Dataset(str(tmp_path))
    collected_in = []
    ref = weakref.ref(ds.loader, lambda r: collected_in.append(threading.get_ident()))
    del ds
    go.set()
    deadline = time.time() + 20
    while not collected_in and time.time() < deadline:  # the callback comes last
        time.sleep(0.01)
    assert ref() is None
    assert collected_in and collected_in[0] != threading.get_ident()  # in the worker
    reopened = LoadIt(str(tmp_path), lambda: iter(range(300)), max_shard_length=10)
    assert list(reopened) == list(range(300))


# ---- Ctrl-C ---------------------------------------------------------------------------


def interrupt_after(seconds):
    """Sends SIGINT to this process after `seconds` (KeyboardInterrupt in
    the main thread); returns the timer."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    t = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT))
    t.start()
    return t


def assert_consistent_after_interrupt(root, n):
    """A reopen (fast iterator) reads correct data, at both ends too, and
    the abandoned fill left no scratch file (once the reopened loader's own
    background fills are stopped)."""
    with LoadIt(root, Source(n), max_shard_length=200) as fresh:
        assert list(fresh) == model(n)
        assert [fresh[i] for i in (n - 1, 0)] == [item(n - 1), item(0)]
    assert os.listdir(os.path.join(root, "scratch")) == []


@pytest.mark.parametrize("how", ["item", "iterate", "len", "wait", "prefetched"])
def test_ctrl_c_interrupts_a_slow_fill(tmp_path, how):
    root = str(tmp_path / "c")
    n = 400
    # A slow shard takes 4 s, the whole source 8 s.  "prefetched": shard 0
    # is quick, and reading it starts a background fill of shard 1, which
    # the main thread then waits for.
    slow = Source(n, delay=0.02, slow_from=200 if how == "prefetched" else 0)
    loader = LoadIt(root, slow, max_shard_length=200)
    if how == "prefetched":
        assert loader[0] == item(0)
        time.sleep(0.1)
    start = time.time()
    timer = interrupt_after(0.3)
    try:
        with pytest.raises(KeyboardInterrupt):
            if how in ("item", "prefetched"):
                loader[250]
            elif how == "iterate":
                for _ in loader:
                    pass
            elif how == "len":
                len(loader)
            else:
                loader.wait_until_all_cached()
    finally:
        timer.cancel()
    assert time.time() - start < 2.0  # promptly, not after the fill
    loader.close()
    assert_consistent_after_interrupt(root, n)


@pytest.mark.parametrize("how", ["item", "iterate"])
def test_ctrl_c_interrupts_a_view_waiting_for_a_fill(tmp_path, how):
    root = str(tmp_path / "c")
    n = 400
    loader = LoadIt(root, Source(n, delay=0.02), max_shard_length=200)
    # The view's first element is the loader's last: filling its shard
    # takes the whole slow source (8 s).
    view = bagcache.SequenceView(loader, list(range(n))[::-1])
    start = time.time()
    timer = interrupt_after(0.3)
    try:
        with pytest.raises(KeyboardInterrupt):
            if how == "item":
                view[0]  # filled in this thread: the iterator sees the signal
            else:
                for _ in view:  # read ahead by workers: the wait is interruptible
                    pass
    finally:
        timer.cancel()
    assert time.time() - start < 2.0  # promptly, not after the fill
    loader.close()
    assert_consistent_after_interrupt(root, n)


@pytest.mark.parametrize("how", ["view item", "view chunk", "loader item"])
def test_ctrl_c_interrupts_a_wait_for_another_threads_fill(tmp_path, how):
    # Reading shard 0 (quick) starts a background fill of shard 1 (4 s) on a
    # prefetch worker; the main thread then needs a record of shard 1.  It
    # fills nothing itself: it waits for the worker, and Ctrl-C must end
    # that wait too.
    root = str(tmp_path / "c")
    n = 400
    loader = LoadIt(root, Source(n, delay=0.02, slow_from=200), max_shard_length=200)
    assert loader[0] == item(0)
    time.sleep(0.1)
    if how == "view item":
        view = bagcache.SequenceView(loader, list(range(n)))
    elif how == "view chunk":  # Python code in the tree: chunk reads
        view = bagcache.SequenceView(loader, lambda k: k + 250, 100)
    start = time.time()
    timer = interrupt_after(0.3)
    try:
        with pytest.raises(KeyboardInterrupt):
            if how == "view item":
                view[250]
            elif how == "view chunk":
                for _ in view:
                    pass
            else:
                loader[250]
    finally:
        timer.cancel()
    assert time.time() - start < 2.0  # promptly, not after the fill
    loader.close()
    assert_consistent_after_interrupt(root, n)


NO_HELPER_SCRIPT = """
import os, signal, sys, threading, time
sys.path.insert(0, sys.argv[2])
import bagcache
from loadit_helpers import Source, item

def tasks():
    return len(os.listdir("/proc/self/task"))

opened = []

def open_and_read():  # off the main thread: its calls need no interrupt
    ld = bagcache.LoadIt(sys.argv[1], Source(400, delay=0.02, slow_from=200),
                         max_shard_length=200)
    assert ld[0] == item(0)  # a worker starts filling shard 1 (4 s)
    opened.append(ld)

t = threading.Thread(target=open_and_read)
t.start()
t.join()
loader = opened[0]
time.sleep(0.1)
before = tasks()
signal.signal(signal.SIGINT, signal.default_int_handler)
threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
start = time.time()
try:
    loader[250]  # waits for the worker's fill
    print("not interrupted")
except KeyboardInterrupt:
    took = time.time() - start
    deadline = time.time() + 5
    while tasks() > before and time.time() < deadline:  # the timer's thread ends
        time.sleep(0.01)
    print("interrupted", took < 2.0, tasks() - before)
loader.close()
"""


def test_ctrl_c_stops_a_wait_without_a_helper_thread(tmp_path):
    # The wait runs in the main thread itself, which the interrupt handler
    # lets run the signal handler: no thread is started for it.  (In a
    # fresh process, so no thread started earlier could serve.)
    script = tmp_path / "wait.py"
    script.write_text(NO_HELPER_SCRIPT)
    helpers = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "c"), helpers],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["interrupted", "True", "0"]


def test_ctrl_c_interrupts_a_wait_for_a_shard_read_before(tmp_path):
    # loader[i] reads a shard it read lately in place; if the shard was
    # evicted since and another thread is filling it again, that read must
    # not wait where Ctrl-C cannot stop it either.
    root = str(tmp_path / "c")
    flag = str(tmp_path / "slow")
    n = 800
    source = Source(n, delay=0.02, slow_flag=flag)
    with LoadIt(root, source, max_shard_length=200, preload_fn=None) as first:
        assert first[0] == item(0)
    assert os.listdir(os.path.join(root, "shards")) == ["0.200.bag"]
    one_shard = shard_bytes(root)
    # Three shards fit (the smallest workable limit with one fill worker).
    loader = LoadIt(root, source, max_shard_length=200, preload_fn=None,
                    memory_limit=3 * one_shard + one_shard // 2, publish_behind=False)
    assert [loader[i] for i in (0, 250, 450, 650)] == [item(i) for i in (0, 250, 450, 650)]
    # Shard 3 evicted shard 0, read least lately.
    assert sorted(os.listdir(os.path.join(root, "shards"))) == [
        "200.400.bag", "400.600.bag", "600.800.bag"]
    open(flag, "w").close()  # from now on a shard takes 4 s
    other = threading.Thread(target=lambda: loader[5])
    other.start()
    deadline = time.time() + 5
    while not os.listdir(os.path.join(root, "scratch")):
        assert time.time() < deadline, "the other thread's fill did not start"
        time.sleep(0.01)
    start = time.time()
    timer = interrupt_after(0.3)
    try:
        with pytest.raises(KeyboardInterrupt):
            loader[0]
    finally:
        timer.cancel()
    assert time.time() - start < 2.0  # promptly, not after the other fill
    os.unlink(flag)
    other.join()
    loader.close()
    assert_consistent_after_interrupt(root, n)


# ---- API surface ------------------------------------------------------------------------


def test_public_api_documented_and_stubbed():
    stub = pathlib.Path(bagcache.__file__).with_name("__init__.pyi")
    tree = ast.parse(stub.read_text(encoding="utf-8"))
    members = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            members[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
            members[node.name] |= {n.target.id for n in node.body
                                   if isinstance(n, ast.AnnAssign)}
    for cls in (bagcache.LoadIt, bagcache.LoadItView):
        assert cls.__doc__
        public = {n for n in dir(cls) if not n.startswith("_")} - {"count", "index"}
        for name in public:
            assert getattr(cls, name).__doc__, f"{cls.__name__}.{name}"
        assert public <= members[cls.__name__], sorted(public - members[cls.__name__])
    for name in ("NotCachedError", "SourceError", "NondeterministicError"):
        assert getattr(bagcache, name).__doc__ and name in members
    assert issubclass(bagcache.NotCachedError, IndexError)
