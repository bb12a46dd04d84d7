"""The target's greedy answers to a prompt set, written once and kept; and each draft
model's agreement with them (its teacher-forced pass), kept the same way.

Greedy speculative decoding emits exactly what plain greedy decoding emits, so every
candidate is judged on the same answers. They are kept in the cache (`advise/`), one JSON
file per model, backend and prompt set, named by a hash of what decides them: the model file
(path, size, modification time), the backend, device and dtype, the token budget, the chat
template's use and the prompts. A file that cannot be read back is written again.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from ..atomic import write_text
from ..backends.base import Backend
from ..bounded_json import loads
from ..errors import SpecvizError
from ..models import home_dir
from ..pair.acceptance import Answer, target_answers

FORMAT = 1
Progress = Callable[[int, int], None]


def folder() -> Path:
    return home_dir("cache") / "advise"


def model_stamp(path: str | os.PathLike[str]) -> list:
    """What changes when the model does: each file's name, size and modification time."""
    path = Path(path)
    items = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
    stamp = []
    for item in items:
        try:
            stat = item.stat()
        except OSError:
            continue
        stamp.append([str(item.resolve()), stat.st_size, stat.st_mtime_ns])
    return stamp


def cache_path(target: Backend, prompts: Sequence[str], max_tokens: int, chat: bool) -> Path:
    facts = [FORMAT, model_stamp(target.model_path), target.name, target.device, target.dtype,
             max_tokens, chat, list(prompts)]
    key = hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:16]
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(target.model_path).name)[:80]
    return folder() / f"answers--{stem}--{target.name}--{key}.json"


def answers(target: Backend, prompts: Sequence[str], max_tokens: int, chat: bool = True,
            on_progress: Progress | None = None,
            say: Callable[[str], None] = lambda _: None) -> tuple[list[Answer], bool]:
    """(the answers, whether they came from the cache): read back, or written now and kept."""
    path = cache_path(target, prompts, max_tokens, chat)
    kept = read(path, say)
    if kept is not None:
        return kept, True
    written = target_answers(target, prompts, max_tokens, chat, on_progress)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps({"format": FORMAT, "answers": [_to_dict(a) for a in written]}))
    except (OSError, SpecvizError) as exc:
        say(f"the target's answers were not kept ({exc}); the next advice writes them again")
    return written, False


def read(path: Path, say: Callable[[str], None] = lambda _: None) -> list[Answer] | None:
    """The answers kept in `path`; None where there are none or they cannot be read (then
    `say` is told why they are written again)."""
    try:
        data = loads(path.read_text(encoding="utf-8"))
        if data.get("format") != FORMAT:
            raise ValueError(f"format {data.get('format')!r}")
        return [_from_dict(a) for a in data["answers"]]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        say(f"the kept answers in {path} cannot be read ({exc}); writing them again")
        return None


def agreement_path(draft: Backend, answers: Sequence[Answer], cross: bool) -> Path:
    """Where a draft's agreement with these answers is kept: the draft's files, backend and
    dtype, and the answers' own tokens, name it."""
    facts = [FORMAT, model_stamp(draft.model_path), draft.name, draft.dtype, cross,
             [[a.prompt_ids, a.ids] for a in answers]]
    key = hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:16]
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(draft.model_path).name)[:80]
    return folder() / f"agreement--{stem}--{key}.json"


def kept_agreement(path: Path, answers: Sequence[Answer]) -> list[list[bool]] | None:
    """Per answer, per token: the draft's guess held (None where not kept, or not whole)."""
    try:
        agree = loads(path.read_text(encoding="utf-8"))["agree"]
        rows = [[bool(x) for x in row] for row in agree]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if [len(r) for r in rows] != [len(a.ids) for a in answers]:
        return None
    return rows


def keep_agreement(path: Path, rows: Sequence[Sequence[bool]],
                   say: Callable[[str], None] = lambda _: None) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps({"agree": [[int(x) for x in r] for r in rows]}))
    except (OSError, SpecvizError) as exc:
        say(f"the draft's agreement was not kept ({exc})")


def _to_dict(a: Answer) -> dict:
    return {"prompt_text": a.prompt_text, "prompt_ids": a.prompt_ids, "ids": a.ids,
            "verify_ms": a.verify_ms, "other_ms": a.other_ms,
            "text": base64.b64encode(a.text).decode("ascii")}


def _from_dict(d: dict) -> Answer:
    ids = [int(t) for t in d["ids"]]
    answer = Answer(str(d["prompt_text"]), [int(t) for t in d["prompt_ids"]], ids,
                    [float(x) for x in d["verify_ms"]], [float(x) for x in d["other_ms"]],
                    base64.b64decode(d["text"], validate=True))
    if not answer.prompt_ids or len(answer.verify_ms) != len(ids):
        raise ValueError("an answer without its prompt or timings")
    return answer
