"""DataLoader's C workers (_bagcache._Loader, python/src/train/loader.c):
when they are used, batches bit-identical to the Python workers' and to
numpy on the sampler's indices (every mode, drop_last, rank, world size),
resume across workers and prefetch, close while workers are blocked,
errors reaching the consumer as themselves, and pooled batch memory never
handed to two live batches.  Run under ThreadSanitizer too
(make check-python-threads)."""

import gc
import threading
import time

import pytest

import bagcache
from bagcache import ARDataset, DataLoader, LoadIt, NPDataset, Sampler, converter
from bagcache import train as _train

np = pytest.importorskip("numpy")

N = 61  # not a multiple of any batch or step below


@pytest.fixture(params=["zstd", "none"])
def data(tmp_path, request):
    a = np.random.default_rng(7).integers(0, 256, size=(N, 3, 5), dtype=np.uint8)
    converter(a, tmp_path / "d", blocksize=9, compression=request.param)
    labels = (np.arange(N) * 7 - 100).astype(np.int16)
    return a, labels, tmp_path / "d"


def is_c(loader):
    return isinstance(loader._pipe, _train._CPipeline)


def identity(batch):
    return batch


def test_when_the_c_workers_are_used(data):
    a, labels, d = data
    with DataLoader(ARDataset(d), NPDataset(labels), batch_size=4) as ld:
        assert is_c(ld)
    with DataLoader(ARDataset(d), None, batch_size=4, num_workers=1) as ld:
        assert is_c(ld)
    with DataLoader(NPDataset(a), NPDataset(labels), batch_size=4) as ld:
        assert is_c(ld)  # numpy rows are gathered by the C threads too
    # A transform, a collate, no workers, a Python dataset, a strided
    # array, raw records that are Python objects: the Python workers.
    for kw in (dict(transform=identity), dict(num_workers=0)):
        with DataLoader(ARDataset(d), NPDataset(labels), batch_size=4, **kw) as ld:
            assert not is_c(ld)
    with DataLoader(NPDataset(a[:, ::2]), None, batch_size=4) as ld:
        assert not is_c(ld)
        np.testing.assert_array_equal(next(ld)["data"].shape, (4, 2, 5))
    with DataLoader(ARDataset.from_sequence([b"x" * 15] * N, np.uint8, (3, 5)), None,
                    batch_size=4) as ld:
        assert not is_c(ld)
        with pytest.raises(TypeError, match="collate"):
            next(ld)


def batches(loader, k):
    out = []
    for _ in range(k):
        try:
            out.append(next(loader))
        except StopIteration:
            break
    return out


@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("world", [1, 3])
@pytest.mark.parametrize("num_epochs", [None, 2])
def test_batches_equal_the_python_workers_and_numpy(data, mode, drop_last, world,
                                                    num_epochs):
    a, labels, d = data
    kw = dict(batch_size=5, mode=mode, seed=11, drop_last=drop_last, world_size=world,
              num_epochs=num_epochs)
    for rank in range(world):
        want_idx = [i.astype(np.int64) for i in
                    batches(Sampler(N, 5, mode, 11, rank=rank, world_size=world,
                                    drop_last=drop_last, num_epochs=num_epochs), 40)]
        with DataLoader(ARDataset(d), NPDataset(labels), num_workers=3, prefetch_size=2,
                        rank=rank, **kw) as c_loader:
            assert is_c(c_loader)
            got = batches(c_loader, 40)
            c_state = c_loader.state_dict()
        with DataLoader(ARDataset(d), NPDataset(labels), num_workers=3, prefetch_size=2,
                        rank=rank, transform=identity, **kw) as py_loader:
            assert not is_c(py_loader)
            ref = batches(py_loader, 40)
            assert py_loader.state_dict() == c_state
        assert len(got) == len(ref) == len(want_idx)
        for g, r, idx in zip(got, ref, want_idx):
            for key, arr in (("data", a), ("label", labels)):
                assert g[key].dtype == r[key].dtype == arr.dtype
                assert g[key].shape == r[key].shape == (len(idx),) + arr.shape[1:]
                assert g[key].tobytes() == r[key].tobytes() == arr[idx].tobytes()


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_resume_equals_uninterrupted_across_workers_and_prefetch(data, mode):
    a, labels, d = data
    kw = dict(batch_size=6, mode=mode, seed=5, num_epochs=3)
    with DataLoader(ARDataset(d), NPDataset(labels), num_workers=2, **kw) as ld:
        full = [b["data"].tobytes() + b["label"].tobytes() for b in ld]
    for cut in range(0, len(full) + 1, 3):
        with DataLoader(ARDataset(d), NPDataset(labels), num_workers=4, prefetch_size=7,
                        **kw) as first:
            head = [b["data"].tobytes() + b["label"].tobytes() for b in batches(first, cut)]
            state = first.state_dict()
        with DataLoader(ARDataset(d), NPDataset(labels), num_workers=1, prefetch_size=1,
                        **dict(kw, seed=99)) as second:
            assert is_c(second)
            next(second)
            second.load_state_dict(state)
            rest = [b["data"].tobytes() + b["label"].tobytes() for b in second]
        assert head + rest == full


