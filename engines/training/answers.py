"""The target's answers that heads train on: prompts answered (greedily, or sampled) by the
frozen target, with the hidden state that produced each token (Medusa's input) and, asked for,
what entered chosen layers at every position (EAGLE's features); saved, resumed, split.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..atomic import cannot_write, written_atomically
from ..backends.hf import TransformersBackend
from ..backends.hf_cache import cache_keyword
from ..backends.hf_features import LayerInputHooks
from ..errors import SpecvizError
from ..medusa.heads import lm_head_of

IGNORE = -100  # label of a position with no token k places ahead (end of an answer)


@dataclass
class Answer:
    """One generated answer: hidden state rows and the tokens the target wrote.

    Row i is the LM head's input that produced tokens[i] (row 0: the prompt's last token).
    With `layers` asked for (EAGLE), `features` holds what entered those layers at every
    position fed, prompt and answer: rows 0..len(prompt)+len(tokens)-2. Text the target read
    rather than wrote (`reading`) has `choices`: the token the target itself would have chosen
    (greedily) in place of each of `tokens`; the heads learn those.
    """

    hidden: torch.Tensor  # (n, hidden) float32 on CPU
    tokens: list[int]
    prompt: list[int] = field(default_factory=list)
    features: torch.Tensor | None = None  # (positions, 3 * hidden) float16 on CPU
    choices: list[int] | None = None  # None: the tokens are the target's own

    @property
    def labels(self) -> list[int]:
        """What the heads learn at each answer position: the target's own tokens."""
        return self.tokens if self.choices is None else self.choices


CHUNK_BATCHES = 4  # batches of prompts grouped by length (generate_answers)


@dataclass
class TrainSettings:
    n_heads: int = 4
    tokens: int = 12000  # written tokens to train on: about 3 minutes on 2 cores (smollm2)
    max_new: int = 192  # per answer
    steps: int | None = None  # optimiser steps; None: from epochs
    epochs: float = 3.0
    batch: int = 64
    lr: float = 1e-3
    held_out: float = 0.1  # share of answers kept out of training, for the accuracy figures
    temperature: float = 0.0  # of the target's answers (0 = greedy)
    prompt_batch: int = 8  # prompts answered together
    chat: bool = True
    seed: int = 0
    precision: str = "auto"  # of training's products: auto, bf16, fp32 (engines.machine.precision)


def generate_answers(target: TransformersBackend, prompts: Sequence[str], settings: TrainSettings,
                     on_tokens: Callable[[int], None] | None = None,
                     layers: Sequence[int] | None = None,
                     resume: tuple[list[Answer], int] = ([], 0),
                     on_batch: Callable[[list[Answer], int], None] | None = None,
                     ) -> list[Answer]:
    """The target answers prompts until `settings.tokens` tokens are written, a batch of
    prompts at a time (a CPU reads the weights once for the whole batch); the LM head's input
    rows (and, given `layers`, those layers' inputs) are caught on the way, so the target
    runs once per token. `resume`: answers written before and the prompts they used;
    `on_batch(answers, prompts used)` after every group of batches, to save them.

    Prompts are taken CHUNK_BATCHES batches at a time and batched by length within them: a
    batch is padded to its longest prompt, and in the corpus's mixed order a 1,800-token
    article beside 70-token questions made most of a batch's work padding."""
    eos = torch.tensor(sorted(target.eos_ids), dtype=torch.long)
    answers = list(resume[0])
    left = settings.tokens - sum(len(a.tokens) for a in answers)
    size = settings.prompt_batch * CHUNK_BATCHES
    for start in range(resume[1], len(prompts), size):
        if left <= 0:
            break
        ids = [_prompt_ids(target, text, settings) for text in prompts[start : start + size]]
        by_length = sorted(ids, key=len)  # stable: a prompt's samples stay side by side
        for b in range(0, len(by_length), settings.prompt_batch):
            if left <= 0:
                break
            gen = torch.Generator().manual_seed(settings.seed + start + b)  # same if resumed
            batch = by_length[b : b + settings.prompt_batch]
            for answer in _answer_batch(target, batch, settings, eos, gen, on_tokens, layers):
                answer = _first(answer, left)
                if left > 0 and len(answer.tokens) > 1:
                    answers.append(answer)
                    left -= len(answer.tokens)
        if on_batch:
            on_batch(answers, start + len(ids))
    return answers


