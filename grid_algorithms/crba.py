"""Joint-space inertia matrix by the composite rigid body algorithm (CRBA).

``M = crba(q)``: the ``nv x nv`` symmetric positive definite matrix of the
kinetic energy ``1/2 qd^T M(q) qd``, equal to ``d tau / d qdd`` of inverse
dynamics.  A mimic joint's body adds its terms to the mimicked joint's rows and
columns, scaled by the multiplier (Pinocchio's mimic model).
"""

from __future__ import annotations

import numpy as np

from grid_core import Algorithm, Port, hookimpl
from grid_core.arena import spill_ladder
from grid_core.derivatives import ZERO_GRAVITY, Rule
from grid_core.emit import nodes as n
from grid_core.emit import spatial_steps as ss
from grid_core.emit import sweeps
from grid_core.emit.emitter import Emitter
from grid_core.emit.expr import Scope, clean, sum_terms
from grid_core.emit.storage import Field, regions
from grid_core.model import Body, Robot
from grid_core.model.joints import body_q, effective_subspace, joint_transform
from grid_core.review import ParallelismReview, done


def crba(robot: Robot, q) -> np.ndarray:
    """CRBA (Featherstone, RBDA Table 6.2)."""
    NB = robot.num_bodies
    Xup, S, col, IC = [None] * NB, [None] * NB, [None] * NB, [None] * NB
    for i, body in enumerate(robot.bodies):
        Xup[i] = joint_transform(body, body_q(body, q)) @ body.Xtree
        S[i] = effective_subspace(body)  # mimic: multiplier applied, mimicked joint's columns
        col[i] = slice(body.v_index, body.v_index + S[i].shape[1])
        IC[i] = body.inertia.copy()
    for i in reversed(range(NB)):  # composite inertias, leaves to root
        p = robot.bodies[i].parent
        if p >= 0:
            IC[p] = IC[p] + Xup[i].T @ IC[i] @ Xup[i]
    H = np.zeros((robot.nv, robot.nv))
    for i in range(NB):
        fh = IC[i] @ S[i]
        H[col[i], col[i]] += S[i].T @ fh
        j = i
        while robot.bodies[j].parent >= 0:  # up the support of i
            fh = Xup[j].T @ fh
            j = robot.bodies[j].parent
            Hij = fh.T @ S[j]
            H[col[i], col[j]] += Hij
            H[col[j], col[i]] += Hij.T
    return H


# -- code generation -------------------------------------------------------------------
#
# Composite inertias in ten parameters (grid_core.emit.spatial_steps: m, h, Ibar), a leaf's
# a folded constant; then one column walk per body up its support.  The block layout runs
# the composite-inertia pass as a backward gather (P1: level by level) and the walks as a
# fan-out (P2); the per-state layout runs both depth-first in registers.


def _columns(body: Body) -> list[tuple[int, list[float]]]:
    """``(v index, motion column of S)`` of each of the body's columns, mimic multiplier applied."""
    S = effective_subspace(body)
    return [(body.v_index + k, [clean(x) for x in S[:, k]]) for k in range(S.shape[1])]


def _dot(col: list[float], f) -> object:
    return sum_terms([(c, x) for c, x in zip(col, f) if c != 0.0])


class CrbaSteps:
    """CRBA's steps.  ``arr``: ``xi`` and ``M`` (index -> expression), ``IC`` (an
    :class:`~grid_core.emit.storage.Array` by body) for stored composite inertias."""

    def __init__(self, robot: Robot, arr: dict):
        self.robot, self.arr = robot, arr

    def ic(self, b: int) -> list:
        """Body ``b``'s composite inertia: a leaf's is its own, a constant (never stored)."""
        if not self.robot.topology.children[b]:
            return ss.rbi_of(self.robot.bodies[b].inertia)
        return [self.arr["IC"](b, k) for k in range(10)]

    def gather(self, scope: Scope, parent: int, children) -> None:
        """``IC[parent] = I[parent] + sum_c X_c^T IC[c] X_c`` (or ``+=`` a later child's part)."""
        parts = []
        for c in children:
            scope.comment(f"IC[{parent}] += X^T IC[{c}] X ({self.robot.bodies[c].joint.name})")
            X = ss.Transform(self.robot, self.robot.bodies[c], self.arr["xi"], scope)
            parts.append(ss.inertia_to_parent(X, self.ic(c), scope))
        self.arr["IC"].accumulate(scope, parent, parts, ss.rbi_of(self.robot.bodies[parent].inertia))

    def walk(self, scope: Scope, body: Body, ic: list, write) -> None:
        """Body ``body``'s columns of M: ``F = IC S``, then ``F = X_j^T F`` up the support,
        ``M[i, j] = M[j, i] = S_j^T F`` at each ancestor ``j``; ``write(scope, row, col, value)``
        adds one term to one entry."""
        robot = self.robot
        for ci, col in _columns(body):
            scope.comment(f"column {ci} ({body.joint.name})")
            F = scope.let_all(ss.rbi_times_motion(ic, col), "F")
            for cj, colj in _columns(body):  # the body's own block, once
                if cj <= ci:
                    v = scope.let(_dot(colj, F), "M")
                    write(scope, ci, cj, v)
                    if cj != ci:
                        write(scope, cj, ci, v)
            j = body
            while j.parent >= 0:
                F = scope.let_all(ss.Transform(robot, j, self.arr["xi"], scope).force_T(F, scope), "F")
                j = robot.bodies[j.parent]
                for cj, colj in _columns(j):  # M_ij and M_ji (twice on the diagonal: a mimic's)
                    v = scope.let(_dot(colj, F), "M")
                    write(scope, ci, cj, v)
                    write(scope, cj, ci, v)


