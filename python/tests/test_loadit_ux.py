"""What a new user meets (issue 26): size strings as people write them, a
disk limit that None removes, a misspelled keyword, an index out of
range, a source that cannot be pickled, a sharded Writer spec, datasets a
DataLoader closed, a NondeterministicError that says how to start over,
a fingerprint of the source kept with the root, and a length= that is a
hint."""

import json
import os
import pickle
import subprocess
import sys
import warnings

import numpy as np
import pytest

import bagcache
from bagcache import CacheWarning, LoadIt, NondeterministicError, NotCachedError

from loadit_helpers import Shifted, Source, item


def model(n):
    return [item(i) for i in range(n)]


def meta(root):
    with open(os.path.join(root, "metadata.json")) as f:
        return json.load(f)


# ---- size strings -------------------------------------------------------------------


SIZES = [
    ("2g", 2 << 30), ("2G", 2 << 30), ("2GiB", 2 << 30), ("2 gib", 2 << 30), ("2GB", 2 << 30),
    ("512k", 512 << 10), ("512K", 512 << 10), ("512kb", 512 << 10), ("512KiB", 512 << 10),
    ("1.5 GB", 3 << 29), ("1.5gb", 3 << 29), ("0.5m", 1 << 19), (".5m", 1 << 19),
    ("64mb", 64 << 20), ("64MB", 64 << 20), (" 3kb ", 3 << 10), ("1t", 1 << 40),
    ("1.25 TiB", 5 << 38), ("2p", 2 << 50), ("100", 100), ("100b", 100), ("100 B", 100),
    ("1.9", 1),  # a fraction of a byte is rounded down
    ("1.0000001k", 1024), ("0.001k", 1),
]


@pytest.mark.parametrize("text, expected", SIZES)
def test_size_strings_people_write(tmp_path, text, expected):
    loader = LoadIt(str(tmp_path / "r"), Source(5), max_shard_length=5, memory_limit=text)
    assert loader.stats()["disk_limit"] == expected
    loader.close()
    assert bagcache._bagcache.parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "k", "1.5.2k", "1kk", "1 k b", "1e3", "-1k", "1x",
                                  "0x10", "1,5k", "16777216p", "18446744073709551616"])
def test_size_strings_refused(tmp_path, text):
    with pytest.raises(ValueError, match="memory_limit must be a number of bytes or a size"):
        LoadIt(str(tmp_path / "r"), Source(5), memory_limit=text)
    assert not os.path.exists(tmp_path / "r")


def test_shard_length_size_strings(tmp_path):
    loader = LoadIt(str(tmp_path / "r"), Source(400), max_shard_length="1.5 KiB")
    # The estimate is from the first 16 records: records of about 90 bytes
    # give some 16 a shard; what matters is that "1.5 KiB" is 1536 bytes.
    assert list(loader) == model(400)
    small = LoadIt(str(tmp_path / "s"), Source(400), max_shard_length="0.75k")
    assert 1 <= small.shards.max_shard_length < loader.shards.max_shard_length


# ---- memory_limit=None removes the stored limit ----------------------------------


def test_memory_limit_none_removes_the_stored_limit(tmp_path):
    root = str(tmp_path / "r")
    limited = LoadIt(root, Source(40), max_shard_length=5, memory_limit="10kb")
    assert limited.stats()["disk_limit"] == 10 << 10
    limited.close()
    kept = LoadIt(root, Source(40), max_shard_length=5)  # omitted: the stored one holds
    assert kept.stats()["disk_limit"] == 10 << 10
    # A copy of a loader that did not give a limit keeps the stored one too.
    copy = pickle.loads(pickle.dumps(kept))
    assert copy.stats()["disk_limit"] == 10 << 10
    copy.close()
    kept.close()
    free = LoadIt(root, Source(40), max_shard_length=5, memory_limit=None)
    assert free.stats()["disk_limit"] == 0
    assert list(free) == model(40) and free.stats()["shards_present"] == 8
    free.close()
    later = LoadIt(root, Source(40), max_shard_length=5)
    assert later.stats()["disk_limit"] == 0  # gone for the processes that follow
    later.close()


# ---- a misspelled keyword ----------------------------------------------------------


