"""Spec-Bench questions: a JSONL file of them, read within bounds, and their category groups
(the leaderboard's columns). Below the benchmark and the engine host, which both read them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .bounded_json import JSONProblem, loads
from .errors import SpecvizError
from .text_file import read_text

MT_BENCH = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem",
            "humanities")
GROUPS = {
    **{c: "Multi-turn Conversation" for c in MT_BENCH},
    "translation": "Translation",
    "summarization": "Summarization",
    "qa": "Question Answering",
    "math_reasoning": "Mathematical Reasoning",
    "rag": "Retrieval-aug. Generation",
    "code_edit": "Code Edit",
    "agent_loop": "Agent Loop",  # benchmarks/agent_loop.py: requests that vary earlier ones
}
GROUP_ORDER = tuple(dict.fromkeys(GROUPS.values()))


@dataclass(frozen=True)
class Question:
    question_id: int
    category: str
    turns: tuple[str, ...]

    @property
    def group(self) -> str:
        return GROUPS.get(self.category, self.category)


def load_questions(path: str | Path, categories: Sequence[str] | None = None,
                   limit: int | None = None) -> list[Question]:
    """Questions from a Spec-Bench JSONL file; `limit` applies per category group."""
    questions, taken = [], {}
    lines = read_text(path, "questions", allow_empty=True).splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            d = loads(line)
            q = Question(int(d["question_id"]), str(d["category"]), tuple(d["turns"]))
        except JSONProblem as exc:
            raise SpecvizError(f"{path}, line {number}: {exc}") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise SpecvizError(
                f"{path}, line {number}: not a Spec-Bench question ({exc})") from None
        if categories and q.category not in categories and q.group not in categories:
            continue
        if limit is not None and taken.get(q.group, 0) >= limit:
            continue
        taken[q.group] = taken.get(q.group, 0) + 1
        questions.append(q)
    if not questions:
        raise SpecvizError(f"no questions selected from {path}")
    return questions
