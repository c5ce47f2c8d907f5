"""DataLoader beyond loaderx: batches compared with numpy on the same
indices, order independent of the workers, resume, ranks, the C gather over
Readers, views and LoadIt, collate, close and errors."""

import threading
import time

import pytest

import bagcache
from bagcache import ARDataset, DataLoader, LoadIt, NPDataset, Sampler, converter

np = pytest.importorskip("numpy")

EPOCH = Sampler.Mode.EPOCH


@pytest.fixture
def data(tmp_path):
    a = np.random.default_rng(1).standard_normal((53, 4, 3)).astype(np.float32)
    converter(a, tmp_path / "d", blocksize=10)
    labels = np.arange(53) * 3
    return a, labels, tmp_path / "d"


def loader_threads():
    return [t for t in threading.enumerate() if t.name.startswith("bagcache-loader")]


def sampler_batches(n, b, mode, seed, **kw):
    return [x.astype(np.int64) for x in Sampler(n, b, mode, seed, **kw)]


@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("workers, prefetch", [(0, 1), (1, 1), (4, 2), (3, 8)])
def test_batches_match_numpy(data, mode, workers, prefetch):
    a, labels, d = data
    want = sampler_batches(53, 8, mode, 3, num_epochs=2)
    with DataLoader(ARDataset(d), NPDataset(labels), num_workers=workers, batch_size=8,
                    prefetch_size=prefetch, mode=mode, seed=3, num_epochs=2) as loader:
        assert len(loader) == len(want)
        got = list(loader)
    assert len(got) == len(want)
    for batch, idx in zip(got, want):
        assert batch["data"].shape == (len(idx), 4, 3) and batch["data"].dtype == np.float32
        np.testing.assert_array_equal(batch["data"], a[idx])
        np.testing.assert_array_equal(batch["label"], labels[idx])


def test_resume_equals_uninterrupted_at_every_cut(data):
    a, labels, d = data
    kw = dict(batch_size=7, mode=EPOCH, seed=12, num_epochs=2)
    with DataLoader(ARDataset(d), NPDataset(labels), num_workers=2, **kw) as loader:
        full = [b["label"].tolist() for b in loader]
    for cut in range(len(full) + 1):
        with DataLoader(ARDataset(d), NPDataset(labels), num_workers=3, prefetch_size=5,
                        **kw) as first:
            head = [next(first)["label"].tolist() for _ in range(cut)]
            state = first.state_dict()
        # Other workers, other prefetch depth; the seed comes from the state.
        with DataLoader(ARDataset(d), NPDataset(labels), num_workers=1, prefetch_size=1,
                        **dict(kw, seed=0)) as second:
            next(second)  # a batch of the old seed, then the state replaces it
            second.load_state_dict(state)
            assert head + [b["label"].tolist() for b in second] == full


def test_resume_across_world_size(data):
    """Two ranks, then three: every label of each epoch exactly once."""
    a, labels, d = data
    kw = dict(batch_size=4, mode=EPOCH, seed=8, num_epochs=1)
    two = [DataLoader(ARDataset(d), NPDataset(labels), num_workers=2, rank=r, world_size=2,
                      **kw) for r in range(2)]
    seen = []
    for _ in range(3):
        for ld in two:
            seen += next(ld)["label"].tolist()
    state = two[0].state_dict()
    assert state == two[1].state_dict() == {"mode": 2, "seed": 8, "epoch": 0, "consumed": 24}
    for ld in two:
        ld.close()
    three = [DataLoader(ARDataset(d), NPDataset(labels), num_workers=2, rank=r, world_size=3,
                        **kw) for r in range(3)]
    for ld in three:
        ld.load_state_dict(state)
        seen += [x for b in ld for x in b["label"].tolist()]
        ld.close()
    assert sorted(seen) == labels.tolist()


