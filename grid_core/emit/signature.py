"""Typed declarations of generated functions: parameters, signatures and calls.

Every layer's signature is a :class:`Signature` built once by the layer generator
(:mod:`grid_core.emit.layers`); the printer renders it, the documentation and the C ABI
read it, and a :class:`Call` is checked against it when it is made (by parameter name:
a missing, unknown or doubled argument is a :class:`~grid_core.errors.CodegenError` at
generation time, not a compiler error in a header).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from ..errors import CodegenError


@attrs.frozen
class Param:
    """One parameter: ``ctype name = default`` (``ctype`` spelled as in C++: ``const T *``)."""

    ctype: str
    name: str
    default: str | None = None
    doc: str = ""

    def render(self) -> str:
        sep = "" if self.ctype.endswith("*") else " "
        text = f"{self.ctype}{sep}{self.name}"
        return text if self.default is None else f"{text} = {self.default}"


@attrs.frozen
class TemplateParam:
    """One template parameter: ``kind name = default`` (``typename T``, ``bool VAF_IN_SMEM = true``)."""

    kind: str
    name: str
    default: str | None = None

    def render(self) -> str:
        text = f"{self.kind} {self.name}"
        return text if self.default is None else f"{text} = {self.default}"


def _tuple(xs) -> tuple:
    return tuple(xs)


@attrs.frozen
class Signature:
    """A generated function's declaration.

    ``qualifiers`` precede the return type (``__device__``, ``__global__``,
    ``__host__``); ``attributes`` follow it (``__launch_bounds__(...)``).
    """

    name: str
    params: tuple[Param, ...] = attrs.field(converter=_tuple)
    qualifiers: str = "__device__"
    ret: str = "void"
    template: tuple[TemplateParam, ...] = attrs.field(default=(), converter=_tuple)
    attributes: str = ""

    def __attrs_post_init__(self):
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise CodegenError(f"{self.name}: duplicate parameter names {names}")

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    @property
    def template_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.template)

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise CodegenError(f"{self.name} has no parameter '{name}' (parameters: {', '.join(self.param_names)})")

    def head(self) -> str:
        """``qualifiers ret attributes name(params)``: the line before the body's brace."""
        parts = [self.qualifiers, self.ret, self.attributes, f"{self.name}({', '.join(p.render() for p in self.params)})"]
        return " ".join(p for p in parts if p)

    def template_line(self) -> str:
        return f"template <{', '.join(t.render() for t in self.template)}>" if self.template else ""

    def call(self, args: Mapping[str, str], template: Mapping[str, str] | Sequence[str] | None = None,
             *, partial: bool = False) -> "Call":
        """A call of this function with ``args`` by parameter name (see :class:`Call`)."""
        return Call.of(self, args, template, partial=partial)


def _bind(callee: str, params, given: Mapping[str, str], kind: str, what: str, partial: bool) -> tuple[str, ...]:
    """The values of ``given`` (by name) in the order of ``params`` (Param or TemplateParam):
    trailing defaulted ones may be left out, nothing else; with ``partial`` the first omitted
    one ends the list."""
    names = [p.name for p in params]
    unknown = [a for a in given if a not in names]
    if unknown:
        raise CodegenError(f"call of {callee}: no {kind} {', '.join(map(repr, unknown))} ({kind}s: {', '.join(names)})")
    values = []
    for k, p in enumerate(params):
        if p.name in given:
            values.append(str(given[p.name]))
            continue
        if p.default is None and not partial:
            raise CodegenError(f"call of {callee}: missing {what} '{p.name}'")
        if any(q in given for q in names[k:]):
            raise CodegenError(f"call of {callee}: {what} '{p.name}' is omitted before a later one")
        break
    return tuple(values)


@attrs.frozen
class Call:
    """A statement calling ``callee``, its arguments checked against the signature.

    ``args`` are in the callee's parameter order; ``template`` the explicit template
    arguments (the leading ones; ``T`` included).
    """

    callee: Signature
    args: tuple[str, ...]
    template: tuple[str, ...] = ()
    comment: str = ""

    @classmethod
    def of(cls, callee: Signature, args: Mapping[str, str], template=None, *, partial: bool = False) -> "Call":
        values = _bind(callee.name, callee.params, args, "parameter", "argument", partial)
        if template is None:
            targs: tuple[str, ...] = ()
        elif isinstance(template, Mapping):
            targs = _bind(callee.name, callee.template, template, "template parameter", "template argument", False)
        else:
            targs = tuple(template)
            if len(targs) > len(callee.template):
                raise CodegenError(f"call of {callee.name}: {len(targs)} template arguments for "
                                   f"{len(callee.template)} parameters")
        return cls(callee, values, targs)

    def expr(self) -> str:
        targs = f"<{', '.join(self.template)}>" if self.template else ""
        return f"{self.callee.name}{targs}({', '.join(self.args)})"


@attrs.frozen
class Launch:
    """``GRID_LAUNCH((kernel<...>), grid, block, smem, stream, args...)``, checked like a :class:`Call`."""

    call: Call
    grid: str
    block: str
    smem: str = "0"
    stream: str = "stream"

    def text(self) -> str:
        kernel = self.call.expr().split("(", 1)[0]
        return (f"GRID_LAUNCH(({kernel}), {self.grid}, {self.block}, {self.smem}, {self.stream}, "
                f"{', '.join(self.call.args)})")