def test_misspelled_keyword_names_loadit_and_the_close_match(tmp_path):
    root = str(tmp_path / "r")
    with pytest.raises(TypeError) as e:
        LoadIt(root, Source(5), memory_limt="1g")
    assert str(e.value) == ("LoadIt() got an unexpected keyword argument 'memory_limt' "
                            "(did you mean 'memory_limit'?)")
    with pytest.raises(TypeError, match=r"'serialiser' \(did you mean 'serializer'\?\)"):
        LoadIt(root, Source(5), serialiser="raw")  # a keyword of bagcache's own
    with pytest.raises(TypeError, match=r"'zzzz'; its arguments are root_dir, create_iter"):
        LoadIt(root, Source(5), zzzz=1)
    with pytest.raises(TypeError, match=r"^LoadIt\(\) takes from 1 to 13 positional"):
        LoadIt(root, Source(5), *range(13))
    assert not os.path.exists(root)


# ---- an index out of range names the root ------------------------------------------


def test_index_out_of_range_names_the_root(tmp_path):
    root = str(tmp_path / "r")
    loader = LoadIt(root, Source(30), max_shard_length=10)
    for i in (-31, -100):  # the length is found first, then refused
        with pytest.raises(IndexError) as e:
            loader[i]
        assert str(e.value) == f"{root}: index {i} out of range [-30, 30)"
    for i in (30, 100):
        with pytest.raises(IndexError) as e:
            loader[i]
        assert str(e.value) == f"{root}: index {i} out of range [0, 30)"
    view = loader[5:10]
    with pytest.raises(IndexError) as e:
        view[5]
    assert str(e.value) == f"{root} (a view of it): index 5 out of range [0, 5)"
    with pytest.raises(IndexError) as e:
        view[-6]
    assert str(e.value) == f"{root} (a view of it): index -6 out of range [-5, 5)"
    # A view's index that resolves out of the cache's range: the cache's index.
    with pytest.raises(IndexError) as e:
        loader[[1, 100]][1]
    assert str(e.value) == f"{root}: index 100 out of range [0, 30)"
    with pytest.raises(IndexError) as e:
        loader.read_indices([5, 100])
    assert str(e.value) == f"indices[1] = 100: {root}: index 100 out of range [0, 30)"
    with pytest.raises(IndexError) as e:
        loader.read_indices([-31])
    assert str(e.value) == f"indices[0] = -31: {root}: index -31 out of range [-30, 30)"
    loader.close()
    ro = LoadIt(root)
    with pytest.raises(IndexError, match=f"^{root}: index -31 out of range"):
        ro[-31]
    ro.close()


# ---- pickling without the source ----------------------------------------------------


def test_pickling_an_unpicklable_source_warns_and_the_copy_says_why(tmp_path):
    root = str(tmp_path / "r")

    def local_source():
        return iter(range(50))

    loader = LoadIt(root, local_source, max_shard_length=10, preload_fn=None)
    assert loader[15] == 15
    with pytest.warns(CacheWarning) as w:
        data = pickle.dumps(loader)
    assert len(w) == 1
    text = str(w[0].message)
    assert "test_pickling_an_unpicklable_source_warns_and_the_copy_says_why.<locals>." \
           "local_source" in text and "cannot be pickled" in text and root in text
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pickle.dumps(loader)  # warned once per loader
    copy = pickle.loads(data)
    assert copy[12] == 12  # what is cached reads
    with pytest.raises(NotCachedError) as e:
        copy[30]
    assert "could not be pickled" in str(e.value) and "local_source" in str(e.value)
    assert isinstance(e.value, IndexError)
    # A copy of the copy says the same.
    again = pickle.loads(pickle.dumps(copy))
    with pytest.raises(NotCachedError, match="could not be pickled"):
        again[40]
    for x in (again, copy, loader):
        x.close()


SPAWNED = r"""
import pickle, sys
sys.path.insert(0, sys.argv[1])
import bagcache
copy = pickle.loads(sys.stdin.buffer.read())
print(copy[3])
try:
    copy[45]
except bagcache.NotCachedError as e:
    print("NotCachedError:", e)
"""


