"""bagcache.torch: the map-style Dataset under torch's DataLoader with
worker processes (fork and spawn), DistributedSampler against
bagcache.train's epoch order and state, and two gloo ranks on 127.0.0.1
whose epochs are disjoint and complete.  Skipped without torch."""

import operator
import os
import pickle
import socket
import subprocess
import sys
import textwrap
import time

import pytest

torch = pytest.importorskip(
    "torch", reason="torch is not installed (Debian: apt-get install python3-torch): "
    "the bagcache.torch tests did not run")

import bagcache  # noqa: E402
from bagcache import train  # noqa: E402
from bagcache.torch import Dataset, DistributedSampler  # noqa: E402

np = pytest.importorskip("numpy")

EPOCH = train.Sampler.Mode.EPOCH
N = 37

# Under AddressSanitizer (run-pytest.sh preloads its runtime), a worker that
# torch forks from this threaded process can hang inside the sanitizer's
# own allocator: a lock another thread held at fork() stays held in the
# child (seen once on a loaded machine, in a child doing no bagcache work).
# The plain build runs these tests; the spawn variant runs under ASan too.
UNDER_ASAN = "asan" in os.environ.get("LD_PRELOAD", "")
skip_fork_under_asan = pytest.mark.skipif(
    UNDER_ASAN, reason="fork() of a threaded process can hang in ASan's allocator; "
    "the plain build runs this test")


def record(i):
    return b"rec-%03d" % i + b"." * (i % 5)


@pytest.fixture
def reader(tmp_path):
    with bagcache.Writer(str(tmp_path / "r.bag")) as w:
        for i in range(N):
            w.write(record(i))
    return bagcache.Reader(str(tmp_path / "r.bag"))


@pytest.fixture
def loadit(tmp_path):
    cache = bagcache.LoadIt(lambda: iter(range(100, 100 + N)), root_dir=str(tmp_path / "c"),
                            max_shard_length=8)
    # Filled before any worker starts: fork then happens with the fills
    # idle, and a spawned copy (create_iter is a lambda, which does not
    # pickle) reads the cache.
    assert cache.wait_until_all_cached()
    yield cache
    cache.close()


def model_order(n, seed, epoch):
    """The documented EPOCH order, from the views' shuffle."""
    return list(bagcache.shuffle(range(n), seed=train.Sampler.epoch_seed(seed, epoch)))


def loader_epoch(n, b, seed, epoch, rank, world, drop_last=False):
    """Rank's indices of one epoch from bagcache.train's sampler."""
    s = train.Sampler(n, b, EPOCH, seed, rank=rank, world_size=world, drop_last=drop_last,
                      num_epochs=epoch + 1)
    s.load_state_dict({"mode": EPOCH, "seed": seed, "epoch": epoch, "consumed": 0})
    return [int(i) for batch in s for i in batch]


