"""`specviz bench`'s tables, as Markdown: the Spec-Bench-style summary and acceptance per
proposal detail. The figures themselves are engines.bench.spec_bench's."""

from __future__ import annotations

from collections.abc import Sequence

from ...engines.bench.spec_bench import GROUP_ORDER, Row
from ...engines.events import DECLINE_WORDS
from ...engines.oracles import is_plain


def markdown_table(rows: Sequence[Row]) -> str:
    groups = [g for g in GROUP_ORDER if any(g in r.speedup for r in rows)]
    head = ["Method", *groups, "Overall", "Interval (repeats)", "#Mean accepted tokens",
            "Acceptance", "Declined", "Tokens/s", "Identical"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        label = r.config.label + ("" if r.mean_k is None else f" (mean K {_k(r.mean_k)})")
        cells = [label, *(_x(r.speedup.get(g)) for g in groups),
                 _x(r.speedup.get("Overall")), _interval(r), f"{r.mean_accepted_tokens:.2f}",
                 "-" if r.acceptance_rate is None else f"{r.acceptance_rate:.0%}",
                 _declined(r), f"{r.tok_per_s:.1f}",
                 "-" if is_plain(r.config.oracle) else _identical(r)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _interval(row: Row) -> str:
    """The overall speedup's 95% interval over the repeats, and the verdict."""
    s = row.overall
    if is_plain(row.config.oracle) or s is None:
        return "-"
    if s.low is None:
        return "one repeat: --repeat 3 gives one"
    return f"{s.low:.2f}-{s.high:.2f} ({s.rounds}): {s.verdict}"


def _k(mean_k: float) -> str:
    """A mean K; one that drafted on a few steps never reads as 0.0 (a batched step there can
    explain a near-tie that parts the text from plain decoding's)."""
    return "< 0.05" if 0 < mean_k < 0.05 else f"{mean_k:.1f}"


def detail_table(rows: Sequence[Row]) -> str:
    """Acceptance per proposal detail (each rule, n-gram size...), so useless ones show up;
    empty when no oracle labels its proposals."""
    lines = []
    for r in rows:
        for detail, (proposed, accepted) in sorted(r.by_detail.items(),
                                                   key=lambda kv: -kv[1][0]):
            lines.append(f"| {r.config.label} | {detail} | {proposed} | {accepted} | "
                         f"{accepted / proposed:.0%} |")
    if not lines:
        return ""
    head = "| Method | Proposed by | Proposed | Accepted | Acceptance |\n|---|---|---|---|---|"
    return head + "\n" + "\n".join(lines)


def _declined(row: Row) -> str:
    """The share of steps with nothing proposed, and the commonest reason."""
    if row.decline_rate is None:
        return "-"
    if not row.declined:
        return "0%"
    reason = next(iter(sorted(row.declined.items(), key=lambda kv: -kv[1])))[0]
    return f"{row.decline_rate:.0%} ({DECLINE_WORDS.get(reason, reason)})"


def _identical(row: Row) -> str:
    text = f"{row.identical}/{row.compared}"
    return text + (f" ({row.unexplained} unexplained)" if row.unexplained else "")


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"
