"""Reader: the bagz test-suite's behaviours (option matrix, slices, sequence
methods, read_indices forms, pickling) and bagcache's supersets."""

import itertools
import os
import pickle
from collections.abc import Sequence

import pytest

import bagcache as bagz

import bagz_data as bd
from bagz_data import NUM_RECORDS, generate_record, generate_records

PLACEMENTS = (None, bagz.LimitsPlacement.TAIL, bagz.LimitsPlacement.SEPARATE)
COMPRESSIONS = (None, bagz.CompressionAutoDetect(), bagz.CompressionNone(),
                bagz.CompressionZstd(level=3))
STORAGES = (None, bagz.LimitsStorage.IN_MEMORY, bagz.LimitsStorage.ON_DISK)


def _kw(**kw):
    return {k: v for k, v in kw.items() if v is not None}


def all_slices(n):
    for start in range(n):
        for stop in range(start + 1, n + 1):
            for step in range(1, 4):
                yield slice(start, stop, step)
                yield slice(stop - 1, start - 1 if start > 0 else None, -step)


@pytest.mark.parametrize(
    "name,placement,compression,storage",
    list(itertools.product(("data.bagz", "data.bag"), PLACEMENTS, COMPRESSIONS, STORAGES)))
def test_write_read_matrix(tmp_path, name, placement, compression, storage):
    np = pytest.importorskip("numpy")
    path = tmp_path / name
    records = generate_records()
    bd.write_records(path, records, bagz.Writer.Options(
        **_kw(limits_placement=placement, compression=compression)))
    zstd = isinstance(compression, bagz.CompressionZstd) or (
        not isinstance(compression, bagz.CompressionNone) and name.endswith(".bagz"))
    raw = path.read_bytes()
    assert raw.startswith(b"\x28\xb5\x2f\xfd") == zstd  # zstd frames iff it should
    reader = bagz.Reader(path, bagz.Reader.Options(**_kw(
        limits_placement=placement, compression=compression, limits_storage=storage)))

    all_indices = np.arange(NUM_RECORDS, dtype=np.int64)
    for i in range(NUM_RECORDS):
        assert reader[i] == records[i]
        assert reader[all_indices[i]] == records[i]
    with pytest.raises(IndexError, match="25"):
        reader[25]
    assert len(reader) == NUM_RECORDS
    assert list(reader) == records

    a, b, c = reader.read_indices([3, 3, 3])
    assert a == generate_record(3) and a is b and b is c
    with pytest.raises(IndexError, match="25"):
        reader.read_indices([3, 25, 3])
    a, b, c = reader.read_indices(np.array([3, 4, 3], dtype=np.int64))
    assert (a, b) == (generate_record(3), generate_record(4)) and c is a
    assert reader.read_indices(np.array([5, 4, 3], dtype=np.int32)) == records[5:2:-1]
    assert reader.read_indices(slice(2, None, -1)) == records[2::-1]
    assert reader.read_indices(slice(2, 5)) == records[2:5]
    assert reader.read_range(5, 3) == records[5:8]
    with pytest.raises(IndexError, match="25"):
        reader.read_range(25, 10)
    assert list(reader.read_range_iter(5, 3)) == records[5:8]
    with pytest.raises(IndexError, match="25"):
        reader.read_range_iter(25, 10)


def test_approximate_bytes_per_record(tmp_path):
    path = tmp_path / "data.bag"
    records = generate_records()
    bd.write_records(path, records)
    reader = bagz.Reader(path)
    num_bytes = sum(map(len, records))
    assert path.stat().st_size == num_bytes + len(records) * 8
    assert int(reader.approximate_bytes_per_record() * len(records) + 0.5) == num_bytes
    # Not updated for slices (as bagz).
    assert reader[3:5].approximate_bytes_per_record() == reader.approximate_bytes_per_record()
    empty = tmp_path / "empty.bag"
    bd.write_records(empty, [])
    assert bagz.Reader(empty).approximate_bytes_per_record() == 0.0