def test_gather_from_readers_views_and_loadit(tmp_path):
    a = np.arange(30 * 5, dtype=np.int32).reshape(30, 5)
    with bagcache.Writer(str(tmp_path / "r.bag")) as w:
        for row in a:
            w.write(row.tobytes())
    reader = bagcache.Reader(str(tmp_path / "r.bag"))
    idx = np.array([29, 0, 3, 3, 17])
    ds = ARDataset.from_sequence(reader, np.int32, (5,))
    np.testing.assert_array_equal(ds.__getitems__(idx), a[idx])
    # A view over the reader: positions through the view.
    view = bagcache.shuffle(reader, seed=4)
    perm = bagcache.chunk_shuffle_idx(None, 30, seed=4)
    np.testing.assert_array_equal(
        ARDataset.from_sequence(view, np.int32, (5,)).__getitems__(idx), a[perm[idx]])
    # A slice of a Reader is a Reader.
    np.testing.assert_array_equal(
        ARDataset.from_sequence(reader[10:20], "<i4", (5,)).__getitems__([0, 9]), a[[10, 19]])
    # Negative indices count from the end, as numpy.
    np.testing.assert_array_equal(ds.__getitems__([-1, -30]), a[[-1, -30]])
    with pytest.raises(IndexError):
        ds.__getitems__([30])
    # A LoadIt of raw records.
    cache = LoadIt(lambda: (row.tobytes() for row in a), root_dir=str(tmp_path / "c"),
                   serializer="raw", max_shard_length=8)
    got = ARDataset.from_sequence(cache, np.int32, (5,)).__getitems__(idx)
    np.testing.assert_array_equal(got, a[idx])
    cache.close()


def test_gather_wrong_sizes(tmp_path):
    with bagcache.Writer(str(tmp_path / "v.bag")) as w:
        for k in range(10):
            w.write(b"x" * (8 if k != 6 else 9))
    ds = ARDataset.from_sequence(bagcache.Reader(str(tmp_path / "v.bag")), np.int64)
    assert ds.__getitems__([0, 5]).shape == (2,)
    with pytest.raises(ValueError, match=r"record 6 \(indices\[1\]\) has 9 bytes, not the "
                       r"row size 8 \(variable-size records need a collate function\)"):
        ds.__getitems__([1, 6])
    # Python objects are no raw records.
    with pytest.raises(TypeError, match="collate"):
        ARDataset.from_sequence([b"x" * 8] * 3, np.int64).__getitems__([0])


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_gather_into_rows_exactly(tmp_path, compression):
    # Rows straight into the batch (bc_seq_read_into), at every parallelism,
    # over shards of a converter's output, through views, compared with
    # numpy; out-of-range and wrong sizes name the index as given.
    a = np.random.default_rng(5).integers(0, 256, size=(70, 6, 5), dtype=np.uint8)
    converter(a, tmp_path / "d", blocksize=16, compression=compression)
    ds = ARDataset(tmp_path / "d")
    idx = np.array([69, 0, 17, 17, 33, -1, -70, 48])
    for par in (0, 1, 2):
        np.testing.assert_array_equal(ds._gather(idx, par), a[idx])
    np.testing.assert_array_equal(ds.__getitems__(idx), a[idx])
    with pytest.raises(ValueError, match="max_parallelism"):
        ds._gather(idx, -1)
    with pytest.raises(IndexError, match=r"indices\[2\] = 70"):
        ds.__getitems__([1, 2, 70])
    view = bagcache.shuffle(ds._seq, seed=9)
    perm = bagcache.chunk_shuffle_idx(None, 70, seed=9)
    got = ARDataset.from_sequence(view, np.uint8, (6, 5)).__getitems__(idx)
    np.testing.assert_array_equal(got, a[perm[idx]])
    # Rows of another size: the view's own index and position are named.
    with pytest.raises(ValueError, match=r"record -3 \(indices\[0\]\) has 30 bytes, not the "
                       r"row size 10"):
        ARDataset.from_sequence(view, np.uint8, (10,)).__getitems__([-3, 5])
    ds.close()


def test_gather_wrong_sizes_in_a_loadit(tmp_path):
    rows = [bytes([k]) * (12 if k != 9 else 11) for k in range(20)]
    cache = LoadIt(lambda: iter(rows), root_dir=str(tmp_path / "c"), serializer="raw",
                   max_shard_length=8)
    ds = ARDataset.from_sequence(cache, np.uint8, (12,))
    np.testing.assert_array_equal(ds.__getitems__([19, 0, 8]),
                                  np.array([[19] * 12, [0] * 12, [8] * 12], np.uint8))
    with pytest.raises(ValueError, match=r"record 9 \(indices\[2\]\) has 11 bytes"):
        ds.__getitems__([0, 10, 9])
    cache.close()