def wait_until(pred, timeout=20.0):
    for _ in range(int(timeout / 0.005)):
        if pred():
            return True
        threading.Event().wait(0.005)
    return False


def test_close_stops_workers_blocked_on_a_full_queue(data):
    a, labels, d = data
    loader = DataLoader(ARDataset(d), NPDataset(labels), num_workers=4, batch_size=2,
                        prefetch_size=2)
    c = loader._pipe.loader
    next(loader)
    # The queue fills: prefetch_size + num_workers batches ready (loaderx's
    # two queued and one held by each worker), every worker waiting for room.
    assert wait_until(lambda: c.ready == 2 + 4)
    assert not wait_until(lambda: c.ready > 6, timeout=0.2)
    assert c.running == 4
    loader.close()
    assert c.running == 0 and c.ready == 0
    with pytest.raises(ValueError, match="closed"):
        next(loader)
    loader.close()
    with DataLoader(ARDataset(d), NPDataset(labels), num_workers=3, batch_size=2) as ld:
        c = ld._pipe.loader
        next(ld)
    assert c.running == 0
    # An abandoned loader stops its threads when collected.
    ld = DataLoader(ARDataset(d), NPDataset(labels), num_workers=2, batch_size=2)
    c = ld._pipe.loader
    next(ld)
    del ld
    gc.collect()
    assert c.running == 0


def loader_over_a_fill(tmp_path, gen, length, shard, row_bytes):
    """(cache, loader, its _Loader): one C worker reading batches of 25
    rows in order from a raw LoadIt of gen, with no prefetching, so that
    the worker's own read runs the fills."""
    cache = LoadIt(gen, root_dir=str(tmp_path / "c"), serializer="raw",
                   max_shard_length=shard, length=length, preload_fn=None)
    ds = ARDataset.from_sequence(cache, np.uint8, (row_bytes,))
    loader = DataLoader(ds, None, num_workers=1, batch_size=25, mode=0, prefetch_size=1)
    assert is_c(loader)
    return cache, loader, loader._pipe.loader


def test_close_wakes_a_consumer_whose_batch_is_stuck_in_a_read(tmp_path):
    # The worker's read waits in a LoadIt fill (the source blocks at record
    # 20 until the gate opens); the consumer waits for that batch.  close()
    # from another thread ends the consumer's wait at once ("closed"),
    # before the read finishes; close() itself returns once the worker has
    # finished its batch and left.
    gate, blocked = threading.Event(), threading.Event()

    def gen():
        for k in range(40):
            if k == 20:
                blocked.set()
                gate.wait(60)
            yield bytes([k]) * 4

    # The first batch (records 0-24) needs record 20, whatever the fills do.
    cache, loader, c = loader_over_a_fill(tmp_path, gen, 40, 10, 4)
    result = []

    def consume():
        try:
            result.append(next(loader))
        except ValueError as e:
            result.append(e)

    consumer = threading.Thread(target=consume)
    consumer.start()
    assert blocked.wait(60)  # the worker is in its read
    closer = threading.Thread(target=loader.close)
    closer.start()
    consumer.join(30)
    try:
        assert not consumer.is_alive()
        assert len(result) == 1 and "closed" in str(result[0])
        assert closer.is_alive()  # the worker is still in its read
    finally:
        gate.set()
        closer.join(60)
    assert not closer.is_alive() and c.running == 0
    cache.close()


