"""Derivatives of one integrator step with respect to the state and the joint forces.

``(dq_next_dq, dq_next_dqd, dq_next_dtau, dqd_next_dq, dqd_next_dqd, dqd_next_dtau) =
integrator_gradient(q, qd, tau, dt, method)``, each ``nv x nv``, of
:mod:`grid_algorithms.integrator`'s ``(q_next, qd_next)``.

Tangent spaces: a derivative *with respect to* ``q`` is along ``q (+) dq`` (its columns are
v coordinates, as everywhere); a derivative *of* ``q_next`` is expressed in the tangent
space at ``q_next``: row block ``dq_next_dx`` is ``d/dx log(q_next(x)^-1 q_next(x + dx))``,
i.e. ``q_next(x (+) dx) = q_next(x) (+) (dq_next_dx dx) + O(dx^2)`` -- Pinocchio's
``dIntegrate`` convention (on every non-free-flyer coordinate, a plain derivative).

With ``qdd = FD(q, qd, tau)``, its derivatives ``dqdd_dq``, ``dqdd_dqd``
(:mod:`grid_algorithms.forward_dynamics_gradient`) and ``dqdd_dtau = M^-1``, and
``(Dq, Dv) = dIntegrate(q, v)`` at the increment ``v`` (``Ad(exp6(v)^-1)`` and
``Jexp6(v)`` on a free-flyer, the identity elsewhere):

* semi-implicit Euler, ``v = dt qd_next``:
  ``dqd_next_dq = dt dqdd_dq``, ``dqd_next_dqd = I + dt dqdd_dqd``, ``dqd_next_dtau = dt M^-1``;
  ``dq_next_dq = Dq + dt Dv dqd_next_dq``, ``dq_next_dqd = dt Dv dqd_next_dqd``,
  ``dq_next_dtau = dt Dv dqd_next_dtau``;
* explicit Euler, ``v = dt qd``: the same ``qd_next`` rows; ``dq_next_dq = Dq``,
  ``dq_next_dqd = dt Dv``, ``dq_next_dtau = 0``;
* RK4 (the integrator's stages ``(q_k, v_k, a_k)``, ``q_k = q (+) c_k dt v_{k-1}``): the chain
  rule through the stages, each derivative a ``nv x 3 nv`` block row over ``(q, qd, tau)``, a
  stage's ``q_k`` row block in the tangent space at ``q_k``: ``Q_1 = [I 0 0]``, ``V_1 = [0 I 0]``,
  ``A_k = dqdd_dq(k) Q_k + dqdd_dqd(k) V_k + [0 0 M^-1(q_k)]``;
  ``Q_{k+1} = Dq Q_1 + c dt Dv V_k`` and ``V_{k+1} = V_1 + c dt A_k`` (``(Dq, Dv)`` at ``(q, c dt v_k)``);
  then ``dq_next = Dq Q_1 + dt/6 Dv (V_1 + 2 V_2 + 2 V_3 + V_4)`` (``(Dq, Dv)`` at the final
  increment) and ``dqd_next = V_1 + dt/6 (A_1 + 2 A_2 + 2 A_3 + A_4)``.
"""

from __future__ import annotations

import numpy as np

from grid_core import Algorithm, Port, hookimpl
from grid_core.algorithm import DEFAULT_GRAVITY, RK4_STAGES, RK4_WEIGHTS, check_integration_method, integration_inputs
from grid_core.arena import callee_rung, spill_ladder
from grid_core.emit import nodes as n
from grid_core.emit.emitter import Emitter
from grid_core.emit.lie_steps import move_steps, move_tables
from grid_core.emit.stages import stage_loop
from grid_core.emit.storage import local_declaration, regions, vector
from grid_core.model import JointType, Robot
from grid_core.model.lie import dintegrate, integrate
from grid_core.review import ParallelismReview, done, not_applicable, todo

# -- code generation -------------------------------------------------------------------
#
# An orchestrator on one XImats load: forward_dynamics_gradient's inner (by handle) writes
# d qdd / d (q, qd) straight into the qd_next rows, which it then scales in place; its composed
# results (qdd, Minv) are read where it left them (its own declared fields); then, per free-flyer,
# dIntegrate's two 6 x 6 blocks at the step's increment (the framework's shared "lie" helpers),
# and the q_next rows: the identity's rows on every joint coordinate, the 6 x 6 products on a
# free-flyer's.  The per-state layout composes the per-state functions of the gradient, of
# forward dynamics (for qdd, where a free-flyer needs the increment) and of minv.  RK4 calls the
# composed gradient at each of its four stages (XImats loaded again at the stage's configuration,
# placed by the framework's move q (+) v; stages 2 to 4 in one rolled loop, grid_core.emit.stages),
# carrying the stages' block rows Q_k, V_k, A_k in its own fields and the weighted sums of the V_k
# and A_k in the outputs.


