"""What earlier runs wrote, for suffix decoding's global tree: one file per model in the cache.

Each line is one run's output: `{"run": label, "tokens": [...]}`, oldest first. The file is
bounded (MAX_TOKENS by default): the oldest runs are dropped when a new one would pass it.
A file that does not parse is set aside (renamed `.corrupt`) and a new one begun, with one
line saying so; a run is never stopped by its memory.

Outputs of one model only: token ids mean nothing to another tokenizer, so the file is named
by the model and its vocabulary size.

Lanes of one window, and other processes (a `specviz run` beside the window), share the file:
a run is saved under a lock file beside it (filelock, the lock huggingface_hub and pip's
tooling use), and what others saved since this memory last read the file is taken in first,
so a rewrite that drops the oldest runs never drops another lane's newest.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock, Timeout

from ..models import home_dir

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
    # The file's runs when this memory last read or wrote it: a file that differs has been
    # written by another lane or process since.
    _synced: list[Remembered] = field(default_factory=list, repr=False)
    # Runs remembered here that a locked or full file could not take yet, oldest first.
    _pending: list[Remembered] = field(default_factory=list, repr=False)

    @classmethod
    def open(cls, path: Path | None, max_tokens: int = MAX_TOKENS) -> SuffixMemory:
        memory = cls(path, max_tokens)
        if path is not None and path.exists():
            try:  # under the lock: a line being written is not taken for corruption
                with memory._lock():
                    memory._read()
            except Timeout:  # the first save takes in what the file holds by then
                memory.problem = (f"the suffix memory {path.name} stayed locked by another "
                                  "writer; this run begins without it")
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
            where = f" ({exc.filename})" if exc.filename else ""
            self.problem = f"the suffix memory could not be saved: {exc.strerror or exc}{where}"
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

    def _read(self) -> None:
        self.runs = self._saved()
        self._synced = list(self.runs)

    def _saved(self) -> list[Remembered]:
        """The runs in the file ([] if none); a file that does not parse is set aside."""
        if not self.path.exists():
            return []
        try:
            with self.path.open(encoding="utf-8") as f:
                return [_run(json.loads(line)) for line in f if line.strip()]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            aside = self.path.with_suffix(".corrupt")
            try:
                os.replace(self.path, aside)
            except OSError:
                aside = None
            self.problem = (f"the suffix memory {self.path.name} could not be read "
                            f"({type(exc).__name__}); begun anew"
                            + (f", the old file kept as {aside.name}" if aside else ""))
            return []

    def _save(self, appended: list[Remembered] | None) -> None:
        """Append these runs' lines, or (None) write the file anew from `runs`."""
        if appended is not None:
            with self.path.open("a", encoding="utf-8") as f:
                f.writelines(_line(r) for r in appended)
            return
        fd, temp = tempfile.mkstemp(dir=self.path.parent, suffix=".part")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.writelines(_line(r) for r in self.runs)
        os.replace(temp, self.path)


def _run(record: dict) -> Remembered:
    return Remembered(str(record["run"]), [int(t) for t in record["tokens"]])


def _line(run: Remembered) -> str:
    return json.dumps({"run": run.label, "tokens": run.tokens}, separators=(",", ":")) + "\n"


def memory_path(model_name: str, vocab_size: int) -> Path | None:
    """Where this model's memory lives, or None when memory is switched off."""
    if os.environ.get(ENV_OFF, "").lower() in ("off", "0", "no"):
        return None
    digest = hashlib.sha256(f"{model_name}|{vocab_size}".encode()).hexdigest()[:12]
    stem = "".join(c if c.isalnum() or c in "-._" else "_" for c in Path(model_name).stem)
    return home_dir() / "suffix" / f"{stem[:40]}-{digest}.jsonl"


def run_label(text_of: Callable[[list[int]], str] | None, tokens: list[int]) -> str:
    """A run's name in the window: when it ran and how its output began."""
    when = time.strftime("%Y-%m-%d %H:%M")
    start = text_of(tokens[:12]).strip().replace("\n", " ") if text_of else ""
    return f"{when} “{start[:40]}…”" if start else when
