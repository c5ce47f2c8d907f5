"""Lazy views over sequences, compatible with loadit's views (``loadit.util``).

A view is an index map computed in C (bagcache's sequence views): building
one reads nothing, and reading element ``k`` resolves ``k`` down to one
element of one underlying sequence.  Views compose freely and work over
*any* sequence:

* a Python object with ``len()`` and ``[]`` (list, tuple, range, numpy
  array, your own class) - its elements are returned as they are;
* a :class:`bagcache.Reader` (or a slice of one), another view, or any
  object providing ``__bagcache_seq__`` (such as ``LoadIt``) - its records
  are read in C, with the GIL released, in parallel batches when iterating.

Every view is a ``collections.abc.Sequence``: ``len(v)`` (``TypeError`` for
an endless view, like ``len()`` of an iterator), ``v[i]`` with negative
``i``, ``v[a:b:c]`` and ``v[[i, j, ...]]`` / ``v[numpy_array]`` /
``v[i, j, k]`` (views again), iteration, ``in``, ``reversed``, ``index``,
``count``, and ``+`` (concatenation).  Views compare by identity (there is
no element-wise ``==``) and their ``repr`` never reads elements.

Differences from loadit (all are loadit bugs, see doc/python.md):
``InterleaveSequence`` really interleaves (loadit's raises for every index);
``RepeatSequence`` has ``len == len(seq) * repeats`` and no ``len`` when
endless; ``ConcatableSequence`` supports ``+`` and negative indices; slices
follow Python's rules; iterating a callable view stops at ``length``;
``chunk_shuffle`` uses bagcache's keyed bijection, not numpy's generator, so
the permutation for a given seed differs from loadit's.
"""

import collections.abc as _abc
import operator as _operator
import random as _random

from . import _bagcache
from ._bagcache import ViewIterator

__all__ = [
    "ChunkShuffledSequence",
    "ConcatableSequence",
    "InterleaveSequence",
    "InterleaveSequences",
    "RepeatSequence",
    "SequenceView",
    "ViewIterator",
    "chunk_shuffle",
    "chunk_shuffle_idx",
    "shuffle",
]

_MASK64 = (1 << 64) - 1


def _is_sequence(obj):
    """loadit's test for index sequences: __len__, __getitem__ and __iter__."""
    return all(hasattr(obj, name) for name in ("__len__", "__getitem__", "__iter__"))


def _seed64(seed):
    """A 64-bit seed: any int (taken modulo 2**64), or a fresh random one."""
    if seed is None:
        return _random.SystemRandom().getrandbits(64)
    return _operator.index(seed) & _MASK64


def _count(value, name, allow_none=True):
    if value is None and allow_none:
        return None
    value = _operator.index(value)
    if value < 0:
        raise ValueError(f"{name} must be >= 0, not {value}")
    return value


class SequenceView(_bagcache._View, _abc.Sequence):
    """A view of ``seq`` through an index map.

    Args:
      seq: any sequence (see the module documentation).
      indices: None (the elements of ``seq``), a sequence of ints (list,
        tuple, range, numpy array, another view...; element ``k`` is
        ``seq[indices[k]]``, negative entries count from the end of
        ``seq``), or a callable ``f`` (element ``k`` is ``seq[f(k)]``).
      length: the number of elements of a callable view (required then).

    Index lists are copied when the view is made; indices out of range of
    a sequence of known length raise ``IndexError`` right away.  A callable
    is called when an element is read, in the reading thread.
    """

    def __init__(self, seq, indices=None, length=None):
        if indices is None:
            self._init_identity(seq)
            self._recipe = (type(self), (seq,))
        elif _is_sequence(indices) or isinstance(indices, memoryview):
            snapshot = _bagcache._View._indices_array(indices)
            self._init_take(seq, snapshot)
            self._recipe = (type(self), (seq, snapshot))
        elif callable(indices):
            if length is None:
                raise ValueError("a callable index map needs a length")
            length = _count(length, "length", allow_none=False)
            self._init_map(seq, indices, length)
            self._recipe = (type(self), (seq, indices, length))
        else:
            raise TypeError(
                "indices must be None, a sequence of ints or a callable, not "
                f"{type(indices).__name__}"
            )

    def __add__(self, other):
        if not _is_sequence(other) or isinstance(other, (str, bytes)):
            return NotImplemented
        return ConcatableSequence(self, other)

    def __radd__(self, other):
        if not _is_sequence(other) or isinstance(other, (str, bytes)):
            return NotImplemented
        return ConcatableSequence(other, self)

    def __repr__(self):
        tree, kind, known = self._describe()
        if kind == "exact":
            length = f"len={known}"
        elif kind == "at_least":
            length = f"len>={known}"
        else:
            length = "endless"
        return f"<bagcache.views.{type(self).__name__} ({tree}) {length}>"

    def __reduce__(self):
        # (callable, args) rebuilding the view: set by the constructor, or
        # by the C code of a slice or index list (operator.getitem).
        recipe = self.__dict__.get("_recipe")
        if recipe is None:
            raise TypeError(f"cannot pickle this {type(self).__name__}")
        return recipe

    def _leaf_kinds(self):
        """The kinds of leaves: 'python' (read in Python), 'native' (read in
        C), 'decoded' (read in C, decoded)."""
        names = ((1, "python"), (2, "native"), (4, "decoded"))
        return frozenset(name for bit, name in names if self._kinds & bit)

    # Sequence's mixins index() and count() work on endless views too (as
    # far as they get); `in`, iteration and reversed are the C versions.


