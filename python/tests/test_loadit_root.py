"""LoadIt's root_dir: created with its missing parents as loadit does
(Path.mkdir(parents=True)), a pathlib.Path works, "~" is not expanded, a
file in the way is a clear error, and a read-only LoadIt creates nothing."""

import os
import pathlib
import stat

import pytest

from bagcache import LoadIt

from loadit_helpers import Source, item


def model(n):
    return [item(i) for i in range(n)]


def test_missing_parents_are_created(tmp_path):
    root = tmp_path / "cache" / "project" / "dataset-v2"
    old = os.umask(0o027)
    try:
        loader = LoadIt(Source(30), root_dir=str(root), max_shard_length=8)
    finally:
        os.umask(old)
    with loader:
        assert len(loader) == 30
        assert list(loader) == model(30)
    for d in (tmp_path / "cache", tmp_path / "cache" / "project", root):
        st = os.stat(d)
        assert stat.S_ISDIR(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o750  # 0755 less the umask, like the root
    assert sorted(os.listdir(root / "shards")) == ["0.8.bag", "16.24.bag", "24.30.bag", "8.16.bag"]
    # Reopened read-only through the same (existing) path.
    with LoadIt(str(root)) as again:
        assert again[29] == item(29)


def test_pathlib_root_and_no_tilde_expansion(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    root = pathlib.Path("~") / ".cache" / "proj"  # relative: "~" is a plain name
    with LoadIt(root, Source(5), max_shard_length=2) as loader:
        assert loader.root_dir == os.path.join("~", ".cache", "proj")
        assert list(loader) == model(5)
    assert (tmp_path / "~" / ".cache" / "proj" / "metadata.json").is_file()
    assert not (tmp_path / "home").exists()


def test_a_file_in_the_way(tmp_path):
    (tmp_path / "f").write_text("not a directory")
    with pytest.raises(ValueError, match=r"/f: exists and is not a directory"):
        LoadIt(str(tmp_path / "f" / "x" / "y"), Source(5))
    assert (tmp_path / "f").read_text() == "not a directory"


def test_read_only_creates_nothing(tmp_path):
    with pytest.raises(FileNotFoundError, match="no cache there"):
        LoadIt(str(tmp_path / "a" / "b"))
    assert not (tmp_path / "a").exists()
