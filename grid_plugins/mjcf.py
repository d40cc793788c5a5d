"""The MJCF loader: MuJoCo's own compiled model, turned into links and joints.

MuJoCo (the optional ``mujoco`` package, ``pip install grid-rbd[mjcf]``) compiles
the file, so defaults, classes, ``childclass``, every orientation form (quat, euler
in the model's ``eulerseq``, axisangle, xyaxes, zaxis), angle units and inertias
inferred from geoms come out exactly as MuJoCo reads them.  From the compiled model:

* each body is a link whose frame is MuJoCo's body frame (``body_pos`` /
  ``body_quat``) and whose inertia is MuJoCo's (``body_mass``, ``body_ipos``,
  ``body_iquat``, ``body_inertia``); the world body is the root link ``world``;
* a body without joints hangs from its parent by a fixed joint ``BODY_fixed``
  (merged into the parent, its frame kept, as a URDF fixed joint is);
* hinge -> revolute, slide -> prismatic, about ``jnt_axis`` through ``jnt_pos``;
  a body with several joints becomes a chain in MuJoCo's joint order through
  massless intermediate links ``BODY_JOINT``, the body itself (its inertia) last;
* a free joint -> the floating base; sites -> frames (a fixed joint ``SITE_fixed``
  to a massless link named after the site);
* an active ``<equality><joint>`` with a linear ``polycoef`` -> a mimic joint.

Coordinates (the convention GRiD picks): q is MuJoCo's qpos, joint for joint, in
MuJoCo's order.  A hinge or slide coordinate is the qpos value itself, so a joint's
``ref`` (MuJoCo's qpos0) is the q at which the body sits as written in the file:
the joint's zero placement is the written one moved by ``-ref`` about (along) the
axis, and MuJoCo's joint displacement qpos - qpos0 is q - ref; limits are MuJoCo's
ranges.  The free joint converts: q = [pos, qx qy qz qw] from MuJoCo's
[pos, qw qx qy qz]; v = [R^T v_world, omega_body] from MuJoCo's
[v_world, omega_body] (``R`` the base orientation), so a generalized force on the
base is [R^T f_world, torque_body].  A coupling ``y - y0 = a0 + a1 (x - x0)`` (y0,
x0 the joints' qpos0) is the mimic ``q_y = a1 q_x + (y0 + a0 - a1 x0)``.

Damping, armature, friction, stiffness, ranges, actuators, contacts, tendons and
other constraints do not enter rigid-body dynamics: they are accepted and listed
once in a warning.  A ball joint (or any other type) is an UnsupportedFeatureError.

Hardening (DESIGN §6): before MuJoCo sees the model, every XML file of it (the main
one and its ``<include>`` files) is read by us, size-capped (``GRID_MJCF_MAX_BYTES``,
default 32 MiB, for all of them together and for each asset file), refused if it
holds a DOCTYPE or entity, and parsed with entity expansion, DTD and network off;
every file it names (includes, meshes, textures, height fields, skins, ...) and
every ``meshdir`` / ``texturedir`` / ``assetdir`` must resolve inside the main
file's folder: no file outside it, no URL.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import attrs
import numpy as np
from lxml import etree

from grid_core import hookimpl
from grid_core.errors import GridWarning, RobotModelError, UnsupportedFeatureError
from grid_core.loader import RobotLoader
from grid_core.model import Joint, JointType, Link, Mimic, Robot, build_robot, spatial
from grid_plugins._files import byte_cap, read_under, xml_root
from grid_plugins.urdf import _Ctx, _xml_parser

DEFAULT_MAX_BYTES = 32 * 1024 * 1024
INSTALL_HINT = "pip install grid-rbd[mjcf]"

_DIR_ATTRS = ("meshdir", "texturedir", "assetdir")
_DEFAULT_GRAVITY = (0.0, 0.0, -9.81)


def max_mjcf_bytes() -> int:
    return byte_cap("GRID_MJCF_MAX_BYTES", DEFAULT_MAX_BYTES)


def _mujoco(source: str):
    try:
        import mujoco
    except ImportError:
        raise UnsupportedFeatureError(
            f"{source}: reading MJCF needs the optional mujoco package ({INSTALL_HINT})"
        ) from None
    return mujoco


# -- the files, checked before MuJoCo reads them -----------------------------------------------

def _read(path: Path, budget: int, cap: int) -> bytes:
    """One XML file of the model, within what the cap leaves of it (``budget``)."""
    return read_under(path, budget, f"the model's XML files reach {cap - budget}+{{size}} bytes, over the "
                      f"{cap}-byte cap (raise GRID_MJCF_MAX_BYTES)")


def _parse(data: bytes, source: str):
    if b"<!DOCTYPE" in data or b"<!ENTITY" in data:
        raise RobotModelError(f"{source}: DOCTYPE / ENTITY declarations are not allowed in an MJCF (remove them)")
    try:
        root = etree.fromstring(data, _xml_parser())
    except etree.XMLSyntaxError as exc:
        raise RobotModelError(f"{source}: not well-formed XML: {' '.join(str(exc).split())}") from None
    except ValueError as exc:
        raise RobotModelError(f"{source}: cannot parse XML: {exc}") from None
    if root is None:
        raise RobotModelError(f"{source}: empty document")
    docinfo = root.getroottree().docinfo
    if docinfo.internalDTD is not None or docinfo.externalDTD is not None:
        raise RobotModelError(f"{source}: DTDs are not allowed in an MJCF")
    return root


def _inside(ctx: _Ctx, folder: Path, base: Path, el, attr: str) -> Path:
    """``base / value`` of ``el``'s ``attr``, refused unless it lies inside ``folder``."""
    value = el.get(attr)
    if "://" in value or value.startswith(("\\\\", "//")):
        raise ctx.err(el, f"{attr}='{value}' names a URL or network path (GRiD reads local files only)")
    target = (base / value).resolve()
    if not target.is_relative_to(folder):
        raise ctx.err(
            el, f"{attr}='{value}' resolves outside the model's folder {folder} (copy the file into it)"
        )
    return target


