"""Text to tokens at a fixed boundary: what oracles that think in text propose to the target.

An oracle that guesses *text* (heuristic rules, a draft model with another tokenizer) must hand
the target tokens that continue the context exactly where it ends. Tokenizing the new text
alone goes wrong at the seam (SentencePiece adds a leading space; byte-level BPE would merge
differently), so, as Hugging Face's universal assisted generation does, a lookbehind window
of the context's last few tokens is tokenized together with the new text and the tokens that
cover the window are dropped. A probe character after the text shows which final token is
complete: a token that would merge with what comes next is not proposed.

Everything is checked in bytes: the proposed tokens spell exactly a prefix of the new text.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

LOOKBEHIND = 4  # context tokens re-encoded with the new text
PROBE = "x"  # a word character: tokens that would grow into a following word are dropped


class Vocabulary(Protocol):
    def tokenize(self, text: str, add_special: bool = True) -> list[int]: ...
    def token_bytes(self, token_id: int) -> bytes: ...
    def is_special(self, token_id: int) -> bool: ...


@dataclass(frozen=True)
class Continuation:
    """Tokens that continue the context, and where each one ends in the new text (bytes)."""

    tokens: list[int]
    ends: list[int]


def complete_prefix(data: bytes) -> bytes:
    """The longest prefix of `data` that does not end inside a UTF-8 character."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    decoder.decode(data, final=False)
    return data[: len(data) - len(decoder.getstate()[0])]


def window_start(vocab: Vocabulary, context: Sequence[int], lookbehind: int) -> int:
    """Index where the lookbehind window begins: no special tokens, starts on a character."""
    start = len(context)
    while start > 0 and len(context) - start < lookbehind:
        if vocab.is_special(context[start - 1]):
            break
        start -= 1
    # A window starting inside a multi-byte character cannot be decoded: reach back to the
    # character's first byte (a few tokens at most), else give up on the window.
    while (0 < start < len(context) and _starts_mid_char(vocab.token_bytes(context[start]))
           and not vocab.is_special(context[start - 1]) and len(context) - start < 4 * lookbehind):
        start -= 1
    while start < len(context) and _starts_mid_char(vocab.token_bytes(context[start])):
        start += 1
    return start


def continue_tokens(vocab: Vocabulary, context: Sequence[int], new: bytes,
                    lookbehind: int = LOOKBEHIND, probe: str = PROBE) -> Continuation:
    """Target tokens spelling a prefix of `new` after `context`, aligned at the seam."""
    start = window_start(vocab, context, lookbehind)
    window = b"".join(vocab.token_bytes(t) for t in context[start:])
    body = complete_prefix(window + new)
    if len(body) <= len(window):
        return Continuation([], [])
    found = _split(vocab, body, len(window), probe)
    if found is None and window:  # a token spans the seam: try the new text on its own
        found = _split(vocab, body[len(window):], 0, probe)
    return found or Continuation([], [])


def _split(vocab: Vocabulary, body: bytes, seam: int, probe: str) -> Continuation | None:
    """Tokenize body + probe; keep the tokens between the seam and the end of the body."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    ids = vocab.tokenize(text + probe, add_special=False)
    spelled = [vocab.token_bytes(t) for t in ids]
    full = b"".join(spelled)
    shift = len(full) - len(body) - len(probe.encode("utf-8"))  # a SentencePiece prefix space
    if shift < 0 or not full[shift:].startswith(body):
        return None
    pos, tokens, ends = -shift, [], []
    for tok, piece in zip(ids, spelled):
        begin, pos = pos, pos + len(piece)
        if pos <= seam:
            continue  # covers the window
        if begin < seam:
            return None  # spans the seam
        if pos > len(body):
            break  # grows into the probe: incomplete
        tokens.append(tok)
        ends.append(pos - seam)
    return Continuation(tokens, ends)


def _starts_mid_char(piece: bytes) -> bool:
    return bool(piece) and 0x80 <= piece[0] < 0xC0


class ContextText:
    """The context's text as bytes, grown incrementally: the rendered prompt (control tokens
    spelled out, as the prompt text has them) followed by the generated tokens' bytes."""

    def __init__(self, prompt_text: str, n_prompt: int,
                 token_bytes: Callable[[int], bytes]) -> None:
        self._token_bytes = token_bytes
        self._seen = n_prompt  # context tokens whose bytes are in `data`
        self.data = prompt_text.encode("utf-8")

    def update(self, context: Sequence[int]) -> bytes:
        """Bytes of `context`, which extends the last one (the session only appends)."""
        if len(context) < self._seen:
            raise ValueError("the context shrank: start a new run")
        if len(context) > self._seen:
            self.data += b"".join(self._token_bytes(t) for t in context[self._seen:])
            self._seen = len(context)
        return self.data
