"""Joint models: ``jcalc`` (joint transform and motion subspace) per joint type.

Conventions (DESIGN §3):

* revolute / continuous: one angle about ``axis``; prismatic: one displacement along it;
* free-flyer: ``q = [x y z, qx qy qz qw]`` (the body's pose in its parent frame),
  ``v = [linear, angular]`` in the body frame (Pinocchio's ``JointModelFreeFlyer``);
* a mimic joint moves with ``q = multiplier * q_mimicked + offset``, its motion
  subspace scaled by the multiplier and mapped onto the mimicked joint's column.

The functions take a body's *own* coordinates; :func:`body_q` extracts them from
a full configuration vector, mimic included.
"""

from __future__ import annotations

import numpy as np

from . import spatial
from .robot import Body, JointType

_FREE_FLYER_S = np.block([[np.zeros((3, 3)), np.eye(3)], [np.eye(3), np.zeros((3, 3))]])
_FREE_FLYER_S.setflags(write=False)


def body_q(body: Body, q: np.ndarray) -> np.ndarray:
    """The joint coordinates of ``body`` within the configuration ``q`` (mimic applied)."""
    if body.mimic is not None:
        return np.array([body.mimic.multiplier * q[body.q_index] + body.mimic.offset])
    return q[body.q_index : body.q_index + body.nq]


def body_v(body: Body, v: np.ndarray) -> np.ndarray:
    """The joint velocity (or acceleration) of ``body`` within ``v`` (mimic applied)."""
    if body.mimic is not None:
        return np.array([body.mimic.multiplier * v[body.v_index]])
    return v[body.v_index : body.v_index + body.nv]


def joint_nv(body: Body) -> int:
    """Width of the body's motion subspace (the mimic body's own, i.e. 1)."""
    return 6 if body.jtype is JointType.FLOATING else 1


def joint_transform(body: Body, qj) -> np.ndarray:
    """``XJ(q)``: joint frame at zero configuration -> body frame."""
    jt = body.jtype
    if jt in (JointType.REVOLUTE, JointType.CONTINUOUS):
        return spatial.plux(spatial.axis_angle(body.axis, qj[0]).T, np.zeros(3))
    if jt is JointType.PRISMATIC:
        return spatial.plux(np.eye(3), body.axis * qj[0])
    if jt is JointType.FLOATING:
        return spatial.plux(spatial.quat_to_matrix(qj[3:7]).T, qj[:3])
    raise ValueError(f"joint type {jt} has no motion")


def motion_subspace(body: Body) -> np.ndarray:
    """``S`` (6 x nv_j) in the body frame, the mimic multiplier NOT applied."""
    jt = body.jtype
    if jt in (JointType.REVOLUTE, JointType.CONTINUOUS):
        return np.concatenate([body.axis, np.zeros(3)])[:, None]
    if jt is JointType.PRISMATIC:
        return np.concatenate([np.zeros(3), body.axis])[:, None]
    if jt is JointType.FLOATING:
        return _FREE_FLYER_S
    raise ValueError(f"joint type {jt} has no motion")


def effective_subspace(body: Body) -> np.ndarray:
    """``S`` with the mimic multiplier applied: the map from the body's v columns."""
    S = motion_subspace(body)
    return S * body.mimic.multiplier if body.mimic is not None else S


def support_columns(robot, body: int) -> dict[int, list[tuple[int, np.ndarray]]]:
    """The v columns that move body ``body`` (-1: the world, none): v index -> the ``(body j, S
    column)`` of each body ``j`` of its support adding into it (:func:`effective_subspace`'s columns:
    a mimic's adds into its mimicked joint's, times the multiplier)."""
    out: dict[int, list[tuple[int, np.ndarray]]] = {}
    for j in robot.topology.support[body] if body >= 0 else ():
        S = effective_subspace(robot.bodies[j])
        for k in range(S.shape[1]):
            out.setdefault(robot.bodies[j].v_index + k, []).append((j, S[:, k]))
    return out