def _first(answer: Answer, n: int) -> Answer:
    """The answer's first n tokens, with their rows."""
    features = answer.features
    if features is not None:
        features = features[: len(answer.prompt) + min(n, len(answer.tokens)) - 1]
    choices = None if answer.choices is None else answer.choices[:n]
    return Answer(answer.hidden[:n], answer.tokens[:n], answer.prompt, features, choices)


def _prompt_ids(target: TransformersBackend, text: str, settings: TrainSettings) -> list[int]:
    ids = target.encode_prompt(target.format_prompt(text, settings.chat), settings.chat)
    return ids[-(target.n_ctx - settings.max_new - 1):]  # too long for the context: keep the end


def _answer_batch(target: TransformersBackend, prompts: list[list[int]], settings: TrainSettings,
                  eos: torch.Tensor, gen: torch.Generator, on_tokens,
                  layers: Sequence[int] | None = None) -> list[Answer]:
    """Greedy (or sampled) answers to left-padded prompts, with the LM head's input rows
    (and the given layers' inputs at every position)."""
    from transformers import DynamicCache

    model = target.model
    ids, mask = _left_pad(prompts)
    position = (mask.cumsum(-1) - 1).clamp(min=0)
    caught: list[torch.Tensor] = []
    hook = lm_head_of(model).register_forward_pre_hook(
        lambda _m, args: caught.append(args[0][:, -1].float().cpu()))
    forwards: list[torch.Tensor] = []  # what entered `layers` in each forward, (B, n, 3H)
    layer_rows = LayerInputHooks(model, layers, lambda joined: forwards.append(
        joined.half().cpu())) if layers else None
    cache, done, steps = DynamicCache(), torch.zeros(len(prompts), dtype=torch.bool), []
    as_cache = {cache_keyword(model): cache}
    dev = target.device
    try:
        with torch.inference_mode():
            out = model(input_ids=ids.to(dev), attention_mask=mask.to(dev),
                        position_ids=position.to(dev), use_cache=True, logits_to_keep=1,
                        **as_cache)
            for n in range(settings.max_new):
                token = _pick(out.logits[:, -1].float().cpu(), settings.temperature, gen)
                steps.append(token)
                if on_tokens:
                    on_tokens(int((~done).sum()))
                done |= torch.isin(token, eos)
                if bool(done.all()) or n + 1 == settings.max_new:
                    break
                mask = torch.cat([mask, torch.ones(len(prompts), 1, dtype=mask.dtype)], dim=1)
                position = position[:, -1:] + 1
                out = model(input_ids=token[:, None].to(dev), attention_mask=mask.to(dev),
                            position_ids=position.to(dev), use_cache=True,
                            logits_to_keep=1, **as_cache)
    finally:
        hook.remove()
        if layer_rows:
            layer_rows.close()
    hidden, tokens = torch.stack(caught[: len(steps)], 1), torch.stack(steps, 1)  # (B, n, .)
    answers = [_cut_at_eos(hidden[b], tokens[b], eos) for b in range(len(prompts))]
    for b, answer in enumerate(answers):
        answer.prompt = list(prompts[b])
    if layer_rows:
        rows = torch.cat(forwards, dim=1)  # (B, width + steps - 1, 3H)
        width = ids.shape[1]
        for b, answer in enumerate(answers):
            fed = len(prompts[b]) + len(answer.tokens) - 1
            answer.features = rows[b, width - len(prompts[b]):][:fed].clone()
    return answers


def _left_pad(prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros(len(prompts), width, dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, width - len(p):] = torch.tensor(p)
        mask[b, width - len(p):] = 1
    return ids, mask


def _pick(logits: torch.Tensor, temperature: float, gen: torch.Generator) -> torch.Tensor:
    if temperature == 0:
        return logits.argmax(-1)
    return torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=gen)[:, 0]


