"""Malformed and hostile URDFs end in the intended GridError (DESIGN §6).

Every file of ``tests/data/hostile/`` is listed in :data:`CASES` with the GridError
subclass it must raise and a regex its message must match (naming the offending
element, attribute, link or joint).  Each case is checked

* through the API (``grid_core.load_robot(path)``), touching no file but the one
  given and no network (an audit hook and an lxml resolver spy, see below);
* through the CLI in-process (``grid build PATH -o OUT`` with click's runner) and,
  for a few, through a real ``grid`` subprocess: exit 1, exactly one stderr line
  ``grid: error: ...``, no traceback, no output file.
"""

from __future__ import annotations

import importlib.machinery
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner
from lxml import etree

import grid_core
import grid_plugins.urdf
from grid_core.cli import main
from grid_core.errors import GridError, RobotModelError, UnsupportedFeatureError

HOSTILE = Path(__file__).resolve().parent.parent / "data" / "hostile"

# file -> (exact GridError subclass, regex the message must match)
CASES: dict[str, tuple[type[GridError], str]] = {
    # --- XML-level attacks: nothing is expanded, loaded or fetched ------------------------
    "billion_laughs.urdf": (RobotModelError, r"DOCTYPE / ENTITY declarations are not allowed"),
    "external_entity_passwd.urdf": (RobotModelError, r"DOCTYPE / ENTITY declarations are not allowed"),
    "external_dtd.urdf": (RobotModelError, r"DOCTYPE / ENTITY declarations are not allowed"),
    "parameter_entity.urdf": (RobotModelError, r"DOCTYPE / ENTITY declarations are not allowed"),
    # UTF-16 hides the DOCTYPE from the byte check; lxml's settings and the DTD check hold
    "utf16_billion_laughs.urdf": (RobotModelError, r"not well-formed XML: .*entity|DTDs are not allowed"),
    "utf16_external_entity.urdf": (RobotModelError, r"DTDs are not allowed in a URDF"),
    "utf16_external_dtd.urdf": (RobotModelError, r"DTDs are not allowed in a URDF"),
    "xinclude.urdf": (RobotModelError, r"<include> \(line 5\): XInclude is not allowed"),
    "deep_nesting.urdf": (RobotModelError, r"not well-formed XML: .*depth.*line 5"),
    # --- not XML, or not a URDF -----------------------------------------------------------
    "truncated.urdf": (RobotModelError, r"not well-formed XML: .*line 4"),
    "binary_garbage.urdf": (RobotModelError, r"not well-formed XML: .*line 1, column 1"),
    "empty.urdf": (RobotModelError, r"not well-formed XML: Document is empty"),
    "whitespace_only.urdf": (RobotModelError, r"not well-formed XML: .*line 3"),
    "non_utf8.urdf": (RobotModelError, r"not well-formed XML: .*encoding.*line 4"),
    "nul_byte.urdf": (RobotModelError, r"not well-formed XML: .*0x0.*line 3"),
    "unsupported_encoding.urdf": (RobotModelError, r"x-no-such-encoding"),
    "wrong_root.urdf": (RobotModelError, r"<sdf> \(line 1\): the root element must be <robot>"),
    "no_links.urdf": (RobotModelError, r"the robot has no <link>"),
    # --- tree shape -----------------------------------------------------------------------
    "joint_cycle.urdf": (RobotModelError, r"every link has a parent joint: the joints form a cycle"),
    "cycle_detached.urdf": (RobotModelError, r"links 'b', 'c' are not reachable from root 'base'.*cycle"),
    "self_parent_joint.urdf": (RobotModelError, r"joint 'j2': link 'a' is its own parent"),
    "two_roots.urdf": (RobotModelError, r"several root links \('base', 'other'\)"),
    "missing_parent_link.urdf": (RobotModelError, r"joint 'j1': parent link 'ghost' is not defined"),
    "missing_child_link.urdf": (RobotModelError, r"joint 'j1': child link 'ghost' is not defined"),
    "duplicate_link.urdf": (RobotModelError, r"link 'a' is defined twice"),
    "duplicate_joint.urdf": (RobotModelError, r"joint 'j1' is defined twice"),
    "closed_loop.urdf": (RobotModelError, r"link 'c' is the child of joints 'j_ac' and 'j_bc' \(a closed loop"),
    "floating_not_root.urdf": (UnsupportedFeatureError, r"joint 'j2': a floating joint is only supported under"),
    "empty_link_name.urdf": (RobotModelError, r"<link name=''> \(line 3\): a <link> needs a non-empty name"),
    "empty_joint_name.urdf": (RobotModelError, r"<joint name=''> \(line 4\): a <joint> needs a non-empty name"),
    "missing_type.urdf": (RobotModelError, r"<joint name='j1'> \(line 4\): attribute 'type' is missing"),
    "missing_child_element.urdf": (RobotModelError, r"<joint name='j1'> \(line 4\): <child link='...'> is missing"),
    # --- numbers --------------------------------------------------------------------------
    "nan_origin.urdf": (RobotModelError, r"<joint name='j1'> <origin> \(line 4\): attribute xyz='0 nan 0' is not "
                                         r"finite"),
    "inf_mass.urdf": (RobotModelError, r"<link name='a'> <inertial> <mass> \(line 3\): attribute value='inf' is "
                                       r"not finite"),
    "overflow_inertia.urdf": (RobotModelError, r"<link name='a'> <inertial> <inertia> .*ixx='1e400' is not finite"),
    "nan_limit.urdf": (RobotModelError, r"<joint name='j1'> <limit> \(line 4\): attribute lower='nan' is NaN"),
    "non_numeric_xyz.urdf": (RobotModelError, r"<joint name='j1'> <origin> .*xyz='one 0 0' is not numeric"),
    "two_number_xyz.urdf": (RobotModelError, r"<joint name='j1'> <origin> .*xyz='0 0' must hold 3 numbers"),
    "negative_mass.urdf": (RobotModelError, r"<link name='a'> <inertial> <mass> \(line 3\): negative mass -2"),
    "negative_eigenvalue_inertia.urdf": (RobotModelError, r"link 'a': inertia has a negative eigenvalue -0\.4"),
    "inertial_without_mass.urdf": (RobotModelError, r"<link name='a'> <inertial> .*must hold a <mass>"),
    "inertial_without_inertia.urdf": (RobotModelError, r"<link name='a'> <inertial> .*must hold an <inertia>"),
    "inertia_missing_izz.urdf": (RobotModelError, r"<link name='a'> <inertial> <inertia> .*'izz' is missing"),
    "zero_axis.urdf": (RobotModelError, r"<joint name='j1'> <axis> \(line 4\): joint axis is zero"),
    # --- joint types and mimics -----------------------------------------------------------
    "unknown_joint_type.urdf": (RobotModelError, r"<joint name='j1'> .*unknown joint type 'banana'"),
    "planar_joint.urdf": (UnsupportedFeatureError, r"<joint name='j1'> .*joint type 'planar' is not supported"),
    "revolute_without_limit.urdf": (RobotModelError, r"<joint name='j1'> .*a revolute joint needs a <limit>"),
    "prismatic_without_limit.urdf": (RobotModelError, r"<joint name='j1'> .*a prismatic joint needs a <limit>"),
    "mimic_unknown_joint.urdf": (RobotModelError, r"joint 'j2' mimics unknown joint 'ghost'"),
    "mimic_cycle.urdf": (RobotModelError, r"mimic cycle: j1 -> j2 -> j1"),
    "mimic_chain.urdf": (UnsupportedFeatureError, r"joint 'j3' mimics 'j2', itself a mimic joint"),
    "mimic_without_joint.urdf": (RobotModelError, r"<joint name='j2'> <mimic> .*attribute 'joint' is missing"),
    "mimic_of_fixed_joint.urdf": (RobotModelError, r"joint 'j2' mimics 'j1', a fixed joint"),
}

