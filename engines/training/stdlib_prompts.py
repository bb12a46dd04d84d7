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
import re
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
# A line of Python source as the parser counts lines: ended by \r\n, \r or \n only (a form
# feed, which str.splitlines also splits at, is inside a line).
_LINE = re.compile(r".*?(?:\r\n|\r|\n)|.+", re.S)


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
    lines = _LINE.findall(text)
    for node in public:
        source = source_segment(lines, node)
        if source and LINES[0] <= source.count("\n") + 1 <= LINES[1]:
            functions.append(source)
    doc = (ast.get_docstring(tree) or "").strip()
    docs = [doc] if PROSE_CHARS[0] <= len(doc) <= PROSE_CHARS[1] else []
    return functions, docs


def source_segment(lines: list[str], node: ast.AST) -> str:
    """`ast.get_source_segment(text, node)` from the text's lines (`_LINE`), split once a
    file: it splits the whole text again for every node asked, which was 93% of making 300
    prompts (20 s on a 2-core EPYC). Columns are UTF-8 byte offsets, as the parser gives."""
    first, last = node.lineno - 1, node.end_lineno - 1
    if first == last:
        return lines[first].encode()[node.col_offset:node.end_col_offset].decode()
    head = lines[first].encode()[node.col_offset:].decode()
    tail = lines[last].encode()[:node.end_col_offset].decode()
    return head + "".join(lines[first + 1:last]) + tail