def test_collate_for_variable_records_and_objects(tmp_path):
    items = [{"x": np.arange(k % 5), "y": k} for k in range(40)]
    cache = LoadIt(lambda: iter(items), root_dir=str(tmp_path / "c"), max_shard_length=16)

    def collate(batch):
        return np.array([it["y"] for it in batch])

    with DataLoader(cache, cache, num_workers=2, batch_size=6, mode=EPOCH, seed=1,
                    num_epochs=1, collate=collate) as loader:
        got = [b["data"].tolist() for b in loader]
    want = [i.tolist() for i in sampler_batches(40, 6, EPOCH, 1, num_epochs=1)]
    assert got == want
    with pytest.raises(TypeError, match="collate"):
        DataLoader(cache, None, batch_size=2)
    cache.close()
    # A Reader of variable-size records, collated into a padded array.
    with bagcache.Writer(str(tmp_path / "v.bag")) as w:
        for k in range(12):
            w.write(bytes(range(k)))

    def pad(recs):
        out = np.zeros((len(recs), 12), np.uint8)
        for i, r in enumerate(recs):
            out[i, : len(r)] = np.frombuffer(r, np.uint8)
        return out

    with DataLoader(bagcache.Reader(str(tmp_path / "v.bag")), batch_size=5, mode=0,
                    collate=pad, num_epochs=1) as loader:
        batches = list(loader)
    assert [b["data"].shape for b in batches] == [(5, 12), (5, 12), (2, 12)]
    assert batches[1]["data"][2].tolist() == list(range(7)) + [0] * 5


class Boom(Exception):
    pass


class Failing(NPDataset):
    def __init__(self, n, bad):
        super().__init__(np.arange(n))
        self.bad = bad

    def __getitems__(self, idxs):
        if self.bad in np.asarray(idxs).tolist():
            raise self.error
        return super().__getitems__(idxs)


@pytest.mark.parametrize("workers", [0, 1, 3])
def test_worker_exception_reaches_the_consumer_as_itself(workers):
    ds = Failing(20, bad=13)
    ds.error = Boom("thirteen")
    with DataLoader(ds, None, num_workers=workers, batch_size=4, mode=0) as loader:
        assert next(loader)["data"].tolist() == [0, 1, 2, 3]
        assert next(loader)["data"].tolist() == [4, 5, 6, 7]
        assert next(loader)["data"].tolist() == [8, 9, 10, 11]
        with pytest.raises(Boom) as e:
            next(loader)
        assert e.value is ds.error
        with pytest.raises(Boom):
            next(loader)


def test_transform_exception_and_transform(data):
    a, labels, d = data
    err = KeyError("t")

    def bad(batch):
        raise err

    with DataLoader(ARDataset(d), NPDataset(labels), batch_size=4, transform=bad) as loader:
        with pytest.raises(KeyError) as e:
            next(loader)
        assert e.value is err
    with DataLoader(ARDataset(d), NPDataset(labels), batch_size=4, mode=0,
                    transform=lambda dl: (dl[0] * 2, dl[1] + 1)) as loader:
        b = next(loader)
        np.testing.assert_array_equal(b["data"], a[:4] * 2)
        np.testing.assert_array_equal(b["label"], labels[:4] + 1)


def test_close_stops_every_thread(data):
    # The Python workers (a transform keeps them; the C loader's threads are
    # tested in test_train_cloader.py).
    a, labels, d = data
    before = len(loader_threads())
    loader = DataLoader(ARDataset(d), NPDataset(labels), num_workers=4, batch_size=2,
                        prefetch_size=2, transform=lambda b: b)
    next(loader)
    # Wait until the prefetch is full: every worker is then waiting.
    for _ in range(2000):
        with loader._pipe.cond:
            if len(loader._pipe.results) >= 2:
                break
        time.sleep(0.005)
    assert len(loader_threads()) == before + 4
    loader.close()
    assert len(loader_threads()) == before
    with pytest.raises(ValueError, match="closed"):
        next(loader)
    loader.close()  # twice is fine
    with DataLoader(ARDataset(d), NPDataset(labels), num_workers=3) as loader:
        next(loader)
    assert len(loader_threads()) == before


