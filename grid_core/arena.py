"""Arenas, spill rungs and resource tiers.

An algorithm declares its scratch as :class:`ArenaRegion` s and a menu of
:class:`SpillRung` s (rung 0 keeps everything in shared memory; each further
rung moves more regions to the global ``d_workspace``).  Per robot, each
resource tier is mapped to a rung against a shared-memory budget
(:func:`select_rungs`); the resulting :class:`ArenaPlan` is the single source of
truth from which both the ``*_SMEM_BYTES`` / ``*_WORKSPACE_BYTES`` constants and
the kernels' pointer carving are emitted, so they cannot drift apart.

Sizes are chosen for the widest scalar (double); each region is padded to a
multiple of 16 bytes in either precision, so offsets are the same for float
and double.
"""

from __future__ import annotations

import enum
import os

import attrs

from .errors import CodegenError, PluginError

ENV_TARGET = "GRID_CUDA_TARGET_SHARED_MEM_BYTES"
SM90_OPTIN_SMEM_BYTES = 227 * 1024
"""sm_90's opt-in dynamic shared memory per block (H100/H200). The run-time cap is
queried; this is only the generation-time target when none is forced."""
LITE_TARGET_SMEM_BYTES = 48 * 1024
SIZEOF_WIDEST = 8
PAD_ELEMENTS = 4  # 16 bytes of float, 32 of double: aligned in both precisions


class Tier(enum.IntEnum):
    """Resource tiers: launch bounds and shared-memory footprint profiles."""

    SHARED = 0
    LITE = 1
    MINIMAL = 2

    @property
    def cpp(self) -> str:
        return f"TIER_{self.name}"