# a few go through a real `grid` process too (the console script, as a user runs it)
SUBPROCESS_CASES = [
    "billion_laughs.urdf",
    "external_entity_passwd.urdf",
    "utf16_external_entity.urdf",
    "binary_garbage.urdf",
    "non_utf8.urdf",
    "joint_cycle.urdf",
    "planar_joint.urdf",
]


# -- instruments: what the loader opens or connects to -------------------------------------

class _Audit:
    """A ``sys.addaudithook`` hook (installed once per process; hooks cannot be removed)
    recording, while a capture is active and only on the capturing thread, every
    ``open`` event (builtins.open, io.open_code, os.open) and every ``socket.*`` event
    (socket creation, connect, getaddrinfo, gethostbyname, ...)."""

    installed = False
    active_thread: int | None = None
    opens: list = []
    sockets: list = []

    @classmethod
    def hook(cls, event: str, args) -> None:
        if cls.active_thread is None or threading.get_ident() != cls.active_thread:
            return
        if event == "open":
            cls.opens.append(args[0])
        elif event.startswith("socket.") or event.startswith("urllib."):
            cls.sockets.append((event, args))

    @classmethod
    def install(cls) -> None:
        if not cls.installed:
            sys.addaudithook(cls.hook)
            cls.installed = True


_MODULE_SUFFIXES = tuple(importlib.machinery.all_suffixes())