def _free_flyers(robot: Robot) -> list[int]:
    """The first v index of each free-flyer."""
    return [b.v_index for b in robot.bodies if b.jtype is JointType.FLOATING and b.mimic is None]


def _fields(robot: Robot, method: str = "semi_implicit_euler") -> tuple:
    """The intermediate results: the increment ``q`` moves by and dIntegrate's blocks; RK4 adds its
    stage's configuration and velocity, the velocities' weighted sum, the stage's derivatives
    ``(Q_k, V_k, A_k)`` (``nv x 3 nv`` block rows, three ``nv x nv`` blocks over ``(q, qd, tau)``)
    and the composed gradient's two blocks at the stage."""
    nv, nn = robot.nv, robot.nv * robot.nv
    out = (vector("increment", nv, "the tangent vector q moves by"),)
    ff = _free_flyers(robot)
    out += ((vector("dintegrate", 72 * len(ff), "per free-flyer: Dq = Ad(exp6(v)^-1), then Dv = Jr(v), "
                    "6 x 6 row-major"),) if ff else ())
    if method == "rk4":
        out += (vector("stage_q", robot.nq, "a stage's configuration q (+) c dt v"),
                vector("stage_qd", nv, "a stage's velocity qd + c dt a"),
                vector("sum_qd", nv, "v1 + 2 v2 + 2 v3 + v4 (so far)"),
                vector("dstage_q", 3 * nn, "Q_k: d q_k / d (q, qd, tau), tangent at q_k, three nv x nv blocks"),
                vector("dstage_qd", 3 * nn, "V_k: d v_k / d (q, qd, tau), three nv x nv blocks"),
                vector("dstage_qdd", 3 * nn, "A_k: d a_k / d (q, qd, tau), three nv x nv blocks"),
                vector("stage_dqdd_dq", nn, "d qdd / d q at the stage", cols=nv),
                vector("stage_dqdd_dqd", nn, "d qdd / d qd at the stage", cols=nv))
    return out


