"""The golden vectors (tests/data/bagz, made by the real bagz): read every
one, write every one byte-exact, and get the reference's errors for the
corrupt ones (raising where bagz silently returns b'')."""

import shutil

import pytest

import bagcache as bagz

import bagz_data as bd

OK = bd.vectors(lambda v: v["expect"] == "ok")
OPEN_ERRORS = bd.vectors(lambda v: isinstance(v["expect"], dict) and "open_error" in v["expect"])
READ_ERRORS = bd.vectors(lambda v: isinstance(v["expect"], dict) and "len" in v["expect"])
SINGLE = bd.vectors(lambda v: "writer" in v)
SHARDS = [(v, s) for v in bd.vectors(lambda v: "shards" in v and v["id"] in (
    "sharded_concat", "interleaved", "sharded_separate_zstd")) for s in v["shards"]]


def spec(golden, v):
    """The vector's file spec with every comma-separated element made
    absolute (the manifest's are relative to the vector directory)."""
    return ",".join(str(golden / e) for e in v["open"].split(","))


def ids(vs):
    return [v["id"] for v in vs]


def test_manifest_is_complete():
    # Every kind of vector is exercised below; a renamed field would show here.
    assert len(OK) == 19 and len(OPEN_ERRORS) == 4 and len(READ_ERRORS) == 4
    assert len(SINGLE) == 13 and len(SHARDS) == 9


@pytest.mark.parametrize("v", OK, ids=ids(OK))
def test_read(golden, v):
    want = [bd.record_bytes(r) for r in v.get("records", [])]
    reader = bagz.Reader(spec(golden, v), bd.reader_options(v))
    assert len(reader) == len(want)
    assert [reader[i] for i in range(len(want))] == want
    assert list(reader) == want
    assert reader.read() == want
    assert reader.read_indices(list(range(len(want)))[::-1]) == want[::-1]
    assert [reader[-1 - i] for i in range(len(want))] == want[::-1]


@pytest.mark.parametrize("v", OK, ids=ids(OK))
def test_read_limits_in_memory(golden, v):
    want = [bd.record_bytes(r) for r in v.get("records", [])]
    options = bd.reader_options(v)
    options.limits_storage = bagz.LimitsStorage.IN_MEMORY
    reader = bagz.Reader(spec(golden, v), options)
    assert list(reader) == want
    assert [reader[i] for i in reversed(range(len(want)))] == want[::-1]


@pytest.mark.parametrize("v", SINGLE, ids=ids(SINGLE))
def test_write_byte_exact(tmp_path, v):
    name = v["files"][0]["path"]
    records = [bd.record_bytes(r) for r in v.get("records", [])]
    bd.write_records(tmp_path / name, records, bd.writer_options(v["writer"]["options"]))
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == sorted(f["path"] for f in v["files"])
    if bd.byte_exact(v["writer"]["byte_exact"]):
        for f in v["files"]:
            assert (tmp_path / f["path"]).stat().st_size == f["size"]
            assert bd.sha256_file(tmp_path / f["path"]) == f["sha256"], f["path"]
    # Whatever the zstd version: the written file reads back as the vector.
    reader = bagz.Reader(str(tmp_path / name), bd.reader_options(v))
    assert list(reader) == records


@pytest.mark.parametrize(
    "v,shard", SHARDS, ids=[f"{v['id']}:{s['path']}" for v, s in SHARDS])
def test_write_shard_byte_exact(tmp_path, v, shard):
    records = [bd.record_bytes(r) for r in shard["records"]]
    bd.write_records(tmp_path / shard["path"], records, bd.writer_options(shard.get("options")))
    if bd.byte_exact(shard["byte_exact"]):
        for f in v["files"]:
            name = f["path"]
            if name == shard["path"] or name == "limits." + shard["path"]:
                assert bd.sha256_file(tmp_path / name) == f["sha256"], name


def test_written_shards_read_as_a_set(tmp_path):
    v = bd.vectors(lambda v: v["id"] == "sharded_separate_zstd")[0]
    for shard in v["shards"]:
        records = [bd.record_bytes(r) for r in shard["records"]]
        bd.write_records(tmp_path / shard["path"], records, bd.writer_options(shard.get("options")))
    reader = bagz.Reader(str(tmp_path / "sepz@*.bagz"), bd.reader_options(v))
    assert list(reader) == [bd.record_bytes(r) for r in v["records"]]


