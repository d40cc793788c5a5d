"""Mimic joints as linear constraints on the relaxed tree (a helper of the ABA-type references).

A recursion that divides by a joint's articulated inertia (ABA, Carpentier's
Minv) needs every joint to own its coordinate.  Such a recursion runs on the
*relaxed* tree, where each mimic joint is a free joint with a coordinate of its
own, and the mimic relations are then imposed as constraints.

Relaxed velocities ``v_r = G v`` (``G``: the mimicked joint's column, times the
multiplier, on each mimic row); the constraints ``C v_r = 0`` (one row per mimic
joint: ``v_mimic - multiplier * v_mimicked``) hold exactly on the range of ``G``,
and ``L`` (the rows of the owned coordinates) is a left inverse of ``G``.  With
``M_r`` the relaxed inertia, ``Y = M_r^-1 C^T`` and ``K = C Y`` (one row and
column per mimic joint),

    G (G^T M_r G)^-1 G^T = M_r^-1 - Y K^-1 Y^T,

so ``M^-1 = L (M_r^-1 - Y K^-1 Y^T) L^T`` and forward dynamics is
``qdd = L (a_r - Y K^-1 C a_r)`` with ``a_r`` the relaxed forward dynamics under
``L^T tau``.  The only inverse taken is ``K``'s, of the size of the number of
mimic joints.  On a robot without mimic joints the relaxed tree is the robot
and nothing is corrected.  (The relaxed recursion needs each mimic joint's
subtree to carry inertia about its axis, as every real gripper finger does.)
"""

from __future__ import annotations

import attrs
import numpy as np

from grid_core.model import Robot
from grid_core.model.joints import joint_nv


@attrs.frozen
class Relaxation:
    index: tuple[int, ...]
    """First relaxed coordinate of each body (body order, so a subtree's columns are contiguous)."""
    width: tuple[int, ...]
    """Relaxed coordinates of each body (6 for a free-flyer, else 1)."""
    end: tuple[int, ...]
    """One past the last relaxed coordinate of each body's subtree."""
    nv: int
    """Number of relaxed coordinates."""
    own: np.ndarray = attrs.field(eq=False)
    """``L``: the relaxed coordinates that are the robot's v, in v order."""
    C: np.ndarray = attrs.field(eq=False)
    """Constraint rows ``C v_r = 0``, one per mimic joint."""

    def tau(self, tau: np.ndarray) -> np.ndarray:
        """``L^T tau``: the joint forces on the relaxed coordinates (none on mimic joints)."""
        out = np.zeros(self.nv)
        out[self.own] = tau
        return out

    def constrain(self, A: np.ndarray, Y: np.ndarray) -> np.ndarray:
        """``L (A - Y K^-1 C A)``: impose the constraints on relaxed accelerations ``A``
        (a vector or columns), ``Y = M_r^-1 C^T``."""
        if len(self.C):
            A = A - Y @ np.linalg.solve(self.C @ Y, self.C @ A)
        return A[self.own]


def relaxation(robot: Robot) -> Relaxation:
    """The relaxed tree of ``robot``: every joint, mimic or not, owns its coordinates."""
    width = [joint_nv(b) for b in robot.bodies]
    index = np.concatenate([[0], np.cumsum(width)[:-1]]).astype(int).tolist()
    nv = int(sum(width))
    own = np.zeros(robot.nv, dtype=int)
    rows = []
    for b, r, w in zip(robot.bodies, index, width):
        if b.mimic is None:
            own[b.v_index : b.v_index + w] = np.arange(r, r + w)
        else:
            row = np.zeros(nv)
            row[r] = 1.0
            row[index[b.mimic.body]] -= b.mimic.multiplier
            rows.append(row)
    C = np.array(rows).reshape(len(rows), nv)
    end = tuple(index[s[-1]] + width[s[-1]] for s in robot.topology.subtree)
    return Relaxation(tuple(index), tuple(width), end, nv, own, C)
