"""A lane's K policy: the cost-aware chooser of `--k auto`, with the cost profiles it prices
steps with (stored, or measured once on the loaded models)."""

from __future__ import annotations

from collections.abc import Callable

from ..backends.base import Backend
from ..cost import profile as prof
from ..cost.profile_plan import FIRST_RUN_S
from ..oracles import ORACLE_INFO, Oracle, is_plain
from .run_spec import LaneSpec, ModelChoice

Say = Callable[[str], None]


def k_policy(lane: LaneSpec, model: ModelChoice, oracle: Oracle, target: Backend,
             draft: Backend | None, say: Say = lambda _: None, refresh: bool = False):
    """The cost-aware K chooser of an auto lane (None for a fixed K or plain decoding).

    It needs the target's cost profile (and the draft's, for the draft oracle): the stored
    one, or timed now on the loaded model within a first run's budget (profile_plan.py) and
    stored for next time; `refresh` times the whole profile. Its odds start from what was
    measured before the run: `specviz pair`'s for a draft, the held-out answers' for heads
    that send chains.
    """
    if not lane.auto_k or is_plain(oracle.name):
        return None
    from ..cost.auto_k import AutoK

    def profile_of(name: str, backend: Backend) -> prof.Profile:
        stored, problem = prof.read(name, model.backend, backend.device, model.threads,
                                    backend.dtype, backend.profile_variant)
        if stored is not None and stored.fits(backend) and not refresh:
            return stored  # whatever sizes it has: the cost model interpolates
        say(f"measuring the cost profile of {name}{_why_again(stored, problem, refresh)}, "
            "for auto K (see specviz profile)")
        measured = prof.measure(backend, name, model.threads, repeats=3,
                                on_progress=prof.progress_lines(f"cost profile of {name}", say),
                                budget_s=None if refresh else FIRST_RUN_S)
        prof.keep(measured, say)  # used even where it cannot be stored
        return measured

    draft_profile = profile_of(lane.draft_model, draft) if draft is not None else None
    return AutoK(oracle, profile_of(model.target, target), draft_profile,
                 known_accept=_pair_measured(lane, model) or chain_measured(oracle))


def chain_measured(oracle: Oracle, chains: bool = False) -> list[float] | None:
    """The held-out acceptance of the oracle's trained heads by depth, where its guesses are
    verified as that chain: always in a batch of streams (`chains`), alone where it sends no
    tree. A tree holds more at each depth than its likeliest chain: priced at the chain's
    odds and the tree's rows, an EAGLE head was never tried on a code edit where good odds
    found it 1.18x faster (smollm2 on a 2-core CPU)."""
    return oracle.measured_accept() if chains or not oracle.tree_nodes() else None


def _pair_measured(lane: LaneSpec, model: ModelChoice) -> list[float] | None:
    """`specviz pair`'s acceptance of the lane's draft for the target, where measured and
    the lane's oracle drafts as pair measures (its registry entry says so)."""
    from ..pair import known

    described = ORACLE_INFO.get(lane.oracle)
    if described is None or not described.pair_acceptance or not lane.draft_model:
        return None
    return known.acceptance(model.target, lane.draft_model)


def _why_again(stored: prof.Profile | None, problem: str, refresh: bool) -> str:
    """Why a profile is measured: " once" (none yet), or " again" and what was wrong with
    the stored one."""
    if refresh:
        return " again"
    if problem:
        return f" again (the stored one is not usable: {problem})"
    if stored is not None:  # there, but it no longer fits
        return " again (its products are computed differently now)"
    return " once"
