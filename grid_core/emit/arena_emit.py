"""Emission of an :class:`~grid_core.arena.ArenaPlan`: size constants and pointer carving.

Both come from the same plan, so the ``*_SMEM_BYTES`` / ``*_WORKSPACE_BYTES``
constants and the offsets the code carves with cannot drift apart.

Naming, for an algorithm ``X`` (upper case ``PFX``) with spillable regions ``R``:

* ``PFX_R_IN_SMEM<TIER>()``: where the rung of ``TIER`` keeps region ``R``;
* ``PFX_SMEM_BYTES<T, TIER>()`` / ``PFX_WORKSPACE_BYTES<T, TIER>()``: the kernel's
  dynamic shared memory (inputs and outputs included) and its global workspace
  per block at ``TIER``;
* ``PFX_DEVICE_SMEM_BYTES<T, R_IN_SMEM...>()`` / ``PFX_DEVICE_WORKSPACE_BYTES<...>()``:
  the scratch of ``X_device`` for given placement flags, and
  ``PFX_DEVICE_DYNAMIC_SHARED_MEM_BYTES<T>()`` for everything in shared memory.
"""

from __future__ import annotations

from ..arena import ArenaPlan, Tier, padded
from . import nodes as n


def flag(region: str) -> str:
    return f"{region.upper()}_IN_SMEM"


def spillable(plan: ArenaPlan):
    return [r for r in plan.regions if r.spillable]


def fixed(plan: ArenaPlan):
    return [r for r in plan.regions if not r.spillable]


def fixed_elements(plan: ArenaPlan) -> int:
    return sum(padded(r.elements) for r in fixed(plan))


def flag_params(plan: ArenaPlan, default: bool = True) -> str:
    """``bool A_IN_SMEM = true, bool B_IN_SMEM = true`` for the placement template."""
    tail = " = true" if default else ""
    return ", ".join(f"bool {flag(r.name)}{tail}" for r in spillable(plan))


def flag_args(plan: ArenaPlan, tier: Tier) -> str:
    """The literal flags of ``tier``'s rung, for a template argument list."""
    rung = plan.rung(tier)
    return ", ".join("true" if plan.in_smem(rung, r.name) else "false" for r in spillable(plan))


def _sum_expr(terms: list[tuple[str, int]], in_smem: bool) -> str:
    """Sum of padded sizes of regions on one side, as a constexpr expression of the flags."""
    parts = []
    for fl, size in terms:
        cond = fl if in_smem else f"!{fl}"
        parts.append(f"({cond} ? {size} : 0)")
    return " + ".join(parts) if parts else "0"


def carve_pairs(plan: ArenaPlan, smem_base: str, ws_base: str) -> list:
    """``T *s_R`` (its shared-memory slot, or nullptr) and ``T *d_R`` (its workspace slot, or
    nullptr) of each spillable region, as its flag places it: what an inner's placement takes."""
    stmts, before = [], []
    for r in spillable(plan):
        f = flag(r.name)
        stmts.append(n.Stmt(f"T *s_{r.name} = {f} ? {smem_base} + ({_sum_expr(before, True)}) : nullptr"))
        stmts.append(n.Stmt(f"T *d_{r.name} = {f} ? nullptr : {ws_base} + ({_sum_expr(before, False)})"))
        before.append((f, padded(r.elements)))
    return stmts


def size_constants(plan: ArenaPlan, pfx: str) -> list:
    """The per-tier placement and size constants, and the device-level ones."""
    out: list = [n.Comment(f"Arena of {plan.algorithm} for this robot (one plan: sizes and carving agree).")]
    for line in plan.describe():
        out.append(n.Comment(line))
    for r in spillable(plan):
        body = []
        for tier in Tier:
            lit = "true" if plan.in_smem(plan.rung(tier), r.name) else "false"
            body.append(f"TIER == {tier.cpp} ? {lit} : ")
        expr = "".join(body) + "true"
        out.append(n.Function(f"__host__ __device__ constexpr bool {pfx}_{flag(r.name)}()",
                              [n.Stmt(f"return {expr}")], template="template <int TIER>"))

    def per_tier(fn_name, elements_of):
        expr = ""
        for tier in Tier:
            expr += f"TIER == {tier.cpp} ? {elements_of(plan.rung(tier))} : "
        expr += "0"
        return n.Function(
            f"__host__ __device__ constexpr size_t {fn_name}()",
            [n.Stmt(f"return size_t({expr}) * sizeof(T)")],
            template="template <typename T, int TIER = TIER_SHARED>",
        )

    out.append(n.Comment("Kernel dynamic shared memory (inputs and outputs included) and workspace per block."))
    out.append(per_tier(f"{pfx}_SMEM_BYTES", plan.smem_elements))
    out.append(per_tier(f"{pfx}_WORKSPACE_BYTES", plan.workspace_elements))
    sp = [(flag(r.name), padded(r.elements)) for r in spillable(plan)]
    params = flag_params(plan)
    out.append(n.Comment(f"Scratch of {plan.algorithm}_device for given placement flags."))
    out.append(n.Function(
        f"__host__ __device__ constexpr size_t {pfx}_DEVICE_SMEM_BYTES()",
        [n.Stmt(f"return size_t({_sum_expr(sp, True)}) * sizeof(T)")],
        template=f"template <typename T, {params}>",
    ))
    out.append(n.Function(
        f"__host__ __device__ constexpr size_t {pfx}_DEVICE_WORKSPACE_BYTES()",
        [n.Stmt(f"return size_t({_sum_expr(sp, False)}) * sizeof(T)")],
        template=f"template <typename T, {params}>",
    ))
    out.append(n.Function(
        f"__host__ __device__ constexpr size_t {pfx}_DEVICE_DYNAMIC_SHARED_MEM_BYTES()",
        [n.Stmt(f"return {pfx}_DEVICE_SMEM_BYTES<T>()")],
        template="template <typename T>",
    ))
    return out
