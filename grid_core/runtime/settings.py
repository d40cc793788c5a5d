"""Launch settings of a backend: the layout, tier, threads and blocks of a launch and the host
path's ``transfer``, for every algorithm or per algorithm, as the C ABI takes them."""

from __future__ import annotations

from ..abi import TRANSFERS

LAYOUTS = {"auto": 0, "block": 1, "per_state": 2}
SETTINGS = ("layout", "tier", "threads", "blocks", "transfer")


def check_settings(settings: dict) -> None:
    for k in settings:
        if k not in SETTINGS:
            raise TypeError(f"unknown launch setting '{k}' (settings: {', '.join(SETTINGS)})")
    if "layout" in settings and settings["layout"] not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}")
    if "transfer" in settings and settings["transfer"] not in TRANSFERS:
        raise ValueError(f"transfer must be one of {', '.join(TRANSFERS)}")


class LaunchSettings:
    """The settings part of a backend.  Everything derived from them (the call plans, the
    bound methods) is dropped when they change, by :meth:`_forget_plans`."""

    def _init_settings(self, layout, tier, threads, blocks, transfer) -> None:
        check_settings({"layout": layout, "transfer": transfer})
        self.layout, self.tier, self.threads, self.blocks = layout, int(tier), int(threads), int(blocks)
        self.transfer = transfer

    def _forget_plans(self) -> None:
        """Drop everything derived from the launch settings (and the bound methods using it)."""
        for name in self.__dict__.pop("_methods", {}):
            self.__dict__.pop(name, None)
        self.__dict__.pop("_launch_cache", None)
        self.__dict__.pop("_plans", None)
        self.__dict__.pop("_option_views", None)  # the builds for other option values under these settings

    def _copy(self, *derived: str):
        """The same build, without what was derived from its settings (and ``derived``)."""
        other = type(self).__new__(type(self))
        other.__dict__.update(self.__dict__)
        other._forget_plans()
        for name in derived:
            other.__dict__.pop(name, None)
        return other

    def with_launch(self, **kw):
        """The same build with another launch configuration (layout, tier, threads, blocks,
        transfer)."""
        check_settings(kw)
        other = self._copy("_per_algorithm")
        for k, v in kw.items():
            setattr(other, k, v)
        return other

    def configure(self, algorithm: str | None = None, **launch) -> None:
        """Set the launch (layout, tier, threads, blocks) and the host path's ``transfer``
        (``auto``, ``copy``: the copy engine, ``mapped``: mapped pinned memory) of one
        algorithm, or the default."""
        check_settings(launch)
        if algorithm is None:
            for k, v in launch.items():
                setattr(self, k, v)
        else:
            self.__dict__.setdefault("_per_algorithm", {}).setdefault(algorithm, {}).update(launch)
        self._forget_plans()

    def _settings_of(self, name: str) -> tuple[int, int, int, int, int]:
        """(layout, tier, threads, blocks, transfer) of one algorithm, as the C ABI takes them."""
        key = (name, self.layout, self.tier, self.threads, self.blocks, self.transfer)
        cache = self.__dict__.setdefault("_launch_cache", {})
        if key not in cache:
            cfg = {k: getattr(self, k) for k in SETTINGS}
            cfg.update(self.__dict__.get("_per_algorithm", {}).get(name, {}))
            cache[key] = (LAYOUTS[cfg["layout"]], int(cfg["tier"]), int(cfg["threads"]), int(cfg["blocks"]),
                          TRANSFERS[cfg["transfer"]])
        return cache[key]

    def _launch_of(self, name: str) -> tuple[int, int, int, int]:
        return self._settings_of(name)[:4]
