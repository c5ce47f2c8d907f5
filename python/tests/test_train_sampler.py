"""Sampler beyond loaderx: EPOCH permutations, ranks, drop_last, num_epochs
and resumable state, checked against plain models."""

import pytest

import bagcache
from bagcache import Sampler, _bagcache

np = pytest.importorskip("numpy")

EPOCH = Sampler.Mode.EPOCH


def epoch_order(n, seed, epoch):
    out = np.empty(n, dtype=np.int64)
    _bagcache._epoch_indices(n, Sampler.epoch_seed(seed, epoch), 0, 1, out)
    return out


@pytest.mark.parametrize("n", [0, 1, 2, 3, 10, 1000, 10**6])
def test_epoch_is_a_permutation(n):
    for epoch in (0, 1):
        order = epoch_order(n, 42, epoch)
        assert np.array_equal(np.sort(order), np.arange(n))
    if n >= 10:
        assert not np.array_equal(epoch_order(n, 42, 0), epoch_order(n, 42, 1))
        assert not np.array_equal(epoch_order(n, 42, 0), epoch_order(n, 43, 0))


def test_epoch_order_is_bagcache_shuffle():
    n, seed = 1000, 5
    for epoch in range(3):
        view = bagcache.shuffle(range(n), seed=Sampler.epoch_seed(seed, epoch))
        assert epoch_order(n, seed, epoch).tolist() == list(view)


def test_epoch_seed_documented_formula():
    def mix(x):
        m = 2**64 - 1
        x &= m
        x ^= x >> 30
        x = x * 0xBF58476D1CE4E5B9 & m
        x ^= x >> 27
        x = x * 0x94D049BB133111EB & m
        return x ^ (x >> 31)
    for seed, epoch in [(0, 0), (42, 3), (2**64 - 1, 10**9)]:
        assert Sampler.epoch_seed(seed, epoch) == mix(seed + 0x9E3779B97F4A7C15 * (epoch + 1))


def test_epoch_2_40_sampled():
    """At n = 2**40 the order is computed per position: a sample of positions
    maps into range, injectively, and agrees with strided reads."""
    n = 2**40
    key = Sampler.epoch_seed(1, 0)
    starts = np.random.default_rng(3).integers(0, n - 10**4, 20)
    seen = []
    for s in starts:
        out = np.empty(1000, dtype=np.int64)
        _bagcache._epoch_indices(n, key, int(s), 1, out)
        assert out.min() >= 0 and out.max() < n
        strided = np.empty(100, dtype=np.int64)
        _bagcache._epoch_indices(n, key, int(s), 10, strided)
        assert np.array_equal(strided, out[::10])
        seen.append(out)
    seen = np.concatenate(seen)
    assert len(np.unique(seen)) == len(seen)
    # The last position is in range; one past it is not.
    out = np.empty(1, dtype=np.int64)
    _bagcache._epoch_indices(n, key, n - 1, 1, out)
    assert 0 <= out[0] < n
    with pytest.raises(IndexError):
        _bagcache._epoch_indices(n, key, n, 1, out)
    with pytest.raises(IndexError):
        _bagcache._epoch_indices(10, key, 0, 5, np.empty(3, dtype=np.int64))


def test_index_buffers_must_be_64_bit():
    with pytest.raises(TypeError):
        _bagcache._epoch_indices(10, 1, 0, 1, np.empty(3, dtype=np.int32))
    with pytest.raises(TypeError):
        _bagcache._iid_indices(10, 1, 0, 1, bytearray(16))
    with pytest.raises(ValueError):
        _bagcache._iid_indices(0, 1, 0, 1, np.empty(3, dtype=np.int64))


def run(sampler, steps=None):
    out = []
    for idx in sampler:
        out.append(idx.astype(np.int64).tolist())
        if steps is not None and len(out) == steps:
            break
    return out