@pytest.mark.parametrize("v", OPEN_ERRORS, ids=ids(OPEN_ERRORS))
def test_open_error(golden, v):
    assert v["expect"]["open_error"] == "ValueError"
    with pytest.raises(ValueError):
        bagz.Reader(spec(golden, v), bd.reader_options(v))


@pytest.mark.parametrize("v", READ_ERRORS, ids=ids(READ_ERRORS))
def test_read_errors(golden, v):
    expect = v["expect"]
    reader = bagz.Reader(spec(golden, v), bd.reader_options(v))
    assert len(reader) == expect["len"]
    for index, hexdata in expect.get("read_ok", {}).items():
        assert reader[int(index)] == bytes.fromhex(hexdata)
    for index, exc in expect["read_error"].items():
        assert exc == "ValueError"
        with pytest.raises(ValueError):
            reader[int(index)]
        with pytest.raises(ValueError):
            reader.read_indices([int(index)])
    # Bulk reads raise too (bagz returns b'' for the corrupt zstd vectors).
    assert expect["read_all_error"] == "ValueError"
    with pytest.raises(ValueError):
        reader.read()
    with pytest.raises(ValueError):
        list(reader)
    with pytest.raises(ValueError):
        reader.read_range(0, len(reader))
    with pytest.raises(ValueError):
        list(reader.read_indices_iter(range(len(reader))))
    with pytest.raises(ValueError):
        bagz.Index(reader)


def test_non_monotonic_limits_in_memory(golden):
    # Limits [6, 3, 15]: bagz returns b"def123catcat" for index 2.  With the
    # limits in memory bagcache validates them all and refuses the record.
    reader = bagz.Reader(
        str(golden / "corrupt/non_monotonic.bag"),
        bagz.Reader.Options(limits_storage=bagz.LimitsStorage.IN_MEMORY),
    )
    assert len(reader) == 3
    assert reader[0] == b"abcdef"
    for i in (1, 2):
        with pytest.raises(ValueError, match="corrupt"):
            reader[i]
    with pytest.raises(ValueError, match=r"^index 1: .*non_monotonic\.bag"):
        reader.read()
    with pytest.raises(ValueError, match=r"^index 2: "):
        reader.read_indices([2, 0, 2])


def test_corrupt_iteration_yields_records_before_the_error(golden):
    # bad_frame.bagz: record 0 is corrupt, record 1 is fine; reading from 1
    # works, and iterating from 0 raises before yielding anything.
    reader = bagz.Reader(str(golden / "corrupt/bad_frame.bagz"))
    assert list(reader[1:]) == [b"hello world"]
    it = iter(reader)
    with pytest.raises(ValueError):
        next(it)


def test_tail_file_opened_with_separate_limits(golden):
    with pytest.raises(FileNotFoundError):
        bagz.Reader(
            str(golden / "abc_tail.bag"),
            bagz.Reader.Options(limits_placement=bagz.LimitsPlacement.SEPARATE),
        )


def test_dictionary_needed_for_dict_vector(golden, tmp_path):
    v = bd.vectors(lambda v: v["id"] == "dict_raw_zstd")[0]
    want = [bd.record_bytes(r) for r in v["records"]]
    dictionary = v["reader_options"]["compression"]["zstd"]["dictionary"]
    # str and bytes dictionaries are the same dictionary.
    for d in (dictionary, dictionary.encode()):
        reader = bagz.Reader(
            str(golden / "dict_raw.bagz"),
            bagz.Reader.Options(compression=bagz.CompressionZstd(dictionary=d)),
        )
        assert list(reader) == want
    # Without it the non-empty records cannot be decoded.
    # (Record 2, 100 KiB of text, refers to the dictionary's content.)
    reader = bagz.Reader(str(golden / "dict_raw.bagz"))
    assert reader[0] == b""
    with pytest.raises(ValueError):
        reader[2]
    with pytest.raises(ValueError):
        reader.read()
    # The set copied elsewhere reads the same (nothing depends on the path).
    shutil.copy(golden / "dict_raw.bagz", tmp_path / "copy.bagz")
    reader = bagz.Reader(
        str(tmp_path / "copy.bagz"),
        bagz.Reader.Options(compression=bagz.CompressionZstd(dictionary=dictionary)),
    )
    assert reader.read() == want
