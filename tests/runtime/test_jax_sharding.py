"""A batch sharded over 4 XLA:CPU devices (``--xla_force_host_platform_device_count=4``, set
before JAX starts: the check runs in a subprocess) inside ``jax.jit``: each device runs the FFI
call on its own shard (the handler's record of its calls: device, batch size), the compiled
program gathers nothing, the output stays sharded, and values and gradients equal those of
one device."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax")

from tests.generated import gradient_algorithms  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
import json, sys
import numpy as np, jax, jax.numpy as jnp, grid_core
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from grid_core.runtime import jax_ffi

jax.config.update("jax_enable_x64", True)
robot = grid_core.load_robot("go2")
h = grid_core.CpuHandle(robot, sys.argv[1].split(","), quiet=True)
mesh = Mesh(np.array(jax.devices()), ("batch",))
rng = np.random.default_rng(7)
B = 8
x = [robot.random_configuration(rng, B), rng.normal(size=(B, robot.nv)), rng.normal(size=(B, robot.nv))]
xs = [jax.device_put(a, NamedSharding(mesh, P("batch"))) for a in x]
sharded = jax_ffi.shard_batch(h.inverse_dynamics, mesh, "batch")
f = jax.jit(sharded)
hlo = f.lower(*xs).compile().as_text()
with jax_ffi.recorded_host_calls() as calls:
    out = f(*xs).block_until_ready()
one = h.inverse_dynamics(*x)  # numpy: one call of the whole batch
loss = jax.jit(jax.grad(lambda q, qd, qdd: jnp.sum(sharded(q, qd, qdd) ** 2)))
with jax_ffi.recorded_host_calls() as grad_calls:
    g = loss(*xs).block_until_ready()
g1 = jax.grad(lambda q: jnp.sum(h.inverse_dynamics(q, *map(jnp.asarray, x[1:])) ** 2))(jnp.asarray(x[0]))
print(json.dumps({
    "devices": [d.id for d in jax.devices()],
    "calls": calls,
    "grad_devices": sorted({d for d, _ in grad_calls}),
    "collectives": [op for op in ("all-gather", "all-reduce", "all-to-all", "collective-permute") if op in hlo],
    "sharded": [out.sharding.spec == P("batch"), g.sharding.spec == P("batch")],
    "shards": [[s.device.id, s.index[0].start, s.index[0].stop,
                float(np.abs(np.asarray(s.data) - one[s.index[0]]).max())] for s in out.addressable_shards],
    "error": float(np.abs(np.asarray(out) - one).max()),
    "grad_error": float(np.abs(np.asarray(g) - np.asarray(g1)).max()),
}))
"""


def test_a_sharded_batch_runs_shard_by_shard_on_each_device():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4")
    proc = subprocess.run([sys.executable, "-c", SCRIPT, ",".join(gradient_algorithms())], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["devices"] == [0, 1, 2, 3]
    # one call per device, each of its 2 states, and no other call
    assert sorted(map(tuple, r["calls"])) == [(0, 2), (1, 2), (2, 2), (3, 2)]
    assert r["collectives"] == []
    assert r["sharded"] == [True, True]  # the output and the gradient split over the batch as the inputs
    assert sorted((d, a, b) for d, a, b, _ in r["shards"]) == [(0, 0, 2), (1, 2, 4), (2, 4, 6), (3, 6, 8)]
    assert all(err == 0.0 for *_, err in r["shards"]) and r["error"] == 0.0
    # the backward's kernels ran on every device too, and the gradient is one device's
    assert r["grad_devices"] == [0, 1, 2, 3]
    assert r["grad_error"] <= 1e-9
