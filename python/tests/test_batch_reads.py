"""Bulk reads (read_indices, read, read_range) against the plain model, r[i]
one by one, at batch sizes on both sides of every size the bulk path
switches at: the staging rounds (16 records, then about 256 KiB of
records), the sort (insertion below 64 indices, radix on
8-bit digits below 65,536 and on 16-bit digits from there), the 32-record
tasks of the library's batch loop (bc__get_each) and the 1 MiB the staging area keeps
between calls.  Exact bytes, in request order, with repeats, negative
indices and unsorted indices; then errors in the middle of a large batch,
and a staging area used again by a nested read."""

import pickle

import pytest

import bagcache

import bagz_data as bd

np = pytest.importorskip("numpy")

SIZES = (0, 1, 15, 16, 17, 63, 64, 65, 255, 256, 257, 1000, 8191, 8192, 8193, 20_000,
         70_000)
# LoadIt sorts nothing; its sizes cross the 32-record tasks instead.
LOADIT_SIZES = (0, 1, 15, 16, 17, 31, 32, 33, 255, 256, 257, 8191, 8192, 8193, 20_000)


def record(i):
    """Record i: its number, then 0 to 3,000 bytes; every 997th is 300 KiB,
    so some rounds stage more than the area keeps (1 MiB)."""
    size = 300 * 1024 if i % 997 == 5 else (i * 7919) % 3001
    return b"%07d:" % i + bytes([i % 251]) * size


N = 3_000
RECORDS = [record(i) for i in range(N)]


def batch(rng, size, n=N):
    """`size` indices in [-n, n): unsorted, with repeats."""
    return rng.integers(-n, n, size=size, dtype=np.int64)


