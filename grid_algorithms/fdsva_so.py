"""Second-order derivatives of forward dynamics, composed from IDSVA-SO by the -Minv contraction.

``(d2qdd_dq2, d2qdd_dqd2, d2qdd_dqdqd, d2qdd_dq_dtau) = fdsva_so(q, qd, tau, f_ext=None, gravity=...)``,
four ``(nv, nv, nv)`` tensors of ``qdd = FD(q, qd, tau)``:

* ``d2qdd_dq2[i, j, k]     = d/dq_k (d qdd_i / d q_j)``  (tangent derivatives, as in
  :mod:`grid_algorithms.idsva_so`: on a free-flyer NOT symmetric in ``(j, k)`` within the
  base's columns, ``d2qdd_dq2[i, j, k] - d2qdd_dq2[i, k, j] = sum_m dqdd_dq[i, m] [e_k, e_j]_m``),
* ``d2qdd_dqd2[i, j, k]    = d2 qdd_i / (d qd_j d qd_k)``,
* ``d2qdd_dqdqd[i, j, k]   = d2 qdd_i / (d q_j d qd_k)``,
* ``d2qdd_dq_dtau[i, j, k] = d2 qdd_i / (d q_j d tau_k) = d (M^-1)_ik / d q_j``.

So ``d2qdd_dq2[:, :, k]`` is the tangent derivative along ``q_k`` of Pinocchio's
``computeABADerivatives`` ``ddq_dq``, ``d2qdd_dqd2[:, :, k]`` that of ``ddq_dv`` along
``qd_k``, ``d2qdd_dqdqd[:, j, :]`` that of ``ddq_dv`` along ``q_j`` (equally that of
``ddq_dq[:, j]`` along ``qd_k``), and ``d2qdd_dq_dtau[:, j, :]`` that of ``ddq_dtau = M^-1``
along ``q_j``.

Differentiating ``M(q) dqdd/du + dtau/du (q, qd, qdd) = 0`` once more, with
``qdd = FD(q, qd, tau)``, the IDSVA-SO tensors of :mod:`grid_algorithms.idsva_so` evaluated
there (``d tau/d u`` depends on ``qdd`` only through ``M``, hence the ``dM_dq`` terms) and
``dqdd/dq``, ``dqdd/dqd`` of :mod:`grid_algorithms.forward_dynamics_gradient`:

    d2qdd_dq2[:, j, k]     = -M^-1 (d2tau_dq2[:, j, k] + dM_dq[:, :, j] dqdd_dq[:, k]
                                                        + dM_dq[:, :, k] dqdd_dq[:, j]),
    d2qdd_dqd2[:, j, k]    = -M^-1 d2tau_dqd2[:, j, k],
    d2qdd_dqdqd[:, j, k]   = -M^-1 (d2tau_dqdqd[:, j, k] + dM_dq[:, :, j] dqdd_dqd[:, k]),
    d2qdd_dq_dtau[:, j, k] = -M^-1 dM_dq[:, :, j] M^-1[:, k],

i.e. one contraction ``iL,Ljk->ijk`` of ``-M^-1`` with four ``nv^3`` tensors.
"""

from __future__ import annotations

import attrs
import numpy as np

from grid_core import Algorithm, Port, hookimpl
from grid_core.algorithm import DEFAULT_GRAVITY, dynamics_inputs
from grid_core.arena import callee_rung, spill_ladder
from grid_core.emit import nodes as n
from grid_core.emit.emitter import Emitter, LayerOptions
from grid_core.emit.storage import local_declaration, regions, vector
from grid_core.model import Robot
from grid_core.review import ParallelismReview, done, not_applicable, todo


def fdsva_so_contract(Minv, d2tau_dq2, d2tau_dqd2, d2tau_dqdqd, dM_dq, dqdd_dq, dqdd_dqd):
    """The -Minv contraction: the four second-order tensors of forward dynamics."""
    dMj = lambda X: np.einsum("imj,mk->ijk", dM_dq, X)  # noqa: E731  [:, j, k] = dM_dq[:, :, j] X[:, k]
    R_qq = d2tau_dq2 + dMj(dqdd_dq) + dMj(dqdd_dq).transpose(0, 2, 1)
    R_qv = d2tau_dqdqd + dMj(dqdd_dqd)
    R_qt = dMj(Minv)
    return tuple(-np.tensordot(Minv, R, axes=(1, 0)) for R in (R_qq, d2tau_dqd2, R_qv, R_qt))



