"""Nodes of the generated C++ (data apart from rendering, as sympy's codegen does).

Emitters are pure functions returning trees of these nodes; :mod:`.printer` owns
indentation, braces and number formatting.  A new construct costs one node, one
print method and one golden test.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Union

import attrs


def _body(value) -> tuple:
    if value is None:
        return ()
    if isinstance(value, (list, tuple)):
        out = []
        for v in value:
            if isinstance(v, (list, tuple)):
                out.extend(_body(v))
            elif v is not None:
                out.append(v)
        return tuple(out)
    return (value,)


def body_field():
    return attrs.field(factory=tuple, converter=_body)


@attrs.frozen
class Raw:
    """Verbatim text (one or more lines), indented with its surroundings."""

    text: str


@attrs.frozen
class Stmt:
    """One statement; the printer adds the semicolon, then ``// comment`` if given."""

    text: str
    comment: str = ""

    def __attrs_post_init__(self):
        if "//" in self.text:
            raise ValueError(f"a statement's trailing comment goes in Stmt(comment=...): {self.text!r}")


@attrs.frozen
class Comment:
    """``//`` comment lines (the text may hold several lines)."""

    text: str


@attrs.frozen
class Blank:
    """An empty line."""


@attrs.frozen
class Block:
    """``head {`` body ``}tail``; ``head`` empty gives a bare scope."""

    head: str
    body: tuple = body_field()
    tail: str = ""


@attrs.frozen
class Namespace:
    name: str
    body: tuple = body_field()


@attrs.frozen
class Function:
    """A function definition: ``template`` line (optional), ``signature``, body.

    ``signature`` is a :class:`~grid_core.emit.signature.Signature` (its template
    included) or, for helpers no one calls by handle, the declaration's text."""

    signature: object
    body: tuple = body_field()
    template: str = ""
    doc: str = ""


@attrs.frozen
class For:
    """``for (init; cond; step)``."""

    init: str
    cond: str
    step: str
    body: tuple = body_field()


@attrs.frozen
class BlockStrideLoop:
    """``for (int var = tid; var < count; var += block size)``: correct at any block size.

    ``per_warp``: one item per warp (lane 0 runs it), so items whose code differs run
    on different warps instead of diverging within one."""

    var: str
    count: Union[str, int]
    body: tuple = body_field()
    start: Union[str, int] = 0
    per_warp: bool = False


@attrs.frozen
class If:
    cond: str
    body: tuple = body_field()
    orelse: tuple = body_field()
    constexpr: bool = False


@attrs.frozen
class Sync:
    """A block-wide barrier (a no-op under host emulation)."""


@attrs.frozen
class ConstArray:
    """``qualifiers ctype name[n] = { values };`` (numbers formatted by the printer)."""

    ctype: str
    name: str
    values: Sequence
    qualifiers: str = "static constexpr"
    per_line: int = 8
    comment: str = ""


@attrs.frozen
class Struct:
    name: str
    body: tuple = body_field()
    template: str = ""


from .signature import Call, Launch  # noqa: E402  (statements of the typed declarations)

Node = Union[
    Raw, Stmt, Comment, Blank, Block, Namespace, Function, For, BlockStrideLoop, If, Sync, ConstArray, Struct, Call, Launch
]
