"""LoadIt: random access to an iterator, cached on disk (loadit-compatible).

``bagcache.LoadIt`` has the constructor and methods of ``loadit.LoadIt``
(github.com/acutkosky/loadit, 0.0.8) over the bagcache cache engine::

    from bagcache import LoadIt

    def my_iterator():
        ...
        yield item

    loader = LoadIt(my_iterator, root_dir="cache/")   # or LoadIt("cache/", my_iterator)
    for x in loader: ...                               # same items as my_iterator()
    loader[10]; loader[-2]; len(loader)                # random access, filling on demand
    loader[5:100:3]; loader[[2, 4, 9]]; loader[3, 4]   # views (lazy)

Iterating a loader whose root holds nothing yet (the first pass) runs the
iterator in the iterating thread and yields its own objects while their
pickles are written on another thread; when the loop ends they are all on
disk (the length final), and later passes read the cache.  Should the cache
not be writable (a full disk), the loop warns once (CacheWarning) and goes
on with the iterator's items.

Records are pickled (protocol 5) into shards of a root directory; shards are
Bagz files (``shards/START.END.bag[z]``, readable by bagz itself), shared
with every thread and process using the root.  Under ``memory_limit`` the
least recently used shards are evicted and regenerated on demand by running
``create_iter()`` again, which must therefore give the same items in the
same order each time (a shard that comes out different raises
NondeterministicError naming it).

Arguments (as loadit; what bagcache does with each):

* ``root_dir`` - the cache directory (str or path-like; ``~`` is not
  expanded), created with its missing parents.  ``create_iter`` - a callable
  returning a fresh iterable (an iterable that can be iterated again, such
  as a list, is accepted too), or None to read what is cached (the root
  must exist; an uncached record then raises NotCachedError, an IndexError).
  ``LoadIt(create_iter, root_dir=...)`` (loadit's README form) works too.
* ``max_shard_length`` - records per shard (int), or a size such as
  ``"64mb"``, ``"1.5 GiB"`` (units k, m, g, t, p in any case, also kb/kib,
  ...: all powers of 1024, as the CLI's SIZE): the record count is
  estimated once from the first 16 records.  An existing root keeps its own shard length.
* ``max_cache_size`` - shard files kept open per process (readers are
  memory-mapped, so this bounds open files, not RAM).
* ``max_workers`` - background fill threads; more than 1 needs
  ``iterator_thread_safe=True`` (ValueError otherwise, as loadit): several
  passes of ``create_iter()`` then run at once.
* ``memory_limit`` - bytes of shard files on disk at most (a number, or a
  size string as above), stored with the root: every process enforces the
  last limit set; omitted, the stored one holds; None given explicitly
  means no limit and removes the stored one.  With a size string for
  ``max_shard_length``, the target shard size is lowered to the limit over
  ``3 + max_workers`` when larger.  A limit that cannot hold ``2 +
  max_workers`` shards (the one read, the one filled, those prefetched) is
  refused with a ValueError naming the smallest workable limit: at open
  when the shard size is known (a size string, or shards on disk), else at
  the first shard filled.  Under load (other processes filling at once,
  their fills holding room under the limit) a read that finds no room
  waits up to a second for it, then gets its records without the shard
  being kept (doc/cache.md, "Room under load").
* ``compression`` - None or ``"zstd"`` (or an int: a zstd level).
  loadit's other fsspec names are refused (ValueError).
* ``preload_fn`` - what to fill in the background after each shard opened:
  the default (:func:`preload_next_shard`) fills the next
  ``max(1, max_workers // 2)`` shards, in C, when the shard opened
  continues a sequential read (it is the first, or follows one of the last
  4 opened: under random reads it would only evict what a reader needs); None disables prefetching;
  any other ``fn(loader, index)`` returns, like loadit's, an iterable of
  lists of indices (or plain indices) whose shards are filled in order.
  It is called each time this process opens a shard, with the shard's
  first index (loadit calls it on every access, with the index read), on
  whichever thread opened it.  ``loader.preload_fn`` can be reassigned.
* ``preload_all_async`` - drain the whole iterator in the background from
  the start (with any ``max_workers``).
* ``info`` - JSON-serializable user info stored with the cache
  (``loader.info()``, ``loader.set_info(obj)``); None keeps what is stored.
* ``length`` - the iterator's length if known: a hint stored with a new
  cache, which ``len()`` gives without draining until the source shows
  another length; a source that ends before it or goes on past it has its
  own length, with one CacheWarning naming the hint (nothing is cut
  short).  ``mode`` - file mode of created files.
* ``fingerprint`` (keyword only, bagcache's own) - any JSON value naming
  the source (a version, a config hash), stored in metadata.json; an open
  with another raises NondeterministicError (a ValueError) before
  anything is read, instead of mixing two datasets.  None: no check.
  ``on_mismatch="clear"`` clears the cache (a CacheWarning) and fills it
  again instead; no other process may use the root then.
* ``serializer`` (keyword only, bagcache's own) - None (pickle), ``"raw"``
  (items are bytes-like and come back as bytes) or any object with
  ``dumps(obj) -> bytes`` and ``loads(bytes) -> obj``.  Use the same one
  every time a root is opened.
* ``progress`` (keyword only, bagcache's own) - the progress line of long
  waits: ``len()`` while the length is not known, ``wait_until_all_cached()``
  and ``preload_all_async``'s background drain show, on standard error,
  records (and the percentage once the length is known), MiB read, rates
  and seconds, rewritten in place (a tqdm bar when tqdm is installed).
  None (default): shown when standard error is a terminal, unless the
  environment variable ``BAGCACHE_PROGRESS`` is ``0``; True: always; False:
  never.
* ``seekable`` (keyword only, bagcache's own) - None: True when
  ``create_iter`` takes a ``start`` argument by keyword (``def
  create_iter(start=0)``, yielding the items from index ``start`` on): an
  evicted shard is then rebuilt by ``create_iter(start=its first index)``,
  one shard of items per miss.  True or False says so explicitly.
* ``source`` (keyword only, bagcache's own) - ``"command"``: the source
  is the command ``bagcache cache fill ROOT -- COMMAND`` stored in the
  root's metadata.json (run in its working directory, with its
  ``--seek-arg`` and ``--from``), so that records the disk limit evicted
  are rebuilt by running it again; its records are bytes (``serializer``
  defaults to ``"raw"``).  Without it a stored command never runs: it is
  code, so running it is the caller's decision.  None (default): the
  ``create_iter`` given, if any.
* ``max_passes`` (keyword only, bagcache's own) - passes of
  ``create_iter()`` kept open, parked where their fills stopped (default
  64), so that a rebuilt shard starts from the nearest one before it
  rather than from index 0.
* ``publish_behind`` (keyword only, bagcache's own) - True (the default):
  a shard a read fills is served from its complete scratch file at once,
  and a background thread makes it durable (fsyncs, renames, the commit),
  several shards per transaction; False: each read that fills a shard
  waits until it is published.
* ``evict_ahead`` (keyword only, bagcache's own) - under a
  ``memory_limit`` with ``publish_behind``: the background publisher also
  evicts until the limit has room for one more shard, so that the next
  read that misses does not delete files itself (one shard fewer on
  disk).  None (the default): on, unless ``root_dir`` is on a memory file
  system (tmpfs, ramfs), where deleting costs nothing; True or False says
  so explicitly.

Differences from loadit, on purpose: slices follow Python's rules
(``l[::-1]`` reverses; loadit's are not Python's), a negative index or a
slice with negative bounds waits only until the length is known, an
out-of-range index never re-reads the iterator once the length is known,
``len()`` keeps what it reads, the iterator's exception reaches the caller
as itself and a later access retries, an uncached record without a source
raises instead of ending iteration silently, ``wait_until_all_cached()``
returns (False) instead of hanging when the disk limit cannot hold
everything.  Reads release the GIL; Ctrl-C interrupts waits and fills.

Threads and processes: any number of threads may read one LoadIt; many
processes may use one root (open a LoadIt in each, or pass one: it pickles
by its arguments and reopens the root; ``create_iter`` goes along when it
pickles, otherwise the copy only reads what is cached).  A forked child may
use the parent's LoadIt directly.  One caveat of CPython before 3.12: a
child forked at the very moment a fill thread starts can deadlock inside
the interpreter's fork handling; fork before reading or when the
background fills are idle, or use the spawn start method.

loadit internals its own tests use are offered read-only where they mean
something: ``loader.shards.max_shard_length``, ``loader.shards.size()``
(bytes on disk), ``loader.shards.get_all_shards()`` (items with ``path``,
``start``, ``end``, ``size`` in bytes), ``loader.shards._cache_miss_count``
(shards filled by this process), ``loader.shards.observer`` (no-ops),
``loader.max_workers``, ``loader.memory_cache.size()`` (shard files this
process holds open), ``loader.writer_pool.writers[k].current_idx``, and
``loader.finalize()``, which cuts the sequence at the end of the last shard
on disk.  ``loader.shards()`` is
also callable: the list of shards present, as dicts.
"""

