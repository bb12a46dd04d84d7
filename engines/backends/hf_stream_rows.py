"""Each stream's hidden states in a batch of streams, for oracles with heads on the target.

Medusa's heads read the LM head's input at the position before a stream's pending token;
an EAGLE head reads the chosen layers' inputs at every position of its stream. A batched
pass holds every stream's rows side by side, padded, each at its own positions: they are
caught on the batch's own passes (hooks held for that pass only, so a head's own use of the
LM head, another lane's forwards or a batch that is never closed leave nothing behind) and
handed to each stream's store, the HiddenRows and LayerFeatures a single sequence keeps,
which a rollback or a stream leaving cuts as the cache is cut.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from .hf_features import LayerFeatures, LayerInputHooks
from .hf_hidden import HiddenRows


@dataclass(frozen=True)
class PassRows:
    """Where a batched pass put each stream's tokens: row r is stream streams[r], its
    tokens at positions starts[r].. (lens[r] of them, then padding)."""

    streams: Sequence[int]
    starts: Sequence[int]
    lens: Sequence[int]
    all_rows: bool  # logits for every token; else for each row's last only


class StreamRows:
    """What each stream's oracle asked to keep (`keep_hidden`, `keep_features`) and what the
    batch's passes gave it."""

    def __init__(self) -> None:
        self._hidden: dict[int, HiddenRows] = {}
        self._features: dict[int, LayerFeatures] = {}
        self._layers: tuple[int, ...] = ()

    @property
    def wanted(self) -> bool:
        return bool(self._hidden or self._features)

    def keep_hidden(self, stream: int, on: bool) -> None:
        self._hidden.pop(stream, None)
        if on:
            self._hidden[stream] = HiddenRows()

    def hidden_at(self, stream: int, position: int):
        store = self._hidden.get(stream)
        return None if store is None else store.at(position)

    def keep_features(self, stream: int, layer_ids: Sequence[int] | None) -> None:
        self._features.pop(stream, None)
        if not layer_ids:
            return
        layers = tuple(int(i) for i in layer_ids)
        if self._features and layers != self._layers:
            raise ValueError(f"the batch's streams read layers {self._layers}, not {layers}: "
                             "every stream's head must read the same")
        self._layers = layers
        self._features[stream] = LayerFeatures()

    def features(self, stream: int, start: int, end: int):
        store = self._features.get(stream)
        return None if store is None else store.rows(start, end)

    def cut(self, stream: int, n: int) -> None:
        """Stream `stream` now holds only positions < n."""
        for stores in (self._hidden, self._features):
            if stream in stores:
                stores[stream].cut(n)

    def clear(self) -> None:
        """A new batch: nothing kept, what was asked still asked."""
        for stream in self._hidden:
            self._hidden[stream] = HiddenRows()
        for stream in self._features:
            self._features[stream] = LayerFeatures()

    @contextmanager
    def catching(self, model, rows: PassRows) -> Iterator[None]:
        """Around one batched pass of `model`: its rows to the streams that asked."""
        if not self.wanted:
            yield
            return
        caught: dict[str, object] = {}
        hooks = []
        if self._hidden:
            hooks.append(model.get_output_embeddings().register_forward_pre_hook(
                lambda _module, args: caught.__setitem__("hidden", args[0])))
        layer_hooks = (LayerInputHooks(model, self._layers, lambda t: caught.__setitem__(
            "features", t)) if self._features else None)
        try:
            yield
        finally:
            for hook in hooks:
                hook.remove()
            if layer_hooks is not None:
                layer_hooks.close()
        self._hand_out(caught, rows)

    def _hand_out(self, caught: dict, rows: PassRows) -> None:
        for r, (s, start, n) in enumerate(zip(rows.streams, rows.starts, rows.lens)):
            hidden, features = caught.get("hidden"), caught.get("features")
            if s in self._hidden and hidden is not None:
                self._hidden[s].put(*_head_rows(hidden, r, start, n, rows.all_rows))
            if s in self._features and features is not None:
                self._features[s].put(features[r, :n].detach(), start)


def _head_rows(hidden, r: int, start: int, n: int, all_rows: bool):
    """Row r's part of what the LM head read, (rows, width, hidden) for every token or
    (rows, 1, hidden) for each row's last, and the position its first row sits at."""
    if all_rows:
        return hidden[r, :n].detach(), start
    return hidden[r, -1:].detach(), start + n - 1
