"""Which host files a run served to another machine may name (`specviz serve`).

A client of `specviz serve` holds the token but not the host: the files its run spec names are
the host's. Models (the target and the draft models) may be named anywhere: they are read as
models only, and a file that is not one is refused with a line that names it, never with its
contents. Every other file a lane names (its inputs whose kind the oracle registry declares a
file: corpora read as text, a suffix memory written and renamed, heads folders) must lie
under a folder the host allows: specviz's own home (its
cache and data folders) and the folders given to `specviz serve --allow DIR`. The check
resolves symbolic links and `..` first, and the spec goes on to the engine with the resolved
paths, so the engine opens exactly what was checked.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from ..oracles.registry import INPUTS, Input
from . import run_spec as rs


class OutsideAllowed(ValueError):
    """A path in a spec outside the folders the host allows; its text is the one line."""


@dataclass(frozen=True)
class Confinement:
    roots: tuple[Path, ...]  # resolved

    @classmethod
    def for_host(cls, allowed: Iterable[str | os.PathLike[str]] = ()) -> Confinement:
        """specviz's own folders and `allowed`, as they resolve now."""
        from ..models import home_dir

        folders = [home_dir("cache"), home_dir("data"), *map(Path, allowed)]
        return cls(tuple(dict.fromkeys(_real(folder) for folder in folders)))

    def allows(self, path: str | os.PathLike[str]) -> Path | None:
        """The resolved path when it lies under an allowed folder, else None."""
        real = _real(path)
        return real if any(real.is_relative_to(root) for root in self.roots) else None

    def run(self, spec: rs.RunSpec) -> rs.RunSpec:
        """`spec` with each lane's files resolved; OutsideAllowed names the first that is
        outside."""
        return replace(spec, lanes={lane_id: self._lane(lane_id, lane)
                                    for lane_id, lane in spec.lanes.items()})

    def _lane(self, lane_id: str, lane: rs.LaneSpec) -> rs.LaneSpec:
        resolved = {}
        for name, value in lane.inputs.items():
            if not names_a_file(INPUTS[name], value):
                continue
            real = self.allows(value)
            if real is None:
                raise OutsideAllowed(
                    f"lane {lane_id!r} {name} {value} is outside the folders this server "
                    "allows (its cache, --allow DIR)")
            resolved[name] = str(real)
        return replace(lane, inputs={**lane.inputs, **resolved})


def names_a_file(declared: Input, value: str) -> bool:
    """Whether the engine would open `value` as a file or folder, as the input's kind says
    (engines.oracles.registry.InputKind; the run builder reads each kind so): a model is read
    as a model only, a Hub name from the Hub cache, a kind's "off" names nothing."""
    kind = declared.kind
    if not kind.file or not value or value == kind.off:
        return False
    if kind.hub:
        from ..models import is_hub_name

        return not is_hub_name(value)
    return True


def _real(path: str | os.PathLike[str]) -> Path:
    """Absolute, every link and `..` resolved (the parts that exist; the rest as written)."""
    return Path(os.path.realpath(os.fspath(path)))