def test_a_spawned_process_learns_why_it_has_no_source(tmp_path):
    root = str(tmp_path / "r")
    loader = LoadIt(root, lambda: iter(range(50)), max_shard_length=10, preload_fn=None)
    assert loader[3] == 3
    with pytest.warns(CacheWarning, match="<lambda>"):
        data = pickle.dumps(loader)
    here = os.path.dirname(os.path.abspath(__file__))
    r = subprocess.run([sys.executable, "-c", SPAWNED, here], input=data,
                       capture_output=True, env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert out.startswith("3\nNotCachedError: ")
    assert "<lambda>" in out and "could not be pickled" in out
    loader.close()


# ---- Writer and a sharded spec -----------------------------------------------------


def test_writer_refuses_a_sharded_spec(tmp_path):
    spec = str(tmp_path / "s@4.bagz")
    with pytest.raises(ValueError) as e:
        bagcache.Writer(spec)
    msg = str(e.value)
    assert "sharded spec" in msg and "s-00000-of-00004.bagz" in msg
    assert "s-00003-of-00004.bagz" in msg and "bagz has no sharded writer" in msg
    with pytest.raises(ValueError, match="s-00000-of-NNNNN.bag"):
        bagcache.Writer(str(tmp_path / "s@*.bag"))
    with pytest.raises(ValueError, match="sharded spec"):
        bagcache.Writer("posix:" + str(tmp_path / "t@2.bagz"))
    assert os.listdir(tmp_path) == []
    # What the message says to do reads back as the set.
    for i in range(4):
        with bagcache.Writer(str(tmp_path / f"s-{i:05d}-of-00004.bagz")) as w:
            w.write(b"r%d" % i)
    assert list(bagcache.Reader(spec)) == [b"r0", b"r1", b"r2", b"r3"]
    # '@' that is not a shard count stays a plain name, as for the Reader.
    for name in ("a@0.bag", "b@x.bag", "c@100000.bag", "d@/e.bag"):
        path = tmp_path / name
        path.parent.mkdir(exist_ok=True)
        with bagcache.Writer(str(path)) as w:
            w.write(b"x")
        assert list(bagcache.Reader(str(path))) == [b"x"]


# ---- datasets a DataLoader closed ------------------------------------------------------


def test_dataset_closed_by_the_loader_says_so(tmp_path):
    ds = bagcache.NPDataset(np.arange(40, dtype=np.int64).reshape(20, 2))
    lab = bagcache.NPDataset(np.arange(20, dtype=np.int64))
    with bagcache.DataLoader(ds, lab, batch_size=4, num_epochs=1) as loader:
        batches = list(loader)
    assert len(batches) == 5
    for d in (ds, lab):
        with pytest.raises(ValueError) as e:
            d[0]
        assert str(e.value).startswith("the dataset is closed: the DataLoader it was given "
                                       "to closed it")
    mine = bagcache.NPDataset(np.arange(4, dtype=np.int64))
    mine.close()
    with pytest.raises(ValueError) as e:
        mine[0]
    assert str(e.value) == "the dataset is closed"  # closed by its owner: nothing more


# ---- NondeterministicError says how to start over --------------------------------------


def test_nondeterministic_error_says_how_to_start_over(tmp_path):
    shift = tmp_path / "shift"
    shift.write_text("0")
    root = str(tmp_path / "c")
    loader = LoadIt(Shifted(50, str(shift)), root_dir=root, max_shard_length=10,
                    preload_fn=None)
    assert loader[15] == item(15)
    loader.close()
    os.remove(os.path.join(root, "shards", "10.20.bag"))
    shift.write_text("1")
    again = LoadIt(Shifted(50, str(shift)), root_dir=root, max_shard_length=10,
                   preload_fn=None)
    with pytest.raises(NondeterministicError) as e:
        again[12]
    msg = str(e.value)
    # The new pass crosses shard 0 and compares it with the stored one first.
    assert "records 0..10 (shard 0) came out different from the ones stored" in msg
    assert (f"the source changed since the cache was filled (or it is not deterministic); "
            f"to start over, clear the cache (bagcache cache clear {root}) or use a new "
            f"root") in msg
    assert msg.count("cache clear") == 1  # the advice once, not again by Python
    again.close()


# ---- the source's fingerprint -----------------------------------------------------------


def make_a():
    return (("A", i) for i in range(1000))


def make_b():
    return (("B", i) for i in range(500))


def test_fingerprint_refuses_another_source(tmp_path):
    root = str(tmp_path / "r")
    a = LoadIt(root, make_a, max_shard_length=100, fingerprint="v1")
    assert a[5] == ("A", 5) and len(a) == 1000
    assert a.fingerprint() == "v1" and meta(root)["fingerprint"] == "v1"
    a.close()
    with pytest.raises(NondeterministicError) as e:
        LoadIt(root, make_b, max_shard_length=100, fingerprint="v2")
    msg = str(e.value)
    assert msg.startswith(f"{root}: the cache was filled from a source whose fingerprint is "
                          '"v1", and this one\'s is "v2": the source changed since the cache '
                          "was filled.  To start over: delete what is cached with "
                          f"`bagcache cache clear {root}`")
    assert msg.endswith("or pass on_mismatch='clear' to clear it and fill it again")
    assert isinstance(e.value, ValueError)
    # Nothing changed; the same fingerprint (or none: no check) opens it.
    again = LoadIt(root, make_a, max_shard_length=100, fingerprint="v1")
    assert again[250] == ("A", 250) and len(again) == 1000
    again.close()
    unchecked = LoadIt(root, max_shard_length=100)
    assert unchecked.fingerprint() == "v1" and unchecked[5] == ("A", 5)
    unchecked.close()
    # A pickled copy carries the fingerprint and checks it again.
    copy = pickle.loads(pickle.dumps(LoadIt(root, make_a, fingerprint="v1")))
    assert copy._config["fingerprint"] == "v1" and copy[7] == ("A", 7)
    copy.close()


def test_fingerprint_values_compare_as_json(tmp_path):
    root = str(tmp_path / "r")
    cfg = {"resize": 224, "steps": ["crop", "flip"], "v": 1.5}
    LoadIt(root, make_a, max_shard_length=100, fingerprint=cfg).close()
    assert meta(root)["fingerprint"] == cfg
    same = {"v": 1.5, "steps": ["crop", "flip"], "resize": 224}  # another key order
    LoadIt(root, make_a, max_shard_length=100, fingerprint=same).close()
    with pytest.raises(NondeterministicError, match="fingerprint is"):
        LoadIt(root, make_a, fingerprint=dict(cfg, resize=256))
    with pytest.raises(NondeterministicError, match="fingerprint is"):
        LoadIt(root, make_a, fingerprint=("crop",))  # a list is not a dict
    # A root without a fingerprint takes the first one given.
    bare = str(tmp_path / "bare")
    LoadIt(bare, make_a, max_shard_length=100).close()
    assert "fingerprint" not in meta(bare)
    LoadIt(bare, make_a, fingerprint=7).close()
    assert meta(bare)["fingerprint"] == 7
    with pytest.raises(NondeterministicError):
        LoadIt(bare, make_a, fingerprint=7.0)  # another JSON value


def test_fingerprint_arguments_checked(tmp_path):
    root = str(tmp_path / "r")
    with pytest.raises(TypeError, match="fingerprint must be a JSON value"):
        LoadIt(root, make_a, fingerprint=object())
    with pytest.raises(TypeError, match="fingerprint must be a JSON value"):
        LoadIt(root, make_a, fingerprint=float("nan"))
    with pytest.raises(ValueError, match="on_mismatch must be 'raise' or 'clear', not 'wipe'"):
        LoadIt(root, make_a, fingerprint="v1", on_mismatch="wipe")
    assert not os.path.exists(root)
    LoadIt(root, make_a, max_shard_length=100, fingerprint="v1").close()
    with pytest.raises(ValueError, match="needs a create_iter"):
        LoadIt(root, fingerprint="v2", on_mismatch="clear")
    ro = LoadIt(root, fingerprint="v1")  # a reader may check it
    ro.close()
    with pytest.raises(NondeterministicError):
        LoadIt(root, fingerprint="v2")


def test_fingerprint_on_mismatch_clear(tmp_path):
    root = str(tmp_path / "r")
    a = LoadIt(root, make_a, max_shard_length=100, fingerprint="v1", memory_limit="1mb",
               info={"owner": "me"})
    assert len(a) == 1000
    a.close()
    # The same fingerprint: nothing is cleared, no warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        same = LoadIt(root, make_a, fingerprint="v1", on_mismatch="clear")
    assert same[5] == ("A", 5)
    # Another, while this process has the root open: refused.
    with pytest.raises(ValueError, match="still has it open"):
        LoadIt(root, make_b, fingerprint="v2", on_mismatch="clear")
    same.close()
    with pytest.warns(CacheWarning, match=r"cleared \(on_mismatch='clear'\): it was filled "
                      r'from a source whose fingerprint is "v1", and this one\'s is "v2"'):
        b = LoadIt(root, make_b, max_shard_length=100, fingerprint="v2", on_mismatch="clear")
    assert b[5] == ("B", 5) and b[250] == ("B", 250) and len(b) == 500
    assert list(b) == [("B", i) for i in range(500)]
    assert b.fingerprint() == "v2"
    # What the root had stored and the arguments did not give holds.
    assert b.stats()["disk_limit"] == 1 << 20 and b.info() == {"owner": "me"}
    b.close()


# ---- length= is a hint -------------------------------------------------------------


def test_length_hint_too_large_is_corrected(tmp_path):
    root = str(tmp_path / "r")
    src = Source(1000)
    loader = LoadIt(root, src, max_shard_length=100, length=1500)
    assert len(loader) == 1500 and src.passes == 0  # the hint: nothing drained
    m = meta(root)
    assert m["length_hint"] == 1500 and m["length_final"] is False and m["length"] == 0
    assert list(loader) == model(1000)
    with pytest.warns(CacheWarning) as w:
        assert len(loader) == 1000
    assert len(w) == 1 and str(w[0].message) == (
        f"{root}: the source ended after 1000 records, not at the length given when the "
        "cache was created (length=1500, a hint): len() is 1000")
    assert len(loader) == 1000  # warned once
    loader.close()
    m = meta(root)
    assert m["length"] == 1000 and m["length_final"] is True and "length_hint" not in m
    # Every later open works (it used to raise NondeterministicError for good).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = LoadIt(root, Source(1000), max_shard_length=100, length=1500)
        assert len(again) == 1000 and again[999] == item(999)
        again.close()
        ro = LoadIt(root)
        assert len(ro) == 1000 and list(ro) == model(1000)
        ro.close()


def test_length_hint_too_large_found_by_a_read(tmp_path):
    root = str(tmp_path / "r")
    loader = LoadIt(root, Source(1000), max_shard_length=100, length=1500, preload_fn=None)
    with pytest.warns(CacheWarning, match=r"ended after 1000 records.*length=1500, a hint"):
        with pytest.raises(IndexError, match=f"^{root}: "):
            loader[1200]
    assert len(loader) == 1000 and loader[-1] == item(999)
    loader.close()


def test_length_hint_too_small_does_not_truncate(tmp_path):
    root = str(tmp_path / "r")
    src = Source(1000)
    loader = LoadIt(root, src, max_shard_length=100, length=600)
    assert len(loader) == 600 and src.passes == 0
    assert list(loader) == model(1000)  # all of it, not 600
    assert loader[850] == item(850)
    with pytest.warns(CacheWarning) as w:
        assert len(loader) == 1000
    assert len(w) == 1
    assert str(w[0].message).startswith(
        f"{root}: the source ended after 1000 records, not at the length given when the "
        "cache was created (length=600, a hint)")
    loader.close()
    assert meta(root)["length"] == 1000 and "length_hint" not in meta(root)


def test_length_hint_too_small_warns_when_the_source_goes_on(tmp_path):
    root = str(tmp_path / "r")
    loader = LoadIt(root, Source(1000), max_shard_length=100, length=600, preload_fn=None)
    assert loader[750] == item(750)  # past the hint: more records than it said
    with pytest.warns(CacheWarning) as w:
        assert len(loader) == 1000  # reads to the end
    assert len(w) == 1 and str(w[0].message) == (
        f"{root}: the source goes on past the length given when the cache was created "
        "(length=600, a hint): 800 records so far; len() reads it to its end")
    loader.close()


def test_length_hint_right(tmp_path):
    root = str(tmp_path / "r")
    src = Source(1000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = LoadIt(root, src, max_shard_length=100, length=1000)
        assert len(loader) == 1000 and src.passes == 0
        assert list(loader) == model(1000) and len(loader) == 1000
        loader.close()
    assert meta(root)["length_final"] is True and "length_hint" not in meta(root)
