"""What a stored cost profile must hold before anything prices a step with it.

A profile is a JSON file in the cache that anyone can edit, copy from another version or
truncate. One of the wrong shape is never used: a string among its timings would raise deep
inside auto K, a NaN or negative cost would choose every K by nonsense, an empty axis would
divide by zero. `problem` names the first thing wrong, in words, for the one line that says
why the profile is measured again (or not used).
"""

from __future__ import annotations

import math
from itertools import pairwise

NEEDED = ("version", "model", "backend", "device", "threads", "contexts", "batches", "ms")


def problem(data: object, version: int) -> str:
    """"" for a profile of the shape `Profile` takes at `version` (or later); else what is
    wrong with it."""
    if not isinstance(data, dict):
        return f"it holds a JSON {type(data).__name__}, not an object"
    missing = [key for key in NEEDED if key not in data]
    if missing:
        return f"it has no {missing[0]!r}"
    return (_version(data["version"], version) or _labels(data) or _axes(data)
            or _table(data["ms"], len(data["contexts"]), len(data["batches"])) or _extras(data))


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _version(value: object, current: int) -> str:
    if not _whole(value):
        return f"its version is {value!r}, not a whole number"
    if value < current:
        return f"it was measured by an older specviz (version {value}, now {current})"
    return ""


def _labels(data: dict) -> str:
    for key in ("model", "backend", "device"):
        if not isinstance(data[key], str):
            return f"its {key} is {data[key]!r}, not text"
    if data.get("dtype") is not None and not isinstance(data["dtype"], str):
        return f"its dtype is {data['dtype']!r}, not text"
    threads = data["threads"]
    if threads is not None and not (_whole(threads) and threads >= 1):
        return f"its threads are {threads!r}, not a count"
    return ""


def _axes(data: dict) -> str:
    for key in ("contexts", "batches"):
        axis = data[key]
        if not isinstance(axis, list) or not axis:
            return f"its {key} are {axis!r}, not a list of lengths"
        if not all(_whole(n) and n >= 1 for n in axis):
            return f"its {key} hold {_first_bad(axis)!r}, not a positive whole number"
        if any(b <= a for a, b in pairwise(axis)):
            return f"its {key} are not in increasing order"
    return ""


def _first_bad(axis: list) -> object:
    return next(n for n in axis if not (_whole(n) and n >= 1))


def _table(ms: object, rows: int, columns: int) -> str:
    """A row of timings per context, a cost per batch size, each a finite positive number
    of milliseconds (a forward pass takes time)."""
    if not isinstance(ms, list) or len(ms) != rows:
        return "its table of timings does not match its contexts"
    for row in ms:
        if not isinstance(row, list) or len(row) != columns:
            return "its table of timings does not match its batch sizes"
        for cost in row:
            if isinstance(cost, bool) or not isinstance(cost, (int, float)):
                return f"its timings hold {cost!r}, not a number"
            if not math.isfinite(cost) or cost <= 0:
                return f"its timings hold {cost!r}, not a positive time"
    return ""


def _extras(data: dict) -> str:
    """The optional fields, where present, of their types."""
    if "repeats" in data and not (_whole(data["repeats"]) and data["repeats"] >= 1):
        return f"its repeats are {data['repeats']!r}, not a count"
    if "machine" in data and not isinstance(data["machine"], dict):
        return "its machine is not an object"
    rows = data.get("small_rows", [])
    if not isinstance(rows, list) or not all(_whole(n) for n in rows):
        return f"its small_rows are {rows!r}, not a list of row counts"
    if not isinstance(data.get("busy", ""), str):
        return f"its busy mark is {data['busy']!r}, not text"
    timed = data.get("timed", [])
    if timed and _table(timed, len(data["contexts"]), len(data["batches"])):
        return "its table as timed does not match its sizes"
    counted = data.get("timed_threads")
    if counted is not None and not (_whole(counted) and counted >= 1):
        return f"its timed_threads are {counted!r}, not a count"
    if not isinstance(data.get("young", False), bool):
        return f"its young mark is {data['young']!r}, not true or false"
    created = data.get("created", 0.0)
    if isinstance(created, bool) or not isinstance(created, (int, float)):
        return f"its created time is {created!r}, not a number"
    return ""
