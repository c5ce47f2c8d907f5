"""Closing a LoadIt: close() releases what the loader holds (open files,
the root's shared state), and a fill stuck in the iterator never keeps the
process from stopping: at exit, or on Ctrl-C while close() waits, it is
abandoned (its claim dropped, nothing published) and the process goes."""

import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import bagcache

# A source that hangs inside a background worker: 3 ms per item, and an
# hour at item 15 while the file named by $STUCK exists (creating
# $STUCK.in first: wait_stuck() waits for that).
STUCK_SOURCE = """
import os, sys, time
import bagcache

def gen():
    for i in range(100):
        if i == 15 and os.path.exists(os.environ.get("STUCK", "/nonexistent")):
            open(os.environ["STUCK"] + ".in", "w").close()
            time.sleep(3600)
        time.sleep(0.003)
        yield i

def wait_stuck():
    deadline = time.monotonic() + 60
    while not os.path.exists(os.environ["STUCK"] + ".in"):
        assert time.monotonic() < deadline, "the source never got stuck"
        time.sleep(0.01)
"""

LIMIT = 20  # seconds: against the hour the source sleeps


def start(tmp_path, body, *args):
    script = tmp_path / "script.py"
    script.write_text(STUCK_SOURCE + textwrap.dedent(body))
    flag = tmp_path / "stuck"
    flag.touch()
    env = dict(os.environ, STUCK=str(flag))
    return subprocess.Popen([sys.executable, str(script), *map(str, args)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def lines(p):
    """A function returning the child's next stdout line (split), failing
    the test when none comes within LIMIT seconds."""
    q = queue.Queue()

    def pump():
        for line in p.stdout:
            q.put(line)
        q.put(None)

    threading.Thread(target=pump, daemon=True).start()

    def next_line():
        try:
            line = q.get(timeout=LIMIT)
        except queue.Empty:
            p.kill()
            pytest.fail(f"no output from the child within {LIMIT} s")
        return (line or "").split()

    return next_line


def finish(p):
    try:
        out, err = p.communicate(timeout=LIMIT)
        out = out or ""
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        pytest.fail(f"the process did not exit within {LIMIT} s")
    return p.returncode, out, err


@pytest.mark.parametrize("preload", [False, True], ids=["prefetch", "preload_all_async"])
def test_exit_with_a_worker_stuck_in_the_iterator(tmp_path, preload):
    p = start(tmp_path, f"""
        ld = bagcache.LoadIt(sys.argv[1], gen, max_shard_length=10,
                             preload_all_async={preload})
        print(ld[0], flush=True)
        wait_stuck()  # the worker is in item 15's hour now
        print("end", flush=True)
        """, tmp_path / "r")
    t0 = time.monotonic()
    rc, out, err = finish(p)
    assert (rc, out.split()) == (0, ["0", "end"]), err
    assert time.monotonic() - t0 < LIMIT
    # Nothing the stuck fill wrote was published: shard 0 only.
    assert os.listdir(tmp_path / "r" / "shards") == ["0.10.bag"]


def test_two_ctrl_c_while_a_read_waits_for_a_stuck_fill(tmp_path):
    p = start(tmp_path, """
        ld = bagcache.LoadIt(sys.argv[1], gen, max_shard_length=10)
        print(ld[0], flush=True)
        wait_stuck()
        print("reading", flush=True)
        ld[15]  # the worker's fill: waits for the hour
        """, tmp_path / "r")
    line = lines(p)
    assert line() == ["0"]
    assert line() == ["reading"]
    time.sleep(0.3)
    p.send_signal(signal.SIGINT)  # KeyboardInterrupt in ld[15]: the script ends
    time.sleep(0.3)
    try:
        p.send_signal(signal.SIGINT)  # a second one while it exits
    except ProcessLookupError:
        pass
    rc, _, err = finish(p)
    assert rc == -signal.SIGINT, err  # how Python ends on KeyboardInterrupt
    assert "KeyboardInterrupt" in err


def test_ctrl_c_in_close_abandons_the_fill_for_other_processes(tmp_path):
    """The stuck process lives on; its claim on the shard is dropped, so
    another process fills the shard instead of waiting for it forever."""
    root = tmp_path / "r"
    p = start(tmp_path, """
        ld = bagcache.LoadIt(sys.argv[1], gen, max_shard_length=10)
        print(ld[0], flush=True)
        wait_stuck()
        print("closing", flush=True)
        while True:  # (a Ctrl-C may come before close() started)
            try:
                ld.close()
            except KeyboardInterrupt:
                if ld.closed:
                    break
        import signal
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # more may come
        print("interrupted", ld.closed, flush=True)
        time.sleep(3600)
        """, root)
    line = lines(p)
    try:
        assert line() == ["0"]
        assert line() == ["closing"]
        got = []
        waiter = threading.Thread(target=lambda: got.append(line()), daemon=True)
        waiter.start()
        while waiter.is_alive():  # Ctrl-C until close() gives up the fill
            time.sleep(0.3)
            p.send_signal(signal.SIGINT)
        assert got == [["interrupted", "True"]]
        other = subprocess.run(
            [sys.executable, "-c", textwrap.dedent("""
                import sys, bagcache
                ld = bagcache.LoadIt(sys.argv[1], lambda: iter(range(100)), max_shard_length=10,
                                     preload_fn=None)
                print(ld[15], ld[19], ld.stats()["fills"])
                """), str(root)],
            capture_output=True, text=True, timeout=LIMIT)
        assert other.returncode == 0, other.stderr
        assert other.stdout.split() == ["15", "19", "1"]
        assert p.poll() is None  # still stuck, and alive
    finally:
        p.kill()
        p.communicate()
    assert sorted(os.listdir(root / "shards")) == ["0.10.bag", "10.20.bag"]


# ---- close() releases what the loader holds ---------------------------------------------


def lock_fds(root):
    """Descriptors of this process open on ROOT/locks/*."""
    locks = os.path.realpath(os.path.join(root, "locks"))
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the directory's own descriptor, gone already
        if target.startswith(locks + os.sep):
            found.append(target)
    return found


def test_close_releases_the_shared_state(tmp_path):
    root = str(tmp_path / "r")
    ld = bagcache.LoadIt(root, lambda: iter(range(100)), max_shard_length=10)
    assert ld[50] == 50
    view = ld[10:90:3]
    assert view[5] == 25
    it = iter(view)
    assert next(it) == 10
    assert lock_fds(root)  # users, lock.mdb, data.mdb (file and map)
    ld.close()
    assert lock_fds(root) == []
    for call in (lambda: ld[50], lambda: view[5], lambda: next(it), lambda: ld.read_indices([1])):
        with pytest.raises(ValueError, match="the LoadIt is closed"):
            call()
    assert repr(ld).endswith(", closed)") and repr(view) == "LoadItView(closed)"
    ld.close()  # idempotent


def test_close_keeps_the_state_of_another_loader_on_the_root(tmp_path):
    root = str(tmp_path / "r")
    a = bagcache.LoadIt(root, lambda: iter(range(100)), max_shard_length=10)
    b = bagcache.LoadIt(root, lambda: iter(range(100)), max_shard_length=10)
    assert (a[5], b[15]) == (5, 15)
    a.close()
    assert lock_fds(root)  # b still uses the process's environment
    assert b[25] == 25
    b.close()
    assert lock_fds(root) == []


def test_after_close_another_process_can_repair_the_state(tmp_path):
    root = tmp_path / "r"
    ld = bagcache.LoadIt(str(root), lambda: iter(range(100)), max_shard_length=10,
                         preload_fn=None)
    assert [ld[i] for i in (5, 50, 95)] == [5, 50, 95]
    ld.close()  # ld stays referenced
    data = root / "locks" / "data.mdb"
    data.write_bytes(b"\xa5" * data.stat().st_size)  # damaged
    other = subprocess.run(
        [sys.executable, "-c", textwrap.dedent("""
            import sys, bagcache
            ld = bagcache.LoadIt(sys.argv[1], lambda: iter(range(100)), max_shard_length=10)
            print(ld[50], ld.stats()["shards_present"])
            """), str(root)],
        capture_output=True, text=True, timeout=60)
    assert other.returncode == 0, other.stderr
    # Rebuilt from the shard files: 0..9, the passes to 5 and 9 kept the
    # shards on their way.
    assert other.stdout.split() == ["50", "10"]
    assert ld.closed


def test_close_while_another_thread_reads(tmp_path):
    """The read in flight ends (with its record, or ValueError), and the
    last reference it held releases the shared state."""
    import threading

    root = str(tmp_path / "r")

    def slow():
        for i in range(100):
            if i >= 10:
                time.sleep(0.02)
            yield i

    ld = bagcache.LoadIt(root, slow, max_shard_length=10, preload_fn=None)
    assert ld[5] == 5
    got = []

    def reader():
        try:
            got.append(ld[15])
        except Exception as e:  # noqa: BLE001 - the test looks at the class
            got.append(type(e))

    t = threading.Thread(target=reader)
    t.start()
    time.sleep(0.05)  # the reader is inside shard 1's fill
    ld.close()
    t.join(LIMIT)
    assert not t.is_alive()
    assert got in ([15], [ValueError])
    assert lock_fds(root) == []
    with pytest.raises(ValueError, match="the LoadIt is closed"):
        ld[15]