_bagcache._View._set_view_class(SequenceView)


def _parts_of(seq, cls):
    return seq._parts if type(seq) is cls else (seq,)


class ConcatableSequence(SequenceView):
    """The sequences one after another; ``+`` concatenates further.

    Lengths are looked up only when an index needs them, so the last part
    may be a sequence whose length is not known yet (a filling LoadIt).
    """

    def __init__(self, *seqs):
        self._parts = tuple(seqs)
        self._init_concat(self._parts)
        self._recipe = (ConcatableSequence, self._parts)

    def __add__(self, other):
        if not _is_sequence(other) or isinstance(other, (str, bytes)):
            return NotImplemented
        return ConcatableSequence(*self._parts, *_parts_of(other, ConcatableSequence))

    def __radd__(self, other):
        if not _is_sequence(other) or isinstance(other, (str, bytes)):
            return NotImplemented
        return ConcatableSequence(other, *self._parts)


class InterleaveSequence(SequenceView):
    """Round-robin over the sequences, in argument order.

    A sequence that runs out leaves the rotation and the others go on, so
    every element of every sequence appears exactly once:
    ``InterleaveSequence([0, 1, 2, 3, 4], ["x"], ["y", "z"])`` is
    ``0 x y 1 z 2 3 4``.  An endless part is fine (the rotation then never
    ends).  Element ``i`` is found in O(log parts).
    """

    def __init__(self, *seqs):
        self._parts = tuple(seqs)
        self._init_interleave(self._parts)
        self._recipe = (type(self), self._parts)


#: loadit's name for InterleaveSequence.
InterleaveSequences = InterleaveSequence


class RepeatSequence(SequenceView):
    """``seq`` repeated ``repeats`` times (None: forever).

    ``len`` is ``len(seq) * repeats``.  Repeated forever, a non-empty
    sequence has no ``len`` (``TypeError``) but can be indexed at any
    non-negative position and iterated without end; an empty one stays
    empty.
    """

    def __init__(self, seq, repeats=None):
        repeats = _count(repeats, "repeats")
        self.repeats = repeats
        self._init_repeat(seq, repeats)
        self._recipe = (type(self), (seq, repeats))


class ChunkShuffledSequence(SequenceView):
    """The first ``length`` elements of ``seq`` (default: all), shuffled
    within each run of ``chunk_size`` consecutive elements (None or 0: one
    run, a full shuffle; the last run may be shorter and is shuffled too).

    The permutation is bagcache's keyed bijection (a Feistel network with
    cycle walking): element ``k`` is computed on its own, in O(1) time and
    memory, and is the same for the same ``seed`` on every machine and in
    every process.  ``seed=None`` draws a random seed once, kept in
    ``self.seed``.
    """

    def __init__(self, seq, chunk_size=None, length=None, seed=None):
        self.chunk_size = _count(chunk_size, "chunk_size") or 0
        length = _count(length, "length")
        self.seed = _seed64(seed)
        self._init_chunk_shuffle(seq, self.chunk_size, length, self.seed)
        self._recipe = (type(self), (seq, self.chunk_size, length, self.seed))


def chunk_shuffle(seq, chunk_size=None, length=None, seed=None):
    """A :class:`ChunkShuffledSequence` of ``seq`` (loadit's function).

    ``length`` larger than ``len(seq)`` is a ``ValueError`` (loadit reports
    that length and then stops early when iterating).
    """
    return ChunkShuffledSequence(seq, chunk_size, length, seed)


def shuffle(seq, seed=None):
    """A full shuffle of ``seq`` (``chunk_shuffle`` with one chunk)."""
    return ChunkShuffledSequence(seq, None, None, seed)


def chunk_shuffle_idx(chunk_size, length, seed=None):
    """The permutation of ``chunk_shuffle(range(length), chunk_size,
    seed=seed)`` as a numpy int64 array (loadit's function).

    Element ``k`` is the index of ``seq`` that ``chunk_shuffle`` puts at
    position ``k``.  Computed from bagcache's keyed bijection, so for a
    given seed it differs from loadit's (which draws numpy
    ``default_rng(seed)`` permutations); it is still a permutation of each
    chunk, and ``length=0`` gives an empty array (loadit raises).
    """
    import numpy

    chunk_size = _count(chunk_size, "chunk_size") or 0
    length = _count(length, "length", allow_none=False)
    raw = _bagcache._View._chunk_shuffle_indices(chunk_size, length, _seed64(seed))
    return numpy.frombuffer(raw, dtype=numpy.int64)
