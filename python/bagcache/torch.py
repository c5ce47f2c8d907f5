"""torch's data API over bagcache: a map-style ``Dataset`` and a
``DistributedSampler`` in ``bagcache.train``'s epoch order.

Importable only when torch is installed (``import bagcache`` never imports
it)::

    from bagcache.torch import Dataset, DistributedSampler
    ds = Dataset(bagcache.Reader("data@8.bagz"), transform=decode)
    sampler = DistributedSampler(ds, seed=0)          # ranks from torch.distributed
    loader = torch.utils.data.DataLoader(ds, batch_size=32, sampler=sampler,
                                         num_workers=2)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for batch in loader: ...

``DistributedSampler``'s epoch ``e`` (``shuffle=True``) is the order of
``bagcache.train``'s EPOCH mode: ``bagcache.shuffle(range(n),
seed=Sampler.epoch_seed(seed, e))``, and rank ``r`` of ``W`` takes its
positions ``r, r + W, r + 2W, ...``: exactly the indices that
``bagcache.train.DataLoader(mode=EPOCH, seed=seed, rank=r, world_size=W)``
gives rank ``r`` in that epoch, in the same order, whatever its
``batch_size``.  Its ``state_dict()`` is the loader's ``{'mode', 'seed',
'epoch', 'consumed'}``, so a run can switch between the two and resume
mid-epoch.  The indices are never padded with repeated samples (torch's
are): see :class:`DistributedSampler`.
"""

# Absolute imports (Python 3): this module's own name, bagcache.torch, does
# not shadow the top-level torch package.
import operator as _operator

try:
    import torch as _torch
    import torch.utils.data as _torch_data
except ImportError as _e:  # pragma: no cover - the tests skip without torch
    raise ImportError(
        "bagcache.torch needs PyTorch (pip install torch, or Debian's python3-torch); "
        "the rest of bagcache works without it"
    ) from _e

from . import _bagcache
from . import train as _train

__all__ = ["Dataset", "DistributedSampler"]


class Dataset(_torch_data.Dataset):
    """A map-style torch ``Dataset`` over any bagcache sequence.

    ``seq`` is anything with ``len`` and ``[i]``: a ``Reader``, a ``LoadIt``,
    a view, an ``ARDataset``/``NPDataset`` of ``bagcache.train``, a numpy
    array, a list.  ``ds[i]`` is ``transform(seq[i])`` (``seq[i]`` without a
    transform).  torch's ``DataLoader`` fetches a batch through
    ``__getitems__``, one batched read: ``read_indices`` of a Reader, LoadIt
    or view (the C library's batch read, GIL released), one gather of an
    ``ARDataset``, one fancy index of a numpy array.

    It pickles when ``seq`` and ``transform`` do (Readers, LoadIts and views
    pickle by their paths and reopen them; use a module-level function as
    transform), so a ``DataLoader`` with workers works under both start
    methods: spawn pickles the dataset into each worker, fork lets the
    workers inherit it.
    """

    def __init__(self, seq, transform=None):
        if transform is not None and not callable(transform):
            raise TypeError("transform must be callable")
        # A TypeError now rather than in a worker (len() itself may be
        # costly, as a LoadIt's first one, so it is left to the sampler).
        if not (hasattr(seq, "__len__") and hasattr(seq, "__getitem__")):
            raise TypeError(f"{type(seq).__name__} is no sequence (len and [i])")
        self.seq = seq
        self.transform = transform

    def __len__(self):
        return len(self.seq)

    def __getitem__(self, index):
        item = self.seq[_operator.index(index)]
        return item if self.transform is None else self.transform(item)

    def __getitems__(self, indices):
        """The items at ``indices`` as a list (torch's batched fetch)."""
        seq = self.seq
        if isinstance(seq, _train.BaseDataset):
            items = list(seq.__getitems__(indices))
        elif hasattr(seq, "read_indices"):
            items = seq.read_indices([_operator.index(i) for i in indices])
        elif type(seq).__module__ == "numpy" and hasattr(seq, "take"):
            items = list(seq[_train._np().asarray(indices, dtype=_train._np().int64)])
        else:
            items = [seq[_operator.index(i)] for i in indices]
        if self.transform is not None:
            items = [self.transform(x) for x in items]
        return items


