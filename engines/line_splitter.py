"""Bytes in, lines out, each line bounded: what a peer sends (a `serve` client, a serving
engine's stream) is split without ever holding more than one line's limit of it."""

from __future__ import annotations

TOO_LONG = None  # LineSplitter's stand-in for a line it dropped


class LineSplitter:
    """Bytes in, lines out. A line longer than `limit` comes out once as TOO_LONG and its
    bytes are dropped as they arrive, so a flood never fills memory."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._buffer = bytearray()
        self._dropping = False  # inside a line already reported as too long

    def feed(self, data: bytes) -> list[bytes | None]:
        self._buffer += data
        lines: list[bytes | None] = []
        while (end := self._buffer.find(b"\n")) >= 0:
            line = bytes(self._buffer[:end])
            del self._buffer[:end + 1]
            if self._dropping:
                self._dropping = False
                continue
            lines.append(TOO_LONG if len(line) > self.limit else line)
        if len(self._buffer) > self.limit:
            self._buffer.clear()
            if not self._dropping:
                lines.append(TOO_LONG)
                self._dropping = True
        return lines

    def rest(self) -> bytes:
        """What follows the last newline (a stream's last line, where it has none)."""
        return b"" if self._dropping else bytes(self._buffer)
