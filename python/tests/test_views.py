"""bagcache.views over plain Python sequences, against a plain-Python model.

Every view is built twice: as a bagcache view and as a Python list computed
by the reference functions below (loadit's INTENDED semantics, with
Python's rules for negative indices and slices).  Random compositions,
including empty and one-element sequences, are compared element by element,
by index (negative and out of range too), by slice (slices of views are
views again) and by index lists."""

import itertools
import pickle
import random
import sys
import threading
from collections.abc import Sequence

import pytest

from bagcache import views
from bagcache.views import (
    ChunkShuffledSequence,
    ConcatableSequence,
    InterleaveSequence,
    InterleaveSequences,
    RepeatSequence,
    SequenceView,
    chunk_shuffle,
    chunk_shuffle_idx,
    shuffle,
)

# ---- the reference model ----------------------------------------------------


def ref_interleave(*parts):
    """Round-robin; a part that runs out leaves the rotation."""
    out, its = [], [iter(p) for p in parts]
    while its:
        alive = []
        for it in its:
            for x in it:
                out.append(x)
                alive.append(it)
                break
        its = alive
    return out


def ref_take(seq, indices):
    return [seq[i] for i in indices]


class CountingList(list):
    """A list whose __getitem__ counts its calls (a non-native leaf)."""

    def __init__(self, *args):
        super().__init__(*args)
        self.calls = 0

    def __getitem__(self, key):
        self.calls += 1
        return super().__getitem__(key)


# ---- random compositions ------------------------------------------------------


def random_list(rng, tag):
    n = rng.choice([0, 1, 1, 2, 3, 5, 8, 13])
    return [f"{tag}{k}" for k in range(n)]


def random_composition(rng, depth=0):
    """(view, model list, description) of a random composition."""
    if depth >= 3 or rng.random() < 0.25:
        data = random_list(rng, f"L{rng.randrange(1000)}.")
        kind = rng.choice(["list", "tuple", "identity", "range"])
        if kind == "list":
            return data, data, f"list{len(data)}"
        if kind == "tuple":
            return tuple(data), data, f"tuple{len(data)}"
        if kind == "range":
            r = range(rng.randrange(0, 20), rng.randrange(0, 40), rng.choice([1, 2, 3]))
            return r, list(r), f"range{len(r)}"
        return SequenceView(data), data, f"view{len(data)}"
    op = rng.choice(["take", "slice", "concat", "interleave", "repeat", "shuffle", "map", "plus"])
    if op in ("concat", "interleave", "plus"):
        subs = [random_composition(rng, depth + 1) for _ in range(rng.randrange(0, 4))]
        parts = [s[0] for s in subs]
        models = [s[1] for s in subs]
        desc = ",".join(s[2] for s in subs)
        if op == "interleave":
            return InterleaveSequence(*parts), ref_interleave(*models), f"il({desc})"
        if op == "plus" and len(parts) >= 2 and isinstance(parts[0], SequenceView):
            v = parts[0]
            for p in parts[1:]:
                v = v + p
            return v, sum(models, []), f"plus({desc})"
        return ConcatableSequence(*parts), sum(models, []), f"cat({desc})"
    view, model, desc = random_composition(rng, depth + 1)
    n = len(model)
    if op == "take":
        if n == 0:
            return SequenceView(view, []), [], f"take0({desc})"
        idx = [rng.randrange(-n, n) for _ in range(rng.randrange(0, 10))]
        return SequenceView(view, idx), ref_take(model, idx), f"take{idx}({desc})"
    if op == "slice":
        s = random_slice(rng, n)
        inner = view if isinstance(view, SequenceView) else SequenceView(view)
        return inner[s], model[s], f"{desc}[{s}]"
    if op == "repeat":
        times = rng.randrange(0, 4)
        return RepeatSequence(view, times), model * times, f"rep{times}({desc})"
    if op == "shuffle":
        chunk = rng.choice([None, 1, 2, 3, 7])
        seed = rng.randrange(2**64)
        v = chunk_shuffle(view, chunk, seed=seed)
        pytest.importorskip("numpy")  # chunk_shuffle_idx returns an array
        perm = chunk_shuffle_idx(chunk, n, seed)
        return v, [model[i] for i in perm], f"cs{chunk}({desc})"
    # map
    if n == 0:
        return SequenceView(view, lambda k: k, 0), [], f"map0({desc})"
    a = rng.randrange(1, 5)
    m = rng.randrange(0, 10)
    return (
        SequenceView(view, lambda k, a=a, n=n: (k * a) % n - n, m),
        [model[(k * a) % n - n] for k in range(m)],
        f"map{a},{m}({desc})",
    )


