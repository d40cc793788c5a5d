"""End-effector pose Hessian: the tangent derivative of the frame Jacobians.

``H = end_effector_pose_hessian(q, frames=None)``, shape ``(n_frames, 6, nv, nv)``,
``H[f, r, j, k] = d J[f, r, j] / d q_k`` where ``J`` is :mod:`grid_algorithms.end_effector_pose_gradient`'s
Jacobian (``LOCAL_WORLD_ALIGNED``, rows ``[linear; angular]``) and the derivative is taken
along ``q (+) dq`` (tangent space, as every ``q`` derivative here); frames as in
:mod:`grid_algorithms.end_effector_pose`.

With every motion subspace column ``c`` in the world frame as a spatial vector at the
world origin, ``s_c = [w_c; n_c]`` (``w_c`` the world axis, ``n_c = u_c + p_c x w_c`` the
velocity of the point at the world origin, ``u_c`` that of the body origin ``p_c``), the
Jacobian column at the frame origin ``p_f`` is ``[n_c + w_c x p_f; w_c]``.  A column moves
only with the joints ``d`` above it (``d <= c``: ancestor or same body, the free-flyer's
six columns among themselves included): ``d s_c / d q_d = s_d x s_c``; the frame origin
moves with every supporting column, ``d p_f / d q_d = n_d + w_d x p_f``.  Hence

    H[f, :3, c, d] = [d <= c] (w_d x n_c + n_d x w_c + (w_d x w_c) x p_f) + w_c x (n_d + w_d x p_f),
    H[f, 3:, c, d] = [d <= c] (w_d x w_c),

zero unless both ``c`` and ``d`` support the frame.  Not symmetric in ``(c, d)``: the
linear rows are tangent derivatives of the frame origin, symmetric up to the free-flyer's
Lie bracket (``H[:3, j, k] - H[:3, k, j] = J[:3] [e_k, e_j]``); the angular rows are not
derivatives of a function, and ``H[3:, j, k] - H[3:, k, j] = J[3:] [e_k, e_j] - w_j x w_k``.
Mimic joints: computed on the relaxed columns and contracted with ``G`` (``v_r = G v``) on
both column indices.
"""

from __future__ import annotations

import numpy as np

from grid_core import Algorithm, Port, hookimpl
from grid_core.algorithm import frame_inputs
from grid_core.arena import callee_rung, spill_ladder
from grid_core.emit import nodes as n
from grid_core.emit import sweeps
from grid_core.emit.emitter import Emitter
from grid_core.emit.expr import Scope, cross, sum_terms
from grid_core.emit.storage import Field, regions
from grid_core.model import Robot
from grid_core.model.frames import resolve_frames
from grid_core.model.joints import motion_subspace, support_columns
from grid_core.review import ParallelismReview, done

from ._mimic import relaxed_map

def frame_jacobian_hessians(robot: Robot, world_T_body, world_T_frame, frames) -> np.ndarray:
    """``(n_frames, 6, nv, nv)`` tangent derivatives of the LOCAL_WORLD_ALIGNED Jacobians."""
    rel, G, cols, colbody = relaxed_map(robot)
    w, n = np.zeros((rel.nv, 3)), np.zeros((rel.nv, 3))  # per relaxed column, world frame
    for b in robot.bodies:
        R, p = world_T_body[b.index, :3, :3], world_T_body[b.index, :3, 3]
        S = motion_subspace(b)  # [angular; linear], body frame, relaxed (no multiplier)
        w[cols[b.index]] = (R @ S[:3]).T
        n[cols[b.index]] = (R @ S[3:]).T + np.cross(p, (R @ S[:3]).T)
    depth = np.asarray(robot.topology.depth)
    p_f = world_T_frame[:, :3, 3]
    H = np.zeros((len(frames), 6, rel.nv, rel.nv))
    for fi, f in enumerate(frames):
        if f.body < 0:
            continue  # a world-fixed frame does not move
        C = np.concatenate([cols[b] for b in robot.topology.support[f.body]])
        wc, nc = w[C][:, None, :], n[C][:, None, :]  # column c on axis 0
        wd, nd = w[C][None, :, :], n[C][None, :, :]  # derivative column d on axis 1
        above = (depth[colbody[C]][None, :] <= depth[colbody[C]][:, None])[..., None]  # d <= c
        dp = nd + np.cross(wd, p_f[fi])  # d p_f / d q_d
        dw = np.cross(wd, wc)  # s_d x s_c, angular
        dn = np.cross(wd, nc) + np.cross(nd, wc)  # s_d x s_c, linear
        lin = np.where(above, dn + np.cross(dw, p_f[fi]), 0.0) + np.cross(wc, dp)
        ang = np.where(above, dw, 0.0)
        H[fi][np.ix_(range(3), C, C)] = np.moveaxis(lin, 2, 0)
        H[fi][np.ix_(range(3, 6), C, C)] = np.moveaxis(ang, 2, 0)
    if robot.has_mimic:
        H = np.einsum("frcd,cj,dk->frjk", H, G, G)
    return H


