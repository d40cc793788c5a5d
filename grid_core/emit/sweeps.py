"""Shared sweep drivers: the schedules of tree recursions, for every algorithm.

An algorithm supplies its per-body (or per-item) steps as functions writing straight-line
code into a :class:`~grid_core.emit.expr.Scope`; these drivers schedule them:

* :func:`forward` (root to leaves) and :func:`backward_gather` (leaves to root, each parent
  gathering its children: no atomics, a fixed order), block-cooperative, by levels (P1: the
  bodies of a level in parallel, one warp each, one barrier per level) or by bodies (one
  body per step: the A/B alternative, and what a chain reduces to);
* :func:`fan_out`: independent items (dofs, columns, pairs) one thread each;
* :func:`fan_out_runs`: runs of independent items, each run one code path over a run-time
  index (the columns of one body, say, a :func:`span` of them), the runs side by side in one
  loop; :func:`phases`: such loops one after another, a barrier between;
* :func:`depth_first`: the per-state layout's register schedule (each body's transform data
  loaded as it is reached), each subtree's backward step taken as soon as the subtree is
  complete, so only the current root path stays live; :func:`depth_first_sums` carries a sum
  per body up the tree that way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from ..model import Robot
from . import nodes as n
from .emitter import LayerOptions
from .expr import Scope, sum_terms
from .spatial_steps import xi_update
from .storage import plus

SWEEP_FORMS = ("levels", "bodies")

Step = Callable[..., None]
"""``step(scope, *args)`` appends one item's statements to ``scope``."""


def _one(step: Step, *args) -> list:
    scope = Scope("t")
    step(scope, *args)
    return scope.body()


def _switch(items: Sequence, step: Step, per_warp: bool, unpack: bool = False) -> list:
    cases = [n.Block(f"case {k}:", [*(_one(step, *item) if unpack else _one(step, item)), n.Stmt("break")])
             for k, item in enumerate(items)]
    return [n.BlockStrideLoop("k", len(items), [n.Block("switch (k)", cases)], per_warp=per_warp)]


def _check(form: str) -> None:
    if form not in SWEEP_FORMS:
        raise ValueError(f"sweep form must be one of {', '.join(SWEEP_FORMS)}, not '{form}'")


def groups(robot: Robot, form: str) -> list[list[int]]:
    """The bodies root to leaves in the groups a block-cooperative sweep of ``form`` runs together:
    the levels (P1), or one body at a time."""
    _check(form)
    if form == "bodies":
        return [[b] for b in range(robot.num_bodies)]
    return [list(level) for level in robot.topology.levels]


def forward(robot: Robot, step: Step, form: str, bodies: Sequence[int] | None = None) -> list:
    """``step(scope, body)`` for every body (``bodies``: these only, a set closed under parents such
    as the support of a frame; a level left empty takes no barrier), parents before children."""
    _check(form)
    keep = set(range(robot.num_bodies) if bodies is None else bodies)
    out: list = []
    if form == "bodies":
        for b in robot.bodies:
            if b.index in keep:
                out += [n.If("GRID_TID == 0", _one(step, b)), n.Sync()]
        return out
    for d, level in enumerate(robot.topology.levels):
        level = [b for b in level if b in keep]
        if not level:
            continue
        out += [n.Comment(f"level {d}: bodies {level}, one warp each"),
                *_switch([robot.bodies[b] for b in level], step, per_warp=True), n.Sync()]
    return out


def backward_gather(robot: Robot, step: Step, form: str) -> list:
    """``step(scope, parent, children)`` for every body with children, children first."""
    _check(form)
    topo = robot.topology
    out: list = []
    if form == "bodies":
        for b in reversed(robot.bodies):
            if b.parent >= 0:
                out += [n.If("GRID_TID == 0", _one(step, b.parent, [b.index])), n.Sync()]
        return out
    for d in reversed(range(topo.num_levels - 1)):
        parents = [p for p in topo.levels[d] if topo.children[p]]
        out += [n.Comment(f"level {d}: parents {parents}, one warp each"),
                *_switch([(p, topo.children[p]) for p in parents], step, per_warp=True, unpack=True), n.Sync()]
    return out


def fan_out(items: Sequence, step: Step, per_warp: bool = False) -> list:
    """``step(scope, *item)`` for every item, one thread (or warp) each, no barrier after."""
    return _switch(items, step, per_warp, unpack=True)


@attrs.frozen
class Run:
    """``count`` independent items sharing one code path, for :func:`fan_out_runs`:
    ``step(scope, k)`` writes item ``k``, a C++ ``int`` expression (the Python int 0 when
    ``count`` is 1, so a single item's index folds)."""

    count: int
    step: Step
    per_warp: bool = False
    """One warp per item (lane 0 runs it): for long items whose code differs from their
    neighbours' (a warp would otherwise run them one after another)."""
    comment: str = ""