def test_close_abandons_a_fill_a_worker_runs(tmp_path):
    # A slow source (a record every 10 ms, 300 to the shard): the worker's
    # read runs the shard's fill.  close() does not wait for the 3 s fill to
    # end: the worker's interrupt handler abandons it between records, so
    # close() returns while the source has produced a fraction of the
    # shard, and the records read later are still right (the shard is
    # filled again by the next read).
    produced, started, slow = [], threading.Event(), threading.Event()
    slow.set()

    def gen():
        for k in range(300):
            if k == 5:
                started.set()
            produced.append(k)
            if slow.is_set():  # (the refill below goes fast)
                time.sleep(0.01)
            yield k.to_bytes(2, "little") * 2

    cache, loader, c = loader_over_a_fill(tmp_path, gen, 300, 300, 4)
    assert started.wait(60)  # the worker is in the fill
    loader.close()
    at_close = len(produced)
    slow.clear()
    assert c.running == 0
    assert at_close < 300, "close() waited for the whole fill"
    assert cache[299] == (299).to_bytes(2, "little") * 2
    assert len(produced) >= at_close + 300  # filled again from record 0
    cache.close()


def test_a_loader_dropped_inside_its_own_worker(tmp_path):
    # The last reference to a loader dies in Python code its own C worker
    # runs (a LoadIt's source, during a fill): the workers stop, nothing
    # is freed under the worker (the loader's C part is left allocated),
    # and the process goes on.
    holder, where = [], []
    ready, dropped = threading.Event(), threading.Event()

    def gen():
        for k in range(40):
            if k == 0:
                ready.wait(60)  # the loader is in the holder
            if k == 20:
                where.append(threading.get_ident())
                holder.clear()  # the loader's last reference
                gc.collect()
                dropped.set()
            yield bytes([k]) * 4

    cache = LoadIt(gen, root_dir=str(tmp_path / "c"), serializer="raw", max_shard_length=10,
                   length=40, preload_fn=None)
    ds = ARDataset.from_sequence(cache, np.uint8, (4,))
    holder.append(DataLoader(ds, None, num_workers=1, batch_size=25, mode=0))
    assert is_c(holder[0])
    ready.set()
    assert dropped.wait(60)
    assert where != [threading.get_ident()]  # dropped in the worker
    gc.collect()
    assert ds.__getitems__([39, 0]).tolist() == [[39] * 4, [0] * 4]
    cache.close()


class Boom(Exception):
    pass


def test_a_source_exception_reaches_the_consumer_as_itself(tmp_path):
    err = Boom("record 25")

    def gen():
        for k in range(40):
            if k == 25:
                raise err
            yield bytes([k]) * 8

    cache = LoadIt(gen, root_dir=str(tmp_path / "c"), serializer="raw", max_shard_length=10,
                   length=40)
    ds = ARDataset.from_sequence(cache, np.uint8, (8,))
    with DataLoader(ds, None, num_workers=2, batch_size=10, mode=0) as loader:
        assert is_c(loader)
        assert next(loader)["data"][:, 0].tolist() == list(range(10))
        assert next(loader)["data"][:, 0].tolist() == list(range(10, 20))
        state = loader.state_dict()
        with pytest.raises(Boom) as e:
            next(loader)
        assert e.value is err
        with pytest.raises(Boom):  # it stays raised, as the Python workers'
            next(loader)
        assert loader.state_dict() == state
    cache.close()


def test_read_errors_reach_the_consumer(tmp_path):
    # A record that is not one row, and a damaged zstd frame: each at its
    # batch, as the Python workers raise them.
    with bagcache.Writer(str(tmp_path / "v.bag")) as w:
        for k in range(12):
            w.write(bytes([k]) * (6 if k != 7 else 5))
    ds = ARDataset.from_sequence(bagcache.Reader(str(tmp_path / "v.bag")), np.uint8, (6,))
    with DataLoader(ds, None, num_workers=2, batch_size=4, mode=0) as loader:
        assert is_c(loader)
        next(loader)
        with pytest.raises(ValueError, match=r"record 7 \(indices\[3\]\) has 5 bytes.*collate"):
            next(loader)
    path = str(tmp_path / "z.bagz")
    with bagcache.Writer(path, bagcache.Writer.Options(
            compression=bagcache.CompressionZstd())) as w:
        for k in range(12):
            w.write(bytes([k]) * 6)
    with open(path, "rb") as f:
        raw = bytearray(f.read())
    at = raw.find(b"\x28\xb5\x2f\xfd", 1)  # record 1's frame: its magic number
    raw[raw.find(b"\x28\xb5\x2f\xfd", at + 1)] ^= 0xFF  # record 2's, damaged
    with open(path, "wb") as f:
        f.write(raw)
    r = bagcache.Reader(path)
    with DataLoader(ARDataset.from_sequence(r, np.uint8, (6,)), None, num_workers=2,
                    batch_size=4, mode=0) as loader:
        with pytest.raises(bagcache.CorruptError, match=r"indices\[2\]"):
            next(loader)