def check_files(path: Path) -> etree._Element:
    """Read and check every XML file of the model and every file it names (module
    docstring); return the main file's root element."""
    folder = path.parent.resolve()
    cap = max_mjcf_bytes()
    budget = cap
    todo, seen, roots = [path], set(), []
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        data = _read(f, budget, cap)
        budget -= len(data)
        ctx = _Ctx(str(f))
        root = _parse(data, str(f))
        if not roots and (not isinstance(root.tag, str) or etree.QName(root).localname != "mujoco"):
            raise ctx.err(root, "the root element of an MJCF must be <mujoco>")
        roots.append((ctx, root))
        for el in root.iter("include"):
            if el.get("file") is None:
                raise ctx.err(el, "attribute 'file' is missing")
            _inside(ctx, folder, f.parent.resolve(), el, "file")  # either base MuJoCo may take
            todo.append(_inside(ctx, folder, folder, el, "file"))
    dirs = {folder}
    for ctx, root in roots:
        for el in root.iter("compiler"):
            dirs.update(_inside(ctx, folder, folder, el, a) for a in _DIR_ATTRS if el.get(a) is not None)
    for ctx, root in roots:
        for el in root.iter():
            if not isinstance(el.tag, str) or el.tag == "include":
                continue
            for attr in el.attrib:
                if not attr.startswith("file"):
                    continue
                for base in sorted(dirs):
                    target = _inside(ctx, folder, base, el, attr)
                    if target.is_file() and target.stat().st_size > cap:
                        raise ctx.err(el, f"{attr}='{el.get(attr)}' is over the {cap}-byte cap "
                                      "(raise GRID_MJCF_MAX_BYTES)")
    return roots[0][1]


def compile_model(path: Path):
    """``(mujoco, MjModel, main root element)`` of the MJCF at ``path``, checked first."""
    root = check_files(path)
    mujoco = _mujoco(str(path))
    try:
        model = mujoco.MjModel.from_xml_path(str(path))
    except (ValueError, mujoco.FatalError) as exc:  # how MuJoCo reports a model it cannot compile
        raise RobotModelError(f"{path}: MuJoCo cannot compile the model: {' '.join(str(exc).split())}") from None
    return mujoco, model, root


# -- the compiled model as links and joints ------------------------------------------------------

def _quat_matrix(wxyz) -> np.ndarray:
    w, x, y, z = wxyz
    return spatial.quat_to_matrix((x, y, z, w))


def _unique(name: str, taken: set[str]) -> str:
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def _fixed(name: str, parent: str, child: str, R=None, t=None) -> Joint:
    """A fixed joint placing ``child`` at rotation ``R`` and origin ``t`` in ``parent`` (identity)."""
    return Joint(name=name, type=JointType.FIXED, parent=parent, child=child,
                 origin_xyz=np.zeros(3) if t is None else t,
                 origin_rpy=np.zeros(3) if R is None else spatial.matrix_to_rpy(R))


