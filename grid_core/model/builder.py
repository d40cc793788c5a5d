"""Build a :class:`Robot` from links and joints (what any loader hands over).

This is where the description is interpreted, exactly as Pinocchio's
``buildModelFromUrdf`` interprets a URDF:

* the tree is walked depth first from the root link, the children of a link
  visited in the byte order of their joints' names (urdfdom keeps joints in a
  ``std::map``, so Pinocchio sees them so), or in the order given
  (``children_by_name=False``: an MJCF's file order, which is MuJoCo's);
* a fixed joint merges its child link into the body it hangs from (the inertia
  moved into that body's frame), its frames stay addressable;
* each movable joint starts a new body whose ``Xtree`` composes the placements
  of every fixed joint crossed since the parent body;
* a floating base adds a free-flyer ``root_joint`` (nq 7, nv 6) under the root link;
* a mimic joint makes a body with no coordinates of its own (nq = nv = 0) that
  moves with the joint it mimics.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

import attrs

from ..errors import GridWarning, InertiaWarning, RobotModelError, UnsupportedFeatureError
from . import spatial
from .robot import Body, Frame, Joint, JointType, Link, MimicOf, Robot

ROOT_JOINT_NAME = "root_joint"

# Tolerances of the inertia checks: relative to the largest principal moment, plus an
# absolute floor (kg m^2) under which a moment is rounding noise (icub's head: -2e-35).
_NEG_EIG_TOL = 1e-9
_TRIANGLE_TOL = 1e-9
_ABS_TOL = 1e-12
# A negative principal moment under this fraction of the robot's largest is negligible (a warning).
_NEGLIGIBLE = 1e-6


def _where(source: str) -> str:
    return f"{source}: " if source else ""


def check_link_inertia(
    link: Link, *, source: str = "", strict: bool = False, known_defect: bool = False, robot_scale: float = 0.0
) -> None:
    """Reject a physically impossible link inertia; warn on a doubtful one.

    Negative mass, non-finite values and a rotational inertia with a negative
    eigenvalue are errors.  A principal-moment triangle violation is what real
    robots (icub, romeo) carry and Pinocchio accepts: a warning, or an error with
    ``strict``.  ``known_defect`` marks a link whose negative eigenvalue is a
    documented defect of a published file kept for comparability (the bundled
    benchmark atlas): a warning instead of an error, unless ``strict``.

    Each check is relative to a scale: rounding to that of the inertia itself (its
    largest principal moment), and a negative eigenvalue is only an error where it
    matters, above ``_NEGLIGIBLE`` times ``robot_scale`` (the robot's largest principal
    moment): tiago's 1e-6 kg antennas, whose placeholder inertias have an eigenvalue of
    -3.5e-8 kg m^2 against the robot's ~1 kg m^2, load with a warning, as Pinocchio loads them.
    """
    where = _where(source)
    values = np.concatenate([[link.mass], link.com, link.inertia.ravel()])
    if not np.all(np.isfinite(values)):
        raise RobotModelError(f"{where}link '{link.name}': inertial data is not finite")
    if link.mass < 0:
        raise RobotModelError(f"{where}link '{link.name}': negative mass {link.mass:g}")
    I = link.inertia
    if not np.allclose(I, I.T, rtol=0, atol=1e-12 * max(1.0, np.abs(I).max())):
        raise RobotModelError(f"{where}link '{link.name}': inertia is not symmetric")
    eig = np.linalg.eigvalsh(I)
    scale = max(abs(eig).max(), np.finfo(float).tiny)
    if eig[0] < -(_NEG_EIG_TOL * scale + _ABS_TOL):
        msg = (
            f"{where}link '{link.name}': inertia has a negative eigenvalue {eig[0]:.6g} "
            "(not positive semi-definite)"
        )
        negligible = -eig[0] <= _NEGLIGIBLE * robot_scale
        if strict or not (known_defect or negligible):
            raise RobotModelError(msg)
        why = "a known defect of this published file" if known_defect else \
            f"negligible at the robot's scale, largest principal moment {robot_scale:.3g}"
        warnings.warn(InertiaWarning(f"{msg} ({why})", subject=link.name, topic="negative inertia eigenvalue"),
                      stacklevel=3)
        return
    if eig[0] + eig[1] < eig[2] - (_TRIANGLE_TOL * scale + _ABS_TOL):
        msg = (
            f"{where}link '{link.name}': principal moments {eig[0]:.6g}, {eig[1]:.6g}, "
            f"{eig[2]:.6g} violate the triangle inequality"
        )
        if strict:
            raise RobotModelError(msg + " (strict_inertia)")
        warnings.warn(InertiaWarning(msg, subject=link.name, topic="triangle inequality"), stacklevel=3)


def _check_tree(links: Sequence[Link], joints: Sequence[Joint], source: str) -> str:
    """Validate names and the tree shape; return the root link's name."""
    where = _where(source)
    if not links:
        raise RobotModelError(f"{where}the robot has no <link>")
    link_names: set[str] = set()
    for link in links:
        if not link.name:
            raise RobotModelError(f"{where}a <link> has an empty name")
        if link.name in link_names:
            raise RobotModelError(f"{where}link '{link.name}' is defined twice")
        link_names.add(link.name)
    joint_names: set[str] = set()
    parent_of: dict[str, str] = {}
    for j in joints:
        if not j.name:
            raise RobotModelError(f"{where}a <joint> has an empty name")
        if j.name in joint_names:
            raise RobotModelError(f"{where}joint '{j.name}' is defined twice")
        joint_names.add(j.name)
        for role, ln in (("parent", j.parent), ("child", j.child)):
            if ln not in link_names:
                raise RobotModelError(f"{where}joint '{j.name}': {role} link '{ln}' is not defined")
        if j.parent == j.child:
            raise RobotModelError(f"{where}joint '{j.name}': link '{j.child}' is its own parent (a cycle)")
        if j.child in parent_of:
            raise RobotModelError(
                f"{where}link '{j.child}' is the child of joints '{parent_of[j.child]}' and "
                f"'{j.name}' (a closed loop: GRiD models trees)"
            )
        parent_of[j.child] = j.name
    roots = [ln.name for ln in links if ln.name not in parent_of]
    if not roots:
        raise RobotModelError(f"{where}every link has a parent joint: the joints form a cycle")
    if len(roots) > 1:
        shown = ", ".join(f"'{r}'" for r in roots[:5])
        raise RobotModelError(f"{where}several root links ({shown}): a URDF must form one tree")
    # every link must be reachable from the root; the rest sit on cycles
    by_parent: dict[str, list[Joint]] = {}
    for j in joints:
        by_parent.setdefault(j.parent, []).append(j)
    seen, stack = {roots[0]}, [roots[0]]
    while stack:
        for j in by_parent.get(stack.pop(), ()):
            seen.add(j.child)
            stack.append(j.child)
    if len(seen) != len(links):
        lost = sorted(link_names - seen)
        raise RobotModelError(
            f"{where}links {', '.join(repr(x) for x in lost[:5])} are not reachable from root "
            f"'{roots[0]}': the joints form a cycle"
        )
    return roots[0]