# -- code generation -------------------------------------------------------------------
#
# With J_c = n_c + w_c x p_f (the Jacobian's linear column at the frame origin) the Jacobi identity
# folds the reference's cell into one cross product:
#
#   H[:3, c, d] = w_d x J_c  if d <= c (ancestor or same body),  w_c x J_d  otherwise;
#   H[3:, c, d] = w_d x w_c  if d <= c,                          0          otherwise.
#
# Every term is bilinear in the two columns, so a mimic's column (the multiplier applied, summed
# into its mimicked joint's: effective_subspace) contracts with G on both indices as the reference
# does.  On end_effector_pose_gradient's steps by handle (which run end_effector_pose's): the
# supporting bodies' frames, then each (frame, term) pair's w and J column (stored), then every
# (frame, c, d) cell of the frames' supports, one thread each; the rest are structural zeros.


def terms(cols) -> list[list[tuple]]:
    """Per frame its terms ``(column, body, S column)``, in column order, from each frame's support
    column map (``cols``: v index -> the ``(body, S column)`` adding into it; a column takes several
    where a mimic adds into it)."""
    return [[(c, j, s) for c in sorted(by) for j, s in by[c]] for by in cols]


def fields(robot: Robot, frames) -> tuple[Field, ...]:
    """Each (frame, term) pair's world axis w and Jacobian column J (6 scalars)."""
    ts = terms([support_columns(robot, f.body) for f in frames])
    keys = [(k, t) for k, by in enumerate(ts) for t in range(len(by))]
    return (Field("frame_columns", keys, 6, "w and the Jacobian column of each (frame, column term) pair"),)