def _place(runs: Sequence[Run]) -> tuple[list, int]:
    """``(run, first index, indices per item)`` of each non-empty run, and the index count:
    per-thread runs first, then the per-warp ones from a warp boundary, 32 indices an item."""
    placed, pos = [], 0
    for r in runs:
        if not r.per_warp and r.count > 0:
            placed.append((r, pos, 1))
            pos += r.count
    if any(r.per_warp and r.count > 0 for r in runs):
        pos = -(-pos // 32) * 32
    for r in runs:
        if r.per_warp and r.count > 0:
            placed.append((r, pos, 32))
            pos += 32 * r.count
    return placed, pos


def runs_width(runs: Sequence[Run]) -> int:
    """The threads :func:`fan_out_runs` gives work to, at most (its index count): a block-size hint."""
    return _place(runs)[1]


def fan_out_runs(runs: Sequence[Run], var: str = "k") -> list:
    """Runs of independent items in one block-stride loop, no barrier after.  A run's items take
    consecutive indices, so neighbouring threads run the same code (a warp diverges only where
    one run ends and the next begins); the items of ``per_warp`` runs take one warp each, after
    every per-thread run, from a warp boundary.  With as many threads as indices every item has
    a thread of its own; with fewer the loop wraps (any block size is correct)."""
    placed, total = _place(runs)
    body: list = []
    for r, start, stride in placed:
        end = start + stride * r.count
        if r.count == 1:
            cond, index = f"{var} == {start}", 0
        else:
            cond = f"{var} < {end}" if start == 0 else f"{var} >= {start} && {var} < {end}"
            offset = var if start == 0 else f"({var} - {start})"
            if stride == 1:
                index = var if start == 0 else f"{var} - {start}"
            else:
                cond += f" && {offset} % {stride} == 0"
                index = f"{offset} / {stride}"
        scope = Scope("t")
        if r.comment:
            scope.comment(r.comment)
        r.step(scope, index)
        body.append(n.If(cond, scope.body()))
    return [n.BlockStrideLoop(var, total, body)] if body else []


def span(first: int, end: int, step: Step, var: str = "j", comment: str = "") -> Run:
    """A :class:`Run` over the indices ``first <= var < end`` (a range of columns, say): each item
    binds ``const int var`` and ``step(scope, var)`` writes it."""

    def item(scope, k):
        scope.stmt(f"const int {var} = {plus(k, first)}")
        step(scope, var)

    return Run(end - first, item, comment=comment)


def ranges(count: int, keep: Callable[[int], bool]) -> list[tuple[int, int]]:
    """The maximal ranges ``[first, end)`` of the indices ``0 <= i < count`` that ``keep(i)``
    holds for (the structural zeros of an output, say: each a :func:`span`)."""
    out, first = [], None
    for i in range(count + 1):
        if i < count and keep(i):
            first = i if first is None else first
        elif first is not None:
            out.append((first, i))
            first = None
    return out


def phases(stages: Sequence[Sequence[Run]], comments: Sequence[str] = ()) -> list:
    """Each non-empty stage's runs in one :func:`fan_out_runs` loop (after its comment, if any),
    a barrier between consecutive stages, none after the last."""
    out: list = []
    for k, runs in enumerate(stages):
        if not runs:
            continue
        if out:
            out.append(n.Sync())
        if k < len(comments):
            out.append(n.Comment(comments[k]))
        out += fan_out_runs(runs)
    return out


def depth_first(robot: Robot, scope: Scope, io: dict, visit: Step | None, complete: Step) -> None:
    """The per-state schedule, in body order (a depth-first order): each body's transform data
    (its XI slots, from ``io``'s ``q`` into its ``xi``), then ``visit(scope, body)``;
    ``complete(scope, c)`` for each body ``c`` as soon as its whole subtree is visited,
    children before parents."""
    topo = robot.topology
    last = [max(topo.subtree[i]) for i in range(robot.num_bodies)]
    for b in robot.bodies:
        xi_update(scope, robot, b, io["q"], io["xi"])
        if visit is not None:
            visit(scope, b)
        c = b.index
        while c >= 0 and last[c] == b.index:
            complete(scope, c)
            c = topo.parent[c]


def depth_first_sums(robot: Robot, scope: Scope, io: dict, start: Callable, finish: Callable, name: str) -> None:
    """:func:`depth_first` carrying one sum per body in registers (a composite or articulated
    inertia, say): ``start(body)`` its first term; as soon as body ``c``'s subtree is complete,
    ``finish(scope, c, total)`` takes the sum (bound as ``name``) and returns what ``c`` adds to
    its parent's (None for a root)."""
    acc = {b.index: start(b) for b in robot.bodies}

    def complete(sc, c):
        part = finish(sc, c, sc.let_all(acc.pop(c), name))
        p = robot.topology.parent[c]
        if p >= 0:
            acc[p] = sc.let_all([sum_terms([(x,), (y,)]) for x, y in zip(acc[p], part)], "acc")

    depth_first(robot, scope, io, None, complete)


@attrs.frozen
class SweepOptions(LayerOptions):
    """The options of an algorithm with tree sweeps in its block layout."""

    p1: str = attrs.field(default="auto", validator=attrs.validators.in_(("auto", *SWEEP_FORMS)))
    """Sweep form: ``levels`` (P1), ``bodies``, or ``auto`` (the measured winner for the robot)."""


def form_of(ctx) -> str:
    """The sweep form of an emit context: the option, else the measured winner, else levels."""
    return ctx.knob("p1", "auto", "levels")[0]
