"""Operational-space inertia: the inertia the chosen frames present to forces applied at them.

``Lambda = operational_space_inertia(q, frames=None, rows="all")``, shape ``(n_frames, k, k)``:
for each chosen frame ``Lambda = (J Minv J^T)^-1`` where ``Minv`` is the inverse joint-space
inertia (:mod:`grid_algorithms.minv`) and ``J`` the frame's Jacobian
(:mod:`grid_algorithms.end_effector_pose_gradient`: ``LOCAL_WORLD_ALIGNED``, rows ``[linear;
angular]``, at the frame origin) restricted to the chosen rows: ``rows="linear"`` its three
linear rows (``k = 3``: the translational inertia of the frame origin, a point mass model),
``rows="all"`` all six (``k = 6``: the spatial operational-space inertia, Khatib's
``Lambda``).  Frames as in :mod:`grid_algorithms.end_effector_pose`.

``J Minv J^T`` is symmetric positive semi-definite; it is invertible exactly when the chosen
rows of ``J`` are linearly independent: a frame supported by fewer than ``k`` joint motions (a
frame on the first link of a fixed-base arm with ``rows="all"``, any frame of a two-link arm
with ``rows="linear"``), or one at a singular configuration, has none.  Such a frame is an
:class:`~grid_core.errors.InputError` naming it: the test is the smallest eigenvalue of ``J Minv
J^T`` at most ``RANK_TOL = 1e-10`` times the larger of its largest eigenvalue and ``||Minv||_2``
(SI units).  Relative to the largest, it is a condition number above ``1e10``: there the inverse
has lost all but six of float64's sixteen digits, and a rank-deficient matrix reaches ``1e16``
and more.  Relative to ``||Minv||``, it refuses a frame whose chosen rows are all rounding noise
(a frame on the axes of all the joints that support it, ``iiwa_link_2``'s origin), whose noise
could look well conditioned.  Mimic joints: ``Minv`` and ``J`` are those of the constrained model.
"""

from __future__ import annotations

import numpy as np

from grid_core import Algorithm, Port, Reference, hookimpl
from grid_core.algorithm import frame_inputs
from grid_core.arena import callee_rung, spill_ladder
from grid_core.emit import dense, sweeps
from grid_core.emit import nodes as n
from grid_core.emit.emitter import Emitter
from grid_core.emit.expr import Scope, render, sum_terms
from grid_core.emit.storage import Array, regions, vector
from grid_core.errors import GridError, InputError
from grid_core.model import Robot
from grid_core.model.frames import resolve_frames
from grid_core.model.joints import support_columns
from grid_core.review import ParallelismReview, done, not_applicable

RANK_TOL = 1e-10
"""A frame's ``J Minv J^T`` whose smallest eigenvalue is at most this fraction of the larger of its
largest and ``||Minv||_2`` is rank-deficient (condition number 1e10 or more): an InputError naming
the frame."""

ROWS = {"linear": slice(0, 3), "all": slice(0, 6)}
"""The ``rows`` option: which rows of the ``[linear; angular]`` Jacobian enter."""


def chosen_rows(rows, algorithm: str) -> slice:
    if not isinstance(rows, str) or rows not in ROWS:
        raise InputError(f"{algorithm}: argument 'rows' must be one of {', '.join(map(repr, ROWS))}, got {rows!r}")
    return ROWS[rows]


def rank_if_refused(A, scale: float) -> int | None:
    """The numerical rank of a frame's ``J Minv J^T`` (symmetric) that has no inverse by the rule
    above (``scale``: ``||Minv||_2``); None where it has one."""
    eig = np.linalg.eigvalsh(A)
    floor = RANK_TOL * max(eig[-1], scale)
    return int(np.sum(eig > floor)) if eig[0] <= floor else None


def operational_space_inertias(robot: Robot, Minv, J, frames, rows: str, algorithm: str) -> np.ndarray:
    """``(n_frames, k, k)``: ``(J Minv J^T)^-1`` of each frame's Jacobian ``J`` (its chosen rows)."""
    out = []
    scale = np.linalg.norm(Minv, 2)
    for Jf, f in zip(J, frames):
        A = Jf @ Minv @ Jf.T
        A = 0.5 * (A + A.T)
        rank = rank_if_refused(A, scale)
        if rank is not None:
            raise InputError(
                f"{algorithm}: frame '{f.name}' of robot '{robot.name}' has no operational-space inertia over "
                f"rows={rows!r}: J Minv J^T has rank {rank} < {len(A)} (eigenvalues under {RANK_TOL:.0e} of the "
                f"largest or of ||Minv||: the frame is supported by too few independent joint motions here); "
                f"choose another frame" + (" or rows='linear'" if rows == "all" else "")
            )
        out.append(np.linalg.inv(A))
    k = J.shape[1]
    return np.stack([0.5 * (L + L.T) for L in out]) if out else np.zeros((0, k, k))


