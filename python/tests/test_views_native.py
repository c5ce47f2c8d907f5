"""bagcache.views over native leaves: Readers over bags written in tmp_path,
other views, and objects offering __bagcache_seq__ (a native sequence plus
a decoder).

Each composition is compared with the same composition over a plain list of
the records.  That native leaves are read entirely in C is checked without
timing: a profiler (sys.setprofile) sees every Python function call, and
reading a view whose leaves are Readers must make none, while a list
subclass leaf is called once per element."""

import multiprocessing
import os
import pickle
import random
import sys
import threading

import pytest

import bagcache
from bagcache.views import (
    ConcatableSequence,
    InterleaveSequence,
    RepeatSequence,
    SequenceView,
    chunk_shuffle,
    chunk_shuffle_idx,
    shuffle,
)


def write_bag(path, records):
    with bagcache.Writer(str(path)) as w:
        for r in records:
            w.write(r)
    return bagcache.Reader(str(path))


@pytest.fixture
def bags(tmp_path):
    """Two Readers (.bag and .bagz) and their records as lists."""
    a = [b"a%03d-" % k + b"x" * (k % 17) for k in range(300)]
    b = [b"b%02d" % k for k in range(41)]
    ra = write_bag(tmp_path / "a.bag", a)
    rb = write_bag(tmp_path / "b.bagz", b)
    return ra, rb, a, b


class Calls:
    """Counts Python function calls (profile 'call' events) while active."""

    def __init__(self):
        self.names = []

    def __enter__(self):
        def prof(frame, event, arg):
            if event == "call":
                self.names.append(frame.f_code.co_name)

        sys.setprofile(prof)
        return self

    def __exit__(self, *exc):
        sys.setprofile(None)
        self.names = [n for n in self.names if n != "__exit__"]


def compositions(ra, rb, a, b):
    """(name, view over Readers, the same over lists)."""

    def both(fn):
        return fn(ra, rb), fn(a, b)

    def sv(x):
        return x if isinstance(x, list) else SequenceView(x)

    return [
        ("identity", *both(lambda x, y: SequenceView(x))),
        ("take", *both(lambda x, y: SequenceView(x, [5, -1, 0, 299, 5]))),
        ("slice", *both(lambda x, y: sv(x)[7:250:3])),
        ("reader-slice", SequenceView(ra[10:200:7]), a[10:200:7]),
        ("reversed-reader", SequenceView(ra[::-1]), a[::-1]),
        ("concat", *both(lambda x, y: ConcatableSequence(x, y, x[:3]))),
        ("interleave", *both(lambda x, y: InterleaveSequence(y, x, y[:5]))),
        ("repeat", *both(lambda x, y: RepeatSequence(y, 3))),
        ("shuffle", *both(lambda x, y: shuffle(x, 11))),
        ("chunk_shuffle", *both(lambda x, y: chunk_shuffle(ConcatableSequence(x, y), 16, seed=5))),
        ("nested", *both(lambda x, y: InterleaveSequence(
            chunk_shuffle(x, 10, length=100, seed=1)[::2], RepeatSequence(y, 2)[-30:]))),
    ]


