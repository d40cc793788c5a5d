"""JAX arrays through the XLA FFI call (grid_core.runtime.jax_ffi), on XLA:CPU with an
emulated library: the same handler, attributes and argument words as on the GPU, only the
stream differs.  Results are held against the Reference (float32 1e-4, float64 1e-9)."""

from __future__ import annotations

import numpy as np
import pytest

import jax
import jax.numpy as jnp

from conftest import load
from grid_core import Reference
from grid_core.errors import InputError
from grid_core.runtime import jax_ffi
from grid_core.testing import Emulated, assert_close, random_state

TOL = {np.float32: 1e-4, np.float64: 1e-9}


@pytest.fixture(scope="module", params=["iiwa14", "go2"])
def robot(request):
    return load(request.param)


def _handle(robot, dtype):
    h = Emulated(robot, ["inverse_dynamics"], dtype)
    h.set_poison(True)
    return h


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_jax_in_jax_out_eager_jit_vmap(robot, dtype, rng, x64):
    h, ref = _handle(robot, dtype), Reference(robot)
    q, qd, qdd = (x.astype(dtype) for x in random_state(robot, rng, 6))
    expected = ref.inverse_dynamics(q, qd, qdd)
    jq, jqd, jqdd = (jnp.asarray(x) for x in (q, qd, qdd))

    out = h.inverse_dynamics(jq, jqd, jqdd)
    assert isinstance(out, jax.Array) and out.dtype == dtype and out.shape == (6, robot.nv)
    assert_close(np.asarray(out), expected, TOL[dtype], "eager")
    # the same kernels as the numpy path of the same library
    np.testing.assert_allclose(np.asarray(out), h.inverse_dynamics(q, qd, qdd), rtol=0, atol=0)

    # inside a jitted program, composed with other operations
    twice = jax.jit(lambda a, b, c: 2 * h.inverse_dynamics(a, b, c) + a[:, :1] * 0)
    assert_close(np.asarray(twice(jq, jqd, jqdd)), 2 * expected, TOL[dtype], "jit")

    # vmap over single states: one batch of 6 for the kernel
    per_state = jax.vmap(lambda a, b, c: h.inverse_dynamics(a, b, c))(jq, jqd, jqdd)
    assert per_state.shape == (6, robot.nv)
    assert_close(np.asarray(per_state), expected, TOL[dtype], "vmap")

    # vmap over batches: an extra leading axis, flattened into one batch of 12
    stacked = [jnp.stack([x, x[::-1]]) for x in (jq, jqd, jqdd)]
    both = jax.vmap(lambda a, b, c: h.inverse_dynamics(a, b, c))(*stacked)
    assert both.shape == (2, 6, robot.nv)
    assert_close(np.asarray(both[1]), expected[::-1], TOL[dtype], "vmap of batches")


def test_optional_inputs_params_and_single_state(robot, rng):
    h, ref = _handle(robot, np.float32), Reference(robot)
    q, qd, qdd = (x.astype(np.float32) for x in random_state(robot, rng, 5))
    f_ext = rng.normal(size=(5, robot.num_bodies, 6)).astype(np.float32)
    gravity = np.array([0.5, -1.0, -3.0])
    jq, jqd, jqdd, jf = (jnp.asarray(x) for x in (q, qd, qdd, f_ext))

    # the optional f_ext given by keyword, gravity not the default
    out = h.inverse_dynamics(jq, jqd, qdd=jqdd, f_ext=jf, gravity=gravity)
    assert_close(np.asarray(out), ref.inverse_dynamics(q, qd, qdd, f_ext, gravity=gravity), 1e-4)
    # an optional input given positionally as None is omitted
    assert_close(np.asarray(h.inverse_dynamics(jq, jqd, jqdd, None)), ref.inverse_dynamics(q, qd, qdd), 1e-4)
    # params are attributes: a Python value under jit is fine
    jitted = jax.jit(lambda a, b, c: h.inverse_dynamics(a, b, c, gravity=gravity))
    assert_close(np.asarray(jitted(jq, jqd, jqdd)), ref.inverse_dynamics(q, qd, qdd, gravity=gravity), 1e-4)
    # one state in, one state out; numpy inputs mixed with JAX ones are taken
    one = h.inverse_dynamics(jq[0], qd[0], jqdd[0])
    assert one.shape == (robot.nv,)
    assert_close(np.asarray(one), ref.inverse_dynamics(q[0], qd[0], qdd[0]), 1e-4)
    # a single state among a batch is broadcast over it, as the Reference does (eagerly and jitted)
    expected = ref.inverse_dynamics(q, qd[0], qdd)
    assert_close(np.asarray(h.inverse_dynamics(jq, jqd[0], jqdd)), expected, 1e-4)
    assert_close(np.asarray(jitted(jq, jqd[0], jqdd)), ref.inverse_dynamics(q, qd[0], qdd, gravity=gravity), 1e-4)
    # float64 inputs to a float32 handle are converted
    assert_close(np.asarray(h.inverse_dynamics(jnp.asarray(q, jnp.float32), qd.astype(np.float64), qdd)),
                 ref.inverse_dynamics(q, qd, qdd), 1e-4)


