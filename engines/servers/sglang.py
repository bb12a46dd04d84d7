"""SGLang's OpenAI-compatible server: what it says about speculation, and how to ask it.

Like vLLM, a chunk holds the tokens of one verification step (steps merge when the HTTP side
lags), with `token_ids` and cumulative usage where asked for. Asked with
`return_spec_tokens_details`, it sends the request's speculative totals in a chunk of their
own after the content (`sglext.spec_tokens_details`: spec_num_proposed_drafts,
spec_num_correct_drafts, spec_verify_ct; older releases name them spec_draft_token_num and
spec_accept_token_num), and `spec_correct_drafts_histogram`, read into acceptance by draft
position (spec_metrics.from_histogram). Neither the draft length nor speculation can be set
per request.
Its release is in `/get_server_info` (it has no `/version`).
Shapes from python/sglang/srt/entrypoints/openai/serving_completions.py and protocol.py, and
entrypoints/http_server.py.
"""

from __future__ import annotations

from . import generic, spec_metrics
from .chunks import Chunk, integer
from .info import ServerInfo
from .sse import Endpoint, get_json

NAME = "SGLang"
PROPOSED = ("spec_num_proposed_drafts", "spec_proposed_drafts", "spec_draft_token_num")
CORRECT = ("spec_num_correct_drafts", "spec_accepted_drafts", "spec_accept_token_num")
HISTOGRAM = "spec_correct_drafts_histogram"


def version(endpoint: Endpoint) -> str | None:
    """The engine's release: `version` among the server's arguments and state."""
    answer = get_json(endpoint, "/get_server_info")
    number = answer.get("version") if isinstance(answer, dict) else None
    return str(number) if number is not None else None


def info(model: str, version: str | None) -> ServerInfo:
    return ServerInfo(engine=NAME, model=model, build=f"SGLang {version or '?'}",
                      speculation="as configured (not reported)", source="draft")


def request_fields(k: int | None, server: ServerInfo) -> dict:
    return {"stream_options": {"include_usage": True, "continuous_usage_stats": True},
            "return_token_ids": True, "logprobs": 0, "return_spec_tokens_details": True}


def chunk(data: dict, index: int) -> Chunk | None:
    ext = data.get("sglext") if isinstance(data.get("sglext"), dict) else {}
    spec = ext.get("spec_tokens_details")
    if isinstance(spec, list):  # one per choice when n > 1
        spec = spec[0] if spec else None
    if not isinstance(spec, dict):
        return generic.read(data, index, NAME)
    counts, note = request_counts(spec)
    return generic.read(data, index, NAME, drafted=_first(spec, PROPOSED),
                        accepted=_first(spec, CORRECT), counts=counts, note=note)


def request_counts(spec: dict) -> tuple[spec_metrics.SpecCounts | None, str | None]:
    """The request's acceptance by draft position from `spec_correct_drafts_histogram` (bucket
    j: verification steps with exactly j correct drafts) and the totals beside it; (None, why)
    where they do not add up."""
    def given(names: tuple[str, ...]):
        return next((spec[n] for n in names if n in spec), None)

    try:
        return spec_metrics.from_histogram(
            "sglang", spec.get(HISTOGRAM), steps=spec.get("spec_verify_ct"),
            accepted=given(CORRECT), draft_tokens=given(PROPOSED)), None
    except spec_metrics.CountsProblem as exc:
        return None, f"{NAME}'s per-request speculation metrics are left out: {exc}"


def _first(spec: dict, names: tuple[str, ...]) -> int | None:
    return next((integer(spec[n]) for n in names if n in spec), None)
