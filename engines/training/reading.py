"""Training text the target reads instead of writes: one forward pass per chunk of a file.

Writing costs the target a forward pass per token; reading a chunk of text costs one pass for
the whole chunk, which on a CPU is several times more positions per second. What the heads
learn there is still the target's own behaviour: every position is labelled with the token
the target itself would choose next (its greedy choice given the text before), not with the
text's next token. The text only supplies contexts, as EAGLE's fixed training set does.

A chunk becomes an `Answer` whose prompt is its first token and whose `choices` hold the
target's choices, so both kinds of heads train on it as on a written answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
import torch

from ..backends.hf import TransformersBackend
from ..backends.hf_features import LayerInputHooks
from ..corpus import read_prompts
from ..errors import SpecvizError
from ..medusa.heads import lm_head_of
from ..text_file import read_text
from .answers import Answer, split

SUFFIXES = (".py", ".md", ".rst", ".txt", ".jsonl")  # what a folder is searched for
CHUNK = 256  # tokens a chunk: longer than a training window, short enough to batch
MIN_CHUNK = 32  # a file's tail shorter than this is left unread


def text_files(paths: Iterable[Path]) -> list[Path]:
    """The readable files among `paths` and the folders in them (searched recursively); a
    file named itself must be text (in a folder, one that is not is passed over)."""
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found += sorted(p for p in path.rglob("*") if p.suffix in SUFFIXES and p.is_file())
        elif path.is_file():
            if path.suffix != ".jsonl":
                read_text(path, "text to read")
            found.append(path)
        else:
            raise SpecvizError(f"text to read not found: {path}")
    return found


def chunks(target: TransformersBackend, files: Sequence[Path], tokens: int, size: int,
           seed: int = 0) -> list[list[int]]:
    """Token chunks of `size` (a text's last one may be shorter) from files taken in a seeded
    order, until `tokens` tokens; files that are not UTF-8 text are skipped. A .jsonl file is
    a prompt corpus (`corpus.read_prompts`): each prompt is a text."""
    out: list[list[int]] = []
    left = tokens
    for i in np.random.default_rng(seed).permutation(len(files)):
        for text in _texts(files[i]):
            ids = target.tokenize(text, add_special=False)
            for s in range(0, len(ids), size):
                piece = ids[s : s + size][:left]
                if len(piece) >= MIN_CHUNK:
                    out.append(piece)
                    left -= len(piece)
            if left <= 0:
                return out
    return out


def _texts(path: Path) -> list[str]:
    try:
        if path.suffix == ".jsonl":
            return read_prompts([path])
        return [path.read_text(encoding="utf-8")]
    except (OSError, UnicodeDecodeError, SpecvizError):
        return []


def prompt_pieces(answers: Sequence[Answer], held_out: float, seed: int,
                  size: int = CHUNK) -> list[list[int]]:
    """Chunks of the prompts of the answers training will use (`train.split` with the same
    share and seed), so the held-out answers' prompts stay unseen; each prompt once, however
    many answers it has."""
    train_set, _ = split(answers, held_out, seed)
    prompts = list(dict.fromkeys(tuple(a.prompt) for a in train_set))
    return [list(p[s : s + size]) for p in prompts for s in range(0, len(p), size)
            if len(p[s : s + size]) >= MIN_CHUNK]


def read(target: TransformersBackend, pieces: Sequence[list[int]], layers: Sequence[int] | None,
         batch: int = 8, on_tokens: Callable[[int], None] | None = None) -> list[Answer]:
    """The target reads each piece once: its LM head's input rows, the given layers' inputs
    and its greedy choice at every position but the last."""
    answers: list[Answer] = []
    order = sorted(range(len(pieces)), key=lambda i: len(pieces[i]))  # batches of one length
    for s in range(0, len(order), batch):
        group = [pieces[i] for i in order[s : s + batch]]
        answers += _read_batch(target, group, layers)
        if on_tokens:
            on_tokens(sum(len(p) for p in group))
    return answers


def _read_batch(target: TransformersBackend, pieces: list[list[int]],
                layers: Sequence[int] | None) -> list[Answer]:
    model = target.model
    width = max(len(p) for p in pieces)
    ids = torch.zeros(len(pieces), width, dtype=torch.long)
    for b, p in enumerate(pieces):
        ids[b, : len(p)] = torch.tensor(p)  # right-padded: a causal model's rows before the
        # padding do not see it
    caught: list[torch.Tensor] = []
    hook = lm_head_of(model).register_forward_pre_hook(
        lambda _m, args: caught.append(args[0].float().cpu()))
    forwards: list[torch.Tensor] = []  # what entered `layers`, (B, n, 3H)
    layer_rows = LayerInputHooks(model, layers, lambda joined: forwards.append(
        joined.half().cpu())) if layers else None
    try:
        with torch.inference_mode():
            logits = model(input_ids=ids.to(target.device), use_cache=False).logits
            choices = logits.argmax(-1).cpu()
    finally:
        hook.remove()
        if layer_rows:
            layer_rows.close()
    hidden = caught[0]
    features = torch.cat(forwards, dim=1) if layer_rows else None
    answers = []
    for b, p in enumerate(pieces):
        n = len(p) - 1  # rows that have a next token in the piece
        answers.append(Answer(hidden[b, :n].clone(), list(p[1:]), [p[0]],
                              None if features is None else features[b, :n].clone(),
                              choices[b, :n].tolist()))
    return answers


__all__ = ["CHUNK", "chunks", "prompt_pieces", "read", "text_files"]