def test_misuse_is_named(robot, rng):
    h = _handle(robot, np.float32)
    q, qd, qdd = (jnp.asarray(x.astype(np.float32)) for x in random_state(robot, rng, 4))
    with pytest.raises(InputError, match="immutable; out= is not taken"):
        h.inverse_dynamics(q, qd, qdd, out=jnp.zeros((4, robot.nv)))
    with pytest.raises(InputError, match="argument 'qd' has shape"):
        h.inverse_dynamics(q, qd[:, :-1], qdd)
    with pytest.raises(InputError, match="'qd' has batch size 3 but 'q' has 4"):
        h.inverse_dynamics(q, qd[:3], qdd)
    with pytest.raises(InputError, match="'qdd' is required"):
        h.inverse_dynamics(q, qd)
    with pytest.raises(InputError, match="unexpected argument 'tau'"):
        h.inverse_dynamics(q, qd, qdd, tau=q)
    with pytest.raises(InputError, match="'gravity' must be a concrete value"):
        jax.jit(lambda a, g: h.inverse_dynamics(a, qd, qdd, gravity=g))(q, jnp.zeros(3))
    with pytest.raises(InputError, match="'gravity' must be finite with shape"):
        h.inverse_dynamics(q, qd, qdd, gravity=[0.0, np.nan, 0.0])


def test_float64_handle_needs_x64(rng):
    robot = load("iiwa14")
    h = _handle(robot, np.float64)
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", False)
    try:
        q, qd, qdd = (jnp.asarray(x) for x in random_state(robot, rng, 2))
        with pytest.raises(InputError, match="jax_enable_x64"):
            h.inverse_dynamics(q, qd, qdd)
    finally:
        jax.config.update("jax_enable_x64", before)


def test_handler_checks_the_buffers_it_is_given(rng):
    """The C handler's own checks, reached by calling the FFI target directly: buffers of
    different batch sizes, an output of the wrong size, and a library without the entry."""
    robot = load("iiwa14")
    h = _handle(robot, np.float32)
    jax_ffi.register()
    q = jnp.ones((4, robot.nq), jnp.float32)
    qd = jnp.ones((3, robot.nv), jnp.float32)
    attrs = dict(library=str(h._library_file()), symbol="grid_abi_inverse_dynamics_f32_packed", itemsize=4,
                 inputs=np.array([0, 1, -1, -1], np.int64),
                 input_sizes=np.array([robot.nq, robot.nv, robot.nv, 6 * robot.num_bodies], np.int64),
                 output_sizes=np.array([robot.nv], np.int64), params=np.zeros(3), param_sizes=np.array([3], np.int64),
                 launch=np.zeros(4, np.int64))

    def call(result, *xs, **over):
        return jax.ffi.ffi_call(jax_ffi.TARGET, jax.ShapeDtypeStruct(result, jnp.float32))(*xs, **{**attrs, **over})

    with pytest.raises(Exception, match="state inputs of different batch sizes"):
        call((4, robot.nv), q, qd).block_until_ready()
    with pytest.raises(Exception, match="output of the wrong shape"):
        call((5, robot.nv), q, q).block_until_ready()
    with pytest.raises(Exception, match="has no entry grid_abi_nothing"):
        call((4, robot.nv), q, q, symbol="grid_abi_nothing").block_until_ready()
    # and the well-formed call works: gravity zero, qd = q = ones, no qdd pointer (zero acceleration)
    good = call((4, robot.nv), q, q)
    assert_close(np.asarray(good), Reference(robot).inverse_dynamics(np.ones((4, 7)), np.ones((4, 7)),
                                                                     np.zeros((4, 7)), gravity=np.zeros(3)), 1e-4)
