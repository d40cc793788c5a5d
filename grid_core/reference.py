"""``Reference(robot)``: one object whose methods are the algorithms' float64 references.

``Reference(robot).inverse_dynamics(q, qd, qdd)`` finds the registered algorithm
``inverse_dynamics``, validates the inputs against its declared ports (shape,
dtype, finiteness: an :class:`InputError` naming the argument and the expected
shape), and runs its ``reference`` for one state or for each state of a batch
``(N, ...)``.  An algorithm reaches the algorithms it declares in ``depends_on``
through ``ctx`` (``ctx.minv(q)``), and only those.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import numpy as np

from .algorithm import Algorithm, Port
from .errors import GridError, InputError, PluginError
from .model import Robot
from .model.robot import QUATERNION_TOLERANCE


def _shape_text(shape, batched: bool = False) -> str:
    """``(7,)``, or with ``batched`` ``(N, 7)``: shapes as a user writes them."""
    if batched:
        return "(" + ", ".join(["N", *map(str, shape)]) + ")"
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


class PortErrors:
    """The errors of one input of one algorithm, one line each: the texts the Reference and every
    backend raise (grid_core.runtime.plan), whatever kind of array carried the input."""

    def __init__(self, algorithm: str, name: str, shape: tuple[int, ...], batched: bool):
        self.algorithm, self.name, self.shape, self.batched = algorithm, name, shape, batched

    def _error(self, what: str) -> InputError:
        return InputError(f"{self.algorithm}: argument '{self.name}' {what}")

    def required(self) -> InputError:
        return self._error(f"is required, expected shape {_shape_text(self.shape)}")

    def not_an_array(self, exc: Exception) -> InputError:
        return self._error(f"is not an array: {exc}")

    def dtype(self, dtype) -> InputError:
        return self._error(f"has dtype {dtype}, expected a real floating-point array of shape "
                           f"{_shape_text(self.shape)}")

    def shape_of(self, shape: tuple) -> InputError:
        expect = _shape_text(self.shape) + (f" or {_shape_text(self.shape, batched=True)}" if self.batched else "")
        return self._error(f"has shape {tuple(shape)}, expected {expect}")

    def batch(self, n: int, first: str, batch: int) -> InputError:
        return self._error(f"has batch size {n} but '{first}' has {batch}")

    def nonfinite(self) -> InputError:
        return self._error("contains NaN or inf")


def as_float_array(name: str, value, shape: tuple[int, ...], *, algorithm: str, batched: bool):
    """Validate one input; return ``(array float64, batch size or None)``."""
    errors = PortErrors(algorithm, name, shape, batched)
    if value is None:
        raise errors.required()
    try:
        arr = np.asarray(value)
    except Exception as exc:  # ragged lists and the like
        raise errors.not_an_array(exc) from None
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise errors.dtype(arr.dtype)
    arr = arr.astype(np.float64, copy=False)
    if arr.shape == shape:
        n = None
    elif batched and arr.ndim == len(shape) + 1 and arr.shape[1:] == shape:
        n = arr.shape[0]
    else:
        raise errors.shape_of(arr.shape)
    if not np.all(np.isfinite(arr)):
        raise errors.nonfinite()
    return arr, n


class ReferenceContext:
    """What an algorithm's ``reference`` sees: the robot and its declared dependencies."""

    def __init__(self, robot: Robot, algorithm: Algorithm, backend: "Reference"):
        self.robot = robot
        self._algorithm = algorithm
        self._backend = backend

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in self._algorithm.depends_on:
            raise PluginError(
                f"algorithm '{self._algorithm.name}' calls '{name}' without declaring it in depends_on"
            )
        return self._backend._single(name)


class Reference:
    """The float64 numpy reference of every registered algorithm, for one robot."""

    def __init__(self, robot, *, registry=None):
        from .hooks import registry as default_registry
        from .loader import load_robot

        self.robot: Robot = load_robot(robot)
        self._registry = registry or default_registry()

    # -- dispatch ----------------------------------------------------------------

    def _algorithm(self, name: str) -> Algorithm:
        algos = self._registry.algorithms
        if name not in algos:
            raise AttributeError(
                f"{type(self).__name__} has no algorithm '{name}' (registered: {', '.join(algos)})"
            )
        return algos[name]

    def _single(self, name: str) -> Callable:
        """The unvalidated one-state reference of ``name`` (for composition)."""
        alg = self._algorithm(name)
        alg.check_robot(self.robot)
        ctx = ReferenceContext(self.robot, alg, self)
        return lambda *a, **k: alg.reference(ctx, *a, **k)

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        alg = self._algorithm(name)
        return _BoundAlgorithm(self, alg)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._registry.algorithms))

    def __repr__(self) -> str:
        return f"<Reference {self.robot!r}>"


def bind_arguments(name: str, ports, args, kwargs) -> dict:
    """Positional and keyword call arguments by port name (unknown, surplus or repeated
    arguments are refused, naming them); nothing is converted."""
    names = [p.name for p in ports]
    if len(args) > len(ports):
        raise InputError(f"{name}: takes {len(ports)} arguments ({', '.join(names)}), got {len(args)}")
    given = dict(zip(names, args))
    for k, v in kwargs.items():
        if k not in names:
            raise InputError(f"{name}: unexpected argument '{k}' (takes {', '.join(names)})")
        if k in given:
            raise InputError(f"{name}: argument '{k}' given twice")
        given[k] = v
    return given


