"""Frame Jacobian time variation: ``dJ/dt`` of the frame Jacobians at ``(q, qd)``.

``dJ = frame_jacobian_time_variation(q, qd, frames=None)``, shape ``(n_frames, 6, nv)``,
the time derivative along the motion ``(q, qd)`` of :mod:`grid_algorithms.end_effector_pose_gradient`'s
Jacobian ``J`` (``LOCAL_WORLD_ALIGNED``, rows ``[linear; angular]``), frames as in
:mod:`grid_algorithms.end_effector_pose`.  Each ``dJ[k]`` is Pinocchio's
``computeJointJacobiansTimeVariation(model, data, q, v)`` then
``getFrameJacobianTimeVariation(model, data, frame_id, LOCAL_WORLD_ALIGNED)``; with it the
frame's classical acceleration is ``J qdd + dJ qd`` (origin acceleration; angular acceleration).

Derivation.  Write every motion subspace column ``c`` of body ``b`` in the world frame as a
spatial vector at the world origin, ``s_c = [w_c; n_c]`` (``w_c`` the world axis, ``n_c = u_c +
p_b x w_c`` the velocity of the point at the world origin, ``u_c`` that of the body origin
``p_b``).  The column is fixed in body ``b``, so it moves with the body's spatial velocity
``V_b = [w_b; n_b] = V_parent + sum_c s_c qd_c``: ``d s_c / dt = V_b x s_c``, i.e.

    d w_c / dt = w_b x w_c,    d n_c / dt = w_b x n_c + n_b x w_c

(a joint's own motion along its axis drops out: ``s_c x s_c = 0``; for a free-flyer the six
columns are fixed in the base, which moves with ``V_b``).  The Jacobian column at the frame
origin ``p_f`` is ``J_c = [n_c + w_c x p_f; w_c]`` and the origin moves with the frame's body
``f``: ``dp_f / dt = n_f + w_f x p_f``.  Hence

    dJ[:3, c] = d n_c / dt + (d w_c / dt) x p_f + w_c x dp_f / dt,    dJ[3:, c] = d w_c / dt,

for the columns supporting the frame, zero elsewhere.  Equivalently ``dJ = H qd`` with ``H`` the
pose Hessian (:mod:`grid_algorithms.end_effector_pose_hessian`), at O(nv) per frame instead of
O(nv^2).  Mimic joints: a mimic body's columns are its subspace times the multiplier, added
into the mimicked joint's column, and its rate is the multiplier times that joint's.
"""

from __future__ import annotations

import numpy as np

from grid_core import Algorithm, Port, hookimpl
from grid_core.algorithm import frame_inputs
from grid_core.arena import callee_rung, spill_ladder
from grid_core.emit import nodes as n
from grid_core.emit import sweeps
from grid_core.emit.emitter import Emitter
from grid_core.emit.expr import Scope, cross, sub, sum_terms
from grid_core.emit.storage import Array, Field, regions
from grid_core.model import Robot
from grid_core.model.frames import resolve_frames, supporting_bodies
from grid_core.model.joints import effective_subspace
from grid_core.review import ParallelismReview, done


def jacobian_time_variations(robot: Robot, world_T_body, world_T_frame, frames, qd) -> np.ndarray:
    """``(n_frames, 6, nv)``: ``dJ/dt`` of the LOCAL_WORLD_ALIGNED Jacobians at velocity ``qd``."""
    NB = robot.num_bodies
    s = [None] * NB  # per body: its world columns [w; n], (6, body nv)
    ds = [None] * NB  # and their time derivatives
    V = np.zeros((NB, 6))  # body spatial velocity [w; n], world frame at the world origin
    for b in robot.bodies:
        R, p = world_T_body[b.index, :3, :3], world_T_body[b.index, :3, 3]
        S = effective_subspace(b)  # [angular; linear], body frame, mimic multiplier applied
        w = R @ S[:3]
        n = R @ S[3:] + np.cross(p, w, axis=0)
        s[b.index] = np.vstack([w, n])
        V[b.index] = (V[b.parent] if b.parent >= 0 else 0.0) + s[b.index] @ qd[b.v_index:b.v_index + S.shape[1]]
        wb, nb = V[b.index, :3, None], V[b.index, 3:, None]
        ds[b.index] = np.vstack([np.cross(wb, w, axis=0), np.cross(wb, n, axis=0) + np.cross(nb, w, axis=0)])
    dJ = np.zeros((len(frames), 6, robot.nv))
    for k, f in enumerate(frames):
        if f.body < 0:
            continue  # a world-fixed frame does not move
        p_f = world_T_frame[k, :3, 3, None]
        dp_f = V[f.body, 3:, None] + np.cross(V[f.body, :3], p_f[:, 0])[:, None]
        for j in robot.topology.support[f.body]:
            body = robot.bodies[j]
            (w, n), (dw, dn) = np.split(s[j], 2), np.split(ds[j], 2)
            col = slice(body.v_index, body.v_index + w.shape[1])
            dJ[k, :3, col] += dn + np.cross(dw, p_f, axis=0) + np.cross(w, dp_f, axis=0)
            dJ[k, 3:, col] += dw
    return dJ


