"""Training loops: loaderx's API over bagcache, plus epochs, ranks and resume.

``import bagcache as loaderx`` runs loaderx's README as written::

    converter(train_data, 'train_data')          # numpy array -> Bagz shards
    dataset = ARDataset('train_data')            # rows back, gathered in C
    labelset = NPDataset('train_label.npy')
    loader = DataLoader(dataset, labelset)       # endless {'data', 'label'}

Beyond loaderx: a third sampling mode, ``Sampler.Mode.EPOCH`` (a full
permutation per epoch from bagcache's keyed bijection, O(1) memory at any
size), ``rank``/``world_size``/``drop_last`` (ranks take disjoint strided
parts of one global order), ``state_dict()``/``load_state_dict()`` (seed,
epoch and samples consumed globally: a resumed loader yields exactly the
batches of an uninterrupted run, also after changing the world size, the
number of workers or the prefetch depth), ``num_epochs=`` (a finite loader
with a ``len``), ``collate=`` for records that are not fixed-size rows, a
``close()`` that stops every thread promptly, and worker exceptions that
reach the consumer as themselves.

The order of the samples: the loader reads a stream of *positions*.  In
EPOCH mode, epoch ``e`` is the positions ``0 .. n-1`` of the order
``bagcache.shuffle(range(n), seed=Sampler.epoch_seed(seed, e))``.  In
SEQUENTIAL and IID mode the stream is endless (position ``P`` is in epoch
``P // n``): SEQUENTIAL reads index ``P % n`` (loaderx's circular sliding
window), IID a uniform draw from ``[0, n)`` that depends only on ``(seed,
P)``.  A step takes ``G = world_size * batch_size`` consecutive positions
``P .. P+G-1``; rank ``r`` gets positions ``P + r``, ``P + r + world_size``,
... (strided).  An EPOCH step never crosses the end of its epoch, so the
last step of an epoch may be short (``drop_last=False``: each rank gets its
strided share of the rest, possibly an empty batch) or dropped
(``drop_last=True``).  numpy is imported when first needed.
"""

import json as _json
import operator as _operator
import os as _os
import shutil as _shutil
import sys as _sys
import threading as _threading

from . import _bagcache

__all__ = [
    "ARDataset",
    "BagDataset",
    "BaseDataset",
    "DataLoader",
    "NPDataset",
    "Sampler",
    "converter",
]

_MASK64 = (1 << 64) - 1
_META = "meta.json"
_FORMAT = "bagcache.converter/1"


def _np():
    import numpy

    return numpy


def _int(value, name, minimum=0):
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, not bool")
    value = _operator.index(value)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, not {value}")
    return value


# ---- converter ---------------------------------------------------------------------


