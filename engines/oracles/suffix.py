"""Suffix decoding (Oliaro et al. 2024, arXiv 2411.04975), after Arctic Inference's
`suffix_decoding` and vLLM's `suffix` method: model-free speculation from two trees.

The run's own tree holds its prompt and output; the global tree holds what earlier runs of
the same model wrote (suffix_memory.py: a file in the cache, shared by lanes and sessions,
`memory` 0 opts a lane out). A step that drafts has both trees grow their best speculation
for the context's end (suffix_index.py: a match of m tokens may draft up to
`max_spec_factor` * m + `max_spec_offset` tokens, each at least `min_token_prob` likely,
the speculation a tree or a chain), and the higher score is sent, the run's own on a tie, as
the reference does. Tokens from the run's own text carry their span (linked to the prompt
as prompt lookup's are); tokens from an earlier run are their own kind ("earlier run") and
carry that run's text around them.

With auto K, K comes from the match length as for the other copying oracles (match_length,
read from the index without growing anything; draft_limit), and the tree is cut where its
expected tokens per ms peak (tree_price, as EAGLE's). The candidates are point masses (no
draft distribution): lossless when sampling.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from ..events import DECLINE_AUTO_K, Span
from .base import BuildParts, Proposal, RunContext, TreeProposal
from .registry import MEMORY
from .suffix_index import Speculation, SuffixIndex, seq_end
from .suffix_memory import SuffixMemory, memory_path, owner_of, run_label
from .tree_price import Trust, affordable
from .verbatim import MAX_MATCH_LENGTH, CopyingOracle

SOURCE_RUN, SOURCE_MEMORY = "suffix", "memory"
EXCERPT_TOKENS = 12  # of an earlier run's text each side of a remembered token


class SuffixOracle(CopyingOracle):
    name = "suffix"
    source = SOURCE_RUN
    evidence_decay = 0.02  # as the n-gram cache: how well copies hold varies with the text
    nodes_within_k = True  # K bounds the tokens a speculation holds, as the reference's

    def __init__(self, store: SuffixMemory | None = None,
                 corpus_ids: Sequence[int] | None = None, **settings) -> None:
        super().__init__(**settings)
        self.memory = store if store is not None else SuffixMemory()
        self._corpus = list(corpus_ids or ())
        self._global = self._global_index()
        self._local = SuffixIndex(self.settings.max_depth)
        self._trust = Trust()
        self._passed_over: float | None = None  # the run's own score, where the memory won

    # ------------------------------------------------------------ runs

    def start(self, run: RunContext) -> None:
        super().start(run)
        self._local = SuffixIndex(self.settings.max_depth)
        self._local.add(run.prompt_ids)
        self._trust = Trust()

    def observe(self, context: Sequence[int]) -> None:
        seen = len(self._local.sequences[0]) if self._local.sequences else 0
        if not self._local.sequences:
            self._local.add(context)
        elif len(context) > seen:
            self._local.extend(0, context[seen:])

    def finish(self, context: Sequence[int]) -> None:
        """Remember the run's output for later runs (unless this lane opted out)."""
        if not self.settings.memory or self.run is None:
            return
        output = list(context[len(self.run.prompt_ids):])
        detokenize = self._detokenize()
        if self.memory.add(output, run_label(detokenize, output)):
            self._global = self._global_index()  # runs dropped, or others' runs taken in
        elif output:
            self._global.add(output)

    def notice(self) -> str | None:
        return self.memory.take_problem()

    def snapshot(self) -> int:
        """What the memory holds now (a bench's repeats each start from it)."""
        return len(self.memory.runs)

    def restore(self, runs: int) -> None:
        """Forget the runs remembered since `snapshot` (in this process; a file keeps them)."""
        if len(self.memory.runs) > runs:
            self.memory.truncate(runs)
            self._global = self._global_index()

    def settings_changed(self, old) -> None:
        if self.settings.max_depth != old.max_depth:
            raise ValueError("max_depth is fixed when the oracle is built")

    def _global_index(self) -> SuffixIndex:
        index = SuffixIndex(self.settings.max_depth)
        if self._corpus:
            index.add(self._corpus)
        for run in self.memory.runs:
            index.add(run.tokens)
        return index

    # ------------------------------------------------------------ speculation

    def match_length(self, context: Sequence[int]) -> int | None:
        """How far the context's end repeats, verbatim, the text a copy would continue: from
        the latest place of the longest pattern some token followed, in the run's own text
        or the memory (the run's own on a tie), as prompt lookup measures it; 0: nothing to
        continue. Auto K keys its odds on it. No speculation is grown for it: most steps send
        nothing, and one that does grows it in `propose`. (A tree's own match stops at its
        depth, well before a long copy ends.)"""
        self.observe(context)
        best = 0
        for index in self._indexes():
            m, at = index.longest(context)
            if m:
                seq, end = seq_end(at)
                best = max(best, _verbatim(context, index.sequences[seq], end, m))
        return best

    def draft_limit(self, length: int) -> int | None:
        return min(self._max_tokens(length), self.settings.max_depth - 1)

    def propose(self, context: Sequence[int], k: int) -> Proposal | TreeProposal:
        t0 = time.perf_counter()
        self._trust.judge(context)
        spec, remembered = self._speculation(context)
        # Nodes come likeliest first, each after its parent: any first few form a tree.
        kept = [i for i, n in enumerate(spec.nodes) if _depth(spec, n) <= k][:k]
        if self.price is not None and kept:
            count = affordable([spec.nodes[i].prob for i in kept], self._trust.factor,
                               (time.perf_counter() - t0) * 1e3, len(context), self.price)
            if count == 0:  # declined as the lane drafts: a chain lane never gets a tree
                shape = TreeProposal if self.settings.tree else Proposal
                return shape(source=self.source, declined=DECLINE_AUTO_K)
            kept = kept[:count]
        passed_over = (self._passed_over if remembered or not kept
                       else self._memory_score(context))
        tree = self._tree(spec, kept, remembered, passed_over)
        self._trust.sent(context, tree, sum(tree.p_draft))
        if tree.parents == list(range(-1, len(tree) - 1)):
            # A chain (most copies): verified as a linear draft, which costs less than a
            # tree's masked batch on llama.cpp, and means the same.
            return Proposal(tree.tokens, tree.source, p_draft=tree.p_draft,
                            spans=tree.spans, details=tree.details)
        return tree

    def shadow_draft(self, context: Sequence[int], k: int) -> Sequence[int] | None:
        """The speculation's likeliest chain, up to k tokens (a plain step: no trust kept)."""
        spec, _ = self._speculation(context)
        chain, last = [], -1
        for i, node in enumerate(spec.nodes):  # likeliest first: a node's first child leads
            if node.parent == last and len(chain) < k:
                chain.append(node.token)
                last = i
        return chain

    def _speculation(self, context: Sequence[int]) -> tuple[Speculation, bool]:
        """The better of the two trees' speculations (the run's own on a tie) and whether it
        is the memory's."""
        self.observe(context)
        s = self.settings
        tree = bool(s.tree)
        local = self._local.speculate(context, self._max_tokens, s.min_token_prob, tree,
                                      live=0)
        remembered, self._passed_over = False, None
        if s.memory and self._global.sequences:
            # Only what beats the run's own is looked for: most steps send nothing, and the
            # memory's best below it is asked again only for a proposal's details.
            other = self._global.speculate(context, self._max_tokens, s.min_token_prob, tree,
                                           beat=local.score)
            if other.nodes and other.score > local.score:
                self._passed_over = local.score if local.nodes else None
                local, remembered = other, True
        return local, remembered

    def _indexes(self) -> list[SuffixIndex]:
        """The run's own index, then the memory's where this lane reads it."""
        if self.settings.memory and self._global.sequences:
            return [self._local, self._global]
        return [self._local]

    def _memory_score(self, context: Sequence[int]) -> float | None:
        """The score of the memory's best speculation (None: it has none)."""
        s = self.settings
        if not s.memory or not self._global.sequences:
            return None
        other = self._global.speculate(context, self._max_tokens, s.min_token_prob,
                                       bool(s.tree))
        return other.score if other.nodes else None

    def _max_tokens(self, match: int) -> int:
        s = self.settings
        return max(0, int(match * s.max_spec_factor + s.max_spec_offset + 1e-6))

    def tree_nodes(self) -> int:
        return self.settings.max_depth if self.settings.tree else 0

    # ------------------------------------------------------------ the proposal

    def _tree(self, spec: Speculation, kept: list[int], remembered: bool,
              passed_over: float | None) -> TreeProposal:
        where = "an earlier run" if remembered else "this run"
        tree = TreeProposal(source=SOURCE_MEMORY if remembered else SOURCE_RUN, p_draft=[],
                            details=[], spans=[])
        place = {old: new for new, old in enumerate(kept)}
        # Why this tree and not the other: the reference sends the higher score.
        other = "this run's" if remembered else "earlier runs'"
        why = ("" if passed_over is None else
               f"; chosen over {other} tree, which expected {passed_over:.2f} tokens "
               f"against {spec.score:.2f}")
        for i in kept:
            node = spec.nodes[i]
            tree.tokens.append(node.token)
            tree.parents.append(place[node.parent] if node.parent >= 0 else -1)
            tree.p_draft.append(node.prob)
            tree.details.append(f"{where}: after a {spec.match}-token match seen "
                                f"{spec.occurrences}x, {node.prob:.0%} of them go on so"
                                + (why if i == kept[0] else ""))
            tree.spans.append(self._memory_span(*node.seen_at) if remembered
                              else self._run_span(node.seen_at[1]))
        return tree

    def _run_span(self, i: int) -> Span | None:
        return self.run.span(i, i + 1) if self.run else None

    def _memory_span(self, seq: int, i: int) -> Span:
        tokens = self._global.sequences[seq]
        first = 1 if self._corpus else 0  # the corpus is sequence 0, before the runs
        run = ("corpus" if seq < first else self.memory.runs[seq - first].label)
        detokenize = self._detokenize()
        excerpt = None
        if detokenize is not None:
            before = detokenize(tokens[max(0, i - EXCERPT_TOKENS):i])
            after = detokenize(tokens[i + 1:i + 1 + EXCERPT_TOKENS])
            excerpt = f"{before}«{detokenize([tokens[i]])}»{after}"
        return Span(i, i + 1, run=run, excerpt=excerpt)

    def _detokenize(self):
        text_of = self.run.token_text if self.run else None
        if text_of is None:
            return None
        return lambda ids: "".join(text_of(t) for t in ids)


