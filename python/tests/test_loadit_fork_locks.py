"""fork() while a LoadIt under a disk limit has published shards.

The library's fork handlers hold its locks across fork(); they must take them
in the order the rest of the library does.  A handler that took a cache's
lock before the environment registry closed a cycle with an environment's
first open (the registry, then LMDB's writer mutex) and a publish under a
limit (the writer mutex, then the cache's lock, for the access clock):
`make check-python-threads` (ThreadSanitizer) runs this test and reported
that as a potential deadlock.  The child starts no thread, since
ThreadSanitizer does not follow a child that does."""

import os

import pytest

import bagcache

from loadit_helpers import Source, item, shard_bytes

N = 100
MSL = 10


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fork_after_publishing_under_a_limit(tmp_path):
    probe = bagcache.LoadIt(str(tmp_path / "probe"), Source(N), max_shard_length=MSL)
    list(probe)
    limit = 4 * max(s["bytes"] for s in probe.shards())
    probe.close()
    root = str(tmp_path / "root")
    loader = bagcache.LoadIt(root, Source(N), max_shard_length=MSL, memory_limit=limit)
    # Reads all over the root: shards published under the limit, some evicted.
    want = [i for i in range(0, N, 7)]
    assert [loader[i] for i in want] == [item(i) for i in want]
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    # The parent goes on: its locks were all released after the fork.
    back = list(range(N - 1, -1, -9))
    assert [loader[i] for i in back] == [item(i) for i in back]
    assert shard_bytes(root) <= limit
    loader.close()
