"""bagcache: Bagz record files from Python, compatible with ``bagz``.

``import bagcache as bagz`` gives the names and behaviour of the
google-deepmind/bagz Python package (plus sackli's reader options), over the
bagcache C library:

* :class:`Reader` - a random-access ``Sequence[bytes]`` over one file, a
  sharded set (``name@N.bag``, ``name@*.bagz``) or a comma-separated list;
  slices are Readers again; bulk reads and iteration run on worker threads.
* :class:`Writer` - writes one Bagz file (published atomically on close).
* :class:`Index`, :class:`MultiIndex` - look records up by their bytes.

Deliberate differences from bagz (supersets and fixes): negative indices
count from the end; corrupt records raise in bulk reads too; ``Writer.write``
accepts any contiguous buffer; a Writer is invisible under its name until
``close()`` (bagz shows a records-only file while writing) and an unclosed
Writer is closed when collected; a Writer refuses a sharded spec
(``name@4.bagz``, which bagz writes as a literal file name no Reader of it
opens); ``@*`` works inside lists and with separate limits;
``read_indices`` accepts any iterable of ints.
"""

import collections.abc as _abc
import copy as _copy
import enum as _enum
import os as _os

from . import _bagcache
from ._bagcache import CorruptError, Index, InvalidSliceError, MultiIndex, ReaderIterator

__all__ = [
    "AccessPattern",
    "CachePolicy",
    "CompressionAutoDetect",
    "CompressionNone",
    "CompressionZstd",
    "CorruptError",
    "Index",
    "InvalidSliceError",
    "LimitsPlacement",
    "LimitsStorage",
    "MultiIndex",
    "Reader",
    "ReaderIterator",
    "ShardingLayout",
    "Writer",
]

__version__ = _bagcache.version()


# ---- enums (values are the C library's) ------------------------------------


class LimitsPlacement(_enum.Enum):
    """Where the limits (record end offsets) are stored."""

    TAIL = 0  #: appended to the records file (default)
    SEPARATE = 1  #: in ``DIR/limits.NAME`` beside ``DIR/NAME``


class LimitsStorage(_enum.Enum):
    """How a Reader keeps the limits."""

    ON_DISK = 0  #: read a record's limits on every access (default)
    IN_MEMORY = 1  #: load each shard's limits once, on first use


class ShardingLayout(_enum.Enum):
    """How a global index maps to (shard, index in shard)."""

    CONCATENATED = 0  #: shard 0's records, then shard 1's, ... (default)
    INTERLEAVED = 1  #: global i -> shard i % S, record i // S


class AccessPattern(_enum.Enum):
    """Read-pattern hint given to the kernel (sackli's option)."""

    SYSTEM = 0  #: no hint (default)
    RANDOM = 1  #: madvise/posix_fadvise RANDOM
    SEQUENTIAL = 2  #: madvise/posix_fadvise SEQUENTIAL


class CachePolicy(_enum.Enum):
    """How record bytes go through the page cache (sackli's option)."""

    SYSTEM = 0  #: mmap; the page cache keeps what was read (default)
    DROP_AFTER_READ = 1  #: pread, then drop the pages read from the cache
    DIRECT_IO = 2  #: O_DIRECT (falls back to DROP_AFTER_READ with a notice)


# ---- compression options ---------------------------------------------------


class CompressionAutoDetect:
    """Zstandard if the file name (whole spec) ends in ``.bagz``, else none."""

    __slots__ = ()
    _c_value = 0

    def __eq__(self, other):
        return type(other) is type(self)

    def __hash__(self):
        return hash(type(self).__name__)

    def __repr__(self):
        return "CompressionAutoDetect()"


class CompressionNone:
    """Records are stored as given."""

    __slots__ = ()
    _c_value = 1

    def __eq__(self, other):
        return type(other) is type(self)

    def __hash__(self):
        return hash(type(self).__name__)

    def __repr__(self):
        return "CompressionNone()"


