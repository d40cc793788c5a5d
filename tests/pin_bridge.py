"""Bridge to Pinocchio for the tests: build its model from the same URDF and
convert configurations and spatial quantities between the conventions.

* Continuous joints take one angle in our q, (cos, sin) in Pinocchio's.
* Spatial motion/force vectors are [angular; linear] for us (Featherstone),
  [linear; angular] for Pinocchio.
* Mimic joints: Pinocchio's ``buildModelFromUrdf(..., mimic=True)``.
"""

from __future__ import annotations

import importlib.resources
from functools import lru_cache

import numpy as np

from grid_core.model import JointType, Robot


def urdf_path(robot: Robot) -> str:
    src = robot.source
    if src.startswith("bundled:"):
        from grid_plugins.bundled import manifest

        entry = manifest()[src.split(":", 1)[1]]
        return str(importlib.resources.files("grid_robots").joinpath(entry["file"]))
    if src.startswith("erd:"):
        from grid_plugins.erd import resolve

        return str(resolve(src.split(":", 1)[1]))
    return src


@lru_cache(maxsize=None)
def _pin_model(path: str, floating: bool, mimic: bool):
    import pinocchio as pin

    if floating:
        return pin.buildModelFromUrdf(path, pin.JointModelFreeFlyer(), mimic=mimic)
    return pin.buildModelFromUrdf(path, mimic=mimic)


def pin_model(robot: Robot):
    """Pinocchio's model of the same URDF (free-flyer if ours floats; mimic on)."""
    return _pin_model(urdf_path(robot), robot.floating_base, True)


def to_pin_q(robot: Robot, q: np.ndarray) -> np.ndarray:
    """Our q -> Pinocchio's q (continuous joints as cos/sin)."""
    out = []
    for b in robot.bodies:
        if b.mimic is not None:
            continue
        qj = q[b.q_index : b.q_index + b.nq]
        if b.jtype is JointType.CONTINUOUS:
            out.extend([np.cos(qj[0]), np.sin(qj[0])])
        else:
            out.extend(qj)
    return np.array(out)


def swap6(v: np.ndarray) -> np.ndarray:
    """[a; b] <-> [b; a] on the last axis of 6-vectors (Featherstone <-> Pinocchio)."""
    v = np.asarray(v)
    return np.concatenate([v[..., 3:], v[..., :3]], axis=-1)


def swap66(X: np.ndarray) -> np.ndarray:
    """Reorder a 6x6 spatial matrix between [ang; lin] and [lin; ang]."""
    P = np.block([[np.zeros((3, 3)), np.eye(3)], [np.eye(3), np.zeros((3, 3))]])
    return P @ X @ P
