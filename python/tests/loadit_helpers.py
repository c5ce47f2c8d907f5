"""Sources and models shared by the LoadIt tests.

Everything here is importable by name, so it pickles into spawned
processes.  `item(i)` is the model: record i of every source below."""

import os
import time


def item(i):
    """Record i: a dict with an int, a str and bytes of varying length."""
    return {"i": i, "label": f"item_{i}", "data": bytes([i % 251]) * (i % 37)}


class Source:
    """create_iter yielding item(0..n-1), optionally sleeping `delay` before
    each item from `slow_from` on (only while the flag file `slow_flag`
    exists, if one is named), optionally raising ValueError("boom at K")
    when item K is due while the flag file `fail_flag` exists, and counting
    passes in `passes`."""

    def __init__(self, n, delay=0.0, fail_at=None, fail_flag=None, slow_from=0,
                 slow_flag=None):
        self.n = n
        self.delay = delay
        self.slow_from = slow_from
        self.slow_flag = slow_flag
        self.fail_at = fail_at
        self.fail_flag = fail_flag
        self.passes = 0

    def __call__(self):
        self.passes += 1
        return self._gen()

    def _gen(self):
        for i in range(self.n):
            if i == self.fail_at and (self.fail_flag is None or os.path.exists(self.fail_flag)):
                raise ValueError(f"boom at {i}")
            if self.delay and i >= self.slow_from and (
                    self.slow_flag is None or os.path.exists(self.slow_flag)):
                time.sleep(self.delay)
            yield item(i)


class Seekable:
    """A seekable create_iter: create_iter(start) yields item(start..n-1),
    so a fill starts at its shard and crosses nothing."""

    def __init__(self, n):
        self.n = n

    def __call__(self, start=0):
        return (item(i) for i in range(start, self.n))


class Shifted:
    """A nondeterministic source: item(i + shift) where shift is read from a
    file at each pass."""

    def __init__(self, n, shift_file):
        self.n = n
        self.shift_file = shift_file

    def __call__(self):
        with open(self.shift_file) as f:
            shift = int(f.read())
        return (item(i + shift) for i in range(self.n))


def shard_bytes(root):
    """Total size of the files in root/shards/ (what the disk limit bounds).
    Background work (the publisher of publish-behind, prefetching, other
    processes) may evict while this runs: a file listed but gone by its stat
    was evicted meanwhile and is not counted, so the total is that of files
    that all existed when the listing was made."""
    d = os.path.join(root, "shards")
    total = 0
    for f in os.listdir(d):
        try:
            total += os.path.getsize(os.path.join(d, f))
        except FileNotFoundError:
            pass
    return total


def bagcache_command():
    """(path of the build's `bagcache` command, the environment to run it
    in).  Skips outside make check, which names the build (BC_BUILDDIR).
    The environment drops LD_PRELOAD: in a sanitizer build the command
    carries its own runtime, and the one run-pytest.sh preloads into
    Python must not be loaded into it too."""
    import pytest

    builddir = os.environ.get("BC_BUILDDIR")
    exe = os.path.join(builddir, "bagcache") if builddir else None
    if exe is None or not os.path.exists(exe):
        pytest.skip("not run by make check (BC_BUILDDIR names the bagcache command)")
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    return exe, env