def test_import_does_not_need_torch():
    code = textwrap.dedent("""
        import sys
        import bagcache, bagcache.train
        assert "torch" not in sys.modules and "bagcache.torch" not in sys.modules
        sys.modules["torch"] = None  # as if torch were not installed
        try:
            import bagcache.torch
        except ImportError as e:
            print(e)
        else:
            raise SystemExit("imported")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "bagcache.torch needs PyTorch" in out.stdout
    # Inside the package, `import torch` is the real torch.
    import bagcache.torch as bt
    assert bt._torch is torch and bt._torch.__name__ == "torch"


def test_dataset_over_sequences(reader, loadit, tmp_path):
    a = np.arange(N * 3, dtype=np.int32).reshape(N, 3)
    train.converter(a, tmp_path / "ar", blocksize=10)
    cases = [
        (reader, [record(i) for i in range(N)]),
        (loadit, list(range(100, 100 + N))),
        (bagcache.shuffle(reader, seed=5)[3:20], [record(i) for i in range(N)]),
        (train.ARDataset(tmp_path / "ar"), list(a)),
        (a, list(a)),
        ([record(i) for i in range(N)], [record(i) for i in range(N)]),
    ]
    cases[2] = (cases[2][0], [record(int(i)) for i in
                              bagcache.shuffle(range(N), seed=5)[3:20]])
    idx = [5, 0, 16, 5, -1]
    for seq, want in cases:
        ds = Dataset(seq)
        assert len(ds) == len(want)
        for i in range(len(want)):
            np.testing.assert_array_equal(ds[i], want[i])
        got = ds.__getitems__(idx)
        assert isinstance(got, list) and len(got) == len(idx)
        for g, i in zip(got, idx):
            np.testing.assert_array_equal(g, want[i])
        # It pickles, and the copy reads the same.
        copy = pickle.loads(pickle.dumps(ds))
        for g, i in zip(copy.__getitems__(idx), idx):
            np.testing.assert_array_equal(g, want[i])
    ds = Dataset(reader, transform=bytes.upper)
    assert ds[3] == record(3).upper() and ds.__getitems__([1, 2]) == [record(1).upper(),
                                                                      record(2).upper()]
    with pytest.raises(IndexError):
        Dataset(reader)[N]
    with pytest.raises(TypeError):
        Dataset(reader, transform=3)
    with pytest.raises(TypeError):
        Dataset(iter(range(3)))


@pytest.mark.parametrize("context", [pytest.param("fork", marks=skip_fork_under_asan),
                                     "spawn"])
def test_torch_dataloader_workers(reader, loadit, context):
    sampler = DistributedSampler(N, num_replicas=1, rank=0, seed=11)
    sampler.set_epoch(2)
    order = model_order(N, 11, 2)
    cases = [
        # Reader records stay bytes (torch's collate keeps a list of them).
        (Dataset(reader, transform=bytes.upper), [record(i).upper() for i in order]),
        # LoadIt items are ints: collated into tensors.
        (Dataset(loadit, transform=operator.neg), [-(100 + i) for i in order]),
    ]
    for ds, want in cases:
        loader = torch.utils.data.DataLoader(
            ds, batch_size=5, sampler=sampler, num_workers=2,
            multiprocessing_context=context, timeout=120)
        assert len(loader) == 8
        got = []
        for batch in loader:
            got.extend(batch.tolist() if isinstance(batch, torch.Tensor) else batch)
        assert got == want


def test_sampler_equals_train_order():
    for n in (0, 1, 5, 37, 64):
        for world in (1, 2, 3, 4):
            for drop_last in (False, True):
                for epoch in (0, 3):
                    order = model_order(n, 9, epoch)
                    end = n // world * world if drop_last else n
                    seen = []
                    for rank in range(world):
                        s = DistributedSampler(n, num_replicas=world, rank=rank, seed=9,
                                               drop_last=drop_last)
                        s.set_epoch(epoch)
                        got = list(s)
                        assert len(s) == len(got)
                        assert got == order[rank:end:world]
                        if not drop_last:
                            # The loader's rank split, for any batch size.
                            assert got == loader_epoch(n, 1, 9, epoch, rank, world)
                            assert got == loader_epoch(n, 4, 9, epoch, rank, world)
                        else:
                            assert got == loader_epoch(n, 1, 9, epoch, rank, world, True)
                        seen += got
                    # Disjoint; complete without drop_last.
                    assert len(set(seen)) == len(seen)
                    assert sorted(seen) == sorted(order[:end])
    # A new order per epoch, and shuffle=False is the identity.
    s = DistributedSampler(range(50), num_replicas=1, rank=0, seed=1)
    first = list(s)
    s.set_epoch(1)
    assert list(s) != first and sorted(first) == list(range(50))
    s = DistributedSampler(range(10), num_replicas=3, rank=1, shuffle=False)
    assert list(s) == [1, 4, 7]
    with pytest.raises(ValueError):
        DistributedSampler(10, num_replicas=2, rank=2)


def test_state_matches_the_loader():
    n, b, world, seed = 53, 4, 3, 21
    for rank in range(world):
        full = loader_epoch(n, b, seed, 1, rank, world)
        with train.DataLoader(train.NPDataset(np.arange(n)), num_workers=0, batch_size=b,
                              mode=EPOCH, seed=seed, rank=rank, world_size=world,
                              num_epochs=3) as loader:
            loader.load_state_dict({"mode": EPOCH, "seed": seed, "epoch": 1, "consumed": 0})
            for k in range(3):
                next(loader)
            state = loader.state_dict()
        assert state == {"mode": EPOCH, "seed": seed, "epoch": 1, "consumed": 3 * b * world}
        s = DistributedSampler(n, num_replicas=world, rank=rank, seed=seed)
        s.set_epoch(1)
        it = iter(s)
        taken = [next(it) for _ in range(3 * b)]
        assert taken == full[:3 * b]
        assert s.state_dict() == state
        assert s.state_dict(samples=3 * b) == state
        # A sampler resumed from the loader's state yields the rest.
        r = DistributedSampler(n, num_replicas=world, rank=rank, seed=seed)
        r.load_state_dict(state)
        r.set_epoch(1)  # the same epoch keeps the position
        assert len(r) == len(full) - 3 * b
        assert list(r) == full[3 * b:]
        # The iteration after that is the whole of the next epoch.
        r.set_epoch(2)
        assert list(r) == loader_epoch(n, b, seed, 2, rank, world)
        # Exhausting the epoch reports its end, as the loader does.
        s2 = DistributedSampler(n, num_replicas=world, rank=rank, seed=seed)
        s2.set_epoch(1)
        assert list(s2) == full
        assert s2.state_dict() == {"mode": EPOCH, "seed": seed, "epoch": 2, "consumed": 0}
    # A loader resumed from the sampler's state continues the same order.
    s = DistributedSampler(n, num_replicas=1, rank=0, seed=seed)
    it = iter(s)
    head = [next(it) for _ in range(20)]
    with train.DataLoader(train.NPDataset(np.arange(n)), num_workers=0, batch_size=10,
                          mode=EPOCH, seed=seed, num_epochs=1) as loader:
        loader.load_state_dict(s.state_dict())
        tail = [int(i) for batch in loader for i in batch["data"]]
    assert head + tail == model_order(n, seed, 0)
    # Resuming on another world size splits the rest of the same order.
    rest = []
    for rank in range(2):
        r = DistributedSampler(n, num_replicas=2, rank=rank, seed=seed)
        r.load_state_dict(s.state_dict(samples=20))
        rest += list(r)
    assert sorted(head + rest) == list(range(n)) and len(head + rest) == n
    # Another epoch than the loaded one starts at its beginning.
    r = DistributedSampler(np.int64(n), num_replicas=1, rank=0, seed=seed)
    r.load_state_dict(state)
    assert r.state_dict() == state
    r.set_epoch(2)
    assert r.state_dict() == {"mode": EPOCH, "seed": seed, "epoch": 2, "consumed": 0}
    assert list(r) == model_order(n, seed, 2)
    # Bad states change nothing.
    with pytest.raises(ValueError, match="mode"):
        DistributedSampler(n, shuffle=False).load_state_dict(s.state_dict())
    with pytest.raises(ValueError, match="consumed"):
        s.load_state_dict({"mode": EPOCH, "seed": 0, "epoch": 0, "consumed": n + 1})
    with pytest.raises(ValueError):
        s.load_state_dict({"mode": EPOCH})


RANK_SCRIPT = """
import json, sys
import torch.distributed as dist
from bagcache.torch import DistributedSampler

dist.init_process_group("gloo", init_method="env://", timeout=__import__("datetime").timedelta(seconds=90))
out = {}
for drop_last in (False, True):
    s = DistributedSampler(__N__, seed=5, drop_last=drop_last)  # ranks from torch.distributed
    assert s.num_replicas == 2 and s.rank == dist.get_rank()
    epochs = []
    for epoch in range(3):
        s.set_epoch(epoch)
        mine = list(s)
        assert len(mine) == len(s)
        both = [None, None]
        dist.all_gather_object(both, mine)
        epochs.append(both)
    out[str(drop_last)] = epochs
if dist.get_rank() == 0:
    with open(sys.argv[1], "w") as f:
        json.dump(out, f)
dist.barrier()
dist.destroy_process_group()
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_gloo_ranks(tmp_path):
    n = 101
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT.replace("__N__", str(n)))
    result = tmp_path / "out.json"
    for attempt in range(3):  # another process may take the free port first
        port = free_port()
        procs, logs = [], []
        for rank in range(2):
            env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                       RANK=str(rank), WORLD_SIZE="2", GLOO_SOCKET_IFNAME="lo")
            logs.append(open(tmp_path / f"rank{rank}.log", "w+"))
            procs.append(subprocess.Popen([sys.executable, str(script), str(result)], env=env,
                                          stdout=logs[-1], stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 240
        # A rank that fails makes the other one wait for it: stop it then.
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            if any(p.returncode not in (None, 0) for p in procs):
                break
            time.sleep(0.05)
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        outs = []
        for f in logs:
            f.seek(0)
            outs.append(f.read())
            f.close()
        if all(p.returncode == 0 for p in procs):
            break
        if not any("address already in use" in o.lower() for o in outs):
            pytest.fail("a rank failed:\n" + "\n".join(outs))
    else:
        pytest.fail("no free port in 3 attempts:\n" + "\n".join(outs))
    import json

    out = json.loads(result.read_text())
    for drop_last, epochs in out.items():
        end = n // 2 * 2 if drop_last == "True" else n
        orders = []
        for epoch, (r0, r1) in enumerate(epochs):
            order = model_order(n, 5, epoch)
            assert r0 == order[0:end:2] and r1 == order[1:end:2]
            assert not set(r0) & set(r1)  # disjoint
            assert sorted(r0 + r1) == sorted(order[:end])  # complete
            if drop_last == "False":
                assert sorted(r0 + r1) == list(range(n))
            else:
                assert len(r0) == len(r1) == n // 2
            orders.append(r0 + r1)
        assert orders[0] != orders[1] != orders[2]


@skip_fork_under_asan  # its DataLoader forks two workers
def test_doc_examples(tmp_path, monkeypatch):
    """doc/python.md's torch examples (```py blocks, which the doc tests
    that need no torch leave alone), run as written: a Reader's Dataset
    with the DistributedSampler, and epochs over a LoadIt under a limit."""
    import re

    srcdir = os.environ.get("BC_SRCDIR",
                            os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    with open(os.path.join(srcdir, "doc", "python.md"), encoding="utf-8") as f:
        text = f.read()
    found = [b for b in re.findall(r"^```py\n(.*?)^```$", text, flags=re.M | re.S)
             if "bagcache.torch" in b]
    assert len(found) == 2
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__doc_example__"}
    exec(compile(found[0], "doc/python.md (torch example)", "exec"), namespace)
    assert namespace["batch"].shape == (100, 4) and namespace["batch"].dtype == torch.float32
    namespace = {"__name__": "__doc_example__"}
    exec(compile(found[1], "doc/python.md (torch over a LoadIt)", "exec"), namespace)
    data, x, y = namespace["data"], namespace["x"], namespace["y"]
    assert len(data) == 10_000 and data[1234] == {"x": [1234.0] * 4, "label": 4}
    assert x.shape == (10_000 % 256, 4) and y.shape == (10_000 % 256,)  # the last batch
    assert data.stats()["root"]["records_generated"] >= 10_000
    data.close()
