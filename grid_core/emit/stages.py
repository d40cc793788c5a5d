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
               dt: str = "dt", var: str = "rk") -> list:
    """``body(cdt, w)`` (the statements of one stage, given the C++ names of its ``c dt`` and its
    weight) once, in a loop over the stages of ``fractions`` and ``weights`` (``var`` = 0, 1, ...)
    that the compilers leave rolled."""
    assert len(fractions) == len(weights) > 0, (fractions, weights)

    def pick(values) -> str:  # the stage's value: a chain of conditionals on the loop variable
        return " : ".join([f"{var} == {k} ? T({v!r})" for k, v in enumerate(values[:-1])] + [f"T({values[-1]!r})"])

    cdt, w = f"{var}_cdt", f"{var}_w"
    return [n.Raw("#pragma unroll 1"),
            n.For(f"int {var} = 0", f"{var} < {len(fractions)}", f"++{var}", [
                n.Stmt(f"const T {cdt} = ({pick(fractions)}) * {dt}", comment="the stage's fraction of the step"),
                n.Stmt(f"const T {w} = {pick(weights)}", comment="its weight in the step's sums"),
                *body(cdt, w)])]
