"""Writer: bagz's API (str/bytes records, flush, idempotent close, context
manager, errors) and bagcache's differences (buffers accepted, atomic
publication at close, closing an unclosed writer when collected)."""

import gc
import warnings

import pytest

import bagcache as bagz

import bagz_data as bd


def test_write_str_bytes_and_buffers(tmp_path):
    np = pytest.importorskip("numpy")
    path = tmp_path / "w.bag"
    with bagz.Writer(path) as writer:
        writer.write(b"bytes")
        writer.write("str \u00e9")
        writer.write(bytearray(b"bytearray"))
        writer.write(memoryview(b"xmemoryview")[1:])
        writer.write(np.arange(3, dtype=np.uint8))
        writer.write(b"")
        writer.write("")
        assert writer.num_records == 7
    assert list(bagz.Reader(path)) == [
        b"bytes", "str \u00e9".encode(), b"bytearray", b"memoryview",
        b"\x00\x01\x02", b"", b""]


def test_write_rejects_non_buffers(tmp_path):
    with bagz.Writer(tmp_path / "w.bag") as writer:
        for bad in (1, 1.5, None, [b"a"], object()):
            with pytest.raises(TypeError, match="record must be str or bytes"):
                writer.write(bad)
        with pytest.raises(TypeError):  # not contiguous
            writer.write(memoryview(b"abcdef")[::2])
        writer.write(b"ok")
    assert list(bagz.Reader(tmp_path / "w.bag")) == [b"ok"]


def test_close_is_idempotent_and_final(tmp_path):
    path = tmp_path / "w.bagz"
    writer = bagz.Writer(path)
    writer.write(b"a")
    writer.flush()
    assert not writer.closed
    writer.close()
    writer.close()
    assert writer.closed
    with pytest.raises(ValueError, match="Closed"):
        writer.write(b"b")
    with pytest.raises(ValueError, match="Closed"):
        writer.flush()
    assert list(bagz.Reader(path)) == [b"a"]


def test_nothing_visible_until_close(tmp_path):
    path = tmp_path / "w.bag"
    sep = bagz.Writer.Options(limits_placement=bagz.LimitsPlacement.SEPARATE)
    writer = bagz.Writer(path, sep)
    writer.write(b"a")
    writer.flush()
    assert not path.exists() and not (tmp_path / "limits.w.bag").exists()
    writer.close()
    assert path.read_bytes() == b"a"
    assert (tmp_path / "limits.w.bag").read_bytes() == (1).to_bytes(8, "little")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["limits.w.bag", "w.bag"]


def test_existing_file_replaced_at_close(tmp_path):
    path = tmp_path / "w.bag"
    bd.write_records(path, [b"old"])
    writer = bagz.Writer(path)
    writer.write(b"new")
    assert list(bagz.Reader(path)) == [b"old"]
    writer.close()
    assert list(bagz.Reader(path)) == [b"new"]


def test_context_manager_closes_on_exception(tmp_path):
    path = tmp_path / "w.bag"
    with pytest.raises(RuntimeError, match="boom"):
        with bagz.Writer(path) as writer:
            writer.write(b"kept")
            raise RuntimeError("boom")
    assert writer.closed
    assert list(bagz.Reader(path)) == [b"kept"]


def test_unclosed_writer_is_closed_when_collected(tmp_path):
    path = tmp_path / "w.bag"
    writer = bagz.Writer(path)
    writer.write(b"r0")
    writer.write(b"r1")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del writer
        gc.collect()
    assert any(issubclass(w.category, ResourceWarning) for w in caught)
    assert list(bagz.Reader(path)) == [b"r0", b"r1"]


def test_writer_errors_are_value_errors(tmp_path):
    with pytest.raises(ValueError):
        bagz.Writer(tmp_path / "missing-dir" / "w.bag")
    with pytest.raises(TypeError):
        bagz.Writer(tmp_path / "w.bag", bagz.Reader.Options())
    with pytest.raises(TypeError):
        bagz.Writer(42)
    with pytest.raises(TypeError):
        bagz.Writer.Options(compression=bagz.LimitsPlacement.TAIL)
    blank = bagz.Writer.__new__(bagz.Writer)
    with pytest.raises(ValueError, match="not open"):
        blank.write(b"x")


