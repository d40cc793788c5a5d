"""Train a policy through forward dynamics with PyTorch autograd.

The policy maps a state (q, qd) to joint torques; the loss is how far the accelerations those
torques produce (``forward_dynamics``, on the CPU) are from a PD law's.  Its gradient flows
back through the generated kernels into the policy's weights.
"""

import numpy as np
import torch

import grid_core

torch.manual_seed(0)
robot = grid_core.load_robot("iiwa14")
handle = grid_core.CpuHandle(robot, ["inverse_dynamics", "forward_dynamics", "end_effector_pose"], quiet=True)

rng = np.random.default_rng(0)
q = torch.tensor(robot.random_configuration(rng, 64))
qd = torch.tensor(rng.uniform(-1, 1, (64, robot.nv)))
target = -4.0 * q - 2.0 * qd  # the accelerations of a PD law towards q = 0

policy = torch.nn.Sequential(torch.nn.Linear(2 * robot.nv, 64), torch.nn.Tanh(), torch.nn.Linear(64, robot.nv)).double()
opt = torch.optim.Adam(policy.parameters(), lr=0.01)
for step in range(301):
    tau = policy(torch.cat([q, qd], dim=1))
    qdd = handle.forward_dynamics(q, qd, tau)  # differentiable: tau requires grad
    loss = ((qdd - target) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 100 == 0:
        print(f"step {step:3d}  loss {loss.item():.4g}")
