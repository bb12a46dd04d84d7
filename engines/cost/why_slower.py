"""Why a lane did not beat plain decoding, in one sentence from this machine's cost profile.

A verification of K+1 tokens costs relative[K] one-token steps here; a model-free oracle pays
only where its acceptance makes the step emit more than that (Leviathan et al.'s E(K)). The
sentence names the draft length that needs the least acceptance, that acceptance, and the one
the lane reached.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..oracles import DRAFT_ORACLES, is_plain
from ..oracles.registry import SERVER
from .step_cost import break_even_acceptance


def easiest_k(relative: Sequence[float], draft_cost: float = 0.0,
              k_max: int = 16) -> tuple[int, float | None]:
    """The draft length that needs the least acceptance to break even, and that acceptance
    (None: no K pays even if every guess holds). relative[n-1] is n tokens' cost over one."""
    best: tuple[int, float | None] = (1, None)
    for k in range(1, min(k_max, len(relative) - 1) + 1):
        need = break_even_acceptance(k, relative[k] + k * draft_cost)
        if need is not None and (best[1] is None or need < best[1]):
            best = (k, need)
    return best


def why_no_gain(oracle: str, relative: Sequence[float] | None, acceptance: float | None,
                draft_cost: float = 0.0, streams: int = 1) -> str:
    """One sentence, from this machine's cost profile, on why a lane did not beat plain
    decoding: what a verification costs here, the acceptance the oracle would need at its
    easiest K, and what it reached. A batch of `streams` > 1: `relative` prices a pass of n
    tokens a stream over plain decoding's pass of one a stream, at that many streams."""
    if not relative or len(relative) < 2:
        return ""
    k, need = easiest_k(relative, draft_cost)
    cost = (f"{k + 1} tokens cost {relative[k]:.1f} one-token steps here" if streams == 1
            else f"{k + 1} tokens a stream cost {relative[k]:.1f} plain steps of {streams} "
                 "streams here")
    if need is not None and (need < 0.01 or (acceptance is not None and acceptance >= need)):
        return ""  # drafting would pay here: what was lost is not the cost model's to explain
    reached = ("it proposed nothing that could pay" if acceptance is None
               else f"it reached {acceptance:.0%}")
    if need is None:
        return f"{cost}: no draft length pays on this machine, even with every guess right"
    return f"{cost}; {oracle} needs {need:.0%} acceptance at K = {k} to pay, {reached}"


def loss_reason(oracle: str, figures: dict, costs: Sequence[float] | None,
                streams: int = 1) -> str:
    """Why a lane ended slower than plain decoding ("" when it did not, when drafting has a
    cost of its own (a draft model's lane is judged by its pair check), or without a profile).
    `figures` holds the lane's speedup and acceptance_rate; a batch of `streams` > 1, its
    batch's, with `costs` priced at that many streams (why_no_gain)."""
    speedup = figures.get("speedup")
    if (speedup is None or speedup >= 1.0 or is_plain(oracle) or oracle in DRAFT_ORACLES
            or oracle == SERVER or not costs):
        return ""
    why = why_no_gain(oracle, costs, figures.get("acceptance_rate"), streams=streams)
    at = f" at {streams} streams" if streams > 1 else ""
    return f"{speedup:.2f}× plain decoding{at}: {why}" if why else ""
