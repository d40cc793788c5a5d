"""Reach end-effector targets by gradient descent on q with JAX.

``end_effector_pose`` has a derivative rule (the frame Jacobians), so ``jax.grad`` of a loss
on the poses works inside ``jax.jit``; a batch of 8 targets is solved at once.
"""

import jax
import jax.numpy as jnp
import numpy as np

import grid_core

jax.config.update("jax_enable_x64", True)  # the handle computes in float64
robot = grid_core.load_robot("iiwa14")
handle = grid_core.CpuHandle(robot, ["inverse_dynamics", "forward_dynamics", "end_effector_pose"], quiet=True)

rng = np.random.default_rng(1)
targets = handle.end_effector_pose(robot.random_configuration(rng, 8))[:, 0, :3, 3]  # reachable points
q = jnp.asarray(robot.random_configuration(rng, 8))


def loss(q):
    p = handle.end_effector_pose(q)[:, 0, :3, 3]  # the tool's position, one per state
    return jnp.sum((p - targets) ** 2)


@jax.jit
def step(q):
    value, grad = jax.value_and_grad(loss)(q)
    return q - 0.5 * grad, value


for k in range(201):
    q, value = step(q)
    if k % 50 == 0:
        print(f"step {k:3d}  mean distance {np.sqrt(value / 8):.3e} m")