class IntegratorGradientEmitter(Emitter):
    global_inputs = ("f_ext",)  # handed, in place, to the composed inners
    nullable_inputs = ("f_ext",)
    composes = ("forward_dynamics_gradient", "forward_dynamics", "minv")
    reloads_ximats = True  # RK4's stages
    shared_helpers = ("lie",)

    def composed(self, options, tuning):
        return self.composes

    def block_threads_hint(self, robot: Robot) -> int:
        return robot.nv * robot.nv  # the blocks' cells, one thread each

    def fields(self, layers) -> tuple:
        return _fields(layers.robot, layers.ctx.values["method"])

    def helpers(self, layers) -> list:
        ff = _free_flyers(layers.robot)
        row_ff = [-1] * layers.robot.nv
        for k, v in enumerate(ff):
            row_ff[v:v + 6] = [k] * 6
        return [n.ConstArray("int", f"{layers.pfx}_FF_OF_ROW", row_ff, qualifiers="static __device__ const",
                             comment="row r's free-flyer (-1: a joint coordinate, whose dIntegrate row is the identity's)"),
                n.ConstArray("int", f"{layers.pfx}_FF_V", ff or [0], qualifiers="static __device__ const",
                             comment="each free-flyer's first v index"),
                *(move_tables(layers.pfx, layers.robot) if layers.ctx.values["method"] == "rk4" else [])]

    def inner_doc(self, layers) -> str:
        return f"Method: {layers.ctx.values['method']} (fixed at generation time)."

    def inner_body(self, layers) -> list:
        fdg = layers.compose("forward_dynamics_gradient")
        done_by = layers.arrays(fdg.emitter.fields(fdg), owner=fdg)  # its results, where it left them
        a = {x: y.base for x, y in layers.arrays(self.fields(layers)).items()}
        io = {p.name: f"s_{p.name}" for p in (*layers.outputs, *layers.states) if p.name != "f_ext"}
        if layers.ctx.values["method"] == "rk4":
            def stage(q: str, qd: str, dq: str, dqd: str) -> list:
                return [layers.call_inner(fdg, s_dqdd_dq=dq, s_dqdd_dqd=dqd, s_q=q, s_qd=qd, s_tau="s_tau",
                                          f_ext="f_ext"), n.Sync()]
            return _rk4_steps(layers, a, io, stage, done_by["qdd"].base, done_by["inv_M"].base, local=False)
        return [
            n.Comment("d qdd / d (q, qd), into the qd_next rows: the composed forward-dynamics gradient"),
            layers.call_inner(fdg, s_dqdd_dq=io["dqd_next_dq"], s_dqdd_dqd=io["dqd_next_dqd"], s_q="s_q",
                              s_qd="s_qd", s_tau="s_tau", f_ext="f_ext"),
            n.Sync(),
            *_body(layers, a, io, done_by["qdd"].base, done_by["inv_M"].base, local=False)]

    def state_body(self, layers) -> list:
        fdg, fd, minv = (layers.compose(x) for x in self.composes)
        arr = layers.arrays(self.fields(layers), local=True)
        a = {x: y.base for x, y in arr.items()}
        io = {p.name: p.name for p in (*layers.outputs, *layers.states) if p.name != "f_ext"}
        use = {"USE_F_EXT": "USE_F_EXT"}
        if layers.ctx.values["method"] == "rk4":
            def stage(q: str, qd: str, dq: str, dqd: str) -> list:
                return [layers.call_state(fdg, use, dqdd_dq=dq, dqdd_dqd=dqd, q=q, qd=qd, tau="tau", f_ext="f_ext"),
                        layers.call_state(fd, use, qdd="qdd", q=q, qd=qd, tau="tau", f_ext="f_ext"),
                        layers.call_state(minv, Minv="inv_M", q=q)]
            return [local_declaration([*arr.values()], [f"qdd[{layers.robot.nv}]", f"inv_M[{layers.robot.nv ** 2}]"],
                                      comment="local"),
                    *_rk4_steps(layers, a, io, stage, "qdd", "inv_M", local=True)]
        need_qdd = bool(_free_flyers(layers.robot)) and layers.ctx.values["method"] == "semi_implicit_euler"
        return [
            local_declaration([*arr.values()], ["qdd[NUM_VEL]"] if need_qdd else [], comment="local"),
            layers.call_state(fdg, use, dqdd_dq=io["dqd_next_dq"], dqdd_dqd=io["dqd_next_dqd"], q="q", qd="qd",
                              tau="tau", f_ext="f_ext"),
            *([layers.call_state(fd, use, qdd="qdd", q="q", qd="qd", tau="tau", f_ext="f_ext")] if need_qdd else []),
            n.Comment("Minv, into the d qd_next / d tau rows"),
            layers.call_state(minv, Minv=io["dqd_next_dtau"], q="q"),
            *_body(layers, a, io, "qdd", io["dqd_next_dtau"], local=True)]