def padded(elements: int) -> int:
    return -(-int(elements) // PAD_ELEMENTS) * PAD_ELEMENTS


@attrs.frozen
class ArenaRegion:
    """A named block of scratch, ``elements`` scalars of type T."""

    name: str
    elements: int
    doc: str = ""
    spillable: bool = True
    parts: tuple[tuple[str, int], ...] = attrs.field(default=(), converter=tuple)
    """Sub-arrays ``(name, elements)`` carved from this region (each padded): a group that
    spills together (RNEA's v, a and f).  ``elements`` is then their padded total."""

    def __attrs_post_init__(self):
        if not self.name.isidentifier():
            raise PluginError(f"arena region name {self.name!r} is not an identifier")
        if self.elements < 0:
            raise PluginError(f"arena region '{self.name}' has negative size")
        if self.parts:
            for part, size in self.parts:
                if not str(part).isidentifier() or int(size) < 0:
                    raise PluginError(f"arena region '{self.name}': bad part ({part!r}, {size!r})")
            total = sum(padded(size) for _, size in self.parts)
            if self.elements != total:
                raise PluginError(f"arena region '{self.name}': {self.elements} elements, its parts need {total}")

    @classmethod
    def group(cls, name: str, parts, doc: str = "") -> "ArenaRegion":
        """A region made of ``parts`` ``(name, elements)``, sized from them."""
        parts = tuple((p, int(k)) for p, k in parts)
        return cls(name, sum(padded(k) for _, k in parts), doc, parts=parts)

    def part_offsets(self) -> tuple[tuple[str, int], ...]:
        """``(part, offset)`` of every part, in elements from the region's start."""
        out, off = [], 0
        for part, size in self.parts:
            out.append((part, off))
            off += padded(size)
        return tuple(out)


@attrs.frozen
class SpillRung:
    """Rung ``level`` of the spill ladder: the regions it keeps in ``d_workspace``."""

    level: int
    name: str
    spilled: frozenset[str] = attrs.field(converter=frozenset, factory=frozenset)
    doc: str = ""


@attrs.frozen
class Placement:
    """Where a region lives under one rung: ``space`` is ``"smem"`` or ``"workspace"``."""

    region: str
    space: str
    offset: int  # in elements, from the start of its space
    elements: int


@attrs.frozen
class ArenaPlan:
    """An algorithm's arena for one robot: regions, rungs, and the rung of each tier."""

    algorithm: str
    regions: tuple[ArenaRegion, ...]
    rungs: tuple[SpillRung, ...]
    rung_of_tier: dict[Tier, int]
    target_smem_bytes: int

    def rung(self, tier: Tier) -> SpillRung:
        return self.rungs[self.rung_of_tier[tier]]

    def placements(self, rung: SpillRung) -> dict[str, Placement]:
        out: dict[str, Placement] = {}
        offs = {"smem": 0, "workspace": 0}
        for r in self.regions:
            space = "workspace" if r.name in rung.spilled else "smem"
            out[r.name] = Placement(r.name, space, offs[space], r.elements)
            offs[space] += padded(r.elements)
        return out

    def smem_elements(self, rung: SpillRung) -> int:
        return sum(padded(r.elements) for r in self.regions if r.name not in rung.spilled)

    def workspace_elements(self, rung: SpillRung) -> int:
        return sum(padded(r.elements) for r in self.regions if r.name in rung.spilled)

    def in_smem(self, rung: SpillRung, region: str) -> bool:
        return region not in rung.spilled

    def describe(self) -> list[str]:
        lines = []
        for r in self.regions:
            lines.append(f"region {r.name}: {r.elements} elements ({r.elements * 4} B float, "
                         f"{r.elements * 8} B double){' - ' + r.doc if r.doc else ''}")
        for rung in self.rungs:
            tiers = [t.name for t, lv in self.rung_of_tier.items() if lv == rung.level]
            lines.append(
                f"rung {rung.level} {rung.name}: smem {self.smem_elements(rung) * 8} B, workspace "
                f"{self.workspace_elements(rung) * 8} B (double)"
                + (f"; tiers {', '.join(tiers)}" if tiers else "")
            )
        return lines


def target_from_env() -> int | None:
    raw = os.environ.get(ENV_TARGET)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise CodegenError(f"{ENV_TARGET}={raw!r} is not an integer number of bytes") from None
    if value < 0:
        raise CodegenError(f"{ENV_TARGET}={raw!r} must not be negative")
    return value


ALL_SCRATCH = "*"
"""In a rung's ``spilled`` set: every spillable region of the arena (composed ones included)."""


def spill_ladder(*rungs: tuple) -> tuple[SpillRung, ...]:
    """The usual ladder: rung 0 keeps everything in shared memory, then ``rungs`` (``(name,
    spilled, doc)``, each spilling at least what the one before does), then every scratch region
    (:data:`ALL_SCRATCH`, the transform data included) in global memory."""
    return (SpillRung(0, "all in shared memory"), *(SpillRung(k, *r) for k, r in enumerate(rungs, 1)),
            SpillRung(len(rungs) + 1, "all scratch in global", {ALL_SCRATCH}, "every scratch region, XImats too"))


def callee_rung(algorithm: str, level: int) -> str:
    """In an orchestrator's rung: what rung ``level`` of the composed ``algorithm`` spills (its
    deepest where it has fewer), so that an orchestrator's ladder follows its callees' own
    analysis instead of naming their regions."""
    return f"@{algorithm}:{level}"


def expand_rungs(algorithm: str, rungs, regions, callee_plans: dict, declared=None) -> tuple:
    """``rungs`` with :data:`ALL_SCRATCH` and :func:`callee_rung` tokens replaced by region names.
    A token of a callee that is ``declared`` (an alternative) but not composed for this robot
    spills nothing."""
    spillable = {r.name for r in regions if r.spillable}
    out = []
    for rung in rungs:
        names: set = set()
        for token in rung.spilled:
            if token == ALL_SCRATCH:
                names |= spillable
            elif token.startswith("@"):
                callee, _, level = token[1:].partition(":")
                if callee not in callee_plans:
                    if declared is not None and callee in declared:
                        continue
                    raise PluginError(f"{algorithm}: rung {rung.level} follows '{callee}', which it does not compose")
                plan = callee_plans[callee]
                names |= set(plan.rungs[min(int(level), len(plan.rungs) - 1)].spilled)
            else:
                names.add(token)
        out.append(attrs.evolve(rung, spilled=frozenset(names)))
    return tuple(out)


def validate_ladder(algorithm: str, regions, rungs) -> None:
    names = [r.name for r in regions]
    if len(set(names)) != len(names):
        raise PluginError(f"{algorithm}: arena regions have duplicate names: {names}")
    if not rungs or rungs[0].spilled:
        raise PluginError(f"{algorithm}: rung 0 must exist and spill nothing")
    for i, rung in enumerate(rungs):
        if rung.level != i:
            raise PluginError(f"{algorithm}: rung levels must be 0, 1, 2, ... (got {rung.level} at {i})")
        unknown = rung.spilled - set(names)
        if unknown:
            raise PluginError(f"{algorithm}: rung {rung.level} spills undeclared regions {sorted(unknown)}")
        fixed = {r.name for r in regions if not r.spillable} & rung.spilled
        if fixed:
            raise PluginError(f"{algorithm}: rung {rung.level} spills unspillable regions {sorted(fixed)}")
        if i and not rungs[i - 1].spilled <= rung.spilled:
            raise PluginError(f"{algorithm}: rung {rung.level} must spill at least what rung {i - 1} does")


def select_rungs(algorithm: str, regions, rungs, target_smem_bytes: int | None = None) -> ArenaPlan:
    """Map each tier to a rung for this robot (three-way: shared, lite, minimal).

    SHARED takes the lowest rung fitting the target (the sm_90 opt-in cap unless
    ``GRID_CUDA_TARGET_SHARED_MEM_BYTES`` forces a smaller one), falling through
    to the most-spilled rung; LITE the lowest fitting ``min(48 KB, target)``, never
    below SHARED's; MINIMAL always the most-spilled.  The most-spilled rung must
    fit the sm_90 cap.
    """
    regions, rungs = tuple(regions), tuple(rungs)
    validate_ladder(algorithm, regions, rungs)
    forced = target_from_env() if target_smem_bytes is None else target_smem_bytes
    target = SM90_OPTIN_SMEM_BYTES if forced is None else forced

    def smem_bytes(rung):
        return sum(padded(r.elements) for r in regions if r.name not in rung.spilled) * SIZEOF_WIDEST

    last = len(rungs) - 1
    if smem_bytes(rungs[last]) > SM90_OPTIN_SMEM_BYTES:
        raise CodegenError(
            f"{algorithm}: even the most-spilled rung needs {smem_bytes(rungs[last])} B of shared "
            f"memory, over the {SM90_OPTIN_SMEM_BYTES} B cap"
        )

    def lowest_fitting(budget, floor=0):
        for rung in rungs[floor:]:
            if smem_bytes(rung) <= budget:
                return rung.level
        return last

    shared = lowest_fitting(target)
    lite = lowest_fitting(min(LITE_TARGET_SMEM_BYTES, target), floor=shared)
    return ArenaPlan(
        algorithm=algorithm,
        regions=regions,
        rungs=rungs,
        rung_of_tier={Tier.SHARED: shared, Tier.LITE: lite, Tier.MINIMAL: last},
        target_smem_bytes=target,
    )
