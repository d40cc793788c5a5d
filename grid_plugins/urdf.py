"""The URDF loader: hardened lxml parsing into links and joints.

Hardening (DESIGN §6): the file is read by us, capped in size
(``GRID_URDF_MAX_BYTES``, default 32 MiB), and parsed from bytes with entity
resolution, DTD loading and network access off; any DOCTYPE is refused, so no
entity (internal or external) is ever expanded and no other file or address is
touched; XInclude elements are refused too (never processed, never silently
dropped).  Every error names the file, the element (with its line) and what to fix.
"""

from __future__ import annotations

import difflib
import math
import warnings
from pathlib import Path

import numpy as np
from lxml import etree

from grid_core import hookimpl
from grid_core.errors import RobotModelError, RobotNotFoundError, UnsupportedFeatureError, UrdfWarning
from grid_core.loader import RobotLoader
from grid_core.model import Joint, JointType, Link, Mimic, Robot, build_robot, spatial
from grid_plugins._files import byte_cap, read_under, xml_root

DEFAULT_MAX_BYTES = 32 * 1024 * 1024

# Limits may be unbounded; every other number must be finite.
_INF_OK = frozenset({"lower", "upper", "effort", "velocity"})

_UNSUPPORTED_TYPES = {"planar", "spherical", "ball", "universal", "screw"}

_XINCLUDE_NS = frozenset({"http://www.w3.org/2001/XInclude", "http://www.w3.org/2003/XInclude"})

# The children each element may hold: the URDF specification's, and under <link> the
# simulator extensions published robots carry (pybullet's <contact>, Gazebo-era tags), which
# urdfdom and Pinocchio ignore as we do.  Anything else is a typo until shown otherwise.
_KNOWN_CHILDREN = {
    "joint": ("origin", "parent", "child", "axis", "limit", "dynamics", "mimic", "safety_controller",
              "calibration"),
    "link": ("inertial", "visual", "collision", "contact", "gravity", "kinematic", "self_filter", "surface",
             "collision_checking"),
    "inertial": ("origin", "mass", "inertia"),
}


def max_urdf_bytes() -> int:
    return byte_cap("GRID_URDF_MAX_BYTES", DEFAULT_MAX_BYTES)


class _Ctx:
    """Where we are, for error messages."""

    def __init__(self, source: str):
        self.source = source

    def err(self, el, what: str, cls=RobotModelError) -> Exception:
        line = getattr(el, "sourceline", None)
        at = f" (line {line})" if line else ""
        return cls(f"{self.source}: {describe(el)}{at}: {what}")


def describe(el) -> str:
    """The element under its nearest named ancestor: ``<link name='a'> <inertial> <mass>``."""
    parts = []
    while el is not None:
        tag = etree.QName(el).localname if isinstance(el.tag, str) else "element"
        name = el.get("name") if isinstance(el.tag, str) else None
        parts.append(f"<{tag} name='{name}'>" if name is not None else f"<{tag}>")
        if name is not None:
            break
        el = el.getparent()
    return " ".join(reversed(parts))


def _floats(ctx: _Ctx, el, attr: str, n: int, default=None) -> np.ndarray:
    raw = el.get(attr)
    if raw is None:
        if default is None:
            raise ctx.err(el, f"attribute '{attr}' is missing")
        return np.array(default, dtype=float)
    parts = raw.split()
    if len(parts) != n:
        raise ctx.err(el, f"attribute {attr}='{raw}' must hold {n} numbers")
    try:
        vals = np.array([float(p) for p in parts])
    except ValueError:
        raise ctx.err(el, f"attribute {attr}='{raw}' is not numeric") from None
    if not np.all(np.isfinite(vals)):
        raise ctx.err(el, f"attribute {attr}='{raw}' is not finite (NaN or inf)")
    return vals


def _float(ctx: _Ctx, el, attr: str, default: float | None = None, *, required=False) -> float | None:
    raw = el.get(attr)
    if raw is None:
        if required:
            raise ctx.err(el, f"attribute '{attr}' is missing")
        return default
    try:
        val = float(raw)
    except ValueError:
        raise ctx.err(el, f"attribute {attr}='{raw}' is not numeric") from None
    if math.isnan(val):
        raise ctx.err(el, f"attribute {attr}='{raw}' is NaN")
    if math.isinf(val) and attr not in _INF_OK:
        raise ctx.err(el, f"attribute {attr}='{raw}' is not finite")
    return val


def _child(el, tag):
    return el.find(tag)