def _check_joint(j: Joint, source: str) -> None:
    where = _where(source)
    numbers = np.concatenate([j.origin_xyz, j.origin_rpy, j.axis])
    if not np.all(np.isfinite(numbers)):
        raise RobotModelError(f"{where}joint '{j.name}': origin or axis is not finite")
    for attr in ("lower", "upper", "effort", "velocity"):
        v = getattr(j, attr)
        if v is not None and np.isnan(v):
            raise RobotModelError(f"{where}joint '{j.name}': limit {attr} is NaN")
    if j.type in (JointType.REVOLUTE, JointType.CONTINUOUS, JointType.PRISMATIC):
        if np.linalg.norm(j.axis) < 1e-12:
            raise RobotModelError(f"{where}joint '{j.name}': axis is zero")
    if j.mimic is not None and j.type is JointType.FIXED:
        return  # dropped by the caller, with a warning
    if j.mimic is not None:
        m = j.mimic
        if not (np.isfinite(m.multiplier) and np.isfinite(m.offset)):
            raise RobotModelError(f"{where}joint '{j.name}': mimic multiplier/offset not finite")
        if j.type not in (JointType.REVOLUTE, JointType.CONTINUOUS, JointType.PRISMATIC):
            raise RobotModelError(f"{where}joint '{j.name}': a {j.type.value} joint cannot mimic")


