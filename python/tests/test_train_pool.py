"""The DataLoader's batch memory (_BatchPool, python/src/train/pool.c):
memory comes back to the pool only once nothing refers to the batch (a
view, a memoryview, a slice all keep it), so a pool never hands the same
memory to two live arrays; batches kept alive while later ones are made
keep their exact bytes."""

import gc
import random

import pytest

from bagcache import ARDataset, DataLoader, NPDataset, Sampler, _bagcache, converter

np = pytest.importorskip("numpy")

_BatchPool = _bagcache._BatchPool


def addr(a):
    return np.asarray(a).__array_interface__["data"][0]


def owner(a):
    """The object at the end of an array's chain of bases."""
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return a


def block_array(pool, n=None):
    """A uint8 array over a block of the pool (as ARDataset._gather does)."""
    return np.frombuffer(pool.take() if n is None else pool.take(n), np.uint8)


def test_a_dead_block_comes_back_and_is_reused():
    pool = _BatchPool(4096, 2)
    a = block_array(pool)
    assert a.flags.writeable and a.nbytes == 4096 and addr(a) % 64 == 0
    first = addr(a)
    del a
    assert pool.free == 1
    b = block_array(pool)
    assert addr(b) == first and pool.free == 0


@pytest.mark.parametrize("keeper", ["view", "slice", "memoryview", "reshape", "self"])
def test_anything_on_a_block_keeps_it_out_of_the_pool(keeper):
    pool = _BatchPool(1000, 4)
    a = block_array(pool)
    a[:] = np.arange(1000) % 251
    want = a.copy()
    kept = {"view": lambda: a.view(np.int8), "slice": lambda: a[10:20],
            "memoryview": lambda: memoryview(a), "reshape": lambda: a.reshape(10, 100),
            "self": lambda: a}[keeper]()
    del a
    gc.collect()
    assert pool.free == 0
    # Later blocks are other memory; the kept bytes do not change.
    later = [block_array(pool) for _ in range(6)]
    for x in later:
        x[:] = 0xEE
    base = np.frombuffer(kept, np.uint8) if keeper == "memoryview" else np.asarray(kept)
    assert all(not np.shares_memory(base, x) for x in later)
    flat = np.frombuffer(base.tobytes(), np.uint8)
    if keeper == "slice":
        np.testing.assert_array_equal(flat, want[10:20])
    else:
        np.testing.assert_array_equal(flat, want)
    del kept, base
    gc.collect()
    assert pool.free == 1
    del later
    assert pool.free == 4  # at most `keep` blocks are kept


def test_sizes_keep_and_clear():
    pool = _BatchPool(64, 1)
    assert (pool.nbytes, pool.keep, pool.free) == (64, 1, 0)
    odd = block_array(pool, 10)  # another size: its own memory, freed with it
    assert odd.nbytes == 10
    del odd
    assert pool.free == 0
    empty = block_array(pool, 0)
    assert empty.nbytes == 0
    del empty
    x, y = block_array(pool), block_array(pool)
    del x, y
    assert pool.free == 1
    pool.clear()
    assert pool.free == 0
    with pytest.raises(ValueError):
        pool.take(-1)
    with pytest.raises(ValueError):
        _BatchPool(-1, 1)
    with pytest.raises(ValueError):
        _BatchPool(1, -1)
    assert _BatchPool(8, 0).take() is not None


@pytest.fixture
def data(tmp_path):
    a = np.random.default_rng(5).integers(0, 256, (300, 8, 6), dtype=np.uint8)
    converter(a, tmp_path / "z", blocksize=64, compression="zstd")
    converter(a, tmp_path / "raw", blocksize=64, compression="none")
    labels = np.random.default_rng(6).integers(0, 1 << 30, (300, 2), dtype=np.int64)
    converter(labels, tmp_path / "labels", blocksize=50, compression="none")
    return a, labels, tmp_path


@pytest.mark.parametrize("kind", ["z", "raw"])
@pytest.mark.parametrize("workers, prefetch", [(0, 1), (1, 1), (4, 2), (3, 6)])
def test_kept_batches_keep_their_bytes(data, kind, workers, prefetch):
    a, labels, d = data
    with DataLoader(ARDataset(d / kind), ARDataset(d / "labels"), num_workers=workers,
                    batch_size=16, prefetch_size=prefetch, mode=1, seed=9) as loader:
        first = next(loader)
        # The batch's memory is a pool block (not np.empty's).
        assert type(owner(first["data"])).__name__ == "_BatchBlock"
        assert type(owner(first["label"])).__name__ == "_BatchBlock"
        second_row = next(loader)["data"][3]  # only a view of batch 1 kept
        rng = random.Random(workers * 10 + prefetch)
        kept = {0: first["data"], 1: second_row}
        kept_labels = {0: first["label"]}
        del first
        for k in range(2, 80):
            b = next(loader)
            if rng.random() < 0.2:  # some batches kept, most dropped at once
                kept[k] = b["data"]
                kept_labels[k] = b["label"]
            del b
        sample = Sampler(300, 16, 1, 9)
        idx = [next(sample).astype(np.int64) for _ in range(80)]
    np.testing.assert_array_equal(kept.pop(1), a[idx[1]][3])
    for k, arr in kept.items():
        np.testing.assert_array_equal(arr, a[idx[k]])
        np.testing.assert_array_equal(kept_labels[k], labels[idx[k]])
    live = list(kept.values()) + list(kept_labels.values())
    for i, x in enumerate(live):
        for y in live[i + 1:]:
            assert not np.shares_memory(x, y)


def test_batches_reuse_memory_when_dropped(data):
    a, _, d = data
    # IID: every batch is full (an epoch's short last batch would be a block
    # of its own size, not from the pool).
    with DataLoader(ARDataset(d / "z"), None, num_workers=2, batch_size=16,
                    prefetch_size=2, mode=1, seed=1) as loader:
        seen = set()
        for _ in range(60):
            b = next(loader)["data"]
            seen.add(addr(b))
            del b
    # Batches alive at once: at most prefetch_size + num_workers in the
    # pipeline (ready or being built) and the consumer's; so at most that
    # many blocks.
    assert len(seen) <= 2 + 2 + 1


def test_transform_and_mixed_datasets(data):
    a, labels, d = data
    with DataLoader(ARDataset(d / "raw"), NPDataset(labels), num_workers=2,
                    batch_size=16, mode=2, seed=4,
                    transform=lambda dl: (dl[0][:, ::2], dl[1])) as loader:
        kept = [next(loader) for _ in range(10)]
    sample = Sampler(300, 16, 2, 4)
    order = [next(sample).astype(np.int64) for _ in range(10)]
    for b, idx in zip(kept, order):
        np.testing.assert_array_equal(b["data"], a[idx][:, ::2])
        np.testing.assert_array_equal(b["label"], labels[idx])


def test_short_last_batch_and_close(data):
    a, _, d = data
    loader = DataLoader(ARDataset(d / "z"), None, num_workers=2, batch_size=64, mode=2,
                        seed=2, num_epochs=1)
    got = list(loader)
    order = [x.astype(np.int64) for x in Sampler(300, 64, 2, 2, num_epochs=1)]
    assert [len(b["data"]) for b in got] == [64, 64, 64, 64, 44]
    loader.close()  # frees the pool's free list; the batches stay
    for b, idx in zip(got, order):
        np.testing.assert_array_equal(b["data"], a[idx])