@pytest.mark.parametrize("compression", ["zstd", "none"])
def test_large_batches_are_read_in_parts(tmp_path, compression):
    # Rows of 4 KiB: a worker reads a batch of 1,000 in parts of 256 rows
    # (1 MiB), looking between parts whether the loader stopped.  The rows
    # are numpy's, and a record of the wrong size in the third part is
    # named by its position in the batch, not in its part.
    a = np.random.default_rng(3).integers(0, 256, size=(1200, 4096), dtype=np.uint8)
    converter(a, tmp_path / "d", compression=compression)
    with DataLoader(ARDataset(tmp_path / "d"), None, num_workers=2, batch_size=1000,
                    mode=1, seed=5) as loader:
        assert is_c(loader)
        want = Sampler(1200, 1000, 1, 5)
        for _ in range(3):
            np.testing.assert_array_equal(next(loader)["data"], a[next(want).astype(np.int64)])
    path = str(tmp_path / "v.bag")
    with bagcache.Writer(path) as w:
        for k in range(1200):
            w.write(a[k].tobytes()[: 4095 if k == 700 else 4096])
    ds = ARDataset.from_sequence(bagcache.Reader(path), np.uint8, (4096,))
    with DataLoader(ds, None, num_workers=1, batch_size=1000, mode=0) as loader:
        with pytest.raises(ValueError, match=r"record 700 \(indices\[700\]\) has 4095 bytes"):
            next(loader)


def test_pooled_memory_is_never_handed_to_two_live_batches(data):
    a, labels, d = data
    with DataLoader(ARDataset(d), NPDataset(labels), num_workers=4, batch_size=4,
                    prefetch_size=3, mode=1, seed=2) as loader:
        want = [i.astype(np.int64) for i in batches(Sampler(N, 4, 1, 2), 60)]
        kept = []
        for k in range(60):
            b = next(loader)
            if k % 2:
                kept.append((k, b["data"][1:], b["label"]))  # views keep the batch
            del b
        # Every batch kept still holds its own rows: none was reused.
        addresses = set()
        for k, data_view, label in kept:
            np.testing.assert_array_equal(data_view, a[want[k]][1:])
            np.testing.assert_array_equal(label, labels[want[k]])
            addresses.add(data_view.__array_interface__["data"][0])
        assert len(addresses) == len(kept)
        pool = loader._pools[0]
        free_before = pool.free
        del kept, data_view, label
        gc.collect()
        assert pool.free > free_before  # dropped batches come back


def test_numpy_rows_in_c(tmp_path):
    # An NPDataset from a .npy (memory-mapped) gathered by the C threads.
    a = np.random.default_rng(3).standard_normal((N, 2, 2)).astype(">f8")
    np.save(tmp_path / "x.npy", a)
    with DataLoader(NPDataset(tmp_path / "x.npy"), None, batch_size=7, mode=2, seed=1,
                    num_epochs=1) as loader:
        assert is_c(loader)
        got = list(loader)
    want = [i.astype(np.int64) for i in Sampler(N, 7, 2, 1, num_epochs=1)]
    assert len(got) == len(want)
    for g, idx in zip(got, want):
        assert g["data"].dtype == a.dtype
        assert g["data"].tobytes() == a[idx].tobytes()


def test_empty_rows_and_short_batches(tmp_path):
    a = np.zeros((10, 0), np.uint8)
    with DataLoader(NPDataset(a), NPDataset(np.arange(10)), batch_size=4, mode=0,
                    num_epochs=1) as loader:
        assert is_c(loader)
        got = list(loader)
    assert [g["data"].shape for g in got] == [(4, 0), (4, 0), (2, 0)]
    assert [g["label"].tolist() for g in got] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    # A rank with nothing left in the last step gets an empty batch.
    with DataLoader(NPDataset(np.arange(10)), None, batch_size=3, mode=2, world_size=4,
                    rank=3, num_epochs=1) as loader:
        sizes = [len(b["data"]) for b in loader]
    assert sizes == [len(i) for i in Sampler(10, 3, 2, 42, rank=3, world_size=4,
                                             num_epochs=1)]


def test_many_loaders_at_once(data):
    # Loaders on several threads at once, each its own order.
    a, labels, d = data
    errors = []

    def run(seed):
        try:
            want = [i.astype(np.int64) for i in batches(Sampler(N, 8, 1, seed), 25)]
            with DataLoader(ARDataset(d), NPDataset(labels), num_workers=2, batch_size=8,
                            seed=seed) as ld:
                for idx in want:
                    b = next(ld)
                    assert b["data"].tobytes() == a[idx].tobytes()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
