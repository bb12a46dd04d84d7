"""Reusable Qt widgets that draw step events; they never touch a model runtime.

Names are imported on first use, so `specviz.board.palette` stays importable without Qt.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_HOMES = {
    "KControl": "k_control",
    "LaneGraphs": "graphs",
    "Legend": "token_view",
    "StepInspector": "inspector",
    "THEMES": "palette",
    "Theme": "palette",
    "TokenView": "token_view",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_HOMES[name]}", __name__), name)
