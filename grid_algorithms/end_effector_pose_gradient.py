"""End-effector pose gradient: the frame Jacobians of chosen frames.

``J = end_effector_pose_gradient(q, frames=None)``, shape ``(n_frames, 6, nv)``,
frames as in :mod:`grid_algorithms.end_effector_pose`.  Each ``J[k]`` is
Pinocchio's ``computeFrameJacobian(model, data, q, frame_id, LOCAL_WORLD_ALIGNED)``:

* rows ``[linear; angular]`` (Pinocchio's order, NOT Featherstone's): rows 0-2 the
  velocity of the frame ORIGIN, rows 3-5 the frame's angular velocity, both
  expressed in WORLD-aligned axes; so ``d p / d q = J[k, :3]`` and
  ``dR / dq_j = skew(J[k, 3:, j]) R`` for the pose ``(R, p)`` of ``end_effector_pose``;
* columns are the v coordinates: for a free-flyer the tangent space
  (``q (+) dq``: position increment in the base frame, rotation ``R exp(dw)``),
  a continuous joint's one angle, a mimic joint adding into the mimicked joint's
  column times its multiplier.
"""

from __future__ import annotations

import numpy as np

from grid_core import Algorithm, Port, hookimpl
from grid_core.algorithm import frame_inputs
from grid_core.arena import callee_rung, spill_ladder
from grid_core.emit import nodes as n
from grid_core.emit import sweeps
from grid_core.emit.emitter import Emitter
from grid_core.emit.expr import ROTATION_TOL, Scope, clean, cross, matTvec, sub, sum_terms
from grid_core.emit.storage import Array, Field, plus
from grid_core.model import Robot
from grid_core.model.frames import resolve_frames
from grid_core.model.joints import effective_subspace, support_columns
from grid_core.review import ParallelismReview, done


def frame_jacobians(robot: Robot, world_T_body, world_T_frame, frames) -> np.ndarray:
    """LOCAL_WORLD_ALIGNED Jacobians from the bodies' and the frames' world poses."""
    J = np.zeros((len(frames), 6, robot.nv))
    for k, f in enumerate(frames):
        p_f = world_T_frame[k, :3, 3]
        for j in robot.topology.support[f.body] if f.body >= 0 else ():
            body = robot.bodies[j]
            R_j, p_j = world_T_body[j, :3, :3], world_T_body[j, :3, 3]
            S = effective_subspace(body)  # [angular; linear] in body j's frame
            w = R_j @ S[:3]
            col = slice(body.v_index, body.v_index + S.shape[1])
            J[k, :3, col] += R_j @ S[3:] + np.cross(w, p_f - p_j, axis=0)
            J[k, 3:, col] += w
    return J


# -- code generation -------------------------------------------------------------------
#
# On end_effector_pose's steps, by handle (its supporting bodies' world frames, its frames' origins):
# each (frame, column) pair of the frame's support is independent, J[:3, c] = sum over the bodies
# adding into column c (a mimic's into its mimicked joint's, times the multiplier) of
# R_j S^v + (R_j S^w) x (p_f - p_j), J[3:, c] = sum of R_j S^w (R_j = E_j^T); the columns outside
# the frame's support are structural zeros, written as such.


def columns(robot: Robot, frame) -> dict[int, list]:
    """The frame's support columns: v index -> the ``(body, S column)`` adding into it, constants
    cleaned (:func:`~grid_core.model.joints.support_columns`)."""
    return {c: [(j, [clean(x, ROTATION_TOL) for x in s]) for j, s in ts]
            for c, ts in support_columns(robot, frame.body).items()}


def jacobian_field(robot: Robot, frames) -> Field:
    """The output, a 6 x nv row-major matrix per chosen frame."""
    return Field("J", range(len(frames)), 6 * robot.nv, "frame Jacobians")