def _is_module_import(path: str) -> bool:
    """Whether an opened path is Python importing a module: a file with a module suffix
    (.py, .pyc, extension modules) under a ``sys.path`` entry (the stdlib, site-packages,
    the repository).  The registry is warmed up before each capture, so none is expected;
    this only keeps a lazy import inside numpy/lxml from failing the test."""
    if not path.endswith(_MODULE_SUFFIXES):
        return False
    roots = [os.path.realpath(p) for p in sys.path if p]
    return any(path.startswith(r + os.sep) for r in roots)


class _Capture:
    def __init__(self):
        self.opened: list[str] = []
        self.sockets: list = []
        self.resolved: list[str] = []

    @property
    def foreign_opens(self) -> list[str]:
        return [p for p in self.opened if not _is_module_import(p)]


class _SpyResolver(etree.Resolver):
    """Any URL libxml2 asks to load (an external entity, a DTD, an XInclude) goes through
    lxml's resolvers first: record it, and hand back nothing."""

    def __init__(self, log: list):
        super().__init__()
        self.log = log

    def resolve(self, url, pubid, context):
        self.log.append(url)
        return self.resolve_string("", context)


@pytest.fixture(scope="session")
def audit_hook():
    _Audit.install()


@pytest.fixture
def capture(audit_hook, monkeypatch):
    """``with capture() as cap: ...``: Python-level opens and socket events (audit hook) and
    every libxml2 load request (resolver spy on the loader's parser) during the block."""
    grid_core.registry()  # warm: loading entry points reads metadata files
    resolved: list[str] = []

    def spied_parser():
        parser = run.make_parser()
        parser.resolvers.add(_SpyResolver(resolved))
        return parser

    @contextmanager
    def run():
        cap = _Capture()
        _Audit.opens, _Audit.sockets = [], []
        resolved.clear()
        _Audit.active_thread = threading.get_ident()
        try:
            yield cap
        finally:
            _Audit.active_thread = None
            cap.opened = [
                os.path.realpath(os.fsdecode(p)) for p in _Audit.opens if not isinstance(p, int)
            ]
            cap.sockets = list(_Audit.sockets)
            cap.resolved = list(resolved)

    run.make_parser = grid_plugins.urdf._xml_parser  # the loader's own; a test may swap it
    monkeypatch.setattr(grid_plugins.urdf, "_xml_parser", spied_parser)
    return run


# -- helpers -------------------------------------------------------------------------------

def grid_script() -> list[str]:
    """The installed ``grid`` console script (next to this interpreter, else on PATH)."""
    here = Path(sys.executable).with_name("grid")
    if here.exists():
        return [str(here)]
    found = shutil.which("grid")
    assert found, "the 'grid' console script is not installed"
    return [found]


def assert_one_line_error(stderr: str, stdout: str, pattern: str | None = None) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, f"expected one stderr line, got {lines!r}"
    assert lines[0].startswith("grid: error: "), lines[0]
    assert "Traceback" not in stderr and "Traceback" not in stdout
    assert stdout == ""
    if pattern is not None:
        assert re.search(pattern, lines[0]), (pattern, lines[0])
    return lines[0]


