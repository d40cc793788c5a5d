"""Helpers of the file loaders: what an XML robot file is (its root element, how a loader
claims a path) and the size caps they read files under."""

from __future__ import annotations

import os
from pathlib import Path

from lxml import etree

from grid_core.errors import RobotModelError, RobotNotFoundError

HEAD_BYTES = 64 * 1024


def xml_root(path: str | Path) -> str | None:
    """The local name of the root element of the file at ``path``, from its first 64 KiB.

    ``None`` when the file cannot be read, is not XML, or opens no element there.
    Read with entity expansion, DTD loading and network access off.
    """
    try:
        with open(path, "rb") as fh:
            head = fh.read(HEAD_BYTES)
    except OSError:
        return None
    parser = etree.XMLPullParser(
        events=("start",), resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False
    )
    try:
        parser.feed(head)
        for _, el in parser.read_events():
            return etree.QName(el).localname
    except (etree.XMLSyntaxError, ValueError):
        return None
    return None


def byte_cap(variable: str, default: int) -> int:
    """The size cap set by the environment ``variable`` (bytes), or ``default``."""
    raw = os.environ.get(variable)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise RobotModelError(f"{variable}={raw!r} is not an integer") from exc


def read_under(path: Path, cap: int, over: str) -> bytes:
    """The bytes of the file at ``path``, refused before reading when over ``cap`` bytes
    (``over``, formatted with ``size``, says why and what to raise)."""
    try:
        if not path.is_file():
            raise RobotNotFoundError(f"{path}: not a file")
        size = path.stat().st_size
        if size > cap:
            raise RobotModelError(f"{path}: {over.format(size=size)}")
        with path.open("rb") as fh:
            return fh.read(cap + 1)
    except OSError as exc:
        raise RobotNotFoundError(f"{path}: cannot read: {exc.strerror}") from None
