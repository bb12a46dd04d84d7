"""vLLM's OpenAI-compatible server: what it says about speculation, and how to ask it.

A streamed chunk holds the tokens of one engine step (accepted drafts and the bonus token;
steps merge when the server runs ahead of its HTTP side, or with `stream_interval` above 1).
Asked for, it adds the chunk's `token_ids`, each token's text and log-probability
(`logprobs`), and cumulative `usage` on every chunk (`continuous_usage_stats`). How many drafts
were proposed per step is not streamed; a server started with
`--per-request-spec-decode-metrics` puts the request's totals in the final usage chunk
(`metrics.speculative_decoding`: num_draft_tokens, num_accepted_draft_tokens and the
acceptance_histogram, read into acceptance by draft position by spec_metrics.from_histogram;
layout in vLLM's docs/features/speculative_decoding/acceptance_metrics.md). Neither the draft
length nor speculation itself can be set per request.
Shapes from vllm/entrypoints/openai/completion/serving.py and generate/base/protocol.py.
"""

from __future__ import annotations

from . import generic, spec_metrics
from .chunks import Chunk, integer
from .info import ServerInfo
from .sse import Endpoint, get_json

NAME = "vLLM"


def version(endpoint: Endpoint) -> str | None:
    """The engine's release, from `/version` ({"version": ...})."""
    answer = get_json(endpoint, "/version")
    number = answer.get("version") if isinstance(answer, dict) else None
    return str(number) if number is not None else None


def info(model: str, version: str | None) -> ServerInfo:
    return ServerInfo(engine=NAME, model=model, build=f"vLLM {version or '?'}",
                      speculation="as configured (not reported)", source="draft")


def request_fields(k: int | None, server: ServerInfo) -> dict:
    return {"stream_options": {"include_usage": True, "continuous_usage_stats": True},
            "return_token_ids": True, "logprobs": 0, "stream_interval": 1}


def chunk(data: dict, index: int) -> Chunk | None:
    metrics = data.get("metrics") if isinstance(data.get("metrics"), dict) else {}
    spec = metrics.get("speculative_decoding")
    if not isinstance(spec, dict):
        return generic.read(data, index, NAME)
    counts, note = request_counts(spec, data.get("usage"))
    return generic.read(data, index, NAME, drafted=integer(spec.get("num_draft_tokens")),
                        accepted=integer(spec.get("num_accepted_draft_tokens")),
                        counts=counts, note=note)


def request_counts(spec: dict, usage) -> tuple[spec_metrics.SpecCounts | None, str | None]:
    """The request's acceptance by draft position from `metrics.speculative_decoding`
    (acceptance_histogram and the totals beside it); (None, why) where they do not add up."""
    generated = usage.get("completion_tokens") if isinstance(usage, dict) else None
    try:
        return spec_metrics.from_histogram(
            "vllm", spec.get("acceptance_histogram"), steps=spec.get("num_spec_steps"),
            accepted=spec.get("num_accepted_draft_tokens"),
            draft_tokens=spec.get("num_draft_tokens"), positions=spec.get("num_spec_tokens"),
            generated=generated), None
    except spec_metrics.CountsProblem as exc:
        return None, f"{NAME}'s per-request speculation metrics are left out: {exc}"
