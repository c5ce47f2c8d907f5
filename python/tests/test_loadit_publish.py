"""LoadIt's publish-behind (doc/cache.md, "Publish-behind"): a miss returns
before its shard is durable; sync() waits for the publisher and raises a
publish that failed, once, as an OSError with its errno."""

import errno
import os
import shutil

import pytest

from bagcache import LoadIt

N, R = 100, 10


def records():
    return (b"record-%04d" % i for i in range(N))


def shard_names(root):
    return sorted(os.listdir(os.path.join(root, "shards")))


def test_sync_makes_every_miss_durable(tmp_path):
    root = str(tmp_path / "c")
    with LoadIt(root, records, max_shard_length=R, serializer="raw",
                preload_fn=None) as loader:
        for i in (5, 25, 45, 65):  # four misses, each keeping a shard on its way
            assert loader[i] == b"record-%04d" % i
        assert loader.sync() is None
        assert shard_names(root) == ["%d.%d.bag" % (s, s + 10) for s in range(0, 70, 10)]
        st = loader.stats()
        assert st["fills"] == 4 and st["shards_kept"] == 3
        # No limit: every shard published behind, the kept ones too.
        assert st["publishes_queued"] == 7
        assert st["publish_failures"] == 0
        assert loader.sync() is None  # nothing queued: returns at once
    # Another loader without a source reads all four from the disk.
    with LoadIt(root, None, serializer="raw") as again:
        assert [again[i] for i in (5, 25, 45, 65)] == [b"record-%04d" % i
                                                        for i in (5, 25, 45, 65)]


def test_a_failed_publish_is_raised_once_by_sync(tmp_path):
    root = str(tmp_path / "c")
    with LoadIt(root, records, max_shard_length=R, serializer="raw",
                preload_fn=None) as loader:
        assert loader[5] == b"record-0005"
        loader.sync()
        # shards/ becomes a file: the publisher's rename into it fails.
        shards = os.path.join(root, "shards")
        shutil.rmtree(shards)
        with open(shards, "w"):
            pass
        assert loader[15] == b"record-0015"  # served from its scratch file
        with pytest.raises(OSError) as info:
            loader.sync()
        assert info.value.errno == errno.ENOTDIR
        assert "shards" in str(info.value)
        assert loader.sync() is None  # reported once
        assert loader.stats()["publish_failures"] == 1
        assert loader[15] == b"record-0015"  # still served, from memory or again


def test_sync_of_a_closed_loader(tmp_path):
    loader = LoadIt(str(tmp_path / "c"), records, max_shard_length=R, serializer="raw")
    loader.close()
    with pytest.raises(Exception):
        loader.sync()


@pytest.mark.parametrize("ahead, present", [(True, 3), (False, 4)])
def test_evict_ahead_keeps_room_for_the_next_miss(tmp_path, ahead, present):
    # A limit of four and a half shards, the length known (so that misses
    # publish behind from the second one).  With evict_ahead the publisher
    # evicts until one more shard fits: after 8 misses 3 shards are on
    # disk, else 4.  Either way the reads are right and the limit holds.
    root = str(tmp_path / "c")
    with LoadIt(root, records, max_shard_length=R, serializer="raw",
                preload_fn=None) as first:
        assert first[0] == b"record-0000"
    one = os.path.getsize(os.path.join(root, "shards", "0.10.bag"))  # what the limit counts
    shutil.rmtree(root)
    limit = 4 * one + one // 2
    with LoadIt(root, records, max_shard_length=R, serializer="raw", preload_fn=None,
                memory_limit=limit, length=N, evict_ahead=ahead) as loader:
        for s in range(8):
            assert loader[s * R + 3] == b"record-%04d" % (s * R + 3)
            loader.sync()
            assert len(shard_names(root)) <= 4
        assert len(shard_names(root)) == present
        st = loader.stats()
        assert st["evictions"] == 8 - present
        assert st["bytes_on_disk"] <= limit
