"""Shared cases and Pinocchio helpers of the second-order reference tests.

CASES: 9 robots of the catalogue plus a floating panda -- fixed arms (iiwa14, a continuous
double pendulum), fixed legged trees (hyq, atlas), floating bases (go2, g1, solo12, floating
panda), mimic joints (panda, pr2: prismatic torso, continuous joints, ten mimic fingers;
floating panda: mimic AND free-flyer).  icub is left out (ill-conditioned: see
tests/pin_bridge.py ILL_CONDITIONED).
"""

from __future__ import annotations

import numpy as np

from grid_core.model import JointType
from grid_core.model.joints import body_q
from tests.pin_bridge import _pin_model, pin_forces, pin_model, to_pin_q, urdf_path

CASES = [
    ("iiwa14", None),
    ("hyq", None),
    ("atlas", None),
    ("go2", None),
    ("g1", None),
    ("erd:solo12", None),
    ("erd:double_pendulum_continuous", None),
    ("erd:panda", None),
    ("erd:pr2", None),
    ("erd:panda", True),
]
STATES = 5


def case_id(case) -> str:
    name, floating = case
    return name + ("-floating" if floating else "")


def relaxed_pin_q(robot, q) -> np.ndarray:
    """Our q -> the q of Pinocchio's model built WITHOUT mimic (every mimic joint free,
    at ``multiplier * q_mimicked + offset``; continuous joints as cos/sin)."""
    out = []
    for b in robot.bodies:
        qj = body_q(b, q)
        out.extend([np.cos(qj[0]), np.sin(qj[0])] if b.jtype is JointType.CONTINUOUS else qj)
    return np.array(out)


def relaxed_map(robot) -> np.ndarray:
    """``G`` with ``v_relaxed = G v`` (body order, one column per joint DOF), built here
    independently of the algorithms."""
    rows = []
    for b in robot.bodies:
        width = 6 if b.jtype is JointType.FLOATING else 1
        for k in range(width):
            row = np.zeros(robot.nv)
            row[b.v_index + k] = b.mimic.multiplier if b.mimic is not None else 1.0
            rows.append(row)
    return np.array(rows)


def pin_rnea_derivatives(robot, q, qd, qdd, f_ext):
    """Pinocchio's ``computeRNEADerivatives`` ``(dtau_dq, dtau_dqd)``, copied.

    Pinocchio 4.1 refuses derivatives on a mimic model; there they come from its model
    built without mimic (the relaxed tree, every mimic joint free) by the chain rule of
    ``tau(q, qd, qdd) = G^T tau_r(G q + offset, G qd, G qdd)``: ``G^T dtau_r G``.
    """
    import pinocchio as pin

    if not robot.has_mimic:
        model = pin_model(robot)
        data = model.createData()
        dq, dqd, _ = pin.computeRNEADerivatives(model, data, to_pin_q(robot, q), qd, qdd, pin_forces(f_ext))
        return dq.copy(), dqd.copy()  # views into data
    model = _pin_model(urdf_path(robot), robot.floating_base, False)
    data = model.createData()
    G = relaxed_map(robot)
    dq, dqd, _ = pin.computeRNEADerivatives(model, data, relaxed_pin_q(robot, q), G @ qd, G @ qdd,
                                            pin_forces(f_ext))
    return G.T @ dq @ G, G.T @ dqd @ G


def pin_crba(robot, q) -> np.ndarray:
    import pinocchio as pin

    from tests.pin_bridge import symmetrise_upper

    model = pin_model(robot)
    return symmetrise_upper(pin.crba(model, model.createData(), to_pin_q(robot, q)))