# -- code generation -------------------------------------------------------------------
#
# An orchestrator on one XImats load.  Block layout: the composed forward-dynamics gradient
# (forward dynamics, minv and the inverse-dynamics gradient inside it) writes dqdd_dq and
# dqdd_dqd into this algorithm's fields and leaves qdd and Minv in its own (read there, by
# handle); idsva_so's inner writes its four tensors at that qdd into this algorithm's arena; the
# right-hand sides of d2qdd_dq2 and d2qdd_dqdqd are formed in place there (a cell a thread); then
# the -Minv contraction into the outputs (global memory), register-tiled along i; d2qdd_dq_dtau's
# right-hand side dM_dq[:, :, j] Minv[:, k] is formed last, in the first tensor's region (its
# contraction done by then), and contracted alone.  Per-state layout: no nv^3 scratch (a
# thread's stack would not hold it on a humanoid): idsva_so's per-state function writes its
# tensors straight into the outputs, which are then turned into fdsva_so's in place, a column
# (j, k) at a time (an nv-vector of scratch), dM_dq's last, in two passes (Minv dM_dq[:, :, j],
# then each i's slab times Minv, through an nv x nv copy).

_SECOND = ("d2tau_dq2", "d2tau_dqd2", "d2tau_dqdqd", "dM_dq")
"""idsva_so's outputs, in its order: each contracted into the output of the same position."""
_OUTPUTS = ("d2qdd_dq2", "d2qdd_dqd2", "d2qdd_dqdqd", "d2qdd_dq_dtau")