def random_slice(rng, n):
    def bound():
        return rng.choice([None, rng.randrange(-n - 3, n + 4)])

    return slice(bound(), bound(), rng.choice([None, 1, 2, 3, -1, -2, -3]))


def check_same(view, model, desc, rng):
    assert len(view) == len(model), desc
    assert list(view) == model, desc
    assert bool(view) == bool(model), desc
    n = len(model)
    for i in range(-n - 2, n + 2):
        if -n <= i < n:
            assert view[i] == model[i], (desc, i)
        else:
            with pytest.raises(IndexError):
                view[i]
    for _ in range(5):
        s = random_slice(rng, n)
        sub = view[s]
        assert isinstance(sub, SequenceView), desc
        assert list(sub) == model[s], (desc, s)
        assert len(sub) == len(model[s])
        s2 = random_slice(rng, len(model[s]))
        assert list(sub[s2]) == model[s][s2], (desc, s, s2)
    if n:
        idx = [rng.randrange(-n, n) for _ in range(7)]
        assert list(view[idx]) == ref_take(model, idx), desc
    assert list(reversed(view)) == model[::-1], desc
    for x in model[:3]:
        assert x in view
    assert "absent" not in view


@pytest.mark.parametrize("seed", range(300))
def test_random_compositions(seed):
    rng = random.Random(seed)
    view, model, desc = random_composition(rng)
    if not isinstance(view, SequenceView):
        view = SequenceView(view)
    check_same(view, model, desc, rng)


# ---- each view on its own -------------------------------------------------------


def test_interleave_table():
    il = InterleaveSequence([0, 1, 2, 3, 4], ["x"], ["y", "z"])
    assert list(il) == [0, "x", "y", 1, "z", 2, 3, 4]
    assert [il[i] for i in range(-8, 8)] == [0, "x", "y", 1, "z", 2, 3, 4] * 2
    assert len(il) == 8
    assert InterleaveSequences is InterleaveSequence


@pytest.mark.parametrize("lengths", [(), (0,), (3,), (0, 0), (1, 4, 0, 2), (5, 5, 5), (7, 1, 3, 1)])
def test_interleave_lengths(lengths):
    parts = [[f"{j}:{k}" for k in range(n)] for j, n in enumerate(lengths)]
    assert list(InterleaveSequence(*parts)) == ref_interleave(*parts)


def test_concat_negative_and_plus():
    a, b, c = [1, 2], [], [3, 4, 5]
    cat = ConcatableSequence(a, b) + ConcatableSequence(c)
    assert isinstance(cat, ConcatableSequence)
    assert list(cat) == [1, 2, 3, 4, 5]
    assert cat[-1] == 5 and cat[-5] == 1  # loadit: c[-1] is seqs[0][-1]
    with pytest.raises(IndexError):
        cat[5]
    assert list([0] + cat) == [0, 1, 2, 3, 4, 5]
    assert list(cat + (6,)) == [1, 2, 3, 4, 5, 6]
    assert list(SequenceView([9]) + cat) == [9, 1, 2, 3, 4, 5]
    with pytest.raises(TypeError):
        cat + 1


def test_repeat_finite():
    r = RepeatSequence([1, 2, 3], 3)
    assert len(r) == 9  # loadit: len(seq)
    assert list(r) == [1, 2, 3] * 3
    assert r[-1] == 3 and r[8] == 3
    with pytest.raises(IndexError):
        r[9]
    assert list(RepeatSequence([1, 2], 0)) == []  # loadit: still serves seq
    assert len(RepeatSequence([], None)) == 0
    with pytest.raises(ValueError):
        RepeatSequence([1], -1)


def test_repeat_forever():
    r = RepeatSequence(["a", "b", "c"])
    with pytest.raises(TypeError):
        len(r)
    assert bool(r)
    assert r[10**15] == ["a", "b", "c"][10**15 % 3]
    assert list(itertools.islice(r, 10)) == list(itertools.islice(itertools.cycle("abc"), 10))
    # iterating really goes on: far past any chunk size
    it = iter(r)
    for k in range(5000):
        assert next(it) == "abc"[k % 3]
    assert list(r[4:10]) == list("bcabca")
    assert list(itertools.islice(r[1::2], 6)) == list("bacbac")
    assert "c" in r  # found; an absent value would search forever
    for bad in (lambda: r[-1], lambda: r[::-1], lambda: reversed(r), lambda: r[:-1]):
        with pytest.raises(TypeError):
            bad()
    assert "endless" in repr(r)
    # finite pieces of endless views
    tail = r[3:3000]
    assert len(tail) == 2997 and list(tail[-2:]) == [r[2998], r[2999]]
    assert list(InterleaveSequence(r, [1, 2])[:7]) == ["a", 1, "b", 2, "c", "a", "b"]


