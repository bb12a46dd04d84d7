"""Trained heads of the target (Medusa heads, an EAGLE head), predicted from the held-out
acceptance their training recorded, by depth: auto K's own choice of K (the K with the most
expected tokens per millisecond) at those odds, priced here. Their training held out answers
to requests like its own, not these prompts, so a head's figure is the same for every kind.

The configs are read as JSON where engines/medusa/heads.py (`medusa.json`) and
engines/eagle/checkpoint.py (`config.json`, its `specviz` block) write them: importing those
modules loads torch, which a llama.cpp target never needs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..backends.base import Backend
from ..cost.step_cost import best_k, expected_tokens
from ..models import side_folder
from .pricing import Costs
from .replay import K_MAX
from .report import ALL, Candidate, Cell

MEDUSA_CONFIG, MEDUSA_FORMAT = "medusa.json", "specviz-medusa-1"
EAGLE_CONFIG = "config.json"
KINDS = ("medusa", "eagle")
# What training costs, relative to a run's own steps: the target writes this many tokens,
# `prompt_batch` prompts at a time, and reads about as many (train-heads' defaults), and fitting
# the heads took about as long again (smollm2-135m on 2 cores: 6-16 min in all,
# docs/results/heads-training.md).
TRAIN_TOKENS, TRAIN_BATCH, READ_ROWS, TRAIN_OVERHEAD = 12_000, 8, 32, 3.0
INT8_SPEEDUP = {"medusa": 4.0, "eagle": 3.5}  # their draft weights in int8 on a CPU (default)


@dataclass(frozen=True)
class Heads:
    kind: str  # "medusa" or "eagle"
    folder: Path
    accept: list[float]  # held-out acceptance of each depth, given the depths before held
    draft_vocab: int | None = None  # an EAGLE head's own vocabulary (None: the target's)
    problem: str = ""  # why they cannot be predicted


def find(model_path: str | Path) -> dict[str, Heads | None]:
    """The target's own heads, by kind (None: none trained), where `train-heads` puts them."""
    return {"medusa": _medusa(side_folder(model_path, "medusa")),
            "eagle": _eagle(side_folder(model_path, "eagle"))}


def _read(path: Path) -> dict | str:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return f"cannot read {path} ({exc})"
    return data if isinstance(data, dict) else f"{path} is not a heads config"


def _medusa(folder: Path) -> Heads | None:
    if not (folder / MEDUSA_CONFIG).exists():
        return None
    data = _read(folder / MEDUSA_CONFIG)
    if isinstance(data, str) or data.get("format") != MEDUSA_FORMAT:
        return Heads("medusa", folder, [], problem=data if isinstance(data, str) else
                     f"{folder / MEDUSA_CONFIG} is not a {MEDUSA_FORMAT} config")
    # Each head's top-1 on held-out answers, whatever the heads before it guessed: taken as
    # its odds given theirs held (an estimate: the heads' errors are not independent).
    top1 = _probabilities((data.get("accuracy") or {}).get("top1"))
    return Heads("medusa", folder, top1, problem="" if top1 else "no held-out accuracy recorded")


def _eagle(folder: Path) -> Heads | None:
    if not (folder / EAGLE_CONFIG).exists():
        return None
    data = _read(folder / EAGLE_CONFIG)
    if isinstance(data, str):
        return Heads("eagle", folder, [], problem=data)
    accuracy = (data.get("specviz") or {}).get("accuracy") or {}
    conditional = _probabilities(accuracy.get("conditional"))
    draft_vocab = data.get("draft_vocab_size")
    return Heads("eagle", folder, conditional,
                 draft_vocab if isinstance(draft_vocab, int) else None,
                 "" if conditional else "no held-out acceptance recorded (a published head?)")


def _probabilities(values) -> list[float]:
    if not isinstance(values, list):
        return []
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
            break
        out.append(float(v))
    return out


def draft_share(target: Backend, heads: Heads) -> float:
    """A head's drafting of one token as a share of a plain step: the share of the weights a
    plain step reads that it reads (Medusa: the LM head, read once for all heads; EAGLE: one
    decoder layer and its LM head, per depth), those weights in int8."""
    model = getattr(target, "model", None)
    config = getattr(model, "config", None)
    if model is None or config is None:
        return 0.05  # no weights to count (not a transformers target): a guess, said so
    lm = model.get_output_embeddings().weight
    total = sum(p.numel() for p in model.parameters())
    embed = model.get_input_embeddings().weight
    read = total - (0 if embed is lm else embed.numel())  # a step reads one embedding row
    if heads.kind == "medusa":
        return lm.numel() / read / INT8_SPEEDUP["medusa"]
    layer = (read - lm.numel()) / max(int(config.num_hidden_layers), 1)
    rows = heads.draft_vocab or lm.shape[0]
    return (layer + lm.numel() * rows / lm.shape[0]) / read / INT8_SPEEDUP["eagle"]


def cells(heads: Heads, share: float, costs: Costs,
          contexts: Mapping[str, int]) -> dict[str, Cell]:
    """The best K at the heads' odds, per kind's mean context (the odds are the same)."""
    return {kind: _cell(heads, share, costs, context) for kind, context in contexts.items()}


def _cell(heads: Heads, share: float, costs: Costs, context: int) -> Cell:
    def draft_ms(k: int) -> float:
        if k == 0:
            return 0.0
        per_pass = share * costs.plain_ms(context)
        return per_pass if heads.kind == "medusa" else k * per_pass  # one pass, or one a depth

    limit = min(len(heads.accept), K_MAX)
    k, rate = best_k(heads.accept, lambda k: costs.step_ms(k, context, draft_ms(k)), limit)
    speedup = round(rate * costs.plain_ms(context), 4)
    kept = expected_tokens(heads.accept[:k]) - 1
    return Cell(speedup, "auto", k, speedup, speedup, round(kept / k, 4) if k else None,
                round(kept + 1, 4), costs.break_even(k, context, draft_ms(k)) if k else None, 0)


def candidate(target: Backend, heads: Heads | None, kind: str, costs: Costs,
              contexts: Mapping[str, int]) -> Candidate:
    name = f"{kind} heads" if kind == "medusa" else "eagle head"
    if heads is None:
        return Candidate(name, kind, obtain=f"train, about {train_minutes(costs):.0f} min",
                         skipped="none trained for this target (`specviz train-heads"
                                 + (" --kind eagle" if kind == "eagle" else "") + "`)")
    found = Candidate(name, kind, model=str(heads.folder))
    if heads.problem:
        found.skipped = heads.problem
    elif target.name != "transformers":
        found.skipped = "heads run on the transformers backend: advise with --backend transformers"
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
