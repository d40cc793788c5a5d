"""The one printer of generated C++: indentation, braces, number formatting.

Output is deterministic: the same nodes print the same bytes.
"""

from __future__ import annotations

import math

from . import nodes as n
from .signature import Call, Launch, Signature

INDENT = "    "


def fnum(x: float) -> str:
    """A double literal that round-trips exactly (``1.0``, ``-0.25``, ``1.2e-05``)."""
    x = float(x)
    if not math.isfinite(x):
        raise ValueError(f"cannot emit non-finite constant {x!r}")
    if x == 0.0:
        return "0.0"  # also folds -0.0, so output never depends on a sign of zero
    s = repr(x)
    if "e" in s or "." in s:
        return s
    return s + ".0"


def format_value(v, ctype: str) -> str:
    if ctype in ("int", "unsigned", "int32_t", "uint32_t", "short", "char", "bool", "size_t"):
        if isinstance(v, bool):
            return "true" if v else "false"
        return str(int(v))
    return fnum(v)


class CudaPrinter:
    """Renders node trees to text.  ``print_X`` exists for every node class ``X``."""

    def render(self, node_or_nodes) -> str:
        lines: list[str] = []
        for node in n._body(node_or_nodes):
            self._emit(node, 0, lines)
        return "\n".join(lines) + "\n"

    # -- dispatch ------------------------------------------------------------------

    def _emit(self, node, depth: int, out: list[str]) -> None:
        meth = getattr(self, f"print_{type(node).__name__}", None)
        if meth is None:
            raise TypeError(f"no printer for node {type(node).__name__}")
        meth(node, depth, out)

    def _line(self, depth: int, text: str, out: list[str]) -> None:
        out.append(f"{INDENT * depth}{text}" if text else "")

    def _children(self, body, depth: int, out: list[str]) -> None:
        for child in body:
            self._emit(child, depth, out)

    def _braced(self, head: str, body, depth: int, out: list[str], tail: str = "") -> None:
        self._line(depth, f"{head} {{" if head else "{", out)
        self._children(body, depth + 1, out)
        self._line(depth, "}" + tail, out)

    # -- nodes ---------------------------------------------------------------------

    def print_Raw(self, node: n.Raw, depth, out):
        for line in node.text.splitlines():
            self._line(depth, line.rstrip(), out)

    def print_Stmt(self, node: n.Stmt, depth, out):
        text = node.text.rstrip().rstrip(";") + ";"
        self._line(depth, f"{text}  // {node.comment}" if node.comment else text, out)

    def print_Comment(self, node: n.Comment, depth, out):
        for line in node.text.splitlines() or [""]:
            self._line(depth, f"// {line}".rstrip(), out)

    def print_Blank(self, node, depth, out):
        out.append("")

    def print_Block(self, node: n.Block, depth, out):
        self._braced(node.head, node.body, depth, out, node.tail)

    def print_Namespace(self, node: n.Namespace, depth, out):
        self._line(depth, f"namespace {node.name} {{", out)
        out.append("")
        self._children(node.body, depth, out)
        out.append("")
        self._line(depth, f"}} // namespace {node.name}", out)

    def print_Function(self, node: n.Function, depth, out):
        if node.doc:
            self.print_Comment(n.Comment(node.doc), depth, out)
        sig = node.signature
        if isinstance(sig, Signature):
            template, head = sig.template_line(), sig.head()
        else:
            template, head = node.template, sig
        if template:
            self._line(depth, template, out)
        self._braced(head, node.body, depth, out)

    def print_Call(self, node: Call, depth, out):
        text = node.expr() + ";"
        self._line(depth, f"{text}  // {node.comment}" if node.comment else text, out)

    def print_Launch(self, node: Launch, depth, out):
        self._line(depth, node.text() + ";", out)

    def print_For(self, node: n.For, depth, out):
        self._braced(f"for ({node.init}; {node.cond}; {node.step})", node.body, depth, out)

    def print_BlockStrideLoop(self, node: n.BlockStrideLoop, depth, out):
        v = node.var
        start = "" if node.start in (0, "0") else f"{node.start} + "
        if node.per_warp:
            head = (f"for (int {v} = {start}GRID_TID / 32; {v} < {node.count}; "
                    f"{v} += (GRID_BLOCK_THREADS + 31) / 32)")
            self._braced(head, [n.If("GRID_TID % 32 == 0", node.body)], depth, out)
            return
        head = (
            f"for (int {v} = {start}GRID_TID; {v} < {node.count}; {v} += GRID_BLOCK_THREADS)"
        )
        self._braced(head, node.body, depth, out)

    def print_If(self, node: n.If, depth, out):
        kw = "if constexpr" if node.constexpr else "if"
        self._line(depth, f"{kw} ({node.cond}) {{", out)
        self._children(node.body, depth + 1, out)
        if node.orelse:
            self._line(depth, "} else {", out)
            self._children(node.orelse, depth + 1, out)
        self._line(depth, "}", out)

    def print_Sync(self, node, depth, out):
        self._line(depth, "__syncthreads();", out)

    def print_ConstArray(self, node: n.ConstArray, depth, out):
        if node.comment:
            self.print_Comment(n.Comment(node.comment), depth, out)
        vals = [format_value(v, node.ctype) for v in node.values]
        head = f"{node.qualifiers} {node.ctype} {node.name}[{max(len(vals), 1)}] = {{"
        if not vals:
            self._line(depth, head + "0};", out)
            return
        if len(vals) <= node.per_line:
            self._line(depth, head + ", ".join(vals) + "};", out)
            return
        self._line(depth, head, out)
        for i in range(0, len(vals), node.per_line):
            chunk = ", ".join(vals[i : i + node.per_line])
            sep = "," if i + node.per_line < len(vals) else ""
            self._line(depth + 1, chunk + sep, out)
        self._line(depth, "};", out)

    def print_Struct(self, node: n.Struct, depth, out):
        if node.template:
            self._line(depth, node.template, out)
        self._braced(f"struct {node.name}", node.body, depth, out, tail=";")


def render(nodes) -> str:
    return CudaPrinter().render(nodes)