def _body(layers, a: dict, io: dict, qdd: str, minv: str, local: bool) -> list:
    """Both layouts' steps after the composed results: ``qdd`` and ``minv`` where they are."""
    nv, pfx = layers.robot.nv, layers.pfx
    ff = _free_flyers(layers.robot)
    semi = layers.ctx.values["method"] == "semi_implicit_euler"
    sync = [] if local else [n.Sync()]

    def each(var: str, count, stmts: list) -> list:
        return [n.For(f"int {var} = 0", f"{var} < {count}", f"++{var}", stmts) if local
                else n.BlockStrideLoop(var, count, stmts)]

    out = [n.Comment("the qd_next rows: dt d qdd / d q, I + dt d qdd / d qd, dt Minv (P2: a cell a thread)"),
           *each("k", nv * nv, [
               n.Stmt(f"const int r = k / {nv}, c = k % {nv}"),
               n.Stmt(f"{io['dqd_next_dq']}[k] = dt * {io['dqd_next_dq']}[k]"),
               n.Stmt(f"{io['dqd_next_dqd']}[k] = (r == c ? T(1) : T(0)) + dt * {io['dqd_next_dqd']}[k]"),
               n.Stmt(f"{io['dqd_next_dtau']}[k] = dt * {minv}[k]")])]
    if ff:
        step = a["increment"]
        inc = f"dt * ({io['qd']}[i] + dt * {qdd}[i])" if semi else f"dt * {io['qd']}[i]"
        out += [n.Comment(f"the increment q moves by (dt {'qd_next' if semi else 'qd'}) and dIntegrate's blocks at "
                          "it, per free-flyer"),
                *each("i", nv, [n.Stmt(f"{step}[i] = {inc}")]),
                *sync,
                *each("f", len(ff), [n.Stmt(f"grid_dintegrate6(&{a['dintegrate']}[72 * f], "
                                            f"&{a['dintegrate']}[72 * f + 36], &{step}[{pfx}_FF_V[f]])")]),
                *sync]
    else:
        out += sync
    blocks = (("dq_next_dq", "dqd_next_dq", True), ("dq_next_dqd", "dqd_next_dqd", False),
              ("dq_next_dtau", "dqd_next_dtau", False))
    plain, flyer = [], []
    for q_out, qd_rows, with_dq in blocks:
        if semi:  # D_q [I] + dt D_v (the qd_next rows)
            plain.append(n.Stmt(f"{io[q_out]}[k] = {'(r == c ? T(1) : T(0)) + ' if with_dq else ''}"
                                f"dt * {io[qd_rows]}[k]"))
            flyer += [n.Stmt("acc = T(0)"),
                      n.For("int j = 0", "j < 6", "++j",
                            [n.Stmt(f"acc += D[36 + 6 * i + j] * {io[qd_rows]}[(b + j) * {nv} + c]")]),
                      n.Stmt(f"{io[q_out]}[k] = {'(in ? D[6 * i + c - b] : T(0)) + ' if with_dq else ''}dt * acc")]
        else:  # explicit: (D_q, dt D_v, 0)
            plain.append(n.Stmt(f"{io[q_out]}[k] = " + {"dq_next_dq": "r == c ? T(1) : T(0)",
                                                        "dq_next_dqd": "r == c ? dt : T(0)",
                                                        "dq_next_dtau": "T(0)"}[q_out]))
            flyer.append(n.Stmt(f"{io[q_out]}[k] = " + {"dq_next_dq": "in ? D[6 * i + c - b] : T(0)",
                                                        "dq_next_dqd": "in ? dt * D[36 + 6 * i + c - b] : T(0)",
                                                        "dq_next_dtau": "T(0)"}[q_out]))
    cell = [n.Stmt(f"const int r = k / {nv}, c = k % {nv}")]
    if ff:
        cell += [n.Stmt(f"const int f = {pfx}_FF_OF_ROW[r]"),
                 n.If("f < 0", plain),
                 n.Block("else", [n.Stmt(f"const int b = {pfx}_FF_V[f], i = r - b"),
                                  n.Stmt("const bool in = c >= b && c < b + 6"),
                                  n.Stmt(f"const T *D = &{a['dintegrate']}[72 * f]"),
                                  *([n.Stmt("T acc")] if semi else []), *flyer])]
    else:
        cell += plain
    return [*out, n.Comment("the q_next rows: dIntegrate's rows times the qd_next rows (a cell a thread; a joint "
                            "coordinate's row of D_q and D_v is the identity's)"),
            *each("k", nv * nv, cell)]


