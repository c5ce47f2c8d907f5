"""Every example of bagz's README, run against bagcache imported as bagz."""

from collections.abc import Iterable, Sequence

import pytest

import bagcache as bagz

import bagz_data


@pytest.fixture
def data_path(tmp_path):
    path = tmp_path / "data.bagz"
    bagz_data.write_records(path, [b"record %d" % i for i in range(30)])
    return path


def test_reader_example(data_path):
    np = pytest.importorskip("numpy")
    expected = [b"record %d" % i for i in range(30)]
    data = bagz.Reader(str(data_path))
    assert isinstance(data, Sequence)
    assert len(data) > 10

    fifth_value: bytes = data[5]
    assert fifth_value == expected[5]

    data_from_5 = data[5:]
    assert isinstance(data_from_5, bagz.Reader)
    assert data_from_5[0] == fifth_value

    fourth, second, tenth = data.read_indices([4, 2, 10])
    assert fourth == data[4] == expected[4]
    assert second == data[2] == expected[2]
    assert tenth == data[10] == expected[10]

    assert [record for record in data] == expected
    assert data.read() == expected
    assert [record for record in data[4:9]] == expected[4:9]
    assert data[4:9].read() == expected[4:9]

    def my_generator(size: int) -> Iterable[int]:
        rng = np.random.default_rng(42)
        while True:
            yield rng.integers(size).item()

    data_iter = data.read_indices_iter(my_generator(len(data)))
    want = my_generator(len(data))
    for _ in range(10):
        random_item: bytes = next(data_iter)
        assert random_item == expected[next(want)]


def test_reader_separate_limits_example(tmp_path):
    path = tmp_path / "data.bagz"
    options = bagz.Writer.Options(limits_placement=bagz.LimitsPlacement.SEPARATE)
    bagz_data.write_records(path, [b"a", b"bb", b""], options)
    assert (tmp_path / "limits.data.bagz").exists()
    data_separate_limits = bagz.Reader(
        str(path),
        bagz.Reader.Options(limits_placement=bagz.LimitsPlacement.SEPARATE),
    )
    assert list(data_separate_limits) == [b"a", b"bb", b""]
    with pytest.raises(ValueError):  # the same file read with tail limits
        bagz.Reader(str(path))


def test_index_example(tmp_path):
    path = tmp_path / "keys.bag"
    bagz_data.write_records(path, [b"x", b"example_key", b"y", b"example_key"])
    keys = bagz.Reader(str(path))
    index = bagz.Index(keys)
    key_index: int = index[b"example_key"]
    assert key_index == 1
    multi_index = bagz.MultiIndex(keys)
    all_indices: list = multi_index[b"example_key"]
    assert all_indices == [1, 3]


def test_writer_examples(tmp_path):
    def generate_records():
        return [b"first", b"", b"third" * 100]

    # Compression chosen by the extension: .bagz is zstd, .bag is not.
    with bagz.Writer(str(tmp_path / "data.bagz")) as writer:
        for d in generate_records():
            writer.write(d)
    with bagz.Writer(str(tmp_path / "data.bag")) as writer:
        for d in generate_records():
            writer.write(d)
    raw = (tmp_path / "data.bag").read_bytes()
    assert raw.startswith(b"first" + b"third" * 100)
    assert len(raw) == 5 + 500 + 3 * 8
    packed = (tmp_path / "data.bagz").read_bytes()
    assert packed.startswith(b"\x28\xb5\x2f\xfd")  # a zstd frame
    assert list(bagz.Reader(str(tmp_path / "data.bagz"))) == generate_records()

    # Explicit level: no longer chosen by the extension.
    with bagz.Writer(
        str(tmp_path / "level.bag"),
        bagz.Writer.Options(compression=bagz.CompressionZstd(level=3)),
    ) as writer:
        for d in generate_records():
            writer.write(d)
    assert (tmp_path / "level.bag").read_bytes()[:4] == b"\x28\xb5\x2f\xfd"
    reader = bagz.Reader(
        str(tmp_path / "level.bag"),
        bagz.Reader.Options(compression=bagz.CompressionZstd()),
    )
    assert list(reader) == generate_records()


def test_reader_options_listed_in_readme():
    options = bagz.Reader.Options()
    assert options.compression == bagz.CompressionAutoDetect()
    assert options.limits_placement == bagz.LimitsPlacement.TAIL
    assert options.limits_storage == bagz.LimitsStorage.ON_DISK
    assert options.sharding_layout == bagz.ShardingLayout.CONCATENATED
    assert options.max_parallelism == 100
    writer_options = bagz.Writer.Options()
    assert writer_options.compression == bagz.CompressionAutoDetect()
    assert writer_options.limits_placement == bagz.LimitsPlacement.TAIL


def test_pathlib_leading_slash_prefix(tmp_path):
    # README: "Path supports a leading slash to work well with pathlib."
    import pathlib

    root = pathlib.Path("/posix:" + str(tmp_path))
    bagz_data.write_records(root / "data.bagz", [b"p", b"q"])
    assert (tmp_path / "data.bagz").exists()
    assert list(bagz.Reader(root / "data.bagz")) == [b"p", b"q"]


def test_sharding_concatenated_example(golden):
    # Shards of sizes [8, 4, 0, 5]; record s<shard>-r<index>.
    data = bagz.Reader(str(golden / "shard@4.bag"))
    assert len(data) == 17
    mapping = {0: (0, 0), 1: (0, 1), 2: (0, 2), 8: (1, 0), 9: (1, 1), 15: (3, 3), 16: (3, 4)}
    for g, (shard, index) in mapping.items():
        assert data[g] == b"s%d-r%d" % (shard, index)


def test_sharding_interleaved_example(golden):
    # Shards of sizes [6, 6, 5]: global g is shard g % 3, index g // 3.
    data = bagz.Reader(
        str(golden / "inter@3.bag"),
        bagz.Reader.Options(sharding_layout=bagz.ShardingLayout.INTERLEAVED),
    )
    assert len(data) == 17
    assert list(data) == [b"g%02d" % g for g in range(17)]


def test_tail_limits_example(golden):
    raw = (golden / "abc_tail.bag").read_bytes()
    assert raw == (
        b"abcdef123catcat"
        + (6).to_bytes(8, "little")
        + (9).to_bytes(8, "little")
        + (15).to_bytes(8, "little")
    )
    assert list(bagz.Reader(str(golden / "abc_tail.bag"))) == [b"abcdef", b"123", b"catcat"]


def test_python_readme_example(tmp_path):
    # The example of python/README.md, with its file put in tmp_path.
    readme = bagz_data.golden_dir().parents[2] / "python" / "README.md"
    text = readme.read_text(encoding="utf-8")
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    assert "/tmp/data.bagz" in code
    exec(compile(code.replace("/tmp/data.bagz", str(tmp_path / "data.bagz")),
                 str(readme), "exec"), {})
    assert len(bagz.Reader(tmp_path / "data.bagz")) == 100