def test_compositions_match_lists(bags):
    ra, rb, a, b = bags
    rng = random.Random(1)
    for name, view, model_view in compositions(ra, rb, a, b):
        model = list(model_view)
        assert len(view) == len(model), name
        assert list(view) == model, name
        n = len(model)
        for i in [rng.randrange(-n, n) for _ in range(50)]:
            assert view[i] == model[i], (name, i)
        with pytest.raises(IndexError):
            view[n]
        assert list(view[3:-3:2]) == model[3:-3:2], name
        assert list(reversed(view)) == model[::-1], name
        idx = [rng.randrange(-n, n) for _ in range(20)]
        assert list(view[idx]) == [model[i] for i in idx], name
        assert model[n // 2] in view and b"absent" not in view


def test_native_reads_run_no_python(bags):
    ra, rb, a, b = bags
    for name, view, _ in compositions(ra, rb, a, b):
        assert view._leaf_kinds() == frozenset({"native"}), name
        with Calls() as calls:
            items = list(view)
            one = view[len(view) // 2]
            sub = view[1:9]
            more = list(sub)
        assert calls.names == [], (name, calls.names[:5])
        assert isinstance(one, bytes) and len(more) == len(items[1:9])


def test_python_leaf_is_called_per_element(bags):
    ra, rb, a, b = bags

    class CountingList(list):
        calls = 0

        def __getitem__(self, k):
            CountingList.calls += 1
            return super().__getitem__(k)

    extra = CountingList([b"p0", b"p1", b"p2"])
    view = InterleaveSequence(ra[:4], extra)
    assert view._leaf_kinds() == frozenset({"native", "python"})
    with Calls() as calls:
        items = list(view)
    assert items == [a[0], b"p0", a[1], b"p1", a[2], b"p2", a[3]]
    assert calls.names.count("__getitem__") == 3 == CountingList.calls
    assert len(calls.names) == 3  # the Reader's records came from C


class Decoded:
    """A sequence of objects stored as bytes in a Reader: the protocol
    LoadIt uses to take part in views as a native leaf."""

    def __init__(self, reader, decode):
        self.reader = reader
        self.decode = decode

    def __len__(self):
        return len(self.reader)

    def __getitem__(self, k):
        return self.decode(self.reader[k])

    def __bagcache_seq__(self):
        return self.reader, self.decode


def test_decoded_leaves(tmp_path):
    objs = [{"k": k, "v": "x" * (k % 5)} for k in range(120)]
    reader = write_bag(tmp_path / "objs.bag", [pickle.dumps(o) for o in objs])
    dec = Decoded(reader, pickle.loads)
    view = chunk_shuffle(ConcatableSequence(dec, ["plain"]), 25, seed=3)
    pytest.importorskip("numpy")  # chunk_shuffle_idx returns an array
    model = [(objs + ["plain"])[i] for i in chunk_shuffle_idx(25, 121, 3)]
    assert view._leaf_kinds() == frozenset({"native", "decoded", "python"})
    assert list(view) == model
    assert [view[i] for i in range(-121, 121, 7)] == [model[i] for i in range(-121, 121, 7)]
    only = SequenceView(dec, list(range(119, -1, -3)))
    assert only._leaf_kinds() == frozenset({"native", "decoded"})
    with Calls() as calls:
        items = list(only)
    assert items == objs[119::-3]
    # the only Python calls are the decoder's (pickle.loads is a C function)
    assert calls.names == []
    assert "Decoded" not in repr(only) and "decoded" in repr(SequenceView(dec))


def test_decoder_errors_propagate(tmp_path):
    reader = write_bag(tmp_path / "d.bag", [b"1", b"2", b"x", b"4"])
    view = SequenceView(Decoded(reader, int))
    it = iter(view)
    assert [next(it), next(it)] == [1, 2]
    with pytest.raises(ValueError):
        next(it)
    with pytest.raises(ValueError):
        view[2]
    assert view[3] == 4


def test_bad_protocol_answers(tmp_path):
    reader = write_bag(tmp_path / "p.bag", [b"r"])

    class Bad:
        def __init__(self, answer):
            self.answer = answer

        def __bagcache_seq__(self):
            return self.answer

    with pytest.raises(TypeError):
        SequenceView(Bad([1, 2]))
    with pytest.raises(TypeError):
        SequenceView(Bad((reader, "not callable")))
    assert list(SequenceView(Bad((reader, None)))) == [b"r"]
    assert list(SequenceView(Bad(reader))) == [b"r"]


def test_corrupt_record_raises_in_views(tmp_path):
    path = tmp_path / "c.bagz"
    reader = write_bag(path, [b"record %d" % k * 10 for k in range(50)])
    data = bytearray(path.read_bytes())
    data[0:4] = b"\0\0\0\0"  # record 0's zstd frame loses its magic number
    bad_path = tmp_path / "bad.bagz"
    bad_path.write_bytes(bytes(data))
    bad = bagcache.Reader(str(bad_path))
    view = ConcatableSequence(reader[:3], bad)
    with pytest.raises(ValueError):
        list(view)
    with pytest.raises(ValueError):
        list(InterleaveSequence(bad, ["p"] * 3))


def test_views_pickle_with_readers(bags):
    ra, rb, a, b = bags
    view = InterleaveSequence(chunk_shuffle(ra, 7, seed=2)[5:60], rb[::-1], [b"z"])
    back = pickle.loads(pickle.dumps(view))
    assert list(back) == list(view)


def _child(view, queue):
    queue.put(list(view))


def test_fork_reads(bags):
    ra, rb, a, b = bags
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork")
    view = InterleaveSequence(shuffle(ra, 4), rb)
    want = list(view)
    it = iter(view)
    next(it)  # an iterator with live read-ahead threads in the parent
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    p = ctx.Process(target=_child, args=(view, queue))
    p.start()
    got = queue.get(timeout=60)
    p.join(60)
    assert p.exitcode == 0 and got == want
    assert list(it) == want[1:]


def test_threads_read_native_views(bags):
    ra, rb, a, b = bags
    view = chunk_shuffle(ConcatableSequence(ra, rb, ra), 13, seed=8)
    want = list(view)
    ok = []

    def work(seed):
        rng = random.Random(seed)
        idx = [rng.randrange(len(want)) for _ in range(300)]
        ok.append(list(view) == want and [view[i] for i in idx] == [want[i] for i in idx])

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ok == [True] * 4


def test_reader_subclass_with_own_items_is_a_python_leaf(bags):
    ra, rb, a, b = bags

    class Upper(bagcache.Reader):
        def __getitem__(self, k):
            return super().__getitem__(k).upper()

    up = Upper(rb.file_spec)
    view = SequenceView(up, [0, 1])
    assert view._leaf_kinds() == frozenset({"python"})
    assert list(view) == [b[0].upper(), b[1].upper()]


def test_iterator_partially_consumed_then_dropped(bags):
    ra, rb, a, b = bags
    for _ in range(20):
        it = iter(shuffle(ra, 1))
        next(it)
        del it
    it = iter(RepeatSequence(rb))
    assert [next(it) for _ in range(100)] == (b * 3)[:100]
    del it


def test_endless_native_view(bags):
    ra, rb, a, b = bags
    r = RepeatSequence(rb)
    assert r[41 * 10**9 + 3] == b[3]
    assert list(r[40:44]) == [b[40], b[0], b[1], b[2]]
    with pytest.raises(TypeError):
        len(r)
    assert os.path.basename(rb.file_spec) == "b.bagz"


def test_views_over_loadit(tmp_path):
    LoadIt = getattr(bagcache, "LoadIt", None)
    if LoadIt is None:
        pytest.skip("bagcache.LoadIt is not built")

    items = [{"k": k, "text": "t" * (k % 9)} for k in range(230)]

    def source():
        yield from items

    loader = LoadIt(str(tmp_path / "cache"), source, max_shard_length=32)
    try:
        view = InterleaveSequence(chunk_shuffle(loader, 50, seed=4), ["p", "q"], loader[200:])
        pytest.importorskip("numpy")  # chunk_shuffle_idx returns an array
        perm = chunk_shuffle_idx(50, 230, 4)
        model = ref = InterleaveSequence([items[i] for i in perm], ["p", "q"], items[200:])
        assert view._leaf_kinds() == frozenset({"native", "decoded", "python"})
        assert list(view) == list(ref) and len(view) == len(model)
        assert [view[i] for i in range(-len(view), len(view), 11)] == \
            [ref[i] for i in range(-len(ref), len(ref), 11)]
        # warm now: a view of the loader alone reads in C, decodes with
        # pickle.loads (a C function) and calls no Python code
        only = SequenceView(loader, list(range(229, -1, -4)))
        assert only._leaf_kinds() == frozenset({"native", "decoded"})
        with Calls() as calls:
            got = list(only)
        assert got == items[229::-4] and calls.names == []
    finally:
        loader.close()