def test_sequence_methods(bag_path, records):
    reader = bagz.Reader(bag_path)
    assert isinstance(reader, Sequence)
    assert reader.index(records[0]) == 0
    assert reader.index(records[11]) == 11
    assert reader.index(b"", start=3) == 6
    with pytest.raises(ValueError):
        reader.index(b"", 3, 6)
    with pytest.raises(ValueError):
        reader.index(b"Missing")
    with pytest.raises(ValueError):
        reader.index(records[11], stop=10)
    assert reader.index(records[11], -10) == 11
    assert reader.index(b"", -4) == 18
    assert reader.count(records[0]) == 1
    assert reader.count(b"") == 5
    assert reader.count(b"Missing") == 0
    assert records[0] in reader and b"" in reader and b"Missing" not in reader
    assert bytearray(records[5]) in reader  # any bytes-like value
    with pytest.raises(TypeError):
        "Record_000" in reader
    with pytest.raises(TypeError):
        reader.count("Record_000")
    rev = reversed(reader)
    assert isinstance(rev, bagz.Reader)
    assert list(rev) == records[::-1]
    assert [rev[i] for i in range(len(rev))] == records[::-1]
    assert list(reversed(rev)) == records
    # Sequence mixin behaviour through the ABC
    assert Sequence.index(reader, records[7]) == 7


def test_slices_compose_like_lists(bag_path, records):
    reader = bagz.Reader(bag_path)
    all_values = reader.read_range(0, NUM_RECORDS)
    assert all_values == records
    for s in all_slices(NUM_RECORDS):
        view = reader[s]
        assert isinstance(view, bagz.Reader)
        assert list(view) == records[s], s
        assert view.read_indices(range(len(view))) == records[s], s
        assert view.read_range(0, len(view)) == records[s], s


def test_slices_of_slices(bag_path, records):
    reader = bagz.Reader(bag_path)
    steps = (None, 1, 2, 3, -1, -2, -5)
    bounds = (None, 0, 3, -3, 17, 25, -25)
    outer = [slice(a, b, c) for a in bounds for b in bounds for c in steps]
    inner = [slice(3, None, 2), slice(None, None, -3), slice(-2, 1, -1), slice(1, 100)]
    for s1 in outer:
        for s2 in inner:
            view = reader[s1][s2]
            want = records[s1][s2]
            assert len(view) == len(want), (s1, s2)
            assert view.read() == want, (s1, s2)
            assert [view[i] for i in range(-len(want), 0)] == want, (s1, s2)
            if want:
                assert view[-1] == want[-1]


def test_negative_indices_are_a_superset(bag_path, records):
    np = pytest.importorskip("numpy")
    reader = bagz.Reader(bag_path)
    assert reader[-1] == records[-1]
    assert reader[-NUM_RECORDS] == records[0]
    with pytest.raises(IndexError, match=r"index -21 out of range \[0, 20\)"):
        reader[-21]
    with pytest.raises(IndexError, match=r"^index 20 out of range \[0, 20\)$"):
        reader[20]
    assert reader.read_indices([-1, 0, -20]) == [records[-1], records[0], records[0]]
    assert reader.read_indices(np.array([-2, 1], dtype=np.int64)) == [records[-2], records[1]]
    with pytest.raises(IndexError, match=r"indices\[1\] = -21 out of range \[0, 20\)"):
        reader.read_indices([0, -21])
    assert reader.read_range(-3, 3) == records[-3:]