def _origin(ctx, el):
    o = _child(el, "origin")
    if o is None:
        return np.zeros(3), np.zeros(3)
    return _floats(ctx, o, "xyz", 3, (0, 0, 0)), _floats(ctx, o, "rpy", 3, (0, 0, 0))


def _parse_link(ctx: _Ctx, el) -> Link:
    name = el.get("name")
    if not name:
        raise ctx.err(el, "a <link> needs a non-empty name")
    inertial = _child(el, "inertial")
    if inertial is None:
        return Link(name=name)
    mass_el = _child(inertial, "mass")
    if mass_el is None:
        raise ctx.err(inertial, "<inertial> must hold a <mass>")
    mass = _float(ctx, mass_el, "value", required=True)
    if mass < 0:
        raise ctx.err(mass_el, f"negative mass {mass:g}")
    xyz, rpy = _origin(ctx, inertial)
    in_el = _child(inertial, "inertia")
    if in_el is None:
        raise ctx.err(inertial, "<inertial> must hold an <inertia>")
    ixx, ixy, ixz, iyy, iyz, izz = (
        _float(ctx, in_el, a, required=True) for a in ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")
    )
    I = np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])
    R = spatial.rpy_to_matrix(rpy)
    return Link(name=name, mass=mass, com=xyz, inertia=R @ I @ R.T)


def _parse_joint(ctx: _Ctx, el) -> Joint:
    name = el.get("name")
    if not name:
        raise ctx.err(el, "a <joint> needs a non-empty name")
    jtype = el.get("type")
    if jtype is None:
        raise ctx.err(el, "attribute 'type' is missing")
    if jtype in _UNSUPPORTED_TYPES:
        raise ctx.err(
            el, f"joint type '{jtype}' is not supported (revolute, continuous, prismatic, fixed, floating)",
            UnsupportedFeatureError,
        )
    try:
        jt = JointType(jtype)
    except ValueError:
        raise ctx.err(
            el, f"unknown joint type '{jtype}' (use revolute, continuous, prismatic, fixed or floating)"
        ) from None
    links = {}
    for role in ("parent", "child"):
        sub = _child(el, role)
        if sub is None or not sub.get("link"):
            raise ctx.err(el, f"<{role} link='...'> is missing")
        links[role] = sub.get("link")
    xyz, rpy = _origin(ctx, el)
    axis_el = _child(el, "axis")
    axis = _floats(ctx, axis_el, "xyz", 3, (1, 0, 0)) if axis_el is not None else np.array([1.0, 0, 0])
    if jt in (JointType.REVOLUTE, JointType.CONTINUOUS, JointType.PRISMATIC) and not np.any(axis):
        raise ctx.err(axis_el if axis_el is not None else el, "joint axis is zero")
    lower = upper = effort = velocity = None
    lim = _child(el, "limit")
    if lim is not None:
        lower = _float(ctx, lim, "lower", 0.0)
        upper = _float(ctx, lim, "upper", 0.0)
        effort = _float(ctx, lim, "effort")
        velocity = _float(ctx, lim, "velocity")
    elif jt in (JointType.REVOLUTE, JointType.PRISMATIC):
        raise ctx.err(el, f"a {jtype} joint needs a <limit> (use type 'continuous' for none)")
    mimic = None
    m_el = _child(el, "mimic")
    if m_el is not None:
        target = m_el.get("joint")
        if not target:
            raise ctx.err(m_el, "attribute 'joint' is missing")
        mimic = Mimic(
            joint=target,
            multiplier=_float(ctx, m_el, "multiplier", 1.0),
            offset=_float(ctx, m_el, "offset", 0.0),
        )
    return Joint(
        name=name,
        type=jt,
        parent=links["parent"],
        child=links["child"],
        origin_xyz=xyz,
        origin_rpy=rpy,
        axis=axis,
        lower=lower,
        upper=upper,
        effort=effort,
        velocity=velocity,
        mimic=mimic,
    )


def _warn_unknown_children(ctx: _Ctx, root) -> None:
    """Warn about an element GRiD would silently ignore inside a <joint>, <link> or <inertial>
    (``<axsi>`` for ``<axis>`` would leave the axis at x), naming it and its line; in file order."""
    unknown = []
    for parent, path in (("joint", "joint"), ("link", "link"), ("inertial", "link/inertial")):
        known = _KNOWN_CHILDREN[parent]
        for el in root.findall(path):  # the robot's own, not a <transmission>'s <joint>
            unknown += [(child.sourceline or 0, parent, el, child) for child in el
                        if isinstance(child.tag, str) and etree.QName(child).localname not in known]
    for line, parent, el, child in sorted(unknown, key=lambda u: u[0]):
        known = _KNOWN_CHILDREN[parent]
        tag = etree.QName(child).localname
        close = difflib.get_close_matches(tag, known, n=1)
        hint = f"did you mean <{close[0]}>? " if close else ""
        owner = el if el.get("name") is not None else el.getparent()
        warnings.warn(UrdfWarning(
            f"{ctx.source}: {describe(child)} (line {line}): unknown element <{tag}> in <{parent}>, ignored "
            f"({hint}known: {', '.join(known)}; strict loading makes it an error)",
            subject=f"<{tag}> in {owner.get('name') or parent}", topic="unknown URDF elements"), stacklevel=2)


