"""The final hidden states (the LM head's input) of a transformers backend's forwards, kept on
request for oracles with heads on the target (Medusa)."""

from __future__ import annotations


class HiddenRows:
    """The LM head's input rows of the latest forward, caught by a hook on the head.

    The head sees exactly the rows the logits are computed for, so row i belongs to the
    position `start + i`. Rows past a cache rollback are dropped.
    """

    def __init__(self) -> None:
        self._hook = None
        self._armed = False  # only the backend's own forwards count, not oracles' head calls
        self._caught = None
        self._rows = None  # (n, hidden) tensor
        self._start = 0

    def enable(self, head, on: bool) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        self._rows = self._caught = None
        if on and head is not None:
            self._hook = head.register_forward_pre_hook(self._catch)

    def _catch(self, _module, args) -> None:
        if self._armed:
            self._caught = args[0]

    def arm(self) -> None:
        """A forward of the backend begins."""
        self._armed, self._caught = self._hook is not None, None

    def took(self, start: int) -> None:
        """That forward ended; its logit rows begin at context position `start`."""
        if self._caught is not None:
            self.put(self._caught[0].detach(), start)
        self._armed, self._caught = False, None

    def put(self, rows, start: int) -> None:
        """Keep `rows` (n, hidden), row i the head's input at position `start + i`."""
        self._rows, self._start = rows, start

    def cut(self, n: int) -> None:
        """The cache now holds only positions < n."""
        if self._rows is not None:
            keep = n - self._start
            self._rows = self._rows[:keep] if keep > 0 else None

    def select(self, rows: list[int]) -> None:
        """A masked forward's rows are nodes: keep the kept chain's, in chain order."""
        if self._rows is not None:
            self._rows = self._rows[rows] if rows else None

    def at(self, position: int):
        i = position - self._start
        if self._rows is None or not 0 <= i < len(self._rows):
            return None
        return self._rows[i]