def cli(args, env=None):
    return CliRunner().invoke(main, args, env=env)


# -- the corpus ------------------------------------------------------------------------------

def test_every_corpus_file_is_in_the_table():
    files = {p.name for p in HOSTILE.iterdir()}
    assert files == set(CASES)
    assert len(files) >= 35
    assert set(SUBPROCESS_CASES) <= files


@pytest.mark.parametrize("name", sorted(CASES))
def test_api_raises_and_touches_nothing_else(name, capture):
    cls, pattern = CASES[name]
    path = HOSTILE / name
    with capture() as cap:
        with pytest.raises(GridError) as info:
            grid_core.load_robot(str(path))
    exc = info.value
    assert type(exc) is cls, f"{type(exc).__name__}: {exc}"
    message = str(exc)
    assert re.search(pattern, message), message
    assert message.startswith(f"{path}: "), message  # names the file
    assert "\n" not in message
    # the loader read the given file (so the hook saw it), and nothing else
    assert cap.foreign_opens == [os.path.realpath(path)]
    assert cap.sockets == []
    assert cap.resolved == []


@pytest.mark.parametrize("name", sorted(CASES))
def test_cli_build_one_line_exit_1(name, tmp_path):
    cls, pattern = CASES[name]
    out = tmp_path / "grid.cuh"
    result = cli(["build", str(HOSTILE / name), "-o", str(out)])
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)  # not an escaped exception
    assert_one_line_error(result.stderr, result.stdout, pattern)
    assert not out.exists()


