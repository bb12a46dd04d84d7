"""The rule for traces shown side by side (a replay, a shot, an export): one prompt.

A race compares the lanes' speed on the same work; traces of different prompts would show a
speedup that compares different texts, so they are refused, naming the first pair that differs.
No Qt here: the export page's check is this one too.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from ..engines.errors import SpecvizError


class HasHeader(Protocol):
    path: Path
    header: dict


def check_one_prompt(traces: Iterable[HasHeader]) -> None:
    """SpecvizError unless every trace ran the same prompt. A trace whose header could not be
    read (an empty header) takes no part: its own problem is said where it is shown."""
    readable = [trace for trace in traces if trace.header]
    for other in readable[1:]:
        if other.header.get("prompt") != readable[0].header.get("prompt"):
            raise SpecvizError(f"{readable[0].path} and {other.path} ran different prompts: a "
                               "race needs one prompt (replay or export them one at a time)")
