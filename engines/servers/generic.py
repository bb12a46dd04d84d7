"""Any other OpenAI-compatible server: tokens as they stream, speculation not reported.

Each chunk is taken as one step; a server that speculates and streams one step per chunk shows
its accepted tokens as drafts, and nothing is known about its rejected ones.

`read` is how vLLM and SGLang chunks are read too, as they extend the same shape: a chunk whose
fields have other types is one line, not a misread, and the tokens' texts that the
log-probabilities give are kept only where they spell the chunk's text (engines that decode
each token alone name a character split across tokens as U+FFFD).
"""

from __future__ import annotations

import json
from dataclasses import replace

from .chunks import Chunk, openai_chunk
from .info import ServerInfo
from .sse import ServerError

NAME = "OpenAI-compatible server"
TYPES = {"text": (str, "text"), "finish_reason": (str, "text"), "delta": (dict, "an object"),
         "logprobs": (dict, "an object")}


def info(model: str) -> ServerInfo:
    return ServerInfo(engine=NAME, model=model, build=NAME, speculation=None)


def request_fields(k: int | None, server: ServerInfo) -> dict:
    return {"stream_options": {"include_usage": True}}


def chunk(data: dict, index: int) -> Chunk | None:
    # Usage here may come only at the end, counting the whole run: the tokens of a step are
    # counted from its chunk instead (its token ids, else one a chunk of text).
    return replace(read(data, index, NAME), tokens=None)


def read(data: dict, index: int, engine: str, **extra) -> Chunk:
    """An OpenAI-style chunk, its shape checked; `extra` as `openai_chunk` takes it."""
    problem = _problem(data)
    if problem:
        raise ServerError(f"{engine} sent a malformed chunk ({problem}): "
                          f"{json.dumps(data)[:80]}")
    got = openai_chunk(data, index, **extra)
    if got.pieces is not None and "".join(got.pieces) != got.text:
        got = replace(got, pieces=None)
    return got


def _problem(data: dict) -> str | None:
    choices = data.get("choices")
    if choices is not None and not (isinstance(choices, list)
                                    and all(isinstance(c, dict) for c in choices)):
        return "choices is not a list of objects"
    choice = choices[0] if choices else {}
    for name, (kind, words) in TYPES.items():
        if choice.get(name) is not None and not isinstance(choice[name], kind):
            return f"{name} is not {words}"
    content = (choice.get("delta") or {}).get("content")
    if content is not None and not isinstance(content, str):
        return "delta.content is not text"
    if not _ids_or_none(choice.get("token_ids")):
        return "token_ids is not a list of token ids"
    usage = data.get("usage")
    if usage is not None and not (isinstance(usage, dict) and _counts(usage)):
        return "usage is not an object of token counts"
    return None


def _ids_or_none(value) -> bool:
    return value is None or (isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value))


def _counts(usage: dict) -> bool:
    return all(usage.get(name) is None or (isinstance(usage[name], int)
                                           and not isinstance(usage[name], bool))
               for name in ("prompt_tokens", "completion_tokens", "total_tokens"))