def converter(data, output_dir, replace=False, blocksize=4096, compression="zstd"):
    """Writes a numpy array as Bagz shards, one record per row (loaderx's).

    Each record is the raw bytes of one row ``data[i]`` (C order); shards
    hold ``blocksize`` rows each and are named ``data-00000-of-0000N.bagz``
    (``.bag`` with ``compression="none"``; ``"zstd"``, the default, is one
    zstd frame per record, as loaderx's default ``ar_options``).
    ``meta.json`` keeps the length, the row shape, the dtype (numpy's
    ``descr``, which round-trips structured dtypes too) and the shard names.

    ``output_dir`` is created; an existing non-empty one is a ``ValueError``
    unless ``replace=True``, which deletes it first (as loaderx).
    """
    np = _np()
    from . import CompressionNone, CompressionZstd, Writer

    data = np.asanyarray(data)
    if data.ndim < 1:
        raise ValueError("converter needs an array with at least one dimension")
    blocksize = _int(blocksize, "blocksize", 1)
    if compression not in ("zstd", "none"):
        raise ValueError(f"compression must be 'zstd' or 'none', not {compression!r}")
    out = _os.fspath(output_dir)
    if _os.path.exists(out):
        if replace:
            _shutil.rmtree(out)
        elif _os.listdir(out):
            raise ValueError(f"output_dir is not empty: {out}")
    _os.makedirs(out, exist_ok=True)
    n = int(data.shape[0])
    shards = (n + blocksize - 1) // blocksize
    ext, comp = (".bagz", CompressionZstd()) if compression == "zstd" else (".bag", CompressionNone())
    blocks = [f"data-{i:05d}-of-{shards:05d}{ext}" for i in range(shards)]
    for i, name in enumerate(blocks):
        # The block's bytes in its own dtype (a row of a 1-d array would be
        # a numpy scalar, whose tobytes() is in native byte order).
        raw = memoryview(np.ascontiguousarray(data[i * blocksize : (i + 1) * blocksize]).tobytes())
        rows = min(blocksize, n - i * blocksize)
        size = len(raw) // rows
        with Writer(_os.path.join(out, name), Writer.Options(compression=comp)) as w:
            for k in range(rows):
                w.write(raw[k * size : (k + 1) * size])
    meta = {
        "format": _FORMAT,
        "length": n,
        "shape": list(data.shape[1:]),
        "dtype": np.lib.format.dtype_to_descr(data.dtype),
        "compression": compression,
        "blocks": blocks,
    }
    tmp = _os.path.join(out, _META + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        _json.dump(meta, f)
    _os.replace(tmp, _os.path.join(out, _META))


# ---- datasets ----------------------------------------------------------------------


class BaseDataset:
    """A dataset of rows: ``len``, ``[i]``, ``__getitems__(indices)`` (one
    array of ``len(indices)`` rows), ``close()`` and ``with`` (loaderx's
    interface; subclass it for your own)."""

    def __getitem__(self, idx):
        raise NotImplementedError

    def __len__(self):
        raise NotImplementedError

    def __getitems__(self, idxs):
        raise NotImplementedError

    def close(self):
        """Releases the files behind the dataset."""

    def _closed_error(self):
        """The ValueError of a read after close(), saying who closed it."""
        by = getattr(self, "_closed_by", None)
        return ValueError("the dataset is closed" + (f": {by}" if by else ""))

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        self.close()


class NPDataset(BaseDataset):
    """Rows of a ``.npy`` file, memory-mapped (loaderx's); an array is
    taken as is."""

    def __init__(self, path):
        np = _np()
        if isinstance(path, np.ndarray):
            self._array = path
        else:
            self._array = np.load(_os.fspath(path), mmap_mode="r")
        if self._array.ndim < 1:
            raise ValueError("NPDataset needs an array with at least one dimension")

    def _live(self):
        if self._array is None:
            raise self._closed_error()
        return self._array

    def __getitem__(self, idx):
        return self._live()[idx]

    def __getitems__(self, idxs):
        return self._live()[_np().asarray(idxs, dtype=_np().int64)]

    def __len__(self):
        return len(self._live())

    def close(self):
        array, self._array = getattr(self, "_array", None), None
        mm = getattr(array, "_mmap", None)
        if mm is not None:
            del array
            try:
                mm.close()
            except BufferError:  # rows handed out still point into the map
                pass


class ARDataset(BaseDataset):
    """The rows :func:`converter` wrote, read back (loaderx's ARDataset;
    also named ``BagDataset``).

    ``__getitems__(indices)`` returns one ``(len(indices), *row_shape)``
    array whose rows the C library gathers straight into it, with the GIL
    released and no Python object per record.  :meth:`from_sequence` wraps
    any sequence of raw fixed-size records the same way (a Reader, a view
    of Readers, a LoadIt with ``serializer="raw"``).
    """

    def __init__(self, path):
        from . import Reader

        path = _os.fspath(path)
        with open(_os.path.join(path, _META), encoding="utf-8") as f:
            meta = _json.load(f)
        try:
            length = _int(meta["length"], "length")
            shape = tuple(_int(d, "shape") for d in meta["shape"])
            dtype = _np().lib.format.descr_to_dtype(
                meta["dtype"] if isinstance(meta["dtype"], str) else
                [tuple(f) for f in meta["dtype"]]
            )
            blocks = list(meta.get("blocks", []))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{path}/{_META} is not a converter's metadata: {e}") from None
        ext = ".bagz" if meta.get("compression", "zstd") == "zstd" else ".bag"
        names = [f"data-{i:05d}-of-{len(blocks):05d}{ext}" for i in range(len(blocks))]
        if blocks != names:
            raise ValueError(f"{path}/{_META}: unexpected shard names")
        seq = Reader(_os.path.join(path, f"data@{len(blocks)}{ext}")) if blocks else []
        self._init(seq, dtype, shape)
        if len(seq) != length:
            raise ValueError(
                f"{path}: the shards hold {len(seq)} records, {_META} says {length}"
            )
        self.path = path

    @classmethod
    def from_sequence(cls, seq, dtype, shape=()):
        """A dataset over ``seq``'s raw records, each one row of ``dtype``
        and ``shape`` (record ``i`` is the bytes of row ``i``)."""
        self = cls.__new__(cls)
        self._init(seq, _np().dtype(dtype), tuple(_int(d, "shape") for d in shape))
        self.path = None
        return self

    def _init(self, seq, dtype, shape):
        self._seq = seq
        self.dtype = dtype
        self.row_shape = shape
        self._row_bytes = dtype.itemsize
        for d in shape:
            self._row_bytes *= d

    def _live(self):
        if self._seq is None:
            raise self._closed_error()
        return self._seq

    def __getitem__(self, idx):
        np = _np()
        rec = self._live()[idx]
        return np.frombuffer(rec, dtype=self.dtype).reshape(self.row_shape)

    def __getitems__(self, idxs):
        return self._gather(idxs, 0)

    def _gather(self, idxs, max_parallelism, pool=None):
        """__getitems__ on at most ``max_parallelism`` threads of the
        library's pool (0: the sequence's own setting; 1: the calling
        thread only, for a loader whose workers already build batches at
        once).  With ``pool`` (a ``_BatchPool``) the batch's memory comes
        from it and returns to it when nothing refers to the batch any
        more (train/pool.c), instead of from ``np.empty``."""
        np = _np()
        seq = self._live()
        idx = np.ascontiguousarray(idxs, dtype=np.int64).reshape(-1)
        shape = (len(idx),) + self.row_shape
        if pool is not None and len(idx) and self._row_bytes:
            # The array's base is the block: any view of the batch keeps it.
            block = pool.take(len(idx) * self._row_bytes)
            _bagcache._gather(seq, idx, block, max_parallelism)
            return np.frombuffer(block, dtype=self.dtype).reshape(shape)
        out = np.empty(shape, dtype=self.dtype)
        if len(idx):
            _bagcache._gather(seq, idx, out.reshape(-1).view(np.uint8), max_parallelism)
        return out

    def __len__(self):
        return len(self._live())

    def close(self):
        self._seq = None


#: loaderx's ARDataset under bagcache's name.
BagDataset = ARDataset


# ---- sampler -----------------------------------------------------------------------


def _mix64(x):
    x &= _MASK64
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _MASK64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


class _SamplerMode:
    """The sampling modes (loaderx's values, plus EPOCH)."""

    SEQUENTIAL = 0  #: a circular sliding window over [0, n) (loaderx's)
    IID = 1  #: uniform indices with replacement (loaderx's)
    EPOCH = 2  #: each epoch a full permutation without replacement


_SamplerMode.__name__ = "Mode"
_SamplerMode.__qualname__ = "Sampler.Mode"


class Sampler:
    """Batches of indices of ``[0, length)`` (loaderx's Sampler, extended).

    ``next()`` computes the next batch into ``self.indices`` (a uint64
    array, as loaderx's); iterating yields those arrays.  Every batch is a
    function of ``(seed, epoch, consumed)`` alone (see the module's
    docstring for the layout), which is what :meth:`state_dict` holds.

    Args:
      length: the number of samples ``n``.
      batch_size: indices per batch (per rank).
      mode: ``Sampler.Mode.SEQUENTIAL`` (0), ``IID`` (1) or ``EPOCH`` (2).
      seed: any int (taken modulo 2**64).
      rank, world_size: this rank's share of each step.
      drop_last: EPOCH: drop an epoch's last step when it is short.  With
        ``num_epochs``, SEQUENTIAL and IID: drop the run's last short step.
      num_epochs: None: endless; else the sampler stops after this many
        epochs (``n * num_epochs`` positions) and has a ``len``.
    """

    Mode = _SamplerMode

    def __init__(self, length, batch_size, mode=1, seed=42, *, rank=0, world_size=1,
                 drop_last=False, num_epochs=None):
        self.length = _int(length, "length")
        self.batch_size = _int(batch_size, "batch_size", 1)
        mode = _int(mode, "mode")
        if mode not in (0, 1, 2):
            raise ValueError(f"mode must be 0 (SEQUENTIAL), 1 (IID) or 2 (EPOCH), not {mode}")
        self.mode = mode
        self.seed = _operator.index(seed) & _MASK64
        self.world_size = _int(world_size, "world_size", 1)
        self.rank = _int(rank, "rank")
        if self.rank >= self.world_size:
            raise ValueError(f"rank {self.rank} is not below world_size {self.world_size}")
        self.drop_last = bool(drop_last)
        self.num_epochs = None if num_epochs is None else _int(num_epochs, "num_epochs")
        if self.num_epochs is None:
            if self.length == 0:
                raise ValueError("an endless sampler needs a non-empty dataset")
            if mode == 2 and self.drop_last and self.length < self._step_size():
                raise ValueError(
                    f"drop_last with {self.length} samples and steps of "
                    f"{self._step_size()} (world_size x batch_size) gives no batch"
                )
        self.epoch = 0
        self.consumed = 0
        self.indices = _np().zeros(self.batch_size, dtype=_np().uint64)

    @staticmethod
    def epoch_seed(seed, epoch):
        """The seed of epoch ``epoch``'s order: ``bagcache.shuffle(range(n),
        seed=Sampler.epoch_seed(seed, epoch))``.  It is splitmix64's
        finaliser of ``seed + 0x9E3779B97F4A7C15 * (epoch + 1)`` (mod 2**64)."""
        return _mix64((_operator.index(seed) + 0x9E3779B97F4A7C15 * (_operator.index(epoch) + 1)))

    def _step_size(self):
        return self.world_size * self.batch_size

    # ---- the layout -----------------------------------------------------------------

    def _plan(self, epoch, consumed):
        """(positions start, count taken, epoch of them, state after) of the
        step at state (epoch, consumed), or None at the end."""
        n, g = self.length, self._step_size()
        if self.mode == 2:
            if n == 0:
                return None
            if consumed >= n or (self.drop_last and n - consumed < g):
                epoch, consumed = epoch + 1, 0
            if self.num_epochs is not None and epoch >= self.num_epochs:
                return None
            take = min(g, n - consumed)
            if self.drop_last and take < g:
                return None  # n < g: no full step in any epoch
            after = (epoch, consumed + take)
            if after[1] >= n or (self.drop_last and n - after[1] < g):
                after = (epoch + 1, 0)
            return consumed, take, epoch, after
        pos = epoch * n + consumed
        take = g
        if self.num_epochs is not None:
            take = min(g, self.num_epochs * n - pos)
            if take <= 0 or (self.drop_last and take < g):
                return None
        end = pos + take
        return pos, take, None, (end // n, end % n)

    def _indices(self, plan):
        """This rank's indices of a planned step (an int64 array)."""
        np = _np()
        start, take, epoch, _ = plan
        w, r = self.world_size, self.rank
        count = max(0, min(self.batch_size, (take - r + w - 1) // w))
        out = np.empty(count, dtype=np.int64)
        first = start + r
        if count == 0:
            return out
        if self.mode == 2:
            _bagcache._epoch_indices(self.length, self.epoch_seed(self.seed, epoch), first, w, out)
        elif self.mode == 1:
            _bagcache._iid_indices(self.length, self.seed, first, w, out)
        else:
            np.mod(np.arange(first, first + w * count, w, dtype=np.uint64), self.length,
                   out=out, casting="unsafe")
        return out

    def _step(self):
        """(indices, state after) of the next step, advancing; None at the end."""
        plan = self._plan(self.epoch, self.consumed)
        if plan is None:
            return None
        idx = self._indices(plan)
        self.epoch, self.consumed = plan[3]
        return idx, plan[3]

    # ---- loaderx's interface ------------------------------------------------------------

    def next(self):
        """Computes the next batch into ``self.indices``; StopIteration at
        the end of a finite sampler."""
        step = self._step()
        if step is None:
            raise StopIteration
        self.indices = step[0].astype(_np().uint64)

    def __iter__(self):
        return self

    def __next__(self):
        self.next()
        return self.indices

    def __len__(self):
        """The number of batches of a finite sampler (``num_epochs``);
        TypeError for an endless one, as loaderx's loader."""
        if self.num_epochs is None:
            raise TypeError("an endless sampler has no length (pass num_epochs=)")
        n, g = self.length, self._step_size()
        if self.mode == 2:
            per = n // g if self.drop_last else -(-n // g)
            return per * self.num_epochs
        total = n * self.num_epochs
        return total // g if self.drop_last else -(-total // g)

    # ---- state ------------------------------------------------------------------------

    def state_dict(self):
        """``{'mode', 'seed', 'epoch', 'consumed'}``: ``consumed`` counts the
        positions of ``epoch`` that every rank together has used."""
        return {"mode": self.mode, "seed": self.seed, "epoch": self.epoch,
                "consumed": self.consumed}

    def load_state_dict(self, state):
        """Continues from a state (any world size, batch size, ...)."""
        self.seed, self.epoch, self.consumed = self._checked(state)

    def _checked(self, state):
        """(seed, epoch, consumed) of a state this sampler can continue."""
        mode, seed, epoch, consumed = _check_state(state)
        if mode != self.mode:
            raise ValueError(f"the state is of mode {mode}, this sampler's is {self.mode}")
        if consumed > self.length:
            raise ValueError(f"consumed {consumed} exceeds the length {self.length}")
        return seed, epoch, consumed


def _check_state(state):
    try:
        fields = (state["mode"], state["seed"], state["epoch"], state["consumed"])
    except (KeyError, TypeError):
        raise ValueError("a state needs 'mode', 'seed', 'epoch' and 'consumed'") from None
    mode, seed, epoch, consumed = (_int(v, k) for v, k in
                                   zip(fields, ("mode", "seed", "epoch", "consumed")))
    return mode, seed & _MASK64, epoch, consumed


# ---- the loader --------------------------------------------------------------------


def _as_dataset(ds):
    """A numpy array as NPDataset(array) (rows along its first axis, as
    torch's DataLoader indexes it); anything else as it is."""
    np = _sys.modules.get("numpy")  # no numpy imported: not an ndarray
    if np is not None and isinstance(ds, np.ndarray):
        return NPDataset(ds)
    return ds


def _items(ds, idx):
    """The elements of ds at idx as a list (for collate)."""
    if isinstance(ds, BaseDataset):
        return ds.__getitems__(idx)
    if hasattr(ds, "read_indices"):
        return ds.read_indices(idx)
    return [ds[int(i)] for i in idx]


class _Pipeline:
    """Builds the batches of one loader on worker threads, delivering them
    in step order.  Workers take step numbers in order under the condition
    and never run more than ``prefetch + workers`` steps ahead of the
    consumer (loaderx's queue of ``prefetch_size`` batches, which its
    workers fill each building one more); all
    waits are on the one condition, so close() wakes everybody.  It holds
    no reference to the DataLoader, so an abandoned loader is collected
    (and closes it)."""

    def __init__(self, sampler, build, workers, prefetch):
        self.sampler = sampler
        self.build = build
        self.workers = workers
        self.prefetch = prefetch
        self.cond = _threading.Condition()
        self.closed = False
        self.threads = []
        self._reset()

    def _reset(self):
        self.gen = getattr(self, "gen", 0) + 1
        self.handed = 0  # next step number to hand to a worker
        self.delivered = 0  # next step number for the consumer
        self.end = None  # the step number where the stream ends
        self.results = {}  # step -> (ok, batch or exception, state after)

    def start(self):
        self.threads = [
            _threading.Thread(target=self._work, args=(self.gen,), daemon=True,
                              name=f"bagcache-loader-{i}")
            for i in range(self.workers)
        ]
        for t in self.threads:
            t.start()

    def _take(self, gen):
        """The next (step, indices, state after), or None when this worker
        should stop.  Called with the condition held."""
        while True:
            if self.closed or gen != self.gen or self.end is not None:
                return None
            if self.handed < self.delivered + self.prefetch + self.workers:
                break
            self.cond.wait()
        k = self.handed
        try:
            step = self.sampler._step()
        except BaseException as e:  # noqa: BLE001 - goes to the consumer
            self.results[k] = (False, e, None)
            self.end = k + 1
            self.cond.notify_all()
            return None
        if step is None:
            self.end = k
            self.cond.notify_all()
            return None
        self.handed += 1
        return k, step[0], step[1]

    def _work(self, gen):
        while True:
            with self.cond:
                task = self._take(gen)
            if task is None:
                return
            k, idx, state = task
            try:
                result = (True, self.build(idx), state)
            except BaseException as e:  # noqa: BLE001 - goes to the consumer
                result = (False, e, state)
            with self.cond:
                if gen == self.gen:
                    self.results[k] = result
                    self.cond.notify_all()
            # Not kept while waiting for the next step: the consumer's
            # dropping a batch must free it (its memory returns to the
            # loader's pool then).
            del result, idx, task

    def next(self):
        """(ok, batch or exception, state after) of the next step, or None."""
        if self.workers == 0:
            with self.cond:
                if self.closed:
                    return None
                task = self._take(self.gen)
                if task is None:
                    r = self.results.pop(self.delivered, None)
                    return r
            k, idx, state = task
            self.delivered += 1
            try:
                return True, self.build(idx), state
            except BaseException as e:  # noqa: BLE001
                return False, e, state
        with self.cond:
            while True:
                if self.closed:
                    return None
                r = self.results.pop(self.delivered, None)
                if r is not None:
                    self.delivered += 1
                    self.cond.notify_all()
                    return r
                if self.end is not None and self.delivered >= self.end:
                    return None
                self.cond.wait(0.5)

    def stop(self):
        """Stops and joins the workers (each finishes at most the batch it
        is building)."""
        with self.cond:
            self.gen += 1
            self.cond.notify_all()
        me = _threading.current_thread()
        for t in self.threads:
            if t is not me:
                t.join()
        self.threads = []

    def close(self):
        with self.cond:
            self.closed = True
        self.stop()

    def restart(self, state):
        """Continues from a sampler state (checked): stop, load, start."""
        self.stop()
        with self.cond:
            self.sampler.load_state_dict(state)
            self._reset()
        self.start()


class _CPipeline:
    """The batches of datasets of fixed-size rows, built on the C threads of
    ``_bagcache._Loader`` (train/loader.c): the sampler's order, the gather
    into pooled batch memory and the hand-off in step order all run in C
    with no GIL; this side only wraps a finished batch's memory as numpy
    arrays.  Same interface as :class:`_Pipeline`."""

    def __init__(self, sampler, sources, shapes, workers, prefetch, labelled):
        self.sampler = sampler
        self.shapes = shapes  # (dtype, row shape) per source
        self.labelled = labelled
        s = sampler
        self.loader = _bagcache._Loader(
            sources, (s.length, s.batch_size, s.world_size, s.rank, s.mode, s.drop_last,
                      s.num_epochs), workers, prefetch)

    @property
    def closed(self):
        return self.loader.closed

    def start(self):
        s = self.sampler
        self.loader.start(s.seed, s.epoch, s.consumed)

    def next(self):
        r = self.loader.next()
        if r is None:
            return None
        if isinstance(r, BaseException):
            return False, r, None
        count, blocks, epoch, consumed = r
        np = _np()
        arrays = []
        for block, (dtype, shape) in zip(blocks, self.shapes):
            if block is None:
                arrays.append(np.empty((count,) + shape, dtype=dtype))
            else:  # the block is the array's base: any view keeps it
                arrays.append(np.frombuffer(block, dtype=dtype).reshape((count,) + shape))
        batch = {"data": arrays[0], "label": arrays[1]} if self.labelled else {"data": arrays[0]}
        return True, batch, (epoch, consumed)

    def stop(self):
        self.loader.stop()

    def close(self):
        self.loader.close()

    def restart(self, state):
        self.loader.stop()
        self.sampler.load_state_dict(state)
        self.start()


def _c_source(ds, pools, batch_size, keep):
    """(source for _Loader, (dtype, row shape)) of a dataset the C loader
    reads (an ARDataset's records, an NPDataset's C-contiguous array), else
    None."""
    np = _np()
    if type(ds).__getitems__ is ARDataset.__getitems__:
        kind, obj, row_bytes, dtype, shape = "seq", ds._live(), ds._row_bytes, ds.dtype, ds.row_shape
    elif type(ds).__getitems__ is NPDataset.__getitems__:
        obj = ds._live()
        if not isinstance(obj, np.ndarray) or not obj.flags.c_contiguous or obj.dtype.hasobject:
            return None
        kind, dtype, shape = "buf", obj.dtype, tuple(obj.shape[1:])
        row_bytes = obj.dtype.itemsize * int(np.prod(shape, dtype=np.int64))
        obj = obj.reshape(-1).view(np.uint8) if obj.size else obj
    else:
        return None
    pool = pools.get(id(ds))
    if pool is None:
        pool = pools[id(ds)] = _bagcache._BatchPool(batch_size * row_bytes, keep)
    return (kind, obj, row_bytes, pool), (dtype, shape)


class DataLoader:
    """Batches ``{'data': ..., 'label': ...}`` built on worker threads
    (loaderx's DataLoader, extended).

    Args:
      dataset, labelset: datasets of equal length (``ValueError`` otherwise)
        with ``__getitems__(indices)`` returning a batch (the datasets of
        this module; a numpy array is taken as ``NPDataset(array)``, its
        rows along the first axis), or, with ``collate``, any sequence (a
        Reader, a LoadIt, a list); ``labelset=None`` gives batches of
        ``'data'`` only.
      num_workers: threads building batches (0: built in ``next()``).
      batch_size: samples per batch and rank.
      prefetch_size: batches kept ready ahead of the consumer, as the
        size of loaderx's queue; each worker builds one more beyond them.
      mode: ``Sampler.Mode`` SEQUENTIAL (0), IID (1, loaderx's default) or
        EPOCH (2).
      seed: the sampler's seed.
      transform: called on ``(data, label)`` (on ``data`` alone without a
        labelset) in the worker; returns the same shape of value.
      rank, world_size, drop_last, num_epochs: see :class:`Sampler`.
      collate: ``collate(items) -> array``, for each dataset, where
        ``items`` are the elements at the batch's indices (a list, or the
        dataset's ``__getitems__`` result): for variable-size records and
        Python objects.

    Iterating yields batches in step order whatever ``num_workers``:
    batch ``k`` is always built from the same indices.  ``len()`` is a
    TypeError unless ``num_epochs`` is given.  ``close()`` (or leaving a
    ``with`` block) stops every thread and closes the datasets of this
    module (as loaderx).  An exception raised by a worker or ``transform``
    is raised by ``next()`` itself, at the batch it belongs to.

    An :class:`ARDataset`'s batches are arrays over memory from the
    loader's pool: it is reused for later batches only once nothing refers
    to the batch (the array, a view of it, a memoryview...), so a batch
    you keep keeps its bytes, and dropped ones cost no page faults.
    """

    def __init__(self, dataset, labelset=None, num_workers=4, batch_size=256,
                 prefetch_size=4, mode=1, seed=42, transform=None, *, rank=0,
                 world_size=1, drop_last=False, num_epochs=None, collate=None):
        if labelset is not None and len(dataset) != len(labelset):
            raise ValueError("dataset and labelset must have the same length")
        # Only the datasets given are closed by close(): an array wrapped
        # here stays the caller's (an np.memmap's map is not closed).
        self._owned = [ds for ds in (dataset, labelset) if isinstance(ds, BaseDataset)]
        if collate is None:
            dataset, labelset = _as_dataset(dataset), _as_dataset(labelset)
        self.dataset = dataset
        self.labelset = labelset
        num_workers = _int(num_workers, "num_workers")
        prefetch_size = _int(prefetch_size, "prefetch_size", 1)
        if collate is None:
            for ds in (dataset, labelset):
                if ds is not None and not hasattr(ds, "__getitems__"):
                    raise TypeError(
                        f"{type(ds).__name__} has no __getitems__: wrap raw records in "
                        "ARDataset.from_sequence(seq, dtype, shape) or pass collate="
                    )
        elif not callable(collate):
            raise TypeError("collate must be callable")
        if transform is not None and not callable(transform):
            raise TypeError("transform must be callable")
        self.sampler = Sampler(len(dataset), batch_size, mode, seed, rank=rank,
                               world_size=world_size, drop_last=drop_last,
                               num_epochs=num_epochs)
        self._collate = collate
        self._transform = transform
        self._state = self.sampler.state_dict()
        self._error = None
        self._pipe_workers, self._prefetch = num_workers, prefetch_size
        build = self._builder()
        self._pipe = self._c_pipeline() or _Pipeline(self.sampler, build, num_workers,
                                                      prefetch_size)
        self._pipe.start()

    def _c_pipeline(self):
        """A _CPipeline when C threads can build every batch (fixed-size
        rows of ARDataset/NPDataset datasets, no collate, no transform, at
        least one worker), else None."""
        if self._collate is not None or self._transform is not None or self._pipe_workers < 1:
            return None
        pools = {id(ds): pool for ds, pool in zip((self.dataset, self.labelset), self._pool_of)
                 if pool is not None}
        sources, shapes = [], []
        keep = self._pipe_workers + self._prefetch + 2
        for ds in (self.dataset, self.labelset):
            if ds is None:
                continue
            src = _c_source(ds, pools, self.sampler.batch_size, keep)
            if src is None:
                return None
            sources.append(src[0])
            shapes.append(src[1])
        try:
            pipe = _CPipeline(self.sampler, sources, shapes, self._pipe_workers,
                              self._prefetch, self.labelset is not None)
        except TypeError:  # records that are not raw (a list...): the Python path says so
            return None
        self._pools = list({id(p): p for p in self._pools + [s[3] for s in sources]}.values())
        return pipe

    def _builder(self):
        # A closure over the parts, not over self: worker threads must not
        # keep the loader alive.
        dataset, labelset = self.dataset, self.labelset
        collate, transform = self._collate, self._transform
        # One pool of batch memory per gathered dataset: a batch's block
        # returns when the user's last reference to it dies, so batches
        # reuse pages already faulted in (np.empty on the workers, freed by
        # the consumer's thread, faulted in most pages of every batch).
        # At most prefetch + workers batches are live in the pipeline
        # (ready or being built), plus the consumer's last.
        keep = self._pipe_workers + self._prefetch + 2
        pools = {}
        for ds in (dataset, labelset):
            if (collate is None and ds is not None
                    and type(ds).__getitems__ is ARDataset.__getitems__):
                pools[id(ds)] = _bagcache._BatchPool(
                    self.sampler.batch_size * ds._row_bytes, keep)
        self._pools = list(pools.values())
        self._pool_of = [pools.get(id(ds)) if ds is not None else None
                         for ds in (dataset, labelset)]

        def fetch(ds, idx):
            if collate is not None:
                return collate(_items(ds, idx))
            if type(ds).__getitems__ is ARDataset.__getitems__:
                # Each batch is gathered in the thread that builds it:
                # fanning it out over the library's pool as well cost more
                # CPU and time on 2 CPUs with any num_workers, 0 included
                # (doc/performance.md, "Training loops").
                return ds._gather(idx, 1, pools[id(ds)])
            return ds.__getitems__(idx)

        def build(idx):
            data = fetch(dataset, idx)
            if labelset is None:
                if transform is not None:
                    data = transform(data)
                return {"data": data}
            label = fetch(labelset, idx)
            if transform is not None:
                data, label = transform((data, label))
            return {"data": data, "label": label}

        return build

    def __iter__(self):
        return self

    def __next__(self):
        if self._error is not None:
            raise self._error
        r = self._pipe.next()
        if r is None:
            if self._pipe.closed:
                raise ValueError("the loader is closed")
            raise StopIteration
        ok, value, state = r
        if not ok:
            self._error = value
            raise value
        self._state = {"mode": self.sampler.mode, "seed": self.sampler.seed,
                       "epoch": state[0], "consumed": state[1]}
        return value

    def __len__(self):
        """Batches of a finite loader (``num_epochs``); TypeError otherwise."""
        if self.sampler.num_epochs is None:
            raise TypeError("Eternal loader has no length (pass num_epochs= for one).")
        return len(self.sampler)

    def state_dict(self):
        """``{'mode', 'seed', 'epoch', 'consumed'}`` after the last batch
        ``next()`` returned (batches prefetched but not returned are not
        counted)."""
        return dict(self._state)

    def load_state_dict(self, state):
        """Continues after the batch the state was taken at: the next
        batches are exactly those an uninterrupted run yields from there
        (for any world size, ``num_workers`` or ``prefetch_size``)."""
        pipe = self._pipe
        if pipe.closed:
            raise ValueError("the loader is closed")
        seed, epoch, consumed = self.sampler._checked(state)  # a bad one changes nothing
        pipe.restart(state)  # (the Python workers move the sampler on at once)
        self._state = {"mode": self.sampler.mode, "seed": seed, "epoch": epoch,
                       "consumed": consumed}
        self._error = None

    def close(self):
        """Stops every worker thread and closes the datasets (loaderx's)."""
        pipe = getattr(self, "_pipe", None)
        if pipe is None:
            return
        pipe.close()
        # (the datasets given, not an array the loader wrapped: _owned)
        for ds in getattr(self, "_owned", ()):
            try:
                ds._closed_by = (
                    "the DataLoader it was given to closed it (closing a DataLoader, or "
                    "leaving its `with` block, closes its datasets, as loaderx does); open "
                    "the dataset again to read it after the loader")
            except AttributeError:  # a subclass with __slots__
                pass
            ds.close()
        for pool in getattr(self, "_pools", ()):
            pool.clear()  # batches still held keep their own memory

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        self.close()

    def __del__(self):
        pipe = getattr(self, "_pipe", None)
        if pipe is not None and not pipe.closed:
            try:
                pipe.close()
            except RuntimeError:  # dropped by code running in its own C worker
                pass