def _ignored(m, mujoco, n_other_eq: int) -> list[str]:
    """What the model holds that rigid-body dynamics leaves out, each with a count."""
    out = []

    def count(values, what: str) -> None:
        n = int(np.count_nonzero(values))
        if n:
            out.append(f"{what} ({n})")

    count(m.dof_damping, "joint damping")
    count(m.dof_armature, "armature")
    count(m.dof_frictionloss, "friction loss")
    count(m.jnt_stiffness, "joint stiffness")
    count(m.jnt_limited, "joint ranges")
    count(np.ones(m.nu), "actuators")
    count(m.geom_contype | m.geom_conaffinity, "colliding geoms")
    count(np.ones(m.ntendon), "tendons")
    count(np.ones(n_other_eq), "other equality constraints")
    count(m.body_gravcomp, "gravity compensation")
    if m.opt.density or m.opt.viscosity or np.any(m.opt.wind):
        out.append("fluid forces")
    if tuple(m.opt.gravity) != _DEFAULT_GRAVITY:
        out.append(f"option gravity {tuple(float(g) for g in m.opt.gravity)} (pass gravity= to the algorithms)")
    return out


def robot_from_model(
    mujoco, m, *, name: str, source: str, floating_base: bool, strict_inertia: bool = False
) -> Robot:
    """The :class:`Robot` of a compiled MuJoCo model (conventions: module docstring)."""
    obj, jt = mujoco.mjtObj, mujoco.mjtJoint
    FREE, HINGE, SLIDE = int(jt.mjJNT_FREE), int(jt.mjJNT_HINGE), int(jt.mjJNT_SLIDE)
    jtype = [int(t) for t in m.jnt_type]
    link_names: set[str] = set()
    joint_names: set[str] = set()
    body = [_unique(mujoco.mj_id2name(m, obj.mjOBJ_BODY, b) or f"body{b}", link_names) for b in range(m.nbody)]
    jname = [_unique(mujoco.mj_id2name(m, obj.mjOBJ_JOINT, j) or f"joint{j}", joint_names) for j in range(m.njnt)]
    for j in range(m.njnt):
        if jtype[j] not in (HINGE, SLIDE, FREE):
            kind = jt(jtype[j]).name.removeprefix("mjJNT_").lower()
            raise UnsupportedFeatureError(
                f"{source}: <joint name='{jname[j]}'> in body '{body[m.jnt_bodyid[j]]}': joint type "
                f"'{kind}' is not supported (hinge, slide and free are; write a ball as three hinges)"
            )
    free = [j for j in range(m.njnt) if jtype[j] == FREE]
    if floating_base and len(free) > 1:
        raise UnsupportedFeatureError(
            f"{source}: free joints {', '.join(repr(jname[j]) for j in free)}: GRiD models one floating "
            "base (load with floating_base=False to weld them at their qpos0)"
        )
    links = [Link(name=body[0])]
    joints: list[Joint] = []
    massless: set[str] = set()
    by_mj_joint: dict[int, int] = {}  # MuJoCo joint id -> index in joints
    for b in range(1, m.nbody):
        parent = body[m.body_parentid[b]]
        R, t = _quat_matrix(m.body_quat[b]), m.body_pos[b].copy()
        R_i = _quat_matrix(m.body_iquat[b])
        links.append(Link(name=body[b], mass=float(m.body_mass[b]), com=m.body_ipos[b],
                          inertia=R_i @ np.diag(m.body_inertia[b]) @ R_i.T))
        adr, num = m.body_jntadr[b], m.body_jntnum[b]
        if num == 1 and jtype[adr] == FREE:
            if floating_base:  # q is the body's world pose: no placement before it
                by_mj_joint[adr] = len(joints)
                joints.append(Joint(name=jname[adr], type=JointType.FLOATING, parent=parent, child=body[b]))
            else:
                joints.append(_fixed(jname[adr], parent, body[b], R, t))
            continue
        if num == 0:
            joints.append(_fixed(_unique(f"{body[b]}_fixed", joint_names), parent, body[b], R, t))
            continue
        p_prev = np.zeros(3)
        for k, j in enumerate(range(adr, adr + num)):
            a, p = m.jnt_axis[j].copy(), m.jnt_pos[j].copy()
            ref = float(m.qpos0[m.jnt_qposadr[j]])
            t = t + R @ (p - p_prev)
            if jtype[j] == HINGE:
                kind, R = JointType.REVOLUTE, R @ spatial.axis_angle(a, -ref)
            else:
                kind, t = JointType.PRISMATIC, t - ref * (R @ a)
            last = k == num - 1
            child = body[b] if last and not p.any() else _unique(f"{body[b]}_{jname[j]}", link_names)
            if child != body[b]:
                links.append(Link(name=child))
                massless.add(child)
            lower, upper = (float(x) for x in m.jnt_range[j]) if m.jnt_limited[j] else (None, None)
            by_mj_joint[j] = len(joints)
            joints.append(Joint(name=jname[j], type=kind, parent=parent, child=child, origin_xyz=t,
                                origin_rpy=spatial.matrix_to_rpy(R), axis=a, lower=lower, upper=upper))
            parent, R, t, p_prev = child, np.eye(3), np.zeros(3), p
        if parent != body[b]:  # the last anchor was off the body origin
            joints.append(_fixed(_unique(f"{body[b]}_fixed", joint_names), parent, body[b], t=-p_prev))
    for s in range(m.nsite):
        site = _unique(mujoco.mj_id2name(m, obj.mjOBJ_SITE, s) or f"site{s}", link_names)
        links.append(Link(name=site))
        joints.append(_fixed(_unique(f"{site}_fixed", joint_names), body[m.site_bodyid[s]], site,
                             _quat_matrix(m.site_quat[s]), m.site_pos[s]))
    other_eq = _couple(mujoco, m, joints, by_mj_joint, jname, source)
    ignored = _ignored(m, mujoco, other_eq)
    if ignored:
        warnings.warn(f"{source}: not part of rigid-body dynamics, ignored: {', '.join(ignored)}",
                      GridWarning, stacklevel=3)
    return build_robot(name, links, joints, floating_base=floating_base and not free,
                       strict_inertia=strict_inertia, source=source, children_by_name=False,
                       massless_links=frozenset(massless))


