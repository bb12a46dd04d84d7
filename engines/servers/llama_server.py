"""llama.cpp's `llama-server`: what it says about speculation, and how to ask it.

With `timings_per_token` every streamed chunk (one per token) carries the slot's running
figures: `predicted_n` tokens so far, `predicted_ms` generation time (read once per
verification step, so the chunks of one step share it), and, once it has drafted, `draft_n`
and `draft_n_accepted` (tools/server/server-common.cpp, `server_slot_stats::to_json`).
`/props` names the speculative types it was started with. Whether a request can set the draft
length (`speculative.n_max`) depends on the build: the per-request fields are listed in
`/props`'s default generation settings where the build takes them.
"""

from __future__ import annotations

from .chunks import Chunk, choice_text, first_choice, integer, number
from .info import ServerInfo
from .sse import Endpoint, ServerError, get_json

NAME = "llama.cpp"
K_FIELD = "speculative.n_max"

# llama-server's speculative types, as the events' sources colour them.
SOURCES = {"draft-simple": "draft", "draft-eagle3": "eagle", "draft-mtp": "medusa",
           "draft-dflash": "draft", "draft-dspark": "draft"}


def detect(props: dict | None) -> bool:
    return bool(props) and "default_generation_settings" in props and "build_info" in props


def info(endpoint: Endpoint, props: dict) -> ServerInfo:
    settings = props.get("default_generation_settings") or {}
    params = settings.get("params", settings) if isinstance(settings, dict) else {}
    types = [t for t in str(params.get("speculative.types", "none")).split(",")
             if t and t != "none"]
    slots = get_json(endpoint, "/slots") if props.get("endpoint_slots") else None
    speculates = bool(types) or any(isinstance(s, dict) and s.get("speculative")
                                    for s in (slots or []))
    return ServerInfo(
        engine=NAME,
        model=str(props.get("model_alias") or props.get("model_path") or "?"),
        build=f"llama-server {props.get('build_info', '?')}",
        # Some builds list no types in /props although they speculate (seen in the stream).
        speculation=",".join(types) or ("on" if speculates else None),
        source=_source(types),
        k=integer(params.get(K_FIELD)),
        k_per_request=K_FIELD in params,
        off_per_request=K_FIELD in params,
    )


def _source(types: list[str]) -> str:
    for t in types:
        if t.startswith("ngram"):
            return "ngram"
        if t in SOURCES:
            return SOURCES[t]
    return "draft"


def request_fields(k: int | None, server: ServerInfo) -> dict:
    fields = {"timings_per_token": True, "cache_prompt": True}
    if k is not None and server.k_per_request:
        fields |= {K_FIELD: k, "speculative.n_min": 0}
    return fields


def chunk(data: dict, index: int) -> Chunk | None:
    choice = first_choice(data)
    timings = data.get("timings") if isinstance(data.get("timings"), dict) else {}
    gen_ms = number(timings.get("predicted_ms"))
    prompt_n = integer(timings.get("prompt_n"))
    cached = integer(timings.get("cache_n")) or 0
    return Chunk(
        text=choice_text(choice),
        step=gen_ms if gen_ms is not None else index,
        tokens=integer(timings.get("predicted_n")),
        # Absent until the slot first drafts: then none were drafted yet.
        drafted=integer(timings.get("draft_n", 0)) if timings else None,
        accepted=integer(timings.get("draft_n_accepted", 0)) if timings else None,
        gen_ms=gen_ms,
        prompt_ms=number(timings.get("prompt_ms")),
        finish=choice.get("finish_reason"),
        prompt_tokens=None if prompt_n is None else prompt_n + cached,
    )


def props(endpoint: Endpoint) -> dict | None:
    return get_json(endpoint, "/props")


def serves_metrics(endpoint: Endpoint) -> bool:
    """Whether it was started with `--metrics` (its /metrics then counts speculation)."""
    try:
        found = props(endpoint)
    except ServerError:
        return False  # the counters are an addition: the run goes on without them
    return bool(found and found.get("endpoint_metrics"))
