"""One self-contained HTML page that replays a race: `specviz export TRACE... OUT.html`.

The page is a single file with its script, style and data inlined, so it opens offline from
a mail attachment or a file share and makes no network request. Each trace becomes a lane;
the page replays them on their compute-time clock, as the window does
(app/run/trace_player.py), with the window's token colours and legend words
(board/palette.py, board/legend_kinds.py).

A race only makes sense on one prompt: traces of different prompts are refused, not drawn
side by side. Traces with no steps or a corrupt line are refused too, with the file named.

No Qt here: this module must work headless, without a display.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import fields
from importlib.resources import files
from pathlib import Path
from typing import Any

from ...board.describe import why
from ...board.kinds import KINDS, proposal_kind
from ...board.lane_title import lane_title
from ...board.legend_kinds import legend_kinds
from ...board.one_prompt import check_one_prompt
from ...board.palette import THEMES, Theme
from ...engines import events as ev
from ...engines.atomic import written_atomically
from ...engines.batch_events import BatchStep
from ...engines.errors import SpecvizError
from ...engines.oracles import is_plain
from ...engines.trace import Trace, read_trace

ASSETS = "assets/page"
KIND_RULES = "/* {{kinds}} */\n"  # where page.css takes the kinds' colour rules
DATA_ID = "specviz-data"
# Step fields the page does not draw: a linear view of tree steps needs only `proposed`.
_DROPPED_STEP_FIELDS = ("oracle", "kind", "position", "text", "tree", "path", "lookahead")
# Proposal fields the page shows in the window's words for them (board/describe.py `why`).
_WORDED_FIELDS = ("reject_reason", "accept_prob", "draw", "verified_by")


def write_page(trace_paths: list[Path], out: Path, theme: str = "light", stream: int = 0
               ) -> Path:
    """Write the replay page of these traces to `out`, atomically; `out`. Of traces of a
    batch of streams, each lane shows stream `stream + 1`."""
    if theme not in THEMES:
        raise SpecvizError(f"unknown theme '{theme}': give {' or '.join(THEMES)}")
    return _write_atomically(Path(out), render_page(read_race(trace_paths, stream), theme))


def render_page(traces: list[Trace], theme: str = "light") -> str:
    """The page's HTML for traces already checked."""
    page = _asset("page.html")
    data = page_data(traces)
    parts = {
        "title": html.escape(f"specviz race: {', '.join(lane['title'] for lane in data['lanes'])}"),
        "theme": theme,
        "theme_css": theme_css(),
        "css": _asset("page.css").replace(KIND_RULES, kind_css()),
        "js": _asset("page.js"),
        "data_id": DATA_ID,
        "data": embed_json(data),
    }
    # One pass, so nothing inserted (a token reading "{{js}}") is itself replaced.
    return re.sub(r"\{\{(\w+)\}\}", lambda m: parts[m.group(1)], page)


def embed_json(data: Any) -> str:
    """JSON safe inside a <script> element: no '<' at all, so no token text can close it."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c")


def theme_css() -> str:
    """The themes' and the kinds' colours as CSS variables, one rule per theme (the page's one
    source)."""
    rules = []
    for name, theme in THEMES.items():
        values = [f"--{f.name}:{getattr(theme, f.name)}" for f in fields(Theme)
                  if f.name not in ("name", "lanes")]
        values += [f"--{kind.name}:{kind.colour(name)}" for kind in KINDS.values()]
        values += [f"--lane{i}:{colour}" for i, colour in enumerate(theme.lanes)]
        rules.append(f':root[data-theme="{name}"]{{{";".join(values)}}}')
    return "\n".join(rules)


def kind_css() -> str:
    """A token of each kind in its colour: the class the page's script gives it."""
    return "".join(f".k-{name} {{ color: var(--{name}); }}\n" for name in KINDS)


# ---------------------------------------------------------------- checks


def read_race(trace_paths: list[Path], stream: int = 0) -> list[Trace]:
    """The traces of one race, whole and of one prompt, or one line saying why not. Of a
    trace of a batch of streams, stream `stream + 1` (each stream had a prompt of its own)."""
    traces = [_checked(read_trace(path).stream(stream)) for path in trace_paths]
    if not traces:
        raise SpecvizError("no trace to export: give at least one TRACE before OUT")
    check_one_prompt(traces)
    return traces


def _checked(trace: Trace) -> Trace:
    if trace.problem is not None:
        raise SpecvizError(f"corrupt trace: {trace.problem}")
    if not trace.steps:
        raise SpecvizError(f"{trace.path}: no steps to replay (an empty trace)")
    return trace


# ---------------------------------------------------------------- data


def page_data(traces: list[Trace]) -> dict[str, Any]:
    """What the page's script reads: the prompt, the legend words and one entry per lane."""
    words: dict[str, int] = {}  # verdicts repeat: each sentence stored once, tokens index it
    lanes = [_lane(trace, words) for trace in traces]
    baseline = next((i for i, lane in enumerate(lanes) if lane["plain"]), None)
    return {
        "prompt": traces[0].header.get("prompt", ""),
        "labels": {name: kind.words for name, kind in KINDS.items()},
        "colours": len(THEMES["light"].lanes),  # lane i takes colour i modulo this
        "baseline": baseline,
        "words": list(words),
        "lanes": lanes,
    }


