"""A server's own speculation counters, from its Prometheus `/metrics`, and a run's share.

llama-server (started with `--metrics`) and vLLM name them alike, each under its own prefix
(`llamacpp:`, `vllm:`): drafts verified (`spec_decode_num_drafts`), draft tokens, accepted
draft tokens, and accepted tokens by draft position
(`spec_decode_num_accepted_tokens_per_pos{position="i"}`: the drafts whose token at position
i was accepted, and with it every token before it). The counters are the server's since it
started, so a run's own are the difference of a reading before and one after; they are
exact where the run is the server's only client (a server specviz started is), else they
include the other clients' requests. llama-server adds a request's counts when its slot is
released, just after the stream ends (or, for a request cut short, once it notices), so the
reading after a run waits, briefly, until the server has counted the run's tokens.

vLLM (`--per-request-spec-decode-metrics`) and SGLang also say a request's own speculation in
its response: an acceptance histogram, whose bucket j counts the request's verification steps
that accepted exactly j drafts (the target's own token not counted): vLLM's
`metrics.speculative_decoding.acceptance_histogram` (dense, K + 1 buckets, with
num_spec_steps, num_draft_tokens, num_accepted_draft_tokens and num_spec_tokens = K beside it),
SGLang's `spec_correct_drafts_histogram` (as long as the most drafts a step accepted, with
spec_verify_ct and spec_num_correct_drafts). `from_histogram` reads either into the same
counts: the steps are the drafts, and the drafts whose position i was accepted are the steps
that accepted more than i. Such counts are the request's own whatever else the server served.

Parsed with prometheus_client's own text parser (the Prometheus project's Python client,
pure Python): label quoting and escapes, `_total` suffixes and comments are its business.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from .sse import MAX_BODY, Endpoint, ServerError, get_body

PER_POSITION = "spec_decode_num_accepted_tokens_per_pos"
COUNTERS = {"spec_decode_num_drafts": "drafts",
            "spec_decode_num_draft_tokens": "draft_tokens",
            "spec_decode_num_accepted_tokens": "accepted",
            "tokens_predicted": "generated",  # llama-server
            "generation_tokens": "generated"}  # vLLM
NOT_ENABLED = (404, 405, 501)  # llama-server without --metrics answers 501


@dataclass(frozen=True)
class SpecCounts:
    """Speculation counted by the server: totals since it started, or a run's difference."""

    engine: str  # the metrics' prefix: llamacpp, vllm
    drafts: int = 0  # verification steps that checked a draft
    draft_tokens: int = 0
    accepted: int = 0
    generated: int = 0  # tokens generated, drafted or not
    accepted_by_position: tuple[int, ...] = ()  # drafts whose position i was accepted

    def since(self, before: SpecCounts | None) -> SpecCounts:
        """What was counted after `before` (a reading of the same server)."""
        if before is None:
            return self
        n = max(len(self.accepted_by_position), len(before.accepted_by_position))
        now, then = _padded(self.accepted_by_position, n), _padded(before.accepted_by_position, n)
        return SpecCounts(self.engine, self.drafts - before.drafts,
                          self.draft_tokens - before.draft_tokens,
                          self.accepted - before.accepted, self.generated - before.generated,
                          tuple(a - b for a, b in zip(now, then, strict=True)))

    def plus(self, other: SpecCounts | None) -> SpecCounts:
        """These counts and `other`'s together (a run continued in a second request)."""
        if other is None:
            return self
        n = max(len(self.accepted_by_position), len(other.accepted_by_position))
        a, b = _padded(self.accepted_by_position, n), _padded(other.accepted_by_position, n)
        return SpecCounts(self.engine, self.drafts + other.drafts,
                          self.draft_tokens + other.draft_tokens, self.accepted + other.accepted,
                          self.generated + other.generated,
                          tuple(x + y for x, y in zip(a, b, strict=True)))

    def acceptance_by_position(self) -> list[float]:
        """For each draft position the server counts (llama.cpp: every one up to its longest
        draft), the share of drafts accepted up to it (vLLM's and llama.cpp's per-position
        acceptance rate); a position no draft's acceptance reached is 0, not left out."""
        if not self.drafts:
            return []
        return [a / self.drafts for a in self.accepted_by_position]

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.draft_tokens if self.draft_tokens else None

    def to_dict(self) -> dict:
        """For a run's JSON and trace: the counts, and the rates by position."""
        data = asdict(self)
        data["accepted_by_position"] = list(self.accepted_by_position)
        data["acceptance_by_position"] = [round(r, 4) for r in self.acceptance_by_position()]
        rate = self.acceptance_rate
        data["acceptance_rate"] = None if rate is None else round(rate, 4)
        return data