def test_read_indices_forms(bag_path, records):
    np = pytest.importorskip("numpy")
    reader = bagz.Reader(bag_path)
    want = [records[i] for i in (7, 1, 7, 19)]
    for dtype in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                  np.uint32, np.uint64, np.intp):
        assert reader.read_indices(np.array([7, 1, 7, 19], dtype=dtype)) == want, dtype
    strided = np.array([7, 0, 1, 0, 7, 0, 19, 0], dtype=np.int64)[::2]
    assert reader.read_indices(strided) == want
    assert reader.read_indices((7, 1, 7, 19)) == want
    assert reader.read_indices(i for i in (7, 1, 7, 19)) == want
    assert reader.read_indices(range(3, 9, 2)) == records[3:9:2]
    assert reader.read_indices(range(19, -1, -1)) == records[::-1]
    assert reader.read_indices([np.int64(7), True]) == [records[7], records[1]]
    assert reader.read_indices([]) == []
    assert reader.read_indices(np.array([], dtype=np.int64)) == []
    import array
    assert reader.read_indices(array.array("q", [7, 1, 7, 19])) == want
    with pytest.raises(ValueError, match="1-D"):
        reader.read_indices(np.zeros((2, 2), dtype=np.int64))
    with pytest.raises(TypeError):
        reader.read_indices(np.array([1.0, 2.0]))
    with pytest.raises(TypeError):
        reader.read_indices(["1"])
    with pytest.raises(TypeError):
        reader.read_indices(5)
    with pytest.raises(IndexError, match=r"indices\[0\] = 18446744073709551615"):
        reader.read_indices(np.array([2**64 - 1], dtype=np.uint64))
    with pytest.raises(IndexError, match=r"indices\[2\] = 18446744073709551615 "):
        reader.read_indices([0, 1, 2**64 - 1])
    with pytest.raises(IndexError, match=r"indices\[2\] = 36893488147419103232 out of range"):
        reader.read_indices([0, 1, 2**65])
    with pytest.raises(IndexError, match=r"indices\[0\] = -18446744073709551616 out of range"):
        reader.read_indices([-2**64])
    # Duplicates share one object whatever their order.
    got = reader.read_indices([5, 9, 5, 9, 5])
    assert got[0] is got[2] is got[4] and got[1] is got[3]


def test_read_indices_large_and_duplicated(tmp_path):
    np = pytest.importorskip("numpy")
    # More than one chunk of the extension's bulk reads, shuffled, repeated.
    path = tmp_path / "big.bag"
    n = 3 * bagz._bagcache.CHUNK + 17
    records = [b"%07d" % i for i in range(n)]
    bd.write_records(path, records)
    reader = bagz.Reader(path)
    rng = np.random.default_rng(7)
    idx = rng.integers(0, n, size=2 * n)
    got = reader.read_indices(idx)
    assert got == [records[i] for i in idx]
    first = {}
    for i, value in zip(idx.tolist(), got):
        assert first.setdefault(i, value) is value
    assert reader.read() == records
    assert reader[::-7].read() == records[::-7]
    assert reader.count(b"%07d" % (n - 1)) == 1
    assert reader.index(b"%07d" % (n - 1)) == n - 1


def test_invalid_slices(bag_path):
    reader = bagz.Reader(bag_path)
    with pytest.raises(TypeError):
        reader[slice("Not a number")]
    with pytest.raises(TypeError):
        reader.read_indices(slice("Not a number"))
    with pytest.raises(IndexError, match="Invalid slice"):
        reader[slice("x")]
    assert issubclass(bagz.InvalidSliceError, TypeError)
    assert issubclass(bagz.InvalidSliceError, IndexError)
    with pytest.raises(ValueError):
        reader[::0]
    with pytest.raises(TypeError):
        reader["1"]
    with pytest.raises(TypeError):
        reader[1.0]


def test_empty_reader(tmp_path):
    path = tmp_path / "empty.bag"
    bd.write_records(path, [])
    reader = bagz.Reader(path)
    assert len(reader) == 0 and list(reader) == [] and reader.read() == []
    assert reversed(reader) is reader
    assert reader[5:] .read() == [] and reader.read_indices([]) == []
    with pytest.raises(IndexError):
        reader[0]
    assert bagz.Reader("").read() == []  # '' opens zero shards


def test_options_attributes_and_validation():
    o = bagz.Reader.Options(bagz.ShardingLayout.INTERLEAVED, bagz.LimitsPlacement.SEPARATE,
                            bagz.CompressionNone(), bagz.LimitsStorage.IN_MEMORY, 7,
                            bagz.AccessPattern.RANDOM, bagz.CachePolicy.DROP_AFTER_READ)
    assert o.sharding_layout is bagz.ShardingLayout.INTERLEAVED
    assert o.limits_placement is bagz.LimitsPlacement.SEPARATE
    assert o.compression == bagz.CompressionNone()
    assert o.limits_storage is bagz.LimitsStorage.IN_MEMORY
    assert o.max_parallelism == 7
    assert o.access_pattern is bagz.AccessPattern.RANDOM
    assert o.cache_policy is bagz.CachePolicy.DROP_AFTER_READ
    o.max_parallelism = 3
    assert o.max_parallelism == 3
    for bad in (dict(max_parallelism="3"), dict(max_parallelism=True),
                dict(limits_placement=0), dict(compression="zstd"),
                dict(sharding_layout=bagz.LimitsPlacement.TAIL)):
        with pytest.raises(TypeError):
            bagz.Reader.Options(**bad)
    with pytest.raises(TypeError):
        bagz.Reader.Options(unknown=1)
    with pytest.raises(AttributeError):
        o.unknown = 1
    assert bagz.LimitsPlacement.SEPARATE.name == "SEPARATE"
    assert bagz.LimitsPlacement.SEPARATE.value == 1
    w = bagz.Writer.Options(compression=bagz.CompressionZstd(level=5, dictionary="d"))
    assert w.compression.level == 5 and w.compression.dictionary == "d"
    assert repr(bagz.Reader.Options()).startswith("Reader.Options(sharding_layout=")