# -- code generation -------------------------------------------------------------------
#
# On one XImats load, composed: Minv by minv's inner (its per-state function in that layout), the
# frame Jacobians by end_effector_pose_gradient's steps (by handle: end_effector_pose's sweep, then
# each (frame, support column) pair's column, its chosen rows stored).  Then, over each frame's
# support columns only (baked tables, P4): MJ = Minv J^T a row per pair, A = J MJ (the upper triangle
# of the k x k J Minv J^T) a cell per thread, and each frame's Lambda = A^-1 by a Cholesky
# factorisation (grid_core.emit.dense, in one helper both layouts call).
#
# A frame without an inverse is marked NaN (Emitter.refusals_as_nan: the backends then raise the
# reference's InputError naming it).  Two kinds:
# * refused everywhere (its chosen rows of J have rank < k at every configuration: too few joints, or
#   a frame on the axes of its joints, hyq's lower legs): found at generation time, where the
#   reference refuses it at each of STRUCTURE_SAMPLES seeded random configurations; nothing is
#   computed for it, its Lambda is NaN (float32's rounding, ~1e-7 of J Minv J^T, would hide such a
#   rank deficiency from any test at run time);
# * refused at this configuration (a singular pose): the helper's test, the reference's rule on bounds:
#   lambda_min(A) = 1 / lambda_max(Lambda) from above, lambda_max(A) and ||Minv||_2 from below
#   (Rayleigh quotients after POWER_STEPS power steps from the ones vector; ||Minv||_F^2 / tr(Minv)),
#   so only what the reference refuses is refused, and all of it but for a band of at most the bounds'
#   slack under the threshold (a factor 1.6 measured); or where a pivot is not positive (NaN).
#   Branch-free (the CPU build runs the per-state code on vector lanes): max(a, b) is
#   (a + b + sqrt((a - b)^2)) / 2, and 0 * sqrt(margin) is NaN exactly where the margin is negative.
#   In float32 the test resolves no smallest eigenvalue under its rounding (~1e-7 of J Minv J^T): a
#   configuration nearer a singular pose gives the inverse of float32's J Minv J^T (backward stable),
#   and a state float32 refuses where the float64 reference does not is an InputError saying so.

POWER_STEPS = 4
"""Power steps before the Rayleigh quotients that bound lambda_max of Lambda and of A from below in the
run-time test (measured on 20000 random states of iiwa14, ur5, panda and atlas: the refusals the
reference makes and the generated code does not lie within a factor 1.6 of the threshold)."""
STRUCTURE_SAMPLES = 3
"""Seeded random configurations at which the reference must refuse a frame for the generated code to
take it as refused everywhere."""
_REFUSED: dict = {}


def refused_everywhere(robot: Robot, frames, rows: str) -> tuple[bool, ...]:
    """Which of ``frames`` the reference refuses over ``rows`` at each of :data:`STRUCTURE_SAMPLES`
    seeded random configurations (none on a robot whose mass matrix is singular: every call is
    refused before)."""
    key = (robot.digest, tuple(robot.frames.index(f) for f in frames), rows)
    if key not in _REFUSED:
        out = [True] * len(frames)
        ref, rng, sel = Reference(robot), np.random.default_rng(38), chosen_rows(rows, OperationalSpaceInertia.name)
        try:
            for _ in range(STRUCTURE_SAMPLES):
                q = robot.random_configuration(rng)
                Minv, J = ref.minv(q), ref.end_effector_pose_gradient(q, list(frames))[:, sel]
                scale = np.linalg.norm(Minv, 2)
                for k, Jf in enumerate(J):
                    A = Jf @ Minv @ Jf.T
                    out[k] = out[k] and rank_if_refused(0.5 * (A + A.T), scale) is not None
        except GridError:
            out = [False] * len(frames)
        _REFUSED[key] = tuple(out)
    return _REFUSED[key]


