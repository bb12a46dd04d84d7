"""An event read back (a trace, an engine's stream) holds the types its fields declare.

Events are rebuilt from JSON by keyword, so a field of another type (a string as the step, a
list as a probability) would be taken in and fail wherever it is drawn or summed, as a
traceback far from the file. Checked once here against the dataclasses' own annotations, it
is one line naming the field.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from typing import Any

NoneType = type(None)


def wrong_field(value: Any, kind: Any = None, where: str = "") -> str | None:
    """Where `value` (a dataclass instance, when `kind` is None) is not of its declared
    types, and how: "timing.draft_ms is 'x', not float"; None where it is."""
    kind = type(value) if kind is None else kind
    if dataclasses.is_dataclass(kind):
        if not isinstance(value, kind):
            return _said(where, value, kind.__name__)
        for name, hint in _hints(kind).items():
            wrong = wrong_field(getattr(value, name), hint, f"{where}{name}")
            if wrong:
                return wrong
        return None
    return _wrong_plain(value, kind, where)


def _wrong_plain(value: Any, kind: Any, where: str) -> str | None:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if any(wrong_field(value, each, where) is None for each in args):
            return None
        return _said(where, value, " or ".join(_name(each) for each in args))
    if origin is tuple:
        if not isinstance(value, tuple):
            return _said(where, value, "a list")
        each = args[0]
        return next((wrong for i, item in enumerate(value)
                     if (wrong := wrong_field(item, each, f"{where}[{i}]"))), None)
    if kind is float:
        ok = type(value) in (int, float) and math.isfinite(value)
    else:
        ok = kind is Any or type(value) is kind  # bool is no int here, as in JSON
    return None if ok else _said(where, value, _name(kind))


@functools.cache
def _hints(kind: type) -> dict[str, Any]:
    return typing.get_type_hints(kind)


def _name(kind: Any) -> str:
    if kind is NoneType:
        return "null"
    if typing.get_origin(kind) is tuple:
        return "a list"
    return getattr(kind, "__name__", str(kind))


def _said(where: str, value: Any, wanted: str) -> str:
    shown = repr(value)
    shown = shown if len(shown) <= 40 else f"{shown[:37]}..."
    return f"{where or 'the record'} is {shown}, not {wanted}"
