"""Training prompts made from Python's own standard library, which every specviz user has.

Heads learn what the target writes, so they need many varied prompts to answer: the dozen
sample prompts give about a thousand tokens of answers, far too few for a head that pays. The
standard library's functions and module documentation, asked about the way people ask (add
type hints, explain, write a test; summarise, explain to a beginner), give hundreds of code
and prose prompts without a download or a licence question. Which functions and which tasks
is fixed by the seed and the Python version, so the answers' cache key stays stable.
"""

from __future__ import annotations

import ast
import sysconfig
from pathlib import Path

import numpy as np

CODE_TASKS = (
    "Add type hints to this function and keep its behaviour:\n\n```python\n{}\n```",
    "Add a docstring to this function:\n\n```python\n{}\n```",
    "Explain what this Python function does, step by step:\n\n```python\n{}\n```",
    "Rewrite this function so it logs its arguments with the logging module:\n\n"
    "```python\n{}\n```",
    "Write pytest unit tests for this function:\n\n```python\n{}\n```",
    "Rename this function's local variables to clearer names:\n\n```python\n{}\n```",
)
PROSE_TASKS = (
    "Summarise this documentation in three sentences:\n\n{}",
    "Explain this to someone new to Python:\n\n{}",
    "Write a short tutorial paragraph based on this text:\n\n{}",
)
SKIP = ("test", "tests", "idlelib", "lib2to3", "site-packages", "dist-packages", "ensurepip",
        "turtledemo", "pydoc_data", "__pycache__")
LINES = (4, 30)  # a function this long makes a prompt; longer ones answer past max_new
PROSE_CHARS = (200, 1500)


def stdlib_prompts(count: int, seed: int = 0, root: Path | None = None) -> list[str]:
    """`count` prompts (fewer if the library's sources are not on this machine), a quarter
    of them prose, in a seeded order."""
    rng = np.random.default_rng(seed)
    files = sorted(_sources(root or Path(sysconfig.get_paths()["stdlib"])))
    code, prose = [], []
    for i in rng.permutation(len(files)):
        if len(code) >= count and len(prose) >= count // 4:
            break
        functions, docs = _pieces(files[i])
        code += functions[:3]  # a few a module: more modules, more variety
        prose += docs
    n_prose = min(len(prose), count // 4)
    picked = [PROSE_TASKS[j % len(PROSE_TASKS)].format(text)
              for j, text in enumerate(prose[:n_prose])]
    picked += [CODE_TASKS[rng.integers(len(CODE_TASKS))].format(source)
               for source in code[: count - n_prose]]
    return [picked[i] for i in rng.permutation(len(picked))]


def _sources(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return [p for p in root.rglob("*.py") if not any(part in SKIP for part in p.parts)]


def _pieces(path: Path) -> tuple[list[str], list[str]]:
    """The module's top-level functions of a prompt's size, and its docstring if it reads
    as prose."""
    try:
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return [], []
    functions = []
    public = (n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
              and not n.name.startswith("_"))
    for node in public:
        source = ast.get_source_segment(text, node)
        if source and LINES[0] <= source.count("\n") + 1 <= LINES[1]:
            functions.append(source)
    doc = (ast.get_docstring(tree) or "").strip()
    docs = [doc] if PROSE_CHARS[0] <= len(doc) <= PROSE_CHARS[1] else []
    return functions, docs