def _check_mimics(joints: Sequence[Joint], source: str) -> None:
    where = _where(source)
    by_name = {j.name: j for j in joints}
    for j in joints:
        if j.mimic is None:
            continue
        target = by_name.get(j.mimic.joint)
        if target is None:
            raise RobotModelError(f"{where}joint '{j.name}' mimics unknown joint '{j.mimic.joint}'")
        # follow the chain: a cycle is an error, a chain of mimics is unsupported
        chain, cur = [j.name], target
        while cur.mimic is not None:
            if cur.name in chain:
                raise RobotModelError(
                    f"{where}mimic cycle: {' -> '.join(chain + [cur.name])}"
                )
            chain.append(cur.name)
            cur = by_name.get(cur.mimic.joint)
            if cur is None:
                raise RobotModelError(f"{where}joint '{chain[-1]}' mimics an unknown joint")
        if len(chain) > 1:
            raise UnsupportedFeatureError(
                f"{where}joint '{j.name}' mimics '{target.name}', itself a mimic joint "
                "(Pinocchio's mimic model needs the mimicked joint to own its coordinate)"
            )
        if target.type not in (JointType.REVOLUTE, JointType.CONTINUOUS, JointType.PRISMATIC):
            raise RobotModelError(
                f"{where}joint '{j.name}' mimics '{target.name}', a {target.type.value} joint"
            )
        if (target.type is JointType.PRISMATIC) != (j.type is JointType.PRISMATIC):
            raise UnsupportedFeatureError(
                f"{where}joint '{j.name}' ({j.type.value}) mimics '{target.name}' "
                f"({target.type.value}): mixed revolute/prismatic mimics are not supported"
            )


def _origin_X(j: Joint) -> np.ndarray:
    """Parent-link frame -> child-link frame at q = 0."""
    return spatial.plux(spatial.rpy_to_matrix(j.origin_rpy).T, j.origin_xyz)


def _link_inertia(link: Link) -> np.ndarray:
    return spatial.mcI(link.mass, link.com, link.inertia)


