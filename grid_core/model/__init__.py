"""Robot model: frozen descriptions, spatial algebra, joint models and topology tables.

Imports nothing of the code generator (DESIGN §2).
"""

from . import joints, spatial
from .builder import ROOT_JOINT_NAME, build_robot, check_link_inertia
from .robot import Body, Frame, Joint, JointType, Link, Mimic, MimicOf, Robot
from .topology import Topology

__all__ = [
    "Body",
    "Frame",
    "Joint",
    "JointType",
    "Link",
    "Mimic",
    "MimicOf",
    "ROOT_JOINT_NAME",
    "Robot",
    "Topology",
    "build_robot",
    "check_link_inertia",
    "joints",
    "spatial",
]
