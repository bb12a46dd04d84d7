"""What one streamed chunk says, whichever engine sent it.

Engines reveal speculation differently. llama-server streams one chunk per token and, with
`timings_per_token`, puts its running totals in each (tokens, draft tokens, accepted draft
tokens, generation milliseconds); the chunks of one verification step share its clock reading.
vLLM and SGLang stream the tokens of one step as one chunk. A `Chunk` is the common shape:
chunks with the same `step` came from one verification step, and the running totals, where
the engine gives them, say how many tokens, drafts and accepted drafts that step had.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Chunk:
    text: str
    step: object  # equal for the chunks of one verification step
    token_ids: tuple[int, ...] | None = None
    tokens: int | None = None  # tokens generated so far, this chunk's included
    drafted: int | None = None  # draft tokens proposed so far
    accepted: int | None = None  # draft tokens accepted so far
    gen_ms: float | None = None  # generation time so far, by the engine's clock
    prompt_ms: float | None = None  # prompt processing time, by the engine's clock
    finish: str | None = None  # why generation ended (in the last chunk)
    n_tokens: int | None = None  # tokens in this chunk, where the engine says (not cumulative)
    pieces: tuple[str, ...] | None = None  # each token's text, where the engine says
    logprobs: tuple[float, ...] | None = None  # each token's log-probability under the target
    prompt_tokens: int | None = None
    stop_string: bool = False  # the engine says generation ended at a stop string
    # The request's own speculation as the engine counted it (spec_metrics.SpecCounts: vLLM's
    # and SGLang's acceptance histograms), in the chunk that says it; `note`: why a chunk's
    # counts were left out, in one line.
    counts: object = None
    note: str | None = None


def first_choice(data: dict) -> dict:
    choices = data.get("choices") or []
    return choices[0] if choices and isinstance(choices[0], dict) else {}


def choice_text(choice: dict) -> str:
    """A completion chunk's text, or a chat chunk's delta content."""
    if isinstance(choice.get("text"), str):
        return choice["text"]
    delta = choice.get("delta")
    if isinstance(delta, dict) and isinstance(delta.get("content"), str):
        return delta["content"]
    return ""


def number(value) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def integer(value) -> int | None:
    n = number(value)
    return None if n is None else int(n)


def ids(value) -> tuple[int, ...] | None:
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return tuple(value)
    return None


def openai_chunk(data: dict, index: int, **extra) -> Chunk:
    """A standard OpenAI-style chunk, as vLLM and SGLang stream them: one chunk per
    verification step (or several steps, when the server's output runs ahead of its HTTP
    side), cumulative `usage.completion_tokens` with continuous usage statistics, the chunk's
    `token_ids` where asked for, and each token's text from `logprobs` where asked for."""
    choice = first_choice(data)
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    token_ids = ids(choice.get("token_ids"))
    pieces, logprobs = _logprobs(choice.get("logprobs"))
    return Chunk(
        text=choice_text(choice),
        step=index,
        token_ids=token_ids,
        tokens=integer(usage.get("completion_tokens")),
        finish=choice.get("finish_reason"),
        n_tokens=len(token_ids) if token_ids is not None else None,
        pieces=pieces,
        logprobs=logprobs,
        prompt_tokens=integer(usage.get("prompt_tokens")),
        stop_string=isinstance(choice.get("stop_reason") or choice.get("matched_stop"), str),
        **extra,
    )


def _logprobs(value) -> tuple[tuple[str, ...] | None, tuple[float, ...] | None]:
    """Completions' {tokens, token_logprobs} or chat's {content: [{token, logprob}]}."""
    if not isinstance(value, dict):
        return None, None
    if isinstance(value.get("tokens"), list):
        tokens, lps = value["tokens"], value.get("token_logprobs") or []
    elif isinstance(value.get("content"), list):
        entries = [e for e in value["content"] if isinstance(e, dict)]
        tokens = [e.get("token") for e in entries]
        lps = [e.get("logprob") for e in entries]
    else:
        return None, None
    if not all(isinstance(t, str) for t in tokens):
        return None, None
    good = len(lps) == len(tokens) and all(number(p) is not None for p in lps)
    return tuple(tokens), tuple(float(p) for p in lps) if good else None
