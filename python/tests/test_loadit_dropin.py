"""LoadIt on first contact: what loadit users write (loadit 0.0.8's own
test suite and README habits), run through bagcache unchanged."""

import logging
import math
import os

import pytest

from bagcache import LoadIt

from loadit_helpers import Seekable, Source, item

np = pytest.importorskip("numpy")


def model(n):
    return [item(i) for i in range(n)]


# ---- memory_limit: any real number of bytes, or a size string ----------------


@pytest.mark.parametrize("limit, expected", [
    (0.5 * 2**30, 2**29),              # loadit's tests: 10 * 64 * 1234.5 and the like
    (16e9, 16_000_000_000),
    (12345.9, 12345),                  # rounded down
    (1, 1),
    (1.0, 1),
    (np.float64(3e6 + 0.75), 3_000_000),
    (np.int64(2**20), 2**20),
    (np.uint32(2**20), 2**20),
    ("16gb", 16 * 2**30),
    ("512MB", 512 * 2**20),
    (" 3kb ", 3 * 2**10),
])
def test_memory_limit_accepts_real_numbers_and_sizes(tmp_path, limit, expected):
    loader = LoadIt(str(tmp_path / "r"), Source(20), max_shard_length=5, memory_limit=limit)
    assert loader.stats()["disk_limit"] == expected
    if expected >= 2**20:
        assert list(loader) == model(20)
    loader.close()


@pytest.mark.parametrize("limit, error", [
    (-1, ValueError), (-0.5, ValueError), (0, ValueError), (0.5, ValueError),
    (math.nan, ValueError), (math.inf, ValueError), (-math.inf, ValueError),
    (np.float64("nan"), ValueError), (2.0**64, ValueError), (2**64 - 1, ValueError),
    ("0gb", ValueError), ("1.5xb", ValueError), ("16 t b", ValueError), ("lots", ValueError),
    ("gb", ValueError), ("1e3", ValueError), ("-1k", ValueError), ("1k\0", ValueError),
    (True, TypeError), ([1], TypeError), (b"16gb", TypeError), (1 + 2j, TypeError),
])
def test_memory_limit_rejects_what_is_not_a_size(tmp_path, limit, error):
    with pytest.raises(error, match="memory_limit"):
        LoadIt(str(tmp_path / "r"), Source(20), memory_limit=limit)
    assert not os.path.exists(tmp_path / "r")  # checked before anything is written


# ---- reopening with the arguments a root was filled with --------------------------


def test_reopen_without_source_with_the_fill_options(tmp_path):
    kw = dict(max_shard_length=16, max_cache_size=5, max_workers=10,
              iterator_thread_safe=True, memory_limit=None)
    filled = LoadIt(create_iter=Source(100), root_dir=tmp_path, **kw)
    assert list(filled) == model(100)
    reader = LoadIt(create_iter=None, root_dir=tmp_path, **kw)
    assert reader.max_workers == 10
    assert list(reader) == model(100) and len(reader) == 100
    # loadit's own check still holds with a source and without the opt-in.
    with pytest.raises(ValueError, match="iterator_thread_safe"):
        LoadIt(create_iter=None, root_dir=tmp_path, max_workers=10)


# ---- loader.memory_cache -----------------------------------------------------------


def test_memory_cache_size_is_the_open_shards(tmp_path):
    loader = LoadIt(str(tmp_path), Source(200), max_shard_length=10, max_cache_size=5,
                    preload_fn=None)
    assert loader.memory_cache.size() == 0
    for k in range(3):
        loader[10 * k]
    assert loader.memory_cache.size() == 3
    assert loader.memory_cache._cache_miss_count == 3
    for k in range(3, 20):
        loader[10 * k + 1]
        assert loader.memory_cache.size() <= 5
    assert loader.memory_cache.size() == 5
    assert loader.memory_cache._cache_miss_count == 20
    # Hits in an open shard open nothing.
    for i in range(190, 200):
        loader[i]
    assert loader.memory_cache._cache_miss_count == 20
    loader.close()


def test_memory_cache_bound_holds_under_threads(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    loader = LoadIt(str(tmp_path), Source(400), max_shard_length=8, max_cache_size=3)
    assert list(loader) == model(400)

    def read(seed):
        rng = np.random.default_rng(seed)
        for i in rng.integers(0, 400, 300):
            assert loader[int(i)] == item(int(i))

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(read, range(4)))
    # Readers beyond the bound are dropped when the next shard opens, once
    # no read uses them: with the threads done, the bound holds.
    loader[0]
    assert loader.memory_cache.size() <= 3
    loader.close()


# ---- the notice about keeping a root's layout -------------------------------------


def _notices(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "bagcache"]


def test_no_notice_when_reopening_with_no_options(tmp_path, caplog, capfd):
    # Notices go to the logger "bagcache" (and never to fd 2 directly).
    caplog.set_level(logging.WARNING, logger="bagcache")
    root = str(tmp_path)
    with LoadIt(root, Source(50), max_shard_length=10, compression="zstd") as loader:
        assert list(loader) == model(50)
    assert LoadIt(root, Source(50), max_shard_length=10, compression="zstd")[3] == item(3)
    assert _notices(caplog) == [] and "notice" not in capfd.readouterr().err
    for kw in ({}, dict(max_shard_length="64mb"), dict(compression=None)):
        loader = LoadIt(root, **kw)
        assert loader[49] == item(49) and len(loader) == 50
        loader.close()
        loader = LoadIt(root, Source(50), **kw)
        assert loader[7] == item(7)
        loader.close()
    assert _notices(caplog) == [] and "notice" not in capfd.readouterr().err