def build_robot(
    name: str,
    links: Sequence[Link],
    joints: Sequence[Joint],
    *,
    floating_base: bool = False,
    strict_inertia: bool = False,
    known_inertia_defects: frozenset[str] = frozenset(),
    source: str = "",
    children_by_name: bool = True,
    massless_links: frozenset[str] = frozenset(),
) -> Robot:
    """Interpret links and joints as Pinocchio does (see the module docstring).

    ``known_inertia_defects`` names links whose non-physical inertia is a known
    defect of a published file (see :func:`check_link_inertia`).
    ``children_by_name=False`` keeps each link's children in the order of ``joints``
    instead of sorting them by joint name.  ``massless_links`` names links that are
    massless by construction (the intermediate bodies a loader makes of a body with
    several joints): their bodies get no zero-mass warning.
    """
    links = tuple(links)
    joints = tuple(joints)
    where = _where(source)
    root = _check_tree(links, joints, source)
    for j in joints:
        _check_joint(j, source)
    fixed_mimics = [j.name for j in joints if j.mimic is not None and j.type is JointType.FIXED]
    if fixed_mimics:
        # Pinocchio ignores <mimic> on a fixed joint (talos' grippers); so do we, loudly.
        warnings.warn(GridWarning(f"{where}<mimic> ignored on fixed joint(s) {', '.join(fixed_mimics)}",
                                  subject=", ".join(fixed_mimics), topic="<mimic> on a fixed joint"), stacklevel=2)
        joints = tuple(attrs.evolve(j, mimic=None) if j.name in fixed_mimics else j for j in joints)
    for j in joints:
        if j.type is JointType.FLOATING and j.parent != root:
            raise UnsupportedFeatureError(
                f"{where}joint '{j.name}': a floating joint is only supported under the root link"
            )
    _check_mimics(joints, source)
    finite = [ln.inertia for ln in links if np.all(np.isfinite(ln.inertia))]
    robot_scale = max((float(np.abs(np.linalg.eigvalsh(0.5 * (I + I.T))).max()) for I in finite), default=0.0)
    for link in links:
        check_link_inertia(
            link, source=source, strict=strict_inertia, known_defect=link.name in known_inertia_defects,
            robot_scale=robot_scale,
        )

    link_by_name = {ln.name: ln for ln in links}
    children: dict[str, list[Joint]] = {}
    for j in joints:
        children.setdefault(j.parent, []).append(j)
    if children_by_name:
        for lst in children.values():
            lst.sort(key=lambda jj: jj.name.encode())

    # Mutable state of the walk; turned into frozen Bodies at the end.
    specs: list[dict] = []
    frames: list[Frame] = []
    world_inertia = np.zeros((6, 6))
    inertia_acc: list[np.ndarray] = []

    def add_inertia(body: int, X_bL: np.ndarray, link: Link) -> None:
        nonlocal world_inertia
        I = spatial.transform_inertia(X_bL, _link_inertia(link))
        if body < 0:
            world_inertia = world_inertia + I
        else:
            inertia_acc[body] = inertia_acc[body] + I

    def new_body(joint: Joint, parent: int, Xtree: np.ndarray, axis) -> int:
        specs.append(dict(joint=joint, parent=parent, Xtree=Xtree, axis=axis, links=[joint.child]))
        inertia_acc.append(np.zeros((6, 6)))
        return len(specs) - 1

    has_urdf_floating = any(j.type is JointType.FLOATING for j in joints)
    eye6 = np.eye(6)
    if floating_base and not has_urdf_floating:
        ff = Joint(name=ROOT_JOINT_NAME, type=JointType.FLOATING, parent="world", child=root)
        root_body = new_body(ff, -1, eye6, np.zeros(3))
        frames.append(Frame(ROOT_JOINT_NAME, "joint", root_body, eye6))
    else:
        root_body = -1

    # Depth-first walk; each item: (link name, body it is attached to, X body->link, the index
    # of the frame the link hangs from); each frame records its parent frame (leaves: no child).
    def walk(link_name: str, body: int, X_bL: np.ndarray, parent: int) -> None:
        here = len(frames)
        frames.append(Frame(link_name, "link", body, X_bL, parent))
        add_inertia(body, X_bL, link_by_name[link_name])
        for j in children.get(link_name, ()):
            X_LC = _origin_X(j)
            X = X_LC @ X_bL
            if j.type is JointType.FIXED:
                frames.append(Frame(j.name, "fixed_joint", body, X, here))
                if body >= 0:
                    specs[body]["links"].append(j.child)
                walk(j.child, body, X, len(frames) - 1)
            else:
                if j.type is JointType.FLOATING:
                    axis = np.zeros(3)
                else:
                    axis = j.axis / np.linalg.norm(j.axis)
                k = new_body(j, body, X, axis)
                frames.append(Frame(j.name, "joint", k, eye6, here))
                walk(j.child, k, eye6, len(frames) - 1)

    walk(root, root_body, eye6, len(frames) - 1)

    # q / v indices in body order; mimic bodies borrow the mimicked joint's.
    body_of_joint = {s["joint"].name: i for i, s in enumerate(specs)}
    q = v = 0
    for s in specs:
        jt = s["joint"].type
        if s["joint"].mimic is not None:
            s.update(nq=0, nv=0)
            continue
        nq, nv = (7, 6) if jt is JointType.FLOATING else (1, 1)
        s.update(q_index=q, nq=nq, v_index=v, nv=nv)
        q += nq
        v += nv
    bodies = []
    for i, s in enumerate(specs):
        mimic = None
        qi, vi = s.get("q_index", 0), s.get("v_index", 0)
        m = s["joint"].mimic
        if m is not None:
            tgt = body_of_joint[m.joint]
            mimic = MimicOf(tgt, float(m.multiplier), float(m.offset))
            qi, vi = specs[tgt]["q_index"], specs[tgt]["v_index"]
        I = inertia_acc[i]
        if I[5, 5] == 0.0 and s["joint"].child not in massless_links:
            msg = (
                f"{where}link '{s['joint'].child}' (body of joint '{s['joint'].name}') has zero mass"
            )
            if strict_inertia:
                raise RobotModelError(msg + " (strict_inertia)")
            warnings.warn(InertiaWarning(msg, subject=s["joint"].child, topic="zero mass"), stacklevel=2)
        bodies.append(
            Body(
                index=i,
                name=s["joint"].child,
                joint=s["joint"],
                parent=s["parent"],
                Xtree=s["Xtree"],
                inertia=I,
                axis=s["axis"],
                q_index=qi,
                nq=s["nq"],
                v_index=vi,
                nv=s["nv"],
                mimic=mimic,
                links=tuple(s["links"]),
            )
        )
    return Robot(
        name=name,
        bodies=tuple(bodies),
        frames=tuple(frames),
        links=links,
        joints=joints,
        floating_base=any(b.jtype is JointType.FLOATING for b in bodies),
        source=source,
        world_inertia=world_inertia,
    )
