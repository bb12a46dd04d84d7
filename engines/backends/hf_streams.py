"""A batch of streams on transformers: a row of one KV cache per stream, one forward a step.

The cache is a DynamicCache whose batch dimension is the streams that hold cells (a stream
gets a row at its first tokens and loses it when it leaves), so a row's keys are its own
stream's only. A step pads every stream's new tokens to the widest's and runs one forward:
explicit position ids (a stream's own: its length, then on), and a 4D additive mask by which
each new token sees its own row's valid cells and, causally, its own new tokens (a padding
slot sees only itself, so no row of the softmax is empty). Keys are stored already rotated
to their stream's positions, so a row's cells need not lie side by side: padding, a
rollback and a leaving stream only mark cells invalid (`_valid`, rows × columns).

Memory: every pass adds the step's width of columns to every row, so holes (padding, guesses
rolled back) build up. Columns no row holds are cut off the end at once (a rollback of every
stream's guesses, the common case, costs nothing), and a row's cells are moved to its front
once the columns are more than twice the fullest row's cells (and some): the copy is then
paid at most once per as many appended columns as it moves, and the cache stays within about
twice what its fullest stream holds, times the streams in it. A stream that leaves gives its
row up at once. Streams run on the eager forward (a compiled backend's static cache is one
sequence's).

A stream's oracle sees the target through a view of its own (StreamTarget, made with the
batch's, BatchTarget, by TransformersBackend.stream_targets): an early exit drafts on its
stream's cells of its batch's cache, copied for the first layers, not on the backend's own
single-sequence cache; heads (Medusa, EAGLE) read the stream's own rows of the batch's
passes (hf_stream_rows.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

from .hf_stream_rows import PassRows, StreamRows
from .stream_cache import StreamCache

SLACK = 32  # columns of holes always tolerated before a compaction (a few steps' worth)
PAD_TOKEN = 0  # what a padding slot feeds (it is masked out of every other slot)


class HFStreams(StreamCache):
    def __init__(self, backend, n_streams: int) -> None:  # a TransformersBackend
        super().__init__(n_streams, backend.n_ctx)
        from transformers import DynamicCache

        self._backend = backend
        self._torch = backend._torch
        self._new_cache = DynamicCache
        self._cache = None
        self._rows: list[int] = []  # the streams holding a row, in the cache's batch order
        self._valid = None  # (rows, columns) bool: which cells each row's stream holds
        self.rows = StreamRows()  # the hidden states the streams' heads read (BatchTarget's)

    @property
    def columns(self) -> int:
        return 0 if self._valid is None else int(self._valid.shape[1])

    # ------------------------------------------------------------ a pass

    def _forward(self, parts: dict[int, list[int]], all_rows: bool) -> dict[int, np.ndarray]:
        torch, backend = self._torch, self._backend
        backend._follow_free_cores()
        for s in parts:
            if s not in self._rows:
                self._add_row(s)
        streams = sorted(parts, key=self._rows.index)  # in row order
        idx = [self._rows.index(s) for s in streams]
        whole = idx == list(range(len(self._rows)))
        n_cols, width = self.columns, max(len(t) for t in parts.values())
        dev = backend.device
        lens = torch.tensor([len(parts[s]) for s in streams], device=dev)
        ids = torch.full((len(streams), width), PAD_TOKEN, dtype=torch.long, device=dev)
        for r, s in enumerate(streams):
            ids[r, :len(parts[s])] = torch.tensor(parts[s], dtype=torch.long, device=dev)
        starts = [self._lengths[s] for s in streams]
        start = torch.tensor(starts, device=dev)
        slots = torch.arange(width, device=dev)
        positions = start[:, None] + slots[None, :]
        real = slots[None, :] < lens[:, None]  # (rows, width): a stream's token, not padding
        # Which cells each new slot sees: its row's valid cells, then its own earlier tokens.
        causal = slots[None, :] <= slots[:, None]
        sees_new = (causal[None] & real[:, None, :]) | torch.eye(width, dtype=torch.bool,
                                                                  device=dev)[None]
        valid = self._valid[idx] if n_cols else torch.zeros((len(idx), 0), dtype=torch.bool,
                                                             device=dev)
        sees_old = valid[:, None, :].expand(-1, width, -1)
        allowed = torch.cat([sees_old, sees_new], dim=2)[:, None]
        dtype = backend._dtype
        mask = torch.zeros(allowed.shape, dtype=dtype, device=dev)
        mask.masked_fill_(~allowed, torch.finfo(dtype).min)
        if self._cache is None:  # the first pass, or every stream had left: all rows in it
            self._cache = self._new_cache()
        cache = self._cache if whole else self._sub_cache(idx)
        keep = 0 if all_rows else (lens - 1)[:, None]
        caught = PassRows(streams, starts, [len(parts[s]) for s in streams], all_rows)
        with torch.inference_mode(), self.rows.catching(backend.model, caught):
            out = backend.model(input_ids=ids, position_ids=positions, attention_mask=mask,
                                use_cache=True, logits_to_keep=keep,
                                **{backend._cache_kw: cache})
        if whole:
            self._valid = torch.cat([valid, real], dim=1)
            self._compact_if_holey()
        else:
            self._merge(cache, idx, real, width)
        logits = out.logits.float().cpu().numpy()
        if not all_rows:
            return {s: logits[r, -1:] for r, s in enumerate(streams)}
        return {s: logits[r, :len(parts[s])] for r, s in enumerate(streams)}

    def _add_row(self, stream: int) -> None:
        """A row of no valid cells for `stream`, at the end of the batch."""
        torch = self._torch
        self._rows.append(stream)
        if self._cache is None:
            return
        for layer in self._cache.layers:
            for name in ("keys", "values"):
                t = getattr(layer, name)
                setattr(layer, name, torch.cat([t, t.new_zeros((1, *t.shape[1:]))]))
        self._valid = torch.cat([self._valid, self._valid.new_zeros((1, self.columns))])

    def _sub_cache(self, idx: list[int]):
        """A cache of the rows `idx` only (a copy), for a pass over some of the streams."""
        rows = self._torch.tensor(idx, device=self._backend.device)
        return self._new_cache(ddp_cache_data=[
            (layer.keys.index_select(0, rows), layer.values.index_select(0, rows))
            for layer in self._cache.layers])

    def _merge(self, sub, idx: list[int], real, width: int) -> None:
        """Write a pass over rows `idx` back: every row grows by the pass's `width` columns,
        valid only in the rows that took tokens."""
        torch = self._torch
        rows = torch.tensor(idx, device=self._backend.device)
        for layer, new in zip(self._cache.layers, sub.layers):
            for name in ("keys", "values"):
                t = getattr(layer, name)
                grown = torch.cat([t, t.new_zeros((*t.shape[:2], width, t.shape[3]))], dim=2)
                grown.index_copy_(0, rows, getattr(new, name))
                setattr(layer, name, grown)
        valid = torch.cat([self._valid, self._valid.new_zeros((len(self._rows), width))], 1)
        valid[rows, -width:] = real
        self._valid = valid
        self._compact_if_holey()

    # ------------------------------------------------------------ rollback and leaving

    def _truncate(self, stream: int, n: int) -> None:
        self.rows.cut(stream, n)
        if stream not in self._rows or self._cache is None:
            return
        row = self._rows.index(stream)
        if n == 0:
            self._remove_row(row)
            return
        valid = self._valid[row]
        valid &= valid.cumsum(0) <= n
        self._cut_tail()

    def _remove_row(self, row: int) -> None:
        torch = self._torch
        del self._rows[row]
        if not self._rows:
            self._cache = self._valid = None
            return
        keep = torch.tensor([r for r in range(len(self._rows) + 1) if r != row],
                            device=self._backend.device)
        for layer in self._cache.layers:
            layer.keys = layer.keys.index_select(0, keep)
            layer.values = layer.values.index_select(0, keep)
        self._valid = self._valid.index_select(0, keep)
        self._cut_tail()

    def _cut_tail(self) -> None:
        """Drop the last columns no row holds (a view: nothing is copied)."""
        held = self._valid.any(0).nonzero()
        end = int(held[-1]) + 1 if len(held) else 0
        if end < self.columns:
            for layer in self._cache.layers:
                layer.keys = layer.keys[:, :, :end]
                layer.values = layer.values[:, :, :end]
            self._valid = self._valid[:, :end]
        self._compact_if_holey()

    def _compact_if_holey(self) -> None:
        """Move each row's cells to its front once the holes are over half the columns."""
        if self._valid is None:
            return
        fullest = int(self._valid.sum(1).max())
        if self.columns <= 2 * fullest + SLACK:
            return
        torch = self._torch
        # A stable sort on "not valid" lists each row's cells first, in their order.
        order = torch.argsort((~self._valid).to(torch.int8), dim=1, stable=True)[:, :fullest]
        for layer in self._cache.layers:
            for name in ("keys", "values"):
                t = getattr(layer, name)
                at = order[:, None, :, None].expand(-1, t.shape[1], -1, t.shape[3])
                setattr(layer, name, torch.gather(t, 2, at))
        self._valid = torch.gather(self._valid, 1, order)

    # ------------------------------------------------------------ a stream's first layers

    @contextmanager
    def first_layers(self, stream: int, n_layers: int
                     ) -> Iterator[Callable[[list[int]], np.ndarray]]:
        """TransformersBackend.first_layers on stream `stream`'s cells: its early-exit
        drafting on its own context. Its first layers' cells are copied into a cache of
        its own for the draft (one copy a proposal, as long as the stream's context), which
        is dropped after: the batch's cache is as before."""
        torch, backend = self._torch, self._backend
        cache = self._new_cache()
        if stream in self._rows and self._cache is not None:
            row = self._rows.index(stream)
            cols = self._valid[row].nonzero()[:, 0]
            cache = self._new_cache(ddp_cache_data=[
                (layer.keys[row:row + 1, :, cols], layer.values[row:row + 1, :, cols])
                for layer in self._cache.layers[:n_layers]])
        config, start, fed = backend.early_exit_decoder().config, self._lengths[stream], 0

        def step(tokens: list[int]) -> np.ndarray:
            nonlocal fed
            backend._follow_free_cores()
            dev = backend.device
            ids = torch.tensor([tokens], dtype=torch.long, device=dev)
            positions = torch.arange(start + fed, start + fed + len(tokens), device=dev)
            full, config.num_hidden_layers = config.num_hidden_layers, n_layers
            try:
                with torch.inference_mode():
                    out = backend.model(input_ids=ids, position_ids=positions[None],
                                        use_cache=True, logits_to_keep=1,
                                        **{backend._cache_kw: cache})
            finally:
                config.num_hidden_layers = full
            fed += len(tokens)
            return out.logits[0, -1].float().cpu().numpy()

        yield step

    def close(self) -> None:
        self._cache = self._valid = None
        self._rows = []


