"""Threads and processes: one Reader shared by threads, pickled Readers in a
fork Pool, one Writer shared by threads, and the GIL released while the C
library reads."""

import multiprocessing as mp
import threading
import time

import pytest

import bagcache as bagz

import bagz_data as bd


def _read_worker_helper(reader, idx):
    return reader[idx]


def _read_view_helper(reader):
    return reader.read(), list(reader[::-1])


def test_multiprocessing_pool(bag_path, records):
    reader = bagz.Reader(bag_path)
    reader.read()  # the parent's worker pool exists before the fork
    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
    with ctx.Pool(processes=2) as pool:
        results = pool.starmap(_read_worker_helper, [(reader, i) for i in range(len(reader))])
        views = pool.map(_read_view_helper, [reader[3:15:2], reader[::-2]])
    assert results == records
    assert views == [(records[3:15:2], records[3:15:2][::-1]),
                     (records[::-2], records[::-2][::-1])]


def test_threads_share_one_reader(tmp_path):
    np = pytest.importorskip("numpy")
    n = 3000
    records = [b"%05d:" % i + b"x" * (i % 97) for i in range(n)]
    bd.write_records(tmp_path / "t.bagz", records)
    reader = bagz.Reader(tmp_path / "t.bagz", bagz.Reader.Options(max_parallelism=4))
    errors = []

    def work(seed):
        try:
            rng = np.random.default_rng(seed)
            for _ in range(3):
                idx = rng.integers(0, n, size=500)
                assert reader.read_indices(idx) == [records[i] for i in idx]
                for i in idx[:100]:
                    assert reader[int(i)] == records[i]
                view = reader[int(idx[0]) % 50::7]
                assert list(view) == records[int(idx[0]) % 50::7]
                got = list(reader.read_indices_iter(iter(idx.tolist()), read_ahead=16))
                assert got == [records[i] for i in idx]
            assert bagz.MultiIndex(reader)[records[seed]] == [seed]
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_threads_share_one_writer(tmp_path):
    path = tmp_path / "w.bagz"
    writer = bagz.Writer(path)

    def work(t):
        for i in range(400):
            writer.write(b"t%d-%04d" % (t, i) * (1 + i % 5))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    writer.close()
    got = list(bagz.Reader(path))
    want = [b"t%d-%04d" % (t, i) * (1 + i % 5) for t in range(4) for i in range(400)]
    assert sorted(got) == sorted(want)
    for t in range(4):  # each thread's own records stay in its order
        mine = [r for r in got if r.startswith(b"t%d-" % t)]
        assert mine == [b"t%d-%04d" % (t, i) * (1 + i % 5) for i in range(400)]


def _python_ran_during(action):
    """Whether another thread ran Python code early in action(): it records
    timestamps in a loop, which it cannot do while the GIL is held.  With
    the GIL held through the action's C call, the only stamps inside
    [t0, t1] are taken after the call returned (while this thread waits to
    get the GIL back), i.e. in the last part of the interval; so only
    stamps in its first half count."""
    stamps = []
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            stamps.append(time.perf_counter())

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        time.sleep(0.01)
        t0 = time.perf_counter()
        action()
        t1 = time.perf_counter()
    finally:
        stop.set()
        spinner.join()
    assert t1 - t0 > 0.02, "the action was too fast to tell"
    return any(t0 + 0.05 * (t1 - t0) < s < t0 + 0.5 * (t1 - t0) for s in stamps)


@pytest.mark.parametrize("how", ["getitem", "read", "iterate", "read_indices_iter"])
def test_gil_released_while_reading(tmp_path, how):
    # A record of 48 MiB in zstd frames takes tens of milliseconds to
    # decode.  Tried up to 5 times, so that a busy machine (the spinning
    # thread not scheduled) cannot fail it; holding the GIL fails every try.
    block = bytes(range(256)) * 256
    big = b"".join(block[i:] + block[:i] for i in range(0, 192 * 4, 4)) * 4
    bd.write_records(tmp_path / "g.bagz", [big] * 3)
    reader = bagz.Reader(tmp_path / "g.bagz", bagz.Reader.Options(max_parallelism=1))
    action = {
        "getitem": lambda: reader[1],
        "read": lambda: reader.read_indices([0, 2]),
        "iterate": lambda: next(iter(reader[1:2])),
        "read_indices_iter": lambda: next(reader.read_indices_iter([2])),
    }[how]
    assert any(_python_ran_during(action) for _ in range(5)), \
        "no Python ran in another thread while the record was read"


def test_gil_test_detects_a_held_gil():
    # The check above on an action that holds the GIL throughout (bytes.replace
    # of 48 MiB) must say no, or it proves nothing.  It can say yes wrongly
    # only one way: when the spinner, which gets the GIL at the action's end,
    # keeps it for longer than the action took (the reading thread not
    # scheduled back on a busy machine: seen once under ASan in CI), its
    # stamps fall in the first half.  So, like the check above, up to 5 tries:
    # a held GIL must be told apart at least once.
    big = bytes(range(256)) * 256 * 192 * 4
    assert not all(_python_ran_during(lambda: big.replace(b"\x01", b"\x02\x03"))
                   for _ in range(5)), "a held GIL was never told apart"
