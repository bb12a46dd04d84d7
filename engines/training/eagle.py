"""Training an EAGLE head by self-distillation, with EAGLE-3's training-time test.

The target answers a corpus (medusa.train's generation, which also keeps what entered the
low, middle and high layers at every position, so the target runs once per token). The head
then learns, for every answer position t, the token the target wrote at t+2 from the fused
features at t and the token at t+1; and, rolled out `ttt` steps on its own outputs (step k
reads its own step k-1 output at the same row with the true token t+1+k, and attends to the
context's rows and to its own earlier steps at that row, as it will when drafting), the token
at t+2+k. Losses are cross-entropy on the target's own tokens through the target's LM head,
frozen, weighted 0.8^k by step. Sequences are cut into windows; a random subset of the
labelled rows pays for the LM head each step (it is most of the cost on a CPU).

Whole answers are held out; on them the head drafts greedily from every position, and the
share of positions whose first d drafts all match the target is its acceptance at depth d.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from ..atomic import cannot_write, written_atomically
from ..backends.hf import TransformersBackend
from ..eagle.checkpoint import default_layers, save_head, shape_for
from ..eagle.head import EagleHead, KeyValues
from ..errors import SpecvizError
from ..machine.precision import autocast, precision_here
from ..medusa.heads import lm_head_of, target_id
from .answers import IGNORE, Answer, TrainSettings, split

STEP_DECAY = 0.8  # EAGLE-3 weights rollout step k's loss by 0.8**k
CHECKPOINT = "training-state.pt"


@dataclass
class EagleSettings(TrainSettings):
    ttt: int = 4  # rollout steps trained (the drafting depth the head learns for)
    window: int = 192  # rows per training sequence
    batch: int = 4  # sequences per optimiser step
    rows: int = 192  # labelled rows per rollout step that go through the LM head
    lr: float = 3e-4
    epochs: float = 16.0  # about 500 steps on the default text: a head worth using in minutes
    checkpoint_every: int = 50  # steps between saves of the training state (resumable)
    draft_vocab: int = 8192  # the tokens it may draft, the answers' commonest (0: all)
    soft: bool = True  # learn the target's whole distribution (over the draft vocabulary)


@dataclass
class EagleResult:
    head: EagleHead
    layers: list[int]
    training: dict
    accuracy: dict
    losses: list[float] = field(default_factory=list)


@dataclass
class Frozen:
    """The target's parts the head uses, detached float32 copies on the CPU."""

    embed: torch.Tensor  # (V, H)
    lm_weight: torch.Tensor  # (V, H)
    lm_bias: torch.Tensor | None

    @classmethod
    def of(cls, model) -> Frozen:
        head = lm_head_of(model)
        return cls(model.get_input_embeddings().weight.detach().float().cpu(),
                   head.weight.detach().float().cpu(),
                   None if head.bias is None else head.bias.detach().float().cpu())

    def logits(self, head: EagleHead, out: torch.Tensor) -> torch.Tensor:
        """Over the head's own vocabulary (its rows of the target's LM head), else the
        target's."""
        if head.lm_head is not None:
            return head.logits(out)
        return F.linear(head.norm(out), self.lm_weight, self.lm_bias)

    def teacher(self, head: EagleHead, rows: torch.Tensor) -> torch.Tensor:
        """The target's own logits from its LM head inputs, over the head's vocabulary."""
        if head.lm_head is not None:
            return head.lm_head(rows)
        return F.linear(rows, self.lm_weight, self.lm_bias)


def new_head(model, vocab: torch.Tensor | None = None) -> EagleHead:
    """A head shaped like the target's layers; its final norm starts as the target's (the
    LM head it feeds expects that scale). With `vocab` (target ids, ascending) it drafts
    only those: its LM head is the target's rows for them, frozen, mapped back by d2t."""
    shape = shape_for(model)
    if vocab is not None:
        shape.draft_vocab_size = len(vocab)
    head = EagleHead(shape)
    norm = getattr(model.get_decoder(), "norm", None)
    with torch.no_grad():
        if norm is not None and getattr(norm, "weight", None) is not None:
            head.norm.weight.copy_(norm.weight.detach().float())
        if vocab is not None:
            head.lm_head.weight.copy_(lm_head_of(model).weight.detach().float()[vocab])
            head.lm_head.weight.requires_grad_(False)
            head.d2t.copy_(vocab - torch.arange(len(vocab)))
    return head


