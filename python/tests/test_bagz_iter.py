"""Iterators: read-ahead over ranges and over (possibly endless) index
streams, with bagz's error semantics."""

import itertools
import os
import subprocess
import sys
import textwrap

import pytest

import bagcache as bagz

import bagz_data as bd
from bagz_data import generate_record

np = pytest.importorskip("numpy")

READ_AHEADS = [None, 0, 1, 3, 4, 5, 1000]


def test_iterate_all_and_ranges(bag_path, records):
    reader = bagz.Reader(bag_path)
    it = iter(reader)
    assert isinstance(it, bagz.ReaderIterator)
    assert iter(it) is it
    assert list(it) == records
    assert list(it) == []  # exhausted stays exhausted
    for ra in READ_AHEADS:
        assert list(reader.read_range_iter(5, 3, read_ahead=ra)) == records[5:8]
        assert list(reader.read_range_iter(0, 20, read_ahead=ra)) == records
        assert list(reader.read_range_iter(7, 0, read_ahead=ra)) == []
        assert list(reader.read_range_iter(-4, 4, read_ahead=ra)) == records[-4:]
    assert list(reader[::-3]) == records[::-3]


def test_read_range_iter_checks_eagerly(bag_path):
    reader = bagz.Reader(bag_path)
    with pytest.raises(IndexError, match=r"Range \[25, 35\) out of range \[0, 20\]"):
        reader.read_range_iter(25, 10)
    with pytest.raises(IndexError):
        reader.read_range_iter(15, 6)
    with pytest.raises(ValueError):
        reader.read_range_iter(0, -1)
    with pytest.raises(ValueError):
        reader.read_range_iter(0, 1, read_ahead=-1)
    with pytest.raises(TypeError):  # read_ahead is keyword-only (as bagz)
        reader.read_range_iter(0, 1, 4)


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int32, np.int64, np.uint64])
def test_read_indices_iter_numpy_array(bag_path, records, dtype):
    """A numpy array is streamed from a copy of its indices (no GIL per
    index): the same records, negative indices, and an out-of-range index
    reported only after the records before it."""
    reader = bagz.Reader(bag_path)
    idx = np.array([5, 0, 19, 3, 3], dtype=dtype)
    it = reader.read_indices_iter(idx, read_ahead=2)
    idx[1] = 7  # the indices were copied when the iterator was made
    assert list(it) == [records[i] for i in (5, 0, 19, 3, 3)]
    if np.issubdtype(dtype, np.signedinteger):
        neg = np.array([-1, -20, 4], dtype=dtype)
        assert list(reader.read_indices_iter(neg)) == [records[-1], records[0], records[4]]
        bad = np.array([2, 1, -21, 0], dtype=dtype)
    else:
        bad = np.array([2, 1, 20, 0], dtype=dtype)
    it = reader.read_indices_iter(bad, read_ahead=3)
    assert [next(it), next(it)] == [records[2], records[1]]
    with pytest.raises(IndexError, match=r"out of range \[0, 20\)"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)
    assert list(reader.read_indices_iter(np.arange(0, 20, 7, dtype=dtype))) == [
        records[0], records[7], records[14]]
    with pytest.raises(TypeError, match="boolean"):
        reader.read_indices_iter(np.ones(3, dtype=bool))
    with pytest.raises(ValueError, match="1-D"):
        reader.read_indices_iter(np.zeros((2, 2), dtype=np.int64))


@pytest.mark.parametrize("read_ahead", READ_AHEADS)
def test_read_indices_iter_shuffled(bag_path, records, read_ahead):
    reader = bagz.Reader(bag_path)
    idx = np.arange(len(records))
    np.random.default_rng(42).shuffle(idx)
    got = list(reader.read_indices_iter(iter(idx), read_ahead=read_ahead))
    assert got == [records[i] for i in idx]
    assert got == reader.read_indices(idx)
    assert list(reader.read_indices_iter([-1, 0, -20], read_ahead)) == [
        records[-1], records[0], records[0]]


def test_endless_index_stream(bag_path, records):
    reader = bagz.Reader(bag_path)
    pulled = []

    def forever():
        for i in itertools.count():
            pulled.append(i)
            yield (7 * i) % len(records)

    it = reader.read_indices_iter(forever(), read_ahead=4)
    assert [next(it) for _ in range(50)] == [records[(7 * i) % 20] for i in range(50)]
    # Read-ahead is bounded: the stream is not drained far past consumption.
    assert 50 <= len(pulled) <= 50 + 64 + 4
    del it