class Products:
    """The bookkeeping of the products, baked at generation time: the frames computed (those not
    :func:`refused_everywhere`), their ``(frame, support column)`` pairs in order (the rows of the
    ``jac`` and ``MJ`` fields), the cells ``(r, s)``, ``r <= s``, of a frame's ``A``."""

    def __init__(self, robot: Robot, frames, rows: str):
        self.robot, self.frames, self.rows = robot, tuple(frames), rows
        self.k = chosen_rows(rows, OperationalSpaceInertia.name).stop
        self.refused = refused_everywhere(robot, frames, rows)
        self.computed = [f for f in range(len(frames)) if not self.refused[f]]
        support = [sorted(support_columns(robot, frames[f].body)) for f in self.computed]
        self.pairs = [(i, f, c) for i, f in enumerate(self.computed) for c in support[i]]
        self.first = [0]
        for cols in support:
            self.first.append(self.first[-1] + len(cols))
        self.cells = [(r, s) for r in range(self.k) for s in range(r, self.k)]

    def fields(self) -> tuple:
        nv, k, P = self.robot.nv, self.k, len(self.pairs)
        return (vector("Minv", nv * nv, "the inverse joint-space inertia matrix (the composed minv's)", cols=nv),
                vector("jac", P * k, "the chosen rows of the Jacobian columns, a row per (frame, support column)",
                       cols=k),
                vector("MJ", P * k, "Minv J^T over each frame's support, a row per (frame, support column)", cols=k),
                vector("A", len(self.computed) * len(self.cells), "J Minv J^T of each frame computed, its upper "
                       "triangle row by row", cols=len(self.cells)))


def rayleigh(scope: Scope, M, steps: int, hint: str):
    """``lambda_max`` of the symmetric positive semi-definite ``M`` (k x k expressions) from below:
    the Rayleigh quotient after ``steps`` normalised power steps from the ones vector."""
    k = len(M)
    x = [1.0] * k
    for _ in range(steps):
        y = scope.let_all([sum_terms([(M[i][j], x[j]) for j in range(k)]) for i in range(k)], f"{hint}y")
        norm = scope.let(f"T(1) / grid_sqrt<T>({render(sum_terms([(v, v) for v in y]))})", f"{hint}n")
        x = scope.let_all([sum_terms([(v, norm)]) for v in y], f"{hint}x")
    return scope.let(sum_terms([(x[i], M[i][j], x[j]) for i in range(k) for j in range(k)]), hint)


def invert_helper(name: str, k: int) -> n.Function:
    """``NAME_invert<T>(A, Lambda, minv_norm)``: ``Lambda = A^-1`` (``A``: the upper triangle row by
    row, ``Lambda``: k x k row-major) by Cholesky, NaN where the frame is refused (see above;
    ``minv_norm``: ``||Minv||_F^2 / tr(Minv)``, a lower bound of ``||Minv||_2``)."""
    cells = [(r, s) for r in range(k) for s in range(r, k)]
    A, L = Array(vector("A", len(cells)), "A"), Array(vector("Lambda", k * k, cols=k), "Lambda")
    K = [[A.at(cells.index((min(r, s), max(r, s)))) for s in range(k)] for r in range(k)]
    scope = Scope("t")
    inv = dense.spd_inverse(scope, K)
    scope.comment(f"refused (NaN) where lambda_min(A) <= RANK_TOL max(lambda_max(A), ||Minv||_2), RANK_TOL = "
                  f"{RANK_TOL:g}, or where\na pivot was not positive (its NaN has spread here).  lambda_min(A) = "
                  "1 / lambda_max(Lambda), lambda_max(A)\nand ||Minv||_2 from below (Rayleigh quotients after "
                  f"{POWER_STEPS} power steps, minv_norm): only a frame the reference\nrefuses can be, and it is "
                  "unless within the bounds' slack of its threshold")
    big = rayleigh(scope, inv, POWER_STEPS, "lmax")  # lambda_max(Lambda)
    top = rayleigh(scope, K, POWER_STEPS, "amax")  # lambda_max(A)
    gap = scope.let(sum_terms([(top,), (-1.0, "minv_norm")]), "gap")
    scale = scope.let(f"T(0.5) * ({render(top)} + minv_norm + grid_sqrt<T>({gap} * {gap}))", "scale")  # the larger
    margin = scope.let(sum_terms([(-RANK_TOL, big, scale)], 1.0), "margin")
    scope.comment("0 * sqrt(margin): NaN where the margin is negative, 0 elsewhere (branch-free: the CPU build runs "
                  "this on\nvector lanes)")
    refused = scope.let(f"T(0) * grid_sqrt<T>({margin})", "refused")
    for r in range(k):
        for s in range(k):
            scope.assign(L.at(r, s), sum_terms([(inv[r][s],), (refused,)]))
    return n.Function(f"__device__ __forceinline__ void {name}_invert(const T *A, T *Lambda, const T minv_norm)",
                      scope.body(), template="template <typename T>",
                      doc=f"Lambda = A^-1 of one frame's {k} x {k} J Minv J^T (A: its upper triangle row by row), by "
                          "Cholesky;\nNaN where the frame has no operational-space inertia (refused).")