def _rk4_steps(layers, a: dict, io: dict, stage, qdd: str, minv: str, local: bool) -> list:
    """RK4's chain rule through its four stages (the module docstring), both layouts: ``stage(q, qd,
    dq, dqd)`` the composed calls at a stage (d qdd / d (q, qd) into ``dq``, ``dqd``; ``qdd`` and
    ``minv`` then hold the stage's acceleration and Minv).  The block rows ``Q_k``, ``V_k``, ``A_k``
    are three ``nv x nv`` blocks each (over q, qd, tau); the weighted sums of the ``V_k`` and ``A_k``
    build up in the q_next and qd_next outputs."""
    nv, pfx, robot = layers.robot.nv, layers.pfx, layers.robot
    nn = nv * nv
    ff = _free_flyers(robot)
    sync = [] if local else [n.Sync()]
    Q, V, A, G1, G2 = (a[x] for x in ("dstage_q", "dstage_qd", "dstage_qdd", "stage_dqdd_dq", "stage_dqdd_dqd"))
    step, sq, sv, sum_v, D = a["increment"], a["stage_q"], a["stage_qd"], a["sum_qd"], a.get("dintegrate")
    q_out = [io["dq_next_dq"], io["dq_next_dqd"], io["dq_next_dtau"]]
    qd_out = [io["dqd_next_dq"], io["dqd_next_dqd"], io["dqd_next_dtau"]]
    cell = n.Stmt(f"const int r = k / {nv}, c = k % {nv}")

    def each(var: str, count, stmts: list) -> list:
        return [n.For(f"int {var} = 0", f"{var} < {count}", f"++{var}", stmts) if local
                else n.BlockStrideLoop(var, count, stmts)]

    eye = "(r == c ? T(1) : T(0))"  # the identity block's cell (r, c)

    def dintegrate_at_step() -> list:
        return each("f", len(ff), [n.Stmt(f"grid_dintegrate6(&{D}[72 * f], &{D}[72 * f + 36], &{step}[{pfx}_FF_V[f]])")]) \
            if ff else []

    def band(dst, src, scale: str, with_dq: bool) -> list:
        """Rows of ``dst`` = ``[Dq 0 0] + scale Dv src`` (block by block, ``dst``/``src`` the three
        blocks' expressions of index ``x``): a joint coordinate's row ``[I 0 0] + scale src``, a
        free-flyer's its 6 x 6 products (P4); per cell (r, c) of every block."""
        plain = [n.Stmt(f"{dst(b, 'k')} = {eye + ' + ' if b == 0 and with_dq else ''}{scale} * {src(b, 'k')}")
                 for b in range(3)]
        if not ff:
            return [cell, *plain]
        flyer = [n.Stmt(f"const int v0 = {pfx}_FF_V[f], i = r - v0"),
                 n.Stmt(f"const T *Df = &{D}[72 * f]"),
                 n.Stmt("T acc")]
        for b in range(3):
            flyer += [n.Stmt("acc = T(0)"),
                      n.For("int j = 0", "j < 6", "++j", [n.Stmt(f"acc += Df[36 + 6 * i + j] * {src(b, f'(v0 + j) * {nv} + c')}")]),
                      n.Stmt(f"{dst(b, 'k')} = "
                             f"{'(c >= v0 && c < v0 + 6 ? Df[6 * i + c - v0] : T(0)) + ' if b == 0 and with_dq else ''}"
                             f"{scale} * acc")]
        return [cell, n.Stmt(f"const int f = {pfx}_FF_OF_ROW[r]"), n.If("f < 0", plain), n.Block("else", flyer)]

    def at(arr: str, b: int, x: str) -> str:  # cell x of block b
        return f"{arr}[{b * nn} + {x}]" if b else f"{arr}[{x}]"

    def blk(arr: str):
        return lambda b, x: at(arr, b, x)

    out = [n.Comment("RK4, stage 1 at (q, qd): A_1 = [d qdd / d q, d qdd / d qd, Minv]; V_1 = [0 I 0]"),
           *stage(io["q"], io["qd"], A, f"&{A}[{nn}]"),
           n.Comment("the sums so far: A_1 into the qd_next outputs, V_1 into the q_next ones"),
           *each("k", nn, [cell,
                           n.Stmt(f"{at(A, 2, 'k')} = {minv}[k]"),
                           *[n.Stmt(f"{at(V, b, 'k')} = " + (eye if b == 1 else "T(0)")) for b in range(3)],
                           *[n.Stmt(f"{qd_out[b]}[k] = {at(A, b, 'k')}" if b < 2 else f"{qd_out[b]}[k] = {minv}[k]")
                             for b in range(3)],
                           *[n.Stmt(f"{q_out[b]}[k] = " + (eye if b == 1 else "T(0)")) for b in range(3)]]),
           *each("i", nv, [n.Stmt(f"{sv}[i] = {io['qd']}[i]"), n.Stmt(f"{sum_v}[i] = {io['qd']}[i]")]),
           *sync]

    def stage_k(cdt: str, w: str) -> list:  # stage k's statements (its c dt and weight: C++ names)
        return [
            *each("i", nv, [n.Stmt(f"{step}[i] = {cdt} * {sv}[i]"),
                            n.Stmt(f"{sv}[i] = {io['qd']}[i] + {cdt} * {qdd}[i]"),
                            n.Stmt(f"{sum_v}[i] += {w} * {sv}[i]")]),
            *sync,
            *move_steps(pfx, robot, sq, io["q"], step, local),
            *dintegrate_at_step(),
            *sync,
            n.Comment("Q_k = Dq Q_1 + c dt Dv V_(k-1) (dIntegrate at the stage's increment; P2: a cell a thread)"),
            *each("k", nn, band(blk(Q), blk(V), cdt, True)),
            *sync,
            n.Comment("V_k = V_1 + c dt A_(k-1); its weighted sum into the q_next outputs"),
            *each("k", nn, [cell, *[s for b in range(3) for s in (
                n.Stmt(f"{at(V, b, 'k')} = " + (f"{eye} + " if b == 1 else "") + f"{cdt} * {at(A, b, 'k')}"),
                n.Stmt(f"{q_out[b]}[k] += {w} * {at(V, b, 'k')}"))]]),
            *([] if local else [n.Comment("XImats at the stage's configuration, for the composed inner"),
                                n.Stmt(f"load_update_XImats<T>(s_XI, {sq})")]),
            *sync,
            *stage(sq, sv, G1, G2),
            n.Comment("A_k = dqdd_dq Q_k + dqdd_dqd V_k + [0 0 Minv] (a cell, its three blocks, a thread); "
                      "its weighted sum into the qd_next outputs"),
            *each("k", nn, [cell,
                            n.Stmt("T acc0 = T(0), acc1 = T(0), acc2 = T(0)"),
                            n.For("int m = 0", f"m < {nv}", "++m", [
                                n.Stmt(f"const T g1 = {G1}[r * {nv} + m], g2 = {G2}[r * {nv} + m]"),
                                *[n.Stmt(f"acc{b} += g1 * {at(Q, b, f'm * {nv} + c')} "
                                         f"+ g2 * {at(V, b, f'm * {nv} + c')}") for b in range(3)]]),
                            n.Stmt(f"acc2 += {minv}[k]"),
                            *[s for b in range(3) for s in (n.Stmt(f"{at(A, b, 'k')} = acc{b}"),
                                                              n.Stmt(f"{qd_out[b]}[k] += {w} * acc{b}"))]]),
            *sync]

    out += stage_loop(RK4_STAGES, RK4_WEIGHTS, stage_k, "q_k = q (+) c dt v_(k-1), v_k = qd + c dt a_(k-1) "
                      "(a_(k-1): the composed qdd), in a rolled loop (the composed calls once for the three)")
    dt6 = "dt / T(6)"
    # the q_next rows in place: a joint coordinate's cell from itself; a free-flyer's 6-row band, per
    # block and column, read whole into registers before it is written
    plain = [n.Stmt(f"{q_out[b]}[k] = {eye + ' + ' if b == 0 else ''}{dt6} * {q_out[b]}[k]") for b in range(3)]
    final_q = [cell, *([n.If(f"{pfx}_FF_OF_ROW[r] < 0", plain)] if ff else plain)]
    out += [n.Comment("the increment q moves by, dt/6 (v1 + 2 v2 + 2 v3 + v4), and dIntegrate's blocks at it"),
            *each("i", nv, [n.Stmt(f"{step}[i] = {dt6} * {sum_v}[i]")]),
            *sync,
            *dintegrate_at_step(),
            *sync,
            n.Comment("qd_next = V_1 + dt/6 (A_1 + 2 A_2 + 2 A_3 + A_4); q_next = Dq Q_1 + dt/6 Dv (V_1 + 2 V_2 + 2 V_3 + "
                      "V_4): a joint coordinate's row a cell a thread"),
            *each("k", nn, [*final_q,
                            *[n.Stmt(f"{qd_out[b]}[k] = {eye + ' + ' if b == 1 else ''}{dt6} * {qd_out[b]}[k]")
                              for b in range(3)]])]
    if ff:
        cols = [n.Stmt(f"const int f = x / {3 * nv}, b = (x / {nv}) % 3, c = x % {nv}, v0 = {pfx}_FF_V[f]"),
                n.Stmt(f"T *X = b == 0 ? {q_out[0]} : b == 1 ? {q_out[1]} : {q_out[2]}"),
                n.Stmt(f"const T *Df = &{D}[72 * f]"),
                n.Stmt("T col[6]"),
                n.For("int j = 0", "j < 6", "++j", [n.Stmt(f"col[j] = X[(v0 + j) * {nv} + c]")]),
                n.For("int i = 0", "i < 6", "++i", [
                    n.Stmt("T acc = T(0)"),
                    n.For("int j = 0", "j < 6", "++j", [n.Stmt("acc += Df[36 + 6 * i + j] * col[j]")]),
                    n.Stmt(f"X[(v0 + i) * {nv} + c] = (b == 0 && c >= v0 && c < v0 + 6 ? Df[6 * i + c - v0] : T(0)) "
                           f"+ {dt6} * acc")])]
        out += [n.Comment("... a free-flyer's 6-row band, a column of one block a thread (read whole, then written)"),
                *each("x", 3 * nv * len(ff), cols)]
    return out


