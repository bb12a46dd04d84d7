"""What the target wrote and read for training, kept on disk: the same corpus, settings and
target give the same file, so a second training run (another kind of head, more steps) starts
from it, and a stopped one goes on from its last batch.

Each function returns the answers and the seconds the target took (None: from the disk).
`bar(desc, total, initial)` makes a progress bar (a context manager with `update(n)`), and
`say` tells the person what is reused; the command line passes tqdm and stderr.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ..errors import SpecvizError
from ..medusa.heads import target_id
from . import answers as ta
from . import reading as rd

Say = Callable[[str], None]


class _NoBar(contextlib.AbstractContextManager):
    def __exit__(self, *_exc) -> None:
        return None

    def update(self, _n: int = 1) -> None:
        pass


def _no_bar(_desc: str, _total: int, _initial: int = 0):
    return _NoBar()


def answers(target, prompts: Sequence[str], settings: ta.TrainSettings, folder: Path,
            reuse: bool, layers=None, bar=_no_bar, say: Say = lambda _: None):
    """The target's answers with their hidden states (and layer features for EAGLE): from the
    disk when the same corpus and settings were run before, else written now and kept (batch
    by batch)."""
    key = ta.answers_key(prompts, settings, target_id(target.model, target.model_path)
                         .fingerprint + f"|{target.dtype}", layers)
    cached = folder / f"answers-{key}.safetensors"
    partial = folder / f"answers-{key}.partial.safetensors"
    if reuse and cached.exists():
        say(f"reusing the target's answers from {cached}")
        return ta.load_answers(cached), None
    resume = ([], 0)
    if reuse and partial.exists():
        resume = (ta.load_answers(partial), ta.prompts_used(partial))
        say(f"going on from {len(resume[0])} answers in {partial}")
    t0 = time.perf_counter()
    done = sum(len(a.tokens) for a in resume[0])
    with bar("target writes", settings.tokens, done) as progress:
        written = ta.generate_answers(
            target, prompts, settings, progress.update, layers, resume,
            lambda so_far, used: ta.save_answers(so_far, partial, used))
    ta.save_answers(written, cached)
    partial.unlink(missing_ok=True)
    return written, round(time.perf_counter() - t0, 1)


def reading(target, files: list[Path], tokens: int, folder: Path, reuse: bool, layers,
            seed: int, bar=_no_bar, say: Say = lambda _: None):
    """Chunks of `files` the target has read (features, hidden rows and its own choices)."""
    if not files:
        return [], None
    stamp = [[str(f), f.stat().st_size] for f in files]

    def pieces():
        got = rd.chunks(target, files, tokens, rd.CHUNK, seed)
        if not got:
            raise SpecvizError("no readable text in --read (UTF-8 files of 32 tokens or more)")
        return got

    return _read_kept(target, ["files", tokens, seed, stamp], pieces, folder, reuse, layers,
                      bar, say)


def prompts_read(target, written: Sequence[ta.Answer], settings: ta.TrainSettings,
                 folder: Path, reuse: bool, layers, bar=_no_bar, say: Say = lambda _: None):
    """The training answers' prompts, read by the target (the held-out ones stay unseen)."""
    facts = ["prompts", [a.prompt for a in written], settings.held_out, settings.seed]
    return _read_kept(target, facts, lambda: rd.prompt_pieces(
        written, settings.held_out, settings.seed), folder, reuse, layers, bar, say)


def _read_kept(target, facts: list, make_pieces, folder: Path, reuse: bool, layers, bar,
               say: Say):
    """What the target reads from `make_pieces()`, kept in `folder` under a key of `facts`
    (with the target, chunk size and layers)."""
    facts = [target_id(target.model, target.model_path).fingerprint, target.dtype, rd.CHUNK,
             layers, *facts]
    key = hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:16]
    cached = folder / f"reading-{key}.safetensors"
    if reuse and cached.exists():
        say(f"reusing the text the target read from {cached}")
        return ta.load_answers(cached), None
    t0 = time.perf_counter()
    pieces = make_pieces()
    if not pieces:
        return [], None
    with bar("target reads", sum(map(len, pieces))) as progress:
        read = rd.read(target, pieces, layers, on_tokens=progress.update)
    ta.save_answers(read, cached)
    return read, round(time.perf_counter() - t0, 1)
