"""Compare repro outputs (variant dirs given) with the reference (run from the repo root)."""
import os, sys
import numpy as np
sys.path.insert(0, "tests"); sys.path.insert(0, ".")
from conftest import load
from grid_core import Reference
here = os.path.dirname(os.path.abspath(__file__))
d = np.load(os.path.join(here, "dfd.npz"))
q, qd, tau, f = d["q"], d["qd"], d["tau"], d["f"]
ref = Reference(load("atlas"))
qdd = ref.forward_dynamics(q, qd, tau, f)
dtq, dtqd = ref.inverse_dynamics_gradient(q, qd, qdd, f)
exp = ref.forward_dynamics_gradient(q, qd, tau, f)
Minv = ref.minv(q)


def show(label, got, want):
    err = np.abs(got - want) / np.abs(want).max()
    bad = np.argwhere(err > 1e-9)
    rows = sorted(set(bad[:, -2].tolist())) if got.ndim == 3 else sorted(set(bad[:, -1].tolist()))
    cols = sorted(set(bad[:, -1].tolist())) if got.ndim == 3 else []
    print(f"  {label}: rel {err.max():.2e} bad {len(bad)} rows {rows[:12]} cols {cols[:12]}")


for v in sys.argv[1:]:
    p = os.path.join(here, v, "out.bin")
    if not os.path.exists(p):
        print(v, "no output"); continue
    o = np.fromfile(p).reshape(2, 2, 30, 30)
    print(v)
    if v == "dump":
        show("dtau_dq", o[0], dtq); show("inv_M", o[1], Minv)
    elif v == "dumpqdd":
        show("qdd", o[0].reshape(2, -1)[:, :30], qdd); show("dtau_dqd", o[1], dtqd)
    else:
        show("dqdd_dq", o[0], exp[0]); show("dqdd_dqd", o[1], exp[1])