class IntegratorGradient(Algorithm):
    name = "integrator_gradient"
    summary = ("derivatives of one integrator step: (dq_next_dq, dq_next_dqd, dq_next_dtau, "
               "dqd_next_dq, dqd_next_dqd, dqd_next_dtau) of the Euler or RK4 step, q_next's rows in the "
               "tangent space at q_next")
    math = r"""
Semi-implicit Euler (:math:`v = \Delta t\, \dot q^+`), with :math:`(D_q, D_v)` Pinocchio's
``dIntegrate`` at :math:`(q, v)`:

.. math::

   \frac{\partial \dot q^+}{\partial (q, \dot q, \tau)} =
     \Big(\Delta t \frac{\partial \ddot q}{\partial q},\ I + \Delta t \frac{\partial \ddot q}{\partial \dot q},\
          \Delta t\, M^{-1}\Big), \qquad
   \frac{\partial q^+}{\partial q} = D_q + \Delta t\, D_v \frac{\partial \dot q^+}{\partial q}, \quad
   \frac{\partial q^+}{\partial (\dot q, \tau)} = \Delta t\, D_v \frac{\partial \dot q^+}{\partial (\dot q, \tau)} .

Explicit Euler (:math:`v = \Delta t\, \dot q`): the same :math:`\dot q^+` rows,
:math:`\partial q^+ / \partial (q, \dot q, \tau) = (D_q,\ \Delta t\, D_v,\ 0)`.

RK4 (stages :math:`q_k = q \oplus c_k \Delta t\, v_{k-1}`, :math:`v_k = \dot q + c_k \Delta t\, a_{k-1}`,
:math:`a_k = \mathrm{FD}(q_k, v_k, \tau)`): block rows over :math:`(q, \dot q, \tau)`, :math:`Q_1 = [I\ 0\ 0]`,
:math:`V_1 = [0\ I\ 0]`,

.. math::

   A_k = \frac{\partial \ddot q}{\partial q}(k)\, Q_k + \frac{\partial \ddot q}{\partial \dot q}(k)\, V_k
         + [0\ 0\ M^{-1}(q_k)], \quad
   Q_{k+1} = D_q Q_1 + c\, \Delta t\, D_v V_k, \quad V_{k+1} = V_1 + c\, \Delta t\, A_k,

   \frac{\partial q^+}{\partial (q, \dot q, \tau)} = D_q Q_1 + \tfrac{\Delta t}{6} D_v (V_1 + 2 V_2 + 2 V_3 + V_4),
   \quad
   \frac{\partial \dot q^+}{\partial (q, \dot q, \tau)} = V_1 + \tfrac{\Delta t}{6} (A_1 + 2 A_2 + 2 A_3 + A_4),

each :math:`(D_q, D_v)` at its own increment (the stage's, then the step's).
"""
    depends_on = ("forward_dynamics", "forward_dynamics_gradient", "minv")
    emitter = IntegratorGradientEmitter
    review = ParallelismReview(
        P1=not_applicable("no tree recursion of its own: the recursions are those of "
                          "forward_dynamics_gradient and minv (see their reviews)"),
        P2=done("the six nv x nv blocks are 6 nv^2 independent cells: one cell (of the qd_next rows, then of "
                "the q_next rows) per thread; dIntegrate's blocks one free-flyer per thread. RK4: each stage's "
                "block rows Q_k, V_k and A_k a cell (its three blocks, over q, qd and tau) per thread, the "
                "stage's row of d qdd / d q and d qdd / d qd loaded once for the three; the q_next rows of a "
                "free-flyer's 6-row band a column of one block per thread (read whole, then written in place)"),
        P3=todo("done in the block layout: qdd and Minv are read where the composed gradient left them (no "
                "second minv or forward dynamics), RK4's at every stage. Left: the per-state layout calls minv "
                "(and forward dynamics, where a free-flyer or RK4's next stage needs qdd) again, for the composed "
                "per-state function keeps its results local; RK4's four stages are sequential (each needs the "
                "one before)"),
        P4=done("Dq and Dv are applied as the identity on every joint coordinate's row and as one 6 x 6 block "
                "per free-flyer (a row-band product of 6 terms), never as dense nv x nv products. RK4's "
                "products d qdd / d (q, qd) (Q_k; V_k) are dense (6 nv^3 a stage): no structural zero of dtau "
                "survives the product with Minv, nor of Q_k and V_k a stage"),
        notes="an orchestrator on one XImats load (forward_dynamics_gradient's inner, by handle; RK4 calls it "
              "four times, loading XImats again at each stage's configuration, placed by the framework's move "
              "q (+) v, stages 2 to 4 in one rolled loop); the method is fixed at generation time "
              "(algorithm_options={'integrator_gradient': {'method': ...}}; a call with another builds its code)",
    )

    def inputs(self, robot: Robot):
        return integration_inputs(robot)

    def outputs(self, robot: Robot, **options):
        n = robot.nv
        return (
            Port("dq_next_dq", (n, n), "d q_next / d q (tangent at q -> tangent at q_next)"),
            Port("dq_next_dqd", (n, n), "d q_next / d qd (tangent at q_next)"),
            Port("dq_next_dtau", (n, n), "d q_next / d tau (tangent at q_next)"),
            Port("dqd_next_dq", (n, n), "d qd_next / d q (tangent at q)"),
            Port("dqd_next_dqd", (n, n), "d qd_next / d qd"),
            Port("dqd_next_dtau", (n, n), "d qd_next / d tau"),
        )

    def arenas(self, robot: Robot, options=None, method="semi_implicit_euler"):
        return regions(_fields(robot, check_integration_method(method, self.name)))

    def spill_rungs(self, robot: Robot, options=None):
        return spill_ladder(("the callees' first spill",
                             {callee_rung(c, 1) for c in IntegratorGradientEmitter.composes},
                             "what the composed algorithms' rung 1 spills"))

    def reference(self, ctx, q, qd, tau, dt, method="semi_implicit_euler", f_ext=None,
                  gravity=DEFAULT_GRAVITY):
        method = check_integration_method(method, self.name)
        dt = float(dt)
        robot = ctx.robot
        if method == "rk4":
            return _rk4(ctx, robot, q, qd, tau, dt, f_ext, gravity)
        qdd = ctx.forward_dynamics(q, qd, tau, f_ext, gravity)
        dqdd_dq, dqdd_dqd = ctx.forward_dynamics_gradient(q, qd, tau, f_ext, gravity)
        dqd_dq, dqd_dqd, dqd_dtau = dt * dqdd_dq, np.eye(robot.nv) + dt * dqdd_dqd, dt * ctx.minv(q)
        if method == "semi_implicit_euler":
            Dq, Dv = dintegrate(robot, q, dt * (qd + dt * qdd))
            dq_dq, dq_dqd, dq_dtau = Dq + dt * Dv @ dqd_dq, dt * Dv @ dqd_dqd, dt * Dv @ dqd_dtau
        else:
            Dq, Dv = dintegrate(robot, q, dt * qd)
            dq_dq, dq_dqd, dq_dtau = Dq, dt * Dv, np.zeros((robot.nv, robot.nv))
        return dq_dq, dq_dqd, dq_dtau, dqd_dq, dqd_dqd, dqd_dtau


