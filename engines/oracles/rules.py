"""Heuristic rules: readable guesses about code, no model at all.

The rules (text_rules.py) work on the context's text; their guess is turned into the
target's tokens at the context's end (retokenize.py) and each token carries the name of the
rule that wrote its first byte, so the GUI shows it on hover and the bench counts acceptance
per rule. The language the idioms follow is guessed once per run from the prompt.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..backends.base import Backend
from ..errors import SpecvizError
from ..events import DECLINE_RULE
from .base import BuildParts, Oracle, Proposal, RunContext
from .retokenize import ContextText, complete_prefix, continue_tokens
from .text_rules import guess, guess_language


class RulesOracle(Oracle):
    name = "rules"
    source = "rule"

    def __init__(self, target: Backend | None) -> None:
        super().__init__()
        if target is None:
            raise SpecvizError("the rules oracle needs the target model (its tokenizer)")
        self.target = target
        self.language = "text"
        self._text: ContextText | None = None

    def start(self, run: RunContext) -> None:
        super().start(run)
        self.language = guess_language(run.prompt_text)
        self._text = ContextText(run.prompt_text, len(run.prompt_ids), self.target.token_bytes)

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        data = self._text.update(context)
        head = complete_prefix(data)
        if len(head) < len(data):
            # The context ends inside a character: rules read whole characters.
            return Proposal(source=self.source, declined=DECLINE_RULE)
        found = guess(head.decode("utf-8", errors="replace"), self.language)
        if not found.pieces:
            return Proposal(source=self.source)
        cont = continue_tokens(self.target, context, found.text.encode("utf-8"))
        tokens = cont.tokens[:k]
        starts = [0, *cont.ends[: len(tokens) - 1]]
        details = [_rule_at(found.pieces, start) for start in starts]
        return Proposal(tokens, self.source, details=details)


def _rule_at(pieces: tuple[tuple[str, str], ...], offset: int) -> str:
    """The rule whose text holds byte `offset` of the guess."""
    end = 0
    for name, text in pieces:
        end += len(text.encode("utf-8"))
        if offset < end:
            return name
    return pieces[-1][0]


def build(parts: BuildParts) -> RulesOracle:
    return RulesOracle(parts.target)