import atexit as _atexit
import collections as _collections
import collections.abc as _abc
import difflib as _difflib
import inspect as _inspect
import json as _json
import math as _math
import numbers as _numbers
import operator as _operator
import os as _os
import pickle as _pickle
import warnings as _warnings
import weakref as _weakref

from . import _bagcache, _progress
from ._bagcache import CacheWarning, NondeterministicError, NotCachedError, SourceError

__all__ = [
    "CacheWarning",
    "LoadIt",
    "LoadItView",
    "NondeterministicError",
    "NotCachedError",
    "SourceError",
    "preload_next_shard",
]


def _default_ahead(max_workers):
    return max(1, max_workers // 2)


def preload_next_shard(loader, idx):
    """loadit's default ``preload_fn``: the starts of the next
    ``max(1, loader.max_workers // 2)`` shards after ``idx``'s, one list
    each.  Passed as ``preload_fn`` (the default), bagcache runs the same
    policy in C without calling it."""
    msl = loader.shards.max_shard_length
    start = idx - idx % msl
    return [[start + k * msl] for k in range(1, _default_ahead(loader.max_workers) + 1)]


def _prefetch_depth(preload_fn, max_workers):
    """How many shards ahead preload_fn fills, for the engine's smallest
    workable disk limit: the default's depth, none for None, and not known
    (0: the engine assumes max_workers) for a function of the user's."""
    if preload_fn is preload_next_shard:
        return _default_ahead(max_workers)
    return -1 if preload_fn is None else 0


ShardInfo = _collections.namedtuple("ShardInfo", ["path", "start", "end", "size"])

# ---- argument handling -----------------------------------------------------------

def _size(name, value, example):
    """Bytes in a size string: the CLI's SIZE (``bc_parse_size``): a number,
    decimals allowed, with an optional unit k, m, g, t or p in any case,
    also spelled kb/kib, mb/mib, ... (all powers of 1024: ``"64mb"`` is
    64 MiB, as in loadit), e.g. ``"2g"``, ``"2GiB"``, ``"512k"``,
    ``"1.5 GB"``; rounded down to whole bytes; 0 is refused."""
    n = None
    if "\0" not in value:
        try:
            n = _bagcache.parse_size(value)
        except ValueError:
            pass
    if n is None or n == 0:
        raise ValueError(
            f"{name} must be a number of bytes or a size like {example!r} (units k, m, "
            f"g, t, p, any case, also kb/kib, mb/mib, ...: powers of 1024), not {value!r}"
        )
    return n


_MAX_SHARD_RECORDS = (1 << 63) - 1  # BC_CACHE_MAX_SHARD_RECORDS


def _shard_length(value):
    """(shard_records, shard_bytes) for the engine from max_shard_length."""
    if isinstance(value, str):
        return 0, _size("max_shard_length", value, "64mb")
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"max_shard_length must be an int or a str, not {type(value).__name__}")
    if value < 1:
        raise ValueError(f"max_shard_length must be >= 1, not {value}")
    if value > _MAX_SHARD_RECORDS:
        raise ValueError(
            f"max_shard_length must be at most 2**63 - 1 (metadata.json holds a "
            f"signed 64-bit count), not {value}"
        )
    return value, 0


