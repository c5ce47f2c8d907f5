"""Index and MultiIndex: record bytes -> positions of a Reader view."""

import pytest

import bagcache as bagz

EXPECTED_EMPTY = [2, 6, 10, 14, 18]  # bagz's records: (row + 2) % 4 == 0


def test_index(bag_path, records):
    reader = bagz.Reader(bag_path)
    index = bagz.Index(reader)
    assert len(index) == len(records) - len(EXPECTED_EMPTY) + 1
    for i, record in enumerate(records):
        assert record in index
        assert index[record] == (i if record else 2)
        assert index[record.decode()] == (i if record else 2)  # str keys: UTF-8
        assert index.get(record) == (i if record else 2)
    assert index.get("25") is None
    assert index.get(b"25", 7) == 7
    assert "25" not in index
    with pytest.raises(KeyError, match="25"):
        index["25"]
    with pytest.raises(KeyError) as info:
        index[b"missing"]
    assert info.value.args == (b"missing",)
    with pytest.raises(TypeError):
        index[25]
    with pytest.raises(TypeError):
        25 in index


def test_multi_index(bag_path, records):
    reader = bagz.Reader(bag_path)
    multi = bagz.MultiIndex(reader)
    assert len(multi) == len(records) - len(EXPECTED_EMPTY) + 1
    for i, record in enumerate(records):
        want = [i] if record else EXPECTED_EMPTY
        assert record in multi
        assert multi[record] == want
        assert multi.get(record) == want
    assert multi.get("25") is None
    sentinel = object()
    assert multi.get("25", default=sentinel) is sentinel
    with pytest.raises(KeyError, match="25"):
        multi["25"]


def test_indexes_of_views(bag_path, records):
    reader = bagz.Reader(bag_path)
    for s in (slice(3, 17, 2), slice(None, None, -1), slice(19, 0, -3), slice(5, 5)):
        view = reader[s]
        want = records[s]
        index, multi = bagz.Index(view), bagz.MultiIndex(view)
        assert len(index) == len(multi) == len(set(want))
        for record in set(want):
            positions = [k for k, r in enumerate(want) if r == record]
            assert index[record] == positions[0]
            assert multi[record] == positions
        for record in set(records) - set(want):
            assert record not in index and index.get(record) is None


def test_index_outlives_reader(tmp_path):
    path = tmp_path / "k.bag"
    with bagz.Writer(path) as w:
        for key in (b"k1", b"k2", b"k1"):
            w.write(key)
    multi = bagz.MultiIndex(bagz.Reader(path))  # the reader is dropped here
    import gc
    gc.collect()
    assert multi[b"k1"] == [0, 2] and multi["k2"] == [1]


def test_index_needs_a_reader():
    with pytest.raises(TypeError):
        bagz.Index([b"a", b"b"])
    with pytest.raises(TypeError):
        bagz.MultiIndex(None)