def default_tile(nv: int) -> int:
    """The contraction's outputs per thread along ``i``: the largest divisor of ``nv`` that is
    at most 8 and leaves at least two tiles (35 -> 7, 18 -> 6, 7 -> 1)."""
    return max(r for r in range(1, 9) if nv % r == 0 and (r == 1 or nv // r >= 2))


def _first(nv: int) -> tuple:
    return (vector("dqdd_dq", nv * nv, "d qdd / d q of the composed forward-dynamics gradient", cols=nv),
            vector("dqdd_dqd", nv * nv, "d qdd / d qd of the composed forward-dynamics gradient", cols=nv))


def _fields(nv: int) -> tuple:
    """The block layout's arena: the first derivatives, then idsva_so's four tensors (the
    contraction's right-hand sides, formed in place)."""
    return _first(nv) + tuple(vector(x, nv ** 3, f"idsva_so's {x} at qdd, then in place the -Minv contraction's "
                                        "right-hand side") for x in _SECOND)


def _state_fields(nv: int) -> tuple:
    """The per-state layout's locals (no nv^3 array: the outputs serve)."""
    return _first(nv) + (vector("qdd", nv, "FD(q, qd, tau, f_ext)"),
                         vector("inv_M", nv * nv, "the inverse joint-space inertia matrix", cols=nv),
                         vector("col", nv, "one column (j, k) of a right-hand side"),
                         vector("slab", nv * nv, "one slab i of Minv dM_dq, copied"))


@attrs.frozen
class FdsvaSOOptions(LayerOptions):
    """fdsva_so's knob: the register tile of its -Minv contraction."""

    minv_tile: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    """Outputs along ``i`` each thread of the block layout's contraction produces, sharing every
    load of the right-hand side (a divisor of nv); 0: :func:`default_tile`'s choice, 1: the untiled
    loop.  Every tile sums each cell in the same order, so the outputs are bit-identical."""


def _rhs(nv: int, dm, dq, dqd) -> list:
    """The extra terms of cell ``(L, j, k)`` (C++ ints ``L``, ``j``, ``k`` in scope) of the
    right-hand sides: ``x = (dM_j dqdd_dq)[L, k] + (dM_k dqdd_dq)[L, j]`` and
    ``y = (dM_j dqdd_dqd)[L, k]``, with ``dm``, ``dq``, ``dqd`` the arrays' base names."""
    nv2 = nv * nv
    return [n.Stmt("T x = T(0), y = T(0)"),
            n.For("int m = 0", f"m < {nv}", "++m", [
                n.Stmt(f"const T mj = {dm}[L * {nv2} + m * {nv} + j], mk = {dm}[L * {nv2} + m * {nv} + k]"),
                n.Stmt(f"x += mj * {dq}[m * {nv} + k] + mk * {dq}[m * {nv} + j]"),
                n.Stmt(f"y += mj * {dqd}[m * {nv} + k]")])]


def _cell(nv: int) -> n.Stmt:
    return n.Stmt(f"const int L = c / {nv * nv}, j = c / {nv} % {nv}, k = c % {nv}")


def _contract(nv: int, tile: int, minv: str, pairs: list) -> list:
    """``out[i, j, k] = -sum_L Minv[i, L] rhs[L, j, k]`` for every ``(out, rhs)`` of ``pairs`` (base
    names), a thread per ``tile`` consecutive rows ``i`` of one column ``(j, k)`` (P2): each load of
    a right-hand side serves ``tile`` outputs, each cell summed over ``L`` in order (so every tile
    gives the same bits)."""
    nv2 = nv * nv
    accs = [f"a{t}" for t in range(len(pairs))]
    per_l = [n.Stmt(f"const T r{t} = {rhs}[L * {nv2} + jk]") for t, (_, rhs) in enumerate(pairs)]
    per_l += [n.Raw("#pragma unroll"), n.For("int u = 0", f"u < {tile}", "++u", [
        n.Stmt(f"const T w = {minv}[(i0 + u) * {nv} + L]"),
        *[n.Stmt(f"{a}[u] += w * r{t}") for t, a in enumerate(accs)]])]
    return [n.BlockStrideLoop("e", nv // tile * nv2, [
        n.Stmt(f"const int i0 = e / {nv2} * {tile}, jk = e % {nv2}"),
        n.Stmt(f"T {', '.join(f'{a}[{tile}]' for a in accs)}"),
        n.Raw("#pragma unroll"),
        n.For("int u = 0", f"u < {tile}", "++u", [n.Stmt(f"{a}[u] = T(0)") for a in accs]),
        n.For("int L = 0", f"L < {nv}", "++L", per_l),
        n.Raw("#pragma unroll"),
        n.For("int u = 0", f"u < {tile}", "++u",
              [n.Stmt(f"{out}[(i0 + u) * {nv2} + jk] = -{a}[u]") for a, (out, _) in zip(accs, pairs)])])]


def _minv_column(nv: int, minv: str, out: str, col: str) -> n.For:
    """``out[:, j, k] = -Minv col`` (per-state: column ``jk`` of ``out``, an nv-vector ``col``)."""
    return n.For("int i = 0", f"i < {nv}", "++i", [
        n.Stmt("T acc = T(0)"),
        n.For("int L = 0", f"L < {nv}", "++L", [n.Stmt(f"acc += {minv}[i * {nv} + L] * {col}[L]")]),
        n.Stmt(f"{out}[i * {nv * nv} + jk] = -acc")])


class FdsvaSOEmitter(Emitter):
    Options = FdsvaSOOptions
    global_inputs = ("f_ext",)  # handed, in place, to the composed inners
    nullable_inputs = ("f_ext",)
    global_outputs = _OUTPUTS  # 4 nv^3 values: written in place, as idsva_so's
    composes = ("forward_dynamics_gradient", "idsva_so", "forward_dynamics", "minv")
    in_default_set = False  # it composes idsva_so's code (left out of the default set): name it to build it

    def block_threads_hint(self, robot: Robot) -> int:
        return robot.nv ** 3  # the right-hand sides' cells, one thread each

    def fields(self, layers) -> tuple:
        return _fields(layers.robot.nv)

    def tile(self, layers) -> int:
        nv = layers.robot.nv
        tile = int(layers.ctx.knob("minv_tile", 0, default_tile(nv))[0])
        if nv % tile:
            from grid_core.errors import CodegenError

            raise CodegenError(f"fdsva_so: minv_tile {tile} does not divide nv = {nv}")
        return tile

    def inner_doc(self, layers) -> str:
        return f"The -Minv contraction's register tile: {self.tile(layers)} rows a thread."

    def inner_body(self, layers) -> list:
        fdg, ids = layers.compose("forward_dynamics_gradient"), layers.compose("idsva_so")
        nv = layers.robot.nv
        done_by = {x: y.base for x, y in layers.arrays(fdg.emitter.fields(fdg), owner=fdg).items()}
        a = {x: y.base for x, y in layers.arrays(self.fields(layers)).items()}
        out = {x: v.base for x, v in layers.vectors().items()}
        minv = done_by["inv_M"]
        return [
            n.Comment("d qdd / d (q, qd): the composed forward-dynamics gradient (qdd and Minv left in its fields)"),
            layers.call_inner(fdg, s_dqdd_dq=a["dqdd_dq"], s_dqdd_dqd=a["dqdd_dqd"], s_q="s_q", s_qd="s_qd",
                              s_tau="s_tau", f_ext="f_ext"),
            n.Sync(),
            n.Comment("idsva_so's four tensors at that qdd, into this algorithm's arena: the composed idsva_so"),
            layers.call_inner(ids, **{x: a[x] for x in _SECOND}, s_q="s_q", s_qd="s_qd", s_qdd=done_by["qdd"],
                              f_ext="f_ext"),
            n.Sync(),
            n.Comment("the right-hand sides, in place: d2tau_dq2 + dM_j dqdd_dq[:, k] + dM_k dqdd_dq[:, j] and\n"
                      "d2tau_dqdqd + dM_j dqdd_dqd[:, k], a cell (L, j, k) a thread (P2)"),
            n.BlockStrideLoop("c", nv ** 3, [_cell(nv), *_rhs(nv, a["dM_dq"], a["dqdd_dq"], a["dqdd_dqd"]),
                                             n.Stmt(f"{a['d2tau_dq2']}[c] += x"),
                                             n.Stmt(f"{a['d2tau_dqdqd']}[c] += y")]),
            n.Sync(),
            n.Comment("-Minv times the first three, into the outputs"),
            *_contract(nv, self.tile(layers), minv, [(out[o], a[x]) for o, x in zip(_OUTPUTS[:3], _SECOND[:3])]),
            n.Sync(),
            n.Comment("d2qdd_dq_dtau's right-hand side dM_j Minv[:, k], into the first tensor's region (contracted)"),
            n.BlockStrideLoop("c", nv ** 3, [
                _cell(nv), n.Stmt("T x = T(0)"),
                n.For("int m = 0", f"m < {nv}", "++m",
                      [n.Stmt(f"x += {a['dM_dq']}[L * {nv * nv} + m * {nv} + j] * {minv}[m * {nv} + k]")]),
                n.Stmt(f"{a['d2tau_dq2']}[c] = x")]),
            n.Sync(),
            *_contract(nv, self.tile(layers), minv, [(out[_OUTPUTS[3]], a[_SECOND[0]])]),
        ]

    def state_body(self, layers) -> list:
        fdg, ids, fd, minv = (layers.compose(x) for x in self.composes)
        nv, nv2 = layers.robot.nv, layers.robot.nv ** 2
        arr = layers.arrays(_state_fields(nv), local=True)
        a = {x: y.base for x, y in arr.items()}
        out = {x: v.base for x, v in layers.vectors(local=True).items()}
        d2q, d2v, dqv, dm = (out[x] for x in _OUTPUTS)  # idsva_so's tensors, then ours, in place
        use = {"USE_F_EXT": "USE_F_EXT"}
        col, im = a["col"], a["inv_M"]
        return [
            local_declaration(arr.values(), comment="the composed results and the columns' scratch, local"),
            layers.call_state(fd, use, qdd=a["qdd"], q="q", qd="qd", tau="tau", f_ext="f_ext"),
            layers.call_state(fdg, use, dqdd_dq=a["dqdd_dq"], dqdd_dqd=a["dqdd_dqd"], q="q", qd="qd", tau="tau",
                              f_ext="f_ext"),
            layers.call_state(minv, Minv=im, q="q"),
            n.Comment("idsva_so's tensors at qdd, straight into the outputs (dM_dq into d2qdd_dq_dtau's)"),
            layers.call_state(ids, use, **dict(zip(_SECOND, (d2q, d2v, dqv, dm))), q="q", qd="qd", qdd=a["qdd"],
                              f_ext="f_ext"),
            n.Comment("a column (j, k) at a time, in place: its right-hand sides, then -Minv times them"),
            n.For("int jk = 0", f"jk < {nv2}", "++jk", [
                n.Stmt(f"const int j = jk / {nv}, k = jk % {nv}"),
                n.For("int L = 0", f"L < {nv}", "++L", [n.Stmt(f"{col}[L] = {d2v}[L * {nv2} + jk]")]),
                _minv_column(nv, im, d2v, col),
                n.For("int L = 0", f"L < {nv}", "++L", [
                    *_rhs(nv, dm, a["dqdd_dq"], a["dqdd_dqd"]),
                    n.Stmt(f"{col}[L] = {dqv}[L * {nv2} + jk] + y"),
                    n.Stmt(f"{a['slab']}[L] = {d2q}[L * {nv2} + jk] + x", comment="slab: the second column")]),
                _minv_column(nv, im, dqv, col),
                _minv_column(nv, im, d2q, a["slab"])]),
            n.Comment("d2qdd_dq_dtau = -Minv dM_j Minv, in place: first Minv dM_j, a column (m, j) at a time"),
            n.For("int jk = 0", f"jk < {nv2}", "++jk", [
                n.For("int L = 0", f"L < {nv}", "++L", [n.Stmt(f"{col}[L] = {dm}[L * {nv2} + jk]")]),
                n.For("int i = 0", f"i < {nv}", "++i", [
                    n.Stmt("T acc = T(0)"),
                    n.For("int L = 0", f"L < {nv}", "++L", [n.Stmt(f"acc += {im}[i * {nv} + L] * {col}[L]")]),
                    n.Stmt(f"{dm}[i * {nv2} + jk] = acc")])]),
            n.Comment("then each slab i times Minv: [i, j, k] = -sum_m (Minv dM_j)[i, m] Minv[m, k]"),
            n.For("int i = 0", f"i < {nv}", "++i", [
                n.For("int c = 0", f"c < {nv2}", "++c", [n.Stmt(f"{a['slab']}[c] = {dm}[i * {nv2} + c]")]),
                n.For("int c = 0", f"c < {nv2}", "++c", [
                    n.Stmt(f"const int j = c / {nv}, k = c % {nv}"),
                    n.Stmt("T acc = T(0)"),
                    n.For("int m = 0", f"m < {nv}", "++m",
                          [n.Stmt(f"acc += {a['slab']}[m * {nv} + j] * {im}[m * {nv} + k]")]),
                    n.Stmt(f"{dm}[i * {nv2} + c] = -acc")])]),
        ]


class FdsvaSO(Algorithm):
    name = "fdsva_so"
    summary = ("second-order derivatives of forward dynamics (d2qdd_dq2, d2qdd_dqd2, d2qdd_dqdqd, "
               "d2qdd_dq_dtau), each (nv, nv, nv): -Minv contraction of idsva_so, composed")
    math = r"""
With :math:`\ddot q = \mathrm{FD}(q, \dot q, \tau)` and the inverse-dynamics tensors at that
:math:`\ddot q`:

.. math::

   \frac{\partial^2 \ddot q}{\partial q_j \partial q_k} = -M^{-1}\Big(
       \frac{\partial^2 \tau}{\partial q_j \partial q_k}
       + \frac{\partial M}{\partial q_j} \frac{\partial \ddot q}{\partial q_k}
       + \frac{\partial M}{\partial q_k} \frac{\partial \ddot q}{\partial q_j}\Big), \qquad
   \frac{\partial^2 \ddot q}{\partial \dot q_j \partial \dot q_k} = -M^{-1}
       \frac{\partial^2 \tau}{\partial \dot q_j \partial \dot q_k},

   \frac{\partial^2 \ddot q}{\partial q_j \partial \dot q_k} = -M^{-1}\Big(
       \frac{\partial^2 \tau}{\partial q_j \partial \dot q_k}
       + \frac{\partial M}{\partial q_j} \frac{\partial \ddot q}{\partial \dot q_k}\Big), \qquad
   \frac{\partial^2 \ddot q}{\partial q_j \partial \tau_k} = -M^{-1}
       \frac{\partial M}{\partial q_j} M^{-1} e_k .
"""
    depends_on = ("idsva_so", "minv", "forward_dynamics", "forward_dynamics_gradient")
    emitter = FdsvaSOEmitter
    review = ParallelismReview(
        P1=not_applicable("no tree recursion of its own: the recursions are those of idsva_so, "
                          "minv, forward_dynamics and the inverse-dynamics gradient (see their reviews)"),
        P2=done("block layout: the right-hand sides are nv^3 independent cells, a thread each; the "
                "contraction is 4 nv^3 independent nv-long dot products, a thread per tile of rows i of "
                "one column (j, k) (the three tensors that share Minv's rows at once), register-tiled "
                "along i so each load of a right-hand side serves the tile (minv_tile; bit-identical to "
                "the untiled loop); consecutive threads take consecutive columns, so the loads and the "
                "stores coalesce"),
        P3=todo("done in the block layout: one XImats load for every composed inner, qdd and Minv read "
                "where the composed forward-dynamics gradient left them (no second forward dynamics or "
                "minv), the right-hand sides formed in place in idsva_so's tensors. Left: the per-state "
                "layout calls forward dynamics and minv again beside the gradient (the composed "
                "per-state functions keep their results local), and d2qdd_dq_dtau's slab is symmetric in "
                "(i, k) (half of it would do)"),
        P4=todo("the right-hand sides and the contraction run over every cell, the structural zeros of "
                "idsva_so's tensors (triples off every chain) included; a cell table as idsva_so's would "
                "skip them, and dM_dq's symmetry in its first two indices would halve its reads"),
        notes="an orchestrator on one XImats load (the forward-dynamics gradient's and idsva_so's inners, by "
              "handle); idsva_so's four nv^3 tensors are the arena's bulk (the first rung to spill); the "
              "per-state layout composes the per-state functions and works in place in the outputs (no nv^3 "
              "scratch)",
    )

    def inputs(self, robot: Robot):
        return dynamics_inputs(robot, "tau")

    def outputs(self, robot: Robot, **options):
        n = robot.nv
        return (
            Port("d2qdd_dq2", (n, n, n), "[i, j, k] = d/dq_k (d qdd_i / d q_j), tangent space"),
            Port("d2qdd_dqd2", (n, n, n), "[i, j, k] = d2 qdd_i / (d qd_j d qd_k)"),
            Port("d2qdd_dqdqd", (n, n, n), "[i, j, k] = d2 qdd_i / (d q_j d qd_k)"),
            Port("d2qdd_dq_dtau", (n, n, n), "[i, j, k] = d2 qdd_i / (d q_j d tau_k) = d Minv_ik / d q_j"),
        )

    def reference(self, ctx, q, qd, tau, f_ext=None, gravity=DEFAULT_GRAVITY):
        qdd = ctx.forward_dynamics(q, qd, tau, f_ext, gravity)
        d2tau_dq2, d2tau_dqd2, d2tau_dqdqd, dM_dq = ctx.idsva_so(q, qd, qdd, f_ext, gravity)
        dqdd_dq, dqdd_dqd = ctx.forward_dynamics_gradient(q, qd, tau, f_ext, gravity)
        return fdsva_so_contract(ctx.minv(q), d2tau_dq2, d2tau_dqd2, d2tau_dqdqd, dM_dq, dqdd_dq, dqdd_dqd)

    def arenas(self, robot: Robot, options=None):
        return regions(_fields(robot.nv))

    def spill_rungs(self, robot: Robot, options=None):
        composes = ("forward_dynamics_gradient", "idsva_so")
        return spill_ladder(
            ("the contracted tensors in global", set(_SECOND[:3]),
             "d2tau_dq2, d2tau_dqd2, d2tau_dqdqd (read once per tile by the contraction) go to d_workspace"),
            ("every idsva_so tensor in global", set(_SECOND),
             "dM_dq too (read 2 nv times per cell by the right-hand sides)"),
            ("the callees' first spill", {*_SECOND, *(callee_rung(c, 1) for c in composes)},
             "and what the composed gradient's and idsva_so's rung 1 spill"))


@hookimpl
def grid_register_algorithms():
    return [FdsvaSO]