def _entries(robot: Robot, body: Body) -> set[tuple[int, int]]:
    """The M entries (both triangles) the walk of ``body`` writes."""
    out, cols = set(), [c for c, _ in _columns(body)]
    j = body
    while True:
        for cj, _ in _columns(j):
            for ci in cols:
                out |= {(ci, cj), (cj, ci)}
        if j.parent < 0:
            return out
        j = robot.bodies[j.parent]


def writer(M, nv: int, seen: set):
    """``write(scope, row, col, value)`` into ``M`` (index -> expression, row-major nv x nv): the
    first term of an entry assigns it, later ones add; ``seen`` records the entries written."""

    def write(scope, r, c, val):
        target = M(r * nv + c)
        scope.add_to(target, val) if (r, c) in seen else scope.assign(target, val)
        seen.add((r, c))

    return write


def column_items(robot: Robot) -> tuple[list[list[Body]], list[int], set]:
    """The block layout's work items: groups of bodies whose walks write disjoint entries of M
    (a body and its mimics share columns: one item), the rows holding entries no walk writes
    (the zeros between separate branches), proved disjoint here, at generation time, and the
    entries the walks write."""
    groups: list[tuple[set, list[Body]]] = []
    for b in robot.bodies:
        mine, members = _entries(robot, b), [b]
        for g in [g for g in groups if g[0] & mine]:
            groups.remove(g)
            mine, members = mine | g[0], g[1] + members
        groups.append((mine, members))
    written = set().union(*(g[0] for g in groups)) if groups else set()
    zero_rows = sorted({r for r in range(robot.nv) for c in range(robot.nv) if (r, c) not in written})
    items = sorted((sorted(g[1], key=lambda x: x.index) for g in groups), key=lambda m: m[0].index)
    return items, zero_rows, written


def _fields(robot: Robot) -> tuple[Field]:
    return (Field("IC", range(robot.num_bodies), 10, "composite inertia of every body (10 parameters)"),)


class CrbaEmitter(Emitter):
    Options = sweeps.SweepOptions
    staged = True
    stage_by_default = True  # nv^2 outputs per state

    def block_threads_hint(self, robot: Robot) -> int:
        return max(32 * robot.topology.max_level_width, 32 * len(column_items(robot)[0]), robot.nv)

    sweep_doc = "Composite-inertia sweep form"

    def fields(self, layers) -> tuple:
        return _fields(layers.robot)

    def inner_body(self, layers) -> list:
        robot = layers.robot
        nv = robot.nv
        io = layers.vectors()
        steps = CrbaSteps(robot, {"xi": io["xi"], **layers.arrays(self.fields(layers))})
        items, zero_rows, written = column_items(robot)

        def column(scope, kind, what):
            if kind == "zero":
                for c in range(nv):
                    if (what, c) not in written:
                        scope.assign(io["M"](what * nv + c), 0.0)
                return
            write = writer(io["M"], nv, set())  # an item is the only writer of its entries
            for b in what:
                steps.walk(scope, b, steps.ic(b.index), write)

        work = [("item", m) for m in items] + [("zero", r) for r in zero_rows]
        return [
            n.Comment("composite inertias, leaves to root: each parent gathers its children (no atomics)"),
            *sweeps.backward_gather(robot, steps.gather, sweeps.form_of(layers.ctx)),
            n.Comment(f"M: {len(items)} column walks up the support and {len(zero_rows)} rows of structural zeros,\n"
                      "one warp each (P2); their entries are disjoint (proved at generation time): no barrier"),
            *sweeps.fan_out(work, column, per_warp=True),
        ]

    def state_body(self, layers) -> list:
        robot = layers.robot
        nv = robot.nv
        io = layers.vectors(local=True)
        xi = io["xi"]
        steps = CrbaSteps(robot, {"xi": xi})
        scope = Scope("t")
        seen: set = set()
        write = writer(io["M"], nv, seen)

        def finish(sc, c, ic):
            # IC[c] is final once its subtree is: its columns of M, then its part of the parent's
            body = robot.bodies[c]
            steps.walk(sc, body, ic, write)
            if body.parent >= 0:
                return ss.inertia_to_parent(ss.Transform(robot, body, xi, sc), ic, sc)

        sweeps.depth_first_sums(robot, scope, io, lambda b: ss.rbi_of(b.inertia), finish, "IC")
        for r in range(nv):
            for c in range(nv):
                if (r, c) not in seen:
                    scope.assign(io["M"](r * nv + c), 0.0)
        return [layers.locals(), *scope.body()]


