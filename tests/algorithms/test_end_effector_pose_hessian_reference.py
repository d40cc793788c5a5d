"""end_effector_pose_hessian vs central finite differences of Pinocchio's
computeFrameJacobian(LOCAL_WORLD_ALIGNED) along the tangent direction (``pin.integrate``).

Step and tolerance: h = 1e-6 and rel 1e-6.  Pinocchio's Jacobians are exact to about eps,
so the rounding error of a central difference is about eps / h ~ 1e-10 relative and its
truncation error h^2 |d^3 J| / 6 ~ 1e-12 (measured: <= 3e-10 over these robots); a wrong
term (a missing frame-origin motion, a column moving with a joint below it) shows up at
1e-2 or more.
"""

from __future__ import annotations

import numpy as np
import pytest

from grid_core import Reference, algorithms
from grid_core.testing import assert_close, random_state, tangent_bracket
from tests.algorithms.second_order_support import CASES, STATES, case_id
from tests.pin_bridge import pin_frame_id, pin_model, to_pin_q

REL_FD = 1e-6
H = 1e-6
SYM = 1e-12


def pin_jacobians(robot, model, data, pq, frames) -> np.ndarray:
    import pinocchio as pin

    return np.stack([
        pin.computeFrameJacobian(model, data, pq, pin_frame_id(model, f), pin.LOCAL_WORLD_ALIGNED).copy()
        for f in frames
    ])


def pin_jacobian_fd(robot, q, frames) -> np.ndarray:
    """Central differences of Pinocchio's Jacobians along ``pin.integrate(q, +-h e_k)``."""
    import pinocchio as pin

    model = pin_model(robot)
    data = model.createData()
    pq = to_pin_q(robot, q)
    cols = []
    for k in range(robot.nv):
        e = np.zeros(robot.nv)
        e[k] = H
        plus = pin_jacobians(robot, model, data, pin.integrate(model, pq, e), frames)
        minus = pin_jacobians(robot, model, data, pin.integrate(model, pq, -e), frames)
        cols.append((plus - minus) / (2 * H))
    return np.stack(cols, axis=-1)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_end_effector_pose_hessian_matches_finite_differences_of_pinocchio(case, robot_cache, rng):
    robot = robot_cache(*case)
    ref = Reference(robot)
    leaves = list(robot.leaf_frames())  # the default
    for k in range(STATES):
        q, _, _ = random_state(robot, rng)
        frames = list(robot.frames) if k == 0 else leaves  # every frame (163 on pr2) once
        H_ = ref.end_effector_pose_hessian(q, frames)
        assert H_.shape == (len(frames), 6, robot.nv, robot.nv)
        assert_close(H_, pin_jacobian_fd(robot, q, frames), REL_FD, f"{robot.name}: state {k}")
    assert ref.end_effector_pose_hessian(q).shape == (len(leaves), 6, robot.nv, robot.nv)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_end_effector_pose_hessian_symmetries(case, robot_cache, rng):
    """What theory predicts, to 1e-12.  The linear rows are tangent derivatives of the frame
    origin p(q), so by Baker-Campbell-Hausdorff H[:3, j, k] - H[:3, k, j] = J[:3] [e_k, e_j]
    (symmetric off the free-flyer's columns).  The angular rows come from dR = skew(J[3:]) R,
    whose mixed derivatives add a commutator: H[3:, j, k] - H[3:, k, j] = J[3:] [e_k, e_j]
    - J[3:, j] x J[3:, k]."""
    robot = robot_cache(*case)
    ref = Reference(robot)
    C = tangent_bracket(robot)
    q, _, _ = random_state(robot, rng)
    frames = list(robot.frames)
    H_ = ref.end_effector_pose_hessian(q, frames)
    J = ref.end_effector_pose_gradient(q, frames)
    asym = H_ - H_.transpose(0, 1, 3, 2)
    bch = np.einsum("frm,mkj->frjk", J, C)
    w = J[:, 3:]
    bch[:, 3:] -= np.cross(w[:, :, :, None], w[:, :, None, :], axis=1)
    assert np.linalg.norm(asym - bch) <= SYM * np.linalg.norm(H_)


def test_end_effector_pose_hessian_takes_frames(robot_cache, rng):
    robot = robot_cache("erd:pr2")
    ref = Reference(robot)
    q, _, _ = random_state(robot, rng)
    H_ = ref.end_effector_pose_hessian(q, ["l_gripper_tool_frame", "base_link"])
    assert H_.shape == (2, 6, robot.nv, robot.nv)
    assert H_[0].any() and not H_[1].any()  # the fixed base does not move


@pytest.mark.parametrize("case", [("g1", None), ("erd:panda", None)], ids=case_id)
def test_end_effector_pose_hessian_batch_equals_loop(case, robot_cache, rng):
    robot = robot_cache(*case)
    ref = Reference(robot)
    q, _, _ = random_state(robot, rng, n=3)
    batch = ref.end_effector_pose_hessian(q)
    assert np.array_equal(batch, np.stack([ref.end_effector_pose_hessian(x) for x in q]))


def test_end_effector_pose_hessian_declaration():
    # the reference reaches the poses; the generated code composes the Jacobians' steps (and through them the poses')
    assert algorithms()["end_effector_pose_hessian"].depends_on == (
        "forward_kinematics", "end_effector_pose", "end_effector_pose_gradient")
