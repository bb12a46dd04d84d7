"""Build an agent-loop workload from the code-edit prompts: requests that vary earlier ones.

An agent editing code sends request after request that resemble each other: the same file
with another instruction, the same instruction on the next file. Suffix decoding's memory is
meant for this (its paper's agentic workloads). From benchmarks/prompts/code_edit_dev.jsonl
(each a function and an instruction) this writes, for the first FUNCTIONS functions, every
one of INSTRUCTIONS in turn: function 1 with instructions 1, 2, 3, then function 2 with the
same three, and so on. Each request is a question of its own (single turn, Spec-Bench format,
category `agent_loop`), so what links them is only what the oracle remembers.

Usage: python benchmarks/agent_loop.py [--functions 5] [--out FILE.jsonl]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

PROMPTS = Path(__file__).parent / "prompts"
INSTRUCTIONS = (
    "Add type hints to this function. Return the full code.",
    "Add a docstring in Google style to this function and keep the code unchanged. "
    "Return the full code.",
    "Add a comment above each block explaining what it does. Return the full code.",
)


def functions(path: Path) -> list[tuple[str, str]]:
    """(source, the function's code block) of each code-edit request."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        q = json.loads(line)
        _, _, code = q["turns"][0].partition("\n\n```python\n")
        out.append((q["source"], "```python\n" + code))
    return out


def requests(count: int, source: Path = PROMPTS / "code_edit_dev.jsonl") -> list[dict]:
    rows = []
    for f, (where, code) in enumerate(functions(source)[:count]):
        for i, instruction in enumerate(INSTRUCTIONS):
            rows.append({"question_id": 3000 + 10 * f + i, "category": "agent_loop",
                         "source": f"{where}, request {i + 1} of {len(INSTRUCTIONS)}",
                         "turns": [f"{instruction}\n\n{code}"]})
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--functions", type=int, default=5)
    parser.add_argument("--out", type=Path, default=PROMPTS / "agent_loop_dev.jsonl")
    args = parser.parse_args()
    rows = requests(args.functions)
    args.out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    print(f"{len(rows)} requests -> {args.out}")
