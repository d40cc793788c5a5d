"""End-effector poses: the world pose of chosen frames.

``world_T_frame = end_effector_pose(q, frames=None)``, shape ``(n_frames, 4, 4)``:
for each chosen frame the homogeneous transform ``[[R, p], [0, 1]]``, ``p`` the
frame origin in the world and ``R`` taking frame coordinates to world coordinates
(Pinocchio's ``data.oMf[frame_id].homogeneous``).

``frames`` names any frames of ``robot.frames`` (links, joints, fixed joints; a
single name is one frame; a name shared by several frames means the first, as
``robot.frame`` does, and a :class:`~grid_core.model.Frame` of ``robot.frames``
may be given instead of its name); it is shared by the whole batch.  By default the
frames are the robot's leaf frames: the links of the description's tree with no child
joint, movable or fixed (a quadruped's feet, an arm's tool frame), on the leaf bodies, in
``robot.frames`` order (:meth:`~grid_core.model.Robot.leaf_frames`,
:func:`grid_core.model.frames.default_frames`).
"""

from __future__ import annotations

import numpy as np

from grid_core import Algorithm, Port, hookimpl
from grid_core.algorithm import frame_inputs
from grid_core.arena import spill_ladder
from grid_core.derivatives import LEVI_CIVITA, Rule, SecondRule
from grid_core.emit import nodes as n
from grid_core.emit import spatial_steps as ss
from grid_core.emit import sweeps
from grid_core.emit.emitter import Emitter
from grid_core.emit.expr import Scope
from grid_core.emit.storage import Array, Field, regions
from grid_core.model import Robot
from grid_core.model.frames import resolve_frames, supporting_bodies
from grid_core.model.spatial import pose_of
from grid_core.review import ParallelismReview, done


def frame_poses(robot: Robot, world_T_body, frames) -> np.ndarray:
    """``world_T_frame`` for each :class:`Frame`, given the bodies' world poses."""
    out = np.empty((len(frames), 4, 4))
    for k, f in enumerate(frames):
        body_T_frame = pose_of(f.X)
        out[k] = body_T_frame if f.body < 0 else world_T_body[f.body] @ body_T_frame
    return out


# -- code generation -------------------------------------------------------------------
#
# The frames are chosen at generation time (grid build --frame): only the bodies supporting one
# (the ancestors of its body, and the body) get their world frame, root to leaves
# (spatial_steps.root_frame, the inverse-dynamics gradient's step too), stored for the frames and
# the children that read it; then each frame's pose is its body's frame composed with its constant
# placement, folded.  The frame Jacobians (end_effector_pose_gradient) run these steps by handle.


def fields(robot: Robot, frames) -> tuple[Field, ...]:
    """The world frame ``^bX_world`` (E row-major, then r: 12 scalars) of each supporting body."""
    return (Field("body_frames", supporting_bodies(robot, frames), 12,
                  "world frame of each body supporting a chosen frame"),)


def pose_field(frames) -> Field:
    """The output, one 4x4 pose (16 scalars, row-major) per chosen frame."""
    return Field("world_T_frame", range(len(frames)), 16, "world pose of each chosen frame")


