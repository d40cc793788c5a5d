"""The parallelism review every algorithm carries (patterns P1-P4).

For each pattern the review says whether the lever applies and is done, applies
and is still to do, or does not apply, always with the reason and, where there
is one, the evidence (a measurement, a commit).  It is rendered in the docs and
printed by ``grid review``.
"""

from __future__ import annotations

import enum

import attrs

PATTERNS = {
    "P1": "level batching of tree recursions",
    "P2": "parallel independent columns",
    "P3": "loop-invariant hoisting with stored temporaries",
    "P4": "offline memory layout (sparse compaction, coalescing, topology helpers)",
}


class Verdict(enum.Enum):
    DONE = "done"
    TODO = "todo"
    NOT_APPLICABLE = "does not apply"


@attrs.frozen
class PatternReview:
    verdict: Verdict
    reason: str
    evidence: str = ""

    def __attrs_post_init__(self):
        if not isinstance(self.verdict, Verdict):
            raise TypeError(f"verdict must be a Verdict, not {self.verdict!r}")
        if not self.reason.strip():
            raise ValueError("a pattern review needs a reason")


def done(reason: str, evidence: str = "") -> PatternReview:
    return PatternReview(Verdict.DONE, reason, evidence)


def todo(reason: str, evidence: str = "") -> PatternReview:
    return PatternReview(Verdict.TODO, reason, evidence)


def not_applicable(reason: str, evidence: str = "") -> PatternReview:
    return PatternReview(Verdict.NOT_APPLICABLE, reason, evidence)


@attrs.frozen
class ParallelismReview:
    P1: PatternReview
    P2: PatternReview
    P3: PatternReview
    P4: PatternReview
    notes: str = ""

    def items(self):
        return [(key, PATTERNS[key], getattr(self, key)) for key in PATTERNS]

    def render(self, *, emitted: bool = True, measurements: str = "", layouts: str = "") -> str:
        """Plain-text rendering (``grid review``); ``layouts``: the generated line on the layouts
        (:meth:`~grid_core.emit.emitter.Emitter.layouts`)."""
        lines = []
        if not emitted:
            lines.append("GPU emitter: not yet emitted (the review states the plan)")
        for key, title, pr in self.items():
            lines.append(f"{key} {title}: {pr.verdict.value}")
            lines.append(f"    {pr.reason}")
            if pr.evidence:
                lines.append(f"    evidence: {pr.evidence}")
        if layouts:
            lines.append(f"layouts: {layouts}")
        if self.notes:
            lines.append(f"notes: {self.notes}")
        if measurements:
            lines.append(measurements)
        return "\n".join(lines)
