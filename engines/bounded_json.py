"""JSON from files and peers, parsed within bounds: every way a document can fail is one
`JSONProblem` (a ValueError) with a short reason, never another exception.

The standard library's parser recurses once per nesting level: a 2 KB line of a thousand `[`
raises RecursionError, and a line of 100,000 can exhaust the C stack. So the nesting depth is
measured first, by a scan that skips strings, and a document deeper than any specviz writes
is refused before `json.loads` sees it. Numbers are bounded too: an integer of thousands of
digits is refused by Python itself (a ValueError), and a float too large for a double (1e999)
or JSON's non-standard NaN and Infinity are refused here, so no reader meets an infinity it
did not write. orjson bounds depth as well, but at a fixed 1024 levels and with other
differences from the standard parser specviz's writers use; a scan of a few lines keeps one
parser for writing and reading.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from .errors import SpecvizError
from .text_file import read_bytes

MAX_DEPTH = 64  # specviz's deepest document (a trace's tree step) nests 5 levels
SMALL_FILE = 1 << 20  # a config, a cost profile, a store of facts: a few KB each
OPENERS, CLOSERS = b"[{", b"]}"
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)  # one JSON string, escapes and all
_NOT_BRACKETS = bytes(b for b in range(256) if b not in OPENERS + CLOSERS)
_ONE_KIND = bytes.maketrans(b"{}", b"[]")
_STEP = {ord("["): 1, ord("]"): -1}


class JSONProblem(ValueError):
    """Why a document is not the JSON a reader takes, in a few words."""


def loads(data: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """The document's value; JSONProblem where it is not UTF-8, not JSON, nested deeper than
    `max_depth`, or holds a number out of range."""
    if not isinstance(data, str):
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JSONProblem(f"not UTF-8 text (byte {exc.start + 1} is "
                              f"0x{exc.object[exc.start]:02x})") from None
    if too_deep(data, max_depth):
        raise JSONProblem(f"nested more than {max_depth} levels deep")
    try:
        return json.loads(data, parse_float=_finite, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise JSONProblem(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except JSONProblem:
        raise
    except ValueError as exc:  # an integer past Python's digit limit
        raise JSONProblem(f"not JSON specviz reads ({str(exc).split(':')[0]})") from None
    except (RecursionError, MemoryError) as exc:  # the scan's bound makes these unlikely
        raise JSONProblem(f"too large to read ({type(exc).__name__})") from None


def too_deep(text: str, max_depth: int) -> bool:
    """Whether a document nests more than `max_depth` arrays and objects, from its brackets
    outside strings. Where the document is not JSON the count may run high, never low, up
    to where `json.loads` would stop: it refuses only what the parser refuses anyway."""
    if text.count("[") + text.count("{") <= max_depth:  # nearly every line: no scan
        return False
    brackets = _STRING.sub(b"", text.encode("utf-8", "surrogatepass"))
    # Every deepest point of a document is an innermost pair, `[]` once its values are gone:
    # removing those pairs (at C speed) leaves one level less to count in Python.
    inner = brackets.translate(_ONE_KIND, _NOT_BRACKETS).replace(b"[]", b"")
    depth = 0
    for step in map(_STEP.__getitem__, inner):
        depth += step
        if depth >= max_depth:
            return True
    return False


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JSONProblem(f"a number out of range ({_cut(text)})")
    return value


def _no_constant(name: str) -> float:
    raise JSONProblem(f"{name} is not a JSON number")


def _cut(text: str) -> str:
    return text if len(text) <= 24 else f"{text[:21]}..."


def read_json(path: str | Path, what: str, limit: int, max_depth: int = MAX_DEPTH) -> Any:
    """The value of a JSON file of at most `limit` bytes; SpecvizError naming `what` and
    `path` where it cannot be read, is not a regular file, is larger, or is not such JSON."""
    path = Path(path)
    try:
        return loads(read_bytes(path, what, limit), max_depth)
    except JSONProblem as exc:
        raise SpecvizError(f"{what} {path}: {exc}") from None