@pytest.mark.parametrize("parallelism", [0, 1, 2, 8, 100])
def test_max_parallelism(tmp_path, parallelism):
    path = tmp_path / "p.bagz"
    records = [b"%d" % i * (i % 7) for i in range(5000)]
    bd.write_records(path, records)
    reader = bagz.Reader(path, bagz.Reader.Options(max_parallelism=parallelism))
    assert reader.read() == records
    assert reader.read_indices(list(range(4999, -1, -3))) == records[::-3]
    assert list(reader) == records
    assert reader.options.max_parallelism == parallelism


def test_negative_max_parallelism_fails_bulk_reads(bag_path, records):
    reader = bagz.Reader(bag_path, bagz.Reader.Options(max_parallelism=-1))
    assert reader[3] == records[3]  # single reads are fine (as bagz)
    for call in (reader.read, lambda: reader.read_range(0, 2),
                 lambda: reader.read_indices([1]), lambda: reader.count(b"")):
        with pytest.raises(ValueError, match="max_parallelism"):
            call()


@pytest.mark.parametrize("pattern", list(bagz.AccessPattern))
@pytest.mark.parametrize("policy", list(bagz.CachePolicy))
def test_access_pattern_and_cache_policy(bag_path, records, pattern, policy, capfd):
    options = bagz.Reader.Options(access_pattern=pattern, cache_policy=policy)
    reader = bagz.Reader(bag_path, options)
    assert list(reader) == records
    assert reader.read_indices([19, 0, 19]) == [records[19], records[0], records[19]]
    assert reader.options.access_pattern is pattern
    assert reader.options.cache_policy is policy


def test_file_spec_and_options_properties(bag_path):
    options = bagz.Reader.Options(limits_storage=bagz.LimitsStorage.IN_MEMORY)
    reader = bagz.Reader(bag_path, options)
    assert reader.file_spec == str(bag_path)
    assert reader.options == options
    assert reader.options is not options
    options.max_parallelism = 1  # the reader keeps its own copy
    assert reader.options.max_parallelism == 100
    got = reader.options
    got.max_parallelism = 2
    assert reader.options.max_parallelism == 100
    assert reader[2:4].file_spec == str(bag_path)
    assert bagz.Reader(os.fsencode(str(bag_path))).file_spec == str(bag_path)


def test_reader_pickle(bag_path, records):
    reader = bagz.Reader(bag_path)
    unpickled = pickle.loads(pickle.dumps(reader))
    assert len(unpickled) == len(reader)
    assert list(unpickled) == records
    assert unpickled[5] == records[5]
    for s in (slice(3, 15, 2), slice(None, None, -1), slice(17, 2, -4), slice(5, 5)):
        view = reader[s]
        got = pickle.loads(pickle.dumps(view))
        assert list(got) == records[s]
        assert got._state() == view._state()


def test_reader_options_pickle(bag_path, records):
    options = bagz.Reader.Options(
        max_parallelism=8,
        limits_storage=bagz.LimitsStorage.IN_MEMORY,
        compression=bagz.CompressionZstd(level=3),
    )
    reader = bagz.Reader(bag_path, options=options)
    unpickled = pickle.loads(pickle.dumps(reader))
    assert unpickled.options.max_parallelism == 8
    assert unpickled.options.limits_storage == bagz.LimitsStorage.IN_MEMORY
    assert unpickled[0] == records[0]
    for obj in (options, bagz.Writer.Options(), bagz.CompressionNone(),
                bagz.CompressionAutoDetect(), bagz.CompressionZstd(4, b"\x00dict"),
                bagz.LimitsStorage.IN_MEMORY):
        assert pickle.loads(pickle.dumps(obj)) == obj


