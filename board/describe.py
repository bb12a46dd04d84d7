"""Words for tokens and verdicts, shared by the token view's tooltips and the inspector."""

from __future__ import annotations

from ..engines.events import (
    NODE_ACCEPTED,
    NODE_REJECTED,
    REJECT_AFTER,
    REJECT_MISMATCH,
    REJECT_SAMPLED,
    REJECT_TYPICAL,
    ProposedToken,
    Span,
    StepEvent,
    TargetToken,
)

_VISIBLE = str.maketrans({" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"})
# The most of one token's text that the views lay out. A real tokenizer's longest token is a
# run of spaces or dashes of a few dozen to 128 characters; a hostile or corrupt trace can hold
# megabytes in one token, which Qt's text layout took minutes over (it has no break to wrap at).
TOKEN_SHOWN_CHARS = 256


def visible(text: str) -> str:
    """Whitespace made visible; an empty piece (part of a multi-byte character) as ∅."""
    return text.translate(_VISIBLE) if text else "∅"


def cut(text: str) -> str:
    """A token's text as the lanes lay it out: whole up to TOKEN_SHOWN_CHARS, else its start
    and its length. The Step dock (inspector) shows every token whole."""
    if len(text) <= TOKEN_SHOWN_CHARS:
        return text
    return text[:TOKEN_SHOWN_CHARS] + _length(text)


def shown(text: str) -> str:
    """A token as a tooltip or the tree names it: `visible`, and cut as `cut` cuts it."""
    if len(text) <= TOKEN_SHOWN_CHARS:
        return visible(text)
    return visible(text[:TOKEN_SHOWN_CHARS]) + _length(text)


def _length(text: str) -> str:
    return f"…({len(text):,} chars)"


def prob(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def margin(value: float | None) -> str:
    return "— (not exposed)" if value is None else f"{value:.3f}"


def why(token: ProposedToken) -> str:
    """Why verification kept or dropped a proposed token."""
    if token.verified_by:
        if token.accepted:
            return f"accepted by {token.verified_by}'s own verification"
        return (f"rejected by {token.verified_by}, which counts its rejected drafts but does "
                "not say which tokens they were")
    if token.accepted:
        if token.accept_prob is None:
            return "matches the target's argmax"
        if token.draw is None:  # typical acceptance compares p_target with a threshold
            return (f"LOSSY typical acceptance: p_target {prob(token.p_target)} > "
                    f"threshold {prob(token.accept_prob)}")
        return f"draw {prob(token.draw)} ≤ min(1, p/q) = {prob(token.accept_prob)}"
    if token.reject_reason == REJECT_MISMATCH:
        return "greedy mismatch: the target's argmax differs"
    if token.reject_reason == REJECT_SAMPLED:
        return f"sampled: draw {prob(token.draw)} > min(1, p/q) = {prob(token.accept_prob)}"
    if token.reject_reason == REJECT_TYPICAL:
        return (f"LOSSY typical acceptance: p_target {prob(token.p_target)} ≤ "
                f"threshold {prob(token.accept_prob)}")
    if token.reject_reason == REJECT_AFTER:
        return "after the first rejection: never judged"
    return token.reject_reason or "rejected"


def span_text(span: Span) -> str:
    if span.run is not None:
        text = f"remembered from an earlier run ({span.run}), its token {span.tok_start}"
        return text + (f":\n{span.excerpt}" if span.excerpt else "")
    text = f"copied from tokens {span.tok_start}–{span.tok_end}"
    if span.chr_start is not None:
        text += f", prompt characters {span.chr_start}–{span.chr_end}"
    else:
        text += " (earlier output)"
    return text


def node_why(event: StepEvent, index: int) -> str:
    """Why a tree step took this node's branch, or why not: the token the target chose in its
    place (the path's node or the step's own token), or the refused ancestor that kept it from
    being judged."""
    tree = event.tree or ()
    node = tree[index]
    if node.state == NODE_ACCEPTED:
        if node.draw is None:
            return "taken: the target's argmax"
        return f"taken: draw {prob(node.draw)} ≤ min(1, p/q) = {prob(node.accept_prob)}"
    if node.state == NODE_REJECTED:
        chosen = _chosen_after(event, node.parent)
        if node.reject_reason == REJECT_SAMPLED:
            return (f"not taken: draw {prob(node.draw)} > min(1, p/q) = "
                    f"{prob(node.accept_prob)}; the target went on with {chosen!r}")
        return f"not taken: the target's argmax here is {chosen!r}"
    refused = node.parent
    while refused >= 0 and tree[refused].state != NODE_REJECTED:
        refused = tree[refused].parent
    if refused < 0:
        return "never judged"
    return f"never judged: below {shown(tree[refused].text)!r}, which was not taken"


def _chosen_after(event: StepEvent, parent: int) -> str:
    """The token the step kept after `parent` (-1: the root): the path's next node, or the
    target's own token where the path ends there."""
    tree = event.tree or ()
    for i in event.path or ():
        if tree[i].parent == parent:
            return shown(tree[i].text)
    return shown(event.target.text)


def proposal_tooltip(event: StepEvent, index: int) -> str:
    token = event.proposed[index]
    verdict = "accepted" if token.accepted else "rejected"
    lines = [
        f"step {event.step} · {token.source} proposal {index + 1}/{len(event.proposed)}"
        f" · {verdict}",
        f"token {shown(token.text)!r} (id {token.id})",
        f"p_draft {prob(token.p_draft)} · p_target {prob(token.p_target)}",
        why(token),
    ]
    if token.span is not None:
        lines.append(span_text(token.span))
    if token.detail:
        lines.append(token.detail)
    return "\n".join(lines)


def target_tooltip(event: StepEvent) -> str:
    target: TargetToken = event.target
    return "\n".join([
        f"step {event.step} · target token ({target.kind})",
        f"token {shown(target.text)!r} (id {target.id})",
        f"p_target {prob(target.p_target)} · logit margin {margin(target.margin)}",
    ])


def streams_words(n: int) -> str:
    """"1 stream", "4 streams": how many streams a batch decodes at once."""
    return f"{n} stream{'s' if n != 1 else ''}"