class OperationalSpaceInertiaEmitter(Emitter):
    Options = sweeps.SweepOptions
    composes = ("minv", "end_effector_pose_gradient")
    refusals_as_nan = True

    def block_threads_hint(self, robot: Robot) -> int:
        return max(32 * robot.topology.max_level_width, robot.nv)  # the sweep's warps, then the pairs (P2)

    def inner_doc(self, layers) -> str:
        p = self._products(layers)
        refused = [f.name for f, no in zip(p.frames, p.refused) if no]
        head = f"Refused everywhere (NaN): {', '.join(refused)}.\n" if refused else ""
        return head + f"Rows: {p.rows} (k = {p.k})."  # then Layers' sweep-form line

    def _products(self, layers) -> Products:
        return Products(layers.robot, layers.ctx.frames, layers.ctx.values["rows"])

    def fields(self, layers) -> tuple:
        return self._products(layers).fields()

    def helpers(self, layers) -> list:
        p, pfx = self._products(layers), layers.pfx
        if not p.computed:
            return []

        def table(name, values, comment=""):
            return n.ConstArray("int", f"{pfx}_{name}", values, qualifiers="static __device__ const", comment=comment)

        return [table("FRAME", p.computed, "the output frame of each frame computed (the others: refused everywhere)"),
                table("FIRST", p.first, "frame f's (frame, support column) pairs: FIRST[f] .. FIRST[f + 1] (P4)"),
                table("PAIR_FRAME", [i for i, _, _ in p.pairs], "the frame (computed) of each pair"),
                table("PAIR_COLUMN", [c for _, _, c in p.pairs], "the v column of each pair"),
                table("CELL_ROW", [r for r, _ in p.cells], "the row r and the column s >= r of each cell of the upper "
                      "triangle"),
                table("CELL_COL", [s for _, s in p.cells]),
                invert_helper(layers.name, p.k)]

    def _parts(self, layers, local: bool):
        p = self._products(layers)
        jac = layers.steps("end_effector_pose_gradient", local=local)
        arr = layers.arrays(p.fields(), local)
        out = layers.arrays([vector("Lambda", len(p.frames) * p.k * p.k, cols=p.k * p.k)], local)["Lambda"]
        return p, jac, arr, out

    @staticmethod
    def _rows(scope: Scope, p: Products, jac, arr, t: int, f: int, c: int) -> None:
        """The chosen rows of frame ``f``'s Jacobian column ``c`` (pair ``t``), stored."""
        rows = jac.column_rows(scope, f, c, jac.origin(scope, f))
        for r in range(p.k):
            scope.assign(arr["jac"].at(t, r), rows[r])

    def _products_loops(self, layers, p: Products, arr, out, loop) -> list:
        """The products and the inverses, each a loop (``loop(var, count, body)``: block-stride or
        plain) over its items, a barrier between (the block-stride loops'; none in the plain)."""
        pfx, k, nv = layers.pfx, p.k, layers.robot.nv
        jac, MJ, A, Minv = arr["jac"], arr["MJ"], arr["A"], arr["Minv"]
        ys = [f"y{r}" for r in range(k)]
        mj = [
            n.Stmt(f"const int c = {pfx}_PAIR_COLUMN[t], f = {pfx}_PAIR_FRAME[t]"),
            n.Stmt(f"T {', '.join(f'{y} = T(0)' for y in ys)}"),
            n.For(f"int u = {pfx}_FIRST[f]", f"u < {pfx}_FIRST[f + 1]", "++u", [
                n.Stmt(f"const T m = {Minv.at('c', f'{pfx}_PAIR_COLUMN[u]')}"),
                *[n.Stmt(f"{y} += m * {jac.at('u', r)}") for r, y in enumerate(ys)]]),
            *[n.Stmt(f"{MJ.at('t', r)} = {y}") for r, y in enumerate(ys)]]
        nc = len(p.cells)
        cell = [
            n.Stmt(f"const int f = i / {nc}, e = i % {nc}"),
            n.Stmt(f"const int r = {pfx}_CELL_ROW[e], s = {pfx}_CELL_COL[e]"),
            n.Stmt("T a = T(0)"),
            n.For(f"int u = {pfx}_FIRST[f]", f"u < {pfx}_FIRST[f + 1]", "++u", [
                n.Stmt(f"a += {jac.at('u', 'r')} * {MJ.at('u', 's')}")]),
            n.Stmt(f"{A.at('f', 'e')} = a")]
        frame = [
            n.Stmt("T trace = T(0), squares = T(0)", comment="||Minv||_2 >= ||Minv||_F^2 / tr(Minv)"),
            n.For("int i = 0", f"i < {nv}", "++i", [
                n.Stmt(f"trace += {Minv.at('i', 'i')}"),
                n.For("int j = 0", f"j < {nv}", "++j", [
                    n.Stmt(f"squares += {Minv.at('i', 'j')} * {Minv.at('i', 'j')}")])]),
            n.Stmt(f"{layers.name}_invert<T>(&{A.at('f', 0)}, &{out.at(f'{pfx}_FRAME[f]', 0)}, squares / trace)")]
        return [n.Comment(f"MJ = Minv J^T over each frame's support columns, a row (k = {k}) per (frame, column) pair "
                          "(P2, P4)"),
                *loop("t", len(p.pairs), mj),
                n.Comment("A = J MJ, the upper triangle of each frame's J Minv J^T, a cell per thread (P2)"),
                *loop("i", len(p.computed) * nc, cell),
                n.Comment("each frame's Lambda = A^-1, by Cholesky; NaN where refused"),
                *loop("f", len(p.computed), frame, last=True)]

    @staticmethod
    def _refused_runs(p: Products, out: Array) -> list:
        """The frames refused everywhere: their Lambda entries NaN, a run each."""
        kk = p.k * p.k
        return [sweeps.span(f * kk, (f + 1) * kk, lambda scope, j: scope.assign(out.at(j), "T(NAN)"),
                            comment=f"frame {f} ({p.frames[f].name}): refused everywhere")
                for f in range(len(p.frames)) if p.refused[f]]

    def inner_body(self, layers) -> list:
        p, jac, arr, out = self._parts(layers, False)
        nan = sweeps.fan_out_runs(self._refused_runs(p, out))
        if not p.computed:
            return [n.Comment("every frame is refused everywhere: NaN"), *nan]

        def loop(var, count, body, last=False):
            return [n.BlockStrideLoop(var, count, body), *([] if last else [n.Sync()])]

        return [
            n.Comment("Minv, the composed minv's inner, on the XImats the device layer loaded; no barrier after it:\n"
                      "the pose's sweep reads XImats alone and writes none of what minv reads or writes"),
            layers.call_inner(layers.compose("minv"), s_Minv=arr["Minv"].base, s_q="s_q"),
            n.Comment("end_effector_pose's sweep (by handle): the world frames of the bodies supporting a frame"),
            *jac.pose.block_sweep(sweeps.form_of(layers.ctx)),
            n.Comment(f"the chosen rows of the {len(p.pairs)} (frame, column) pairs' Jacobian columns, one thread "
                      "each (P2)"),
            *sweeps.fan_out([(t, f, c) for t, (_, f, c) in enumerate(p.pairs)],
                            lambda sc, t, f, c: self._rows(sc, p, jac, arr, t, f, c)),
            *nan,
            n.Sync(),
            *self._products_loops(layers, p, arr, out, loop),
        ]

    def state_body(self, layers) -> list:
        p, jac, arr, out = self._parts(layers, True)
        io = layers.vectors(local=True)
        nan = [n.For(f"int j = {a}", f"j < {b}", "++j", [n.Stmt(f"{out.at('j')} = T(NAN)")])
               for f in range(len(p.frames)) if p.refused[f] for a, b in [(f * p.k * p.k, (f + 1) * p.k * p.k)]]
        if not p.computed:
            return [n.Comment("every frame is refused everywhere: NaN"), *nan]
        scope = Scope("t")
        jac.pose.state_sweep(scope, io["q"])
        for t, (_, f, c) in enumerate(p.pairs):
            self._rows(scope, p, jac, arr, t, f, c)

        def loop(var, count, body, last=False):
            return [n.For(f"int {var} = 0", f"{var} < {count}", f"++{var}", body)]

        return [
            layers.locals([*arr.values(), jac.pose.arr], "local: the products index them in loops"),
            layers.call_state(layers.compose("minv"), Minv=arr["Minv"].base, q="q"),
            *scope.body(),
            *([n.Comment("the frames refused everywhere: NaN"), *nan] if nan else []),
            *self._products_loops(layers, p, arr, out, loop),
        ]


