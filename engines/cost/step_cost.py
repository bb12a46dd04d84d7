"""The cost model of a speculative step, and the theoretical speedup it predicts.

A step with draft length K emits on average E(K) tokens: the accepted prefix plus the
target's own token. With a_i the probability that proposal i is accepted given that the
ones before it were, E(K) = 1 + sum_{j=1..K} prod_{i<=j} a_i. It costs one target forward of
K+1 tokens, drafting K tokens, and a fixed overhead. Expected tokens per second is their ratio;
K = 0 is plain decoding. With a constant acceptance rate alpha this is Leviathan et al. (2022):
E(K) = (1 - alpha^(K+1)) / (1 - alpha), and the speedup over plain decoding is E(K) divided by
the step's cost in units of one plain decoding step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .profile import Profile


def expected_tokens(accept: Sequence[float]) -> float:
    """Tokens per step when proposal i (1-based) is accepted with conditional probability
    accept[i-1]: the bonus/correction token, plus each proposal that survives."""
    total, survive = 1.0, 1.0
    for a in accept:
        survive *= min(max(a, 0.0), 1.0)
        total += survive
    return total


def expected_tokens_iid(alpha: float, k: int) -> float:
    """Leviathan et al.'s E(K) for a constant acceptance rate alpha."""
    alpha = min(max(alpha, 0.0), 1.0)
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def theoretical_speedup(
    alpha: float,
    k: int,
    verify_cost: Callable[[int], float] | None = None,
    draft_cost: float = 0.0,
) -> float:
    """Speedup over plain decoding for draft length k and acceptance rate alpha.

    `verify_cost(n)` is the cost of a target forward of n tokens relative to one token (from a
    profile: `profile.relative(n, context)`); None means batches are free, as Leviathan et
    al. assume on a GPU. `draft_cost` is drafting one token relative to one target token (their
    c; about 0 for prompt lookup).
    """
    verify = verify_cost(k + 1) if verify_cost else 1.0
    return expected_tokens_iid(alpha, k) / (verify + k * draft_cost)


def break_even_acceptance(k: int, step_cost: float) -> float | None:
    """The constant acceptance rate at which draft length k just pays for a step costing
    `step_cost` plain steps: E(k) = step_cost. None when even alpha = 1 does not pay."""
    if step_cost >= k + 1 - 1e-9:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_tokens_iid(mid, k) < step_cost else (lo, mid)
    return hi


def speedup_curve(
    alpha: float,
    ks: Sequence[int],
    profile: Profile | None = None,
    context: int = 512,
    draft_cost: float = 0.0,
) -> list[float]:
    """theoretical_speedup for every K in ks, with the profile's batch costs if given."""
    verify = (lambda n: profile.relative(n, context)) if profile else None
    return [theoretical_speedup(alpha, k, verify, draft_cost) for k in ks]


def best_k(
    accept: Sequence[float],
    step_ms: Callable[[int], float],
    k_max: int,
) -> tuple[int, float]:
    """The K in 0..k_max with the most expected tokens per millisecond, and that rate.

    `accept[i]` is the conditional acceptance of proposal i+1; `step_ms(K)` the expected
    milliseconds of a step of draft length K. Ties go to the smaller K.
    """
    best, best_rate = 0, 1.0 / max(step_ms(0), 1e-9)
    for k, rate in _rates(accept, step_ms, k_max):
        if rate > best_rate * (1 + 1e-9):
            best, best_rate = k, rate
    return best, best_rate


def first_k_reaching(
    accept: Sequence[float],
    step_ms: Callable[[int], float],
    k_max: int,
    rate: float,
) -> int:
    """The smallest K in 1..k_max whose expected tokens per millisecond reach `rate` (0: none
    does). Whether any K beats a rate needs no more: the costs of longer drafts go unpriced."""
    for k, reached in _rates(accept, step_ms, k_max):
        if reached >= rate:
            return k
    return 0


def _rates(accept: Sequence[float], step_ms: Callable[[int], float], k_max: int):
    """(K, expected tokens per millisecond) for K = 1..k_max, in order."""
    total, survive = 1.0, 1.0
    for k in range(1, min(k_max, len(accept)) + 1):
        survive *= min(max(accept[k - 1], 0.0), 1.0)
        total += survive
        yield k, total / max(step_ms(k), 1e-9)

