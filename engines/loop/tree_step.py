"""One verification step for a tree proposal (the session's linear step, for trees).

The pending token is the root of one masked batch: the tree's nodes (each sees its
ancestors) and the oracle's side rows (lookahead's Jacobi window) follow it. The target
keeps the accepted path in its cache and drops every other node.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Protocol

import numpy as np

from .. import events as ev
from ..backends.base import Backend, sync_device, tree_layout
from ..oracles.base import SideRows, TreeProposal
from .detokenize import TextStream
from .tree_verify import TreeVerdict, children_of, verify_tree

if TYPE_CHECKING:
    from ..backends.base import Backend as _Backend
    from ..oracles.base import Oracle


class Stepping(Protocol):
    """What a tree step needs of the session it steps (engines.loop.session.Session)."""

    target: _Backend
    oracle: Oracle
    context: list[int]  # read here; a step's outcome joins it through `keep`
    settings: object  # RunSettings: its sampling params

    def keep(self, tokens: list[int]) -> None: ...


def forward_tree(target: Backend, pending: int,
                 proposal: TreeProposal) -> tuple[np.ndarray, list[int]]:
    """Logits (row 0 the root, row i + 1 node i, then the side rows) and each node's row in
    the batch. The batch holds the tree depth first, so the first-child chain (the likeliest
    path) is contiguous: llama.cpp then keeps it without leaving holes in its cache."""
    order = dfs_order(proposal.parents)
    slot = {node: k + 1 for k, node in enumerate(order)}
    depths, ancestors = tree_layout(proposal.parents)
    tokens = [pending, *(proposal.tokens[i] for i in order)]
    all_depths = [0, *(depths[i] + 1 for i in order)]
    visible = [[], *([0, *(slot[a] for a in ancestors[i])] for i in order)]
    side = proposal.side
    if side:
        base = len(tokens)
        tokens += side.tokens
        all_depths += side.depths
        visible += [[0, *(base + j for j in vis)] for vis in side.visible]
    out = target.forward_masked(tokens, all_depths, visible)
    rows = [0, *(slot[i] for i in range(len(proposal))), *range(len(order) + 1, len(tokens))]
    return out[rows], [slot[i] for i in range(len(proposal))]


def dfs_order(parents: list[int]) -> list[int]:
    """Nodes in depth-first preorder, children in their order."""
    kids = children_of(parents)
    order: list[int] = []
    stack = list(reversed(kids[-1]))
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(reversed(kids[node]))
    return order


def tree_step(session: Stepping, proposal: TreeProposal, k: int, totals: ev.Totals,
              stream: TextStream, rng: np.random.Generator, t0: float) -> ev.StepEvent:
    target, oracle = session.target, session.oracle
    t1 = time.perf_counter()
    logits, slots = forward_tree(target, session.context[-1], proposal)
    sync_device(target)
    t2 = time.perf_counter()
    n = len(proposal)
    verdict = verify_tree(proposal.tokens, proposal.parents, proposal.q_rows, logits[: n + 1],
                          session.settings.params, rng)
    if proposal.side and isinstance(oracle, SideRows):
        oracle.side_logits(logits[n + 1 :])
    target.keep_path([0, *(slots[i] for i in verdict.path)])
    position = len(session.context)
    session.keep([*(proposal.tokens[i] for i in verdict.path), verdict.token])
    nodes, proposed, target_token, text = tree_event_tokens(proposal, verdict, stream)
    timing = ev.Timing((t1 - t0) * 1e3, (t2 - t1) * 1e3, (time.perf_counter() - t2) * 1e3)
    totals = totals.after_step(n, verdict.n_accepted, timing)
    return ev.StepEvent(totals.steps - 1, oracle.name, k, position, proposed, target_token,
                        text, timing, totals, tree=nodes, path=verdict.path,
                        lookahead=oracle.lookahead_state() if isinstance(oracle, SideRows)
                        else None)


def tree_event_tokens(proposal: TreeProposal, verdict: TreeVerdict, stream: TextStream):
    """Tree nodes, the linear `proposed` view (path, then its last node's refused
    children), the target token, and the emitted text; emitted tokens go through `stream`."""
    base = stream.fork()
    pieces = {i: stream.push(proposal.tokens[i]) for i in verdict.path}
    for i in range(len(proposal)):
        if i not in pieces:
            pieces[i] = _piece_after(proposal, i, base)
    on_path = set(verdict.path)
    nodes = tuple(_node(proposal, verdict, i, pieces[i], on_path) for i in range(len(proposal)))
    last = verdict.path[-1] if verdict.path else -1
    refused = [i for i, p in enumerate(proposal.parents)
               if p == last and nodes[i].state == ev.NODE_REJECTED]
    proposed = tuple(_as_proposed(nodes[i]) for i in [*verdict.path, *refused])
    piece = stream.push(verdict.token)
    target = ev.TargetToken(verdict.token, piece, verdict.kind, verdict.p_token, verdict.margin)
    return nodes, proposed, target, "".join(pieces[i] for i in verdict.path) + piece


def _piece_after(proposal: TreeProposal, i: int, base: TextStream) -> str:
    chain = [i]
    while proposal.parents[chain[-1]] >= 0:
        chain.append(proposal.parents[chain[-1]])
    shadow = base.fork()
    for j in reversed(chain[1:]):
        shadow.push(proposal.tokens[j])
    return shadow.push(proposal.tokens[i])


def _node(proposal: TreeProposal, verdict: TreeVerdict, i: int, text: str,
          on_path: set[int]) -> ev.TreeNode:
    j = verdict.judgements[i]
    state = (ev.NODE_ACCEPTED if i in on_path else
             ev.NODE_UNREACHED if j.reason == ev.REJECT_UNREACHED else ev.NODE_REJECTED)
    return ev.TreeNode(
        parent=proposal.parents[i], id=proposal.tokens[i], text=text,
        source=proposal.source_of(i), state=state,
        p_draft=proposal.p_draft[i] if proposal.p_draft else None,
        p_target=j.p_target, reject_reason=j.reason, accept_prob=j.accept_prob, draw=j.draw,
        detail=proposal.details[i] if proposal.details else None,
        span=proposal.spans[i] if proposal.spans else None,
    )


def _as_proposed(node: ev.TreeNode) -> ev.ProposedToken:
    return ev.ProposedToken(
        id=node.id, text=node.text, source=node.source,
        accepted=node.state == ev.NODE_ACCEPTED, p_draft=node.p_draft, p_target=node.p_target,
        reject_reason=node.reject_reason, accept_prob=node.accept_prob, draw=node.draw,
        span=node.span, detail=node.detail,
    )