def test_paths(tmp_path):
    import pathlib

    bd.write_records(tmp_path / "p.bag", [b"pathlib"])
    bd.write_records(str(tmp_path / "s.bag"), [b"str"])
    bd.write_records(pathlib.Path("/posix:" + str(tmp_path)) / "x.bag", [b"prefixed"])
    bd.write_records("posix:" + str(tmp_path / "y.bag"), [b"prefixed2"])
    assert bagz.Reader(tmp_path / "p.bag")[0] == b"pathlib"
    assert bagz.Reader(tmp_path / "s.bag")[0] == b"str"
    assert bagz.Reader(tmp_path / "x.bag")[0] == b"prefixed"
    assert bagz.Reader(tmp_path / "y.bag")[0] == b"prefixed2"
    # A sharded spec is refused (bagz writes it as a literal name, a file
    # no Reader of the spec opens): test_loadit_ux.py has the details.
    with pytest.raises(ValueError, match="sharded spec"):
        bd.write_records(tmp_path / "at@2.bag", [b"at"])
    assert not (tmp_path / "at@2.bag").exists()


@pytest.mark.parametrize("level", [-5, 0, 1, 3, 19])
def test_zstd_levels(tmp_path, level):
    records = [b"level %d " % level * 200, b"", b"x"]
    options = bagz.Writer.Options(compression=bagz.CompressionZstd(level=level))
    bd.write_records(tmp_path / "l.bag", records, options)
    assert (tmp_path / "l.bag").read_bytes()[:4] == b"\x28\xb5\x2f\xfd"
    reader = bagz.Reader(tmp_path / "l.bag", bagz.Reader.Options(
        compression=bagz.CompressionZstd()))
    assert list(reader) == records


def test_level_zero_is_level_three(tmp_path):
    records = [b"same bytes " * 300, b"tiny", b"more text " * 50]
    for level in (0, 3):
        options = bagz.Writer.Options(compression=bagz.CompressionZstd(level=level))
        bd.write_records(tmp_path / f"{level}.bagz", records, options)
    assert (tmp_path / "0.bagz").read_bytes() == (tmp_path / "3.bagz").read_bytes()


def test_dictionary_str_and_bytes(tmp_path):
    dictionary = "shared dictionary words: alpha beta gamma delta " * 4
    records = [b"alpha beta gamma delta " * 3, b"", b"delta gamma"]
    for i, d in enumerate((dictionary, dictionary.encode())):
        options = bagz.Writer.Options(compression=bagz.CompressionZstd(dictionary=d))
        bd.write_records(tmp_path / f"d{i}.bagz", records, options)
    assert (tmp_path / "d0.bagz").read_bytes() == (tmp_path / "d1.bagz").read_bytes()
    reader = bagz.Reader(tmp_path / "d0.bagz", bagz.Reader.Options(
        compression=bagz.CompressionZstd(dictionary=dictionary.encode())))
    assert list(reader) == records
    with pytest.raises(TypeError):
        bagz.CompressionZstd(dictionary=5)
    with pytest.raises(TypeError):
        bagz.CompressionZstd(level="3")
    assert bagz.CompressionZstd(3, "ab") == bagz.CompressionZstd(3, b"ab")
    assert bagz.CompressionZstd() != bagz.CompressionNone()


def test_separate_then_read_as_tail_fails(tmp_path):
    sep = bagz.Writer.Options(limits_placement=bagz.LimitsPlacement.SEPARATE)
    bd.write_records(tmp_path / "s.bag", [b"abc", b"de"], sep)
    with pytest.raises(ValueError):
        list(bagz.Reader(tmp_path / "s.bag"))
    assert list(bagz.Reader(tmp_path / "s.bag", bagz.Reader.Options(
        limits_placement=bagz.LimitsPlacement.SEPARATE))) == [b"abc", b"de"]