class BatchTarget:
    """The target as one batched run sees it: the backend, whose `stream_cache` this run's
    streams' views (StreamTarget) then draft on. A run of its own: two batches stepped by
    turns on one backend (a run and its baseline) each keep their streams apart."""

    def __init__(self, backend) -> None:
        self._backend = backend
        self.streams: HFStreams | None = None
        self.rows = StreamRows()  # asked for by the streams' oracles as they are built

    def __getattr__(self, name: str):
        return getattr(self._backend, name)

    def stream_cache(self, n_streams: int) -> HFStreams:
        self.streams = self._backend.stream_cache(n_streams)
        self.rows.clear()
        self.streams.rows = self.rows
        return self.streams


class StreamTarget:
    """The target as one stream of a batch sees it, for that stream's oracle: the backend in
    all but `first_layers` (early exit), which drafts on the stream's own cells in its
    batch's cache (on the backend's own cache before the batch has one), and the hidden
    states heads read (Medusa, EAGLE), the stream's own rows of the batch's passes."""

    def __init__(self, batch: BatchTarget, stream: int) -> None:
        self._batch = batch
        self.stream = stream

    def __getattr__(self, name: str):
        return getattr(self._batch, name)

    @contextmanager
    def first_layers(self, n_layers: int) -> Iterator[Callable[[list[int]], np.ndarray]]:
        streams = self._batch.streams
        if streams is None:
            with self._batch.first_layers(n_layers) as step:
                yield step
            return
        with streams.first_layers(self.stream, n_layers) as step:
            yield step

    def keep_hidden(self, on: bool = True) -> None:
        self._batch.rows.keep_hidden(self.stream, on)

    def hidden_at(self, position: int):
        return self._batch.rows.hidden_at(self.stream, position)

    def keep_features(self, layer_ids) -> None:
        self._batch.rows.keep_features(self.stream, layer_ids)

    def features(self, start: int, end: int):
        return self._batch.rows.features(self.stream, start, end)