class OperationalSpaceInertia(Algorithm):
    name = "operational_space_inertia"
    summary = ("operational-space inertia (J Minv J^T)^-1 of chosen frames, (n_frames, k, k), "
               "rows 'linear' (k = 3) or 'all' (k = 6)")
    math = r"""
With :math:`J_f` the frame's Jacobian (``LOCAL_WORLD_ALIGNED``, :math:`[\text{linear};
\text{angular}]`) restricted to the chosen rows and :math:`M^{-1}` the inverse joint-space inertia:

.. math::

   \Lambda_f = \left(J_f\, M^{-1} J_f^T\right)^{-1},

defined when the smallest eigenvalue of :math:`J_f M^{-1} J_f^T` exceeds
:math:`10^{-10} \max(\lambda_{\max}, \lVert M^{-1} \rVert_2)` (condition number below
:math:`10^{10}`, rows not all rounding noise); otherwise an ``InputError`` names the frame.
"""
    depends_on = ("minv", "end_effector_pose_gradient")
    emitter = OperationalSpaceInertiaEmitter
    review = ParallelismReview(
        P1=not_applicable("no tree recursion of its own: Minv and the Jacobians come from minv's inner and "
                          "end_effector_pose's sweep (see their reviews: both level by level)"),
        P2=done("every (frame, support column) pair's Jacobian rows, and its row of Minv J^T, is one thread; "
                "every cell of the upper triangle of each frame's J Minv J^T one thread; each frame's k x k "
                "inverse one thread"),
        P3=done("Minv and the pose's sweep run back to back on the one XImats load, no barrier between; Minv J^T "
                "is formed once per pair and shared by the frame's k (k + 1) / 2 cells; the inverse is one "
                "Cholesky helper (straight-line, k = 3 or 6) both layouts call"),
        P4=done("each frame's support columns are baked tables: Minv J^T and J Minv J^T sum over them alone; "
                "only the chosen rows of J are stored, only the upper triangle of J Minv J^T; frames refused at "
                "every configuration (found at generation time) are NaN, nothing computed for them"),
        notes="an orchestrator on one XImats load (minv's inner, end_effector_pose_gradient's steps by handle); "
              "per-state: minv's per-state function, the Jacobian rows straight-line, the products as loops over "
              "the tables.  The generated code takes the frames and the rows it was generated for "
              "(grid build --frame; the algorithm option rows).  A refused frame comes out of the generated code "
              "as NaN, from which the backends raise the reference's InputError: the frames refused at every "
              "configuration exactly, those at a singular pose by the run-time test (in float64 all the reference "
              "refuses but within a factor 1.6 of its threshold; float32 resolves no eigenvalue under its rounding)",
    )

    def inputs(self, robot: Robot):
        return (*frame_inputs(robot),
                Port("rows", (), "'linear' (the 3 linear rows) or 'all' (the 6)", kind="option", default="all"))

    def outputs(self, robot: Robot, frames=None, rows="all", **options):
        n = len(resolve_frames(robot, frames, self.name))
        k = chosen_rows(rows, self.name).stop
        return (Port("Lambda", (n, k, k), "operational-space inertia of each chosen frame"),)

    def reference(self, ctx, q, frames=None, rows="all"):
        chosen = resolve_frames(ctx.robot, frames, self.name)
        sel = chosen_rows(rows, self.name)
        J = ctx.end_effector_pose_gradient(q, chosen)[:, sel]
        return operational_space_inertias(ctx.robot, ctx.minv(q), J, chosen, rows, self.name)

    def arenas(self, robot: Robot, options=None, frames=None, rows="all"):
        return regions(Products(robot, resolve_frames(robot, frames, self.name), rows).fields())

    def spill_rungs(self, robot: Robot, options=None):
        return spill_ladder(("the callees' first spill",
                             {callee_rung("minv", 1), callee_rung("end_effector_pose_gradient", 1)},
                             "what the composed minv's and the Jacobians' rung 1 spill"))


@hookimpl
def grid_register_algorithms():
    return [OperationalSpaceInertia]
