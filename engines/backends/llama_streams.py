"""A batch of streams on llama.cpp: a sequence id per stream in one context of its own.

The context is made on the target's loaded weights with one sequence id per stream and one
cache of cells the streams share (kv_unified); a step is one llama_decode of every stream's
tokens, each at its own positions in its own sequence, split at the batch size where the
streams together ask for more.
"""

from __future__ import annotations

import numpy as np

from .stream_cache import StreamCache, batch_rows


class LlamaStreams(StreamCache):
    def __init__(self, target, n_streams: int) -> None:  # a LlamaBackend
        super().__init__(n_streams, target.n_ctx)
        self._ctx = target.share(n_seq=n_streams)

    def _forward(self, parts: dict[int, list[int]], all_rows: bool) -> dict[int, np.ndarray]:
        rows = batch_rows(parts, self._lengths, all_rows)
        out: dict[int, list[np.ndarray]] = {s: [] for s in parts}
        size = self._ctx.batch_size
        for start in range(0, len(rows), size):
            chunk = rows[start:start + size]
            streams, tokens, positions, want = zip(*chunk)
            self._ctx.decode_rows(tokens, positions, streams, want)
            for i, (s, *_, wanted) in enumerate(chunk):
                if wanted:  # a copy: the next decode writes over llama.cpp's buffer
                    out[s].append(self._ctx.logits_row(i).copy())
        return {s: np.stack(r) for s, r in out.items()}

    def _truncate(self, stream: int, n: int) -> None:
        self._ctx.remove_cells(stream, n)

    def close(self) -> None:
        self._ctx.close()
