"""LoadIt over damaged shards (issue 14, items 2 and 3): a shard truncated
under a live loader, a flipped bit in a published shard, in raw and zstd
roots, with a source (the shard is regenerated: the right records come
back) and without one (bagcache.CorruptError).  Never wrong bytes."""

import os
import pickle

import pytest

import bagcache
from bagcache import LoadIt

N, R = 100, 10


def records():
    return (b"record-%04d" % i for i in range(N))


def items():
    return ({"n": i, "text": "x" * (i % 7)} for i in range(N))


def shard_path(root, start, compression=None):
    ext = "bagz" if compression else "bag"
    return os.path.join(root, "shards", f"{start}.{start + R}.{ext}")


def open_loader(root, serializer, compression=None, source=True):
    gen = (records if serializer == "raw" else items) if source else None
    return LoadIt(root, gen, max_shard_length=R, serializer=serializer,
                  compression=compression)


def want(serializer):
    return list(records()) if serializer == "raw" else list(items())


# ---- item 2: a shard truncated under a live loader ---------------------------


@pytest.mark.parametrize("serializer", ["raw", "pickle"])
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_truncated_under_live_loader_is_regenerated(tmp_path, serializer, compression):
    root = str(tmp_path / "r")
    ld = open_loader(root, serializer, compression)
    expect = want(serializer)
    assert [ld[i] for i in range(N)] == expect  # every shard open and mapped
    path = shard_path(root, 10, compression)
    os.truncate(path, 95)  # the repro: inside the first page
    got = [ld[i] for i in range(10, 20)]
    assert got == expect[10:20]  # was b"" (raw) or EOFError (pickle)
    assert ld.stats()["regenerations"] == 1
    assert os.path.getsize(path) > 95
    assert [ld[i] for i in range(N)] == expect
    ld.close()


@pytest.mark.parametrize("serializer", ["raw", "pickle"])
def test_truncated_without_source_raises_corrupt(tmp_path, serializer):
    root = str(tmp_path / "r")
    ld = open_loader(root, serializer)
    expect = want(serializer)
    assert list(ld) == expect
    ld.close()
    reader = open_loader(root, serializer, source=False)
    assert [reader[i] for i in range(N)] == expect  # mapped now
    os.truncate(shard_path(root, 10), 95)
    for i in range(10, 20):
        try:
            got = reader[i]
        except bagcache.CorruptError as e:  # at the read, or at the reopen
            assert "10.20.bag" in str(e) and "no source" in str(e), str(e)
        else:  # its bytes lie before the cut: still the record's
            assert got == expect[i]
    with pytest.raises(bagcache.CorruptError):
        reader[19]  # its limits are past the cut
    assert isinstance(bagcache.CorruptError("x"), ValueError)
    # The file is left for inspection; the other shards are unaffected.
    assert os.path.getsize(shard_path(root, 10)) == 95
    assert [reader[i] for i in range(20, N)] == expect[20:]
    reader.close()
