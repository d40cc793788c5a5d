"""The Algorithm base class every algorithm plugin subclasses.

An algorithm module holds everything about its algorithm (DESIGN §2): the
declarations below, its float64 numpy reference, its arenas and spill rungs,
its parallelism review and its emitters.  A subclass is a declaration, checked
when its plugin registers (:meth:`Algorithm.validate`).

Slots:

``name``
    Identifier; also the method name on ``Reference``, ``Emulated`` and
    ``RobotHandle`` (``inverse_dynamics``, ``crba``, ...).
``summary`` / ``math``
    One line, and an optional reStructuredText statement of the math.
``depends_on``
    Names of the algorithms this one composes.  The reference reaches them only
    through ``ctx`` (``ctx.minv(q)``); the generated code through the composer.
``review``
    The :class:`~grid_core.review.ParallelismReview` (P1-P4).
``inputs(robot)`` / ``outputs(robot, **options)``
    :class:`Port` tuples with shapes derived from the robot's dimensions; the
    inputs are the reference's positional arguments, in order.  An algorithm
    with ``"option"`` inputs receives their values as keywords in ``outputs``
    (its output shapes may depend on them, e.g. the number of chosen frames).
``reference(ctx, *inputs)``
    The float64 numpy math for ONE state; batching, validation and dispatch are
    the framework's.
``arenas(robot, options)`` / ``spill_rungs(robot, options)``
    Shared-memory regions and the menu of spill rungs (code generation).
``emitter``
    The object producing the generated layers; ``None`` until the algorithm has
    a GPU implementation (``grid review`` then says "not yet emitted").
``derivatives``
    Its first derivatives, a :class:`~grid_core.derivatives.Rule` (its
    differentiable inputs, the kernels its Jacobians call, the chain-rule wiring),
    or ``None``: what makes it differentiable under PyTorch autograd and JAX.
"""

from __future__ import annotations

import inspect
import keyword
from typing import Any, ClassVar

import attrs

from .errors import PluginError, UnsupportedFeatureError
from .model import Robot
from .review import ParallelismReview


@attrs.frozen
class Port:
    """One input or output of an algorithm, for one state.

    ``kind`` is ``"state"`` (batched along a leading axis), ``"param"`` (a numeric
    array shared by the whole batch, such as gravity) or ``"option"`` (a
    non-numeric setting shared by the whole batch, such as frame names: handed
    to the reference as given, the algorithm validates it; ``shape`` is unused).
    ``optional`` inputs may be ``None``.
    """

    name: str
    shape: tuple[int, ...]
    doc: str = ""
    kind: str = "state"
    optional: bool = False
    default: Any = None
    choices: tuple = ()
    """An option port's accepted values, where it lists them (checked where the generated code fixes
    the port's value and before a call with another value builds its library)."""

    @property
    def batched(self) -> bool:
        return self.kind == "state"


DEFAULT_GRAVITY = (0.0, 0.0, -9.81)

_THIRD = {"qdd": "joint acceleration", "tau": "joint forces"}


def f_ext_port(robot: Robot) -> Port:
    """The optional external forces: one spatial force per body, body frame, ``[force; moment]``."""
    return Port("f_ext", (robot.num_bodies, 6), "external force per body, body frame, [force; moment]",
                optional=True)


def gravity_port() -> Port:
    return Port("gravity", (3,), "gravity vector in the world frame", kind="param", default=DEFAULT_GRAVITY)


def dynamics_inputs(robot: Robot, third: str) -> tuple[Port, ...]:
    """``(q, qd, qdd | tau, f_ext, gravity)``: the inputs the dynamics algorithms share.

    ``third`` is ``"qdd"`` (the inverse-dynamics family) or ``"tau"`` (forward dynamics)."""
    return (
        Port("q", (robot.nq,), "joint configuration"),
        Port("qd", (robot.nv,), "joint velocity"),
        Port(third, (robot.nv,), _THIRD[third]),
        f_ext_port(robot),
        gravity_port(),
    )


INTEGRATION_METHODS = ("semi_implicit_euler", "explicit_euler", "rk4")
"""The time-stepping schemes of the integration family (``method``)."""
RK4_STAGES = (0.5, 0.5, 1.0)
"""Where RK4's stages 2, 3 and 4 sit, as fractions of the step (the integration family's scheme)."""
RK4_WEIGHTS = (2, 2, 1)
"""Their weights in the step's sums (the first stage's is 1)."""