def zero_ranges(nv: int, support) -> list[tuple[int, int]]:
    """The ranges ``[first, end)`` of one frame's ``6 nv nv`` entries (row-major ``[r, c, d]``)
    outside ``support x support``."""
    return sweeps.ranges(6 * nv * nv, lambda i: not (i // nv % nv in support and i % nv in support))


class HessianSteps:
    """The Hessian's steps on the Jacobians' (``jac``) and its own ``frame_columns`` array."""

    def __init__(self, robot: Robot, jac, cols):
        self.robot, self.jac, self.arr = robot, jac, cols
        self.terms = terms(jac.cols)  # the Jacobians' support columns, constants cleaned
        self.depth = robot.topology.depth

    def column(self, scope: Scope, k: int, t: int, p_f) -> None:
        """Term ``t`` of frame ``k``: its w and J column, stored."""
        _, j, s = self.terms[k][t]
        w, lin = self.jac.term(scope, j, s, p_f)
        self.arr.put(scope, (k, t), [*w, *lin])

    def cells(self) -> list[tuple[int, int, int, list]]:
        """``(frame, c, d, term pairs)`` of every cell of the frames' supports."""
        out = []
        for k, ts in enumerate(self.terms):
            by: dict = {}
            for t, (c, _, _) in enumerate(ts):
                by.setdefault(c, []).append(t)
            out += [(k, c, d, [(tc, td) for tc in by[c] for td in by[d]]) for c in sorted(by) for d in sorted(by)]
        return out

    def cell(self, scope: Scope, k: int, c: int, d: int, pairs, H) -> None:
        nv, lin, ang = self.robot.nv, [], []
        for tc, td in pairs:
            (wc, Jc), (wd, Jd) = ((x[:3], x[3:]) for x in (self.arr.get((k, tc)), self.arr.get((k, td))))
            above = self.depth[self.terms[k][td][1]] <= self.depth[self.terms[k][tc][1]]  # d <= c
            lin.append(cross(wd, Jc) if above else cross(wc, Jd))
            if above:
                ang.append(cross(wd, wc))
        for r in range(6):
            part = lin if r < 3 else ang
            scope.assign(H(k, (r * nv + c) * nv + d), sum_terms([(x[r % 3],) for x in part]))


def hessian_field(robot: Robot, frames) -> Field:
    """The output, a row-major ``6 x nv x nv`` block per chosen frame."""
    return Field("H", range(len(frames)), 6 * robot.nv * robot.nv, "frame Jacobian Hessians")


class EndEffectorPoseHessianEmitter(Emitter):
    Options = sweeps.SweepOptions
    composes = ("end_effector_pose_gradient",)
    global_outputs = ("H",)  # 6 nf nv^2 values: written in place, never staged (g1's default frames: 235 KB)

    def block_threads_hint(self, robot: Robot) -> int:
        return max(32 * robot.topology.max_level_width, robot.nv * robot.nv)  # the cells (P2)

    def _parts(self, layers, local: bool):
        jac = layers.steps("end_effector_pose_gradient", local=local)
        cols = layers.arrays(fields(layers.robot, jac.pose.frames), local)["frame_columns"]
        H = layers.arrays([hessian_field(layers.robot, jac.pose.frames)], local)["H"]
        return HessianSteps(layers.robot, jac, cols), H

    def inner_body(self, layers) -> list:
        nv = layers.robot.nv
        steps, H = self._parts(layers, False)
        pose = steps.jac.pose
        items = [(k, t) for k, ts in enumerate(steps.terms) for t in range(len(ts))]
        cells = steps.cells()

        def zeros(k):
            return lambda scope, i: scope.assign(H(k, i), 0.0)

        runs = [sweeps.span(a, b, zeros(k), var="i") for k, by in enumerate(steps.jac.cols)
                for a, b in zero_ranges(nv, by)]
        return [
            n.Comment("end_effector_pose's sweep (by handle): the world frames of the bodies supporting a frame"),
            *pose.block_sweep(sweeps.form_of(layers.ctx)),
            n.Comment(f"each (frame, column term) pair's w and Jacobian column, one thread each ({len(items)})"),
            *sweeps.fan_out(items, lambda sc, k, t: steps.column(sc, k, t, steps.jac.origin(sc, k))),
            n.Sync(),
            n.Comment(f"the {len(cells)} cells of the frames' supports, one thread each (P2), and the structural zeros"),
            *sweeps.fan_out(cells, lambda sc, k, c, d, pairs: steps.cell(sc, k, c, d, pairs, H)),
            *sweeps.fan_out_runs(runs),
        ]

    def state_body(self, layers) -> list:
        robot, io = layers.robot, layers.vectors(local=True)
        steps, H = self._parts(layers, True)
        pose = steps.jac.pose
        scope = Scope("t")
        pose.state_sweep(scope, io["q"])
        for k, ts in enumerate(steps.terms):
            p_f = steps.jac.origin(scope, k)
            for t in range(len(ts)):
                steps.column(scope, k, t, p_f)
        for cell in steps.cells():
            steps.cell(scope, *cell, H)
        zero = []
        for k, by in enumerate(steps.jac.cols):  # the structural zeros, a loop per run
            for a, b in zero_ranges(robot.nv, by):
                zero.append(n.For(f"int i = {a}", f"i < {b}", "++i", [n.Stmt(f"{H(k, 'i')} = T(0)")]))
        return [layers.locals([pose.arr, steps.arr]),
                *scope.body(), n.Comment("the structural zeros: the entries outside each frame's support"), *zero]


class EndEffectorPoseHessian(Algorithm):
    name = "end_effector_pose_hessian"
    summary = ("tangent derivative of the frame Jacobians, (n_frames, 6, nv, nv): "
               "[f, r, j, k] = d J[f, r, j] / d q_k, LOCAL_WORLD_ALIGNED, [linear; angular]")
    math = r"""
With :math:`s_c = [\omega_c; \nu_c]` the world-frame column :math:`c` at the world origin and
:math:`p_f` the frame origin, :math:`J_c = [\nu_c + \omega_c \times p_f;\ \omega_c]`,
:math:`\partial s_c / \partial q_d = [d \preceq c]\; s_d \times s_c` and
:math:`\partial p_f / \partial q_d = \nu_d + \omega_d \times p_f`:

.. math::

   \frac{\partial J_c}{\partial q_d} = [d \preceq c]
     \begin{bmatrix} \omega_d \times \nu_c + \nu_d \times \omega_c
        + (\omega_d \times \omega_c) \times p_f \\ \omega_d \times \omega_c \end{bmatrix}
   + \begin{bmatrix} \omega_c \times (\nu_d + \omega_d \times p_f) \\ 0 \end{bmatrix} .
"""
    depends_on = ("forward_kinematics", "end_effector_pose", "end_effector_pose_gradient")
    emitter = EndEffectorPoseHessianEmitter
    review = ParallelismReview(
        P1=done("block layout: end_effector_pose's sweep by handle, the supporting bodies' world frames "
                "level by level, the bodies of a level in parallel (one barrier per level)"),
        P2=done("every (frame, c, d) cell of the frames' supports is one thread (one or two cross products "
                "of stored columns), no barrier between them; the structural zeros a fan-out of runs"),
        P3=done("the world columns w and J (the Jacobian's, at the frame origin) are computed once per "
                "(frame, column) in a parallel pass and stored, shared by every cell of the frame; the "
                "Jacobi identity folds the reference's cell into one cross product"),
        P4=done("each frame's support columns and the (c, d) chain mask are baked at generation time: "
                "only those cells are computed, the rest written as zeros (runs of them as loops in the "
                "per-state layout); frames, placements and axes folded"),
        notes="the generated code takes the frames it was generated for (grid build --frame)",
    )

    def inputs(self, robot: Robot):
        return frame_inputs(robot)

    def outputs(self, robot: Robot, frames=None, **options):
        n = len(resolve_frames(robot, frames, self.name))
        return (Port("H", (n, 6, robot.nv, robot.nv),
                     "[f, r, j, k] = d J[f, r, j] / d q_k (tangent space), LOCAL_WORLD_ALIGNED, "
                     "[linear; angular]"),)

    def reference(self, ctx, q, frames=None):
        chosen = resolve_frames(ctx.robot, frames, self.name)
        return frame_jacobian_hessians(ctx.robot, ctx.forward_kinematics(q), ctx.end_effector_pose(q, chosen), chosen)

    def arenas(self, robot: Robot, options=None, frames=None):
        return regions(fields(robot, resolve_frames(robot, frames, self.name)))

    def spill_rungs(self, robot: Robot, options=None):
        return spill_ladder(("the body frames in global", {callee_rung("end_effector_pose_gradient", 1)},
                             "what the Jacobians' rung 1 spills"),
                            ("the frame columns too", {callee_rung("end_effector_pose_gradient", 1), "frame_columns"}))


@hookimpl
def grid_register_algorithms():
    return [EndEffectorPoseHessian]