@pytest.mark.parametrize("kw, says", [
    (dict(max_shard_length=7), "10 records"),
    (dict(compression="zstd"), "compression (none)"),
])
def test_notice_when_a_given_option_differs(tmp_path, caplog, kw, says):
    caplog.set_level(logging.WARNING, logger="bagcache")
    root = str(tmp_path)
    LoadIt(root, Source(50), max_shard_length=10).close()
    assert _notices(caplog) == []
    loader = LoadIt(root, Source(50), **kw)
    assert loader.shards.max_shard_length == 10 and loader[12] == item(12)
    said = _notices(caplog)
    assert len(said) == 1 and "keeping the existing cache's shard length" in said[0]
    assert says in said[0]
    loader.close()


# ---- loader.writer_pool ------------------------------------------------------------


def test_writer_pool_positions_as_loadit_tests_read_them(tmp_path):
    # loadit's test_uses_multiple_writers, on bagcache's passes (a seekable
    # source: a pass from 0 would keep the shards on its way to 11).
    loader = LoadIt(str(tmp_path), Seekable(1000), max_shard_length=16, max_cache_size=10,
                    max_workers=5, iterator_thread_safe=True, preload_fn=None)
    writers = loader.writer_pool.writers
    assert len(writers) == 5 and [w.current_idx for w in writers] == [-1] * 5
    assert loader[11 * 16] == item(11 * 16)
    assert writers[0].current_idx == 12 * 16 - 1 and writers[1].current_idx == -1
    assert loader[16] == item(16)  # behind the first pass: a second one
    assert writers[0].current_idx == 12 * 16 - 1
    assert writers[1].current_idx == 2 * 16 - 1
    loader.close()


# ---- finalize() ----------------------------------------------------------------------


def test_finalize_cuts_the_sequence_at_the_cached_shards(tmp_path):
    # loadit's test_set_length_from_shards.
    loader = LoadIt(create_iter=Source(16 * 100), root_dir=tmp_path, max_shard_length=16,
                    max_cache_size=5, max_workers=10, iterator_thread_safe=True,
                    preload_fn=None)
    for i in range(16):
        assert loader[i] == item(i)
    loader.finalize()
    assert len(loader) == 16 and loader.all_cached_to_disk()
    with pytest.raises(IndexError):
        loader[16]
    assert list(loader) == model(16)
    reader = LoadIt(create_iter=None, root_dir=tmp_path, max_shard_length=16,
                    max_cache_size=5, max_workers=10, iterator_thread_safe=True)
    assert len(reader) == 16 and reader[-1] == item(15)
    with open(tmp_path / "metadata.json") as f:
        meta = f.read()
    assert '"length": 16' in meta and '"length_final": true' in meta
    loader.finalize()  # once final, nothing changes
    assert len(loader) == 16


def test_finalize_uses_the_last_shard_present(tmp_path):
    loader = LoadIt(str(tmp_path), Source(100), max_shard_length=10, preload_fn=None)
    loader[35], loader[5]  # shards 3 and 0; 1 and 2 are regenerated on demand
    loader.finalize()
    assert len(loader) == 40 and list(loader) == model(40)
    empty = LoadIt(str(tmp_path / "e"), Source(100), max_shard_length=10)
    empty.finalize()
    assert len(empty) == 0 and list(empty) == []



# ---- the smallest workable limit counts the prefetch depth in use ---------------------


def test_loadit_suite_limit_of_ten_shards_with_ten_workers(tmp_path):
    # loadit's own fixtures: memory_limit of 10 shards, max_workers=10.  The
    # default preload_fn fills max_workers // 2 = 5 shards ahead: 7 shards
    # are workable, 10 are plenty.
    rec = 1000
    shard = 64 * (rec + 8)
    make = lambda: (bytes([i % 251]) * rec for i in range(2000))  # noqa: E731
    loader = LoadIt(str(tmp_path / "a"), make, max_shard_length=64, max_workers=10,
                    iterator_thread_safe=True, memory_limit=10 * shard, serializer="raw")
    rng = np.random.default_rng(3)
    for i in rng.integers(0, 2000, 60).tolist():
        assert loader[i] == bytes([i % 251]) * rec
        assert loader.shards.size() <= 10 * shard
    assert len(loader) == 2000 and loader[-10] == bytes([1990 % 251]) * rec
    loader.close()
    # A preload_fn of the user's may fill up to max_workers shards: 12 needed.
    custom = LoadIt(str(tmp_path / "b"), make, max_shard_length=64, max_workers=10,
                    iterator_thread_safe=True, memory_limit=10 * shard, serializer="raw",
                    preload_fn=lambda loader, i: [])
    with pytest.raises(ValueError, match="smallest workable limit"):
        custom[0]
    custom.close()
