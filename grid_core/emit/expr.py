"""Scalar expressions with robot constants folded in.

A scalar is a Python ``float`` (a constant known at generation time), a ``str``
(a C++ expression of type ``T``, treated as an atom) or a :class:`Poly` (a sum
of monomials of atoms with float coefficients).  :func:`sum_terms` multiplies
and adds them exactly, dropping zero terms and unit factors, so a product with a
sparse robot constant emits only its structurally non-zero part (pattern P4).
:class:`Scope` collects the statements of straight-line code and binds compound
expressions to named ``const T`` temporaries (which also bounds the expansion).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Union

from . import nodes as n
from .printer import fnum

CLEAN_TOL = 1e-14
"""Generic constants within this of 0 or +-1 are taken as exactly 0 or +-1."""

ROTATION_TOL = 1e-11
"""Entries of a rotation matrix (order 1) closer than this to 0 or +-1 are snapped: URDFs
write pi/2 with 10-12 digits (hyq: cos = 4.9e-12).  Over a chain of 30 bodies the
change stays below 1e-9 relative."""

_SIMPLE = re.compile(r"^[A-Za-z_][A-Za-z_0-9]*(\[[^\[\]]+\])?$|^\(.*\)$")


def clean(x: float, tol: float = CLEAN_TOL) -> float:
    x = float(x)
    if abs(x) < tol:
        return 0.0
    if abs(x - 1.0) < tol:
        return 1.0
    if abs(x + 1.0) < tol:
        return -1.0
    return x


def const(x: float, T: str = "T") -> str:
    """A constant as a C++ expression of type ``T``."""
    return f"{T}({fnum(x)})"


class Poly:
    """``sum(coef * prod(atoms))``: monomials keyed by their sorted atoms (``()`` is the constant)."""

    __slots__ = ("terms",)

    def __init__(self, terms: dict[tuple[str, ...], float] | None = None):
        self.terms = {k: v for k, v in (terms or {}).items() if v != 0.0}

    @staticmethod
    def of(x) -> "Poly":
        if isinstance(x, Poly):
            return x
        if isinstance(x, (int, float)):
            return Poly({(): float(x)})
        x = x.strip()
        if x.startswith("-") and _SIMPLE.match(x[1:]):
            return Poly({(x[1:],): -1.0})
        if _SIMPLE.match(x):
            return Poly({(x,): 1.0})
        return Poly({(f"({x})",): 1.0})

    def __mul__(self, other: "Poly") -> "Poly":
        out: dict[tuple[str, ...], float] = {}
        for ka, va in self.terms.items():
            for kb, vb in other.terms.items():
                key = tuple(sorted(ka + kb))
                out[key] = out.get(key, 0.0) + va * vb
        return Poly(out)

    def __add__(self, other: "Poly") -> "Poly":
        out = dict(self.terms)
        for k, v in other.terms.items():
            out[k] = out.get(k, 0.0) + v
        return Poly(out)

    def simplify(self):
        """A float for a constant, a str for a single unit atom, else the Poly."""
        if not self.terms:
            return 0.0
        if list(self.terms) == [()]:
            return self.terms[()]
        if len(self.terms) == 1:
            (key, coef), = self.terms.items()
            if coef == 1.0 and len(key) == 1:
                return key[0]
        return self

    def render(self) -> str:
        parts = []
        for key, coef in sorted(self.terms.items(), key=lambda kv: (kv[0] == (), kv[0])):
            mag = abs(coef)
            if not key:
                body = const(mag)
            else:
                prod = "*".join(key)
                body = prod if mag == 1.0 else f"{const(mag)}*{prod}"
            if not parts:
                parts.append(body if coef > 0 else f"-{body}")
            else:
                parts.append(f" + {body}" if coef > 0 else f" - {body}")
        return "".join(parts) if parts else const(0.0)

    def __eq__(self, other) -> bool:
        return isinstance(other, Poly) and self.terms == other.terms

    __hash__ = None

    def __str__(self) -> str:
        return self.render()

    def __repr__(self) -> str:
        return f"Poly({self.render()})"


Scalar = Union[float, str, Poly]


def is_const(x: Scalar) -> bool:
    return isinstance(x, (int, float))


def sum_terms(terms: Iterable[Sequence[Scalar]], constant: float = 0.0) -> Scalar:
    """``constant + sum(prod(factors) for factors in terms)``, exactly, constants folded."""
    total = Poly({(): float(constant)})
    for factors in terms:
        prod = Poly({(): 1.0})
        for f in factors:
            prod = prod * Poly.of(f)
            if not prod.terms:
                break
        total = total + prod
    return total.simplify()


def add(*xs: Scalar) -> Scalar:
    return sum_terms([(x,) for x in xs])


def sub(a: Scalar, b: Scalar) -> Scalar:
    return sum_terms([(a,), (-1.0, b)])


def mul(*xs: Scalar) -> Scalar:
    return sum_terms([xs])


def neg(a: Scalar) -> Scalar:
    return sum_terms([(-1.0, a)])


def dot(a: Sequence[Scalar], b: Sequence[Scalar]) -> Scalar:
    return sum_terms(zip(a, b))


def cross(a: Sequence[Scalar], b: Sequence[Scalar]) -> list[Scalar]:
    return [
        sum_terms([(a[1], b[2]), (-1.0, a[2], b[1])]),
        sum_terms([(a[2], b[0]), (-1.0, a[0], b[2])]),
        sum_terms([(a[0], b[1]), (-1.0, a[1], b[0])]),
    ]


def matvec(M: Sequence[Sequence[Scalar]], v: Sequence[Scalar]) -> list[Scalar]:
    return [sum_terms(zip(row, v)) for row in M]


def matTvec(M: Sequence[Sequence[Scalar]], v: Sequence[Scalar]) -> list[Scalar]:
    return [sum_terms((M[r][c], v[r]) for r in range(len(M))) for c in range(len(M[0]))]


def render(x: Scalar) -> str:
    """A scalar as the right-hand side of an assignment."""
    if is_const(x):
        return const(x)
    if isinstance(x, Poly):
        return x.render()
    return x


def is_atom(x: Scalar) -> bool:
    return isinstance(x, str) and bool(_SIMPLE.match(x))


class Scope:
    """Straight-line code under construction: statements plus fresh temporaries."""

    def __init__(self, prefix: str = "t", T: str = "T"):
        self.prefix = prefix
        self.T = T
        self.stmts: list = []
        self._count = 0

    def fresh(self, hint: str = "") -> str:
        self._count += 1
        return f"{self.prefix}{hint}{self._count}"

    def let(self, x: Scalar, hint: str = "") -> Scalar:
        """Bind a compound expression to a temporary; constants and atoms pass through."""
        if is_const(x) or is_atom(x):
            return x
        if isinstance(x, Poly):
            simple = x.simplify()
            if is_const(simple) or is_atom(simple):
                return simple
            # a negated atom stays inline: the sign folds into whatever uses it
            if len(x.terms) == 1:
                (key, coef), = x.terms.items()
                if coef == -1.0 and len(key) == 1:
                    return x
        name = self.fresh(hint)
        self.stmts.append(n.Stmt(f"const {self.T} {name} = {render(x)}"))
        return name

    def let_all(self, xs: Sequence[Scalar], hint: str = "") -> list[Scalar]:
        return [self.let(x, hint) for x in xs]

    def assign(self, target: str, x: Scalar) -> None:
        self.stmts.append(n.Stmt(f"{target} = {render(x)}"))

    def assign_all(self, targets: Sequence[str], xs: Sequence[Scalar]) -> None:
        for target, x in zip(targets, xs, strict=True):
            self.assign(target, x)

    def add_to(self, target: str, x: Scalar) -> None:
        if is_const(x) and x == 0.0:
            return
        p = Poly.of(x)
        if p.terms and all(c < 0 for c in p.terms.values()):
            self.stmts.append(n.Stmt(f"{target} -= {render(sum_terms([(-1.0, p)]))}"))
            return
        self.stmts.append(n.Stmt(f"{target} += {render(x)}"))

    def comment(self, text: str) -> None:
        self.stmts.append(n.Comment(text))

    def stmt(self, text: str) -> None:
        self.stmts.append(n.Stmt(text))

    def extend(self, nodes_) -> None:
        self.stmts.extend(nodes_)

    def body(self) -> list:
        """The statements with unused temporaries removed (dead-code elimination)."""
        return prune_unused(self.stmts, self.prefix)


_DECL = re.compile(r"^const \w+ (\w+) = ")


def _text(node) -> str:
    if isinstance(node, (n.Stmt, n.Raw)):
        return node.text
    if isinstance(node, n.If):
        return node.cond + " " + " ".join(_text(c) for c in node.body + node.orelse)
    if isinstance(node, (n.Block, n.For, n.BlockStrideLoop)):
        return " ".join(_text(c) for c in node.body)
    return ""


def prune_unused(stmts: list, prefix: str) -> list:
    """Drop ``const T name = ...`` declarations of temporaries never read afterwards."""
    stmts = list(stmts)
    decl_at = {}
    for i, s in enumerate(stmts):
        m = _DECL.match(s.text) if isinstance(s, n.Stmt) else None
        if m and m.group(1).startswith(prefix):
            decl_at[m.group(1)] = i
    if not decl_at:
        return stmts
    token = re.compile(r"\b[A-Za-z_]\w*\b")
    changed = True
    alive = set(range(len(stmts)))
    while changed:
        changed = False
        used: set[str] = set()
        for i in alive:
            text = _text(stmts[i])
            m = _DECL.match(text) if isinstance(stmts[i], n.Stmt) else None
            rhs = text[m.end():] if m else text
            used.update(token.findall(rhs))
        for name, i in decl_at.items():
            if i in alive and name not in used:
                alive.discard(i)
                changed = True
    return [s for i, s in enumerate(stmts) if i in alive]
