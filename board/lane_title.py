"""What a replayed or exported lane is called: its oracle once, and its K or auto K.

Traces are usually named for their oracles (`specviz export none.jsonl prompt-lookup.jsonl
race.html`), so a title that always added the file's name said the oracle twice. The name is
kept where it says something the oracle does not (two prompt-lookup traces of other runs).
No Qt here: the page export and the window's replay both title lanes this way.
"""

from __future__ import annotations

from typing import Any

from ..engines.oracles import is_plain

PLAIN_WORDS = "plain decoding"


def oracle_words(oracle: str) -> str:
    """An oracle's name as a title writes it: "prompt lookup", "plain decoding"."""
    return PLAIN_WORDS if is_plain(oracle) else oracle.replace("-", " ").replace("_", " ")


def k_words(oracle: str, k: Any, auto_k: bool) -> str | None:
    """"auto K", "K=4", or None where K means nothing (plain decoding, a trace without K)."""
    if is_plain(oracle):
        return None
    if auto_k:
        return "auto K"
    return None if k is None else f"K={k}"


def lane_title(oracle: str, k: Any, auto_k: bool, stem: str = "") -> str:
    """The title of a lane that ran `oracle` from a file named `stem` (no suffix)."""
    words = oracle_words(oracle)
    title = ", ".join(part for part in (words, k_words(oracle, k, auto_k)) if part)
    return title if says_nothing_more(stem, oracle, words) else f"{title} · {stem}"


def says_nothing_more(stem: str, oracle: str, words: str) -> bool:
    """Whether a file's name only repeats its oracle ("prompt-lookup", "Prompt_Lookup",
    "plain" for plain decoding)."""
    said = {_squeezed(oracle), _squeezed(words), *(("plain",) if is_plain(oracle) else ())}
    return not stem or _squeezed(stem) in said


def _squeezed(text: str) -> str:
    """Case, dashes, underscores and spaces aside: the words a name spells."""
    return " ".join(text.lower().replace("-", " ").replace("_", " ").split())
