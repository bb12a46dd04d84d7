"""vLLM, SGLang and a plain OpenAI-compatible server, spoken over real local HTTP.

Each serves what specviz asks an engine before a lane starts (`/v1/models`, vLLM's `/version`,
SGLang's `/get_server_info`; `/props` is absent, as on both) and streams `/v1/completions` as
that engine does, from a script of verification steps: the request's own fields decide what
each chunk carries (`max_tokens`, `stream_options`, `return_token_ids`, `logprobs`,
`return_spec_tokens_details`), one chunk per engine step, each key where the engine writes it.
Shapes read from the engines' sources:

- vLLM: vllm/entrypoints/openai/completion/serving.py (`completion_stream_generator`: choices
  with text, logprobs, finish_reason, stop_reason, prompt_token_ids, token_ids; continuous
  usage on each chunk; a last chunk with no choices, the usage and `metrics`),
  generate/base/protocol.py (`SpeculativeDecodingMetrics`), models/protocol.py (`ModelCard`).
- SGLang: python/sglang/srt/entrypoints/openai/serving_completions.py (choices with
  matched_stop, token_ids; `usage` null unless continuous; an `sglext` chunk after the
  content; the usage chunk), openai/utils.py (`spec_tokens_details_from_meta_info`),
  entrypoints/http_server.py (`/get_server_info` holds `version`; there is no `/version`).
- the plain server: the OpenAI completions stream (one token a chunk, usage at the end when
  asked), as Ollama or LM Studio serve it: `owned_by` names no engine.

The HTTP is tests/fake_server.py's, sent chunked as uvicorn sends it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from fake_server import Reply, sse

CREATED = 1_767_000_000
PROMPT_IDS = [101, 102, 103, 104, 105]


@dataclass(frozen=True)
class Step:
    """One verification step: the tokens it emitted (its accepted drafts, then the target's
    own) as (id, text, logprob), and how many tokens it drafted. `named` is what the
    log-probabilities call each token where that is not its text: an engine that decodes each
    token alone names the bytes of a split character U+FFFD."""

    tokens: tuple[tuple[int, str, float], ...]
    drafted: int = 0
    named: tuple[str, ...] | None = None

    @property
    def accepted(self) -> int:
        return len(self.tokens) - 1 if self.drafted else 0


def steps(*shapes: tuple[str, int]) -> list[Step]:
    """Steps from ("|"-separated token texts, drafted): ids and log-probabilities follow
    from their order."""
    out, n = [], 0
    for words, drafted in shapes:
        tokens = []
        for word in words.split("|"):
            n += 1
            tokens.append((1000 + n, word, -0.05 * n))
        out.append(Step(tuple(tokens), drafted))
    return out


# A code edit as a drafting engine would stream it: the prompt's step, drafted steps with
# some drafts accepted, one where the drafter had nothing, one whose drafts all failed.
SCRIPT = steps(("def", 0), (" mean|(|values", 4), ("):", 4), ("\n   ", 0),
               (" return| sum|(|values|)", 4), (" /", 3), (" len|(|values|)", 4))


@dataclass
class Engine:
    """A served engine: its script and how it answers."""

    name: str  # vllm, sglang or openai
    script: list[Step]
    model: str = "Qwen/Qwen2.5-Coder-1.5B-Instruct"
    version: str = "0.11.0"

    def routes(self, edit=lambda lines: lines, **reply) -> dict:
        """FakeServer's routes; `edit` changes a stream's lines before they are sent (a
        malformed chunk), `reply` goes to its Reply (cut: the connection drops after them)."""
        routes = {("GET", "/v1/models"): lambda _: Reply(json_body=self.models()),
                  ("POST", "/v1/completions"): lambda body: Reply(
                      lines=edit(self.stream(body)), chunked=True, **reply)}
        if self.name == "vllm":
            routes["GET", "/version"] = lambda _: Reply(json_body={"version": self.version})
        if self.name == "sglang":
            routes["GET", "/get_server_info"] = lambda _: Reply(json_body=self.server_info())
        return routes

    # ------------------------------------------------------------ what it says of itself

    def models(self) -> dict:
        owner = {"vllm": "vllm", "sglang": "sglang", "openai": "library"}[self.name]
        card = {"id": self.model, "object": "model", "created": CREATED, "owned_by": owner}
        if self.name == "vllm":
            card |= {"root": self.model, "parent": None, "max_model_len": 32768,
                     "permission": [{"id": "modelperm-1", "object": "model_permission",
                                     "created": CREATED, "allow_sampling": True,
                                     "allow_logprobs": True, "organization": "*",
                                     "group": None, "is_blocking": False}]}
        if self.name == "sglang":
            card |= {"root": self.model, "max_model_len": 32768}
        return {"object": "list", "data": [card]}

    def server_info(self) -> dict:
        return {"model_path": self.model, "tp_size": 1, "speculative_algorithm": "EAGLE3",
                "speculative_num_steps": 3, "speculative_num_draft_tokens": 4,
                "internal_states": [{"avg_spec_accept_length": 2.1}],
                "version": self.version}

    # ------------------------------------------------------------ the stream

    def stream(self, body: dict) -> list[str]:
        limit = int(body.get("max_tokens") or 16)
        played = played_steps(self.script, limit)
        finish = "length" if sum(len(s.tokens) for s in played) >= limit else "stop"
        make = {"vllm": self._vllm, "sglang": self._sglang, "openai": self._openai}[self.name]
        return sse(make(body, played, finish))

    def _vllm(self, body: dict, played: list[Step], finish: str) -> list[dict]:
        include, continuous = _usage_asked(body)
        chunks, n = [], 0
        for i, step in enumerate(played):
            n += len(step.tokens)
            last = i == len(played) - 1
            choice = {"index": 0, "text": step_text(step), "logprobs": _completion_logprobs(
                step, body, n - len(step.tokens)), "finish_reason": finish if last else None,
                      "stop_reason": None,
                      "prompt_token_ids": PROMPT_IDS if body.get("return_token_ids") and i == 0
                      else None,
                      "token_ids": _ids(step) if body.get("return_token_ids") else None}
            chunk = self._head("text_completion") | {"choices": [choice]}
            if continuous:
                chunk["usage"] = _usage(n)
            chunks.append(chunk)
        if include:
            final = self._head("text_completion") | {"choices": [], "usage": _usage(n)}
            if any(s.drafted for s in played):
                final["metrics"] = {"speculative_decoding": _vllm_metrics(played[1:])}
            chunks.append(final)
        return chunks

    def _sglang(self, body: dict, played: list[Step], finish: str) -> list[dict]:
        include, continuous = _usage_asked(body)
        chunks, n = [], 0
        for i, step in enumerate(played):
            n += len(step.tokens)
            last = i == len(played) - 1
            lp = _completion_logprobs(step, body, 0)
            if lp is not None:
                lp["text_offset"] = [-1] * len(step.tokens)  # SGLang: not supported yet
            choice = {"index": 0, "text": step_text(step), "logprobs": lp,
                      "finish_reason": finish if last else None,
                      # An end of sequence is matched by the EOS token's id.
                      "matched_stop": 151643 if last and finish == "stop" else None,
                      "token_ids": _ids(step) if body.get("return_token_ids") else None,
                      "prompt_token_ids": PROMPT_IDS if body.get("return_token_ids") and i == 0
                      else None, "hidden_states": None}
            chunks.append(self._head("text_completion") | {
                "choices": [choice], "usage": _usage(n) if continuous else None})
        if body.get("return_spec_tokens_details") and any(s.drafted for s in played):
            chunks.append(self._head("text_completion") | {
                "choices": [], "usage": None, "sglext": {
                    "routed_experts": None, "cached_tokens_details": None,
                    "spec_tokens_details": _sglang_details(played[1:])}})
        if include:
            chunks.append(self._head("text_completion") | {"choices": [], "usage": _usage(n)})
        return chunks

    def _openai(self, body: dict, played: list[Step], finish: str) -> list[dict]:
        include, _ = _usage_asked(body)
        tokens = [t for s in played for t in s.tokens]
        chunks = [self._head("text_completion") | {"system_fingerprint": "fp_ollama",
                                                   "choices": [{"text": text, "index": 0,
                                                                "finish_reason": None}]}
                  for _id, text, _lp in tokens]
        chunks.append(self._head("text_completion") | {
            "system_fingerprint": "fp_ollama",
            "choices": [{"text": "", "index": 0, "finish_reason": finish}]})
        if include:
            chunks.append(self._head("text_completion") | {"choices": [],
                                                           "usage": _usage(len(tokens))})
        return chunks

    def _head(self, kind: str) -> dict:
        return {"id": "cmpl-7f3a", "object": kind, "created": CREATED, "model": self.model}


def played_steps(script: list[Step], max_tokens: int) -> list[Step]:
    """The steps a run of `max_tokens` streams: the last one cut at the limit (the engine
    stops there, its accepted drafts past it dropped)."""
    out, n = [], 0
    for step in script:
        if n >= max_tokens:
            break
        tokens = step.tokens[: max_tokens - n]
        named = step.named[: len(tokens)] if step.named else None
        out.append(Step(tokens, step.drafted, named))
        n += len(tokens)
    return out


def sent_text(played: list[Step]) -> str:
    return "".join(step_text(s) for s in played)


def step_text(step: Step) -> str:
    return "".join(text for _id, text, _lp in step.tokens)


def _ids(step: Step) -> list[int]:
    return [token_id for token_id, _text, _lp in step.tokens]


def _usage_asked(body: dict) -> tuple[bool, bool]:
    options = body.get("stream_options") or {}
    return bool(options.get("include_usage")), bool(options.get("continuous_usage_stats"))


def _usage(completion: int) -> dict:
    prompt = len(PROMPT_IDS)
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion,
            "completion_tokens": completion}


def _completion_logprobs(step: Step, body: dict, offset: int) -> dict | None:
    if body.get("logprobs") is None:
        return None
    offsets, at = [], offset
    for _id, text, _lp in step.tokens:
        offsets.append(at)
        at += len(text)
    named = step.named or [text for _i, text, _lp in step.tokens]
    lps = [lp for _i, _t, lp in step.tokens]
    return {"text_offset": offsets, "token_logprobs": lps, "tokens": list(named),
            "top_logprobs": [{name: lp} for name, lp in zip(named, lps, strict=True)]}


def _vllm_metrics(spec: list[Step]) -> dict:
    """vLLM's per-request metrics (docs/features/speculative_decoding/acceptance_metrics.md):
    steps that drafted nothing are left out of the steps and the histogram (dense, K + 1
    buckets)."""
    spec = [s for s in spec if s.drafted]
    drafted = sum(s.drafted for s in spec)
    accepted = sum(s.accepted for s in spec)
    k = max(s.drafted for s in spec)
    histogram = [sum(1 for s in spec if s.accepted == j) for j in range(k + 1)]
    return {"mean_acceptance_length": 1 + accepted / len(spec),
            "draft_acceptance_rate": accepted / drafted, "acceptance_histogram": histogram,
            "num_spec_steps": len(spec), "num_accepted_draft_tokens": accepted,
            "num_draft_tokens": drafted, "num_spec_tokens": k}


def _sglang_details(spec: list[Step]) -> dict:
    proposed = sum(s.drafted for s in spec)
    correct = sum(s.accepted for s in spec)
    return {"spec_accept_rate": correct / proposed if proposed else 0.0,
            "spec_accept_length": 1 + correct / len(spec), "spec_cap_length": 0.0,
            "spec_block_accept_length": 0.0, "spec_num_correct_drafts": correct,
            "spec_num_proposed_drafts": proposed, "spec_verify_ct": len(spec),
            "spec_correct_drafts_histogram": correct_drafts_histogram(spec),
            "spec_cap_lens_histogram": []}


def correct_drafts_histogram(spec: list[Step]) -> list[int]:
    """SGLang's (Req.update_spec_correct_drafts_histogram): bucket j counts the verify steps
    with j correct drafts, grown as far as the most any step had."""
    most = max(s.accepted for s in spec)
    return [sum(1 for s in spec if s.accepted == j) for j in range(most + 1)]


def p_target(logprob: float) -> float:
    return math.exp(logprob)


def malformed(line: object) -> str:
    """An SSE data line holding `line` as it is (a str) or as JSON."""
    return f"data: {line if isinstance(line, str) else json.dumps(line)}\n\n"
