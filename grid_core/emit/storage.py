"""Typed storage: the arrays an algorithm's steps read and write, declared once.

A :class:`Field` is one array of an arena region: entries keyed by what they belong to (a body,
a (body, column) pair, ...), each ``width`` scalars (or ``width(key)``: entries of a joint's
width), laid out in key order.  An algorithm
declares its fields; :func:`region` makes the arena region of them (so the arena plan sizes
what the steps address), and the layer generator binds them where they live
(:meth:`~grid_core.emit.layers.Layers.arrays`): the region's part in shared or global memory in
the block layout (``s_<field>``), a local array in the per-state layout.  A bound
:class:`Array` gives each entry's C++ expression, so no module computes an offset or names a
declaration; a composing algorithm gets another algorithm's fields (and steps) by handle.

Code that walks entries in a loop instead of straight-line code (a table-driven step, where the
unrolled form would be too large) reads them at a run-time offset: :meth:`Field.offsets` gives
the entries' offsets for a baked table (:func:`index_table`), :meth:`Array.indexed` the C++
expression of a scalar at such an offset, and :meth:`Array.store_known` stores the constants
:meth:`Array.put` folded, which a run-time index cannot.

An :class:`Array` also folds what need not be stored: :meth:`Array.put` records the entries
that are known at generation time (robot constants, exact zeros) instead of storing them, and
:meth:`Array.get` returns them folded; a key the field does not hold reads as exact zeros.
:meth:`Array.accumulate` sums into an entry over several steps (a parent gathering its children).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Sequence

import attrs

from ..arena import ArenaRegion
from ..errors import CodegenError
from . import nodes as n
from .expr import Scalar, Scope, is_const, sum_terms


@attrs.frozen(slots=False)
class Field:
    """One array: ``width`` scalars for each of ``keys`` (a callable: ``width(key)`` for each), in
    key order."""

    name: str
    keys: tuple = attrs.field(converter=tuple)
    width: int | Callable = 6
    doc: str = ""
    cols: int = 0
    """A flat field's row length: a row-major matrix (:func:`vector`, :meth:`Array.at`)."""

    def width_of(self, key) -> int:
        return self.width(key) if callable(self.width) else self.width

    @functools.cached_property
    def _layout(self) -> tuple[dict, int]:
        offsets, off = {}, 0
        for key in self.keys:
            offsets[key] = off
            off += self.width_of(key)
        return offsets, off

    @property
    def size(self) -> int:
        return self._layout[1]

    def offset(self, key) -> int:
        try:
            return self._layout[0][key]
        except KeyError:
            raise CodegenError(f"array '{self.name}' holds no entry {key!r}") from None

    def holds(self, key) -> bool:
        return key in self._layout[0]

    def offsets(self, keys: Iterable) -> list[int]:
        """The offsets of ``keys``' entries, in order: a table of them for code that reads entries at
        a run-time offset (:meth:`Array.indexed`)."""
        return [self.offset(key) for key in keys]


def vector(name: str, size: int, doc: str = "", cols: int = 0) -> Field:
    """A flat field of ``size`` scalars, one entry (``cols``: a row-major matrix of that row
    length): an orchestrator's intermediate results, read through :meth:`Array.at`."""
    return Field(name, (None,), size, doc, cols)


def region(name: str, fields: Sequence[Field], doc: str = "") -> ArenaRegion:
    """The arena region of ``fields`` (one part each, in order): they spill together."""
    return ArenaRegion.group(name, [(f.name, f.size) for f in fields], doc)


def regions(fields: Iterable[Field]) -> tuple[ArenaRegion, ...]:
    """One arena region per field, named and documented as it: each spills on its own."""
    return tuple(ArenaRegion(f.name, f.size, f.doc) for f in fields)