def draft_vocabulary(answers: Sequence[Answer], size: int, n_vocab: int) -> torch.Tensor | None:
    """The `size` tokens the target wrote most often (ascending ids), as EAGLE-3 keeps: the
    head's LM head then costs size/n_vocab of the target's. None: the whole vocabulary."""
    if not size or size >= n_vocab:
        return None
    counts = torch.zeros(n_vocab)
    for answer in answers:
        counts += torch.bincount(torch.tensor(answer.labels), minlength=n_vocab)[:n_vocab]
    order = torch.sort(-counts, stable=True).indices  # ties: lower ids first
    return torch.sort(order[:size]).values


def draft_labels(head: EagleHead, n_vocab: int) -> torch.Tensor | None:
    """Target id -> the head's id (-100 where it cannot draft that token), or None."""
    if head.d2t is None:
        return None
    to_draft = torch.full((n_vocab,), IGNORE, dtype=torch.long)
    used = head.d2t + torch.arange(len(head.d2t))
    to_draft[used] = torch.arange(len(used))
    return to_draft


# ---------------------------------------------------------------- batches


@dataclass
class Window:
    features: torch.Tensor  # (T, 3H) rows t of the window
    tokens: torch.Tensor  # (T + ttt + 1,) token t+1 of each row, and those after
    labelled: torch.Tensor  # (T + ttt + 1,) whether that token is an answer's
    labels: torch.Tensor  # (T + ttt + 1,) the target's own token there (see Answer.labels)
    teacher: torch.Tensor  # (T + ttt + 1, H) the target's LM head input there (0: unlabelled)


def window(answer: Answer, size: int, ttt: int, rng: np.random.Generator) -> Window:
    """Rows [s, s + size) of one answer's sequence, placed to cover answer positions."""
    seq = answer.prompt + answer.tokens
    n_rows, first_label = len(seq) - 1, len(answer.prompt)  # row t predicts seq[t + 2]
    lo = max(0, min(first_label - 2, n_rows - size))
    s = int(rng.integers(lo, max(lo, n_rows - size) + 1))
    e = min(n_rows, s + size)
    after = torch.zeros(e - s + ttt + 1, dtype=torch.long)
    labelled = torch.zeros(e - s + ttt + 1, dtype=torch.bool)
    later = seq[s + 1 : e + ttt + 2]
    after[: len(later)] = torch.tensor(later)
    labels = after.clone()
    teacher = torch.zeros(len(after), answer.hidden.shape[1])
    for i in range(len(later)):
        labelled[i] = s + 1 + i >= first_label
        if labelled[i]:
            labels[i] = answer.labels[s + 1 + i - first_label]
            teacher[i] = answer.hidden[s + 1 + i - first_label]
    return Window(answer.features[s:e].float(), after, labelled, labels, teacher)


def collate(windows: Sequence[Window]):
    """Padded (B, T, 3H) features, (B, T + ttt + 1) tokens, labelled mask and labels, (B, T)
    rows, (B, T + ttt + 1, H) the target's LM head inputs."""
    t = max(len(w.features) for w in windows)
    b = len(windows)
    feats = torch.zeros(b, t, windows[0].features.shape[1])
    extra = len(windows[0].tokens) - len(windows[0].features)
    tokens = torch.zeros(b, t + extra, dtype=torch.long)
    labelled = torch.zeros(b, t + extra, dtype=torch.bool)
    labels = torch.zeros(b, t + extra, dtype=torch.long)
    rows = torch.zeros(b, t, dtype=torch.bool)
    teacher = torch.zeros(b, t + extra, windows[0].teacher.shape[1])
    for i, w in enumerate(windows):
        n, m = len(w.features), len(w.tokens)
        feats[i, :n], rows[i, :n] = w.features, True
        tokens[i, :m], labelled[i, :m], labels[i, :m] = w.tokens, w.labelled, w.labels
        teacher[i, :m] = w.teacher
    return feats, tokens, labelled, labels, rows, teacher


# ---------------------------------------------------------------- the rollout


def rollout(head: EagleHead, frozen: Frozen, feats, tokens, rows, steps: int,
            feed: Callable[[int, torch.Tensor], torch.Tensor] | None = None):
    """Run the head `steps` times over every row; yield (k, outputs (B, T, H)).

    Step 0 reads the fused features and token t+1; step k reads step k-1's output at the
    same row and token t+1+k (or `feed(k, previous outputs)`'s tokens: its own guesses). Each
    step's rows see the rows before them at step 0 and their own row at earlier steps."""
    b, t, _ = feats.shape
    causal = torch.ones(t, t, dtype=torch.bool).tril() & rows[:, None, :]
    eye = torch.eye(t, dtype=torch.bool).expand(b, t, t)
    positions = torch.arange(t).expand(b, t)
    cache, hidden = KeyValues(), head.fc(feats)
    allowed = causal
    for k in range(steps):
        ids = tokens[:, k : k + t] if feed is None or k == 0 else feed(k, hidden)
        hidden = head.step(hidden, F.embedding(ids, frozen.embed), positions + k, cache,
                           allowed)
        yield k, hidden
        allowed = torch.cat([allowed, eye], dim=-1)


