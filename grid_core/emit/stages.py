"""A multi-stage integration scheme's later stages as one loop that the compilers keep rolled.

RK4's stages 2 to 4 run the same statements (move the configuration, call the composed dynamics at
the stage, add the weighted result to the sums) with only the stage's fraction of the step and its
weight changing.  Emitted once in a loop over the stages (``#pragma unroll 1``), the composed calls
appear once for the three stages instead of three times: the forward-dynamics gradient that the RK4
integrator gradient inlines at every stage is most of its translation unit, which then holds two
copies of it (stage 1's and the loop's), not four.  The integration family's algorithms call it
with :data:`grid_core.algorithm.RK4_STAGES` and ``RK4_WEIGHTS``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from . import nodes as n


def stage_loop(fractions: Sequence[float], weights: Sequence[float], body: Callable[[str, str], list],
               what: str) -> list:
    """``body(cdt, w)`` (the statements of one stage, given the C++ names of its ``c dt`` and its
    weight) once, in a loop over the stages of ``fractions`` and ``weights`` (``rk`` = 0, 1, ...)
    that the compilers leave rolled, under a comment naming the stages (numbered from 2: the
    scheme's first stage is the caller's), their fractions and weights, then ``what``."""
    assert len(fractions) == len(weights) > 0, (fractions, weights)

    def pick(values) -> str:  # the stage's value: a chain of conditionals on the loop variable
        return " : ".join([f"rk == {k} ? T({v!r})" for k, v in enumerate(values[:-1])] + [f"T({values[-1]!r})"])

    numbers = [str(k) for k in range(2, len(fractions) + 2)]
    stages = numbers[0] if len(numbers) == 1 else f"{', '.join(numbers[:-1])} and {numbers[-1]}"
    return [n.Comment(f"stages {stages} at c = {', '.join(map(str, fractions))} of the step, weights "
                      f"{', '.join(map(str, weights))}: {what}"),
            n.Raw("#pragma unroll 1"),
            n.For("int rk = 0", f"rk < {len(fractions)}", "++rk", [
                n.Stmt(f"const T rk_cdt = ({pick(fractions)}) * dt", comment="the stage's fraction of the step"),
                n.Stmt(f"const T rk_w = {pick(weights)}", comment="its weight in the step's sums"),
                *body("rk_cdt", "rk_w")])]
