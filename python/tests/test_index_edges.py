"""Index edge cases: slices of endless views with bounds past 2**63-1,
indices beyond int64 in read_indices, and the cap on fill workers."""

import logging
import os

import pytest

import bagcache
from bagcache import RepeatSequence


@pytest.fixture
def endless():
    return RepeatSequence(list(range(100)))


@pytest.mark.parametrize("key", [
    slice(2**63, None), slice(10**20, None), slice(None, None, 2**63),
    slice(5, 2**63), slice(5, 10**20, 3),
])
def test_endless_slice_beyond_int64_is_index_error(endless, key):
    # Clamping such a bound to 2**63-1 used to give wrong elements
    # (endless[2**63:][0] was 7, element 2**63-1, not 8).
    with pytest.raises(IndexError, match="endless view"):
        endless[key]


def test_endless_slices_within_int64_are_exact(endless):
    top = 2**63 - 1
    assert endless[top:][0] == top % 100
    assert endless[top - 5:][3] == (top - 2) % 100
    assert endless[::2**62][1] == 2**62 % 100
    assert [endless[5:2**62:2**61][k] for k in range(2)] == [5, (5 + 2**61) % 100]
    with pytest.raises(IndexError):
        endless[2**63]


def test_finite_slices_still_clamp():
    f = RepeatSequence(list(range(10)), 3)  # 30 elements
    assert list(f[2**63:]) == []
    assert list(f[10**20:]) == []
    assert list(f[25:10**20]) == [5, 6, 7, 8, 9]
    assert list(f[::2**63]) == [0]
    assert list(f[-10**20:3]) == [0, 1, 2]


@pytest.fixture
def reader(tmp_path):
    path = str(tmp_path / "a.bag")
    with bagcache.Writer(path) as w:
        for i in range(10):
            w.write(b"r%d" % i)
    return bagcache.Reader(path)


@pytest.mark.parametrize("value", [10**30, 2**64, -2**63 - 1, -10**30])
def test_read_indices_beyond_int64_is_index_error(tmp_path, reader, value):
    with pytest.raises(IndexError, match=rf"indices\[1\] = {value} out of range \[0, 10\)"):
        reader.read_indices([0, value])
    ld = bagcache.LoadIt(str(tmp_path / "r"), lambda: iter(range(10)), max_shard_length=4)
    with pytest.raises(IndexError, match=r"indices\[1\]"):
        ld.read_indices([0, value])
    assert reader.read_indices([9, -10]) == [b"r9", b"r0"]


def threads():
    return len(os.listdir("/proc/self/task"))


def test_fill_workers_are_capped(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="bagcache")
    before = threads()
    ld = bagcache.LoadIt(str(tmp_path / "r"), lambda: iter(range(1000)), max_shard_length=10,
                         max_workers=100000, iterator_thread_safe=True)
    started = threads() - before
    assert ld[500] == 500
    assert ld.max_workers == 100000  # as given (loadit's attribute)
    ld.close()
    said = [r.getMessage() for r in caplog.records if r.name == "bagcache"]
    assert len(said) == 1 and "100000 fill workers asked for; using 256" in said[0]
    # 256 workers, and a few helper threads of the bindings and of the
    # library's pool (one per CPU) at most.
    assert 256 <= started <= 256 + 8 + (os.cpu_count() or 1)
