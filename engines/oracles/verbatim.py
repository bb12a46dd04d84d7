"""What the oracles that copy share: the verbatim repeat a guess extends, and auto K's odds on it.

Prompt lookup copies the passage that the context's end repeats; the n-gram cache guesses
the token that followed its n-gram, which, for a guess that an earlier passage backs, is
the same copy by another route. Both report how long that verbatim repeat is
(`match_length`), and a repeat of m tokens gives a copy the same odds whichever oracle
found it, so auto K prices both alike.
"""

from __future__ import annotations

from collections.abc import Sequence

from .base import AutoKHints, Oracle

MAX_MATCH_LENGTH = 64  # match_length looks back no further


def check_sizes(settings) -> None:
    """The n-gram sizes of a copying oracle's settings, in order (else ValueError)."""
    if settings.min_ngram > settings.max_ngram:
        raise ValueError(f"need min n-gram ({settings.min_ngram}) <= max n-gram "
                         f"({settings.max_ngram})")


def verbatim_length(context: Sequence[int], source_end: int, n: int) -> int:
    """How many tokens the context's end repeats verbatim of the text ending at source_end,
    given that the last n agree (the n-gram match), up to MAX_MATCH_LENGTH."""
    length = n
    while (length < MAX_MATCH_LENGTH and source_end - 1 - length >= 0
           and context[source_end - 1 - length] == context[-1 - length]):
        length += 1
    return length


class CopyingOracle(Oracle, AutoKHints):
    """An oracle whose guesses extend a verbatim repeat (subclasses implement match_length)."""

    # Auto K drafts only when it expects 10% over a plain step: its odds are pooled over all
    # the text so far, and copies that held in a summary fail in a math answer, where a failed
    # draft costs several plain steps (docs/auto-k.md).
    min_gain = 0.1

    def draft_limit(self, length: int) -> int | None:
        """2m: a verbatim match of m tokens vouches for about as many more; a longer draft
        after a short match rides on odds learnt on other text, and fails whole."""
        return 2 * length

    def shadow_draft(self, context: Sequence[int], k: int) -> Sequence[int] | None:
        """What `propose` would send: prompt lookup's and the n-gram cache's change nothing."""
        return self.propose(context, k).tokens

    def match_prior(self, length: int) -> float:
        """m/(m+2): the rule of succession over the m-1 tokens the match has gone on after
        its first and the mismatch that bounds it. Laplace's (m+1)/(m+2) is too hopeful for
        copies after short matches (measured: docs/auto-k.md)."""
        return length / (length + 2)