# -- code generation -------------------------------------------------------------------
#
# On the frame Jacobians' steps, by handle (end_effector_pose_gradient's, which run end_effector_pose's).
# With J_c = n_c + w_c x p_f the Jacobian's linear column at the frame origin and V_b = [w_b; n_b] the
# velocity of the body b moving column c, the Jacobi identity folds the reference's column into
#
#   dJ[:3, c] = w_b x J_c + w_c x (v_f - v_b),   dJ[3:, c] = w_b x w_c,
#
# where v_x = n_x + w_x x p_f is the velocity at the frame origin of the point fixed in body x (f: the
# frame's body): v_f - v_b is the frame origin's velocity due to the joints below b, w_b the angular
# velocity due to those above b and b's own (the pose Hessian's cells, times qd).  A mimic's column (the
# multiplier applied, added into its mimicked joint's) enters as a term of that column, at that joint's
# rate.  The velocities of the bodies supporting a frame are composed root to leaves in
# end_effector_pose's sweep, each right after the body's frame (no barrier more); then every (frame,
# column) pair of the frames' supports is one thread, as the Jacobians' are.


def velocity_field(robot: Robot, frames) -> Field:
    """The spatial velocity ``[w; n]`` (world frame, at the world origin) of each supporting body."""
    return Field("body_velocities", supporting_bodies(robot, frames), 6,
                 "spatial velocity of each body supporting a chosen frame (world frame, at the world origin)")


def rate_field(robot: Robot, frames) -> Field:
    """The output, a 6 x nv row-major matrix per chosen frame (the Jacobians' form)."""
    return Field("dJ", range(len(frames)), 6 * robot.nv, "time derivatives of the frame Jacobians")


