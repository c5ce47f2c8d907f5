"""The one sequence base type (_Sequence, python/src/core/sequence.c):
Reader, LoadIt (and its views) and bagcache.views share one subscript path,
one slice path over the C library's slices, one slice-bound rule with one
set of messages, and one iterator type.  Each is checked against a plain
list of the same elements."""

import random

import numpy as np
import pytest

import bagcache
from bagcache import LoadIt, _bagcache
from bagcache.views import SequenceView

N = 23


@pytest.fixture
def seqs(tmp_path):
    """(name, sequence, list model) for a Reader, a LoadIt and a view."""
    records = [b"r%03d" % i for i in range(N)]
    with bagcache.Writer(str(tmp_path / "a.bag")) as w:
        for r in records:
            w.write(r)
    reader = bagcache.Reader(str(tmp_path / "a.bag"))
    loader = LoadIt(lambda: iter(range(N)), root_dir=str(tmp_path / "cache"),
                    max_shard_length=5)
    assert list(loader) == list(range(N))  # cached, length known
    view = SequenceView(reader)
    yield [("reader", reader, records), ("loadit", loader, list(range(N))),
           ("view", view, records)]
    loader.close()


def test_one_base_type_one_subscript(seqs):
    base = _bagcache._Sequence
    getitem = base.__dict__["__getitem__"]
    for name, seq, _ in seqs:
        assert isinstance(seq, base), name
        # nobody on the way down replaces the one subscript path
        assert type(seq).__getitem__ is getitem, name
    for it_type in (_bagcache.ViewIterator, _bagcache._CacheIter):
        assert issubclass(it_type, _bagcache.ReaderIterator)


def test_bad_slice_bounds_say_the_same_everywhere(seqs):
    for name, seq, _ in seqs:
        for key, bad in ((slice("a", None), "str"), (slice(None, 1.5), "float"),
                         (slice(0, 3, b"x"), "bytes")):
            with pytest.raises(bagcache.InvalidSliceError) as e:
                seq[key]
            assert str(e.value) == ("Invalid slice: slice indices must be "
                                    f"integers or None, not {bad}"), name
            assert isinstance(e.value, TypeError) and isinstance(e.value, IndexError)
        with pytest.raises(ValueError, match="^slice step cannot be zero$"):
            seq[::0]


def test_index_beyond_int64_says_the_same_everywhere(seqs):
    for name, seq, _ in seqs:
        for i in (2**63, -2**63 - 1, 2**70):
            with pytest.raises(IndexError) as e:
                seq[i]
            assert str(e.value) == f"index {i} out of range", name


def test_slices_match_a_list(seqs):
    rng = random.Random(15)
    bounds = [None, 0, 1, 2, 5, N - 1, N, N + 4, -1, -3, -N, -N - 7, 2**62, -2**62,
              2**80, -2**80]
    steps = [None, 1, 2, 3, 7, -1, -2, -5, 2**62, -2**62, 2**80]
    for name, seq, model in seqs:
        for _ in range(300):
            s = seq
            m = model
            for _ in range(rng.randrange(1, 4)):  # slices of slices compose
                key = slice(rng.choice(bounds), rng.choice(bounds), rng.choice(steps))
                s, m = s[key], m[key]
            assert len(s) == len(m), (name, key)
            assert list(s) == m, (name, key)
            if m:
                assert s[-1] == m[-1] and s[0] == m[0]
                k = rng.randrange(len(m))
                assert s[np.int64(k)] == m[k] and s[np.uint8(k)] == m[k]


def test_reversed_and_index_lists(seqs):
    for name, seq, model in seqs:
        assert list(reversed(seq)) == model[::-1], name
        if name == "reader":  # bagz: integers and slices only
            with pytest.raises(TypeError, match="indices must be integers or slices"):
                seq[[1, 2]]
            continue
        idx = [3, 0, -1, 7, 3]
        assert list(seq[idx]) == [model[i] for i in idx], name
        assert list(seq[np.array(idx)]) == [model[i] for i in idx], name


def test_reader_pickles_its_composed_slices(seqs):
    import pickle
    name, reader, model = seqs[0]
    v = reader[3:][::-2][1:][::3]
    m = model[3:][::-2][1:][::3]
    assert list(v) == m
    w = pickle.loads(pickle.dumps(v))
    assert list(w) == m and w._state() == v._state()