@pytest.mark.parametrize("name", SUBPROCESS_CASES)
def test_real_grid_process_one_line_exit_1(name, tmp_path):
    _, pattern = CASES[name]
    out = tmp_path / "grid.cuh"
    proc = subprocess.run(
        [*grid_script(), "build", str(HOSTILE / name), "-o", str(out)],
        capture_output=True, text=True, cwd=tmp_path, timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    assert_one_line_error(proc.stderr, proc.stdout, pattern)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


# -- the size cap ----------------------------------------------------------------------------

CAP = 4096

CLEAN_URDF = """<robot name="capped">
  <link name="base"><inertial><mass value="1"/><inertia ixx="0.1" ixy="0" ixz="0" iyy="0.1" iyz="0" izz="0.1"/></inertial></link>
  <link name="a"><inertial><mass value="1"/><inertia ixx="0.1" ixy="0" ixz="0" iyy="0.1" iyz="0" izz="0.1"/></inertial></link>
  <joint name="j1" type="continuous"><parent link="base"/><child link="a"/><axis xyz="0 0 1"/></joint>
PAD</robot>
"""


def _padded_urdf(path: Path, size: int) -> Path:
    """A valid one-joint URDF padded with a comment to exactly ``size`` bytes."""
    pad = size - (len(CLEAN_URDF) - len("PAD")) - len("<!---->")
    assert pad >= 0
    path.write_text(CLEAN_URDF.replace("PAD", "<!--" + "x" * pad + "-->"))
    assert path.stat().st_size == size
    return path


def test_size_cap_api(tmp_path, monkeypatch, capture):
    monkeypatch.setenv("GRID_URDF_MAX_BYTES", str(CAP))
    at_cap = _padded_urdf(tmp_path / "at_cap.urdf", CAP)
    over = _padded_urdf(tmp_path / "over_cap.urdf", CAP + 1)
    assert grid_core.load_robot(str(at_cap)).nv == 1  # the cap itself is allowed
    with capture() as cap:
        with pytest.raises(RobotModelError) as info:
            grid_core.load_robot(str(over))
    assert type(info.value) is RobotModelError
    assert str(info.value) == (
        f"{over}: file is {CAP + 1} bytes, over the {CAP}-byte cap (raise GRID_URDF_MAX_BYTES)"
    )
    assert cap.foreign_opens == []  # refused from its size, never opened
    assert cap.sockets == [] and cap.resolved == []


def test_size_cap_cli_and_process(tmp_path):
    over = _padded_urdf(tmp_path / "over_cap.urdf", CAP + 1)
    out = tmp_path / "grid.cuh"
    pattern = rf"over_cap\.urdf: file is {CAP + 1} bytes, over the {CAP}-byte cap"
    result = cli(["build", str(over), "-o", str(out)], env={"GRID_URDF_MAX_BYTES": str(CAP)})
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert_one_line_error(result.stderr, result.stdout, pattern)
    proc = subprocess.run(
        [*grid_script(), "build", str(over), "-o", str(out)], capture_output=True, text=True,
        cwd=tmp_path, timeout=60, env={**os.environ, "GRID_URDF_MAX_BYTES": str(CAP)},
    )
    assert proc.returncode == 1
    assert_one_line_error(proc.stderr, proc.stdout, pattern)
    assert not out.exists()


def test_size_cap_env_must_be_an_integer(tmp_path, monkeypatch):
    monkeypatch.setenv("GRID_URDF_MAX_BYTES", "lots")
    path = _padded_urdf(tmp_path / "r.urdf", 1000)
    with pytest.raises(RobotModelError, match=r"GRID_URDF_MAX_BYTES='lots' is not an integer"):
        grid_core.load_robot(str(path))


# -- an external entity aimed at a real secret ------------------------------------------------

SECRET_DOCS = {
    # entity used in an attribute and in element content; utf-16 slips past the byte check
    "utf-8": ("utf-8", '<robot name="&s;"><link name="a">&s;</link></robot>'),
    "utf-16-content": ("utf-16", '<robot name="r"><link name="a">&s;</link></robot>'),
    "utf-16-attribute": ("utf-16", '<robot name="&s;"><link name="a"/></robot>'),
}


@pytest.mark.parametrize("variant", sorted(SECRET_DOCS))
def test_external_entity_never_reads_the_secret(variant, tmp_path, capture):
    secret = "GRID-SECRET-7f3a9c1e-do-not-leak"
    secret_file = tmp_path / "secret.txt"
    secret_file.write_text(secret + "\n")
    encoding, body = SECRET_DOCS[variant]
    doc = (
        f'<?xml version="1.0" encoding="{encoding.upper()}"?>\n'
        f'<!DOCTYPE robot [<!ENTITY s SYSTEM "{secret_file.as_uri()}">]>\n{body}\n'
    )
    path = tmp_path / "xxe.urdf"
    path.write_bytes(doc.encode(encoding))
    with capture() as cap:
        with pytest.raises(RobotModelError) as info:
            grid_core.load_robot(str(path))
    assert secret not in str(info.value)
    assert "secret" not in str(info.value).replace(str(tmp_path), "")
    assert cap.foreign_opens == [os.path.realpath(path)]
    assert cap.sockets == [] and cap.resolved == []
    result = cli(["build", str(path), "-o", str(tmp_path / "out.cuh")])
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, result.stdout)
    assert secret not in result.output


# -- the instruments can see what they guard against (else the tests above prove nothing) ------

def test_instruments_record_opens_sockets_and_resolver_loads(tmp_path, capture):
    other = tmp_path / "other.txt"
    other.write_text("x")
    dtd = tmp_path / "robot.dtd"
    dtd.write_text("<!ELEMENT robot ANY>")
    doc = tmp_path / "dtd.urdf"
    doc.write_bytes(f'<!DOCTYPE robot SYSTEM "{dtd.as_uri()}"><robot name="r"/>'.encode("utf-16"))
    # a careless parser (DTD loading on) in place of the loader's: the spy must see the load
    capture.make_parser = lambda: etree.XMLParser(load_dtd=True, no_network=True)
    with capture() as cap:
        other.read_text()
        try:
            socket.getaddrinfo("localhost", 9)
        except OSError:
            pass
        with pytest.raises(RobotModelError, match="DTDs are not allowed"):
            grid_core.load_robot(str(doc))
    assert os.path.realpath(other) in cap.foreign_opens
    assert os.path.realpath(doc) in cap.foreign_opens
    assert any(event == "socket.getaddrinfo" for event, _ in cap.sockets)
    assert len(cap.resolved) == 1 and cap.resolved[0].endswith("robot.dtd")