def _rk4(ctx, robot: Robot, q, qd, tau, dt: float, f_ext, gravity) -> tuple:
    """The RK4 step's six blocks (the module docstring's chain rule)."""
    n = robot.nv
    eye, zero = np.eye(n), np.zeros((n, n))
    Q1, V1 = np.hstack([eye, zero, zero]), np.hstack([zero, eye, zero])

    def stage(q_k, v_k, Q_k, V_k):
        """``(a_k, A_k)`` at the stage ``(q_k, v_k)``."""
        a = ctx.forward_dynamics(q_k, v_k, tau, f_ext, gravity)
        dq, dqd = ctx.forward_dynamics_gradient(q_k, v_k, tau, f_ext, gravity)
        return a, dq @ Q_k + dqd @ V_k + np.hstack([zero, zero, ctx.minv(q_k)])

    a1, A1 = stage(q, qd, Q1, V1)
    v, V, a, A = [qd], [V1], [a1], [A1]
    for c in RK4_STAGES:
        Dq, Dv = dintegrate(robot, q, c * dt * v[-1])
        Q_k = Dq @ Q1 + c * dt * Dv @ V[-1]
        q_k = integrate(robot, q, c * dt * v[-1])
        v.append(qd + c * dt * a[-1])
        V.append(V1 + c * dt * A[-1])
        a_k, A_k = stage(q_k, v[-1], Q_k, V[-1])
        a.append(a_k)
        A.append(A_k)
    Dq, Dv = dintegrate(robot, q, dt / 6 * (v[0] + 2 * v[1] + 2 * v[2] + v[3]))
    dq_next = Dq @ Q1 + dt / 6 * Dv @ (V[0] + 2 * V[1] + 2 * V[2] + V[3])
    dqd_next = V1 + dt / 6 * (A[0] + 2 * A[1] + 2 * A[2] + A[3])
    return (*np.hsplit(dq_next, 3), *np.hsplit(dqd_next, 3))


@hookimpl
def grid_register_algorithms():
    return [IntegratorGradient]
