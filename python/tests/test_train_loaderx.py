"""loaderx parity: ``import bagcache as loaderx`` runs loaderx's README as
written, with loaderx's names and behaviour (converter, NPDataset,
ARDataset/BagDataset, BaseDataset, DataLoader, Sampler and its modes)."""

import ast
import json
import os
import pathlib
import subprocess
import sys

import pytest

import bagcache
import bagcache as loaderx

np = pytest.importorskip("numpy")

TRAIN_NAMES = ("converter", "NPDataset", "ARDataset", "BagDataset", "BaseDataset",
               "DataLoader", "Sampler")


def test_names():
    for name in TRAIN_NAMES:
        assert name in bagcache.__all__
        assert getattr(loaderx, name).__doc__, name
    assert loaderx.BagDataset is loaderx.ARDataset
    assert issubclass(loaderx.ARDataset, loaderx.BaseDataset)
    assert issubclass(loaderx.NPDataset, loaderx.BaseDataset)
    assert (loaderx.Sampler.Mode.SEQUENTIAL, loaderx.Sampler.Mode.IID,
            loaderx.Sampler.Mode.EPOCH) == (0, 1, 2)


def test_stubs_describe_the_training_api():
    stub = pathlib.Path(bagcache.__file__).with_name("__init__.pyi")
    tree = ast.parse(stub.read_text(encoding="utf-8"))
    members = {}
    top = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            members[node.name] = {n.name for n in node.body
                                  if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
            members[node.name] |= {n.target.id for n in node.body
                                   if isinstance(n, ast.AnnAssign)}
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            top.add(node.name)
        if isinstance(node, ast.AnnAssign):
            top.add(node.target.id)
    assert set(TRAIN_NAMES) <= top
    for name in ("NPDataset", "ARDataset", "Sampler", "DataLoader"):
        public = {m for m in dir(getattr(loaderx, name)) if not m.startswith("_")}
        inherited = members.get("BaseDataset", set()) if "Dataset" in name else set()
        missing = public - members[name] - inherited
        assert not missing, f"{name}: {sorted(missing)} not in the stubs"


def test_import_without_numpy():
    code = "import sys; sys.modules['numpy'] = None; import bagcache; print(bagcache.DataLoader.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "DataLoader"


def test_readme_as_written(tmp_path, monkeypatch):
    """loaderx's README: convert, then the Quick Start loop."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    os.mkdir("xsub")
    np.save("train_data.npy", rng.standard_normal((1000, 3, 4)).astype(np.float32))
    np.save("xsub/train_label.npy", rng.integers(0, 60, 1000))

    train_data = np.load('train_data.npy', mmap_mode='r')
    loaderx.converter(train_data, 'train_data')

    dataset = loaderx.ARDataset('train_data')
    labelset = loaderx.NPDataset('xsub/train_label.npy')

    loader = loaderx.DataLoader(dataset, labelset)

    for i, batch in enumerate(loader):
        if i >= 256:
            break

    assert batch['data'].shape == (256, 3, 4)
    assert batch['label'].shape == (256,)
    loader.close()


@pytest.mark.parametrize("compression", ["zstd", "none"])
@pytest.mark.parametrize("n, blocksize", [(0, 4), (1, 4), (7, 7), (23, 7), (100, 4096)])
def test_converter_round_trip(tmp_path, n, blocksize, compression):
    a = (np.arange(n * 6, dtype=np.int16).reshape(n, 2, 3) * 7 - 3)
    loaderx.converter(a, tmp_path / "d", blocksize=blocksize, compression=compression)
    meta = json.loads((tmp_path / "d" / "meta.json").read_text())
    assert meta["length"] == n and meta["shape"] == [2, 3] and meta["dtype"] == "<i2"
    shards = (n + blocksize - 1) // blocksize
    ext = ".bagz" if compression == "zstd" else ".bag"
    assert sorted(os.listdir(tmp_path / "d")) == sorted(
        ["meta.json"] + [f"data-{i:05d}-of-{shards:05d}{ext}" for i in range(shards)])
    with loaderx.ARDataset(tmp_path / "d") as ds:
        assert len(ds) == n
        for i in range(n):
            np.testing.assert_array_equal(ds[i], a[i])
        if n:
            idx = np.random.default_rng(n).integers(0, n, 50)
            got = ds.__getitems__(idx)
            assert got.shape == (50, 2, 3) and got.dtype == a.dtype
            np.testing.assert_array_equal(got, a[idx])
        assert ds.__getitems__([]).shape == (0, 2, 3)
    # One record per row, raw bytes: any Bagz reader sees the rows.
    if n:
        r = bagcache.Reader(str(tmp_path / "d" / f"data@{shards}{ext}"))
        assert [bytes(x) for x in r] == [row.tobytes() for row in a]


def test_converter_dtypes(tmp_path):
    structured = np.zeros(5, dtype=[("x", "<f8"), ("y", "u1", (3,))])
    structured["x"] = np.arange(5) / 3
    structured["y"] = np.arange(15).reshape(5, 3)
    for k, a in enumerate([np.arange(10, dtype=">u4"), np.arange(12.0).reshape(3, 2, 2),
                           structured, np.array([b"ab", b"cde"]), np.arange(4) > 1]):
        loaderx.converter(a, tmp_path / str(k))
        ds = loaderx.ARDataset(tmp_path / str(k))
        assert ds.dtype == a.dtype
        got = ds.__getitems__(np.arange(len(a))[::-1])
        assert got.dtype == a.dtype
        np.testing.assert_array_equal(got, a[::-1])


def test_converter_directory_rules(tmp_path):
    a = np.arange(10)
    loaderx.converter(a, tmp_path / "d")
    with pytest.raises(ValueError, match="not empty"):
        loaderx.converter(a, tmp_path / "d")
    loaderx.converter(a[:3] + 100, tmp_path / "d", replace=True)
    np.testing.assert_array_equal(loaderx.ARDataset(tmp_path / "d").__getitems__([0, 2]),
                                  [100, 102])
    (tmp_path / "e").mkdir()
    loaderx.converter(a, tmp_path / "e")  # an empty directory is fine
    assert len(loaderx.ARDataset(tmp_path / "e")) == 10


def test_ardataset_damaged_metadata(tmp_path):
    loaderx.converter(np.arange(10), tmp_path / "d", blocksize=4)
    meta = tmp_path / "d" / "meta.json"
    m = json.loads(meta.read_text())
    meta.write_text(json.dumps(dict(m, length=11)))
    with pytest.raises(ValueError, match="11"):
        loaderx.ARDataset(tmp_path / "d")
    meta.write_text(json.dumps({"length": 3}))
    with pytest.raises(ValueError):
        loaderx.ARDataset(tmp_path / "d")


def test_npdataset(tmp_path):
    a = np.arange(40).reshape(10, 4)
    np.save(tmp_path / "a.npy", a)
    with loaderx.NPDataset(tmp_path / "a.npy") as ds:
        assert len(ds) == 10
        np.testing.assert_array_equal(ds[3], a[3])
        np.testing.assert_array_equal(ds.__getitems__(np.array([9, 0, 9], np.uint64)),
                                      a[[9, 0, 9]])
    with pytest.raises(ValueError, match="closed"):
        len(ds)


def test_closed_dataset(tmp_path):
    loaderx.converter(np.arange(10), tmp_path / "d")
    ds = loaderx.ARDataset(tmp_path / "d")
    ds.close()
    with pytest.raises(ValueError, match="closed"):
        ds.__getitems__([1])


def test_mismatched_lengths(tmp_path):
    with pytest.raises(ValueError, match="same length"):
        loaderx.DataLoader(loaderx.NPDataset(np.zeros((5, 2))),
                           loaderx.NPDataset(np.zeros(6)))


def test_endless_loader_has_no_len():
    with loaderx.DataLoader(loaderx.NPDataset(np.zeros((5, 2))),
                            loaderx.NPDataset(np.zeros(5)), batch_size=2) as loader:
        with pytest.raises(TypeError):
            len(loader)


def loaderx_sequential(length, batch_size, steps):
    """loaderx's Zig sampler, SEQUENTIAL: (cursor + i) % length."""
    cursor, out = 0, []
    for _ in range(steps):
        out.append([(cursor + i) % length for i in range(batch_size)])
        cursor = (cursor + batch_size) % length
    return out


@pytest.mark.parametrize("length, batch_size", [(10, 4), (10, 10), (3, 8), (1, 5), (7, 3)])
def test_sequential_wraps_circularly(length, batch_size):
    s = loaderx.Sampler(length, batch_size, loaderx.Sampler.Mode.SEQUENTIAL)
    got = []
    for _ in range(12):
        s.next()
        assert s.indices.dtype == np.uint64
        got.append(s.indices.tolist())
    assert got == loaderx_sequential(length, batch_size, 12)


def test_sequential_loader_batches(tmp_path):
    a = np.arange(7 * 2).reshape(7, 2)
    loaderx.converter(a, tmp_path / "d", blocksize=3)
    labels = np.arange(7) * 10
    with loaderx.DataLoader(loaderx.ARDataset(tmp_path / "d"), loaderx.NPDataset(labels),
                            num_workers=3, batch_size=3, mode=0) as loader:
        for idx in loaderx_sequential(7, 3, 10):
            b = next(loader)
            np.testing.assert_array_equal(b["data"], a[idx])
            np.testing.assert_array_equal(b["label"], labels[idx])


def test_iid_is_uniform_with_replacement():
    n, b = 10, 1000
    s = loaderx.Sampler(n, b, loaderx.Sampler.Mode.IID, seed=7)
    draws = np.concatenate([next(s).copy() for _ in range(20)])
    assert draws.min() >= 0 and draws.max() < n
    counts = np.bincount(draws.astype(np.int64), minlength=n)
    # 20000 draws: each count is 2000 +- 3 sd (sd ~ 42); far outside means broken.
    assert np.all(np.abs(counts - 2000) < 250), counts
    again = loaderx.Sampler(n, b, 1, seed=7)
    np.testing.assert_array_equal(next(again), draws[:b])
    other = loaderx.Sampler(n, b, 1, seed=8)
    assert not np.array_equal(next(other), draws[:b])


def test_iid_large_length_in_range():
    n = 2**40 + 3
    s = loaderx.Sampler(n, 4096, 1, seed=1)
    d = next(s)
    assert int(d.max()) < n and len(set(d.tolist())) == len(d)