def test_close_closes_the_datasets(data):
    a, labels, d = data
    ds, ls = ARDataset(d), NPDataset(labels)
    with DataLoader(ds, ls, batch_size=2) as loader:
        next(loader)
    with pytest.raises(ValueError, match="closed"):
        len(ds)
    with pytest.raises(ValueError, match="closed"):
        len(ls)


def test_abandoned_loader_is_collected(data):
    import gc
    a, labels, d = data
    before = len(loader_threads())
    loader = DataLoader(ARDataset(d), NPDataset(labels), num_workers=2, batch_size=2)
    next(loader)
    del loader
    gc.collect()
    assert len(loader_threads()) == before


def test_empty_epochs_stop(tmp_path):
    with DataLoader(NPDataset(np.zeros((0, 2))), NPDataset(np.zeros(0)), mode=EPOCH,
                    num_epochs=3) as loader:
        assert len(loader) == 0
        assert list(loader) == []


def test_bad_state_leaves_the_loader_running(data):
    a, labels, d = data
    with DataLoader(ARDataset(d), NPDataset(labels), batch_size=5, mode=0) as loader:
        assert next(loader)["label"].tolist() == labels[:5].tolist()
        for bad in ({"mode": 2, "seed": 1, "epoch": 0, "consumed": 0},
                    {"mode": 0, "seed": 1, "epoch": 0, "consumed": 54}, {}, None):
            with pytest.raises(ValueError):
                loader.load_state_dict(bad)
        assert next(loader)["label"].tolist() == labels[5:10].tolist()


@pytest.mark.parametrize("mode", [0, 1, 2], ids=["sequential", "iid", "epoch"])
@pytest.mark.parametrize("workers", [0, 2])
def test_plain_arrays_are_datasets(mode, workers):
    # DataLoader(x, y) with two ndarrays (torch's DataLoader takes any
    # indexable): each is NPDataset(array); the batches are numpy's
    # indexing of the arrays at the sampler's indices, shuffled or not.
    x = np.random.default_rng(7).standard_normal((41, 3)).astype(np.float32)
    y = np.arange(41, dtype=np.int64) * 5
    ystrided = y[::-1]  # not C-contiguous: the Python workers gather it
    want = sampler_batches(41, 6, mode, 11, num_epochs=2)
    for labels in (y, ystrided):
        with DataLoader(x, labels, num_workers=workers, batch_size=6, mode=mode,
                        seed=11, num_epochs=2) as loader:
            got = list(loader)
        assert len(got) == len(want)
        for batch, idx in zip(got, want):
            assert batch["data"].dtype == np.float32 and batch["data"].shape == (len(idx), 3)
            np.testing.assert_array_equal(batch["data"], x[idx])
            np.testing.assert_array_equal(batch["label"], labels[idx])
    # close() left the caller's arrays alone (and a memmap's map open).
    assert x.shape == (41, 3) and y[3] == 15


def test_plain_memmap_stays_open(tmp_path):
    a = np.arange(30, dtype=np.int32).reshape(10, 3)
    np.save(tmp_path / "a.npy", a)
    m = np.load(tmp_path / "a.npy", mmap_mode="r")
    want = sampler_batches(10, 4, 0, 5, num_epochs=1)
    with DataLoader(m, batch_size=4, mode=0, seed=5, num_workers=1, num_epochs=1) as loader:
        got = [b["data"] for b in loader]
    assert len(got) == len(want)
    for batch, idx in zip(got, want):
        np.testing.assert_array_equal(batch, a[idx])
    np.testing.assert_array_equal(m[9], [27, 28, 29])  # still mapped


def test_objects_that_cannot_be_gathered_still_say_so():
    with pytest.raises(TypeError, match="list has no __getitems__"):
        DataLoader([1, 2, 3])
    with pytest.raises(TypeError, match="tuple has no __getitems__"):
        DataLoader(np.arange(3), (1, 2, 3))
