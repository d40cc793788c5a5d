"""Inverse dynamics by the recursive Newton-Euler algorithm (RNEA).

``tau = ID(q, qd, qdd, f_ext)``: the joint forces that produce ``qdd`` at state
``(q, qd)`` under gravity and the external forces ``f_ext`` (one spatial force
per body, in the body frame, ``[force; moment]`` as Pinocchio orders it).
"""

from __future__ import annotations

import numpy as np

from grid_core import Algorithm, Port, hookimpl
from grid_core.algorithm import DEFAULT_GRAVITY, dynamics_inputs
from grid_core.arena import ArenaRegion, SpillRung, Tier
from grid_core.emit import arena_emit
from grid_core.emit import nodes as n
from grid_core.emit import spatial_steps as ss
from grid_core.emit.emitter import EmitContext, Emitter, GridDataField
from grid_core.emit.expr import Scope, sum_terms
from grid_core.model import Body, JointType, Robot
from grid_core.model.joints import body_q, body_v, joint_transform, motion_subspace
from grid_core.model.spatial import crf, crm
from grid_core.review import ParallelismReview, done


def gravity_accel(gravity) -> np.ndarray:
    """The fictitious base acceleration ``-a_g`` that folds gravity into the forward pass."""
    return np.concatenate([np.zeros(3), -np.asarray(gravity, dtype=float)])


def rnea(robot: Robot, q, qd, qdd, f_ext=None, gravity=DEFAULT_GRAVITY):
    """RNEA (Featherstone, RBDA Table 5.1).  Returns ``(tau, v, a, f, Xup)`` per body."""
    NB = robot.num_bodies
    Xup, S, v, a, f = [None] * NB, [None] * NB, [None] * NB, [None] * NB, [None] * NB
    a0 = gravity_accel(gravity)
    for i, body in enumerate(robot.bodies):
        Xup[i] = joint_transform(body, body_q(body, q)) @ body.Xtree
        S[i] = motion_subspace(body)
        vJ = S[i] @ body_v(body, qd)
        aJ = S[i] @ body_v(body, qdd)
        if body.parent < 0:
            v[i] = vJ
            a[i] = Xup[i] @ a0 + aJ
        else:
            v[i] = Xup[i] @ v[body.parent] + vJ
            a[i] = Xup[i] @ a[body.parent] + aJ + crm(v[i]) @ vJ
        f[i] = body.inertia @ a[i] + crf(v[i]) @ body.inertia @ v[i]
        if f_ext is not None:
            fx = f_ext[i]
            f[i] = f[i] - np.concatenate([fx[3:], fx[:3]])  # [force; moment] -> [moment; force]
    tau = np.zeros(robot.nv)
    for i in reversed(range(NB)):
        body = robot.bodies[i]
        tj = S[i].T @ f[i]
        if body.mimic is not None:
            tau[body.v_index] += body.mimic.multiplier * tj[0]
        else:
            tau[body.v_index : body.v_index + body.nv] += tj
        if body.parent >= 0:
            f[body.parent] = f[body.parent] + Xup[i].T @ f[i]
    return tau, v, a, f, Xup


# -- code generation -------------------------------------------------------------------
#
# One set of per-body steps serves both layouts: the block-cooperative one (one block
# per state; the steps run one body per thread, level by level, on shared-memory
# arrays) and the per-state one (one thread per state; the same steps run as
# straight-line code on local arrays the compiler keeps in registers).



# The staged per-state kernel's inputs: (array, values per state).
_STAGED = (("q", "NUM_POS"), ("qd", "NUM_VEL"), ("qdd", "NUM_VEL"))


def _share_of(stmt: str, size: str, needs_qdd: bool) -> list:
    """``stmt`` for this thread's share of a block's ``count * size`` values: value
    ``i = threadIdx.x + j * blockDim.x`` for every ``j`` below ``size``, unrolled."""
    loop = [n.Raw("#pragma unroll"),
            n.For("int j = 0", f"j < {size}", "++j", [n.Stmt("const int i = threadIdx.x + j * blockDim.x"),
                                                      n.If(f"i < count * {size}", [n.Stmt(stmt)])])]
    return [n.If("USE_QDD", loop, constexpr=True)] if needs_qdd else loop