def _cut_at_eos(hidden: torch.Tensor, tokens: torch.Tensor, eos: torch.Tensor) -> Answer:
    ends = torch.isin(tokens, eos).nonzero()
    n = int(ends[0, 0]) + 1 if len(ends) else len(tokens)
    return Answer(hidden[:n].clone(), tokens[:n].tolist())


def answers_key(prompts: Sequence[str], settings: TrainSettings, fingerprint: str,
                layers: Sequence[int] | None = None) -> str:
    """Names the answers a corpus and settings give on one target (for the disk cache)."""
    import hashlib

    facts = [fingerprint, settings.tokens, settings.max_new, settings.temperature,
             settings.prompt_batch, settings.chat, settings.seed, list(prompts)]
    if layers:
        facts.append(list(layers))
    return hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:16]


def save_answers(answers: Sequence[Answer], path: Path, prompts_used: int | None = None) -> None:
    """Hidden states and tokens (prompts and layer features too, if kept) in one safetensors
    file, so a re-run trains without the target writing again."""
    from safetensors.torch import save_file

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise cannot_write(path, exc) from None
    data = {"hidden": torch.cat([a.hidden for a in answers]).contiguous(),
            "tokens": torch.tensor([t for a in answers for t in a.tokens]),
            "lengths": torch.tensor([len(a.tokens) for a in answers])}
    if answers and answers[0].prompt:
        data |= {"prompts": torch.tensor([t for a in answers for t in a.prompt]),
                 "prompt_lengths": torch.tensor([len(a.prompt) for a in answers])}
    if answers and answers[0].features is not None:
        data["features"] = torch.cat([a.features for a in answers]).contiguous()
    if answers and answers[0].choices is not None:
        data["choices"] = torch.tensor([t for a in answers for t in a.choices])
    meta = None if prompts_used is None else {"prompts_used": str(prompts_used)}
    with written_atomically(path) as temp:  # a run stopped midway leaves no half-written cache
        save_file(data, str(temp), metadata=meta)


def prompts_used(path: Path) -> int:
    """How many prompts a partial answer file (saved batch by batch) has used."""
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        return int((f.metadata() or {}).get("prompts_used", 0))


def load_answers(path: Path) -> list[Answer]:
    from safetensors.torch import load_file

    data = load_file(str(path))
    lengths = data["lengths"].tolist()
    hidden = torch.split(data["hidden"], lengths)
    tokens = torch.split(data["tokens"], lengths)
    answers = [Answer(h, t.tolist()) for h, t in zip(hidden, tokens)]
    if "prompts" in data:
        plens = data["prompt_lengths"].tolist()
        for answer, prompt in zip(answers, torch.split(data["prompts"], plens)):
            answer.prompt = prompt.tolist()
    if "features" in data:
        feats = torch.split(data["features"], [len(a.prompt) + len(a.tokens) - 1
                                               for a in answers])
        for answer, f in zip(answers, feats):
            answer.features = f
    if "choices" in data:
        for answer, c in zip(answers, torch.split(data["choices"], lengths)):
            answer.choices = c.tolist()
    return answers


def split(answers: Sequence[Answer], held_out: float, seed: int):
    """(train, held-out) answers: whole answers are held out, never parts of one, and the
    answers to one prompt (`--samples`) all on one side, so held-out prompts are unseen
    (unless every answer has the same prompt: then answers are split alone)."""
    groups: dict[tuple, list[int]] = {}
    for i, answer in enumerate(answers):  # an answer cached without its prompt: alone
        groups.setdefault(tuple(answer.prompt) or ("answer", i), []).append(i)
    members = list(groups.values())
    if len(members) == 1:
        members = [[i] for i in range(len(answers))]
    order = np.random.default_rng(seed).permutation(len(members))
    n_out = min(len(answers) - 1, max(1, round(held_out * len(answers)))) if held_out else 0
    out: list[int] = []
    for g in order:
        if len(out) >= n_out:
            break
        out += members[g]
    if len(members) < 2 or n_out < 1 or len(out) == len(answers):
        raise SpecvizError(
            f"need at least two answers to hold one out; got {len(answers)} (give more prompts "
            "or tokens)"
        )
    held = set(out)
    kept = [i for g in order for i in members[g] if i not in held]
    return [answers[i] for i in kept], [answers[i] for i in out]