def ttt_loss(head: EagleHead, frozen: Frozen, batch, settings: EagleSettings,
             gen: torch.Generator, to_draft: torch.Tensor | None = None) -> torch.Tensor:
    feats, tokens, labelled, labels, rows, teacher = batch
    t = feats.shape[1]
    if to_draft is not None:  # tokens the head cannot draft teach it nothing
        labels = to_draft[labels]
        labelled = labelled & (labels != IGNORE)
    total = torch.zeros(())
    for k, out in rollout(head, frozen, feats, tokens, rows, settings.ttt):
        target = labels[:, k + 1 : k + 1 + t]
        where = (labelled[:, k + 1 : k + 1 + t] & rows).nonzero()
        if not len(where):
            continue
        pick = torch.randperm(len(where), generator=gen)[: settings.rows]
        bi, ti = where[pick, 0], where[pick, 1]
        logits = frozen.logits(head, out[bi, ti])
        if settings.soft:
            taught = frozen.teacher(head, teacher[:, k + 1 : k + 1 + t][bi, ti])
            loss = -(taught.softmax(-1) * logits.log_softmax(-1)).sum(-1).mean()
        else:
            loss = F.cross_entropy(logits, target[bi, ti])
        total = total + STEP_DECAY**k * loss
    return total


# ---------------------------------------------------------------- training


