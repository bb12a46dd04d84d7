"""What earlier runs wrote, for suffix decoding's global tree: one file per model in the cache.

Each line is one run's output: `{"run": label, "tokens": [...]}`, oldest first. The file is
bounded (MAX_TOKENS by default): the oldest runs are dropped when a new one would pass it.
Runs are appended as whole lines and read as far as they are whole (memory_file.py): a torn
last line is dropped, unreadable lines are kept in a numbered copy, each with one line
saying so; a run is never stopped by a memory it cannot read or save (a full disk, a
read-only folder). A path given that is not a memory (a folder, a file of another kind) is
refused with one line and left as it was; the model's own file in the cache, which only
specviz writes, is set aside (copied, numbered) and begun anew instead.

Outputs of one model only: token ids mean nothing to another tokenizer, so the file is named
by the model and its vocabulary size, and its first line names the model and its tokenizer
(`owner_of`): a memory given that names another is refused by that name. One from before
memories named their model is read where its ids fit, saying so; it is named when next
written whole.

Lanes of one window, and other processes (a `specviz run` beside the window), share the file:
a run is saved under a lock file beside it (filelock, the lock huggingface_hub and pip's
tooling use), and what others saved since this memory last read the file is taken in first,
so a rewrite that drops the oldest runs never drops another lane's newest.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock, Timeout

from ..errors import SpecvizError
from ..models import home_dir
from . import memory_file

MAX_TOKENS = 200_000  # about 1,000 answers of 200 tokens: a few MB on disk, ~30 MB in memory
ENV_OFF = "SPECVIZ_SUFFIX_MEMORY"  # "off": no run reads or writes a memory file
LOCK_WAIT_S = 10.0  # another writer holds the file this long at most (a run's one line)


@dataclass
class Remembered:
    label: str  # what the window shows for it: the run's time and its first words
    tokens: list[int]


@dataclass
class SuffixMemory:
    """Earlier runs' outputs, oldest first; saved to `path` (None: kept in this process)."""

    path: Path | None = None
    max_tokens: int = MAX_TOKENS
    runs: list[Remembered] = field(default_factory=list)
    problem: str | None = None  # what went wrong reading it, said once
    owner: dict | None = None  # the model and tokenizer it is of (owner_of); None: unchecked
    # The file's runs when this memory last read or wrote it: a file that differs has been
    # written by another lane or process since.
    _synced: list[Remembered] = field(default_factory=list, repr=False)
    # Runs remembered here that a locked or full file could not take yet, oldest first.
    _pending: list[Remembered] = field(default_factory=list, repr=False)
    # The file held no whole line when last read: an append begins it with its owner line.
    _fresh: bool = field(default=True, repr=False)

    @classmethod
    def open(cls, path: Path | None, max_tokens: int = MAX_TOKENS,
             vocab_size: int | None = None, owner: dict | None = None) -> SuffixMemory:
        """The memory in `path`; SpecvizError (one line) for a path given that is not one,
        or one of another model: naming another `owner`, or (naming none) holding token ids
        past `vocab_size`, which would be drafted past this model's vocabulary. Checked
        before anything is written beside it."""
        memory = cls(path, max_tokens, owner=owner)
        if path is None or not memory._is_memory(vocab_size):
            return memory
        try:  # under the lock: a line being written is not taken for corruption
            with memory._lock():
                memory._read()
        except Timeout:  # the first save takes in what the file holds by then
            memory.problem = (f"the suffix memory {path.name} stayed locked by another "
                              "writer; this run begins without it")
        except OSError:  # no lock file can be made (a read-only folder): read it as it is
            memory._read(repair=False)
        return memory

    def add(self, tokens: list[int], label: str) -> bool:
        """Remember a run's output, dropping the oldest runs past the bound, and save it at
        once (a crash later loses nothing). Whether runs other than this one changed (the
        oldest dropped, or runs another lane or process saved since taken in): a tree built
        from `runs` is then built again."""
        if not tokens:
            return False
        run = Remembered(label, list(tokens)[-self.max_tokens:])
        if self.path is None:
            return self._append(run)
        before = list(self.runs)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._lock():
                return self._save_with(run)
        except Timeout:
            self.problem = (f"the suffix memory {self.path.name} stayed locked by another "
                            "writer; this run is remembered in this process only")
        except OSError as exc:  # a full disk: the run goes on, remembered in this process
            self.problem = (f"the suffix memory could not be saved: {exc.strerror or exc} "
                            f"({exc.filename or self.path})")
        except SpecvizError as exc:  # it was rewritten whole and that failed, or replaced
            self.problem = f"the suffix memory could not be saved: {exc}"
        # As before the attempt, plus the run; saved with the next run that can be.
        changed = self.runs != before
        self.runs = before
        self._pending.append(run)
        changed = self._append(run) or changed
        self._pending = [p for p in self._pending if any(p is r for r in self.runs)]
        return changed

    def take_problem(self) -> str | None:
        """The problem not yet said, once."""
        problem, self.problem = self.problem, None
        return problem

    def truncate(self, n: int) -> None:
        """Forget, in this process, every run after the first `n` (a file keeps them)."""
        del self.runs[n:]
        self._pending = [p for p in self._pending if any(p is r for r in self.runs)]

    def _lock(self) -> FileLock:
        return FileLock(self.path.with_name(self.path.name + ".lock"), timeout=LOCK_WAIT_S)

    def _save_with(self, run: Remembered) -> bool:
        """Under the lock: take in what others saved since, then write this process's unsaved
        runs and `run`. Whether runs other than `run` changed here."""
        saved = self._saved()
        changed = saved != self._synced
        unsaved = [*self._pending, run]
        if changed:
            self.runs = saved + self._pending
        changed = self._append(run) or changed
        self._save(appended=None if changed else unsaved)
        self._synced = list(self.runs)
        self._pending = []
        return changed

    def _append(self, run: Remembered) -> bool:
        """Add a run in this process, dropping the oldest past the bound; whether any was."""
        self.runs.append(run)
        dropped = False
        while sum(len(r.tokens) for r in self.runs) > self.max_tokens:
            self.runs.pop(0)
            dropped = True
        return dropped

    def _is_memory(self, vocab_size: int | None = None) -> bool:
        """Whether the file is there to read. A file that is not a memory is refused when it
        was given, and set aside when it is this model's own in the cache."""
        contents = memory_file.load(self.path)
        if contents is not None:
            self._check_model(contents, vocab_size)
        if contents is None or contents.is_memory:
            return contents is not None
        if self.path.parent != memory_dir():
            raise memory_file.not_a_memory(self.path)
        name = self.path.name
        try:
            kept = memory_file.set_aside(self.path, contents.data)
            self.path.unlink()
        except OSError as exc:  # left as it is: this run neither reads nor saves it
            self.problem = (f"the suffix memory {name} holds no run and could not be set "
                            f"aside ({exc.strerror or exc}); this run begins without it")
            return False
        self.problem = (f"the suffix memory {name} held no run; begun anew, the old file "
                        f"kept as {kept.name}")
        return False

    def _check_model(self, contents: memory_file.Contents, vocab_size: int | None) -> None:
        """Refused where it names another model; one naming none is taken where its ids fit,
        said in a line."""
        if self.owner is not None and contents.owner is not None:
            memory_file.check_owner(self.path, contents, self.owner)
            return
        if vocab_size is not None:
            memory_file.check_vocabulary(self.path, contents, vocab_size)
        if self.owner is not None and contents.records:
            self.problem = (f"the suffix memory {self.path.name} names no model (written "
                            f"before memories did): read as {self.owner.get('model')}'s, its "
                            "token ids fit")

    def _read(self, repair: bool = True) -> None:
        self.runs = self._saved(repair)
        self._synced = list(self.runs)

    def _saved(self, repair: bool = True) -> list[Remembered]:
        """The runs in the file ([] if none). Under the lock (`repair`), a torn or corrupt
        file is made whole again, with one line saying how."""
        contents = memory_file.load(self.path)
        # No whole line to keep (a torn first one is cut off below): the file begins anew.
        self._fresh = contents is None or (contents.owner is None and not contents.records)
        if contents is None:
            return []
        if not contents.is_memory:  # replaced since it was opened: left as it is now
            raise memory_file.not_a_memory(self.path)
        if self.owner is not None:
            memory_file.check_owner(self.path, contents, self.owner)
        if repair:
            self.problem = memory_file.repair(self.path, contents) or self.problem
        return [Remembered(label, tokens) for label, tokens in contents.records]

    def _save(self, appended: list[Remembered] | None) -> None:
        """Append these runs' lines, or (None) write the file anew from `runs`, named."""
        if appended is not None:
            first = memory_file.owner_line(self.owner) if self._fresh else b""
            memory_file.append(self.path, first + b"".join(_line(r) for r in appended))
        else:
            memory_file.rewrite(self.path, memory_file.owner_line(self.owner)
                                + b"".join(_line(r) for r in self.runs))