def _jacobians(kernels, x, params, wanted):
    """``dM/dq``, ``(B, nv, nv, nv)`` (``[i, j, k] = dM_ij/dq_k``): ``M(q) e_j = ID(q, 0, e_j)`` with
    gravity off, so column ``j`` is the inverse-dynamics gradient's ``dtau/dq`` at ``qd = 0``,
    ``qdd = e_j``, gravity off."""
    q, xp = x["q"], kernels.xp
    b, nv = q.shape[0], kernels.robot.nv
    zero = xp.const(np.zeros((b * nv, nv)), q)
    dq, _ = kernels("inverse_dynamics_gradient", xp.repeat(q, nv), zero, kernels.basis(b, (nv,), q), None,
                    gravity=ZERO_GRAVITY)
    return {"q": xp.einsum("bjik->bijk", dq.reshape(b, nv, nv, nv))}


class CRBA(Algorithm):
    name = "crba"
    summary = "joint-space inertia matrix M(q) by the composite rigid body algorithm"
    math = r"""
Composite inertias, leaves to root: :math:`I^c_i = I_i + \sum_{c \in \mathrm{children}(i)} X_c^T I^c_c X_c`.
Then for each body :math:`i` and each :math:`j` in its support (ancestors and itself), with
:math:`{}^jX_i` the transform from :math:`j`'s frame to :math:`i`'s:

.. math::

   M_{ij} = M_{ji}^T = S_i^T I^c_i \, {}^iX_j S_j .

A mimic body uses :math:`S_i` scaled by its multiplier and adds into the mimicked joint's
rows and columns (so :math:`M = G^T M_r G` for the relaxed inertia :math:`M_r`).
"""
    review = ParallelismReview(
        P1=done("block layout: the composite-inertia pass is a backward gather by levels, the parents "
                "of a level in parallel (one warp each, one barrier per level), each summing its "
                "children in a fixed order (no atomics); the per-body form (p1='bodies') stays for the "
                "A/B: the tuning picks per robot at the batch where the launcher uses the block layout "
                "(crba.tuning.json)"),
        P2=done("the columns of M are independent once the composite inertias are: one warp per column "
                "walk up the support (a body and its mimics share one), and one per row of structural "
                "zeros, their entries disjoint by construction, so no barrier between them"),
        P3=done("the configuration-dependent transform data is hoisted into one parallel pass over "
                "bodies (load_update_XImats) before the serial recursions"),
        P4=done("composite inertias in ten parameters (m, h, Ibar) instead of 36 entries, a leaf's "
                "folded as a constant; robot constants folded into the code; the zeros between "
                "separate branches are stored, never computed"),
        notes="per-state: the composite inertias and column walks depth-first in registers; staged warp by "
              "warp (a whole warp's shared indices from a per-lane offset table); the launch spread over every "
              "SM in whole warps. The measured figures (levels against bodies, plain against staged and ring, "
              "the memory floor): benchmarks/results/experiments/README.md",
    )
    emitter = CrbaEmitter
    derivatives = Rule(("q",), ("inverse_dynamics_gradient",), _jacobians)

    def inputs(self, robot: Robot):
        return (Port("q", (robot.nq,), "joint configuration"),)

    def outputs(self, robot: Robot, **options):
        return (Port("M", (robot.nv, robot.nv), "joint-space inertia matrix (symmetric)"),)

    def reference(self, ctx, q):
        return crba(ctx.robot, q)

    def arenas(self, robot: Robot, options=None):
        return regions(_fields(robot))

    def spill_rungs(self, robot: Robot, options=None):
        return spill_ladder(("composite inertias in global", {"IC"}, "the IC band goes to d_workspace"))


@hookimpl
def grid_register_algorithms():
    return [CRBA]
