"""The ``grid`` command line: wires registry, composer and printer together.

Errors follow DESIGN §6: a :class:`GridError` prints one line (no traceback)
and exits 1; usage errors exit 2 (click's own).  Quiet by default; ``-v`` adds
detail (and the full text of multi-line errors such as compiler logs).
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import textwrap
import time
import warnings
from pathlib import Path

import click

from . import __version__
from .errors import GridError, GridWarning


class _Ctx:
    def __init__(self, verbose: int, blocked: tuple[str, ...], quiet: bool = False):
        self.verbose = verbose
        self.blocked = blocked
        self.quiet = quiet

    def status(self, text: str) -> None:
        """One status line on stderr (none with -q)."""
        if not self.quiet:
            click.echo(text, err=True)

    def registry(self):
        from .hooks import registry

        return registry(self.blocked)


def _one_line(text: str) -> str:
    return " | ".join(part.strip() for part in str(text).strip().splitlines() if part.strip())


class GridGroup(click.Group):
    """Turns GridErrors and warnings into one-line messages."""

    def invoke(self, ctx):
        verbose = ctx.params.get("verbose", 0)

        def show_warning(message, category, filename, lineno, file=None, line=None):
            # the first line; the rest (a summary's list) with -v
            first, *rest = [part.strip() for part in str(message).strip().splitlines() if part.strip()] or [""]
            click.echo(f"grid: warning: {first}" + (" (-v lists them)" if rest and not verbose else ""), err=True)
            for part in rest if verbose else ():
                click.echo(f"grid: warning:   {part}", err=True)

        old = warnings.showwarning
        warnings.showwarning = show_warning
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore" if ctx.params.get("quiet") else "always")
                return super().invoke(ctx)
        except GridError as exc:
            text = str(exc)
            first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
            if verbose and "\n" in text.strip():
                click.echo(f"grid: error: {text}", err=True)
            else:
                more = " (-v for details)" if "\n" in text.strip() else ""
                click.echo(f"grid: error: {first}{more}", err=True)
            ctx.exit(1)
        finally:
            warnings.showwarning = old


@click.group(cls=GridGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="grid")
@click.option("-v", "--verbose", count=True, help="More detail (repeat for more).")
@click.option("-q", "--quiet", is_flag=True, help="No warnings and no status lines.")
@click.option(
    "--disable-plugin",
    "blocked",
    multiple=True,
    metavar="NAME",
    help="Do not load the plugin NAME (repeatable; also GRID_DISABLE_PLUGINS=a,b).",
)
@click.pass_context
def main(ctx, verbose: int, quiet: bool, blocked: tuple[str, ...]):
    """GRiD: robot description in, robot-specialised CUDA rigid-body dynamics out."""
    ctx.obj = _Ctx(verbose, blocked, quiet)
    if blocked:
        from .hooks import GROUP

        known = sorted({ep.name for ep in importlib.metadata.entry_points(group=GROUP)})
        for name in blocked:
            if name not in known:
                warnings.warn(GridWarning(f"--disable-plugin {name}: no plugin of that name is installed "
                                          f"(plugins: {', '.join(known)})"))
        # Every registry this command reaches (robot loading, the composer, the reference)
        # must honour the block, not only `grid list`: pass it on as GRID_DISABLE_PLUGINS.
        from .hooks import DISABLE_ENV

        previous = os.environ.get(DISABLE_ENV)
        os.environ[DISABLE_ENV] = ",".join(filter(None, [previous, *blocked]))

        def restore():
            if previous is None:
                os.environ.pop(DISABLE_ENV, None)
            else:
                os.environ[DISABLE_ENV] = previous

        ctx.call_on_close(restore)


def _robot_options(f):
    """``--floating-base`` / ``--fixed-base`` (given together: a usage error), ``--strict-inertia``
    and ``--strict``; the command receives ``floating_base`` (None: the natural base)."""

    @functools.wraps(f)
    def command(*args, floating, fixed, **kwargs):
        if floating and fixed:
            raise click.UsageError("--floating-base and --fixed-base contradict each other: give one of them")
        return f(*args, floating_base=True if floating else False if fixed else None, **kwargs)

    command = click.option(
        "--strict", is_flag=True,
        help="Treat every warning about the robot (unknown URDF elements, doubtful inertias) as an error.",
    )(command)
    command = click.option(
        "--strict-inertia", is_flag=True, help="Treat doubtful inertias (triangle inequality, zero mass) as errors."
    )(command)
    command = click.option("--fixed-base", "fixed", is_flag=True, help="Fix the base.")(command)
    command = click.option(
        "--floating-base", "floating", is_flag=True,
        help="Add a free-flyer root (default: the robot's natural base).",
    )(command)
    return command


def _load(source: str, floating_base, strict_inertia: bool, strict: bool = False):
    """The robot, its warnings said as one summary line (the list follows it, shown with -v)."""
    from .loader import load_robot

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        robot = load_robot(source, floating_base=floating_base, strict_inertia=strict_inertia, strict=strict)
    summary = summarise_warnings(source, caught)
    if summary is not None:
        warnings.warn(summary, stacklevel=2)
    return robot


def summarise_warnings(source: str, caught) -> Warning | None:
    """One warning for those ``caught`` while loading ``source``: the one itself, or a
    summary (count, and per topic the first links or joints) followed by every warning,
    one a line."""
    if len(caught) <= 1:
        return caught[0].message if caught else None
    topics: dict[str, list[str]] = {}
    for w in caught:
        topics.setdefault(getattr(w.message, "topic", "") or "other", []).append(getattr(w.message, "subject", ""))
    parts = []
    for topic, subjects in topics.items():
        named = [x for x in subjects if x]
        shown = f" ({', '.join(named[:3])}{', ...' if len(named) > 3 else ''})" if named else ""
        parts.append(f"{topic}: {len(subjects)}{shown}")
    lines = [f"{source}: {len(caught)} warnings: {'; '.join(parts)}"] + [str(w.message) for w in caught]
    categories = {w.category for w in caught}
    category = categories.pop() if len(categories) == 1 else GridWarning
    return (category if issubclass(category, GridWarning) else GridWarning)("\n".join(lines))


@main.command()
@click.argument("source")
@click.option("-a", "--algorithm", "algorithms", multiple=True, metavar="ALGO",
              help="Algorithm to emit (repeatable; default: every registered one that emits, but those "
                   "left out of the default set, such as idsva_so).")
@click.option("--namespace", default="grid", show_default=True, help="C++ namespace of the header.")
@click.option("--frame", "frames", multiple=True, metavar="NAME",
              help="Frame of the end-effector algorithms, in output order (repeatable; a link, joint or fixed "
                   "joint name; default: the robot's leaf frames, which `grid info` marks).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write the header here (default: standard output).")
@_robot_options
@click.pass_obj
def build(obj: _Ctx, source, algorithms, namespace, frames, output, floating_base, strict_inertia, strict):
    """Generate the CUDA header for SOURCE (a bundled name, a URDF path, or LOADER:NAME)."""
    from .composer import generate

    t0 = time.perf_counter()
    robot = _load(source, floating_base, strict_inertia, strict)
    text = generate(robot, list(algorithms) or None, namespace=namespace, frames=frames or None)
    dt = time.perf_counter() - t0
    if output is None:
        click.echo(text, nl=False)
        obj.status(f"grid: generated {robot.name} in {dt:.2f} s")
        return
    path = Path(output)
    try:
        path.write_text(text)
    except OSError as exc:
        raise GridError(f"cannot write {path}: {exc.strerror}") from None
    obj.status(f"grid: wrote {path} ({len(text.encode()) / 1024:.1f} kB, robot {robot.name}) in {dt:.2f} s")


@main.command("list")
@click.pass_obj
def list_(obj: _Ctx):
    """List the registered algorithms and robot loaders, with where each came from."""
    reg = obj.registry()
    click.echo("algorithms:")
    for name, alg in reg.algorithms.items():
        info = reg.info_of("algorithm", name)
        emitted = "" if alg.has_emitter() else "  [reference only]"
        click.echo(f"  {name:<32} {info.distribution} {info.version}  {alg.summary}{emitted}")
    click.echo("robot loaders:")
    for name, loader in reg.loaders.items():
        info = reg.info_of("loader", name)
        click.echo(f"  {name:<32} {info.distribution} {info.version}  {loader.summary}")
    from .algorithm import backend_table

    header, rows = backend_table(reg.algorithms)
    click.echo("where each algorithm runs (Reference: float64 numpy; Emulated: the generated code on the host; "
               "CpuHandle: on the CPU; RobotHandle: on the GPU):")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        click.echo("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    if obj.verbose:
        click.echo("plugins:")
        for p in reg.plugins.values():
            click.echo(f"  {p.name:<32} {p.distribution} {p.version}  ({p.module})")
        if reg.blocked:
            click.echo(f"blocked: {', '.join(sorted(reg.blocked))}")


@main.command()
@click.argument("source")
@_robot_options
@click.pass_obj
def info(obj: _Ctx, source, floating_base, strict_inertia, strict):
    """Describe a robot: dofs, joint order, depth, bodies per BFS level, branch groups, its frames."""
    robot = _load(source, floating_base, strict_inertia, strict)
    topo = robot.topology
    click.echo(f"robot: {robot.name}  ({robot.source})")
    click.echo(f"base: {'floating (free-flyer root_joint)' if robot.floating_base else 'fixed'}")
    click.echo(f"nq: {robot.nq}  nv: {robot.nv}  bodies: {robot.num_bodies}")
    click.echo(f"depth: {topo.num_levels} levels; bodies per BFS level: {list(topo.level_widths)}")
    click.echo(f"branch groups ({len(topo.branches)}):")
    for g, chain in enumerate(topo.branches):
        click.echo(f"  {g}: " + " -> ".join(robot.bodies[i].joint.name for i in chain))
    click.echo("joints (q order):")
    for b in robot.bodies:
        if b.mimic is not None:
            tgt = robot.bodies[b.mimic.body].joint.name
            coord = f"mimics {tgt} (x{b.mimic.multiplier:g} {b.mimic.offset:+g})"
        else:
            coord = f"q[{b.q_index}:{b.q_index + b.nq}] v[{b.v_index}:{b.v_index + b.nv}]"
        parent = robot.bodies[b.parent].joint.name if b.parent >= 0 else "world"
        click.echo(f"  {b.index:3d} {b.joint.name:<28} {b.jtype.value:<10} {coord:<28} parent {parent}")
        if obj.verbose and len(b.links) > 1:
            click.echo(f"      merged links: {', '.join(b.links)}")
    _echo_frames(robot)


FRAME_KINDS = {"joint": "joint", "link": "link", "fixed_joint": "fixed joint"}


def _echo_frames(robot) -> None:
    """The default frames on one line, then every frame on one line each (index, name, kind, the body
    it rides on; ``*`` marks a default one): aligned columns, readable at pr2's 163 frames."""
    from .model.frames import default_frames

    names = default_frames(robot)
    head = f"default frames ({len(names)}, the leaf frames, used without 'frames'): "
    click.echo(textwrap.fill(head + ", ".join(names), width=100, subsequent_indent="  ", break_long_words=False,
                             break_on_hyphens=False))
    counts = {kind: sum(f.kind == kind for f in robot.frames) for kind in FRAME_KINDS}
    kinds = ", ".join(f"{n} {FRAME_KINDS[k]}{'s' if n != 1 else ''}" for k, n in counts.items())
    click.echo(f"frames ({len(robot.frames)}: {kinds}; * a default one), each with the body it rides on:")
    leaves = {id(f) for f in robot.leaf_frames()}
    width = max(len(f.name) for f in robot.frames)
    for k, f in enumerate(robot.frames):
        body = robot.bodies[f.body].name if f.body >= 0 else "world"
        mark = "*" if id(f) in leaves else " "
        click.echo(f"  {k:3d} {mark} {f.name:<{width}} {FRAME_KINDS[f.kind]:<11} on {body}")