def bind_inputs(alg: Algorithm, robot: Robot, args, kwargs) -> tuple[dict, int | None]:
    """Bind call arguments to the algorithm's ports, validate, find the batch size."""
    ports: tuple[Port, ...] = alg.inputs(robot)
    given = bind_arguments(alg.name, ports, args, kwargs)
    bound: dict = {}
    batch: int | None = None
    batch_from = None
    for p in ports:
        value = given.get(p.name, p.default)
        if p.kind == "option":  # non-numeric, shared by the batch: the algorithm validates it
            bound[p.name] = value
            continue
        if value is None and p.optional:
            bound[p.name] = None
            continue
        arr, n = as_float_array(p.name, value, p.shape, algorithm=alg.name, batched=p.batched)
        if n is not None:
            if batch is not None and n != batch:
                raise PortErrors(alg.name, p.name, p.shape, p.batched).batch(n, batch_from, batch)
            batch, batch_from = n, p.name
        bound[p.name] = arr
    if batch is not None:
        # a single state among a batch is broadcast over it (every backend does the same)
        for p in ports:
            arr = bound[p.name]
            if p.batched and arr is not None and arr.shape == p.shape:
                bound[p.name] = np.broadcast_to(arr, (batch, *p.shape))
    for p in ports:
        if is_configuration(p, robot) and bound[p.name] is not None:
            check_quaternions(alg.name, p.name, bound[p.name], robot)
    return bound, batch


def is_configuration(port: Port, robot: Robot) -> bool:
    """Whether ``port`` is a configuration q of a robot with a free-flyer (its quaternion checked)."""
    return port.name == "q" and port.kind == "state" and port.shape == (robot.nq,) and \
        bool(robot.quaternion_indices)


def check_quaternions(algorithm: str, name: str, q: np.ndarray, robot: Robot) -> None:
    """Refuse a free-flyer quaternion that is not of unit norm (a zero one gives NaN), naming the
    input, the state and the fix."""
    for i in robot.quaternion_indices:
        norm = np.linalg.norm(q[..., i:i + 4], axis=-1)
        bad = np.flatnonzero(~(np.abs(norm - 1.0) <= QUATERNION_TOLERANCE))
        if bad.size:
            k = int(bad[0])
            at = f"q[{i}:{i + 4}]" if q.ndim == 1 else f"q[{k}, {i}:{i + 4}]"
            value = float(np.ravel(norm)[k])
            raise InputError(
                f"{algorithm}: argument '{name}' holds a free-flyer quaternion {at} (x y z w) of norm {value:.6g}"
                f"{f' ({bad.size} of {q.shape[0]} states)' if q.ndim > 1 else ''}, not a unit quaternion: "
                "normalise it, or start from robot.neutral() or robot.random_configuration(rng)"
            )


def singular_mass_matrix(alg: Algorithm, robot: Robot, cause: str = "") -> GridError:
    """The error for an algorithm that inverts the mass matrix of a robot where it is singular."""
    joints = robot.massless_joints
    if joints:
        shown = ", ".join(joints[:4]) + (f" and {len(joints) - 4} more" if len(joints) > 4 else "")
        why = (f"joints {shown} move bodies with no mass and no inertia (a zero-mass chain), so their rows "
               "of the mass matrix are zero: give those links inertia, or make the joints fixed")
    else:
        why = "it is not invertible at this configuration"
    return GridError(f"{alg.name} on robot '{robot.name}': the mass matrix is singular: {why}"
                     + (f" ({cause})" if cause else ""))


def inverts_mass_matrix(alg: Algorithm, algorithms: dict) -> bool:
    """Whether ``alg`` or an algorithm it composes inverts the mass matrix."""
    return alg.inverts_mass_matrix or any(
        inverts_mass_matrix(algorithms[d], algorithms) for d in alg.depends_on if d in algorithms)


class _BoundAlgorithm:
    def __init__(self, backend: Reference, alg: Algorithm):
        self._backend = backend
        self._alg = alg
        self.__doc__ = alg.summary

    @property
    def __signature__(self):
        params = [
            inspect.Parameter(
                p.name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=p.default if (p.optional or p.default is not None) else inspect.Parameter.empty,
            )
            for p in self._alg.inputs(self._backend.robot)
        ]
        return inspect.Signature(params)

    def __call__(self, *args, **kwargs):
        alg, robot = self._alg, self._backend.robot
        bound, batch = bind_inputs(alg, robot, args, kwargs)
        if robot.massless_joints and inverts_mass_matrix(alg, self._backend._registry.algorithms):
            raise singular_mass_matrix(alg, robot)
        single = self._backend._single(alg.name)
        ports = alg.inputs(robot)
        try:
            if batch is None:
                return single(**bound)
            results = []
            for k in range(batch):
                one = {
                    p.name: (bound[p.name][k] if p.batched and bound[p.name] is not None else bound[p.name])
                    for p in ports
                }
                results.append(single(**one))
        except np.linalg.LinAlgError as exc:
            raise singular_mass_matrix(alg, robot, f"numpy: {exc}") from None
        if isinstance(results[0], tuple):
            return tuple(np.stack(parts) for parts in zip(*results))
        return np.stack(results)