@pytest.mark.parametrize("read_ahead", [None, 3, 4, 5])
def test_iterator_exceptions(bag_path, records, read_ahead):
    reader = bagz.Reader(bag_path)

    class NotIterable:
        def __iter__(self):
            raise NotImplementedError()

    with pytest.raises(NotImplementedError):
        reader.read_indices_iter(NotIterable(), read_ahead=read_ahead)

    with pytest.raises(IndexError, match="20"):
        list(reader.read_indices_iter([3, 2, 3, len(records), 10], read_ahead=read_ahead))
    it = reader.read_indices_iter([3, 2, 20, 1], read_ahead=read_ahead)
    assert [next(it), next(it)] == [records[3], records[2]]
    with pytest.raises(IndexError, match=r"index 20 out of range \[0, 20\)"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)

    def raise_at_4(i):
        if i == 4:
            raise ValueError("test")
        return i

    it = reader.read_indices_iter(map(raise_at_4, range(10)), read_ahead=read_ahead)
    assert [next(it) for _ in range(4)] == [generate_record(i) for i in range(4)]
    with pytest.raises(ValueError, match="test"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)

    def bad_type_at_4(i):
        return "test" if i == 4 else i

    it = reader.read_indices_iter(map(bad_type_at_4, range(10)), read_ahead=read_ahead)
    for _ in range(4):
        next(it)
    with pytest.raises(TypeError):
        next(it)

    def overflow_at_4(i):
        return 2**64 if i == 4 else i

    it = reader.read_indices_iter(map(overflow_at_4, range(10)), read_ahead=read_ahead)
    for _ in range(4):
        next(it)
    with pytest.raises(OverflowError):
        next(it)

    # A partly consumed iterator whose stream has failed: dropping it is quiet.
    it = reader.read_indices_iter(map(overflow_at_4, range(10)), read_ahead=read_ahead)
    for _ in range(4):
        next(it)
    del it


def test_stream_exception_keeps_traceback(bag_path):
    reader = bagz.Reader(bag_path)

    def gen():
        yield 1
        raise KeyError("from the stream")

    it = reader.read_indices_iter(gen())
    next(it)
    with pytest.raises(KeyError, match="from the stream") as info:
        next(it)
    assert any(entry.name == "gen" for entry in info.traceback)


def test_reentrant_use_is_refused(bag_path, records):
    reader = bagz.Reader(bag_path)
    holder = {}
    seen = []

    def stream():
        yield 0
        try:
            next(holder["it"])
        except RuntimeError as e:
            seen.append(str(e))
        yield 1

    holder["it"] = it = reader.read_indices_iter(stream())
    assert list(it) == [records[0], records[1]]
    assert seen and "already running" in seen[0]


def test_live_iterators_at_exit(bag_path):
    # bagz aborts ("terminate called without an active exception") here.
    code = textwrap.dedent(f"""
        import itertools, bagcache
        r = bagcache.Reader({str(bag_path)!r})
        a = iter(r); next(a)
        b = r.read_indices_iter(itertools.cycle(range(20)), read_ahead=8); next(b)
        c = r.read_indices_iter(itertools.count(0)); next(c)
        print("done")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env=os.environ.copy())
    assert out.returncode == 0, out.stderr
    assert out.stdout == "done\n"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_iterator_from_parent_refuses_in_child(tmp_path):
    records = [b"%d" % i for i in range(100)]
    bd.write_records(tmp_path / "f.bag", records)
    reader = bagz.Reader(tmp_path / "f.bag")
    it = reader.read_range_iter(0, 100, read_ahead=2)
    assert next(it) == records[0]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: the parent's iterator has no threads here
        status = 1
        try:
            got = []
            try:
                for _ in range(10):
                    got.append(next(it))  # what was already fetched is there
            except RuntimeError as e:
                if "another process" in str(e) and got == records[1:1 + len(got)]:
                    status = 0
            # A fresh iterator in the child works.
            if list(reader[:3]) != records[:3]:
                status = 3
            os.write(w, bytes([status]))
        finally:
            os._exit(0)
    os.close(w)
    status = os.read(r, 1)
    os.close(r)
    os.waitpid(pid, 0)
    assert status == b"\x00"
    assert list(it) == records[1:]
