"""Errors: the exception classes and messages bagz users rely on."""

import os

import pytest

import bagcache as bagz

import bagz_data as bd


def test_file_not_found(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="not_a_file.bagz"):
        bagz.Reader("not_a_file.bagz")
    with pytest.raises(FileNotFoundError, match="missing"):
        bagz.Reader(tmp_path / "missing@3.bag")
    with pytest.raises(FileNotFoundError):
        bagz.Reader(tmp_path / "nothing@*.bag")
    with pytest.raises(FileNotFoundError):
        bagz.Reader("my:file.bag")  # an unknown file-system prefix


def test_directory_is_a_value_error(tmp_path):
    os.mkdir(tmp_path / "d.bag")
    with pytest.raises(ValueError):
        bagz.Reader(tmp_path / "d.bag")


@pytest.mark.parametrize("content,match", [
    (b"\x01\x02\x03", ""),
    ((100).to_bytes(8, "little"), ""),
    (b"abc" + (3).to_bytes(8, "little") + b"\x00", ""),
])
def test_malformed_tails(tmp_path, content, match):
    (tmp_path / "bad.bag").write_bytes(content)
    with pytest.raises(ValueError, match=match):
        bagz.Reader(tmp_path / "bad.bag")


def test_corrupt_records_raise_in_every_bulk_read(tmp_path):
    # A good file, then the frame of record 3 damaged in place.
    records = [b"record %d " % i * 40 for i in range(6)]
    bd.write_records(tmp_path / "c.bagz", records)
    raw = bytearray((tmp_path / "c.bagz").read_bytes())
    n = len(records)
    limits = [int.from_bytes(raw[len(raw) - 8 * (n - k):len(raw) - 8 * (n - k - 1)], "little")
              for k in range(n)]
    start = limits[2]
    raw[start + 6:start + 12] = b"\xff" * 6  # inside the frame header / block
    (tmp_path / "c.bagz").write_bytes(bytes(raw))
    reader = bagz.Reader(tmp_path / "c.bagz")
    assert [reader[i] for i in (0, 1, 2, 4, 5)] == [records[i] for i in (0, 1, 2, 4, 5)]
    with pytest.raises(ValueError, match="record 3"):
        reader[3]
    bulk = [
        reader.read,
        lambda: list(reader),
        lambda: reader.read_range(1, 4),
        lambda: reader.read_indices([5, 3, 0]),
        lambda: list(reader.read_indices_iter([0, 3])),
        lambda: list(reader.read_range_iter(0, 6)),
        lambda: reader.count(b"x"),
        lambda: b"x" in reader,
        lambda: reader.index(b"x"),
        lambda: bagz.Index(reader),
        lambda: bagz.MultiIndex(reader),
        lambda: reader[::-1].read(),
    ]
    for call in bulk:
        with pytest.raises(ValueError, match="3"):
            call()
    # Records before the bad one come out of an iterator first.
    it = iter(reader)
    assert [next(it) for _ in range(3)] == records[:3]
    with pytest.raises(ValueError):
        next(it)
    assert reader.read_indices([0, 1, 4]) == [records[0], records[1], records[4]]
    assert reader.index(records[1]) == 1  # the scan stops before record 3


def test_index_errors_have_bagz_shapes(bag_path):
    reader = bagz.Reader(bag_path)
    with pytest.raises(IndexError, match=r"^index 25 out of range \[0, 20\)$"):
        reader[25]
    with pytest.raises(IndexError, match=r"^indices\[1\] = 25 out of range \[0, 20\)$"):
        reader.read_indices([3, 25, 3])
    with pytest.raises(IndexError, match=r"^Range \[25, 35\) out of range \[0, 20\]$"):
        reader.read_range(25, 10)
    with pytest.raises(IndexError):
        reader[2**70]