class CompressionZstd:
    """One Zstandard frame per non-empty record.

    Args:
      level: compression level; 0 means zstd's default (3).
      dictionary: a zstd dictionary (trained, or raw content) as str (UTF-8)
        or bytes; ``''`` for none.  Readers need the same dictionary.
    """

    __slots__ = ("level", "dictionary")
    _c_value = 2

    def __init__(self, level=0, dictionary=""):
        if isinstance(level, bool) or not isinstance(level, int):
            raise TypeError(f"level must be an int, not {type(level).__name__}")
        if not isinstance(dictionary, (str, bytes)):
            raise TypeError(
                f"dictionary must be str or bytes, not {type(dictionary).__name__}"
            )
        self.level = level
        self.dictionary = dictionary

    def _dictionary_bytes(self):
        d = self.dictionary
        return d.encode("utf-8") if isinstance(d, str) else bytes(d)

    def __eq__(self, other):
        return (
            type(other) is type(self)
            and self.level == other.level
            and self._dictionary_bytes() == other._dictionary_bytes()
        )

    def __hash__(self):
        return hash((self.level, self._dictionary_bytes()))

    def __repr__(self):
        return f"CompressionZstd(level={self.level!r}, dictionary={self.dictionary!r})"

    def __getstate__(self):
        return (self.level, self.dictionary)

    def __setstate__(self, state):
        self.level, self.dictionary = state


_COMPRESSIONS = (CompressionAutoDetect, CompressionNone, CompressionZstd)


def _check(name, value, kind):
    if not isinstance(value, kind):
        expected = (
            " | ".join(k.__name__ for k in kind)
            if isinstance(kind, tuple)
            else kind.__name__
        )
        raise TypeError(f"{name} must be {expected}, not {type(value).__name__}")
    return value


def _compression_args(compression):
    """(C compression value, level, dictionary bytes) for the extension."""
    _check("compression", compression, _COMPRESSIONS)
    if isinstance(compression, CompressionZstd):
        return 2, compression.level, compression._dictionary_bytes()
    return compression._c_value, 0, b""


def _path(file_spec, what):
    """os.fspath(), with bytes paths decoded as the file system does."""
    path = _os.fspath(file_spec)
    if isinstance(path, bytes):
        path = _os.fsdecode(path)
    if not isinstance(path, str):
        raise TypeError(f"{what} must be str or os.PathLike, not {type(path).__name__}")
    return path


# ---- options ----------------------------------------------------------------


class _Options:
    """Attributes with checked types; equality, repr and pickling by fields."""

    __slots__ = ()
    _fields = ()  # (name, type or tuple of types, default factory)

    def __init__(self, *args, **kwargs):
        if len(args) > len(self._fields):
            raise TypeError(
                f"{type(self).__qualname__}() takes at most {len(self._fields)} "
                f"positional arguments ({len(args)} given)"
            )
        names = [f[0] for f in self._fields]
        for name in kwargs:
            if name not in names:
                raise TypeError(
                    f"{type(self).__qualname__}() got an unexpected keyword argument {name!r}"
                )
        for i, (name, _, default) in enumerate(self._fields):
            if i < len(args):
                if name in kwargs:
                    raise TypeError(
                        f"{type(self).__qualname__}() got multiple values for argument {name!r}"
                    )
                value = args[i]
            else:
                value = kwargs.get(name, _MISSING)
            setattr(self, name, default() if value is _MISSING else value)

    def __setattr__(self, name, value):
        for field, kind, _ in self._fields:
            if field == name:
                if kind is int and isinstance(value, bool):
                    raise TypeError(f"{name} must be int, not bool")
                object.__setattr__(self, name, _check(name, value, kind))
                return
        raise AttributeError(f"{type(self).__qualname__} has no option {name!r}")

    def __eq__(self, other):
        return type(other) is type(self) and all(
            getattr(self, f[0]) == getattr(other, f[0]) for f in self._fields
        )

    __hash__ = None

    def __repr__(self):
        body = ", ".join(f"{f[0]}={getattr(self, f[0])!r}" for f in self._fields)
        return f"{type(self).__qualname__}({body})"

    def __getstate__(self):
        return tuple(getattr(self, f[0]) for f in self._fields)

    def __setstate__(self, state):
        for (name, _, _), value in zip(self._fields, state):
            setattr(self, name, value)

    def __copy__(self):
        new = type(self).__new__(type(self))
        new.__setstate__(self.__getstate__())
        return new


_MISSING = object()