class RateSteps:
    """The steps on the Jacobians' (``jac``, by handle), the supporting bodies' velocities ``arr``
    (:func:`velocity_field`) and the joint velocity ``qd`` (index -> expression)."""

    def __init__(self, robot: Robot, jac, arr: Array, qd):
        self.robot, self.jac, self.arr, self.qd = robot, jac, arr, qd
        self.columns: dict[int, dict] = {}
        """Each supporting body's subspace columns, v index -> S column (as the Jacobians clean them)."""
        for by in jac.cols:
            for c, ts in by.items():
                for j, s in ts:
                    self.columns.setdefault(j, {})[c] = s

    def velocity(self, scope: Scope, body) -> None:
        """``V_b = V_parent + sum_c [w_c; n_c] qd_c`` over body ``b``'s columns: each the Jacobian
        term at the world origin (``n_c``, the velocity of the point there)."""
        b, p = body.index, body.parent
        origin = [0.0, 0.0, 0.0]
        parts = [(self.jac.term(scope, b, s, origin), self.qd(c)) for c, s in sorted(self.columns[b].items())]
        V = self.arr.get(p) if p >= 0 else [0.0] * 6
        scope.comment(f"body {b}: its velocity, its parent's and its joint's")
        self.arr.put(scope, b, [sum_terms([(V[i],), *[(x[i // 3][i % 3], rate) for x, rate in parts]])
                                for i in range(6)])

    def point(self, b: int, p) -> list:
        """The velocity of the point ``p`` fixed in body ``b``: ``n_b + w_b x p``."""
        V = self.arr.get(b)
        return [sum_terms([(V[3 + i],), (x,)]) for i, x in enumerate(cross(V[:3], p))]

    def at(self, scope: Scope, k: int) -> tuple[list, list]:
        """Frame ``k``'s origin ``p_f`` and its velocity ``v_f``."""
        p_f = self.jac.origin(scope, k)
        body = self.jac.pose.frames[k].body
        return p_f, scope.let_all(self.point(body, p_f) if body >= 0 else [0.0] * 3, "vf")

    def column(self, scope: Scope, k: int, c: int, here, out: Array) -> None:
        """Column ``c`` of frame ``k``'s dJ (``here``: :meth:`at`), rows [linear; angular]."""
        p_f, v_f = here
        lin, ang = [], []
        for j, s in self.jac.cols[k][c]:
            w, J = self.jac.term(scope, j, s, p_f)
            wj = self.arr.get(j)[:3]
            rel = [sub(a, b) for a, b in zip(v_f, self.point(j, p_f))]  # v_f - v_j
            lin.append([sum_terms([(x,), (y,)]) for x, y in zip(cross(wj, J), cross(w, scope.let_all(rel, "dv")))])
            ang.append(cross(wj, w))
        nv = self.robot.nv
        for row in range(6):
            scope.assign(out(k, row * nv + c), sum_terms([(x[row % 3],) for x in (lin if row < 3 else ang)]))


class FrameJacobianTimeVariationEmitter(Emitter):
    Options = sweeps.SweepOptions
    composes = ("end_effector_pose_gradient",)

    def block_threads_hint(self, robot: Robot) -> int:
        return max(32 * robot.topology.max_level_width, robot.nv)  # the sweep's warps, then the pairs (P2)

    def _parts(self, layers, local: bool):
        jac = layers.steps("end_effector_pose_gradient", local=local)
        frames = jac.pose.frames
        arr = layers.arrays([velocity_field(layers.robot, frames), rate_field(layers.robot, frames)], local)
        return RateSteps(layers.robot, jac, arr["body_velocities"], layers.vectors(local)["qd"]), arr["dJ"]

    def inner_body(self, layers) -> list:
        steps, dJ = self._parts(layers, False)
        jac = steps.jac
        return [
            n.Comment("end_effector_pose's sweep (its step, by handle): the world frames of the bodies supporting a\n"
                      "frame, each body's velocity right after its frame"),
            *jac.pose.block_sweep(sweeps.form_of(layers.ctx), then=steps.velocity),
            *jac.block_columns(dJ, lambda sc, k, c: steps.column(sc, k, c, steps.at(sc, k), dJ)),
        ]

    def state_body(self, layers) -> list:
        io = layers.vectors(local=True)
        steps, dJ = self._parts(layers, True)
        jac = steps.jac
        scope = Scope("t")
        jac.pose.state_sweep(scope, io["q"], then=steps.velocity)
        jac.state_columns(scope, dJ, lambda sc, k, c, here: steps.column(sc, k, c, here, dJ), at=steps.at)
        return [layers.locals([jac.pose.arr, steps.arr]), *scope.body()]


class FrameJacobianTimeVariation(Algorithm):
    name = "frame_jacobian_time_variation"
    summary = ("time derivative of the frame Jacobians at (q, qd), (n_frames, 6, nv), "
               "LOCAL_WORLD_ALIGNED, [linear; angular]")
    math = r"""
With :math:`s_c = [\omega_c; \nu_c]` the world-frame column :math:`c` of body :math:`b` at the
world origin, :math:`V_b = [\omega_b; \nu_b] = V_{\lambda(b)} + \sum_{c \in b} s_c \dot q_c` the
body's spatial velocity and :math:`p_f` the frame origin:

.. math::

   \dot s_c = V_b \times s_c, \qquad
   \dot p_f = \nu_{b(f)} + \omega_{b(f)} \times p_f,

.. math::

   \dot J_c = \begin{bmatrix} \dot\nu_c + \dot\omega_c \times p_f + \omega_c \times \dot p_f \\
                              \dot\omega_c \end{bmatrix}

for the columns supporting the frame (zero elsewhere); equal to :math:`H \dot q`, the pose
Hessian applied to the velocity.
"""
    depends_on = ("forward_kinematics", "end_effector_pose", "end_effector_pose_gradient")
    emitter = FrameJacobianTimeVariationEmitter
    review = ParallelismReview(
        P1=done("block layout: end_effector_pose's sweep by handle, level by level (the bodies of a level in "
                "parallel, one warp each, one barrier per level), each supporting body's velocity "
                "V_b = V_parent + s_b qd composed in the same step right after its frame (no barrier more)"),
        P2=done("every (frame, column) pair of the frames' supports is one thread, no barrier between them; "
                "the structural zeros a fan-out of column runs (the Jacobians' fan-out, by handle)"),
        P3=done("the body frames and velocities are computed once per body, shared by every frame and column; "
                "the Jacobi identity folds a column into three cross products of its world axis and Jacobian "
                "column with its body's velocity (the reference's d s_c / dt = V_b x s_c, then the frame "
                "origin's motion, are never formed)"),
        P4=done("each frame's support column map is baked at generation time: only its columns are computed, "
                "the rest written as zeros; frames, placements and joint axes folded"),
        notes="the generated code takes the frames it was generated for (grid build --frame)",
    )

    def inputs(self, robot: Robot):
        return frame_inputs(robot, velocity=True)

    def outputs(self, robot: Robot, frames=None, **options):
        n = len(resolve_frames(robot, frames, self.name))
        return (Port("dJ", (n, 6, robot.nv), "dJ/dt of the frame Jacobians, LOCAL_WORLD_ALIGNED, [linear; angular]"),)

    def reference(self, ctx, q, qd, frames=None):
        chosen = resolve_frames(ctx.robot, frames, self.name)
        return jacobian_time_variations(ctx.robot, ctx.forward_kinematics(q), ctx.end_effector_pose(q, chosen),
                                        chosen, qd)

    def arenas(self, robot: Robot, options=None, frames=None):
        return regions([velocity_field(robot, resolve_frames(robot, frames, self.name))])

    def spill_rungs(self, robot: Robot, options=None):
        return spill_ladder(("the body frames and velocities in global",
                             {callee_rung("end_effector_pose_gradient", 1), "body_velocities"},
                             "what the Jacobians' rung 1 spills, and the supporting bodies' velocities"))


@hookimpl
def grid_register_algorithms():
    return [FrameJacobianTimeVariation]