def _couple(mujoco, m, joints: list[Joint], by_mj_joint: dict[int, int], jname, source: str) -> int:
    """Turn each active linear joint equality into a mimic (in place); return how many other
    equality constraints (inactive, or not between two joints) are left for the warning."""
    other = 0
    for e in range(m.neq):
        if int(m.eq_type[e]) != int(mujoco.mjtEq.mjEQ_JOINT) or not m.eq_active0[e]:
            other += 1
            continue
        label = mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_EQUALITY, e) or f"#{e}"
        j1, j2 = int(m.eq_obj1id[e]), int(m.eq_obj2id[e])
        a0, a1, *higher = m.eq_data[e, :5]
        where = f"{source}: <equality><joint name='{label}' joint1='{jname[j1]}'"
        if j2 < 0:
            raise UnsupportedFeatureError(f"{where}>: a joint locked to a value is not supported "
                                          "(give joint2, or remove the joint)")
        if np.any(higher):
            raise UnsupportedFeatureError(f"{where} joint2='{jname[j2]}'>: polycoef is not linear "
                                          "(GRiD's mimic joints are q1 = a1 q2 + offset)")
        k = by_mj_joint.get(j1)
        if k is None or by_mj_joint.get(j2) is None:
            raise UnsupportedFeatureError(f"{where} joint2='{jname[j2]}'>: only hinge and slide joints can be coupled")
        if joints[k].mimic is not None:
            raise UnsupportedFeatureError(f"{where}>: joint '{jname[j1]}' is coupled twice")
        y0, x0 = float(m.qpos0[m.jnt_qposadr[j1]]), float(m.qpos0[m.jnt_qposadr[j2]])
        joints[k] = attrs.evolve(joints[k], mimic=Mimic(joint=jname[j2], multiplier=float(a1),
                                                        offset=y0 + float(a0) - float(a1) * x0))
    return other


def load_mjcf_file(path, *, floating_base: bool | None = None, strict_inertia: bool = False) -> Robot:
    """Load the MJCF at ``path``; ``floating_base=None`` floats it when it has a free joint."""
    path = Path(path)
    mujoco, model, root = compile_model(path)
    if floating_base is None:
        floating_base = has_free_joint(mujoco, model)
    return robot_from_model(mujoco, model, name=root.get("model") or path.stem, source=str(path),
                            floating_base=floating_base, strict_inertia=strict_inertia)


def has_free_joint(mujoco, model) -> bool:
    return bool(np.any(model.jnt_type == int(mujoco.mjtJoint.mjJNT_FREE)))


class MjcfLoader(RobotLoader):
    name = "mjcf"
    summary = "an MJCF (MuJoCo) file given by path (mjcf:PATH, or any file whose root is <mujoco>)"
    file_format = "MJCF (root <mujoco>)"

    def claims(self, source: str) -> bool:
        return Path(source).is_file() and xml_root(source) == "mujoco"

    def default_floating_base(self, source: str) -> bool:
        mujoco, model, _ = compile_model(Path(source))
        return has_free_joint(mujoco, model)

    def load(self, source: str, *, floating_base, strict_inertia) -> Robot:
        return load_mjcf_file(source, floating_base=bool(floating_base), strict_inertia=strict_inertia)


@hookimpl
def grid_register_robot_loaders():
    return [MjcfLoader]