class _ReaderOptions(_Options):
    """Options for opening a :class:`Reader`.

    Args:
      sharding_layout: how global indices map to shards (CONCATENATED).
      limits_placement: TAIL (default) or SEPARATE (``limits.NAME`` files).
      compression: CompressionAutoDetect() (default), CompressionNone() or
        CompressionZstd(dictionary=...) - the level is ignored when reading.
      limits_storage: ON_DISK (default) or IN_MEMORY.
      max_parallelism: the most threads one bulk read may use (default 100;
        0 or 1 reads in the calling thread; negative makes bulk reads raise
        ValueError).  bagcache also bounds it by 4 x the number of CPUs.
      access_pattern: kernel read-pattern hint (sackli's option).
      cache_policy: page-cache use (sackli's option).
    """

    __slots__ = (
        "sharding_layout",
        "limits_placement",
        "compression",
        "limits_storage",
        "max_parallelism",
        "access_pattern",
        "cache_policy",
    )
    _fields = (
        ("sharding_layout", ShardingLayout, lambda: ShardingLayout.CONCATENATED),
        ("limits_placement", LimitsPlacement, lambda: LimitsPlacement.TAIL),
        ("compression", _COMPRESSIONS, CompressionAutoDetect),
        ("limits_storage", LimitsStorage, lambda: LimitsStorage.ON_DISK),
        ("max_parallelism", int, lambda: 100),
        ("access_pattern", AccessPattern, lambda: AccessPattern.SYSTEM),
        ("cache_policy", CachePolicy, lambda: CachePolicy.SYSTEM),
    )


_ReaderOptions.__name__ = _ReaderOptions.__qualname__ = "Options"
_ReaderOptions.__qualname__ = "Reader.Options"


class _WriterOptions(_Options):
    """Options for a :class:`Writer`.

    Args:
      limits_placement: TAIL (default: one file) or SEPARATE (``NAME`` and
        ``limits.NAME``).
      compression: CompressionAutoDetect() (default: zstd for ``.bagz``),
        CompressionNone() or CompressionZstd(level, dictionary).
    """

    __slots__ = ("limits_placement", "compression")
    _fields = (
        ("limits_placement", LimitsPlacement, lambda: LimitsPlacement.TAIL),
        ("compression", _COMPRESSIONS, CompressionAutoDetect),
    )


_WriterOptions.__name__ = "Options"
_WriterOptions.__qualname__ = "Writer.Options"


# ---- Reader -------------------------------------------------------------------


def _reopen(file_spec, options, start, step, length):
    """Unpickles a Reader: opens the files again and selects the same view."""
    reader = Reader(file_spec, options)
    if (start, step, length) == reader._state():
        return reader
    # Element k is reader[start + k * step], k < length: both ends must lie
    # in the files (they may have changed since the state was taken).
    n = len(reader)
    last = start + (length - 1) * step
    if length > 0 and (step == 0 or not 0 <= start < n or not 0 <= last < n):
        raise ValueError(f"view start={start} step={step} length={length} "
                         f"does not fit {n} records")
    if length <= 1:
        start, step = (start if length else 0), 1  # no stride to keep
    stop = start + length * step  # one step past the last element
    return reader[start:stop if stop >= 0 else None:step]


class Reader(_bagcache._ReaderBase):
    """Opens a collection of Bagz-formatted files (shards) for reading.

    Args:
      file_spec: a file name (``/path/to/foo.bagz``), a sharded spec
        (``/path/to/foo@100.bagz`` or ``foo@*.bagz``), or a comma-separated
        list of those; each may carry a ``posix:`` prefix.  str or PathLike.
      options: see :class:`Reader.Options`.

    A Reader is a ``collections.abc.Sequence`` of ``bytes``: ``len(r)``,
    ``r[i]`` (negative ``i`` counts from the end), ``r[a:b:c]`` (a Reader
    over the same open files), iteration (read ahead on worker threads),
    ``reversed``, ``in``, ``index``, ``count``.  Bulk reads (``read``,
    ``read_range``, ``read_indices``) run in parallel.  Readers pickle by
    file spec, options and view, and reopen the files when unpickled.
    Any number of threads may read one Reader at once.
    """

    __slots__ = ()
    Options = _ReaderOptions

    def __init__(self, file_spec, options=None):
        spec = _path(file_spec, "file_spec")
        if options is None:
            options = _ReaderOptions()
        _check("options", options, _ReaderOptions)
        options = _copy.copy(options)
        compression, _, dictionary = _compression_args(options.compression)
        self._open(
            spec,
            options.sharding_layout.value,
            options.limits_placement.value,
            options.limits_storage.value,
            compression,
            dictionary,
            options.access_pattern.value,
            options.cache_policy.value,
            options.max_parallelism,
            (spec, options),
        )

    @property
    def file_spec(self):
        """The file spec the Reader was opened with (str)."""
        return self._meta[0]

    @property
    def options(self):
        """A copy of the options the Reader was opened with."""
        return _copy.copy(self._meta[1])

    def __reduce__(self):
        spec, options = self._meta
        return (_reopen, (spec, options) + self._state())

    def __repr__(self):
        start, step, length = self._state()
        view = "" if (start, step) == (0, 1) else f", view=[{start}::{step}]"
        return f"bagcache.Reader({self.file_spec!r}, len={length}{view})"