class Array:
    """A field bound to where it lives: ``base`` names its first scalar's array (``s_v``, ``v``)."""

    def __init__(self, field: Field, base: str):
        self.field, self.base = field, base
        self.known: dict[tuple, float] = {}
        self.started: set = set()
        """The keys :meth:`accumulate` has assigned."""

    @property
    def name(self) -> str:
        return self.field.name

    def __call__(self, key, k: int | str = 0, first: int = 0) -> str:
        """The C++ expression of scalar ``k - first`` of entry ``key`` (``first``: the index of the
        entry's scalar 0, for entries that cover a range such as columns ``first..``); ``k`` may be
        a C++ int expression."""
        off = self.field.offset(key) - first
        return f"{self.base}[{off + k if isinstance(k, int) else plus(k, off)}]"

    def at(self, i, c=None) -> str:
        """Scalar ``i`` of a flat field (:func:`vector`), or entry ``(i, c)`` of a row-major matrix
        field; either index may be a C++ int expression."""
        return self(None, i if c is None else row_major(i, c, self.field.cols))

    def indexed(self, offset: str, k: int = 0) -> str:
        """The C++ expression of scalar ``k`` of the entry at run-time offset ``offset`` (a C++ int
        expression holding one of :meth:`Field.offsets`): what a loop over entries reads.  Nothing
        folds there, so the code that fills the field must have called :meth:`store_known`."""
        return f"{self.base}[{plus(offset, k)}]"

    def store_known(self, scope: Scope) -> None:
        """Store the constant scalars :meth:`put` recorded instead of storing (in key order), so
        that :meth:`indexed` reads them too; the entries stay folded where :meth:`get` reads them."""
        for key in self.field.keys:
            for k in range(self.field.width_of(key)):
                if (key, k) in self.known:
                    scope.assign(self(key, k), self.known[(key, k)])

    def put(self, scope: Scope, key, values: Sequence[Scalar]) -> None:
        """Store entry ``key``: its constant scalars only recorded (folded where read)."""
        for k, x in enumerate(values):
            if is_const(x):
                self.known[(key, k)] = float(x)
            else:
                self.known.pop((key, k), None)
                scope.assign(self(key, k), x)

    def accumulate(self, scope: Scope, key, parts: Sequence[Sequence[Scalar]], first=None) -> None:
        """Entry ``key`` ``= first + sum(parts)`` the first time, ``+= sum(parts)`` after."""
        started = key in self.started
        terms = parts if started or first is None else [first, *parts]
        for k in range(len(terms[0])):
            total = sum_terms([(t[k],) for t in terms])
            scope.add_to(self(key, k), total) if started else scope.assign(self(key, k), total)
        self.started.add(key)

    def get(self, key, k: int | None = None):
        """Entry ``key`` (scalar ``k``, or the whole entry): recorded constants folded, a key the
        field does not hold an exact zero."""
        if k is None:
            return [self.get(key, j) for j in range(self.field.width_of(key))]
        if (key, k) in self.known:
            return self.known[(key, k)]
        return self(key, k) if self.field.holds(key) else 0.0


class Vector:
    """A port vector (or the transform data) where the code finds it: ``v(i)`` is scalar ``i``'s C++
    expression, ``v.at(r, c)`` entry ``(r, c)`` of a row-major matrix of ``cols`` columns."""

    def __init__(self, base: str, cols: int = 0):
        self.base, self.cols = base, cols

    def __call__(self, i) -> str:
        return f"{self.base}[{i}]"

    def at(self, r, c) -> str:
        return self(row_major(r, c, self.cols))


def index_table(name: str, values: Sequence[int], comment: str = "", per_line: int = 8) -> n.ConstArray:
    """A baked table of ints both layouts read (``static __device__ const int name[] = {...}``): entry
    offsets (:meth:`Field.offsets`), ranges, output cells of a table-driven loop."""
    return n.ConstArray("int", name, list(values), qualifiers="static __device__ const", per_line=per_line,
                        comment=comment)


def put_symmetric(scope: Scope, at: Callable, r, c, value: Scalar) -> None:
    """Entry ``(r, c)`` of a symmetric matrix (``at(r, c)``: its C++ expression) and, off the
    diagonal, its mirror ``(c, r)``: each entry written once."""
    scope.assign(at(r, c), value)
    if r != c:
        scope.assign(at(c, r), value)


class Symmetric:
    """A symmetric ``n x n`` matrix written through its upper triangle, ``at(r, c)`` an entry's C++
    expression (None: the entries recorded only, for code that reads them on): each entry put once
    with its mirror (:func:`put_symmetric`), read back as ``m(r, c)`` (either triangle; an entry
    never put an exact zero), and the entries never put written as the structural zeros they are
    (:meth:`zeros`: the blocks between separate trees of a forest)."""

    def __init__(self, n: int, at: Callable | None = None):
        self.n, self.at, self.entries = n, at, {}

    def put(self, scope: Scope, r: int, c: int, value: Scalar) -> None:
        self.entries[min(r, c), max(r, c)] = value
        if self.at is not None:
            put_symmetric(scope, self.at, r, c, value)

    def __call__(self, r: int, c: int) -> Scalar:
        return self.entries.get((min(r, c), max(r, c)), 0.0)

    def zeros(self, scope: Scope) -> None:
        """Every entry never put, an exact zero, with its mirror."""
        for r, c in itertools.combinations_with_replacement(range(self.n), 2):
            if (r, c) not in self.entries:
                put_symmetric(scope, self.at, r, c, 0.0)


def row_major(r, c, cols: int):
    """The index of entry ``(r, c)`` of a row-major matrix of ``cols`` columns (either index may be a
    C++ int expression)."""
    if isinstance(r, int) and isinstance(c, int):
        return r * cols + c
    if isinstance(r, str):
        return f"{r} * {cols} + {c}" if isinstance(c, str) else plus(f"{r} * {cols}", c)
    return plus(c, r * cols)


def plus(var: str, const: int) -> str:
    """``var + const`` as C++ (``var`` a C++ int expression; ``const`` 0: ``var`` alone)."""
    if const == 0:
        return str(var)
    return f"{var} + {const}" if const > 0 else f"{var} - {-const}"


def local_declaration(arrays: Iterable[Array], extra: Sequence[str] = (), comment: str = "") -> n.Stmt:
    """``T a[size], b[size]...`` of a per-state function's local arrays (``extra`` first)."""
    decls = [*extra, *(f"{a.base}[{a.field.size}]" for a in arrays if a.field.size)]
    return n.Stmt(f"T {', '.join(decls)}", comment=comment)


__all__ = ["Array", "Field", "Symmetric", "Vector", "index_table", "local_declaration", "plus", "put_symmetric", "region",
           "regions", "row_major", "vector"]
