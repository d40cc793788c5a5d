"""The robot model: what a loader produces and every algorithm consumes.

Two levels of description live here:

* :class:`Link` and :class:`Joint` are the description as written (one per URDF
  ``<link>`` / ``<joint>``), validated but not yet interpreted.
* :class:`Body` and :class:`Frame` are the dynamic model after interpretation:
  fixed joints merged into their parent body (their frames kept addressable),
  joints ordered as Pinocchio orders them, q / v indices assigned.

Everything is a frozen attrs value; numpy arrays held here are read-only.
"""

from __future__ import annotations

import enum
import functools
import hashlib
from typing import Iterable

import attrs
import numpy as np

from .topology import Topology

QUATERNION_TOLERANCE = 1e-3
"""How far from 1 a free-flyer quaternion's norm may be (float32 rounding and integration drift
stay far below it; a zero or unnormalised quaternion is refused, naming the input)."""


def _frozen_array(value) -> np.ndarray:
    arr = np.array(value, dtype=np.float64)
    arr.setflags(write=False)
    return arr


def _array_field():
    return attrs.field(converter=_frozen_array, eq=attrs.cmp_using(eq=np.array_equal))


class JointType(enum.Enum):
    """The joint kinds GRiD models (URDF names, plus ``floating`` for the free-flyer)."""

    REVOLUTE = "revolute"
    CONTINUOUS = "continuous"
    PRISMATIC = "prismatic"
    FIXED = "fixed"
    FLOATING = "floating"

    @property
    def movable(self) -> bool:
        return self is not JointType.FIXED


@attrs.frozen
class Mimic:
    """``q_this = multiplier * q_joint + offset`` (URDF ``<mimic>``, Pinocchio's mimic model)."""

    joint: str
    multiplier: float = 1.0
    offset: float = 0.0


@attrs.frozen
class Link:
    """A URDF link: its inertial data in the link frame.

    ``com`` is the centre of mass and ``inertia`` the 3x3 rotational inertia about
    it, both expressed in the link frame (the URDF ``<inertial><origin rpy>`` is
    already applied).
    """

    name: str
    mass: float = 0.0
    com: np.ndarray = _array_field()
    inertia: np.ndarray = _array_field()

    @com.default
    def _com_default(self):
        return np.zeros(3)

    @inertia.default
    def _inertia_default(self):
        return np.zeros((3, 3))


@attrs.frozen
class Joint:
    """A URDF joint, as written: placement of the child frame in the parent link frame."""

    name: str
    type: JointType
    parent: str
    child: str
    origin_xyz: np.ndarray = _array_field()
    origin_rpy: np.ndarray = _array_field()
    axis: np.ndarray = _array_field()
    lower: float | None = None
    upper: float | None = None
    effort: float | None = None
    velocity: float | None = None
    mimic: Mimic | None = None

    @origin_xyz.default
    def _xyz_default(self):
        return np.zeros(3)

    @origin_rpy.default
    def _rpy_default(self):
        return np.zeros(3)

    @axis.default
    def _axis_default(self):
        return np.array([1.0, 0.0, 0.0])


@attrs.frozen
class MimicOf:
    """A body whose joint mimics another body's: ``q = multiplier * q[body] + offset``."""

    body: int
    multiplier: float
    offset: float


@attrs.frozen
class Body:
    """One moving rigid body of the dynamic model (fixed-joint children merged in).

    ``Xtree`` is the Plücker transform from the parent body's frame to this body's
    joint frame at zero configuration; the joint motion ``XJ(q)`` follows it, so
    ``X_parent_to_body = XJ(q) @ Xtree``.  ``inertia`` is the spatial inertia in
    the body frame, merged links included.  ``axis`` is the joint axis in the
    joint frame (unit; unused for the free-flyer).
    """

    index: int
    name: str
    joint: Joint
    parent: int
    Xtree: np.ndarray = _array_field()
    inertia: np.ndarray = _array_field()
    axis: np.ndarray = _array_field()
    q_index: int = 0
    nq: int = 1
    v_index: int = 0
    nv: int = 1
    mimic: MimicOf | None = None
    links: tuple[str, ...] = ()

    @property
    def jtype(self) -> JointType:
        return self.joint.type

    @property
    def is_root(self) -> bool:
        return self.parent < 0


