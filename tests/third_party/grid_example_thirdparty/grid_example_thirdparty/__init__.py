"""An example third-party GRiD plugin: one algorithm and one robot loader.

It is registered exactly as GRiD's built-ins are: the entry point
``example_thirdparty`` of the group ``grid`` names this module, whose hook
implementations return the classes below.

* ``total_mass``: the robot's total mass (every link, those fixed to the world
  included), a float64 reference and its parallelism review; no GPU emitter yet.
* ``twolink:arm``: a planar two-link arm built in code with
  :func:`grid_core.model.build_robot` (no URDF).
"""

from __future__ import annotations

import numpy as np

from grid_core import Algorithm, Port, RobotLoader, hookimpl
from grid_core.errors import RobotNotFoundError
from grid_core.model import Joint, JointType, Link, build_robot
from grid_core.review import ParallelismReview, not_applicable, todo


class TotalMass(Algorithm):
    name = "total_mass"
    summary = "total mass of the robot, every link included (kg)"
    math = r":math:`m = \sum_{\text{links } l} m_l`, independent of the configuration."
    review = ParallelismReview(
        P1=not_applicable("no tree recursion: a sum over links"),
        P2=not_applicable("one scalar output; no independent columns"),
        P3=not_applicable("nothing depends on the state: the whole result is a robot constant"),
        P4=todo("fold the sum offline into one constant of the header"),
    )

    def inputs(self, robot):
        return (Port("q", (robot.nq,), "joint configuration (the mass does not depend on it)"),)

    def outputs(self, robot):
        return (Port("mass", (1,), "total mass, kg"),)

    def reference(self, ctx, q):
        return np.array([sum(link.mass for link in ctx.robot.links)])


def _rod(name: str, mass: float, length: float) -> Link:
    """A thin uniform rod along x, from its joint to ``length``."""
    moment = mass * length**2 / 12.0
    return Link(name=name, mass=mass, com=[length / 2, 0, 0], inertia=np.diag([1e-4, moment, moment]))


class TwoLinkLoader(RobotLoader):
    name = "twolink"
    summary = "a planar two-link arm built in code: twolink:arm"

    def load(self, source, *, floating_base, strict_inertia):
        if source != "arm":
            raise RobotNotFoundError(f"twolink:{source}: unknown; this loader builds 'twolink:arm'")
        links = [Link(name="base", mass=1.0, inertia=np.eye(3) * 1e-3), _rod("upper", 1.0, 0.5),
                 _rod("fore", 0.5, 0.4)]
        joints = [
            Joint(name="shoulder", type=JointType.REVOLUTE, parent="base", child="upper",
                  axis=[0, 0, 1], lower=-3.0, upper=3.0),
            Joint(name="elbow", type=JointType.REVOLUTE, parent="upper", child="fore",
                  origin_xyz=[0.5, 0, 0], axis=[0, 0, 1], lower=-3.0, upper=3.0),
        ]
        return build_robot("twolink_arm", links, joints, floating_base=floating_base,
                           strict_inertia=strict_inertia, source="twolink:arm")


@hookimpl
def grid_register_algorithms():
    return [TotalMass]


@hookimpl
def grid_register_robot_loaders():
    return [TwoLinkLoader]