@pytest.fixture(scope="module", params=["bag", "bagz"])
def reader(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("batch") / f"r.{request.param}"
    bd.write_records(path, RECORDS)
    r = bagcache.Reader(path)
    yield r


@pytest.mark.parametrize("size", SIZES)
def test_read_indices_is_the_loop(reader, size):
    rng = np.random.default_rng(size)
    idx = batch(rng, size)
    want = [RECORDS[i] for i in idx.tolist()]
    assert reader.read_indices(idx) == want
    assert reader.read_indices(idx.tolist()) == want
    ascending = np.sort(idx % N)  # the path for sorted indices
    assert reader.read_indices(ascending) == [RECORDS[i] for i in ascending.tolist()]
    # Views: resolved and grouped before reading.
    view = reader[::-1]
    assert view.read_indices(idx) == [view[i] for i in idx.tolist()]
    assert [view[i] for i in idx[:50].tolist()] == [RECORDS[-1 - i] for i in idx[:50].tolist()]
    strided = reader[5:-3:2]
    sidx = idx % len(strided)
    assert strided.read_indices(sidx) == [RECORDS[5 + 2 * i] for i in sidx.tolist()]


def test_read_and_read_range_are_the_loop(reader):
    assert reader.read() == RECORDS
    for start, num in ((0, 0), (3, 1), (10, 300), (N - 700, 700)):
        assert reader.read_range(start, num) == RECORDS[start:start + num]
    assert reader[::-1].read() == RECORDS[::-1]


def test_staging_area_changes_record_sizes(tmp_path):
    """One thread's staging area serves calls of large, then small, then
    empty, then large records again: every record is its own bytes."""
    big = [bytes([k]) * (200_000 + k) for k in range(40)]
    small = [b"s%d" % k for k in range(5000)]
    empty = [b""] * 300
    readers = []
    for name, recs in (("big", big), ("small", small), ("empty", empty)):
        bd.write_records(tmp_path / f"{name}.bag", recs)
        readers.append((bagcache.Reader(tmp_path / f"{name}.bag"), recs))
    rng = np.random.default_rng(1)
    for _ in range(3):
        for r, recs in readers + readers[::-1]:
            idx = rng.integers(0, len(recs), size=3 * len(recs))
            assert r.read_indices(idx) == [recs[i] for i in idx.tolist()]


def test_error_in_a_large_batch(reader):
    idx = np.arange(20_000, dtype=np.int64) % N
    idx[12_345] = N + 7
    with pytest.raises(IndexError, match=str(N + 7)):
        reader.read_indices(idx)
    idx[12_345] = 4
    assert reader.read_indices(idx) == [RECORDS[i] for i in idx.tolist()]


def test_nested_read_in_a_serializer(tmp_path):
    """LoadIt's loads runs while the thread's staging area is in use; a
    read_indices inside it gets an area of its own."""
    bd.write_records(tmp_path / "inner.bag", RECORDS)
    inner = bagcache.Reader(tmp_path / "inner.bag")

    class Nested:
        @staticmethod
        def dumps(x):
            return x

        @staticmethod
        def loads(data):
            k = int(bytes(data))
            return inner.read_indices([k, (k * 31) % N, k])

    loader = bagcache.LoadIt(tmp_path / "outer", lambda: (b"%d" % i for i in range(N)),
                             serializer=Nested)
    rng = np.random.default_rng(2)
    idx = rng.integers(0, N, size=5000)
    want = [[RECORDS[k], RECORDS[(k * 31) % N], RECORDS[k]] for k in idx.tolist()]
    assert loader.read_indices(idx) == want
    assert loader.read_indices(idx) == want  # now read in this thread
    loader.close()


@pytest.fixture(scope="module", params=["raw", "pickle", "zstd"])
def loader(request, tmp_path_factory):
    """A LoadIt of 3,000 records in 100 shards of 30."""
    root = tmp_path_factory.mktemp("loadit") / "root"
    kwargs = {"max_shard_length": 30}
    if request.param in ("raw", "zstd"):
        kwargs["serializer"] = "raw"
        source = lambda: iter(RECORDS)  # noqa: E731
        model = RECORDS
    else:
        source = lambda: ({"i": i, "r": RECORDS[i]} for i in range(N))  # noqa: E731
        model = [{"i": i, "r": RECORDS[i]} for i in range(N)]
    if request.param == "zstd":
        kwargs["compression"] = "zstd"
    ld = bagcache.LoadIt(root, source, **kwargs)
    yield ld, model
    ld.close()


@pytest.mark.parametrize("size", LOADIT_SIZES)
def test_loadit_read_indices_is_the_loop(loader, size):
    ld, model = loader
    rng = np.random.default_rng(size + 1)
    idx = batch(rng, size)
    want = [model[i] for i in idx.tolist()]
    assert ld.read_indices(idx) == want
    assert ld.read_indices(idx) == want  # shards now read lately: straight
    assert ld.read_indices((idx % N)) == [model[i] for i in (idx % N).tolist()]
    view = ld[::1]
    assert view.read_indices((idx % N)) == [model[i] for i in (idx % N).tolist()]
    few = ld[100:400]  # 10 shards: every round straight once read
    fidx = idx % len(few)
    for _ in range(2):
        assert few.read_indices(fidx) == [model[100 + i] for i in fidx.tolist()]


def test_loadit_error_in_a_large_batch(loader):
    ld, model = loader
    idx = np.arange(20_000, dtype=np.int64) % N
    assert ld.read_indices(idx) == [model[i] for i in idx.tolist()]
    idx[9_999] = N + 3
    # Named by its position in the whole list, not in its round (rounds
    # hold 16, then about 256 KiB of records).
    for seq in (ld, ld[::1]):
        with pytest.raises(IndexError, match=r"^indices\[9999\] = %d: " % (N + 3)):
            seq.read_indices(idx)
    idx[9_999] = 0
    assert ld.read_indices(idx) == [model[i] for i in idx.tolist()]


def test_loadit_pickled_records_are_independent(loader):
    """Objects unpickled from reused staging buffers share nothing."""
    ld, model = loader
    first = ld.read_indices(list(range(200)))
    second = ld.read_indices(list(range(200, 400)))
    assert first == model[:200] and second == model[200:400]
    assert pickle.loads(pickle.dumps(first)) == model[:200]