def _byte_count(name, value):
    """A number of bytes: an int, any real number >= 1 (rounded down; numpy
    scalars included) or a size string such as ``"16gb"``."""
    if isinstance(value, str):
        n = _size(name, value, "16gb")
        if n >= _bagcache_no_limit:
            raise ValueError(f"{name} must be less than 2**64 - 1, not {value!r}")
        return n
    if isinstance(value, bool) or not isinstance(value, _numbers.Real):
        raise TypeError(f"{name} must be a number of bytes or a size string, not {type(value).__name__}")
    if _math.isnan(value) or _math.isinf(value) or value < 1:
        raise ValueError(f"{name} must be a finite number >= 1, not {value!r}")
    n = int(_math.floor(value))
    if n >= _bagcache_no_limit:
        raise ValueError(f"{name} must be less than 2**64 - 1, not {value!r}")
    return n


_bagcache_no_limit = (1 << 64) - 1  # the engine's "no limit" marker


def _count(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, not {value}")
    return value


def _warn_cache_failed(root, errno, message):
    """Warns that a first pass could not write the cache in ``root`` (the
    C iterator calls it once per pass): a CacheWarning whose ``filename``
    is the root and ``errno`` the system's error number (None when the
    failure is not the system's), attributed to the loop."""
    cause = f" ([Errno {errno}] {_os.strerror(errno)})" if errno else ""
    warning = CacheWarning(f"the first pass could not write the cache in {root}{cause}: "
                           f"{message.decode(errors='replace')}; its items are not saved "
                           "from there on")
    warning.errno = errno or None
    warning.filename = root
    _warnings.warn(warning, stacklevel=2)


def _zstd_level(compression):
    if compression is None or compression is False or compression == "none":
        return None
    if compression == "zstd":
        return 0
    if isinstance(compression, int) and not isinstance(compression, bool):
        return compression
    raise ValueError(f"compression must be None, 'zstd' or a zstd level, not {compression!r}")


class _Constant:
    """create_iter for an iterable given as is: returns it for every pass."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __call__(self):
        return self.value

    def __reduce__(self):
        return (_Constant, (self.value,))


def _factory(create_iter):
    if create_iter is None or callable(create_iter):
        return create_iter
    if isinstance(create_iter, _abc.Iterator):
        raise TypeError(
            "create_iter must be a callable returning a new iterable: an iterator "
            "(or generator) can be read only once, and regenerating shards reads "
            "it again"
        )
    if isinstance(create_iter, _abc.Iterable):
        return _Constant(create_iter)
    raise TypeError(f"create_iter must be callable, not {type(create_iter).__name__}")


class _StoredCommand:
    """create_iter of ``LoadIt(root, source="command")``: runs the command
    `bagcache cache fill ROOT -- COMMAND` stored in metadata.json ("source")
    as that command's own source does: in its working directory, standard
    input /dev/null, its output cut into lines (each without its newline; a
    last line without one counts) or frames (a 4-byte little-endian length,
    then the bytes), "{start}" and "{start1}" in its arguments replaced by
    the first index (and + 1) with --seek-arg (0 and 1 without a start).  A
    pass abandoned early terminates the process; an exit status other than
    0 at the end raises SourceError."""

    def __init__(self, argv, cwd, seek_arg, frames):
        self.argv, self.cwd, self.seek_arg, self.frames = list(argv), cwd, seek_arg, frames

    def __call__(self, start=0):
        argv = self.argv
        if self.seek_arg:
            argv = [a.replace("{start1}", str(start + 1)).replace("{start}", str(start))
                    for a in argv]
        return self._records(argv)

    def _records(self, argv):
        import subprocess

        proc = subprocess.Popen(argv, cwd=self.cwd, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE)
        ended = False
        try:
            out = proc.stdout
            if self.frames:
                while True:
                    head = out.read(4)
                    if not head:
                        break
                    n = int.from_bytes(head.ljust(4, b"\0"), "little")
                    data = out.read(n) if len(head) == 4 else b""
                    if len(head) < 4 or len(data) < n:
                        raise SourceError(f"{argv[0]}: its output ends inside a frame")
                    yield data
            else:
                for line in out:
                    yield line[:-1] if line.endswith(b"\n") else line
            ended = True
        finally:
            if not ended:
                proc.terminate()
            proc.stdout.close()
            status = proc.wait()
        if status != 0:
            raise SourceError(f"{argv[0]} exited with status {status}" if status > 0
                              else f"{argv[0]} was killed by signal {-status}")

    def __reduce__(self):
        return (_StoredCommand, (self.argv, self.cwd, self.seek_arg, self.frames))


def _stored_command(root):
    """The command `bagcache cache fill` stored with the root, as a
    _StoredCommand; ValueError when the root has none."""
    path = _os.path.join(root, "metadata.json")
    with open(path, "rb") as f:
        source = _json.load(f).get("source")
    if source is None:
        raise ValueError(
            f"{root}: source='command': no command is stored with the cache (only "
            f"'bagcache cache fill ROOT -- COMMAND' stores one)")
    ok = (isinstance(source, dict) and source.get("type") == "command"
          and isinstance(source.get("argv"), list) and source["argv"]
          and all(isinstance(a, str) for a in source["argv"])
          and isinstance(source.get("cwd"), str)
          and isinstance(source.get("seek_arg"), bool)
          and source.get("from") in ("lines", "frames"))
    if not ok:
        raise ValueError(f"{path}: \"source\" is not a command stored by "
                         f"'bagcache cache fill': {source!r}")
    return _StoredCommand(source["argv"], source["cwd"], source["seek_arg"],
                          source["from"] == "frames")


def _serializer(serializer):
    """(dumps, dumps_args, loads) for the engine, which stores
    dumps(record, *dumps_args); (None, None, None) for raw bytes."""
    if serializer is None or serializer == "pickle":
        # The protocol goes as a positional argument: the engine calls
        # dumps through vectorcall, where a functools.partial with a keyword
        # would copy its keyword dict for every record.
        return _pickle.dumps, (_pickle.HIGHEST_PROTOCOL,), _pickle.loads
    if serializer == "raw":
        return None, None, None
    dumps = getattr(serializer, "dumps", None)
    loads = getattr(serializer, "loads", None)
    if not (callable(dumps) and callable(loads)):
        raise TypeError("serializer must be None, 'pickle', 'raw' or have dumps() and loads()")
    return dumps, None, loads


def _takes_start(create_iter):
    """True when create_iter accepts a ``start`` argument by keyword: it
    can begin at any index (``def create_iter(start=0)``), so regenerating
    a shard calls ``create_iter(start=first_index)`` instead of iterating
    from 0."""
    if create_iter is None or isinstance(create_iter, _Constant):
        return False
    import inspect

    try:
        params = inspect.signature(create_iter).parameters
    except (TypeError, ValueError):
        return False
    p = params.get("start")
    return p is not None and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)


def _path(root_dir):
    path = _os.fspath(root_dir)
    if isinstance(path, bytes):
        path = _os.fsdecode(path)
    if not isinstance(path, str):
        raise TypeError(f"root_dir must be str or os.PathLike, not {type(path).__name__}")
    return path


def _is_path(value):
    return isinstance(value, (str, bytes, _os.PathLike))


class _Omitted:
    """The default of an argument whose absence means "what the root has
    stored" (memory_limit): None passed explicitly means none."""

    __slots__ = ()

    def __repr__(self):
        return "<omitted>"


_OMITTED = _Omitted()


def _params(
    root_dir,
    create_iter=None,
    max_shard_length="64mb",
    max_cache_size=128,
    max_workers=1,
    memory_limit=_OMITTED,
    compression=None,
    preload_fn=preload_next_shard,
    preload_all_async=False,
    info=None,
    iterator_thread_safe=False,
    length=None,
    mode=0o644,
):
    """loadit's signature: binds and checks the arguments."""
    return dict(
        root_dir=root_dir,
        create_iter=create_iter,
        max_shard_length=max_shard_length,
        max_cache_size=max_cache_size,
        max_workers=max_workers,
        memory_limit=memory_limit,
        compression=compression,
        preload_fn=preload_fn,
        preload_all_async=preload_all_async,
        info=info,
        iterator_thread_safe=iterator_thread_safe,
        length=length,
        mode=mode,
    )


_PARAMS = tuple(_inspect.signature(_params).parameters)


def _bind(args, kwargs):
    """_params(*args, **kwargs), its TypeErrors naming LoadIt() and
    suggesting the closest name for a misspelled keyword."""
    for name in kwargs:
        if name not in _PARAMS:
            own = _inspect.signature(LoadIt.__init__).parameters.values()
            known = _PARAMS + tuple(q.name for q in own if q.kind == q.KEYWORD_ONLY)
            close = _difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else (
                f"; its arguments are {', '.join(known)}")
            raise TypeError(f"LoadIt() got an unexpected keyword argument {name!r}{hint}")
    try:
        return _params(*args, **kwargs)
    except TypeError as e:
        raise TypeError(str(e).replace("_params()", "LoadIt()")) from None


# Cores of open loaders: closed at exit, before the interpreter goes away
# (their fill threads call into Python).
_live = _weakref.WeakSet()


@_atexit.register
def _close_all():
    _progress.close_all()
    # At exit a fill stuck in the iterator is abandoned after a second (or
    # at once on Ctrl-C) so that the process can end; see LoadIt.close().
    for core in list(_live):
        core.close(at_exit=True)
    # Notices from now on go to fd 2: the interpreter is going away.
    _bagcache._notices_at_exit()


# ---- loadit's internals, read-only --------------------------------------------------


class _NoObserver:
    """loadit's watchdog observer: bagcache needs none."""

    def unschedule_all(self):
        pass

    def stop(self):
        pass

    def join(self, timeout=None):
        pass


class _Shards:
    """``loader.shards``: call it for the shards present (list of dicts);
    its attributes are loadit's ``ShardedDataset`` ones its tests use."""

    __slots__ = ("_core",)
    observer = _NoObserver()

    def __init__(self, core):
        self._core = core

    def __call__(self):
        return self._core.shards()

    @property
    def max_shard_length(self):
        return self._core.shard_records

    def size(self):
        return self._core.stats()["bytes_on_disk"]

    def get_all_shards(self):
        return [ShardInfo(s["path"], s["start"], s["end"], s["bytes"]) for s in self._core.shards()]

    @property
    def _cache_miss_count(self):
        st = self._core.stats()
        return st["fills"] + st["regenerations"]


class _MemoryCache:
    """``loader.memory_cache``: loadit's in-memory shard cache.  bagcache
    keeps no shard in memory (readers are memory-mapped); what it holds per
    process are open shard readers, at most ``max_cache_size`` of them."""

    __slots__ = ("_core",)

    def __init__(self, core):
        self._core = core

    def size(self):
        """Shards this process holds open now (<= max_cache_size)."""
        return self._core.stats()["open_shards"]

    @property
    def _cache_miss_count(self):
        """Shard files this process opened (loadit: synchronous misses)."""
        return self._core.stats()["shard_opens"]


class _Writer:
    """One of ``loader.writer_pool.writers``: a pass over ``create_iter()``."""

    __slots__ = ("_core", "_k")

    def __init__(self, core, k):
        self._core = core
        self._k = k

    @property
    def current_idx(self):
        """The last index this pass read, or -1 (loadit's ``current_idx``)."""
        positions = self._core.worker_positions()
        return positions[self._k] - 1 if self._k < len(positions) else -1


class _WriterPool:
    """``loader.writer_pool``: loadit's pool of passes, one ``_Writer`` per
    worker, in the order the engine opened the passes still open."""

    __slots__ = ("writers",)

    def __init__(self, core, max_workers):
        self.writers = [_Writer(core, k) for k in range(max_workers)]


# ---- views ---------------------------------------------------------------------------


def _nonempty(seq):
    """bool(seq) without draining the source: reads item 0 at most."""
    n, exact = seq._known_length()
    if n > 0 or exact:
        return n > 0
    try:
        seq[0]
    except NotCachedError:
        raise
    except IndexError:
        return False
    return True


def _key_for_pickle(key):
    if isinstance(key, bytes):  # an index list, as int64
        import array

        a = array.array("q")
        a.frombytes(key)
        return a
    return key


class LoadItView(_bagcache._CacheSeq, _abc.Sequence):
    """A lazy view of a LoadIt: ``loader[a:b:c]``, ``loader[[i, j, ...]]``,
    ``loader[i, j]``, and views of views.  Items, slices, iteration, ``len``
    and ``read_indices`` work as on the loader; nothing is read until an
    item is.  Views pickle as (loader, key) and are rebuilt on the reopened
    loader."""

    __slots__ = ()
    __bool__ = _nonempty

    def __reduce__(self):
        return (_operator.getitem, (self._parent, _key_for_pickle(self._key)))

    def __repr__(self):
        if self._core.closed:
            return "LoadItView(closed)"
        n, exact = self._known_length()
        return f"LoadItView(len{'=' if exact else '>='}{n})"


LoadItView._view_class = LoadItView  # views of views are views


# ---- LoadIt ------------------------------------------------------------------------------


def _reopen(config):
    return LoadIt(**config)


def _open_core(root, create_iter, **options):
    """_CacheCore(root, create_iter, **options); a fingerprint that differs
    from the root's says how to clear it from here."""
    try:
        return _bagcache._CacheCore(root, create_iter, **options)
    except NondeterministicError as e:
        if options.get("fingerprint_json") is None or "fingerprint is" not in str(e):
            raise
        raise NondeterministicError(
            f"{e}; or pass on_mismatch='clear' to clear it and fill it again") from None


def _canonical_json(text):
    """JSON text in one spelling (sorted keys, no spaces) for comparing."""
    return _json.dumps(_json.loads(text), sort_keys=True, separators=(",", ":"),
                       allow_nan=False)


def _fingerprint_json(fingerprint, on_mismatch, create_iter):
    """The fingerprint as JSON text for the engine (None: no check)."""
    if on_mismatch not in ("raise", "clear"):
        raise ValueError(f"on_mismatch must be 'raise' or 'clear', not {on_mismatch!r}")
    if fingerprint is None:
        return None
    if on_mismatch == "clear" and create_iter is None:
        raise ValueError("on_mismatch='clear' needs a create_iter to fill the cache again")
    try:
        return _json.dumps(fingerprint, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise TypeError(f"fingerprint must be a JSON value (str, number, list, dict, ...): "
                        f"{e}") from None


def _clear_if_mismatched(root, fingerprint_json):
    """on_mismatch='clear': deletes the cache at root when it holds another
    fingerprint, with a CacheWarning.  Returns (disk limit, user info JSON)
    the root had stored, for the new cache to keep, or None when nothing
    was cleared."""
    try:
        with open(_os.path.join(root, "metadata.json"), encoding="utf-8") as f:
            stored = _json.load(f).get("fingerprint")
    except (OSError, ValueError, AttributeError):
        return None  # no root, or one the engine will judge
    if stored is None or _canonical_json(_json.dumps(stored)) == fingerprint_json:
        return None
    real = _os.path.realpath(root)
    for other in list(_live):
        if not other.closed and _os.path.realpath(other.root) == real:
            raise ValueError(
                f"{root}: its fingerprint differs and on_mismatch='clear' would clear it, but "
                "a LoadIt of this process still has it open: close that one first")
    probe = _bagcache._CacheCore(root, None)
    try:
        kept = (probe.stats()["disk_limit"], probe.info())
    finally:
        probe.close()
    _bagcache._CacheCore.clear_root(root)
    _warnings.warn(CacheWarning(
        f"{root}: cleared (on_mismatch='clear'): it was filled from a source whose "
        f"fingerprint is {_json.dumps(stored)}, and this one's is {fingerprint_json}; "
        "it fills again from create_iter"), stacklevel=3)
    return kept


def _callable_name(fn):
    """How a warning names a callable: module.qualname, or its repr."""
    qualname = getattr(fn, "__qualname__", None)
    if qualname is None:
        return repr(fn)
    module = getattr(fn, "__module__", None)
    return f"{module}.{qualname}" if module else qualname


class _Unpicklable:
    """create_iter of a LoadIt unpickled without its own, which could not
    be pickled: a miss calls it, and it raises NotCachedError saying so."""

    __slots__ = ("root", "name", "reason")

    def __init__(self, root, name, reason):
        self.root, self.name, self.reason = root, name, reason

    def __call__(self):
        raise NotCachedError(
            f"{self.root}: the record is not cached, and this LoadIt has no source: it was "
            f"unpickled from one whose create_iter {self.name} could not be pickled "
            f"({self.reason}).  Define create_iter at module level so that it pickles, or "
            "fill the cache before handing it to other processes")

    def __reduce__(self):
        return (_Unpicklable, (self.root, self.name, self.reason))


class LoadIt(_bagcache._CacheSeq, _abc.Sequence):
    __doc__ = __doc__

    _view_class = LoadItView
    __bool__ = _nonempty

    def __init__(self, *args, serializer=None, progress=None, seekable=None,
                 max_passes=None, publish_behind=True, evict_ahead=None, fingerprint=None,
                 on_mismatch="raise", source=None, **kwargs):
        args = list(args)
        if args and not _is_path(args[0]) and args[0] is not None:
            # loadit's README form: LoadIt(create_iter, root_dir=...).
            if "create_iter" in kwargs:
                raise TypeError("LoadIt() got multiple values for argument 'create_iter'")
            kwargs["create_iter"] = args.pop(0)
            if "root_dir" not in kwargs:
                if not args:
                    raise TypeError("LoadIt() missing required argument: 'root_dir'")
                kwargs["root_dir"] = args.pop(0)
        p = _bind(args, kwargs)

        root = _path(p["root_dir"])
        if source is not None:
            # The command stored by `bagcache cache fill` (code: run only on
            # this opt-in); its records are bytes.
            if source != "command":
                raise ValueError(f"source must be None or 'command', not {source!r}")
            if p["create_iter"] is not None:
                raise TypeError("LoadIt() takes create_iter or source='command', not both")
            p["create_iter"] = _stored_command(root)
            if seekable is None:
                seekable = p["create_iter"].seek_arg
            if serializer is None:
                serializer = "raw"
        create_iter = _factory(p["create_iter"])
        max_workers = _count("max_workers", p["max_workers"], 1)
        if max_workers != 1 and not p["iterator_thread_safe"]:
            raise ValueError(
                "max_workers > 1 runs create_iter() in several threads at once: "
                "set iterator_thread_safe=True if that is safe"
            )
        max_cache_size = _count("max_cache_size", p["max_cache_size"], 1)
        # Omitted: the limit stored with the root (if any) holds; None: no
        # limit, and the stored one goes (the engine's BC_CACHE_NO_LIMIT).
        memory_limit = p["memory_limit"]
        disk_limit = 0
        if memory_limit is None:
            disk_limit = _bagcache_no_limit
        elif memory_limit is not _OMITTED:
            memory_limit = disk_limit = _byte_count("memory_limit", memory_limit)
        else:
            memory_limit = None
        shard_records, shard_bytes = (0, 0)
        if create_iter is not None:
            shard_records, shard_bytes = _shard_length(p["max_shard_length"])
            # Room for the shards at work (the one read, the one filled, one
            # per fill worker prefetching: the engine refuses less) and one more.
            room = 3 + max_workers
            if shard_bytes and memory_limit and shard_bytes > memory_limit // room:
                shard_bytes = max(1, memory_limit // room)
        level = _zstd_level(p["compression"])
        info = p["info"]
        info_json = None if info is None else _json.dumps(info)
        length = p["length"]
        known_length = -1 if length is None else _count("length", length, 0)
        mode = _count("mode", p["mode"], 0)
        dumps, dumps_args, loads = _serializer(serializer)
        progress = _progress.check_setting(progress)
        if seekable is None:
            seekable = _takes_start(create_iter)
        elif not isinstance(seekable, bool):
            raise TypeError(f"seekable must be None, True or False, not {type(seekable).__name__}")
        if max_passes is not None:
            max_passes = _count("max_passes", max_passes, 1)
        if create_iter is None and not _os.path.exists(_os.path.join(root, "metadata.json")):
            raise FileNotFoundError(
                f"{root}: no cache there, and no create_iter to fill one"
            )
        fingerprint_json = _fingerprint_json(fingerprint, on_mismatch, create_iter)
        if fingerprint_json is not None and on_mismatch == "clear":
            kept = _clear_if_mismatched(root, fingerprint_json)
            if kept is not None:  # cleared: what the root had stored still holds
                if memory_limit is None and disk_limit == 0:
                    disk_limit = kept[0]
                if info_json is None:
                    info_json = kept[1]

        core = _open_core(
            root,
            create_iter,
            dumps=dumps,
            dumps_args=dumps_args,
            loads=loads,
            shard_records=shard_records,
            shard_bytes=shard_bytes,
            max_open_shards=max_cache_size,
            fill_workers=max_workers,
            thread_safe=bool(p["iterator_thread_safe"]),
            disk_limit=disk_limit,
            zstd_level=level,
            preload_all=bool(p["preload_all_async"]),
            info_json=info_json,
            known_length=known_length,
            file_mode=mode,
            make_parents=True,  # as loadit: Path.mkdir(parents=True)
            progress=(None if progress is False or create_iter is None
                      else _progress.Hook(root, progress)),
            seekable=bool(seekable and create_iter is not None),
            max_passes=max_passes or 0,
            prefetch_shards=_prefetch_depth(p["preload_fn"], max_workers),
            publish_behind=bool(publish_behind),
            evict_ahead=0 if evict_ahead is None else 1 if evict_ahead else -1,
            fingerprint_json=fingerprint_json,
        )
        self._open(core)
        _live.add(core)
        self._max_workers = max_workers
        self._warned_unpicklable = False
        self._preload_fn = None
        self.preload_fn = p["preload_fn"]
        # What reopens it elsewhere (pickling); info stays in the root.
        config = dict(p, root_dir=root, create_iter=create_iter, info=None)
        if p["memory_limit"] is _OMITTED:
            del config["memory_limit"]
        if serializer is not None:
            config["serializer"] = serializer
        if progress is not None:
            config["progress"] = progress
        config["seekable"] = seekable
        if max_passes is not None:
            config["max_passes"] = max_passes
        if not publish_behind:
            config["publish_behind"] = False
        if evict_ahead is not None:
            config["evict_ahead"] = evict_ahead
        if fingerprint is not None:
            config["fingerprint"] = fingerprint
            config["on_mismatch"] = on_mismatch
        self._config = config
        self._progress = progress
        # The background drain's line, unless all is cached already.
        self._preload_shown = None
        if create_iter is not None and progress is not False:
            _progress.watch(core, root, progress)  # reads that wait long
        if (p["preload_all_async"] and create_iter is not None
                and _progress.enabled(progress) and not self.all_cached_to_disk()):
            self._preload_shown = _progress.start(core, root, progress, background=True)

    # ---- loadit's API

    @property
    def root_dir(self):
        """The cache directory (str)."""
        return self._core.root

    @property
    def max_workers(self):
        """Background fill threads (the max_workers given)."""
        return self._max_workers

    @property
    def preload_fn(self):
        """The prefetch policy (see the class doc); assignable."""
        return self._preload_fn

    @preload_fn.setter
    def preload_fn(self, fn):
        if fn is preload_next_shard:
            self._core._set_prefetch(_default_ahead(self._max_workers))
        elif fn is None:
            self._core._set_prefetch(None)
        elif callable(fn):
            self._core._set_prefetch(fn, self)
        else:
            raise TypeError("preload_fn must be None or callable")
        self._preload_fn = fn

    @property
    def memory_cache(self):
        """loadit's ``loader.memory_cache``: ``.size()`` is the number of
        shards this process holds open (see the class doc)."""
        return _MemoryCache(self._core)

    @property
    def writer_pool(self):
        """loadit's ``loader.writer_pool``: ``.writers[k].current_idx`` is
        where the k-th open pass of ``create_iter()`` stands."""
        return _WriterPool(self._core, self._max_workers)

    @property
    def shards(self):
        """``loader.shards()`` lists the shards present (dicts: start, end,
        path, bytes, last_access); its attributes are loadit's internals
        (see the class doc)."""
        return _Shards(self._core)

    def info(self):
        """The user info stored with the cache (read from disk each time)."""
        return _json.loads(self._core.info())

    def fingerprint(self):
        """The source's fingerprint stored with the cache (read from disk
        each time), or None when it has none."""
        text = self._core.fingerprint()
        return None if text is None else _json.loads(text)

    def set_info(self, info):
        """Stores ``info`` (JSON-serializable) with the cache, atomically."""
        self._core.set_info(_json.dumps(info))

    def all_cached_to_disk(self):
        """True when the length is known and every shard is on disk."""
        st = self._core.stats()
        if not st["length_final"]:
            return False
        r = st["shard_records"] or 1
        return st["shards_present"] >= -(-st["length"] // r)

    def wait_until_all_cached(self):
        """Drains the iterator and fills every missing shard, then returns
        all_cached_to_disk() (False when the disk limit cannot hold it all).
        Ctrl-C interrupts it.  Shows progress (see ``progress``)."""
        shown = None
        if self._core.has_source:  # else nothing is drained
            shown = _progress.start(self._core, self.root_dir, self._progress)
        finished = False
        try:
            self._core.fill_all()
            finished = True
        finally:
            if shown is not None:
                shown.close(finished)
        return self.all_cached_to_disk()

    def stats(self):
        """The engine's counters: length, length_final, shard_records,
        shards_present, bytes_on_disk, disk_limit, and this process's hits,
        shard_opens, fills, regenerations, evictions, passes_opened,
        records_skipped, records_written, waits, open_shards (shard readers
        open now); and what a disk limit costs: records_generated (the
        items create_iter() produced for this process: written + skipped),
        misses (fills + regenerations), records_per_miss (generated per
        miss, 0.0 before any) and passes (where the parked passes of the
        iterator stand: the next index each will produce).  ``root`` is a
        dict of the root's own counters, summed over every process that has
        used it (torch workers, other jobs) and kept in its shared state:
        misses, fills, regenerations, evictions, records_generated and
        bytes_written (of shard files); 0 on a root last written by a
        version that did not count them."""
        st = self._core.stats()
        root = st["root"]
        root["misses"] = root["fills"] + root["regenerations"]
        st["records_generated"] = st["records_written"] + st["records_skipped"]
        st["misses"] = st["fills"] + st["regenerations"]
        st["records_per_miss"] = st["records_generated"] / st["misses"] if st["misses"] else 0.0
        st["passes"] = self._core.worker_positions()
        return st

    def worker_positions(self):
        """Where this process's passes of the iterator stand (next index)."""
        return self._core.worker_positions()

    def sync(self):
        """Waits until every shard this loader filled is durable on disk:
        with publish_behind (the default) a miss returns before its shard is
        published, and a publisher thread makes it durable behind it.
        Raises the first publish that failed since the last report (an
        OSError such as ENOSPC or EIO: the items read were right, the shard
        was not kept and is regenerated when read again); a later read that
        opens a shard would raise it otherwise.  Returns None; a no-op with
        publish_behind=False."""
        self._core.sync()

    def finalize(self):
        """loadit's finalize(): makes the length final at the end of the
        last shard on disk, cutting the sequence short there (for every
        process using the root).  Does nothing once the length is final."""
        self._core.finalize()

    # ---- lifetime

    @property
    def closed(self):
        """True once close() was called."""
        return self._core.closed

    def close(self):
        """Stops the background fills and closes the cache, releasing its
        files and the root's shared state now (even while this object is
        still referenced); reads of this loader, its views and iterators
        then raise ValueError.  Idempotent.  A fill stuck in the iterator
        is abandoned on Ctrl-C (close() then raises KeyboardInterrupt):
        its claim is dropped so that other processes fill the shard, and
        its thread, which cannot be stopped, publishes nothing."""
        shown = getattr(self, "_preload_shown", None)
        if shown is not None:
            shown.close()  # the preload's line ends first
        self._core.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __reduce__(self):
        config = dict(self._config)
        create_iter = config["create_iter"]
        try:
            _pickle.dumps(create_iter)
        except Exception as e:
            # The copy reads what is cached; a miss there raises
            # NotCachedError saying why it has no source.
            dropped = _Unpicklable(self.root_dir, _callable_name(create_iter),
                                   f"{type(e).__name__}: {e}")
            config["create_iter"] = dropped
            config["preload_fn"] = None  # nothing to prefetch with
            config["preload_all_async"] = False
            config["seekable"] = False
            if not self._warned_unpicklable:
                self._warned_unpicklable = True
                _warnings.warn(CacheWarning(
                    f"pickling LoadIt({self.root_dir!r}) leaves its create_iter "
                    f"{dropped.name} behind: it cannot be pickled ({dropped.reason}).  The copy "
                    "(a worker process started with spawn or forkserver, for instance) reads "
                    "only what is cached, and a record it lacks raises NotCachedError.  Define "
                    "create_iter at module level (a functools.partial of one works too) so that "
                    "it pickles, or start the workers with fork"), stacklevel=2)
            return (_reopen, (config,))
        try:
            _pickle.dumps(self._preload_fn)
            config["preload_fn"] = self._preload_fn
        except Exception:
            pass  # the copy prefetches as by default
        return (_reopen, (config,))

    def __repr__(self):
        if self.closed:
            return f"LoadIt({self.root_dir!r}, closed)"
        n, exact = self._known_length()
        return f"LoadIt({self.root_dir!r}, len{'=' if exact else '>='}{n})"