def integration_inputs(robot: Robot) -> tuple[Port, ...]:
    """``(q, qd, tau, dt, method, f_ext, gravity)``: the inputs of one time step of the equations
    of motion and of its derivatives (the integration family)."""
    return (
        Port("q", (robot.nq,), "joint configuration"),
        Port("qd", (robot.nv,), "joint velocity"),
        Port("tau", (robot.nv,), "joint forces"),
        Port("dt", (), "time step (s), shared by the batch", kind="param"),
        Port("method", (), f"integration scheme: {' or '.join(INTEGRATION_METHODS)}", kind="option",
             default="semi_implicit_euler", choices=INTEGRATION_METHODS),
        f_ext_port(robot),
        gravity_port(),
    )


def check_choice(value, choices: tuple, algorithm: str, name: str):
    """``value`` if ``choices`` is empty or lists it, else the :class:`InputError` naming them."""
    from .errors import InputError

    if choices and value not in choices:
        raise InputError(f"{algorithm}: argument '{name}' must be one of {', '.join(choices)}, got {value!r}")
    return value


def check_integration_method(method, algorithm: str) -> str:
    """``method`` if it is one of :data:`INTEGRATION_METHODS`, else the :class:`InputError` naming them."""
    return check_choice(method, INTEGRATION_METHODS, algorithm, "method")


def frame_inputs(robot: Robot, *, velocity: bool = False) -> tuple[Port, ...]:
    """``(q, frames)``: the inputs of the end-effector family (pose, gradient, Hessian); ``(q, qd,
    frames)`` with ``velocity`` (the Jacobian's time variation)."""
    return (
        Port("q", (robot.nq,), "joint configuration"),
        *((Port("qd", (robot.nv,), "joint velocity"),) if velocity else ()),
        Port("frames", (), "frame names (default: the leaf frames, e.g. the feet)", kind="option"),
    )


def generation_values(alg, robot: Robot, options) -> dict:
    """``{port: value}`` of ``alg``'s ``"option"`` ports as its generated code fixes them: taken
    from the header's :class:`~grid_core.composer.GenerateOptions` ``options`` when the code is
    generated, not kernel arguments.  ``frames`` (shared by the end-effector family) from
    ``options.frames``, resolved to :class:`~grid_core.model.Frame` objects (an unknown name the
    :class:`InputError` of :func:`~grid_core.model.frames.resolve_frames`); any other option port
    from the algorithm option of its name (``algorithm_options={alg: {port: value}}``), else the
    port's default (a value not among the port's ``choices`` is refused, an :class:`InputError`, as
    ``alg.outputs`` refuses a bad one; a port with no default and no value is a
    :class:`~grid_core.errors.CodegenError`).  What ``alg.outputs(robot, **values)`` sizes the
    generated outputs by."""
    from .errors import CodegenError, InputError
    from .model.frames import resolve_frames

    values = {}
    given = options.options_of(alg.name) if options is not None else {}
    for p in alg.inputs(robot):
        if p.kind != "option":
            continue
        if p.name != "frames":
            if p.name not in given and p.default is None:
                raise CodegenError(f"{alg.name}: option port '{p.name}' has no value to fix at generation time "
                                   f"(algorithm_options={{'{alg.name}': {{'{p.name}': ...}}}})")
            values[p.name] = check_choice(given.get(p.name, p.default), p.choices, alg.name, p.name)
            continue
        frames = resolve_frames(robot, getattr(options, "frames", None), alg.name)
        if not frames:
            raise InputError(f"{alg.name}: argument 'frames': choose at least one frame")
        values["frames"] = frames
    return values


def option_ports(alg, robot: Robot) -> tuple[str, ...]:
    """The names of ``alg``'s ``"option"`` ports: fixed at generation time (:func:`generation_values`),
    so an algorithm option of one of these names is a value of the port, not an emitter knob."""
    return tuple(p.name for p in alg.inputs(robot) if p.kind == "option")


BACKENDS = ("Reference", "Emulated", "CpuHandle", "RobotHandle")
"""Where an algorithm can run: the float64 numpy reference, and the generated code host-emulated,
on the CPU and on the GPU."""


def backend_table(algorithms: dict) -> tuple[list[str], list[list[str]]]:
    """``(header, rows)``: for each algorithm, ``yes`` or ``no`` under each backend.  Every
    algorithm has a reference; the generated-code backends run those with an emitter
    (:meth:`Algorithm.has_emitter`).  ``grid list`` and the documentation's home page show it."""
    rows = [[name, *("yes" if b == "Reference" or alg.has_emitter() else "no" for b in BACKENDS)]
            for name, alg in algorithms.items()]
    return ["algorithm", *BACKENDS], rows