def test_chunk_shuffle_permutes_every_chunk():
    n, chunk = 103, 10
    data = list(range(n))
    v = chunk_shuffle(data, chunk, seed=7)
    out = list(v)
    for start in range(0, n, chunk):
        assert sorted(out[start:start + chunk]) == data[start:start + chunk]
    assert out != data  # a fixed seed that moves something
    assert list(chunk_shuffle(data, chunk, seed=7)) == out  # deterministic
    assert list(chunk_shuffle(data, chunk, seed=8)) != out
    pytest.importorskip("numpy")  # chunk_shuffle_idx returns an array
    assert list(chunk_shuffle_idx(chunk, n, 7)) == out
    # the seed is any int, taken modulo 2**64
    assert list(chunk_shuffle(data, chunk, seed=7 + 2**64)) == out


def test_chunk_shuffle_defaults_and_length():
    data = [f"r{k}" for k in range(50)]
    full = chunk_shuffle(data, seed=3)
    assert sorted(full) == sorted(data) and len(full) == 50
    assert list(shuffle(data, 3)) == list(full)
    head = chunk_shuffle(data, 8, length=20, seed=3)
    assert len(head) == 20 and sorted(head) == sorted(data[:20])
    with pytest.raises(ValueError):
        chunk_shuffle(data, 8, length=51)
    with pytest.raises(ValueError):
        chunk_shuffle(data, -1)
    # seed=None: a random seed chosen once and kept
    v = chunk_shuffle(data, 5)
    assert isinstance(v, ChunkShuffledSequence)
    assert list(v) == list(v) == list(chunk_shuffle(data, 5, seed=v.seed))
    assert 0 <= v.seed < 2**64


def test_chunk_shuffle_idx():
    np = pytest.importorskip("numpy")
    idx = chunk_shuffle_idx(4, 10, seed=1)
    assert idx.dtype == np.int64 and idx.shape == (10,)
    for start in range(0, 10, 4):
        assert sorted(idx[start:start + 4]) == list(range(start, min(start + 4, 10)))
    assert len(chunk_shuffle_idx(4, 0, 1)) == 0  # loadit raises ValueError
    assert sorted(chunk_shuffle_idx(None, 1000, 5)) == list(range(1000))
    assert sorted(chunk_shuffle_idx(4, 1, 5)) == [0]


def test_callable_view():
    data = list("abcdefgh")
    v = SequenceView(data, lambda k: 2 * k, 4)
    assert list(v) == list("aceg")  # stops at length (loadit: until IndexError)
    assert v[-1] == "g"
    with pytest.raises(IndexError):
        v[4]
    assert list(SequenceView(data, lambda k: -1 - k, 3)) == list("hgf")
    with pytest.raises(ValueError):
        SequenceView(data, lambda k: k)
    with pytest.raises(IndexError):
        list(SequenceView(data, lambda k: k, 20))  # data has 8


def test_callable_exceptions_propagate():
    class Boom(Exception):
        pass

    def fn(k):
        if k == 5:
            raise Boom(k)
        return k

    v = SequenceView(list(range(10)), fn, 10)
    it = iter(v)
    assert [next(it) for _ in range(5)] == [0, 1, 2, 3, 4]
    with pytest.raises(Boom):
        next(it)
    with pytest.raises(Boom):
        v[5]
    assert v[6] == 6


def test_leaf_exceptions_propagate():
    class Flaky(list):
        def __getitem__(self, k):
            if k == 3:
                raise KeyError("flaky")
            return super().__getitem__(k)

    v = SequenceView(Flaky(range(6)), [0, 1, 2, 3, 4])
    it = iter(v)
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(KeyError, match="flaky"):
        next(it)
    assert v[4] == 4


def test_take_validates_now():
    with pytest.raises(IndexError):
        SequenceView([1, 2, 3], [0, 3])
    with pytest.raises(IndexError):
        SequenceView([1, 2, 3], [-4])
    with pytest.raises(TypeError):
        SequenceView([1, 2, 3], [0.5])
    with pytest.raises(TypeError):
        SequenceView([1, 2, 3], "01")
    with pytest.raises(TypeError):
        SequenceView([1, 2, 3], 5)
    with pytest.raises(TypeError):
        SequenceView(5)