class RneaSteps:
    """RNEA's per-body steps, emitted with every robot constant folded in.

    ``arr`` maps the logical arrays to C++ expressions: ``q``, ``qd``, ``qdd``,
    ``xi`` (element index -> expression), ``v``, ``a``, ``f`` ((body, k) ->
    expression), ``tau`` and ``f_ext`` (the pointer name); ``fext_guard`` is the
    condition under which ``f_ext`` is read.
    """

    def __init__(self, robot: Robot, arr: dict, fext_guard: str):
        self.robot = robot
        self.arr = arr
        self.fext_guard = fext_guard
        self.a0 = ["a0x", "a0y", "a0z"]
        self.known: dict[tuple[str, int, int], float] = {}
        """Entries of v and a that are compile-time constants: never stored, folded where read."""

    def get(self, name: str, body: int, k: int):
        key = (name, body, k)
        return self.known[key] if key in self.known else self.arr[name](body, k)

    def _X(self, scope: Scope, body: Body) -> ss.Transform:
        return ss.Transform(self.robot, body, self.arr["xi"], scope)

    def has_children(self, i: int) -> bool:
        return bool(self.robot.topology.children[i])

    def forward(self, scope: Scope, body: Body) -> None:
        """v, a and f of ``body`` (v and a stored only where a child reads them)."""
        arr, i = self.arr, body.index
        scope.comment(f"body {i} ({body.joint.name}): v, a, f")
        X = self._X(scope, body)
        if body.jtype is JointType.FLOATING:
            vi = body.v_index
            qd = [arr["qd"](vi + k) for k in range(6)]
            qdd = [arr["qdd"](vi + k) for k in range(6)]
            Ea0 = X.rotate(self.a0)
            v = qd[3:] + qd[:3]  # S maps v = [linear; angular] to [angular; linear]
            a = qdd[3:] + [sum_terms([(Ea0[k],), (qdd[k],)]) for k in range(3)]
        else:
            vJ = ss.motion_subspace_times(body, ss.joint_rate(body, arr["qd"]))
            aJ = ss.motion_subspace_times(body, ss.joint_rate(body, arr["qdd"]))
            vJ = scope.let_all(vJ, "vJ")
            if body.parent < 0:
                # X a0 with a0 = [0; -g]: the angular part is zero and r x 0 = 0
                Xa0 = [0.0, 0.0, 0.0] + X.rotate(self.a0, scope)
                v = vJ
                a = [sum_terms([(Xa0[k],), (aJ[k],)]) for k in range(6)]
            else:
                p = body.parent
                Xv = X.motion([self.get("v", p, k) for k in range(6)], scope)
                v = scope.let_all([sum_terms([(Xv[k],), (vJ[k],)]) for k in range(6)], "v")
                Xa = X.motion([self.get("a", p, k) for k in range(6)], scope)
                vxvJ = ss.cross_motion(v, vJ)
                a = [sum_terms([(Xa[k],), (aJ[k],), (vxvJ[k],)]) for k in range(6)]
        v = scope.let_all(v, "v")
        a = scope.let_all(a, "a")
        if self.has_children(i):
            for name, vec in (("v", v), ("a", a)):
                for k in range(6):
                    if isinstance(vec[k], float):
                        self.known[(name, i, k)] = vec[k]
                    else:
                        scope.assign(arr[name](i, k), vec[k])
        I = np.asarray(body.inertia)
        Iv = scope.let_all(ss.inertia_times(I, v), "Iv")
        Ia = ss.inertia_times(I, a)
        vxIv = ss.cross_force(v, Iv)
        for k in range(6):
            scope.assign(arr["f"](i, k), sum_terms([(Ia[k],), (vxIv[k],)]))
        # f_ext is [force; moment]; f is [moment; force]
        fx = arr["f_ext"]
        sub = [n.Stmt(f"{arr['f'](i, k)} -= {fx}[{6 * i + (k + 3) % 6}]") for k in range(6)]
        scope.stmts.append(n.If(self.fext_guard, sub))

    def backward(self, scope: Scope, parent: int, children) -> None:
        """``f[parent] += X_c^T f[c]`` for each child ``c``."""
        arr = self.arr
        for c in children:
            body = self.robot.bodies[c]
            scope.comment(f"f[{parent}] += X^T f[{c}] ({body.joint.name})")
            contrib = self._X(scope, body).force_T([arr["f"](c, k) for k in range(6)], scope)
            for k in range(6):
                scope.add_to(arr["f"](parent, k), contrib[k])

    def tau_items(self) -> list[tuple[int, list]]:
        """Each velocity index with its contributions ``(body, multiplier, component)``:
        ``component`` is an ``f`` index for a free-flyer, ``None`` for ``S^T f``."""
        items: dict[int, list] = {}
        for b in self.robot.bodies:
            if b.jtype is JointType.FLOATING:
                for k in range(6):  # tau = S^T f = [force; moment]
                    items.setdefault(b.v_index + k, []).append((b, 1.0, (k + 3) % 6))
            else:
                mult = b.mimic.multiplier if b.mimic is not None else 1.0
                items.setdefault(b.v_index, []).append((b, mult, None))
        return sorted(items.items())

    def tau(self, scope: Scope, dof: int, contributions) -> None:
        arr = self.arr
        terms = []
        for body, mult, comp in contributions:
            f = [arr["f"](body.index, k) for k in range(6)]
            part = f[comp] if comp is not None else ss.subspace_transpose_times(body, f)
            terms.append((mult, part))
        scope.assign(arr["tau"](dof), sum_terms(terms))


def _arrays(prefix: str, qdd=None) -> dict:
    """Where RNEA's steps read and write: shared-memory arrays (prefix ``s_``) in the block
    layout, local arrays (kept in registers) in the per-state layout."""

    def vector(name):
        return lambda i: f"{prefix}{name}[{i}]"

    def per_body(name):
        return lambda b, k: f"{prefix}{name}[{6 * b + k}]"

    return {
        "q": vector("q"), "qd": vector("qd"), "qdd": qdd or vector("qdd"), "xi": vector("XI"),
        "v": per_body("v"), "a": per_body("a"), "f": per_body("f"), "tau": vector("tau"), "f_ext": "f_ext",
    }


_BLOCK_ARRAYS = _arrays("s_")
# the per-state kernel is instantiated without an acceleration input for the bias forces
_STATE_ARRAYS = _arrays("", qdd=lambda i: f"(USE_QDD ? qdd[{i}] : T(0))")


_GRAVITY = [n.Stmt("const T a0x = -gravity.x"), n.Stmt("const T a0y = -gravity.y"),
            n.Stmt("const T a0z = -gravity.z")]


