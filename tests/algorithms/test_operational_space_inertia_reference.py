"""operational_space_inertia vs Lambda = (J Minv J^T)^-1 built from Pinocchio's computeMinverse
(on a mimic robot the inverse of its crba: Pinocchio 4.1 refuses computeMinverse there) and
getFrameJacobian(LOCAL_WORLD_ALIGNED), over the linear rows and over all six (float64, rel 1e-9),
on every leaf frame (the default) of every robot whose generated code CI proves
(tests/generated.py CODEGEN_ROBOTS) and of the mimic robots on a free-flyer.

A frame whose J Minv J^T (Pinocchio's) has its smallest eigenvalue under the documented threshold
(RANK_TOL = 1e-10 times the larger of its largest and ||Minv||_2) must be refused, an InputError
naming it: hyq's lower-leg frames sit on the knee axis (the linear rows have rank 2), atlas' head
rides on four joints (rank 4 < 6), a two-link arm's tip on the second joint's axis (rank 1 < 3).  The others are compared forward at rel 1e-9 where
cond(J Minv J^T) <= 1e6 (the inverse then loses at most six digits of the ~1e-16 to which the
two J Minv J^T agree); a random state near a singular pose (atlas' foot, ur5's tool at 1e7) makes
a forward comparison of two float64 inverses meaningless, and there the equation Lambda A = I is
checked instead (backward error ||A Lambda - I|| / (||A|| ||Lambda||) <= 1e-9, A Pinocchio's), as
tests/algorithms/test_ill_conditioned_reference.py does for the ill-conditioned robots.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from grid_core import Reference
from grid_core.errors import InputError
from grid_core.testing import assert_close, random_state
from grid_algorithms.operational_space_inertia import RANK_TOL
from tests.generated import CODEGEN_ROBOTS
from tests.pin_bridge import FLOATING_MIMIC, pin_frame_id, pin_minv, pin_model, to_pin_q

REL = 1e-9
FORWARD_COND = 1e6
CASES = [(name, None) for name in CODEGEN_ROBOTS] + list(FLOATING_MIMIC)
ROWS = {"linear": slice(0, 3), "all": slice(0, 6)}


def pin_projected_inverse_inertia(robot, q, frames, rows) -> tuple[np.ndarray, float]:
    """Pinocchio's J Minv J^T of each frame, over ``rows``, and ||Minv||_2."""
    import pinocchio as pin

    model = pin_model(robot)
    data = model.createData()
    pq = to_pin_q(robot, q)
    Minv = pin_minv(robot, q)
    pin.computeJointJacobians(model, data, pq)
    pin.updateFramePlacements(model, data)
    out = []
    for f in frames:
        J = pin.getFrameJacobian(model, data, pin_frame_id(model, f), pin.LOCAL_WORLD_ALIGNED)[ROWS[rows]]
        out.append(J @ Minv @ J.T)
    return np.stack(out), np.linalg.norm(Minv, 2)


def has_inverse(A, scale) -> bool:
    e = np.linalg.eigvalsh(A)
    return e[0] > RANK_TOL * max(e[-1], scale)


def condition(A) -> float:
    e = np.linalg.eigvalsh(A)
    return np.inf if e[0] <= 0 else float(e[-1] / e[0])


def check_frames(ref, robot, q, frames, rows) -> int:
    """Compare ``frames`` (Frame objects) with Pinocchio at ``q``: refused by name where its
    J Minv J^T has no inverse, equal (forward or backward, by conditioning) elsewhere; the number
    compared."""
    A, scale = pin_projected_inverse_inertia(robot, q, frames, rows)
    good = [k for k, a in enumerate(A) if has_inverse(a, scale)]
    for k in sorted(set(range(len(frames))) - set(good)):  # rank-deficient: refused, by name
        with pytest.raises(InputError, match=rf"frame '{re.escape(frames[k].name)}' of robot .* rows='{rows}'"):
            ref.operational_space_inertia(q, [frames[k]], rows=rows)
    if not good:
        return 0
    Lam = ref.operational_space_inertia(q, [frames[k] for k in good], rows=rows)
    assert Lam.shape == (len(good), len(A[0]), len(A[0]))
    for L, k in zip(Lam, good):
        cond = condition(A[k])
        what = f"{robot.name}: frame {frames[k].name}, rows={rows}, cond {cond:.1e}"
        if cond <= FORWARD_COND:
            assert_close(L, np.linalg.inv(A[k]), REL, what)
        else:
            backward = np.linalg.norm(A[k] @ L - np.eye(len(L))) / (np.linalg.norm(A[k]) * np.linalg.norm(L))
            assert backward <= REL, f"{what}: backward error {backward:.1e}"
    return len(good)