def parse(text: str) -> SpecCounts | None:
    """The speculation counters in a /metrics text; None where it has none (or is not
    Prometheus text)."""
    from prometheus_client.parser import text_string_to_metric_families

    engine, totals, positions = None, {}, {}
    try:
        samples = [s for family in text_string_to_metric_families(text)
                   for s in family.samples]
    except (ValueError, TypeError, IndexError):  # the parser's ways of refusing a text
        return None
    for sample in samples:
        prefix, _, base = sample.name.partition(":")
        base = base.removesuffix("_total")
        value = _count(sample.value)
        if value is None:
            continue
        if base == PER_POSITION and "position" in sample.labels:
            position = _count(sample.labels["position"])
            if position is None or position >= MAX_POSITIONS:
                continue
            positions[position] = positions.get(position, 0) + value
        elif base in COUNTERS:
            field = COUNTERS[base]
            totals[field] = totals.get(field, 0) + value  # summed over labels
        else:
            continue
        engine = engine or prefix
    if "drafts" not in totals and not positions:
        return None
    by_position = tuple(positions.get(i, 0) for i in range(max(positions, default=-1) + 1))
    return SpecCounts(engine or "?", accepted_by_position=by_position, **totals)


MAX_POSITIONS = 256  # draft positions counted; a server's drafts are 64 long at most
MAX_COUNT = 1 << 62  # a counter past this is not one a server kept


def _count(value) -> int | None:
    """A counter's value as a whole number; None for one that is not a count (negative,
    not finite, not a number, absurdly large)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if 0 <= number <= MAX_COUNT else None


class CountsProblem(ValueError):
    """Why a request's speculation metrics are not counts specviz takes, in a few words."""


def from_histogram(engine: str, histogram, *, steps=None, accepted=None, draft_tokens=None,
                   positions=None, generated=None) -> SpecCounts | None:
    """A request's counts from its acceptance histogram (bucket j: steps that accepted exactly
    j drafts) and the totals the engine gives beside it, each checked against the histogram;
    `positions`: the longest draft (K), so positions no step reached are 0, not left out.
    None where the histogram is empty or absent (nothing drafted, or not reported);
    CountsProblem where a value is not a count or the totals disagree with the histogram."""
    if histogram is None or histogram == []:
        return None
    buckets = _histogram(histogram)
    n_steps = sum(buckets)
    n_accepted = sum(j * c for j, c in enumerate(buckets))
    k = _given_count("the longest draft", positions)
    if k is not None and k > MAX_POSITIONS:
        raise CountsProblem(f"a longest draft of {k} (more than {MAX_POSITIONS})")
    for name, said, counted in (("steps", steps, n_steps), ("accepted drafts", accepted,
                                                            n_accepted)):
        said = _given_count(name, said)
        if said is not None and said != counted:
            raise CountsProblem(f"{said} {name} said beside a histogram of {counted}")
    drafted = _given_count("draft tokens", draft_tokens)
    if drafted is not None and drafted < n_accepted:
        raise CountsProblem(f"{n_accepted} accepted drafts of only {drafted} drafted")
    if k is not None and len(buckets) > k + 1:
        raise CountsProblem(f"a step accepting {len(buckets) - 1} drafts of at most {k}")
    by_position = [sum(buckets[i + 1:]) for i in range(max(len(buckets) - 1, k or 0))]
    return SpecCounts(engine, n_steps, drafted or 0, n_accepted,
                      _given_count("tokens generated", generated) or 0, tuple(by_position))


def _histogram(value) -> list[int]:
    if not isinstance(value, list):
        raise CountsProblem(f"the histogram is {type(value).__name__}, not a list of counts")
    if len(value) > MAX_POSITIONS + 1:
        raise CountsProblem(f"a histogram of {len(value)} buckets (at most "
                            f"{MAX_POSITIONS + 1})")
    for count in value:
        if not _whole(count):
            raise CountsProblem(f"a bucket of the histogram is {str(count)[:20]!r}, not a count")
    return list(value)


def _given_count(name: str, value) -> int | None:
    if value is None:
        return None
    if not _whole(value):
        raise CountsProblem(f"{name} is {str(value)[:20]!r}, not a count")
    return value


def _whole(value) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)
            and 0 <= value <= MAX_COUNT)


def read(endpoint: Endpoint) -> SpecCounts | None:
    """The server's counters now; None where it has no /metrics (llama-server without
    `--metrics`), cannot be reached, or counts no speculation. Never fails a run: the
    counters are an addition to what the stream says."""
    try:
        status, body = get_body(endpoint, "/metrics")
    except ServerError:
        return None
    if status in NOT_ENABLED or status >= 400 or len(body) > MAX_BODY:
        return None
    return parse(body.decode("utf-8", "replace"))


def read_after(endpoint: Endpoint, before: SpecCounts | None, tokens: int,
               wait_s: float = 2.0) -> SpecCounts | None:
    """A run's own counts: read until the server has counted the run's `tokens` (it adds a
    request's counts once its slot is released), at most `wait_s`; then the difference from
    `before`. None where there was no reading before."""
    if before is None:
        return None
    deadline = time.monotonic() + wait_s
    while True:
        after = read(endpoint)
        if after is None:
            return None
        run = after.since(before)
        if run.generated >= tokens or time.monotonic() >= deadline:
            return run
        time.sleep(0.05)


def _padded(values: tuple[int, ...], n: int) -> tuple[int, ...]:
    return values + (0,) * (n - len(values))
