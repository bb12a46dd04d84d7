"""Prompt lookup decoding / inference with reference.

Find the most recent earlier occurrence of the context's last n tokens (n from `max_ngram`
down to `min_ngram`) in the prompt and the text so far, and propose the tokens that
followed it (or the first occurrence, `earliest=True`: what transformers' and the original
prompt-lookup decoding copy). Each copied token carries the span it was copied from, so
the GUI can link it back to its source.

An index maps every n-gram to the position right after its latest (or first) occurrence, updated
incrementally as the context grows, so a lookup costs O(max_ngram) whatever the length.
"""

from __future__ import annotations

from collections.abc import Sequence

from .base import BuildParts, Proposal, RunContext
from .verbatim import CopyingOracle, check_sizes, verbatim_length


class PromptLookupOracle(CopyingOracle):
    name = "prompt-lookup"
    source = "prompt"

    def __init__(self, earliest: bool = False, **settings) -> None:
        super().__init__(**settings)
        check_sizes(self.settings)
        self.earliest = earliest  # copy after the first occurrence instead of the latest
        self._index: dict[tuple[int, ...], int] = {}
        self._indexed = 0  # context positions whose n-grams are in the index

    def start(self, run: RunContext) -> None:
        """The prompt is indexed here, with the run's prompt processing (as the n-gram
        cache counts it), not at a timed step's first lookup."""
        super().start(run)
        self._index.clear()
        self._indexed = 0
        self._extend_index(run.prompt_ids)

    def settings_changed(self, old) -> None:
        check_sizes(self.settings)
        self._index.clear()  # n-gram sizes changed: rebuild lazily
        self._indexed = 0

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        found = self._find(context)
        if found is None:
            return Proposal(source=self.source)
        start, n = found
        tokens = list(context[start : start + k])
        spans = [self._span(i) for i in range(start, start + len(tokens))]
        details = [f"{n}-gram match" for _ in tokens]
        return Proposal(tokens, self.source, spans=spans, details=details)

    def match_length(self, context: Sequence[int]) -> int | None:
        found = self._find(context)
        if found is None:
            return 0
        start, n = found
        return verbatim_length(context, start, n)

    def _find(self, context: Sequence[int]) -> tuple[int, int] | None:
        """(where the copy starts, n-gram size) of the longest n-gram match, or None."""
        self._extend_index(context)
        sizes = self.settings
        for n in range(min(sizes.max_ngram, len(context) - 1), sizes.min_ngram - 1, -1):
            start = self._index.get(tuple(context[-n:]))
            if start is not None and start < len(context):
                return start, n
        return None

    def _extend_index(self, context: Sequence[int]) -> None:
        # Index n-grams that end before the last token: the suffix itself must not match
        # itself, and its continuation would be empty anyway.
        for end in range(self._indexed, len(context) - 1):
            for n in range(self.settings.min_ngram, self.settings.max_ngram + 1):
                if end + 1 < n:
                    continue
                key = tuple(context[end + 1 - n : end + 1])
                if not (self.earliest and key in self._index):
                    self._index[key] = end + 1
        self._indexed = max(self._indexed, len(context) - 1)

    def _span(self, i: int):
        return self.run.span(i, i + 1) if self.run else None


def build(parts: BuildParts) -> PromptLookupOracle:
    return PromptLookupOracle(**parts.settings)