@main.command()
@click.pass_obj
def robots(obj: _Ctx):
    """List the robot names the loaders know (bundled, and erd: when example-robot-data is
    installed) with nq, nv, the natural base and the mimic joints."""
    reg = obj.registry()
    for loader in reg.loaders.values():
        names = loader.names()
        if not names:
            continue
        info = reg.info_of("loader", loader.name)
        click.echo(f"{loader.name} ({info.distribution} {info.version}): {loader.summary}")
        click.echo(f"  {'NAME':<36} {'nq':>4} {'nv':>4}  {'base':<9} mimic joints")
        for name in names:
            source = name if loader.claims(name) else f"{loader.name}:{name}"
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    robot = _load(source, None, False)
            except GridError as exc:
                why = _one_line(exc).split(".urdf: ", 1)[-1]  # the file's path is long: what is wrong
                click.echo(f"  {source:<36} does not load: {why}")
                continue
            base = "floating" if robot.floating_base else "fixed"
            mimic = ", ".join(robot.mimic_joint_names) or "-"
            click.echo(f"  {source:<36} {robot.nq:>4} {robot.nv:>4}  {base:<9} {mimic}")
        short = getattr(loader, "aliases", None)
        if short:
            click.echo("  short names: " + ", ".join(f"{loader.name}:{k} ({v})" for k, v in short().items()))
    click.echo("Any robot loads with a free-flyer root under --floating-base (Python: floating_base=True).")


@main.command()
@click.argument("algorithm")
@click.pass_obj
def review(obj: _Ctx, algorithm):
    """Print ALGORITHM's parallelism review (patterns P1-P4, with reasons)."""
    reg = obj.registry()
    alg = reg.algorithm(algorithm)
    info = reg.info_of("algorithm", algorithm)
    click.echo(f"{alg.name} ({info.distribution} {info.version}): {alg.summary}")
    layouts = alg.emitter.layouts(alg.name) if alg.has_emitter() else ""
    click.echo(alg.review.render(emitted=alg.has_emitter(), layouts=layouts))
    if alg.has_emitter():
        from .resources import render_measurements

        click.echo(render_measurements(alg))


if __name__ == "__main__":  # pragma: no cover
    main()