def test_index_keys():
    np = pytest.importorskip("numpy")
    v = SequenceView(list("abcdef"))
    assert list(v[0, 3, 4]) == list("ade")  # loadit: tuple indexing
    assert list(v[[5, -6]]) == ["f", "a"]
    assert list(v[range(1, 6, 2)]) == list("bdf")
    assert list(v[np.array([2, 2, 0])]) == list("cca")
    assert list(v[np.array([1, 0], dtype=np.uint8)]) == ["b", "a"]
    assert v[np.int64(3)] == "d" and v[np.array(4)] == "e"
    assert list(v[v[[1, 0]][:0]]) == []
    assert list(v[SequenceView([4, 1])]) == ["e", "b"]  # a view of ints
    with pytest.raises(TypeError):
        v[np.array([True, False])]
    with pytest.raises(TypeError):
        v[1.0]
    with pytest.raises(TypeError):
        v["a"]
    with pytest.raises(ValueError):
        v[::0]
    # the index list is a snapshot
    idx = [0, 1]
    t = v[idx]
    idx[0] = 5
    assert list(t) == ["a", "b"]


def test_elements_are_the_objects():
    objs = [object(), object(), {"k": 1}]
    v = InterleaveSequence(objs, [objs[2]])
    assert v[0] is objs[0] and v[1] is objs[2] and v[3] is objs[2]
    assert all(a is b for a, b in zip(v, [objs[0], objs[2], objs[1], objs[2]]))


def test_sequence_protocol():
    v = ConcatableSequence([3, 1], [4, 1, 5])
    assert isinstance(v, Sequence)
    assert v.index(1) == 1 and v.index(1, 2) == 3 and v.count(1) == 2
    with pytest.raises(ValueError):
        v.index(9)
    assert 5 in v and 9 not in v
    assert list(reversed(v)) == [5, 1, 4, 1, 3]
    assert v != [3, 1, 4, 1, 5] and v == v  # identity equality only
    r = repr(v)
    assert "ConcatableSequence" in r and "len=5" in r
    assert hash(v) == hash(v)


def test_counting_leaf_reads_each_element_once():
    data = CountingList(range(100))
    v = chunk_shuffle(ConcatableSequence(data, []), 10, seed=1)
    assert sorted(v) == list(range(100))
    assert data.calls == 100
    data.calls = 0
    assert v[5] in range(10)
    assert data.calls == 1
    data.calls = 0
    assert len(v[3:50:7]) == 7 and data.calls == 0  # slicing reads nothing


def test_list_changes_after_view():
    data = [1, 2, 3]
    v = SequenceView(data)
    data[0] = 10
    assert v[0] == 10  # elements are read when asked for
    data.pop()
    assert len(v) == 3  # the length is fixed when the view is made
    with pytest.raises(IndexError):
        v[2]


def test_pickle_views():
    base = [f"x{k}" for k in range(20)]
    cases = [
        SequenceView(base, [3, -1, 0]),
        ConcatableSequence(base[:3], base[5:9]) + [1],
        InterleaveSequence(base[:4], base[10:12]),
        RepeatSequence(base[:3], 2),
        chunk_shuffle(base, 6),
        SequenceView(base)[2:17:3][::-1],
        SequenceView(base)[[4, 4, 1]],
    ]
    for v in cases:
        back = pickle.loads(pickle.dumps(v))
        assert type(back) is type(v)
        assert list(back) == list(v)
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        pickle.dumps(SequenceView(base, lambda k: k, 3))


def test_threads_share_a_view():
    data = list(range(5000))
    v = chunk_shuffle(InterleaveSequence(data[:2500], data[2500:]), 100, seed=9)
    want = list(v)
    results = []

    def work():
        results.append(list(v) == want and [v[i] for i in range(0, 5000, 7)] == want[::7])

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 4


def test_uninitialised_and_errors():
    v = SequenceView.__new__(SequenceView)
    with pytest.raises(ValueError):
        len(v)
    with pytest.raises(ValueError):
        v[0]
    w = SequenceView([1])
    with pytest.raises(RuntimeError):
        w._init_identity([2])
    with pytest.raises(TypeError):
        SequenceView(object())


def test_module_surface():
    for name in views.__all__:
        assert hasattr(views, name)
    import bagcache

    for name in ("SequenceView", "ConcatableSequence", "InterleaveSequence",
                 "InterleaveSequences", "RepeatSequence", "chunk_shuffle",
                 "chunk_shuffle_idx", "shuffle"):
        assert getattr(bagcache, name) is getattr(views, name)


def test_refcounts_do_not_leak():
    if not hasattr(sys, "getrefcount"):
        pytest.skip("no refcounts")
    # (counts are taken outside the asserts: pytest's rewritten asserts
    # keep references to the values they show)
    data = [object() for _ in range(10)]
    before = sys.getrefcount(data[3])
    for _ in range(100):
        v = InterleaveSequence(data, SequenceView(data, [3, 3]))
        list(v)
        v[5]
        del v
    after = sys.getrefcount(data[3])
    assert after == before
    base = sys.getrefcount(data)
    v = SequenceView(data)
    held = sys.getrefcount(data)
    del v
    released = sys.getrefcount(data)
    assert (held, released) == (base + 2, base)  # the leaf and the recipe
