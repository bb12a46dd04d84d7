"""Incremental detokenisation that never splits a UTF-8 character.

Byte-level BPE pieces are not always valid UTF-8 on their own (an emoji can span three
tokens). The stream keeps the incomplete tail bytes until the character completes, so each
token's text piece is exactly what it adds to the visible text.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable


class TextStream:
    """Feed token ids, get the text each one completes ('' while a character is pending)."""

    def __init__(self, token_bytes: Callable[[int], bytes], skip: Callable[[int], bool]):
        self._token_bytes = token_bytes
        self._skip = skip  # control tokens (EOS, end-of-turn) print as nothing
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.text = ""

    def push(self, token_id: int) -> str:
        if self._skip(token_id):
            return ""
        piece = self._decoder.decode(self._token_bytes(token_id))
        self.text += piece
        return piece

    def flush(self) -> str:
        """Whatever is left at the end (an incomplete character becomes U+FFFD)."""
        piece = self._decoder.decode(b"", final=True)
        self.text += piece
        return piece

    def fork(self) -> TextStream:
        """A copy with the same text and pending bytes, to render tokens that may be rolled
        back."""
        other = TextStream(self._token_bytes, self._skip)
        other._decoder.setstate(self._decoder.getstate())
        other.text = self.text
        return other