class Algorithm:
    """Base class of every algorithm (see the module docstring for the slots)."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    math: ClassVar[str] = ""
    depends_on: ClassVar[tuple[str, ...]] = ()
    review: ClassVar[ParallelismReview | None] = None
    emitter: ClassVar[Any] = None
    supports_mimic: ClassVar[bool] = True
    """Whether the reference handles mimic joints (Pinocchio's mimic model)."""
    inverts_mass_matrix: ClassVar[bool] = False
    """Whether it inverts the mass matrix (minv, aba): on a robot where that is singular, every
    backend raises a GridError naming the robot, the algorithm and the cause (an algorithm
    composing one inherits it through ``depends_on``)."""
    derivatives: ClassVar[Any] = None
    """Its first derivatives (:class:`~grid_core.derivatives.Rule`), or None: not differentiable."""

    # -- declarations ------------------------------------------------------------

    def inputs(self, robot: Robot) -> tuple[Port, ...]:
        raise NotImplementedError

    def outputs(self, robot: Robot, **options) -> tuple[Port, ...]:
        raise NotImplementedError

    def reference(self, ctx, *args, **kwargs):
        """Float64 numpy math for one state; ``ctx.robot`` is the robot."""
        raise NotImplementedError

    def check_robot(self, robot: Robot) -> None:
        """Raise :class:`UnsupportedFeatureError` if this algorithm cannot handle ``robot``."""
        if robot.has_mimic and not self.supports_mimic:
            raise UnsupportedFeatureError(
                f"{self.name}: robot '{robot.name}' has mimic joints "
                f"({', '.join(robot.mimic_joint_names)}), which {self.name} does not support yet"
            )

    # -- code generation (filled by the code-generation issue) -----------------------

    def arenas(self, robot: Robot, options) -> tuple:
        return ()

    def spill_rungs(self, robot: Robot, options) -> tuple:
        return ()

    @classmethod
    def has_emitter(cls) -> bool:
        return cls.emitter is not None

    # -- registration ------------------------------------------------------------

    @classmethod
    def validate(cls, plugin: str) -> None:
        """Check the declaration; raise :class:`PluginError` naming plugin and class.

        ``plugin`` describes the registering plugin (name, distribution, version).
        """
        where = f"{plugin}, algorithm class {cls.__module__}.{cls.__qualname__}"
        if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
            raise PluginError(f"{where}: not a subclass of grid_core.algorithm.Algorithm")
        if not isinstance(cls.name, str) or not cls.name.isidentifier() or keyword.iskeyword(cls.name):
            raise PluginError(f"{where}: 'name' must be a Python identifier, got {cls.name!r}")
        if cls.name.startswith("_"):
            raise PluginError(f"{where}: 'name' must not start with an underscore")
        if not isinstance(cls.summary, str) or not cls.summary.strip():
            raise PluginError(f"{where}: 'summary' is missing")
        if not isinstance(cls.review, ParallelismReview):
            raise PluginError(f"{where}: 'review' must be a ParallelismReview covering P1-P4")
        for meth in ("inputs", "outputs", "reference"):
            if getattr(cls, meth) is getattr(Algorithm, meth):
                raise PluginError(f"{where}: '{meth}' is not implemented")
        if not isinstance(cls.depends_on, tuple) or not all(isinstance(d, str) for d in cls.depends_on):
            raise PluginError(f"{where}: 'depends_on' must be a tuple of algorithm names")
        if cls.name in cls.depends_on:
            raise PluginError(f"{where}: depends on itself")
        params = list(inspect.signature(cls.reference).parameters)
        if len(params) < 2 or params[:2] != ["self", "ctx"]:
            raise PluginError(f"{where}: 'reference' must be reference(self, ctx, ...)")
        if cls.derivatives is not None:
            from .derivatives import Rule

            if not isinstance(cls.derivatives, Rule):
                raise PluginError(f"{where}: 'derivatives' must be a grid_core.derivatives.Rule or None, "
                                  f"got {cls.derivatives!r}")
            inputs = cls.derivatives.inputs
            if inputs[:1] != ("q",) or len(set(inputs)) != len(inputs):
                raise PluginError(f"{where}: 'derivatives' inputs must be q first, each once, "
                                  f"got {cls.derivatives.inputs!r}")
        if cls.emitter is not None:
            validate_emitter = getattr(cls.emitter, "validate", None)
            if validate_emitter is not None:
                validate_emitter(cls, where)

    def __repr__(self) -> str:
        return f"<Algorithm {self.name}>"
