"""Training Medusa heads by self-distillation: the frozen target writes the training text.

The target answers a corpus of prompts (training.answers); every position's final hidden
state is kept as it goes, so the target runs once per token. Head k then learns, from the
hidden state at position t, the token the target itself wrote at t+1+k (cross-entropy through
the target's LM head, which stays frozen). Whole answers are held out for the accuracy figures.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch.nn import functional as F

from ..backends.hf import TransformersBackend
from ..machine.precision import autocast, precision_here
from ..medusa.heads import HeadsConfig, MedusaHeads, lm_head_of, target_id
from .answers import IGNORE, Answer, TrainSettings, split

HEAD_LOSS_DECAY = 0.8  # later heads are harder; Medusa weights head k's loss by 0.8**k


@dataclass
class TrainResult:
    heads: MedusaHeads
    config: HeadsConfig
    losses: list[float] = field(default_factory=list)


# ---------------------------------------------------------------- corpus


# ---------------------------------------------------------------- self-distillation


def labels(answer: Answer, n_heads: int) -> torch.Tensor:
    """(n, H): head k's target at row i is the target's token k places after tokens[i]."""
    n = len(answer.tokens)
    out = torch.full((n, n_heads), IGNORE, dtype=torch.long)
    toks = torch.tensor(answer.labels, dtype=torch.long)
    for k in range(1, n_heads + 1):
        if k < n:
            out[: n - k, k - 1] = toks[k:]
    return out


def stack(answers: Sequence[Answer], n_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.cat([a.hidden for a in answers]),
            torch.cat([labels(a, n_heads) for a in answers]))


# ---------------------------------------------------------------- training


def train(target: TransformersBackend, answers: Sequence[Answer], settings: TrainSettings,
          on_step: Callable[[int, int, float], None] | None = None,
          training_facts: dict | None = None, reading: Sequence[Answer] = ()) -> TrainResult:
    """Fit the heads on cached hidden states (the answers' and text the target read);
    measure held-out top-1/top-5 per head on answers it wrote."""
    torch.manual_seed(settings.seed)
    train_set, test_set = split(answers, settings.held_out, settings.seed)
    train_set += reading
    x, y = stack(train_set, settings.n_heads)
    head = lm_head_of(target.model)
    weight = head.weight.detach().float().cpu()
    bias = None if head.bias is None else head.bias.detach().float().cpu()
    heads = MedusaHeads(x.shape[1], settings.n_heads)
    steps = settings.steps or max(1, math.ceil(settings.epochs * len(x) / settings.batch))
    precision = precision_here(settings.precision)
    t0 = time.perf_counter()
    losses = _fit(heads, x, y, weight, bias, steps, settings, on_step, precision)
    seconds = time.perf_counter() - t0
    accuracy = evaluate(heads, *stack(test_set, settings.n_heads), weight, bias)
    facts = {**(training_facts or {}), "answers": len(train_set) - len(reading),
             "read_chunks": len(reading), "held_out_answers":
             len(test_set), "train_positions": len(x), "steps": steps, "batch": settings.batch,
             "lr": settings.lr, "temperature": settings.temperature, "precision": precision,
             "train_seconds": round(seconds, 1), "final_loss": round(losses[-1], 4)}
    config = HeadsConfig(target_id(target.model, target.model_path), settings.n_heads,
                         int(x.shape[1]), facts, accuracy)
    return TrainResult(heads.eval(), config, losses)


def _fit(heads: MedusaHeads, x, y, weight, bias, steps: int, settings: TrainSettings,
         on_step, precision: str = "fp32") -> list[float]:
    opt = torch.optim.AdamW(heads.parameters(), lr=settings.lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    gen = torch.Generator().manual_seed(settings.seed)
    decay = torch.tensor([HEAD_LOSS_DECAY**k for k in range(settings.n_heads)])
    losses = []
    heads.train()
    for step in range(steps):
        idx = torch.randint(len(x), (min(settings.batch, len(x)),), generator=gen)
        with autocast(precision):
            logits = F.linear(heads.features(x[idx]), weight, bias)  # (B, H, V)
            loss = (_head_losses(logits, y[idx]) * decay).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        schedule.step()
        losses.append(loss.item())
        if on_step:
            on_step(step, steps, losses[-1])
    return losses


def _head_losses(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy per head over the positions that have a label."""
    b, h, v = logits.shape
    ce = F.cross_entropy(logits.reshape(b * h, v), y.reshape(-1), ignore_index=IGNORE,
                         reduction="none").reshape(b, h)
    counted = (y != IGNORE).sum(0).clamp(min=1)
    return ce.sum(0) / counted


@torch.no_grad()
def evaluate(heads: MedusaHeads, x, y, weight, bias, chunk: int = 256) -> dict:
    """Top-1 and top-5 accuracy of each head on (x, y), with the number of positions."""
    heads.eval()
    hit1 = torch.zeros(heads.n_heads)
    hit5 = torch.zeros(heads.n_heads)
    for i in range(0, len(x), chunk):
        logits = F.linear(heads.features(x[i : i + chunk]), weight, bias)
        top5 = logits.topk(5, dim=-1).indices  # (b, H, 5)
        target = y[i : i + chunk].unsqueeze(-1)
        hit1 += (top5[..., :1] == target).any(-1).sum(0)
        hit5 += (top5 == target).any(-1).sum(0)
    counted = (y != IGNORE).sum(0).clamp(min=1)
    return {"top1": [round(float(v), 4) for v in hit1 / counted],
            "top5": [round(float(v), 4) for v in hit5 / counted],
            "positions": [int(c) for c in (y != IGNORE).sum(0)]}
