"""Ctrl-C reaches every blocking call of the Python API (issue 25).

Each test runs a script in a child process whose source hangs in
time.sleep(3600) at item 15, on every pass and in whichever thread runs it
(a prefetch worker, a pool thread helping with a batch, or the caller).
Once the child is blocked in the call under test, it is sent SIGINT; the
call must raise KeyboardInterrupt.  The bound is generous (LIMIT seconds,
against the hour the source sleeps): the test checks that the call ends
at all, not how fast; the latency from the signal to the exception is
printed (pytest -s) for the record."""

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

LIMIT = 10  # seconds

PRELUDE = """
import os, signal, sys, time
import bagcache

# (A child started with SIGINT ignored, as by a shell's background job,
# would keep ignoring it.)
signal.signal(signal.SIGINT, signal.default_int_handler)

def gen():
    for i in range(100):
        if i == 15:
            print("stuck", flush=True)
            time.sleep(3600)
        time.sleep(0.003)
        yield i.to_bytes(8, "little")

root = sys.argv[1]
"""

# A root whose 100 records are all known (the length too), with every
# shard but the first removed: reads of them regenerate from `gen`.
LOST_SHARDS = """
def ok():
    return (i.to_bytes(8, "little") for i in range(100))

with bagcache.LoadIt(root, ok, max_shard_length=10, serializer="raw") as full:
    assert len(full) == 100
    full.wait_until_all_cached()
for name in os.listdir(os.path.join(root, "shards")):
    if not name.startswith("0."):
        os.unlink(os.path.join(root, "shards", name))
"""


def run_interrupted(tmp_path, setup, call):
    """Runs `setup`, then `call` (an expression or statement) in a child
    process; sends SIGINT once the child is in the call and the source is
    stuck.  Returns the latency in ms from the signal to the child's
    KeyboardInterrupt (as the parent saw it)."""
    script = tmp_path / "script.py"
    script.write_text(PRELUDE + textwrap.dedent(setup) + textwrap.dedent(f"""
        print("calling", flush=True)
        try:
            {call}
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            os._exit(0)
        print("returned", flush=True)
        os._exit(1)
        """))
    p = subprocess.Popen([sys.executable, str(script), str(tmp_path / "root")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    q = queue.Queue()

    def pump():
        for line in p.stdout:
            q.put((time.monotonic(), line.strip()))
        q.put((time.monotonic(), None))

    threading.Thread(target=pump, daemon=True).start()

    def next_line():
        try:
            return q.get(timeout=LIMIT)
        except queue.Empty:
            p.kill()
            pytest.fail(f"no output from the child within {LIMIT} s")

    try:
        seen = set()
        while not {"calling", "stuck"} <= seen:
            _, line = next_line()
            assert line is not None, p.stderr.read()
            seen.add(line)
        time.sleep(0.3)  # blocked in the call by now
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        while True:
            t, line = next_line()
            if line != "stuck":  # (a pass started meanwhile)
                break
        assert line == "interrupted", (line, p.stderr.read())
        latency = (t - sent) * 1e3
        print(f"KeyboardInterrupt {latency:.1f} ms after SIGINT")
        assert p.wait(LIMIT) == 0
        return latency
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


LOADIT = """
ld = bagcache.LoadIt(root, gen, max_shard_length=10, preload_fn=None, serializer="raw")
ld[0]
"""

# Every call below blocks on the hung source; `ld[0]` filled shard 0.
CALLS = {
    "get": "ld[15]",
    "get from the end": "ld[-1]",
    "slice from the end": "ld[-5:]",
    "slice read": "list(ld[10:20])",
    "read_indices": "ld.read_indices(list(range(30)))",
    "read_indices fanned out": "ld.read_indices(list(range(100)))",
    "read_indices numpy": "import numpy; ld.read_indices(numpy.arange(30))",
    "view read_indices": "ld[0:50].read_indices(list(range(30)))",
    "view get": "ld[5:50][10]",
    "iteration": "for _ in ld: pass",
    "len": "len(ld)",
    "wait_until_all_cached": "ld.wait_until_all_cached()",
}


@pytest.mark.parametrize("call", list(CALLS.values()), ids=list(CALLS))
def test_loadit_call_interrupted(tmp_path, call):
    run_interrupted(tmp_path, LOADIT, call)


@pytest.mark.parametrize("call", ["v[25]", "list(v)"], ids=["get", "iteration"])
def test_views_module_interrupted(tmp_path, call):
    """A bagcache.views view over a LoadIt (a concatenation of two of its
    slices)."""
    run_interrupted(tmp_path, LOADIT + """
from bagcache import ConcatableSequence
v = ConcatableSequence(ld[0:10], ld[10:40])
""", call)


def test_reader_over_cache_interrupted(tmp_path):
    """A LoadIt opened over a complete root whose shards are lost: reads
    regenerate them from the hung source."""
    run_interrupted(tmp_path, LOST_SHARDS + """
ld = bagcache.LoadIt(root, gen, max_shard_length=10, preload_fn=None, serializer="raw")
assert len(ld) == 100
ld[0]
""", "ld.read_indices(list(range(100)))")


@pytest.mark.parametrize("workers", [0, 2])
def test_train_loader_next_interrupted(tmp_path, workers):
    """bagcache.train.DataLoader over a LoadIt (length known, shards lost):
    next() while the batch's records regenerate from the hung source."""
    run_interrupted(tmp_path, LOST_SHARDS + f"""
from bagcache.train import ARDataset, DataLoader
ld = bagcache.LoadIt(root, gen, max_shard_length=10, preload_fn=None, serializer="raw")
ds = ARDataset.from_sequence(ld, "<u8")
dl = DataLoader(ds, num_workers={workers}, batch_size=50, mode=0)
it = iter(dl)
""", "next(it)")