def _xml_parser() -> etree.XMLParser:
    return etree.XMLParser(
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        dtd_validation=False,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
    )


def parse_urdf(
    data: bytes | str,
    *,
    source: str = "<string>",
    floating_base: bool = False,
    strict_inertia: bool = False,
    known_inertia_defects: frozenset[str] = frozenset(),
) -> Robot:
    """Parse URDF text into a :class:`Robot` (see the module docstring for the hardening)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    cap = max_urdf_bytes()
    if len(data) > cap:
        raise RobotModelError(
            f"{source}: file is {len(data)} bytes, over the {cap}-byte cap (raise GRID_URDF_MAX_BYTES)"
        )
    if b"<!DOCTYPE" in data or b"<!ENTITY" in data:
        raise RobotModelError(
            f"{source}: DOCTYPE / ENTITY declarations are not allowed in a URDF (remove them)"
        )
    try:
        root = etree.fromstring(data, _xml_parser())
    except etree.XMLSyntaxError as exc:  # libxml2's text may hold newlines: keep one line
        raise RobotModelError(f"{source}: not well-formed XML: {' '.join(str(exc).split())}") from None
    except ValueError as exc:  # e.g. an encoding declaration lxml refuses
        raise RobotModelError(f"{source}: cannot parse XML: {exc}") from None
    if root is None:
        raise RobotModelError(f"{source}: empty document")
    ctx = _Ctx(source)
    if not isinstance(root.tag, str) or etree.QName(root).localname != "robot":
        raise ctx.err(root, "the root element must be <robot>")
    docinfo = root.getroottree().docinfo
    if docinfo.internalDTD is not None or docinfo.externalDTD is not None:
        raise RobotModelError(f"{source}: DTDs are not allowed in a URDF")
    for el in root.iter():
        if isinstance(el, etree._Entity):  # pragma: no cover - refused above already
            raise ctx.err(el, "entity references are not allowed")
        if isinstance(el.tag, str) and etree.QName(el).namespace in _XINCLUDE_NS:
            # never processed (we do not call xinclude()); refused so nothing is silently dropped
            raise ctx.err(el, "XInclude is not allowed in a URDF (inline the included content)")
    _warn_unknown_children(ctx, root)
    links = [_parse_link(ctx, el) for el in root.findall("link")]
    joints = [_parse_joint(ctx, el) for el in root.findall("joint")]
    name = root.get("name") or Path(source).stem
    return build_robot(
        name,
        links,
        joints,
        floating_base=floating_base,
        strict_inertia=strict_inertia,
        known_inertia_defects=frozenset(known_inertia_defects),
        source=source,
    )


def read_capped(path: Path) -> bytes:
    """Read a file, refusing anything over the size cap before reading it."""
    if path.is_dir():
        raise RobotNotFoundError(f"{path}: is a directory, not a URDF file (give the .urdf file inside it)")
    cap = max_urdf_bytes()
    return read_under(path, cap, f"file is {{size}} bytes, over the {cap}-byte cap (raise GRID_URDF_MAX_BYTES)")


def load_urdf_file(path, *, floating_base: bool = False, strict_inertia: bool = False) -> Robot:
    path = Path(path)
    return parse_urdf(
        read_capped(path), source=str(path), floating_base=floating_base, strict_inertia=strict_inertia
    )


class UrdfLoader(RobotLoader):
    name = "urdf"
    summary = "a URDF file given by path (urdf:PATH, or any path ending in .urdf or whose root is <robot>)"
    file_format = "URDF (root <robot>)"

    def claims(self, source: str) -> bool:  # other files by content: an .xml MJCF goes to its loader
        return source.lower().endswith(".urdf") or (Path(source).is_file() and xml_root(source) == "robot")

    def load(self, source: str, *, floating_base, strict_inertia) -> Robot:
        return load_urdf_file(source, floating_base=bool(floating_base), strict_inertia=strict_inertia)


@hookimpl
def grid_register_robot_loaders():
    return [UrdfLoader]