@pytest.mark.parametrize("name, floating", CASES)
def test_operational_space_inertia_matches_pinocchio(name, floating, robot_cache, rng):
    robot = robot_cache(name, floating)
    ref = Reference(robot)
    leaves = list(robot.leaf_frames())  # the default
    compared = 0
    for k in range(10):
        q, _, _ = random_state(robot, rng)
        for rows in ROWS:
            compared += check_frames(ref, robot, q, leaves, rows)
            try:
                default = ref.operational_space_inertia(q, rows=rows)
            except InputError:  # the default takes them all: refused when one is
                with pytest.raises(InputError):
                    ref.operational_space_inertia(q, leaves, rows=rows)
            else:
                assert np.array_equal(default, ref.operational_space_inertia(q, leaves, rows=rows))
            if k < 2:  # every frame (up to 163 on pr2): a few states suffice
                compared += check_frames(ref, robot, q, list(robot.frames), rows)
    # every robot has frames with an operational-space inertia but hyq (three joints per leg, every
    # frame on a knee or hip axis) and the two-link arm (two joints)
    assert compared or name in ("hyq", "erd:double_pendulum_continuous")


def test_a_frame_on_too_few_joints_is_refused_by_name(robot_cache, rng):
    iiwa = robot_cache("iiwa14")
    q, _, _ = random_state(iiwa, rng)
    # the first link of a fixed arm turns about one axis through its origin: rank 1 of 6
    with pytest.raises(InputError, match=r"^operational_space_inertia: frame 'iiwa_link_1' of robot 'iiwa14' has no "
                                         r"operational-space inertia over rows='all': J Minv J\^T has rank 1 < 6 .*"
                                         r"choose another frame or rows='linear'$"):
        Reference(iiwa).operational_space_inertia(q, ["iiwa_link_7", "iiwa_link_1"])
    # the second link's origin lies on the axes of both joints that support it: its linear rows are
    # rounding noise (refused though their condition number may look fine)
    with pytest.raises(InputError, match=r"frame 'iiwa_link_2' .* rows='linear': J Minv J\^T has rank 0 < 3 "):
        Reference(iiwa).operational_space_inertia(q, "iiwa_link_2", rows="linear")
    # the fourth's (on the elbow) moves in two directions only: rank 2 of 3
    with pytest.raises(InputError, match=r"frame 'iiwa_link_4' .* rows='linear': J Minv J\^T has rank 2 < 3 "):
        Reference(iiwa).operational_space_inertia(q, "iiwa_link_4", rows="linear")
    # a two-link arm's tip (its default frame) sits on the second joint's axis: one joint moves it
    pend = robot_cache("erd:double_pendulum_continuous")
    with pytest.raises(InputError, match=r"frame 'link2' .* rank 1 < 3 .*choose another frame$"):
        Reference(pend).operational_space_inertia(np.array([0.3, -0.4]), rows="linear")
    with pytest.raises(InputError, match=r"argument 'rows' must be one of 'linear', 'all', got 'angular'"):
        Reference(iiwa).operational_space_inertia(q, rows="angular")


def test_outputs_follow_the_options(robot_cache):
    from grid_core import algorithms

    robot = robot_cache("go2")
    alg = algorithms()["operational_space_inertia"]
    assert [p.name for p in alg.inputs(robot)] == ["q", "frames", "rows"]
    assert alg.outputs(robot)[0].shape == (4, 6, 6)  # go2's four feet, all six rows
    assert alg.outputs(robot, frames=["base", "FL_calf"], rows="linear")[0].shape == (2, 3, 3)