_abc.Sequence.register(Reader)
_abc.Sequence.register(_bagcache._SeqBase)


# ---- Writer -------------------------------------------------------------------


def _writer_path(filename):
    """The path to write: bagz accepts a ``posix:`` (or ``/posix:``) prefix."""
    path = _path(filename, "filename")
    for prefix in ("/posix:", "posix:"):
        if path.startswith(prefix):
            return path[len(prefix):]
    return path


def _sharded_spec(path):
    """For a sharded spec as Reader expands it (src/bag/spec.c: the first
    ``@`` after the last ``/`` followed by N in 1..99999, or ``*``), the
    names of its shards (N of them; for ``@*`` the pattern); else None."""
    slash = path.rfind("/")
    at = path.find("@", slash + 1)
    if at < 0:
        return None
    prefix, rest = path[:at], path[at + 1:]
    if rest.startswith("*"):
        return [f"{prefix}-00000-of-NNNNN{rest[1:]}"]
    digits = len(rest) - len(rest.lstrip("0123456789"))
    if digits == 0 or not 1 <= int(rest[:digits]) <= 99999:
        return None
    n, suffix = int(rest[:digits]), rest[digits:]
    return [f"{prefix}-{i:05d}-of-{n:05d}{suffix}" for i in range(n)]


class Writer(_bagcache._WriterBase):
    """Writes a single Bagz file (one shard).

    Use it as a context manager so the file is closed::

        with bagcache.Writer(filename) as writer:
            for record in records:
                writer.write(record)

    Args:
      filename: the file to write (str or PathLike).  A sharded spec
        (``name@4.bagz``, ``name@*.bagz``) is refused with a ValueError
        naming the shard files to write one by one (bagz writes it as a
        literal file name that no Reader of the spec opens).  With
        ``LimitsPlacement.SEPARATE`` the limits go to ``limits.NAME`` beside
        it.  Nothing appears under these names until ``close()``, which
        publishes the complete file atomically (an existing file is replaced
        only then).
      options: see :class:`Writer.Options`.
    """

    __slots__ = ()
    Options = _WriterOptions

    def __init__(self, filename, options=None):
        path = _writer_path(filename)
        shards = _sharded_spec(path)
        if shards is not None:
            # bagz has no sharded writer (its Writer writes the '@' into the
            # name, a file no Reader of the spec opens), and which record
            # goes to which shard is the caller's choice.
            names = shards[0] if len(shards) == 1 else (
                f"{shards[0]} ... {shards[-1]}" if len(shards) > 2 else " and ".join(shards))
            raise ValueError(
                f"Writer writes one file, and {path!r} is a sharded spec: a "
                f"Reader opens it as the files {names}.  Write each shard with a Writer of "
                f"its own under those names (bagz has no sharded writer: which records go to "
                f"which shard is yours to choose), then read the set with "
                f"Reader({path!r})")
        if options is None:
            options = _WriterOptions()
        _check("options", options, _WriterOptions)
        compression, level, dictionary = _compression_args(options.compression)
        self._open(path, options.limits_placement.value, compression, level, dictionary)




# ---- loadit-compatible views (bagcache.views) -------------------------------

from .views import (  # noqa: E402
    ConcatableSequence,
    InterleaveSequence,
    InterleaveSequences,
    RepeatSequence,
    SequenceView,
    chunk_shuffle,
    chunk_shuffle_idx,
    shuffle,
)

__all__ += [
    "ConcatableSequence",
    "InterleaveSequence",
    "InterleaveSequences",
    "RepeatSequence",
    "SequenceView",
    "chunk_shuffle",
    "chunk_shuffle_idx",
    "shuffle",
]

# ---- LoadIt: random access to an iterator, cached on disk (bagcache.loadit) ----

from .loadit import (  # noqa: E402
    CacheWarning,
    LoadIt,
    LoadItView,
    NondeterministicError,
    NotCachedError,
    SourceError,
    preload_next_shard,
)

__all__ += [
    "CacheWarning",
    "LoadIt",
    "LoadItView",
    "NondeterministicError",
    "NotCachedError",
    "SourceError",
    "preload_next_shard",
]

# ---- training loops, loaderx-compatible (bagcache.train) ----------------------

from .train import (  # noqa: E402
    ARDataset,
    BagDataset,
    BaseDataset,
    DataLoader,
    NPDataset,
    Sampler,
    converter,
)

__all__ += [
    "ARDataset",
    "BagDataset",
    "BaseDataset",
    "DataLoader",
    "NPDataset",
    "Sampler",
    "converter",
]