def _line(run: Remembered) -> bytes:
    return memory_file.line(run.label, run.tokens)


# Text whose ids differ between tokenizers that differ: words, code, digits, accents, CJK.
TOKENIZER_PROBE = ("The quick brown fox jumps over the lazy dog. def mean(values):\n"
                   "    return sum(values) / len(values)  # 1234567890 émigré naïve 日本語")


def owner_of(target) -> dict:
    """Whose memory a backend's runs make: its model file's name and a fingerprint of its
    tokenizer (the ids it gives a probe text, and its vocabulary's size), the same on
    llama.cpp and transformers for one model."""
    ids = target.tokenize(TOKENIZER_PROBE, False)
    digest = hashlib.sha256(json.dumps([target.n_vocab, ids]).encode()).hexdigest()[:16]
    return {"model": Path(target.model_path).name, "tokenizer": digest}


def memory_dir() -> Path:
    """Where each model's memory lives (a file there is specviz's own)."""
    return home_dir() / "suffix"


def memory_path(model_name: str, vocab_size: int) -> Path | None:
    """Where this model's memory lives, or None when memory is switched off."""
    if os.environ.get(ENV_OFF, "").lower() in ("off", "0", "no"):
        return None
    digest = hashlib.sha256(f"{model_name}|{vocab_size}".encode()).hexdigest()[:12]
    stem = "".join(c if c.isalnum() or c in "-._" else "_" for c in Path(model_name).stem)
    return memory_dir() / f"{stem[:40]}-{digest}.jsonl"


def run_label(text_of: Callable[[list[int]], str] | None, tokens: list[int]) -> str:
    """A run's name in the window: when it ran and how its output began."""
    when = time.strftime("%Y-%m-%d %H:%M")
    start = text_of(tokens[:12]).strip().replace("\n", " ") if text_of else ""
    return f"{when} “{start[:40]}…”" if start else when