class DistributedSampler(_torch_data.Sampler):
    """torch's ``DistributedSampler`` API in ``bagcache.train``'s epoch order.

    Args:
      dataset: a sized dataset, or its length (an int).
      num_replicas, rank: default to ``torch.distributed``'s world size and
        rank when a process group is initialized (else 1 and 0).
      shuffle: True: epoch ``e`` is ``bagcache.shuffle(range(n),
        seed=Sampler.epoch_seed(seed, e))`` (``bagcache.train``'s EPOCH
        mode); False: ``0, 1, ..., n-1`` every epoch.
      seed: any int (mod 2**64); every rank must pass the same.
      drop_last: drop the epoch's last ``n % num_replicas`` positions, so
        every rank gets ``n // num_replicas`` indices.

    Rank ``r`` iterates over positions ``r, r + W, r + 2W, ...`` of the
    epoch's order (``W = num_replicas``).  Without ``drop_last`` these are
    ``len(range(r, n, W))`` indices, so ranks differ by at most one and
    their union is exactly the epoch, each sample once: unlike torch's
    sampler, which pads every rank to ``ceil(n / W)`` by repeating the first
    indices (samples seen twice per epoch, and a padded order that depends
    on ``W``).  A rank may thus make one batch fewer than another; for DDP
    with collective ops per step use ``drop_last=True`` (equal counts) or
    torch's ``Join`` context manager, or ``bagcache.train.DataLoader``,
    whose ranks always make the same number of steps (a short or empty last
    batch).  ``drop_last`` drops per sample (as torch's), the same as
    ``bagcache.train``'s ``drop_last`` with ``batch_size=1``.

    ``set_epoch(e)`` selects the epoch (call it before each epoch, as with
    torch's).  ``state_dict()`` and ``load_state_dict()`` hold the same
    ``{'mode', 'seed', 'epoch', 'consumed'}`` as ``bagcache.train``'s
    loader (``mode`` 2 with shuffle, 0 without; ``consumed``: positions of
    the epoch all ranks together have used), and a state from either one
    resumes the other mid-epoch, also on another world size.
    """

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0,
                 drop_last=False):
        n = len(dataset) if hasattr(dataset, "__len__") else dataset
        self.length = _train._int(n, "length")
        dist = _torch.distributed
        initialized = dist.is_available() and dist.is_initialized()
        if num_replicas is None:
            num_replicas = dist.get_world_size() if initialized else 1
        if rank is None:
            rank = dist.get_rank() if initialized else 0
        self.num_replicas = _train._int(num_replicas, "num_replicas", 1)
        self.rank = _train._int(rank, "rank")
        if self.rank >= self.num_replicas:
            raise ValueError(f"rank {self.rank} is not below num_replicas {self.num_replicas}")
        self.shuffle = bool(shuffle)
        self.seed = _operator.index(seed) & _train._MASK64
        self.drop_last = bool(drop_last)
        self.epoch = 0
        self._start = 0  # positions of self.epoch used before the next __iter__
        self._iter_start = 0  # ... before the current (or last) __iter__
        self._yielded = 0  # indices the current (or last) __iter__ yielded

    @property
    def _mode(self):
        return _train.Sampler.Mode.EPOCH if self.shuffle else _train.Sampler.Mode.SEQUENTIAL

    def _end(self, start):
        """The end of the positions an iteration from ``start`` covers."""
        if self.drop_last:
            w = self.num_replicas
            return start + (self.length - start) // w * w
        return self.length

    def _count(self, start):
        """This rank's indices of an iteration from ``start``."""
        return len(range(start + self.rank, self._end(start), self.num_replicas))

    def set_epoch(self, epoch):
        """Selects the epoch of the next iteration.  Another epoch than the
        current one starts at its beginning; the current one keeps a
        position loaded by :meth:`load_state_dict`."""
        epoch = _train._int(epoch, "epoch")
        if epoch != self.epoch:
            self._start = self._iter_start = self._yielded = 0
        self.epoch = epoch

    def indices(self):
        """This rank's indices of the next iteration (an int64 array)."""
        np = _train._np()
        start = self._start
        count = self._count(start)
        out = np.empty(count, dtype=np.int64)
        first = start + self.rank
        if count and self.shuffle:
            seed = _train.Sampler.epoch_seed(self.seed, self.epoch)
            _bagcache._epoch_indices(self.length, seed, first, self.num_replicas, out)
        elif count:
            out[:] = np.arange(first, first + count * self.num_replicas, self.num_replicas)
        return out

    def __iter__(self):
        out = self.indices()
        # A later iteration of this epoch starts at its beginning again.
        self._iter_start, self._start, self._yielded = self._start, 0, 0
        return self._gen(out)

    def _gen(self, out):
        for i in out.tolist():
            self._yielded += 1
            yield i

    def __len__(self):
        """The number of indices the next iteration yields."""
        return self._count(self._start)

    def state_dict(self, samples=None):
        """``{'mode', 'seed', 'epoch', 'consumed'}`` after this rank used
        ``samples`` indices of the current iteration (default: as many as
        the iterator yielded; torch's ``DataLoader`` draws indices ahead of
        the batches it returns, so pass ``samples=batches_done *
        batch_size`` for an exact state).  All ranks are taken to be at the
        same point, as in a synchronous data-parallel step.  A rank that
        used all of its indices reports the end of the epoch: ``epoch + 1``
        with ``consumed`` 0, as the loader's."""
        if samples is None:
            samples = self._yielded
        samples = _train._int(samples, "samples")
        start = self._iter_start
        count = self._count(start)
        epoch, consumed = self.epoch, start + min(samples, count) * self.num_replicas
        if count and samples >= count:  # this rank used all of its share
            epoch, consumed = epoch + 1, 0
        return {"mode": self._mode, "seed": self.seed, "epoch": epoch, "consumed": consumed}

    def load_state_dict(self, state):
        """Continues from a state of this sampler or of a
        ``bagcache.train`` loader or sampler: the next iteration (after
        ``set_epoch(state['epoch'])``, which keeps the position) yields this
        rank's share of the rest of that epoch."""
        mode, seed, epoch, consumed = _train._check_state(state)
        if mode != self._mode:
            raise ValueError(f"the state is of mode {mode}, this sampler's is {self._mode} "
                             f"(shuffle={self.shuffle})")
        if consumed > self.length:
            raise ValueError(f"consumed {consumed} exceeds the length {self.length}")
        self.seed, self.epoch, self._start = seed, epoch, consumed
        self._iter_start, self._yielded = consumed, 0
