"""Trained heads of the target (the oracles whose registry entry says registry.HeldOut: Medusa
heads, an EAGLE head), predicted from the held-out acceptance their training recorded, by
depth: auto K's own choice of K (the K with the most expected tokens per millisecond) at those
odds, priced here. Their training held out answers to requests like its own, not these
prompts, so a head's figure is the same for every kind.

Where the heads lie, which config holds their acceptance and what drafting reads are the
entry's (the configs are read as JSON: the heads' own modules load torch, which a llama.cpp
target never needs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..backends.base import Backend
from ..bounded_json import SMALL_FILE, read_json
from ..cost.step_cost import best_k, expected_tokens
from ..errors import SpecvizError
from ..models import side_folder
from ..oracles import ORACLE_INFO
from ..oracles.registry import HeldOut
from .concurrency import speedups, stops_paying_at
from .pricing import Costs
from .replay import K_MAX
from .report import ALL, PAYS, Candidate, Cell

# What training costs, relative to a run's own steps: the target writes this many tokens,
# `prompt_batch` prompts at a time, and reads about as many (train-heads' defaults), and fitting
# the heads took about as long again (smollm2-135m on 2 cores: 6-16 min in all,
# docs/results/heads-training.md).
TRAIN_TOKENS, TRAIN_BATCH, READ_ROWS, TRAIN_OVERHEAD = 12_000, 8, 32, 3.0


@dataclass(frozen=True)
class Heads:
    kind: str  # the oracle that drafts with them
    folder: Path
    accept: list[float]  # held-out acceptance of each depth, given the depths before held
    draft_vocab: int | None = None  # an EAGLE head's own vocabulary (None: the target's)
    problem: str = ""  # why they cannot be predicted

    @property
    def way(self) -> HeldOut:
        return held_out()[self.kind]


def held_out() -> dict[str, HeldOut]:
    """The oracles predicted from their heads' held-out acceptance, with how."""
    return {name: described.advise for name, described in ORACLE_INFO.items()
            if isinstance(described.advise, HeldOut)}


def find(model_path: str | Path) -> dict[str, Heads | None]:
    """The target's own heads, by oracle (None: none trained), where `train-heads` puts
    them."""
    return {name: _read_heads(name, way, side_folder(model_path, way.folder))
            for name, way in held_out().items()}


def _read(path: Path) -> dict | str:
    try:
        data = read_json(path, "the heads' config", SMALL_FILE)
    except SpecvizError as exc:
        return str(exc)
    return data if isinstance(data, dict) else f"{path} is not a heads config"


def _read_heads(name: str, way: HeldOut, folder: Path) -> Heads | None:
    path = folder / way.config
    if not path.exists():
        return None
    data = _read(path)
    if isinstance(data, str):
        return Heads(name, folder, [], problem=data)
    if way.format and data.get("format") != way.format:
        return Heads(name, folder, [], problem=f"{path} is not a {way.format} config")
    accept = way.acceptance(data)
    draft_vocab = data.get("draft_vocab_size")
    return Heads(name, folder, accept, draft_vocab if isinstance(draft_vocab, int) else None,
                 "" if accept else "no held-out acceptance recorded (a published head?)")


def draft_share(target: Backend, heads: Heads) -> float:
    """A head's drafting of one token as a share of a plain step: the share of the weights a
    plain step reads that it reads (the LM head, read once for all depths; or, per depth, one
    decoder layer and its LM head: HeldOut.per_depth), those weights in int8."""
    model = getattr(target, "model", None)
    config = getattr(model, "config", None)
    if model is None or config is None:
        return 0.05  # no weights to count (not a transformers target): a guess, said so
    lm = model.get_output_embeddings().weight
    total = sum(p.numel() for p in model.parameters())
    embed = model.get_input_embeddings().weight
    read = total - (0 if embed is lm else embed.numel())  # a step reads one embedding row
    way = heads.way
    if not way.per_depth:
        return lm.numel() / read / way.int8_speedup
    layer = (read - lm.numel()) / max(int(config.num_hidden_layers), 1)
    rows = heads.draft_vocab or lm.shape[0]
    return (layer + lm.numel() * rows / lm.shape[0]) / read / way.int8_speedup


def cells(heads: Heads, share: float, costs: Costs,
          contexts: Mapping[str, int]) -> dict[str, Cell]:
    """The best K at the heads' odds, per kind's mean context (the odds are the same)."""
    return {kind: _cell(heads, share, costs, context) for kind, context in contexts.items()}


def _cell(heads: Heads, share: float, costs: Costs, context: int) -> Cell:
    def draft_ms(k: int) -> float:
        if k == 0:
            return 0.0
        per_pass = share * costs.plain_ms(context)
        return k * per_pass if heads.way.per_depth else per_pass

    limit = min(len(heads.accept), K_MAX)
    k, rate = best_k(heads.accept, lambda k: costs.step_ms(k, context, draft_ms(k)), limit)
    speedup = round(rate * costs.plain_ms(context), 4)
    kept = expected_tokens(heads.accept[:k]) - 1
    return Cell(speedup, "auto", k, speedup, speedup, round(kept / k, 4) if k else None,
                round(kept + 1, 4), costs.break_even(k, context, draft_ms(k)) if k else None, 0,
                rows_per_step=k + 1,
                stops_paying_at=stops_paying_at(speedups(costs, context, speedup, kept + 1,
                                                         k + 1), PAYS))


def candidate(target: Backend, heads: Heads | None, kind: str, costs: Costs,
              contexts: Mapping[str, int]) -> Candidate:
    described = ORACLE_INFO[kind]
    way = described.advise
    if heads is None:
        return Candidate(way.label, kind, obtain=f"train, about {train_minutes(costs):.0f} min",
                         skipped=f"none trained for this target (`{way.train}`)")
    found = Candidate(way.label, kind, model=str(heads.folder))
    if heads.problem:
        found.skipped = heads.problem
    elif target.name not in described.backends:
        found.skipped = (f"{kind} runs on the {' or '.join(described.backends)} backend: "
                         f"advise with --backend {described.backends[0]}")
    else:
        found.cells = cells(heads, draft_share(target, heads), costs, contexts)
        found.note = ("held-out acceptance from its training, the same for every kind; a "
                      "chain, where a lane verifies trees")
    return found


def train_minutes(costs: Costs, context: int = 256) -> float:
    """About how long `train-heads` with its defaults would take for this target here."""
    write = TRAIN_TOKENS / TRAIN_BATCH * costs.verify_ms(TRAIN_BATCH, context)
    read = TRAIN_TOKENS / READ_ROWS * costs.verify_ms(READ_ROWS, context)
    return TRAIN_OVERHEAD * (write + read) / 60_000


def mean_contexts(records: Mapping[str, Sequence]) -> dict[str, int]:
    """Each kind's mean context over its answers (prompt and half the answer), and ALL's."""
    groups = {**{kind: recs for kind, recs in records.items() if recs},
              ALL: [r for recs in records.values() for r in recs]}
    return {kind: int(sum(len(r.prompt) + len(r.out) // 2 for r in recs) / len(recs))
            for kind, recs in groups.items() if recs}
