"""What earlier runs wrote, for suffix decoding's global tree: one file per model in the cache.

Each line is one run's output: `{"run": label, "tokens": [...]}`, oldest first. The file is
bounded (MAX_TOKENS by default): the oldest runs are dropped when a new one would pass it.
A file that does not parse is set aside (renamed `.corrupt`) and a new one begun, with one
line saying so; a run is never stopped by its memory.

Outputs of one model only: token ids mean nothing to another tokenizer, so the file is named
by the model and its vocabulary size.
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

from ..models import home_dir

MAX_TOKENS = 200_000  # about 1,000 answers of 200 tokens: a few MB on disk, ~30 MB in memory
ENV_OFF = "SPECVIZ_SUFFIX_MEMORY"  # "off": no run reads or writes a memory file


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

    @classmethod
    def open(cls, path: Path | None, max_tokens: int = MAX_TOKENS) -> SuffixMemory:
        memory = cls(path, max_tokens)
        if path is not None and path.exists():
            memory._read()
        return memory

    def add(self, tokens: list[int], label: str) -> list[Remembered]:
        """Remember a run's output (dropping the oldest runs past the bound); the runs
        dropped. Saved at once, so a crash later loses nothing."""
        if not tokens:
            return []
        self.runs.append(Remembered(label, list(tokens)[-self.max_tokens:]))
        dropped = []
        while sum(len(r.tokens) for r in self.runs) > self.max_tokens:
            dropped.append(self.runs.pop(0))
        if self.path is not None:
            self._save(appended=not dropped)
        return dropped

    def _read(self) -> None:
        try:
            with self.path.open(encoding="utf-8") as f:
                for line in f:
                    if line.strip():
                        record = json.loads(line)
                        self.runs.append(Remembered(str(record["run"]),
                                                    [int(t) for t in record["tokens"]]))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self.runs.clear()
            aside = self.path.with_suffix(".corrupt")
            try:
                os.replace(self.path, aside)
            except OSError:
                aside = None
            self.problem = (f"the suffix memory {self.path.name} could not be read "
                            f"({type(exc).__name__}); begun anew"
                            + (f", the old file kept as {aside.name}" if aside else ""))

    def _save(self, appended: bool) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if appended:
                with self.path.open("a", encoding="utf-8") as f:
                    f.write(_line(self.runs[-1]))
                return
            fd, temp = tempfile.mkstemp(dir=self.path.parent, suffix=".part")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.writelines(_line(r) for r in self.runs)
            os.replace(temp, self.path)
        except OSError as exc:  # a full disk: the run goes on, remembered in this process
            self.problem = f"the suffix memory could not be saved: {exc.strerror or exc}"


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
