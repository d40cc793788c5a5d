"""Header variants of atlas's forward_dynamics_gradient for repro.cu (run from the repo root)."""
import os, sys
import numpy as np
sys.path.insert(0, "tests"); sys.path.insert(0, ".")
from conftest import load
from grid_core.composer import generate
here = os.path.dirname(os.path.abspath(__file__))
h0 = generate(load("atlas"), ["forward_dynamics_gradient"])
d = np.load(os.path.join(here, "dfd.npz"))
np.concatenate([d["q"].ravel(), d["qd"].ravel(), d["tau"].ravel(), d["f"].ravel()]).astype(np.float64).tofile(os.path.join(here, "in.bin"))


def variant(var):
    h = h0
    a = h.index("void forward_dynamics_gradient_state(")
    b = h.index("// Per-state layout", a)
    body = h[a:b]
    if var == "unroll1":
        body = body.replace("    for (int k = 0; k < ", "    #pragma unroll 1\n    for (int k = 0; k < ")
    elif var == "dump":
        body = body.replace("dqdd_dq[k] = -aq;", "dqdd_dq[k] = dtau_dq[k] + T(0) * aq;").replace(
            "dqdd_dqd[k] = -av;", "dqdd_dqd[k] = inv_M[k] + T(0) * av;")
    elif var == "dumpqdd":
        body = body.replace("dqdd_dq[k] = -aq;", "dqdd_dq[k] = (k < 30 ? qdd[k] : -aq);").replace(
            "dqdd_dqd[k] = -av;", "dqdd_dqd[k] = dtau_dqd[k] + T(0) * av;")
    h = h[:a] + body + h[b:]
    if var == "noinline":
        for f in ("aba_state", "inverse_dynamics_gradient_state", "minv_state"):
            h = h.replace(f"__device__ __forceinline__ void {f}(", f"__device__ __noinline__ void {f}(")
    assert var == "base" or h != h0
    return h


for v in sys.argv[1:]:
    os.makedirs(os.path.join(here, v), exist_ok=True)
    open(os.path.join(here, v, "grid.cuh"), "w").write(variant(v))