class PoseSteps:
    """The steps, on ``frames`` (the chosen :class:`~grid_core.model.Frame` s), the supporting bodies'
    frames ``arr`` (:func:`fields`) and the transform data ``xi``: :meth:`body` root to leaves over
    :attr:`bodies`, then :meth:`frame` (or :meth:`pose`) of each chosen frame."""

    def __init__(self, robot: Robot, frames, arr: Array, xi):
        self.robot, self.frames, self.arr, self.xi = robot, tuple(frames), arr, xi
        self.bodies = supporting_bodies(robot, frames)

    def body_frame(self, b: int):
        """``(E, r)`` of supporting body ``b``, as stored (its constants folded)."""
        return ss.frame_of(self.arr.get(b))

    def body(self, scope: Scope, body) -> None:
        """The world frame of a supporting body, from its parent's and its joint transform."""
        p = body.parent
        scope.comment(f"body {body.index} ({body.joint.name}): its world frame")
        E, r = ss.root_frame(self.robot, body, self.body_frame(p) if p >= 0 else None, self.xi, scope, world=True)
        self.arr.put(scope, body.index, ss.frame_entries(E, r))

    def _then(self, then):
        """The sweep's step: :meth:`body`, then ``then(scope, body)`` (a composing algorithm's own
        step on the body, which may read the frame just stored) where given."""
        if then is None:
            return self.body

        def step(scope: Scope, body) -> None:
            self.body(scope, body)
            then(scope, body)

        return step

    def block_sweep(self, form: str, then=None) -> list:
        """The block layout's sweep: the supporting bodies' frames, root to leaves (``form``: by
        levels or by bodies); ``then(scope, body)`` after each body's frame, in the same sweep (no
        barrier more: a composing algorithm's forward step, say)."""
        return sweeps.forward(self.robot, self._then(then), form, bodies=self.bodies)

    def state_sweep(self, scope: Scope, q, then=None) -> None:
        """The per-state layout's sweep: the supporting bodies' XI slots from ``q``, then their frames
        (each followed by ``then(scope, body)`` where given)."""
        for b in self.bodies:
            ss.xi_update(scope, self.robot, self.robot.bodies[b], q, self.xi)
        step = self._then(then)
        for b in self.bodies:
            step(scope, self.robot.bodies[b])

    def frame(self, k: int):
        """``(E, r)`` of chosen frame ``k``: its body's world frame placed (constants folded)."""
        f = self.frames[k]
        return ss.placed_frame(self.body_frame(f.body) if f.body >= 0 else None, f.X)

    def pose(self, scope: Scope, k: int, out: Array) -> None:
        f = self.frames[k]
        scope.comment(f"frame {k} ({f.name}, {f.kind.replace('_', ' ')} of body {f.body}): its pose")
        for i, x in enumerate(ss.pose_entries(*self.frame(k))):
            scope.assign(out(k, i), x)


class EndEffectorPoseEmitter(Emitter):
    Options = sweeps.SweepOptions

    def block_threads_hint(self, robot: Robot) -> int:
        return 32 * robot.topology.max_level_width  # one warp per body of the widest level (P1)

    def fields(self, layers) -> tuple:
        return fields(layers.robot, layers.ctx.frames)

    def steps(self, layers, arrays, io, *, local):
        """The steps (:class:`PoseSteps`) on this algorithm's frames and region, reading the caller's XI."""
        return PoseSteps(layers.robot, layers.ctx.frames, arrays["body_frames"], io["xi"])

    def inner_body(self, layers) -> list:
        steps = layers.own_steps()
        out = layers.arrays([pose_field(steps.frames)])["world_T_frame"]
        return [
            n.Comment(f"root to leaves, the world frames of the {len(steps.bodies)} bodies supporting a frame"),
            *steps.block_sweep(sweeps.form_of(layers.ctx)),
            n.Comment("each frame's pose, one thread each (P2)"),
            *sweeps.fan_out([(k,) for k in range(len(steps.frames))], lambda sc, k: steps.pose(sc, k, out)),
        ]

    def state_body(self, layers) -> list:
        io = layers.vectors(local=True)
        steps = layers.own_steps(local=True)
        out = layers.arrays([pose_field(steps.frames)], local=True)["world_T_frame"]
        scope = Scope("t")
        steps.state_sweep(scope, io["q"])
        for k in range(len(steps.frames)):
            steps.pose(scope, k, out)
        return [layers.locals([steps.arr]), *scope.body()]


_EMBED_R = np.eye(4, 3)  # 3 rows into 4
_EMBED_C = np.eye(3, 4)
_LAST = np.eye(4)[3]


def _pose_terms(kernels, q):
    """``(T, J, dR, consts)``: the poses, the frame Jacobians (``end_effector_pose_gradient``, rows
    ``[linear; angular]`` in world-aligned axes), ``dR[b, f, x, d, j] = (skew(J[3:, j]) R)[x, d]``
    (``skew(w)[x, y] = -eps[x, y, z] w[z]``) and the constants ``(eps, E, C, e4)``."""
    xp = kernels.xp
    T, J = kernels("end_effector_pose", q), kernels("end_effector_pose_gradient", q)
    consts = tuple(xp.const(a, q) for a in (LEVI_CIVITA, _EMBED_R, _EMBED_C, _LAST))
    dR = -xp.einsum("xyz,bfzj,bfyd->bfxdj", consts[0], J[:, :, 3:], T[:, :, :3, :3])
    return T, J, dR, consts


