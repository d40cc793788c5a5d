"""The plugin manager and the registry built from it.

Plugins are loaded from the entry-point group ``grid`` (built-ins included, no
privilege).  Each entry point's name is the plugin's name; blocking a name
(``GRID_DISABLE_PLUGINS=a,b`` or ``grid --disable-plugin a``) skips it before
it is imported.  Whatever a plugin gets wrong (an import that fails, a hook
implemented with the wrong signature, a malformed algorithm or loader class, a
name already taken) is a :class:`PluginError` naming the plugin and its
distribution.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
from collections.abc import Iterable

import attrs
import pluggy

from . import hookspecs
from .algorithm import Algorithm
from .errors import PluginError
from .loader import RobotLoader

GROUP = "grid"
DISABLE_ENV = "GRID_DISABLE_PLUGINS"


@attrs.frozen
class PluginInfo:
    name: str
    distribution: str
    version: str
    module: str


@attrs.frozen
class Registry:
    """Everything the installed plugins registered."""

    plugins: dict[str, PluginInfo]
    algorithms: dict[str, Algorithm]
    loaders: dict[str, RobotLoader]
    origin: dict[str, str]
    """``origin["algorithm:NAME"]`` / ``origin["loader:NAME"]``: the plugin that registered it."""
    blocked: frozenset[str]

    def info_of(self, kind: str, name: str) -> PluginInfo:
        return self.plugins[self.origin[f"{kind}:{name}"]]

    def algorithm(self, name: str) -> Algorithm:
        try:
            return self.algorithms[name]
        except KeyError:
            known = ", ".join(sorted(self.algorithms)) or "none"
            raise PluginError(f"no algorithm named '{name}' (registered: {known})") from None


def blocked_from_env() -> frozenset[str]:
    raw = os.environ.get(DISABLE_ENV, "")
    return frozenset(x.strip() for x in raw.split(",") if x.strip())


def _entry_points() -> list[importlib.metadata.EntryPoint]:
    eps = importlib.metadata.entry_points(group=GROUP)
    # one entry per name: a duplicate name in two distributions is an error below
    return sorted(eps, key=lambda ep: (ep.name, ep.value))


def _dist_of(ep) -> tuple[str, str]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "<unknown>", "?"
    return dist.metadata["Name"], dist.version


def build_registry(blocked: Iterable[str] = (), extra_plugins: Iterable[tuple[str, object]] = ()) -> Registry:
    """Load every entry point of group ``grid`` (except ``blocked``) and collect.

    ``extra_plugins`` are ``(name, module_or_object)`` pairs registered as if
    they came from entry points (for tests and embedding).
    """
    blocked = frozenset(blocked) | blocked_from_env()
    pm = pluggy.PluginManager(GROUP)
    pm.add_hookspecs(hookspecs)
    plugins: dict[str, PluginInfo] = {}

    def register(name: str, obj, dist: str, version: str) -> None:
        if name in plugins:
            prev = plugins[name]
            raise PluginError(
                f"plugin '{name}' is provided twice: by {prev.distribution} {prev.version} "
                f"and by {dist} {version}"
            )
        try:
            pm.register(obj, name=name)
        except pluggy.PluginValidationError as exc:
            raise PluginError(f"plugin '{name}' ({dist} {version}) is malformed: {exc}") from None
        plugins[name] = PluginInfo(name, dist, version, getattr(obj, "__name__", type(obj).__name__))

    for ep in _entry_points():
        if ep.name in blocked:
            continue
        dist, version = _dist_of(ep)
        try:
            obj = ep.load()
        except Exception as exc:  # a third-party import can fail any way at all
            raise PluginError(
                f"plugin '{ep.name}' ({dist} {version}, {ep.value}) failed to import: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        register(ep.name, obj, dist, version)
    for name, obj in extra_plugins:
        if name not in blocked:
            register(name, obj, "<extra>", "")
    try:
        pm.check_pending()  # a @hookimpl that no hookspec declares: a misspelt hook name
    except pluggy.PluginValidationError as exc:
        info = plugins[pm.get_name(exc.plugin)]
        raise PluginError(
            f"plugin '{info.name}' ({info.distribution} {info.version}) is malformed: {exc}"
        ) from None

    algorithms: dict[str, Algorithm] = {}
    loaders: dict[str, RobotLoader] = {}
    origin: dict[str, str] = {}

    def collect(hook_name: str, base: type, kind: str, into: dict) -> None:
        hook = getattr(pm.hook, hook_name)
        for impl in hook.get_hookimpls():
            pname = pm.get_name(impl.plugin)
            info = plugins[pname]
            where = f"plugin '{pname}' ({info.distribution} {info.version})"
            try:
                result = impl.function()
            except Exception as exc:
                raise PluginError(f"{where}: {hook_name}() raised {type(exc).__name__}: {exc}") from exc
            if not isinstance(result, (list, tuple)):
                raise PluginError(f"{where}: {hook_name}() must return a list of classes, got {result!r}")
            for cls in result:
                if not (isinstance(cls, type) and issubclass(cls, base)):
                    raise PluginError(
                        f"{where}: {hook_name}() returned {cls!r}, not a subclass of "
                        f"{base.__module__}.{base.__qualname__}"
                    )
                if kind == "algorithm":
                    cls.validate(where)
                elif not (isinstance(cls.name, str) and cls.name.isidentifier()):
                    raise PluginError(f"{where}: loader {cls.__qualname__} needs an identifier 'name'")
                if cls.name in into:
                    other = plugins[origin[f"{kind}:{cls.name}"]]
                    raise PluginError(
                        f"{where}: {kind} '{cls.name}' ({cls.__module__}.{cls.__qualname__}) is "
                        f"already registered by plugin '{other.name}' ({other.distribution})"
                    )
                try:
                    into[cls.name] = cls()
                except Exception as exc:
                    raise PluginError(f"{where}: cannot instantiate {cls.__qualname__}: {exc}") from exc
                origin[f"{kind}:{cls.name}"] = pname

    # pluggy calls the most recently registered first; keep registration order instead
    collect("grid_register_algorithms", Algorithm, "algorithm", algorithms)
    collect("grid_register_robot_loaders", RobotLoader, "loader", loaders)
    algorithms = dict(sorted(algorithms.items()))
    loaders = _order_loaders(loaders)
    for alg in algorithms.values():
        missing = [d for d in alg.depends_on if d not in algorithms]
        if missing:
            info = plugins[origin[f"algorithm:{alg.name}"]]
            raise PluginError(
                f"plugin '{info.name}' ({info.distribution}): algorithm '{alg.name}' depends on "
                f"{', '.join(repr(m) for m in missing)}, which no plugin registers"
                + (" (blocked?)" if blocked else "")
            )
    return Registry(plugins, algorithms, loaders, origin, blocked)


def _order_loaders(loaders: dict[str, RobotLoader]) -> dict[str, RobotLoader]:
    """Unprefixed sources are offered to loaders in a fixed order: files first, then
    bundled names, then everything else by name (so resolution never depends on
    installation order)."""
    first = [n for n in ("urdf", "bundled") if n in loaders]
    rest = sorted(n for n in loaders if n not in first)
    return {n: loaders[n] for n in first + rest}


@functools.lru_cache(maxsize=8)
def _cached_registry(blocked: frozenset[str]) -> Registry:
    return build_registry(blocked)


def registry(blocked: Iterable[str] = ()) -> Registry:
    """The registry of the installed plugins (cached per blocked set and environment)."""
    return _cached_registry(frozenset(blocked) | blocked_from_env())


def clear_cache() -> None:
    _cached_registry.cache_clear()


def algorithms() -> dict[str, Algorithm]:
    """Every registered algorithm, built-in and third-party, keyed by name."""
    return dict(registry().algorithms)