class InverseDynamicsEmitter(Emitter):
    PER_STATE_THREADS = 128
    DEFAULT_PER_STATE_MIN_N = 1

    def block_threads_hint(self, robot: Robot) -> int:
        # one warp per body of the widest level (P1), and enough lanes for the per-body
        # and per-dof fan-outs
        return max(32 * robot.topology.max_level_width, robot.num_bodies, robot.nv)

    def grid_data_fields(self, robot: Robot):
        return (GridDataField("c", robot.nv, "inverse_dynamics: joint forces tau"),)

    # -- block-cooperative layout ---------------------------------------------------

    def sweep_form(self, ctx: EmitContext) -> str:
        if ctx.options.p1 != "auto":
            return ctx.options.p1
        return ctx.tuning.get("p1", "levels")

    def inner(self, ctx: EmitContext) -> list:
        robot = ctx.robot
        steps = RneaSteps(robot, _BLOCK_ARRAYS, "f_ext != nullptr")
        topo = robot.topology
        form = self.sweep_form(ctx)
        body: list = [
            n.Comment("placement: the v/a/f band lives where the caller's flag says"),
            n.Raw("if constexpr (!VAF_IN_SMEM) { s_vaf = d_vaf; } else { (void)d_vaf; }"),
            n.Stmt("GRID_ASSERT(s_vaf != nullptr && s_XI != nullptr)"),
            n.Stmt("T *s_v = s_vaf"),
            n.Stmt("T *s_a = s_vaf + 6 * NUM_BODIES"),
            n.Stmt("T *s_f = s_vaf + 12 * NUM_BODIES"),
            *_GRAVITY,
        ]

        def one(fn, *args):
            scope = Scope("t")
            fn(scope, *args)
            return scope.body()

        if form == "levels":
            body.append(n.Comment("forward sweep, level by level (P1): the bodies of a level in parallel, on\n"
                                  "different warps (their code differs: in one warp it would serialise)"))
            for d, level in enumerate(topo.levels):
                cases = [n.Block(f"case {k}:", [*one(steps.forward, robot.bodies[b]), n.Stmt("break")])
                         for k, b in enumerate(level)]
                body += [n.Comment(f"level {d}: bodies {list(level)}, one warp each"),
                         n.BlockStrideLoop("k", len(level), [n.Block("switch (k)", cases)], per_warp=True),
                         n.Sync()]
            body.append(n.Comment("backward sweep: each parent gathers its children (no atomics, fixed order)"))
            for d in reversed(range(topo.num_levels - 1)):
                parents = [p for p in topo.levels[d] if topo.children[p]]
                cases = [n.Block(f"case {k}:", [*one(steps.backward, p, topo.children[p]), n.Stmt("break")])
                         for k, p in enumerate(parents)]
                body += [n.Comment(f"level {d}: parents {parents}, one warp each"),
                         n.BlockStrideLoop("k", len(parents), [n.Block("switch (k)", cases)], per_warp=True),
                         n.Sync()]
        else:
            body.append(n.Comment("forward sweep, one body per step"))
            for b in robot.bodies:
                body += [n.If("GRID_TID == 0", one(steps.forward, b)), n.Sync()]
            body.append(n.Comment("backward sweep, one body per step"))
            for b in reversed(robot.bodies):
                if b.parent >= 0:
                    body += [n.If("GRID_TID == 0", one(steps.backward, b.parent, [b.index])), n.Sync()]
        items = steps.tau_items()
        cases = [n.Block(f"case {k}:", [*one(steps.tau, dof, contrib), n.Stmt("break")])
                 for k, (dof, contrib) in enumerate(items)]
        body += [n.Comment("joint forces, one velocity index per thread (P2-style fan-out)"),
                 n.BlockStrideLoop("k", len(items), [n.Block("switch (k)", cases)])]
        return [
            n.Function(
                "__device__ void inverse_dynamics_inner(T *s_tau, const T *s_q, const T *s_qd, const T *s_qdd, "
                "const T *f_ext, const T *s_XI, T *s_vaf, T *d_vaf, const Gravity<T> gravity)",
                body,
                template="template <typename T, bool VAF_IN_SMEM = true>",
                doc=(
                    "RNEA on one state, block-cooperative (any block size).  Assumes s_XI loaded\n"
                    "(load_update_XImats) and the inputs visible to the block.  f_ext: this state's\n"
                    "external forces or nullptr.  Owns the placement of its v/a/f band (18 NUM_BODIES\n"
                    "scalars): s_vaf (shared) or d_vaf (global).  Writes s_tau; the caller syncs.\n"
                    f"Sweep form: {form}."
                ),
            )
        ]

    def device(self, ctx: EmitContext) -> list:
        plan = ctx.plan
        return [
            n.Function(
                "__device__ void inverse_dynamics_device(T *s_tau, const T *s_q, const T *s_qd, const T *s_qdd, "
                "const robotModel<T> *d_robotModel, const T *d_f_ext, const Gravity<T> gravity, "
                "T *s_temp = nullptr, T *d_workspace = nullptr)",
                [
                    n.Stmt("(void)d_robotModel"),
                    n.If("s_temp == nullptr", [
                        n.Comment("simple wrapper: the scratch is the dynamic shared-memory arena"),
                        n.Stmt("GRID_DYNAMIC_SMEM(grid_smem)"),
                        n.Stmt("s_temp = reinterpret_cast<T *>(grid_smem)"),
                        n.Stmt("GRID_ARENA_ASSERT((INVERSE_DYNAMICS_DEVICE_SMEM_BYTES<T, "
                               + ", ".join(arena_emit.flag(r.name) for r in arena_emit.spillable(plan)) + ">()))"),
                    ]),
                    n.Comment("placement, chosen here at the top (seed 001): then the body is unchanged"),
                    *arena_emit.carve(plan, "s_temp", "d_workspace"),
                    n.Stmt("load_update_XImats<T>(s_XI, s_q)"),
                    n.Sync(),
                    n.Stmt("inverse_dynamics_inner<T, VAF_IN_SMEM>(s_tau, s_q, s_qd, s_qdd, d_f_ext, s_XI, s_vaf, "
                           "s_vaf, gravity)"),
                ],
                template=f"template <typename T, {arena_emit.flag_params(plan)}>",
                doc=(
                    "Inverse dynamics of one state inside your own kernel (the inline rung).\n"
                    "s_q, s_qd, s_qdd in shared memory; s_tau written (sync before reading).  Scratch:\n"
                    "s_temp / d_workspace sized by INVERSE_DYNAMICS_DEVICE_{SMEM,WORKSPACE}_BYTES for the\n"
                    "flags; with s_temp == nullptr it takes the dynamic shared-memory arena, which must\n"
                    "hold INVERSE_DYNAMICS_DEVICE_DYNAMIC_SHARED_MEM_BYTES<T>()."
                ),
            )
        ]

    def kernel(self, ctx: EmitContext) -> list:
        plan = ctx.plan
        io = arena_emit.fixed_elements(plan)
        offs, off = {}, 0
        for r in arena_emit.fixed(plan):
            offs[r.name] = off
            off += -(-r.elements // 4) * 4
        dispatch = []
        for tier in Tier:
            dispatch.append(n.If(
                f"RESOURCE_TIER == {tier.cpp}",
                [n.Stmt(f"inverse_dynamics_device<T, {arena_emit.flag_args(plan, tier)}>(s_tau, s_q, s_qd, s_qdd, "
                        "d_robotModel, d_f_ext == nullptr ? nullptr : &d_f_ext[k * 6 * NUM_BODIES], gravity, "
                        "s_temp, d_ws)")],
                constexpr=True,
            ))
        loop = [
            n.BlockStrideLoop("i", "NUM_POS", [n.Stmt("s_q[i] = d_q[k * stride_q + i]")]),
            n.BlockStrideLoop("i", "NUM_VEL", [
                n.Stmt("s_qd[i] = d_qd[k * stride_qd + i]"),
                n.Stmt("s_qdd[i] = d_qdd == nullptr ? T(0) : d_qdd[k * stride_qdd + i]"),
            ]),
            n.Sync(),
            *dispatch,
            n.Sync(),
            n.BlockStrideLoop("i", "NUM_VEL", [n.Stmt("d_tau[k * NUM_VEL + i] = s_tau[i]")]),
        ]
        return [
            n.Function(
                "__global__ void __launch_bounds__(tier_max_threads<RESOURCE_TIER>()) inverse_dynamics_kernel("
                "T *d_tau, const T *d_q, const int stride_q, const T *d_qd, const int stride_qd, const T *d_qdd, "
                "const int stride_qdd, const T *d_f_ext, const robotModel<T> *d_robotModel, const Gravity<T> gravity, "
                "const int num_timesteps, T *d_workspace)",
                [
                    n.Stmt("GRID_DYNAMIC_SMEM(grid_smem)"),
                    n.Stmt("T *s_arena = reinterpret_cast<T *>(grid_smem)"),
                    n.Stmt("GRID_ARENA_ASSERT((INVERSE_DYNAMICS_SMEM_BYTES<T, RESOURCE_TIER>()))"),
                    *[n.Stmt(f"T *s_{name} = s_arena + {o}") for name, o in offs.items()],
                    n.Stmt(f"T *s_temp = s_arena + {io}"),
                    n.Stmt("T *d_ws = d_workspace == nullptr ? nullptr : d_workspace + blockIdx.x * "
                           "(INVERSE_DYNAMICS_WORKSPACE_BYTES<T, RESOURCE_TIER>() / sizeof(T))"),
                    n.For("int k = blockIdx.x", "k < num_timesteps", "k += gridDim.x", loop),
                ],
                template="template <typename T, int RESOURCE_TIER = TIER_SHARED>",
                doc=(
                    "Block-cooperative layout: one block per state, grid-stride over the batch.  The\n"
                    "tier picks launch bounds and the rung (placement flags) planned for this robot."
                ),
            )
        ]

    # -- per-state layout -------------------------------------------------------------

    def per_state(self, ctx: EmitContext) -> list:
        robot = ctx.robot
        topo = robot.topology
        steps = RneaSteps(robot, _STATE_ARRAYS, "USE_F_EXT")
        scope = Scope("t")
        # Depth-first order with eager backward steps: as soon as a subtree is complete its
        # force goes to the parent and its joint force is written, so only the forces of
        # the current root path stay live (registers), not those of every body.
        last = [max(topo.subtree[i]) for i in range(robot.num_bodies)]
        items = steps.tau_items()
        single = {dof: contrib for dof, contrib in items if len(contrib) == 1}
        by_body: dict[int, list] = {}
        for dof, contrib in single.items():
            by_body.setdefault(contrib[0][0].index, []).append((dof, contrib))
        for b in robot.bodies:
            ss.xi_update(scope, robot, b, _STATE_ARRAYS["q"], _STATE_ARRAYS["xi"])
            steps.forward(scope, b)
            c = b.index
            while c >= 0 and last[c] == b.index:
                for dof, contrib in by_body.get(c, ()):
                    steps.tau(scope, dof, contrib)
                p = topo.parent[c]
                if p >= 0:
                    steps.backward(scope, p, [c])
                c = p
        for dof, contrib in items:
            if dof not in single:
                steps.tau(scope, dof, contrib)
        # the f_ext guards are compile-time here
        stmts = [n.If(s.cond, s.body, constexpr=True) if isinstance(s, n.If) else s for s in scope.body()]
        nb = robot.num_bodies
        fn = n.Function(
            "__device__ __forceinline__ void inverse_dynamics_state(T *tau, const T *q, const T *qd, const T *qdd, "
            "const T *f_ext, const Gravity<T> gravity)",
            [
                *_GRAVITY,
                n.Stmt(f"T XI[XI_SIZE], v[{6 * nb}], a[{6 * nb}], f[{6 * nb}]", comment="registers: every index is a constant"),
                *stmts,
            ],
            template="template <typename T, bool USE_QDD = true, bool USE_F_EXT = false>",
            doc=(
                "RNEA on one state in one thread: straight-line code, robot constants folded (the\n"
                "per-state layout).  q, qd, qdd, f_ext and tau may point anywhere; no shared memory."
            ),
        )
        kernel = n.Function(
            "__global__ void __launch_bounds__(INVERSE_DYNAMICS_PER_STATE_THREADS, INVERSE_DYNAMICS_PER_STATE_MIN_BLOCKS) "
            "inverse_dynamics_per_state_kernel("
            "T *d_tau, const T *d_q, const int stride_q, const T *d_qd, const int stride_qd, const T *d_qdd, "
            "const int stride_qdd, const T *d_f_ext, const Gravity<T> gravity, const int num_timesteps)",
            [
                n.For("int k = blockIdx.x * blockDim.x + threadIdx.x", "k < num_timesteps",
                      "k += gridDim.x * blockDim.x", [
                          n.Stmt("inverse_dynamics_state<T, USE_QDD, USE_F_EXT>(&d_tau[k * NUM_VEL], "
                                 "&d_q[k * stride_q], &d_qd[k * stride_qd], USE_QDD ? &d_qdd[k * stride_qdd] : nullptr, "
                                 "USE_F_EXT ? &d_f_ext[k * 6 * NUM_BODIES] : nullptr, gravity)"),
                      ]),
            ],
            template="template <typename T, bool USE_QDD, bool USE_F_EXT>",
            doc="Per-state layout: one thread per state, grid-stride over the batch.",
        )
        stage = [
            n.Stmt("const int count = num_timesteps - base < int(blockDim.x) ? num_timesteps - base : int(blockDim.x)"),
            n.Comment("every thread issues all its loads before any store to shared memory, so they are in"),
            n.Comment("flight together (one bus round trip, not one per value, when the inputs are host memory)"),
            n.Stmt("T r_q[NUM_POS], r_qd[NUM_VEL], r_qdd[NUM_VEL]"),
            *[node for a, size in _STAGED
              for node in _share_of(f"r_{a}[j] = d_{a}[size_t(base) * {size} + i]", size, a == "qdd")],
            *[node for a, size in _STAGED for node in _share_of(f"s_{a}[i] = r_{a}[j]", size, a == "qdd")],
            n.Stmt("__syncthreads()"),
            n.If("int(threadIdx.x) < count", [
                n.Stmt("const int t = threadIdx.x"),
                n.Stmt("inverse_dynamics_state<T, USE_QDD, USE_F_EXT>(&s_tau[t * NUM_VEL], &s_q[t * NUM_POS], "
                       "&s_qd[t * NUM_VEL], USE_QDD ? &s_qdd[t * NUM_VEL] : nullptr, "
                       "USE_F_EXT ? &d_f_ext[size_t(base + t) * 6 * NUM_BODIES] : nullptr, gravity)"),
            ]),
            n.Stmt("__syncthreads()"),
            n.Comment("no sync after the store: the next round's loads write only s_q, s_qd and s_qdd, and its"),
            n.Comment("compute (which writes s_tau) waits at a sync every thread reaches after this loop"),
            n.For("int i = threadIdx.x", "i < count * NUM_VEL", "i += blockDim.x",
                  [n.Stmt("d_tau[size_t(base) * NUM_VEL + i] = s_tau[i]")]),
        ]
        staged = n.Function(
            "__global__ void __launch_bounds__(INVERSE_DYNAMICS_PER_STATE_THREADS) "
            "inverse_dynamics_per_state_staged_kernel(T *d_tau, const T *d_q, const T *d_qd, const T *d_qdd, "
            "const T *d_f_ext, const Gravity<T> gravity, const int num_timesteps)",
            [
                n.Stmt("GRID_DYNAMIC_SMEM(smem)"),
                n.Stmt("T *s_q = reinterpret_cast<T *>(smem)"),
                n.Stmt("T *s_qd = s_q + blockDim.x * NUM_POS"),
                n.Stmt("T *s_qdd = s_qd + blockDim.x * NUM_VEL"),
                n.Stmt("T *s_tau = s_qdd + blockDim.x * NUM_VEL"),
                n.Comment("the loop bound is uniform over the block: every thread reaches every sync"),
                n.For("int base = blockIdx.x * blockDim.x", "base < num_timesteps",
                      "base += gridDim.x * blockDim.x", stage),
            ],
            template="template <typename T, bool USE_QDD, bool USE_F_EXT>",
            doc=(
                "Per-state layout with the block's states staged through shared memory: every global\n"
                "load and store of q, qd, qdd and tau is coalesced.  For inputs and outputs in mapped\n"
                "host memory (LaunchConfig::stage_io), where each uncoalesced access crosses the bus;\n"
                "f_ext is read in place."
            ),
        )
        return [fn, kernel, staged]

    # -- host layer -----------------------------------------------------------------------

    def launcher(self, ctx: EmitContext) -> list:
        tiers = []
        for tier in Tier:
            tiers.append(n.If(f"cfg.tier == {tier.cpp}", [
                n.Stmt(f"constexpr size_t smem = INVERSE_DYNAMICS_SMEM_BYTES<T, {tier.cpp}>()"),
                n.If(f"threads > tier_max_threads<{tier.cpp}>()", [n.Stmt("return cudaErrorInvalidValue")]),
                n.If("INVERSE_DYNAMICS_WORKSPACE_BYTES<T, " + tier.cpp + ">() > 0", [
                    n.Stmt("blocks = blocks < MAX_WORKSPACE_BLOCKS ? blocks : MAX_WORKSPACE_BLOCKS"),
                    n.If(f"d_workspace == nullptr || workspace_bytes < size_t(blocks) * "
                         f"INVERSE_DYNAMICS_WORKSPACE_BYTES<T, {tier.cpp}>()",
                         [n.Stmt("return cudaErrorInvalidValue")]),
                ]),
                n.Stmt(f"GRID_LAUNCH((inverse_dynamics_kernel<T, {tier.cpp}>), blocks, threads, smem, stream, "
                       "d_tau, d_q, NUM_POS, d_qd, NUM_VEL, d_qdd, NUM_VEL, d_f_ext, (const robotModel<T> *)nullptr, "
                       "g, num_timesteps, d_workspace)"),
                n.Stmt("return cudaPeekAtLastError()"),
            ]))
        per_state, staged = [], []
        for use_qdd in (True, False):
            for use_f in (True, False):
                cond = f"{'' if use_qdd else '!'}use_qdd && {'' if use_f else '!'}use_f_ext"
                lit = f"{'true' if use_qdd else 'false'}, {'true' if use_f else 'false'}"
                per_state.append(n.If(cond, [n.Stmt(
                    f"GRID_LAUNCH((inverse_dynamics_per_state_kernel<T, {lit}>), blocks, threads, 0, stream, "
                    "d_tau, d_q, NUM_POS, d_qd, NUM_VEL, d_qdd, NUM_VEL, d_f_ext, g, num_timesteps)")]))
                staged.append(n.If(cond, [n.Stmt(
                    f"GRID_LAUNCH((inverse_dynamics_per_state_staged_kernel<T, {lit}>), blocks, threads, smem, "
                    "stream, d_tau, d_q, d_qd, d_qdd, d_f_ext, g, num_timesteps)")]))
        # a hint: a robot too big to stage, or a block size over the staged one, runs the plain kernel
        staged_branch = n.If("cfg.stage_io && INVERSE_DYNAMICS_STAGED_THREADS<T>() > 0 && "
                             "cfg.threads <= INVERSE_DYNAMICS_STAGED_THREADS<T>()", [
            n.Stmt("const int threads = cfg.threads > 0 ? cfg.threads : INVERSE_DYNAMICS_STAGED_THREADS<T>()"),
            n.Stmt("const int blocks = cfg.blocks > 0 ? cfg.blocks : (num_timesteps + threads - 1) / threads"),
            n.Stmt("const size_t smem = size_t(threads) * INVERSE_DYNAMICS_STAGED_ROW * sizeof(T)"),
            *staged,
            n.Stmt("return cudaPeekAtLastError()"),
        ])
        return [
            n.Function(
                "__host__ int inverse_dynamics_resolve_layout(int num_timesteps, int layout)",
                [n.Stmt("if (layout != LAYOUT_AUTO) return layout"),
                 n.Stmt("return num_timesteps >= INVERSE_DYNAMICS_PER_STATE_MIN_N ? LAYOUT_PER_STATE : LAYOUT_BLOCK")],
                doc="The layout for a batch: the crossover measured on the GPU decides LAYOUT_AUTO.",
            ),
            n.Function(
                "__host__ cudaError_t init_grid_kernel_attr_inverse_dynamics_checked()",
                [
                    n.Stmt("const int cap = grid_get_max_dynamic_shared_memory_bytes()"),
                    *[n.Block("", [
                        n.Stmt(f"const size_t bytes = INVERSE_DYNAMICS_SMEM_BYTES<T, {t.cpp}>()"),
                        n.If("bytes > size_t(cap)", [n.Stmt("return cudaErrorInvalidValue")]),
                        n.Stmt(f"cudaError_t err = cudaFuncSetAttribute(inverse_dynamics_kernel<T, {t.cpp}>, "
                               "cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes))"),
                        n.If("err != cudaSuccess", [n.Stmt("return err")]),
                    ]) for t in Tier],
                    n.Stmt("return cudaSuccess"),
                ],
                template="template <typename T>",
                doc="Opts every tier's kernel into the shared memory it needs, checked against the\n"
                    "queried cap (cudaErrorInvalidValue when a rung does not fit this device).",
            ),
            n.Function(
                "__host__ size_t inverse_dynamics_workspace_bytes(int num_timesteps, LaunchConfig cfg = LaunchConfig())",
                [
                    n.If("inverse_dynamics_resolve_layout(num_timesteps, cfg.layout) == LAYOUT_PER_STATE",
                         [n.Stmt("return 0")]),
                    n.Stmt("int blocks = cfg.blocks > 0 ? cfg.blocks : num_timesteps"),
                    n.Stmt("blocks = blocks < MAX_WORKSPACE_BLOCKS ? blocks : MAX_WORKSPACE_BLOCKS"),
                    n.Stmt("const size_t per_block = cfg.tier == TIER_SHARED ? INVERSE_DYNAMICS_WORKSPACE_BYTES<T, "
                           "TIER_SHARED>() : (cfg.tier == TIER_LITE ? INVERSE_DYNAMICS_WORKSPACE_BYTES<T, TIER_LITE>() "
                           ": INVERSE_DYNAMICS_WORKSPACE_BYTES<T, TIER_MINIMAL>())"),
                    n.Stmt("return per_block * size_t(blocks)"),
                ],
                template="template <typename T>",
                doc="Global workspace a launch of this batch and config needs (0 for most tiers).",
            ),
            n.Function(
                "__host__ cudaError_t inverse_dynamics_launch(T *d_tau, const T *d_q, const T *d_qd, const T *d_qdd, "
                "const T *d_f_ext, const T *h_gravity, const int num_timesteps, LaunchConfig cfg, T *d_workspace, "
                "size_t workspace_bytes, cudaStream_t stream)",
                [
                    n.If("num_timesteps <= 0", [n.Stmt("return cudaSuccess")]),
                    n.Stmt("const Gravity<T> g = h_gravity == nullptr ? Gravity<T>() : "
                           "Gravity<T>(h_gravity[0], h_gravity[1], h_gravity[2])"),
                    n.Stmt("const bool use_qdd = d_qdd != nullptr"),
                    n.Stmt("const bool use_f_ext = d_f_ext != nullptr"),
                    n.If("inverse_dynamics_resolve_layout(num_timesteps, cfg.layout) == LAYOUT_PER_STATE", [
                        staged_branch,
                        n.Stmt("const int threads = cfg.threads > 0 ? cfg.threads : INVERSE_DYNAMICS_PER_STATE_THREADS"),
                        n.If("threads > INVERSE_DYNAMICS_PER_STATE_THREADS", [n.Stmt("return cudaErrorInvalidValue")]),
                        n.Stmt("const int blocks = cfg.blocks > 0 ? cfg.blocks : (num_timesteps + threads - 1) / threads"),
                        *per_state,
                        n.Stmt("return cudaPeekAtLastError()"),
                    ]),
                    n.Stmt("static const cudaError_t attr = init_grid_kernel_attr_inverse_dynamics_checked<T>()"),
                    n.If("attr != cudaSuccess", [n.Stmt("return attr")]),
                    n.Stmt("const int threads = cfg.threads > 0 ? cfg.threads : MAX_PERF_LEVEL_THREADS"),
                    n.Stmt("int blocks = cfg.blocks > 0 ? cfg.blocks : num_timesteps"),
                    *tiers,
                    n.Stmt("return cudaErrorInvalidValue"),
                ],
                template="template <typename T>",
                doc=(
                    "Device pointers in, device pointers out, contiguous (N, NUM_POS) / (N, NUM_VEL) /\n"
                    "(N, NUM_BODIES, 6); d_qdd == nullptr means qdd = 0, d_f_ext == nullptr no external\n"
                    "force; h_gravity: 3 host values or nullptr for (0, 0, -9.81).  Asynchronous on stream."
                ),
            ),
        ]

    def host_wrapper(self, ctx: EmitContext) -> list:
        return [
            n.Function(
                "__host__ void inverse_dynamics(gridData<T> *hd_data, const robotModel<T> *d_robotModel, "
                "const Gravity<T> gravity, const int num_timesteps, const dim3 block_dimms, const dim3 thread_dimms, "
                "cudaStream_t *streams)",
                [
                    n.Comment("inputs: [q | qd] (+ qdd apart) when compressed, else [q | qd | qdd]"),
                    n.Stmt("constexpr int stride = USE_COMPRESSED_MEM ? NUM_POS + NUM_VEL : NUM_POS + 2 * NUM_VEL"),
                    n.Stmt("T *h_in = USE_COMPRESSED_MEM ? hd_data->h_q_qd : hd_data->h_q_qd_u"),
                    n.Stmt("T *d_in = USE_COMPRESSED_MEM ? hd_data->d_q_qd : hd_data->d_q_qd_u"),
                    n.Stmt("gpuErrchk(cudaMemcpyAsync(d_in, h_in, size_t(stride) * num_timesteps * sizeof(T), "
                           "cudaMemcpyHostToDevice, streams[0]))"),
                    n.If("USE_QDD_FLAG && USE_COMPRESSED_MEM", [
                        n.Stmt("gpuErrchk(cudaMemcpyAsync(hd_data->d_qdd, hd_data->h_qdd, size_t(NUM_VEL) * "
                               "num_timesteps * sizeof(T), cudaMemcpyHostToDevice, streams[1]))")], constexpr=True),
                    n.If("hd_data->use_f_ext", [
                        n.Stmt("gpuErrchk(cudaMemcpyAsync(hd_data->d_f_ext, hd_data->h_f_ext, size_t(6 * NUM_BODIES) "
                               "* num_timesteps * sizeof(T), cudaMemcpyHostToDevice, streams[2]))")]),
                    n.Stmt("gpuErrchk(cudaDeviceSynchronize())"),
                    n.Stmt("const T *d_qdd = !USE_QDD_FLAG ? nullptr : (USE_COMPRESSED_MEM ? hd_data->d_qdd : "
                           "d_in + NUM_POS + NUM_VEL)"),
                    n.Stmt("const int stride_qdd = USE_COMPRESSED_MEM ? NUM_VEL : stride"),
                    n.Stmt("const T *d_f_ext = hd_data->use_f_ext ? hd_data->d_f_ext : nullptr"),
                    n.If("inverse_dynamics_resolve_layout(num_timesteps, LAYOUT_AUTO) == LAYOUT_PER_STATE", [
                        n.Stmt("const int threads = INVERSE_DYNAMICS_PER_STATE_THREADS"),
                        n.Stmt("const int blocks = (num_timesteps + threads - 1) / threads"),
                        n.If("d_f_ext != nullptr", [n.Stmt(
                            "GRID_LAUNCH((inverse_dynamics_per_state_kernel<T, USE_QDD_FLAG, true>), blocks, threads, "
                            "0, streams[0], hd_data->d_c, d_in, stride, d_in + NUM_POS, stride, d_qdd, stride_qdd, "
                            "d_f_ext, gravity, num_timesteps)")], [n.Stmt(
                            "GRID_LAUNCH((inverse_dynamics_per_state_kernel<T, USE_QDD_FLAG, false>), blocks, threads, "
                            "0, streams[0], hd_data->d_c, d_in, stride, d_in + NUM_POS, stride, d_qdd, stride_qdd, "
                            "d_f_ext, gravity, num_timesteps)")]),
                    ], [
                        n.Stmt("static const cudaError_t attr = init_grid_kernel_attr_inverse_dynamics_checked<T>()"),
                        n.Stmt("gpuErrchk(attr)"),
                        n.Stmt("gpuErrchk(grid_ensure_workspace(hd_data, INVERSE_DYNAMICS_WORKSPACE_BYTES<T, "
                               "TIER_SHARED>() * block_dimms.x))"),
                        n.Stmt("GRID_LAUNCH((inverse_dynamics_kernel<T, TIER_SHARED>), block_dimms, thread_dimms, "
                               "(INVERSE_DYNAMICS_SMEM_BYTES<T, TIER_SHARED>()), streams[0], hd_data->d_c, d_in, stride, "
                               "d_in + NUM_POS, stride, d_qdd, stride_qdd, d_f_ext, d_robotModel, gravity, num_timesteps, "
                               "hd_data->d_workspace)"),
                    ]),
                    n.Stmt("gpuErrchk(cudaPeekAtLastError())"),
                    n.Stmt("gpuErrchk(cudaDeviceSynchronize())"),
                    n.Stmt("gpuErrchk(cudaMemcpy(hd_data->h_c, hd_data->d_c, size_t(NUM_VEL) * num_timesteps * "
                           "sizeof(T), cudaMemcpyDeviceToHost))"),
                ],
                template="template <typename T, bool USE_QDD_FLAG = false, bool USE_COMPRESSED_MEM = false>",
                doc=(
                    "Host layer: copies the inputs of hd_data to the device, launches, copies the joint\n"
                    "forces back into hd_data->h_c.  USE_QDD_FLAG: use the accelerations (else qdd = 0);\n"
                    "USE_COMPRESSED_MEM: inputs in h_q_qd and h_qdd (else h_q_qd_u).  Batches of at\n"
                    "least INVERSE_DYNAMICS_PER_STATE_MIN_N states run in the per-state layout, smaller\n"
                    "ones one block per state with the given block and thread dims."
                ),
            )
        ]

    def min_blocks(self, ctx: EmitContext) -> int:
        if ctx.options.per_state_min_blocks:
            return int(ctx.options.per_state_min_blocks)
        return int(ctx.tuning.get("per_state_min_blocks", 1))

    def emit(self, ctx: EmitContext) -> list:
        min_n = int(ctx.tuning.get("per_state_min_n", self.DEFAULT_PER_STATE_MIN_N))
        source = "measured on the GPU" if "per_state_min_n" in ctx.tuning else "default, not yet measured"
        return [
            *arena_emit.size_constants(ctx.plan, "INVERSE_DYNAMICS"),
            n.Comment(f"Batches of at least this many states use the per-state layout ({source})."),
            n.Stmt(f"static constexpr int INVERSE_DYNAMICS_PER_STATE_MIN_N = {min_n}"),
            n.Stmt(f"static constexpr int INVERSE_DYNAMICS_PER_STATE_THREADS = {self.PER_STATE_THREADS}"),
            n.Comment("Blocks per SM the per-state kernel's registers must allow (occupancy vs registers)."),
            n.Stmt(f"static constexpr int INVERSE_DYNAMICS_PER_STATE_MIN_BLOCKS = {self.min_blocks(ctx)}"),
            n.Comment("Staged per-state kernel: values per state in shared memory (q, qd, qdd, tau), and its"),
            n.Comment("block size: the largest multiple of 32 up to the per-state one within the 48 KB a block"),
            n.Comment("gets without opting in (0: the robot is too big to stage; the plain kernel runs)."),
            n.Stmt("static constexpr int INVERSE_DYNAMICS_STAGED_ROW = NUM_POS + 3 * NUM_VEL"),
            n.Function(
                "__host__ __device__ constexpr int INVERSE_DYNAMICS_STAGED_THREADS()",
                [n.Stmt("constexpr int fit = int(48 * 1024 / (INVERSE_DYNAMICS_STAGED_ROW * sizeof(T))) / 32 * 32"),
                 n.Stmt("return fit < INVERSE_DYNAMICS_PER_STATE_THREADS ? fit : INVERSE_DYNAMICS_PER_STATE_THREADS")],
                template="template <typename T>",
            ),
            n.Blank(),
            *self.inner(ctx),
            n.Blank(),
            *self.device(ctx),
            n.Blank(),
            *self.kernel(ctx),
            n.Blank(),
            *self.per_state(ctx),
            n.Blank(),
            *self.launcher(ctx),
            n.Blank(),
            *self.host_wrapper(ctx),
        ]


class InverseDynamics(Algorithm):
    name = "inverse_dynamics"
    summary = "joint forces tau = ID(q, qd, qdd, f_ext) by the recursive Newton-Euler algorithm"
    math = r"""
Forward pass, root to leaves, for each body :math:`i` with parent :math:`\lambda(i)`:

.. math::

   X_i = X_J(q_i)\,X_{T,i}, \quad
   v_i = X_i v_{\lambda(i)} + S_i \dot q_i, \quad
   a_i = X_i a_{\lambda(i)} + S_i \ddot q_i + v_i \times S_i \dot q_i,

   f_i = I_i a_i + v_i \times^* I_i v_i - f^{ext}_i,

with :math:`a_0 = -a_g` (gravity as a fictitious base acceleration).  Backward pass,
leaves to root: :math:`\tau_i = S_i^T f_i`, :math:`f_{\lambda(i)} \mathrel{+}= X_i^T f_i`.
"""
    review = ParallelismReview(
        P1=done("block layout: the forward sweep runs level by level, the bodies of a level in "
                "parallel (one thread each, one barrier per level); the backward sweep has each parent "
                "of a level gather its children's forces (no atomics, deterministic order). The "
                "per-body form stays available (p1='bodies') for the A/B; a chain is the same either way"),
        P2=done("the joint forces are a fan-out over velocity indices (one thread each); no other "
                "independent columns exist in a vector output"),
        P3=done("the configuration-dependent transform data (sin/cos, free-flyer rotation) is hoisted "
                "out of the sweep into one parallel pass over bodies (load_update_XImats)"),
        P4=done("robot constants (placements, inertias, axes) are folded into the code, their zeros "
                "dropped; per body only sin/cos (or E and p of a free-flyer) is stored: 2 scalars "
                "instead of a 36-entry transform"),
        notes="two layouts: block-cooperative (one block per state; the inline rung) and per-state "
              "(one thread per state, straight-line register code); the launcher picks by the "
              "measured crossover INVERSE_DYNAMICS_PER_STATE_MIN_N; a staged per-state variant "
              "(LaunchConfig::stage_io) moves each block's states through shared memory so global "
              "accesses coalesce, for inputs in mapped host memory (the C ABI's mapped_staged transfer)",
    )
    emitter = InverseDynamicsEmitter

    def inputs(self, robot: Robot):
        return dynamics_inputs(robot, "qdd")

    def outputs(self, robot: Robot):
        return (Port("tau", (robot.nv,), "joint forces"),)

    def reference(self, ctx, q, qd, qdd, f_ext=None, gravity=DEFAULT_GRAVITY):
        return rnea(ctx.robot, q, qd, qdd, f_ext, gravity)[0]

    def arenas(self, robot: Robot, options=None):
        nb = robot.num_bodies
        return (
            ArenaRegion("q", robot.nq, "joint configuration (kernel input)", spillable=False),
            ArenaRegion("qd", robot.nv, "joint velocity (kernel input)", spillable=False),
            ArenaRegion("qdd", robot.nv, "joint acceleration (kernel input)", spillable=False),
            ArenaRegion("tau", robot.nv, "joint forces (kernel output)", spillable=False),
            ArenaRegion("XI", ss.xi_size(robot), "configuration-dependent transform data"),
            ArenaRegion("vaf", 18 * nb, "spatial velocity, acceleration and force of every body"),
        )

    def spill_rungs(self, robot: Robot, options=None):
        return (
            SpillRung(0, "all in shared memory"),
            SpillRung(1, "sweep state in global", {"vaf"}, "the v/a/f band goes to d_workspace"),
            SpillRung(2, "all scratch in global", {"vaf", "XI"}, "transform data too"),
        )


@hookimpl
def grid_register_algorithms():
    return [InverseDynamics]