def _lane(trace: Trace, words: dict[str, int]) -> dict[str, Any]:
    head = trace.header
    oracle = head.get("oracle", "?")
    steps = trace.steps
    shown = _prompt_place(head)
    summary = trace.summary
    auto = any(step.auto_k for step in steps)
    return {
        "name": trace.path.stem,
        "title": _of_streams(lane_title(oracle, head.get("settings", {}).get("k"), auto,
                                        trace.path.stem), trace),
        "oracle": oracle,
        "plain": is_plain(oracle),
        "target": _model_name(head.get("target")),
        "draft": _model_name(head.get("draft")),
        "backend": head.get("backend"),
        "device": head.get("device"),
        "legend": legend_kinds(oracle),
        "summary": None if summary is None else {
            "reason": summary.reason, "prefill_ms": round(summary.prefill_ms, 3),
            "error": summary.error},
        "steps": [_step(step, shown, words) for step in steps],
        "batch": _batch(trace),
    }


def _batch(trace: Trace) -> dict[str, Any] | None:
    """Of a lane of a batch: every stream's tokens and the batch's compute so far at each
    batch step, so that its figures give the batch's throughput and speedup beside the
    shown stream's own pace (a stream's pace can be slower than plain's where its batch is
    not), to the batch's end."""
    if trace.streams == 1:
        return None
    tokens, ms, at_tokens, at_ms = 0, 0.0, [], []
    for batch in trace.batches:
        if isinstance(batch, BatchStep):
            tokens += sum(len(step.emitted_ids) for _, step in batch.steps)
            ms += batch.timing.total_ms
            at_tokens.append(tokens)
            at_ms.append(round(ms, 3))
    return {"n": trace.streams, "tokens": at_tokens, "ms": at_ms}


def _of_streams(title: str, trace: Trace) -> str:
    """A lane of a batch says which of its streams it shows: its pace is that stream's."""
    n = trace.streams
    return title if n == 1 else f"{title} · stream {trace.shown + 1} of {n}"


def _step(step: ev.StepEvent, shown: tuple[int, int] | None,
          words: dict[str, int]) -> dict[str, Any]:
    record = ev.to_dict(step)
    for name in _DROPPED_STEP_FIELDS:
        record.pop(name, None)
    for flag in ("lossy", "auto_k"):  # false on nearly every step: absent means false
        if not record[flag]:
            del record[flag]
    totals = step.totals  # the page's clock needs only their sum of times
    record["totals"] = {"tokens": totals.tokens, "steps": totals.steps,
                        "proposed": totals.proposed, "accepted": totals.accepted,
                        "declined": totals.declined, "compute_ms": totals.compute_ms}
    record["proposed"] = [_proposal(token, data, shown, words)
                          for token, data in zip(step.proposed, record["proposed"])]
    return _rounded(record)


def _proposal(token: ev.ProposedToken, data: dict[str, Any], shown: tuple[int, int] | None,
              words: dict[str, int]) -> dict[str, Any]:
    for name in _WORDED_FIELDS:
        data.pop(name, None)
    data["c"] = proposal_kind(token)
    data["w"] = words.setdefault(why(token), len(words))
    if token.span is not None:
        where = _in_prompt(token.span, shown)
        if where is not None:
            data["at"] = where
    return data


def _prompt_place(head: dict[str, Any]) -> tuple[int, int] | None:
    """Where the person's prompt (the page shows) sits in the rendered one a span indexes
    (the chat template around it): its offset and length."""
    prompt, rendered = head.get("prompt") or "", head.get("prompt_text") or ""
    offset = rendered.find(prompt) if prompt else -1
    return None if offset < 0 else (offset, len(prompt))


def _in_prompt(span: ev.Span, shown: tuple[int, int] | None) -> list[int] | None:
    """A copied token's source as characters of the shown prompt, None outside it (the rule
    of the window's prompt editor, app.views.lane_widget.editor_range)."""
    if shown is None or span.chr_start is None or span.chr_end is None:
        return None
    start, end = span.chr_start - shown[0], span.chr_end - shown[0]
    return [start, end] if 0 <= start < end <= shown[1] else None


def _model_name(model: Any) -> str | None:
    if isinstance(model, dict):
        return model.get("name") or model.get("path")
    return model


def _rounded(value: Any) -> Any:
    """Floats to 4 decimals: a page's size is its tokens, not their float noise."""
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


# ---------------------------------------------------------------- files


def _asset(name: str) -> str:
    return files("specviz").joinpath(f"{ASSETS}/{name}").read_text(encoding="utf-8")


def _write_atomically(out: Path, text: str) -> Path:
    with written_atomically(out) as temp:
        temp.write_text(text, encoding="utf-8")
    return out