@attrs.frozen
class Frame:
    """An addressable frame: a link, a joint (movable or fixed) or the free-flyer.

    ``body`` is the index of the body it is rigidly attached to (-1 for the world)
    and ``X`` the Plücker transform from that body's frame to this frame.
    ``parent`` is the index in ``Robot.frames`` of the frame it hangs from in the
    description's tree (a link's: its parent joint; a joint's: its parent link; -1 at
    the top): a link no frame hangs from is a leaf (:meth:`Robot.leaf_frames`).
    """

    name: str
    kind: str  # "link", "joint" or "fixed_joint"
    body: int
    X: np.ndarray = _array_field()
    parent: int = -1


@attrs.frozen
class Robot:
    """A robot ready for the algorithms: bodies in Pinocchio's joint order.

    ``nq`` / ``nv`` and the q / v layout equal those of Pinocchio's model built
    from the same URDF (``JointModelFreeFlyer`` for a floating base, mimic joints
    as Pinocchio's mimic model), except that a continuous joint takes ONE angle
    in q where Pinocchio stores (cos, sin).
    """

    name: str
    bodies: tuple[Body, ...]
    frames: tuple[Frame, ...]
    links: tuple[Link, ...]
    joints: tuple[Joint, ...]
    floating_base: bool
    source: str = ""
    world_inertia: np.ndarray = attrs.field(
        factory=lambda: np.zeros((6, 6)), converter=_frozen_array, eq=attrs.cmp_using(eq=np.array_equal)
    )

    # -- sizes -------------------------------------------------------------------

    @property
    def num_bodies(self) -> int:
        return len(self.bodies)

    @property
    def nq(self) -> int:
        return sum(b.nq for b in self.bodies)

    @property
    def nv(self) -> int:
        return sum(b.nv for b in self.bodies)

    @property
    def joint_names(self) -> tuple[str, ...]:
        """The movable joints with coordinates of their own, in q order.

        The free-flyer root and mimic joints (which own no coordinate) are not among them.
        """
        return tuple(
            b.joint.name
            for b in self.bodies
            if b.mimic is None and b.jtype is not JointType.FLOATING
        )

    @property
    def has_mimic(self) -> bool:
        return any(b.mimic is not None for b in self.bodies)

    @property
    def mimic_joint_names(self) -> tuple[str, ...]:
        return tuple(b.joint.name for b in self.bodies if b.mimic is not None)

    @property
    def quaternion_indices(self) -> tuple[int, ...]:
        """Where each free-flyer's quaternion (x y z w) starts in q."""
        return tuple(b.q_index + 3 for b in self.bodies if b.jtype is JointType.FLOATING)

    @functools.cached_property
    def massless_joints(self) -> tuple[str, ...]:
        """The joints whose subtree carries no mass and no inertia: each makes a zero row of the
        mass matrix, which is then singular at every configuration (romeo's finger chains)."""
        carries = [bool(np.any(b.inertia)) for b in self.bodies]
        for b in reversed(self.bodies):  # children come after their parent
            if b.parent >= 0 and carries[b.index]:
                carries[b.parent] = True
        return tuple(b.joint.name for b in self.bodies if not carries[b.index] and b.nv)

    def neutral(self) -> np.ndarray:
        """The zero configuration (Pinocchio's ``neutral``): every joint at 0, a free-flyer at the
        origin with the identity quaternion (0, 0, 0, 1)."""
        q = np.zeros(self.nq)
        q[[i + 3 for i in self.quaternion_indices]] = 1.0
        return q

    def random_configuration(self, rng: np.random.Generator, n: int | None = None) -> np.ndarray:
        """A valid random configuration (or ``n`` of them): each joint uniform within its limits
        (in [-pi, pi] without limits, [-1, 1] m for a prismatic one), a free-flyer's position in
        [-1, 1] m and its quaternion uniform over the unit sphere."""
        shape = (self.nq,) if n is None else (n, self.nq)
        q = np.empty(shape)
        for b in self.bodies:
            if b.nq == 0:
                continue
            i = b.q_index
            if b.jtype is JointType.FLOATING:
                q[..., i:i + 3] = rng.uniform(-1.0, 1.0, shape[:-1] + (3,))
                quat = rng.normal(size=shape[:-1] + (4,))
                q[..., i + 3:i + 7] = quat / np.linalg.norm(quat, axis=-1, keepdims=True)
                continue
            j = b.joint
            bounded = j.lower is not None and j.upper is not None and j.lower < j.upper and \
                np.isfinite(j.lower) and np.isfinite(j.upper) and j.type is not JointType.CONTINUOUS
            span = 1.0 if j.type is JointType.PRISMATIC else np.pi
            lo, hi = (j.lower, j.upper) if bounded else (-span, span)
            q[..., i] = rng.uniform(lo, hi, shape[:-1])
        return q

    @functools.cached_property
    def topology(self) -> Topology:
        return Topology.from_parents([b.parent for b in self.bodies])

    # -- lookup ------------------------------------------------------------------

    def body(self, name: str) -> Body:
        """The body whose link or joint is called ``name``."""
        for b in self.bodies:
            if b.name == name or b.joint.name == name:
                return b
        raise KeyError(name)

    def frame(self, name: str) -> Frame:
        for f in self.frames:
            if f.name == name:
                return f
        raise KeyError(name)

    def leaf_bodies(self) -> tuple[int, ...]:
        """Bodies without children (a body's merged fixed-joint links included)."""
        return self.topology.leaves

    @functools.cached_property
    def _leaf_frames(self) -> tuple[Frame, ...]:
        parents = {f.parent for f in self.frames}
        tips = set(self.leaf_bodies())
        return tuple(f for k, f in enumerate(self.frames) if f.kind == "link" and k not in parents and f.body in tips)

    def leaf_frames(self) -> tuple[Frame, ...]:
        """The default end effectors, in ``frames`` order: the leaf links of the description's tree
        (no child joint, movable or fixed: a quadruped's feet, an arm's tool frame, fixed-joint links
        included) that ride on a leaf body.  A leaf link on an inner body is a sensor or a part
        hung off the chain (go2's motor rotors and imu, pr2's base laser), not a tip: left out."""
        return self._leaf_frames

    # -- identity ----------------------------------------------------------------

    @functools.cached_property
    def digest(self) -> str:
        """A sha256 of everything that affects generated code (names, numbers, layout)."""
        h = hashlib.sha256()

        def put(*items: Iterable) -> None:
            for item in items:
                if isinstance(item, np.ndarray):
                    h.update(np.ascontiguousarray(item, dtype="<f8").tobytes())
                else:
                    h.update(repr(item).encode())
                h.update(b"\x00")

        put(self.name, self.floating_base)
        for b in self.bodies:
            put(b.index, b.name, b.joint.name, b.jtype.value, b.parent, b.Xtree, b.inertia, b.axis)
            put(b.q_index, b.nq, b.v_index, b.nv, b.mimic)
        # A frame's parent (the description's tree, hence the default frames) is left out: the
        # generated code sees the frames chosen (name, body, placement), and the measured
        # tuning and resource records keyed by this digest stay valid.
        for f in self.frames:
            put(f.name, f.kind, f.body, f.X)
        return h.hexdigest()

    def __repr__(self) -> str:  # the generated one would print every array
        base = "floating" if self.floating_base else "fixed"
        return f"<Robot {self.name!r}: {self.num_bodies} bodies, nq={self.nq}, nv={self.nv}, {base} base>"
