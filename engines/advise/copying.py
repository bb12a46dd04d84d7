"""The oracles whose registry entry says they are predicted by replaying their own proposals
(registry.Replayed: prompt lookup, the n-gram cache, suffix decoding, the rules, and any
oracle added the same way). Each is built as a lane builds it, with the settings and inputs
its entry gives the replay over its defaults (suffix decoding drafting chains and remembering
in this process only: a replay judges a draft by its prefix that holds, and must not write
the model's suffix memory)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..backends.base import Backend
from ..oracles import ORACLE_INFO, Oracle, make_oracle
from ..oracles.registry import Replayed
from .predict import predict
from .pricing import Costs
from .replay import Drafter, Record
from .report import Candidate


def replayed() -> tuple[str, ...]:
    """The oracles predicted by a replay, in the registry's order."""
    return tuple(name for name, described in ORACLE_INFO.items()
                 if isinstance(described.advise, Replayed))


def build(name: str, target: Backend) -> Oracle:
    way = ORACLE_INFO[name].advise
    if not isinstance(way, Replayed):
        raise ValueError(f"{name} is not predicted by a replay ({', '.join(replayed())})")
    return make_oracle(name, target=target, settings=dict(way.settings), **dict(way.inputs))


def candidate(name: str, target: Backend, records: Mapping[str, Sequence[Record]],
              costs: Costs) -> Candidate:
    cells = predict(records, lambda: Drafter(build(name, target)), costs,
                    eos_ids=target.eos_ids)
    return Candidate(name, name, cells=cells, note=ORACLE_INFO[name].advise.note)