def _verbatim(context: Sequence[int], source: Sequence[int], end: int, n: int) -> int:
    """How many tokens before `end` in `source` the context's end repeats (at least n)."""
    length = n
    while (length < MAX_MATCH_LENGTH and end - 1 - length >= 0
           and source[end - 1 - length] == context[-1 - length]):
        length += 1
    return length


def _depth(spec: Speculation, node) -> int:
    depth, parent = 1, node.parent
    while parent >= 0:
        depth, parent = depth + 1, spec.nodes[parent].parent
    return depth


def build(parts: BuildParts) -> SuffixOracle:
    return SuffixOracle(memory_for(parts.inputs.get("suffix_memory"), parts.target),
                        parts.inputs.get("suffix_corpus"), **parts.settings)


def memory_for(given: SuffixMemory | Path | str | None, target) -> SuffixMemory | None:
    """The memory of earlier runs a lane drafts from: one given as it is (a test's), "off"
    (this process only, nothing read or written), a file of the lane's own, else the target
    model's file in the cache (None without a target: this process only)."""
    if isinstance(given, SuffixMemory):
        return given
    if given == MEMORY.off:
        return SuffixMemory()
    n_vocab = None if target is None else target.n_vocab
    owner = None if target is None else owner_of(target)
    if given is not None:
        return SuffixMemory.open(Path(given), vocab_size=n_vocab, owner=owner)
    if target is None:
        return None
    path = memory_path(Path(target.model_path).name, n_vocab)
    return SuffixMemory.open(path, vocab_size=n_vocab, owner=owner)