@pytest.mark.parametrize("n", [0, 1, 7, 50, 64, 100])
@pytest.mark.parametrize("batch_size", [1, 3, 8])
def test_ranks_cover_each_epoch_once(n, batch_size):
    for world in range(1, 9):
        per_rank = [run(Sampler(n, batch_size, EPOCH, 9, rank=r, world_size=world,
                                num_epochs=2)) for r in range(world)]
        lens = {len(b) for b in per_rank}
        assert len(lens) == 1  # every rank has the same number of batches
        g = world * batch_size
        steps_per_epoch = -(-n // g)
        assert lens == {2 * steps_per_epoch}
        for epoch in range(2):
            order = epoch_order(n, 9, epoch)
            union = []
            for step in range(epoch * steps_per_epoch, (epoch + 1) * steps_per_epoch):
                got = [per_rank[r][step] for r in range(world)]
                for r in range(world):  # strided share of the global order
                    start = (step - epoch * steps_per_epoch) * g
                    expect = order[start + r : min(start + g, n) : world].tolist()
                    assert got[r] == expect
                union += sum(got, [])
            assert sorted(union) == list(range(n))


@pytest.mark.parametrize("world", range(1, 9))
def test_drop_last(world):
    n, b = 50, 3
    g = world * b
    full = n // g
    per_rank = [run(Sampler(n, b, EPOCH, 2, rank=r, world_size=world, drop_last=True,
                            num_epochs=3)) for r in range(world)]
    order = [epoch_order(n, 2, e) for e in range(3)]
    for r in range(world):
        assert len(per_rank[r]) == 3 * full
        assert all(len(x) == b for x in per_rank[r])
    for e in range(3):
        union = sorted(sum((per_rank[r][e * full + s] for r in range(world)
                            for s in range(full)), []))
        assert union == sorted(order[e][: full * g].tolist())
        assert len(set(union)) == len(union)
    s = Sampler(n, b, EPOCH, rank=0, world_size=world, drop_last=True, num_epochs=3)
    assert len(s) == 3 * full


def test_global_order_does_not_depend_on_world_size():
    n, b = 40, 5
    for world in (1, 2, 4):
        steps = [run(Sampler(n, b, EPOCH, 1, rank=r, world_size=world, num_epochs=1))
                 for r in range(world)]
        flat = []
        for s in range(len(steps[0])):
            g = np.empty(sum(len(steps[r][s]) for r in range(world)), dtype=np.int64)
            for r in range(world):
                g[r::world] = steps[r][s]
            flat += g.tolist()
        assert flat == epoch_order(n, 1, 0).tolist()


def test_len():
    assert len(Sampler(10, 3, EPOCH, num_epochs=2)) == 8
    assert len(Sampler(10, 3, EPOCH, num_epochs=2, drop_last=True)) == 6
    assert len(Sampler(10, 3, 0, num_epochs=2)) == 7
    assert len(Sampler(10, 3, 1, num_epochs=2, drop_last=True)) == 6
    assert len(Sampler(0, 3, EPOCH, num_epochs=2)) == 0
    for mode in (0, 1, 2):
        s = Sampler(10, 3, mode, num_epochs=2, world_size=2)
        assert len(run(s)) == len(Sampler(10, 3, mode, num_epochs=2, world_size=2))
        with pytest.raises(TypeError):
            len(Sampler(10, 3, mode))


def test_stream_modes_with_num_epochs():
    assert run(Sampler(5, 2, 0, num_epochs=2)) == [[0, 1], [2, 3], [4, 0], [1, 2], [3, 4]]
    assert run(Sampler(5, 3, 0, num_epochs=2)) == [[0, 1, 2], [3, 4, 0], [1, 2, 3], [4]]
    assert run(Sampler(5, 3, 0, num_epochs=2, drop_last=True)) == [[0, 1, 2], [3, 4, 0],
                                                                    [1, 2, 3]]


def test_bad_arguments():
    with pytest.raises(ValueError):
        Sampler(0, 4, EPOCH)  # endless over nothing
    with pytest.raises(ValueError):
        Sampler(3, 4, EPOCH, drop_last=True)  # no full batch, endless
    with pytest.raises(ValueError):
        Sampler(5, 4, 3)
    with pytest.raises(ValueError):
        Sampler(5, 4, 0, rank=2, world_size=2)
    with pytest.raises(ValueError):
        Sampler(5, 0, 0)
    with pytest.raises(TypeError):
        Sampler(5, True, 0)


@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("drop_last", [False, True])
def test_resume_at_every_cut(mode, drop_last):
    n, b, world = 23, 3, 2
    full = [run(Sampler(n, b, mode, 11, rank=r, world_size=world, drop_last=drop_last,
                        num_epochs=3)) for r in range(world)]
    for cut in range(len(full[0]) + 1):
        for r in range(world):
            s = Sampler(n, b, mode, 11, rank=r, world_size=world, drop_last=drop_last,
                        num_epochs=3)
            head = run(s, cut) if cut else []
            state = s.state_dict()
            t = Sampler(n, b, mode, 0, rank=r, world_size=world, drop_last=drop_last,
                        num_epochs=3)
            t.load_state_dict(state)
            assert t.seed == 11
            assert head + run(t) == full[r]


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_resume_across_a_world_size_change(mode):
    """Two ranks run some steps; four ranks resume from the state: each
    epoch's positions are still used exactly once, in the global order."""
    n, b = 37, 2
    for cut in range(0, 12):
        first = [Sampler(n, b, mode, 5, rank=r, world_size=2, num_epochs=2) for r in range(2)]
        used = [[] for _ in range(2)]  # per rank, its indices, in order
        for _ in range(cut):
            for r in range(2):
                used[r].append(next(first[r]).astype(np.int64).tolist())
        state = first[0].state_dict()
        assert state == first[1].state_dict()
        second = [Sampler(n, b, mode, 0, rank=r, world_size=4, num_epochs=2) for r in range(4)]
        for s in second:
            s.load_state_dict(state)
        rest = [run(s) for s in second]
        # The global stream: interleave the ranks' batches step by step.
        stream = []
        for step in range(cut):
            g = [used[r][step] for r in range(2)]
            stream += interleave(g)
        for step in range(len(rest[0])):
            stream += interleave([rest[r][step] for r in range(4)])
        assert stream == model_stream(mode, n, 5, 2)


def interleave(parts):
    out = []
    for k in range(max(len(p) for p in parts)):
        out += [p[k] for p in parts if k < len(p)]
    return out


def model_stream(mode, n, seed, epochs):
    if mode == EPOCH:
        return sum((epoch_order(n, seed, e).tolist() for e in range(epochs)), [])
    if mode == 0:
        return [p % n for p in range(n * epochs)]
    out = np.empty(n * epochs, dtype=np.int64)
    _bagcache._iid_indices(n, seed & (2**64 - 1), 0, 1, out)
    return out.tolist()


def test_state_checks():
    s = Sampler(10, 2, EPOCH)
    with pytest.raises(ValueError):
        s.load_state_dict({"mode": 0, "seed": 1, "epoch": 0, "consumed": 0})
    with pytest.raises(ValueError):
        s.load_state_dict({"mode": 2, "seed": 1})
    with pytest.raises(ValueError):
        s.load_state_dict({"mode": 2, "seed": 1, "epoch": 0, "consumed": 11})
    with pytest.raises(ValueError):
        s.load_state_dict({"mode": 2, "seed": 1, "epoch": -1, "consumed": 0})


def iid_model(n, seed, p):
    """The documented IID draw: splitmix64-mixed (seed, position), reduced
    by Lemire's multiply-shift with rejection (exactly uniform)."""
    m64 = 2**64 - 1

    def mix(x):
        x &= m64
        x ^= x >> 30
        x = x * 0xBF58476D1CE4E5B9 & m64
        x ^= x >> 27
        x = x * 0x94D049BB133111EB & m64
        return x ^ (x >> 31)

    x = mix(mix(seed) ^ mix(p + 0x9E3779B97F4A7C15))
    threshold = (2**64 - n) % n
    while True:
        m = x * n
        if m & m64 >= threshold:
            return m >> 64
        x = mix(x + 0x9E3779B97F4A7C15)


@pytest.mark.parametrize("n", [1, 3, 10, 2**40 + 3, 2**63 + 1, 2**64 - 1])
def test_iid_draws_match_the_model(n):
    out = np.empty(200, dtype=np.uint64)
    _bagcache._iid_indices(n, 42, 1000, 3, out)
    assert out.tolist() == [iid_model(n, 42, 1000 + 3 * k) for k in range(200)]
    assert all(v < n for v in out.tolist())
