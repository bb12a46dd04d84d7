"""The prompts the target answers for `specviz advise`, by kind.

Kept small, since the target writes every answer: code edits are specviz's own
(assets/prompts/code-edit-*.txt), prose and chat a few Spec-Bench questions
(benchmarks/prompts/spec_bench_dev.jsonl): prose from its writing, humanities, summarization,
roleplay and stem categories, chat from question answering, translation, reasoning, extraction
and math. The person's own files are each a kind of their own, named by the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from ..bounded_json import JSONProblem, loads
from ..corpus import bundled_prompts, read_prompts
from ..errors import SpecvizError
from ..text_file import read_text

KINDS = ("code", "prose", "chat")
PER_KIND = 3
SPEC_BENCH = "benchmarks/prompts/spec_bench_dev.jsonl"
# Spec-Bench categories, in the order their first questions are taken.
CATEGORIES = {
    "prose": ("writing", "humanities", "summarization", "roleplay", "stem"),
    "chat": ("qa", "translation", "reasoning", "extraction", "math_reasoning"),
}


@dataclass(frozen=True)
class PromptSet:
    kind: str
    prompts: tuple[str, ...]


def parse_kinds(text: str) -> list[str]:
    """"code,prose" -> ["code", "prose"]; ValueError naming the kinds there are."""
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    wrong = [k for k in kinds if k not in KINDS]
    if wrong or not kinds:
        raise ValueError(f"takes prompt kinds from {', '.join(KINDS)} (comma-separated), "
                         f"got {text!r}")
    return list(dict.fromkeys(kinds))


def bundled_sets(kinds: list[str], per_kind: int = PER_KIND) -> tuple[list[PromptSet], list[str]]:
    """Each kind's prompts, and one line for each kind that has none here."""
    sets, problems = [], []
    for kind in kinds:
        try:
            prompts = code_prompts(per_kind) if kind == "code" else spec_bench_prompts(
                CATEGORIES[kind], per_kind)
        except SpecvizError as exc:
            problems.append(f"no {kind} prompts: {exc}")
            continue
        if prompts:
            sets.append(PromptSet(kind, tuple(prompts)))
        else:
            problems.append(f"no {kind} prompts here")
    return sets, problems


def code_prompts(n: int) -> list[str]:
    return read_prompts(sorted(bundled_prompts().glob("code-edit-*.txt"))[:n])


def spec_bench_prompts(categories: tuple[str, ...], n: int,
                       path: Path | None = None) -> list[str]:
    """The first questions of each category in turn (one of each, then a second of each...),
    n in all: first turns only."""
    path = path or Path(str(files("specviz").joinpath(SPEC_BENCH)))
    if not path.is_file():
        raise SpecvizError(f"{SPEC_BENCH} is not installed here (give --prompts FILE)")
    by_category: dict[str, list[str]] = {c: [] for c in categories}
    for number, line in enumerate(read_text(path, "prompts", allow_empty=True).splitlines(), 1):
        try:
            record = loads(line) if line.strip() else {}
        except JSONProblem as exc:
            raise SpecvizError(f"{path}, line {number}: {exc}") from None
        turns = record.get("turns") if isinstance(record, dict) else None
        if record.get("category") in by_category and isinstance(turns, list) and turns:
            by_category[record["category"]].append(str(turns[0]))
    chosen: list[str] = []
    for round_ in range(n):
        for category in categories:
            if len(chosen) < n and round_ < len(by_category[category]):
                chosen.append(by_category[category][round_])
    return chosen


def file_sets(paths: list[Path]) -> tuple[list[PromptSet], list[str]]:
    """One kind per file or folder, named by it; a file with no prompt is one line, the others
    still count. A path that does not exist stops everything (a typo, not an empty set)."""
    sets, problems, names = [], [], set()
    for path in paths:
        if not path.exists():
            raise SpecvizError(f"prompts not found: {path}")
        prompts = read_prompts([path])
        if not prompts:
            problems.append(f"{path} holds no prompt: left out")
            continue
        name, n = path.stem or path.name, 2
        while name in names:  # two files of one name: both kept, told apart
            name, n = f"{path.stem}-{n}", n + 1
        names.add(name)
        sets.append(PromptSet(name, tuple(prompts)))
    return sets, problems
