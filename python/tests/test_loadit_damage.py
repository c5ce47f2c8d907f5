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
    # Published when a read returns: these tests damage the files at once.
    return LoadIt(root, gen, max_shard_length=R, serializer=serializer,
                  compression=compression, publish_behind=False)


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


# ---- item 3: bytes changed on disk ------------------------------------------


def flip(path, at, mask=0x04):
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)[0]
        f.seek(at)
        f.write(bytes([b ^ mask]))


@pytest.mark.parametrize("serializer", ["raw", "pickle"])
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_flipped_bit_is_regenerated(tmp_path, serializer, compression):
    root = str(tmp_path / "r")
    ld = open_loader(root, serializer, compression)
    expect = want(serializer)
    assert [ld[i] for i in range(N)] == expect
    path = shard_path(root, 30, compression)
    size = os.path.getsize(path)
    flip(path, 14)  # inside record 30 or 31, the file's size unchanged
    assert os.path.getsize(path) == size
    assert [ld[i] for i in range(30, 40)] == expect[30:40]  # was served as is
    assert ld.stats()["regenerations"] == 1
    assert [ld[i] for i in range(N)] == expect
    ld.close()


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_flipped_bit_without_source_raises_corrupt(tmp_path, compression):
    root = str(tmp_path / "r")
    ld = open_loader(root, "raw", compression)
    expect = want("raw")
    assert list(ld) == expect
    ld.close()
    reader = open_loader(root, "raw", compression, source=False)
    flip(shard_path(root, 30, compression), 14)
    failures = 0
    for i in range(30, 40):
        try:
            got = reader[i]
        except bagcache.CorruptError as e:
            assert "no source" in str(e), str(e)
            failures += 1
        else:
            assert got == expect[i]
    assert failures >= 1
    assert [reader[i] for i in range(40, N)] == expect[40:]
    reader.close()


def test_every_byte_of_a_raw_shard_is_checked(tmp_path):
    root = str(tmp_path / "r")
    ld = open_loader(root, "raw")
    expect = want("raw")
    assert list(ld) == expect
    ld.close()
    reader = open_loader(root, "raw", source=False)
    path = shard_path(root, 50)
    for at in range(os.path.getsize(path)):
        flip(path, at, 0x01)
        failures = 0
        for i in range(50, 60):
            try:
                got = reader[i]
            except bagcache.CorruptError:
                failures += 1
            else:
                assert got == expect[i], (at, i)
        assert failures >= 1, at
        flip(path, at, 0x01)
    assert [reader[i] for i in range(N)] == expect
    reader.close()


def test_writer_bytes_unchanged_by_cache_checksums(tmp_path):
    # Plain Writer files stay bagz's bytes: no zstd content checksum.
    path = str(tmp_path / "plain.bagz")
    with bagcache.Writer(path) as w:
        w.write(b"hello world")
    with open(path, "rb") as f:
        head = f.read(5)
    assert head[:4] == b"\x28\xb5\x2f\xfd" and not head[4] & 0x04
    # The cache's zstd shards do carry it, and the plain Reader reads them.
    root = str(tmp_path / "z")
    ld = open_loader(root, "raw", "zstd")
    assert list(ld) == want("raw")
    with open(shard_path(root, 0, "zstd"), "rb") as f:
        head = f.read(5)
    assert head[4] & 0x04
    assert list(bagcache.Reader(shard_path(root, 0, "zstd"))) == want("raw")[:R]
    ld.close()


def test_other_holder_of_the_old_mapping(tmp_path):
    # Two loaders on one root each map the shard (as two processes would).
    # The first to read a damaged record regenerates the shard; the other,
    # still mapping the damaged file, finds its record damaged too, leaves
    # the new file alone (another inode) and reads it: nobody is served
    # the damaged bytes and the shard is regenerated once.
    root = str(tmp_path / "r")
    a = open_loader(root, "raw")
    b = open_loader(root, "raw")
    expect = want("raw")
    assert list(a) == expect and [b[i] for i in range(N)] == expect
    path = shard_path(root, 30)
    flip(path, 14)
    assert [a[i] for i in range(30, 40)] == expect[30:40]
    assert a.stats()["regenerations"] == 1
    ino = os.stat(path).st_ino
    assert [b[i] for i in range(30, 40)] == expect[30:40]
    assert b.stats()["regenerations"] == 0
    assert os.stat(path).st_ino == ino  # the regenerated file was kept
    a.close()
    b.close()
