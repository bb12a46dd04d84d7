"""What `specviz pair` measured of a draft for a target, kept for auto K.

`pair` finds each draft position's acceptance (teacher-forced over the target's own answers)
before any speculative run. Auto K starts from it instead of guessing: it does not explore a
draft whose measured odds cannot pay on this machine, and its per-position estimates begin at
the measured odds rather than at 1/2. Kept per target and draft, as named, in the cache; a
file of another shape is ignored (auto K then guesses, as without one).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from ..atomic import write_text
from ..bounded_json import loads
from ..errors import SpecvizError
from ..models import home_dir


def _stem(model: str) -> str:
    name = Path(model).name if ("/" in model or "\\" in model) else model
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:100]


def path_for(target: str, draft: str) -> Path:
    return home_dir("cache") / "pairs" / f"{_stem(target)}--{_stem(draft)}.json"


def remember(target: str, draft: str, by_position: list[float | None],
             answer_tokens: int) -> str | None:
    """Keep the measured acceptance; the problem in one line where it cannot be kept."""
    odds = _leading(by_position)
    if not odds:
        return None
    path = path_for(target, draft)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps({"by_position": odds, "answer_tokens": answer_tokens}))
    except (OSError, SpecvizError) as exc:
        return f"the pair's acceptance was not kept for auto K ({exc})"
    return None


def acceptance(target: str, draft: str) -> list[float] | None:
    """Each draft position's measured acceptance, from the first; None where not measured."""
    try:
        data = loads(path_for(target, draft).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    odds = data.get("by_position") if isinstance(data, dict) else None
    return _leading(odds) or None if isinstance(odds, list) else None


def _leading(values: list) -> list[float]:
    """The positions measured, up to the first that was not (or is not a probability)."""
    odds = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                math.isfinite(value) and 0 <= value <= 1):
            break
        odds.append(float(value))
    return odds