def test_pickled_view_must_fit_the_files(tmp_path, records):
    path = tmp_path / "data.bag"
    bd.write_records(path, records)
    blob = pickle.dumps(bagz.Reader(path)[10:20])
    bd.write_records(path, records[:12])  # the file shrank since
    with pytest.raises(ValueError, match="does not fit"):
        pickle.loads(blob)


def test_sharded_specs(tmp_path):
    shards = [[b"a0", b"a1"], [], [b"c0", b"c1", b"c2"]]
    for k, recs in enumerate(shards):
        bd.write_records(tmp_path / f"s-{k:05d}-of-00003.bag", recs)
    flat = [r for recs in shards for r in recs]
    assert list(bagz.Reader(tmp_path / "s@3.bag")) == flat
    assert list(bagz.Reader(tmp_path / "s@*.bag")) == flat
    assert list(bagz.Reader(f"posix:{tmp_path}/s@03.bag")) == flat
    two = f"{tmp_path}/s@3.bag,{tmp_path}/s-00000-of-00003.bag"
    assert list(bagz.Reader(two)) == flat + shards[0]
    # "@*" inside a list works (a bagz bug).
    assert list(bagz.Reader(f"{tmp_path}/s-00000-of-00003.bag,{tmp_path}/s@*.bag")) == shards[0] + flat
    with pytest.raises(FileNotFoundError, match="s-00000-of-00004"):
        bagz.Reader(tmp_path / "s@4.bag")
    with pytest.raises(ValueError):  # sizes [2, 0, 3] cannot be interleaved
        bagz.Reader(tmp_path / "s@3.bag", bagz.Reader.Options(
            sharding_layout=bagz.ShardingLayout.INTERLEAVED))


def test_separate_limits_lists_pair_per_element(tmp_path):
    # bagz pairs "d/a.bag,d/b.bag" with the wrong limits files.
    sep = bagz.Writer.Options(limits_placement=bagz.LimitsPlacement.SEPARATE)
    bd.write_records(tmp_path / "a.bag", [b"aa", b"a"], sep)
    bd.write_records(tmp_path / "b.bag", [b"b"], sep)
    reader = bagz.Reader(f"{tmp_path}/a.bag,{tmp_path}/b.bag", bagz.Reader.Options(
        limits_placement=bagz.LimitsPlacement.SEPARATE))
    assert list(reader) == [b"aa", b"a", b"b"]


def test_autodetect_by_whole_spec_suffix(tmp_path):
    bd.write_records(tmp_path / "x.bagz", [b"zz" * 50])
    (tmp_path / "x.BAGZ").write_bytes((tmp_path / "x.bagz").read_bytes())
    assert bagz.Reader(tmp_path / "x.bagz")[0] == b"zz" * 50
    # ".BAGZ" is not ".bagz": the frame comes back undecoded.
    assert bagz.Reader(tmp_path / "x.BAGZ")[0][:4] == b"\x28\xb5\x2f\xfd"
    assert bagz.Reader(tmp_path / "x.BAGZ", bagz.Reader.Options(
        compression=bagz.CompressionZstd()))[0] == b"zz" * 50
    assert bagz.Reader(tmp_path / "x.bagz", bagz.Reader.Options(
        compression=bagz.CompressionNone()))[0][:4] == b"\x28\xb5\x2f\xfd"


def test_repr_and_unopened_objects(bag_path):
    reader = bagz.Reader(bag_path)
    assert repr(reader) == f"bagcache.Reader({str(bag_path)!r}, len=20)"
    assert "view=[19::-1]" in repr(reader[::-1])
    blank = bagz.Reader.__new__(bagz.Reader)
    with pytest.raises(ValueError, match="not open"):
        len(blank)
    with pytest.raises(ValueError, match="not open"):
        blank[0]
    with pytest.raises(ValueError, match="already open"):
        reader.__init__(bag_path)
    info = reader.shards()
    assert info == [{"path": str(bag_path), "limits_path": None, "records": 20,
                     "records_bytes": info[0]["records_bytes"], "compression": "zstd"}]