class JacobianSteps:
    """The frame Jacobians' steps on end_effector_pose's (``pose``, by handle: its supporting bodies'
    frames and its frames): each frame's support columns (:func:`columns`), each term's world axis
    and linear column at the frame origin, and a whole column."""

    def __init__(self, robot: Robot, pose):
        self.robot, self.pose = robot, pose
        self.cols = [columns(robot, f) for f in pose.frames]

    def origin(self, scope: Scope, k: int) -> list:
        """Frame ``k``'s origin in the world, ``p_f``."""
        return scope.let_all(self.pose.frame(k)[1], "pf")

    def term(self, scope: Scope, j: int, s, p_f) -> tuple[list, list]:
        """``(R_j S^w, R_j S^v + (R_j S^w) x (p_f - p_j))`` of body ``j``'s subspace column ``s``."""
        E, r = self.pose.body_frame(j)
        w = scope.let_all(matTvec(E, s[:3]), "w")
        wxd = cross(w, [sub(p_f[i], r[i]) for i in range(3)])
        return w, [sum_terms([(u,), (x,)]) for u, x in zip(matTvec(E, s[3:]), wxd)]

    def column_rows(self, scope: Scope, k: int, c: int, p_f) -> list:
        """The six rows [linear; angular] of column ``c`` of frame ``k``'s Jacobian: its terms summed."""
        parts = [self.term(scope, j, s, p_f) for j, s in self.cols[k][c]]
        return [sum_terms([(x[1 - row // 3][row % 3],) for x in parts]) for row in range(6)]

    def column(self, scope: Scope, k: int, c: int, p_f, J: Array) -> None:
        """Column ``c`` of frame ``k``'s Jacobian, stored in ``J`` (:func:`jacobian_field`)."""
        nv = self.robot.nv
        for row, x in enumerate(self.column_rows(scope, k, c, p_f)):
            scope.assign(J(k, row * nv + c), x)

    def pairs(self) -> list[tuple[int, int]]:
        """The ``(frame, column)`` pairs of the frames' supports, frame by frame in column order."""
        return [(k, c) for k, by in enumerate(self.cols) for c in sorted(by)]

    def block_columns(self, out: Array, column) -> list:
        """The block layout's fan-out over an output of the Jacobians' shape (``out``: a ``6 x nv``
        row-major matrix per frame, :func:`jacobian_field`'s form): every (frame, column) pair of the
        frames' supports one thread (``column(scope, k, c)`` writes it), then the structural zeros,
        each frame's runs of columns outside its support."""
        nv = self.robot.nv
        pairs = self.pairs()

        def zeros(k):
            return lambda scope, j: [scope.assign(out(k, plus(j, row * nv)), 0.0) for row in range(6)]

        runs = [sweeps.span(a, b, zeros(k), comment=f"frame {k}: columns {a}..{b - 1} do not move it")
                for k, by in enumerate(self.cols) for a, b in sweeps.ranges(nv, lambda c, by=by: c not in by)]
        return [
            n.Comment(f"the {len(pairs)} (frame, column) pairs of the frames' supports, one thread each (P2)"),
            *sweeps.fan_out(pairs, column),
            n.Comment("the structural zeros: the columns outside each frame's support"),
            *sweeps.fan_out_runs(runs),
        ]

    def state_columns(self, scope: Scope, out: Array, column, at=None) -> None:
        """The per-state layout's pass over an output of the Jacobians' shape: frame by frame, what
        ``at(scope, k)`` gives once per frame (default: its origin, :meth:`origin`), then each column,
        ``column(scope, k, c, that)`` in the support and zeros outside it."""
        nv = self.robot.nv
        for k, by in enumerate(self.cols):
            here = (at or self.origin)(scope, k)
            for c in range(nv):
                if c in by:
                    column(scope, k, c, here)
                else:
                    for row in range(6):
                        scope.assign(out(k, row * nv + c), 0.0)


class EndEffectorPoseGradientEmitter(Emitter):
    Options = sweeps.SweepOptions
    composes = ("end_effector_pose",)

    def block_threads_hint(self, robot: Robot) -> int:
        return max(32 * robot.topology.max_level_width, robot.nv)  # the sweep's warps, then the pairs (P2)

    def fields(self, layers) -> tuple:
        ee = layers.compose("end_effector_pose")
        return ee.emitter.fields(ee)

    def steps(self, layers, arrays, io, *, local):
        """The steps (:class:`JacobianSteps`) on end_effector_pose's, bound to ``arrays`` and ``io``."""
        ee = layers.compose("end_effector_pose")
        return JacobianSteps(layers.robot, ee.emitter.steps(ee, arrays, io, local=local))

    def _parts(self, layers, local: bool):
        steps = JacobianSteps(layers.robot, layers.steps("end_effector_pose", local=local))
        return steps, layers.arrays([jacobian_field(layers.robot, steps.pose.frames)], local)["J"]

    def inner_body(self, layers) -> list:
        steps, J = self._parts(layers, False)
        return [
            n.Comment("end_effector_pose's sweep (its step, by handle): the world frames of the bodies supporting a frame"),
            *steps.pose.block_sweep(sweeps.form_of(layers.ctx)),
            *steps.block_columns(J, lambda sc, k, c: steps.column(sc, k, c, steps.origin(sc, k), J)),
        ]

    def state_body(self, layers) -> list:
        io = layers.vectors(local=True)
        steps, J = self._parts(layers, True)
        scope = Scope("t")
        steps.pose.state_sweep(scope, io["q"])
        steps.state_columns(scope, J, lambda sc, k, c, p_f: steps.column(sc, k, c, p_f, J))
        return [layers.locals([steps.pose.arr]), *scope.body()]


class EndEffectorPoseGradient(Algorithm):
    name = "end_effector_pose_gradient"
    summary = "frame Jacobians (n_frames, 6, nv), [linear; angular] in world-aligned axes at the frame origin"
    math = r"""
For each body :math:`j` supporting the frame (origin :math:`p_f`), with world pose
:math:`(R_j, p_j)` and motion subspace :math:`S_j = [S^\omega_j; S^v_j]` in its own frame:

.. math::

   J_{:, j} = \begin{bmatrix} R_j S^v_j + (R_j S^\omega_j) \times (p_f - p_j) \\
                               R_j S^\omega_j \end{bmatrix} .
"""
    depends_on = ("forward_kinematics", "end_effector_pose")
    emitter = EndEffectorPoseGradientEmitter
    review = ParallelismReview(
        P1=done("block layout: end_effector_pose's sweep by handle, the supporting bodies' world frames "
                "level by level, the bodies of a level in parallel (one barrier per level)"),
        P2=done("every (frame, column) pair of the frames' supports is one thread, no barrier between "
                "them (upstream walks them serially); the structural zeros a fan-out of column runs"),
        P3=done("the body frames are computed once per body by the pose's sweep, shared by every frame "
                "and column; a pair costs R_j S and one cross product with the frame origin"),
        P4=done("each frame's support column map is baked at generation time: only its columns are "
                "computed, the rest written as zeros; frames, placements and joint axes folded"),
        notes="the generated code takes the frames it was generated for (grid build --frame)",
    )

    def inputs(self, robot: Robot):
        return frame_inputs(robot)

    def outputs(self, robot: Robot, frames=None, **options):
        n = len(resolve_frames(robot, frames, self.name))
        return (Port("J", (n, 6, robot.nv), "frame Jacobians, LOCAL_WORLD_ALIGNED, [linear; angular]"),)

    def reference(self, ctx, q, frames=None):
        chosen = resolve_frames(ctx.robot, frames, self.name)
        return frame_jacobians(ctx.robot, ctx.forward_kinematics(q), ctx.end_effector_pose(q, chosen), chosen)

    def arenas(self, robot: Robot, options=None, frames=None):
        return ()  # end_effector_pose's body frames, composed

    def spill_rungs(self, robot: Robot, options=None):
        return spill_ladder(("the body frames in global", {callee_rung("end_effector_pose", 1)},
                             "what end_effector_pose's rung 1 spills"))


@hookimpl
def grid_register_algorithms():
    return [EndEffectorPoseGradient]