def train(target: TransformersBackend, answers: Sequence[Answer], settings: EagleSettings,
          on_step: Callable[[int, int, float], None] | None = None,
          training_facts: dict | None = None, state_dir: Path | None = None,
          layers: Sequence[int] | None = None, reading: Sequence[Answer] = ()) -> EagleResult:
    """Fit a head on the cached answers and text the target read; its held-out acceptance by
    depth on answers it wrote. With `state_dir`, the training state is saved every
    `checkpoint_every` steps and picked up again."""
    if not answers or answers[0].features is None:
        raise SpecvizError("these answers hold no layer features (written for Medusa heads?)")
    torch.manual_seed(settings.seed)
    layers = list(layers or default_layers(int(target.model.config.num_hidden_layers)))
    train_set, test_set = split(answers, settings.held_out, settings.seed)
    train_set += reading
    n_vocab = int(target.model.config.vocab_size)
    vocab = draft_vocabulary(train_set, settings.draft_vocab, n_vocab)
    frozen, head = Frozen.of(target.model), new_head(target.model, vocab)
    to_draft = draft_labels(head, n_vocab)
    rows = sum(len(a.tokens) for a in train_set)
    steps = settings.steps or max(1, math.ceil(
        settings.epochs * rows / (settings.batch * min(settings.window, settings.max_new))))
    opt = torch.optim.AdamW([p for p in head.parameters() if p.requires_grad], lr=settings.lr,
                            weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.OneCycleLR(opt, settings.lr, total_steps=steps,
                                                   pct_start=0.05)
    precision = precision_here(settings.precision)
    plan = {"steps": steps, "draft_vocab": head.shape.draft_vocab_size, "rows": rows}
    losses, begun = _resume(state_dir, head, opt, schedule, plan)
    rng = np.random.default_rng(settings.seed + begun)
    gen = torch.Generator().manual_seed(settings.seed + begun)
    t0 = time.perf_counter()
    head.train()
    for step in range(begun, steps):
        chosen = rng.choice(len(train_set), size=min(settings.batch, len(train_set)),
                            replace=False)
        batch = collate([window(train_set[i], settings.window, settings.ttt, rng)
                         for i in chosen])
        with autocast(precision):
            loss = ttt_loss(head, frozen, batch, settings, gen, to_draft)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        schedule.step()
        losses.append(loss.item())
        if on_step:
            on_step(step, steps, losses[-1])
        if state_dir and (step + 1) % settings.checkpoint_every == 0 and step + 1 < steps:
            _save_state(state_dir, head, opt, schedule, plan, step + 1, losses)
    head.eval()
    accuracy = evaluate(head, frozen, test_set, settings.ttt)
    facts = {**(training_facts or {}), "answers": len(train_set) - len(reading),
             "read_chunks": len(reading),
             "held_out_answers": len(test_set), "train_rows": rows, "steps": steps,
             "batch": settings.batch, "window": settings.window, "ttt": settings.ttt,
             "lr": settings.lr, "temperature": settings.temperature, "precision": precision,
             "draft_vocab": len(vocab) if vocab is not None else n_vocab,
             "draft_vocab_covers": _coverage(test_set, vocab),
             "train_seconds": round(time.perf_counter() - t0, 1),
             "final_loss": round(float(np.mean(losses[-20:])), 4)}
    if state_dir:
        (state_dir / CHECKPOINT).unlink(missing_ok=True)
    return EagleResult(head, layers, facts, accuracy, losses)


def _coverage(answers: Sequence[Answer], vocab: torch.Tensor | None) -> float:
    """The share of held-out answer tokens the head can draft at all."""
    if vocab is None:
        return 1.0
    tokens = torch.tensor([t for a in answers for t in a.tokens])
    return round(float(torch.isin(tokens, vocab).float().mean()), 4) if len(tokens) else 0.0


def save(result: EagleResult, target: TransformersBackend, folder: Path) -> Path:
    return save_head(result.head, result.layers, folder,
                     target_id(target.model, target.model_path), result.training,
                     result.accuracy)


def _save_state(folder: Path, head, opt, schedule, plan: dict, done: int, losses) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise cannot_write(folder / CHECKPOINT, exc) from None
    with written_atomically(folder / CHECKPOINT) as temp:  # a name of its own per save
        torch.save({"head": head.state_dict(), "opt": opt.state_dict(),
                    "schedule": schedule.state_dict(), "plan": plan, "done": done,
                    "losses": losses}, temp)


def _resume(folder: Path | None, head, opt, schedule, plan: dict) -> tuple[list[float], int]:
    path = folder / CHECKPOINT if folder else None
    if path is None or not path.exists():
        return [], 0
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # a state file cut short is no state: start again
        return [], 0
    if state.get("plan") != plan:
        return [], 0  # another run's plan
    head.load_state_dict(state["head"])
    opt.load_state_dict(state["opt"])
    schedule.load_state_dict(state["schedule"])
    return list(state["losses"]), int(state["done"])


# ---------------------------------------------------------------- held-out acceptance


@torch.no_grad()
def evaluate(head: EagleHead, frozen: Frozen, answers: Sequence[Answer], depth: int) -> dict:
    """Greedy drafting from every answer position of held-out answers: the share whose first
    d drafts all match the target (`acceptance[d-1]`), and the top-1 of step d given a right
    chain before it (`conditional[d-1]`). The head reads the whole prompt, as when drafting;
    the LM head runs only on the rows a draft starts from (where the first guess is an answer
    token)."""
    hits = np.zeros(depth)
    counted = np.zeros(depth)
    for answer in answers:
        w = window(answer, len(answer.prompt) + len(answer.tokens), depth,
                   np.random.default_rng(0))
        feats, tokens, labelled, _labels, rows, _teacher = collate([w])
        t = feats.shape[1]
        guesses: list[torch.Tensor] = []

        def own(k: int, _out: torch.Tensor, guesses=guesses) -> torch.Tensor:
            return guesses[k - 1]  # drafting: step k reads the token step k-1 guessed

        ok = torch.ones(1, t, dtype=torch.bool)
        start = labelled[:, 1 : 1 + t] & rows
        for k, out in rollout(head, frozen, feats, tokens, rows, depth, own):
            true = tokens[:, k + 1 : k + 1 + t]
            guess = true.clone()  # rows no draft starts from: never counted
            guess[start] = head.to_target_ids(frozen.logits(head, out[start]).argmax(-1))
            guesses.append(guess)
            has = start & labelled[:, k + 1 : k + 1 + t]
            ok = ok & (guess == true)
            hits[k] += float((ok & has).sum())
            counted[k] += float(has.sum())
    acceptance = hits / np.maximum(counted, 1)
    conditional = [acceptance[0]] + [acceptance[k] / acceptance[k - 1] if acceptance[k - 1]
                                     else 0.0 for k in range(1, depth)]
    return {"acceptance": [round(float(a), 4) for a in acceptance],
            "conditional": [round(float(c), 4) for c in conditional],
            "positions": [int(c) for c in counted],
            "mean_accepted": round(1.0 + float(acceptance.sum()), 3)}


__all__ = ["IGNORE", "EagleResult", "EagleSettings", "evaluate", "save", "train"]