def _jacobians(kernels, x, params, wanted):
    """From the frame Jacobians: ``dp/dq = J[:3]``, ``dR/dq_j = skew(J[3:, j]) R``."""
    xp = kernels.xp
    _, J, dR, (_, E, C, e4) = _pose_terms(kernels, x["q"])
    dT = xp.einsum("rx,bfxdj,dc->bfrcj", E, dR, C) + xp.einsum("rx,bfxj,c->bfrcj", E, J[:, :, :3], e4)
    return {"q": dT}


def _hessians(kernels, x, params, wanted):
    """The derivative along ``q_k`` of the Jacobian's column ``j``, from the Hessian of the frame
    Jacobians (``end_effector_pose_hessian``, ``H[f, r, j, k] = dJ[f, r, j]/dq_k``): ``d2p = H[:3]``,
    ``d(skew(w_j) R)/dq_k = skew(H[3:, j, k]) R + skew(w_j) skew(w_k) R`` (``dR/dq_k = skew(w_k) R``,
    ``w = J[3:]``)."""
    q, xp = x["q"], kernels.xp
    T, J, dR, (eps, E, C, e4) = _pose_terms(kernels, q)
    H = kernels("end_effector_pose_hessian", q)
    d2R = -xp.einsum("xyz,bfzjk,bfyd->bfxdjk", eps, H[:, :, 3:], T[:, :, :3, :3]) \
        - xp.einsum("xyz,bfzj,bfydk->bfxdjk", eps, J[:, :, 3:], dR)
    d2T = xp.einsum("rx,bfxdjk,dc->bfrcjk", E, d2R, C) + xp.einsum("rx,bfxjk,c->bfrcjk", E, H[:, :, :3], e4)
    return {"q": {"q": d2T}}


class EndEffectorPose(Algorithm):
    name = "end_effector_pose"
    summary = "world pose of chosen frames (default: the leaf frames), (n_frames, 4, 4) homogeneous"
    math = r"""
:math:`{}^0T_f = {}^0T_{b(f)}\; {}^{b(f)}T_f`: the world pose of the frame's body (forward
kinematics) composed with the frame's fixed placement in that body.
"""
    depends_on = ("forward_kinematics",)
    emitter = EndEffectorPoseEmitter
    derivatives = Rule(("q",), ("end_effector_pose", "end_effector_pose_gradient"), _jacobians,
                       second=SecondRule(("q",), ("end_effector_pose", "end_effector_pose_gradient",
                                                  "end_effector_pose_hessian"), _hessians))
    """Second derivatives (a PyTorch double backward, a JAX Hessian) in q from end_effector_pose_hessian."""
    review = ParallelismReview(
        P1=done("block layout: the supporting bodies' world frames are composed root to leaves level by "
                "level, the bodies of a level in parallel (one warp each, one barrier per level)"),
        P2=done("the frames are independent once their bodies' frames are known: one thread each"),
        P3=done("only the bodies supporting a chosen frame are computed (their union, baked at generation "
                "time), and their joints' configuration data in one parallel pass (load_update_XImats)"),
        P4=done("the frames are chosen at generation time: each one's body and its constant placement are "
                "folded into its code; frames are composed as (E, r), 12 scalars, constants folded"),
        notes="the reference takes any frames per call; the generated code, those it was generated for "
              "(grid build --frame)",
    )

    def inputs(self, robot: Robot):
        return frame_inputs(robot)

    def outputs(self, robot: Robot, frames=None, **options):
        n = len(resolve_frames(robot, frames, self.name))
        return (Port("world_T_frame", (n, 4, 4), "world pose of each chosen frame"),)

    def reference(self, ctx, q, frames=None):
        chosen = resolve_frames(ctx.robot, frames, self.name)
        return frame_poses(ctx.robot, ctx.forward_kinematics(q), chosen)

    def arenas(self, robot: Robot, options=None, frames=None):
        return regions(fields(robot, resolve_frames(robot, frames, self.name)))

    def spill_rungs(self, robot: Robot, options=None):
        return spill_ladder(("the body frames in global", {"body_frames"}, "the supporting bodies' frames go to "
                             "d_workspace"))


@hookimpl
def grid_register_algorithms():
    return [EndEffectorPose]
