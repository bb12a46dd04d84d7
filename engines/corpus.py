"""Prompts read from files: what the target answers when heads are trained or a pair is
checked. Text files hold one prompt each; .jsonl files one per line (Spec-Bench's first turn,
or a "prompt" or "text" field); folders hold either."""

from __future__ import annotations

from collections.abc import Iterable
from importlib.resources import files
from pathlib import Path

from .bounded_json import JSONProblem, loads
from .errors import SpecvizError
from .text_file import read_text

PAIR_PROMPTS = ("code-edit-scale.txt", "summarise-article.txt", "chat-explain.txt")


def pair_prompts() -> list[str]:
    """What a pair check asks the target by default: a code edit, a summary, a chat answer."""
    return read_prompts([bundled_prompts() / name for name in PAIR_PROMPTS])


def bundled_prompts() -> Path:
    """The prompts that ship with specviz (code edits, summaries, chat, translation)."""
    return Path(str(files("specviz").joinpath("assets/prompts")))


def read_prompts(paths: Iterable[Path]) -> list[str]:
    """Prompts from .jsonl files (Spec-Bench: each question's first turn; or a "prompt" or
    "text" field), text files (one prompt each) and folders of those."""
    prompts: list[str] = []
    for path in paths:
        path = Path(path)
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.suffix in (".txt", ".md", ".jsonl"))
            prompts += read_prompts(files)
        elif path.suffix == ".jsonl":
            prompts += _jsonl_prompts(path)
        else:
            text = _read(path).strip()
            if text:
                prompts.append(text)
    return prompts


def _read(path: Path) -> str:
    return read_text(path, "corpus file", allow_empty=True)


def _jsonl_prompts(path: Path) -> list[str]:
    out = []
    for n, line in enumerate(_read(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = loads(line)
        except JSONProblem as exc:
            raise SpecvizError(f"{path}, line {n}: {exc}") from None
        record = record if isinstance(record, dict) else {}
        turns = record.get("turns")
        text = turns[0] if isinstance(turns, list) and turns else (
            record.get("prompt") or record.get("text"))
        if not isinstance(text, str):
            raise SpecvizError(f"{path}, line {n}: no \"turns\", \"prompt\" or \"text\" field")
        out.append(text)
    return out
