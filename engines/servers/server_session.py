"""A server lane's run: stream one completion and yield step events, as a Session does.

The controls a local session takes work here too, at chunk boundaries: stop closes the stream
(the server then cancels the request), pause stops reading it. K changes the draft length
only where the engine takes it per request; then, in the middle of a run, the lane continues
the same text in a fresh request with the new K (the server's prompt cache keeps that cheap).
Where the engine does not take it, `set_k` says so in one line and the run goes on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from types import ModuleType

from .. import events as ev
from ..errors import SpecvizError
from ..loop.session import RunControls, RunSettings, check_k
from . import spec_metrics
from .info import ServerInfo
from .sse import Endpoint, EventStream
from .steps import StepBuilder

ORACLE = "server"
REASONS = {"length": "max-tokens", "stop": "eos", "eos": "eos", "abort": "stopped"}


class ServerSession(RunControls):
    """Iterate it to run the completion; controls from any thread."""

    def __init__(self, endpoint: Endpoint, engine: ModuleType, server: ServerInfo,
                 settings: RunSettings, source: str | None = None,
                 metrics: bool | None = None) -> None:
        self.endpoint = endpoint
        self.engine = engine
        self.server = server
        self.settings = settings
        self.source = source or server.source
        self.prompt_text = settings.prompt
        self.summary: ev.SummaryEvent | None = None
        # The run's own speculation as the server counted it (/metrics), where it serves them.
        self.server_counts: spec_metrics.SpecCounts | None = None
        self.counts_note: str | None = None  # why the engine's own counts were left out
        serves = getattr(engine, "serves_metrics", None)
        self.metrics = metrics if metrics is not None else bool(serves and serves(endpoint))
        self._k = check_k(settings.k) if server.k_per_request else server.k
        self._k_changed = threading.Event()
        super().__init__()

    # ------------------------------------------------------------ control (any thread)

    @property
    def k(self) -> int:
        return self._k or 0

    def set_k(self, k: int) -> None:
        if not self.server.k_per_request:
            raise SpecvizError(f"{self.server.engine} takes the draft length only when it "
                               "starts (this build has no per-request draft length)")
        if self.settings.chat:
            raise SpecvizError("a chat reply cannot be continued with another K midway; the "
                               "new K applies from the next run")
        self._k = check_k(k)
        self._k_changed.set()

    # ------------------------------------------------------------ the run

    def __iter__(self) -> Iterator[ev.Event]:
        return self._run()

    def close(self) -> None:
        """Nothing is held here: the stream ends with the run (or with `stop`)."""

    def _run(self) -> Iterator[ev.Event]:
        counted_before = spec_metrics.read(self.endpoint) if self.metrics else None
        t_start = time.perf_counter()
        builder = StepBuilder(ORACLE, self.source, self.server.engine, self._k,
                              speculates=self.server.speculation is not None)
        first_chunk_ms: float | None = None
        reason = None
        while reason is None:
            self._k_changed.clear()
            builder.k = self._k
            stream = EventStream(self.endpoint, *self._request(builder))
            builder.new_request()
            mark = time.perf_counter()
            for index, data in enumerate(stream):
                first_chunk_ms = first_chunk_ms or _ms_since(t_start)
                chunk = self.engine.chunk(data, index)
                done = builder.feed(chunk, _ms_since(mark)) if chunk else []
                if done:
                    mark = time.perf_counter()
                yield from done
                reason = self._interrupted(stream)
                if reason or (done and self._continue(stream)):
                    # The next step has only begun: its tokens are left out (a fresh
                    # request writes them again), so every step shown is a whole one.
                    builder.discard_partial()
                    break
            yield from builder.finish(_ms_since(mark))
            reason = reason or self._ended(stream, builder)
        self.summary = self._summary(builder, reason, first_chunk_ms, t_start)
        # The engine's own count of this request (vLLM, SGLang) where it said one; else the
        # server's /metrics, before and after.
        self.server_counts = builder.run_counts or spec_metrics.read_after(
            self.endpoint, counted_before, self.summary.totals.tokens)
        self.counts_note = builder.counts_note
        yield self.summary

    def _request(self, builder: StepBuilder) -> tuple[str, dict]:
        s = self.settings
        text = "".join(step.text for step in builder.steps)
        body = {"max_tokens": s.max_tokens - builder.totals.tokens, "stream": True,
                "temperature": s.params.temperature, "top_p": s.params.top_p,
                "seed": s.params.seed, "model": self.server.model,
                **self.engine.request_fields(self._k, self.server)}
        if s.stop:
            body["stop"] = list(s.stop)
        if not s.chat:
            return "/v1/completions", {**body, "prompt": s.prompt + text}
        messages = [{"role": "system", "content": s.system}] if s.system else []
        for user, assistant in s.history:
            messages += [{"role": "user", "content": user},
                         {"role": "assistant", "content": assistant}]
        messages.append({"role": "user", "content": s.prompt})
        return "/v1/chat/completions", {**body, "messages": messages}

    def _interrupted(self, stream: EventStream) -> str | None:
        self._resume.wait()
        if self._stop.is_set():
            stream.close()
            return "stopped"
        return None

    def _continue(self, stream: EventStream) -> bool:
        """K changed mid-run: end this request; the run goes on in a fresh one (raw text only:
        a chat reply cannot be continued portably)."""
        if not self._k_changed.is_set() or self.settings.chat:
            return False
        stream.close()
        return True

    def _ended(self, stream: EventStream, builder: StepBuilder) -> str | None:
        if not stream.finished and not builder.finish_reason:
            return None  # closed by us to continue with a new K
        if builder.totals.tokens >= self.settings.max_tokens:
            return "max-tokens"
        finish = builder.finish_reason or "stop"
        if finish == "stop" and self.settings.stop:
            return "stop-string" if builder.stop_string else "eos"
        return REASONS.get(finish, finish)

    def _summary(self, builder: StepBuilder, reason: str, first_chunk_ms: float | None,
                 t_start: float) -> ev.SummaryEvent:
        totals = builder.totals
        if builder.run_drafted is not None:  # totals the engine gave only at the end
            totals = replace(totals, proposed=max(totals.proposed, builder.run_drafted))
        prefill = builder.prompt_ms if builder.prompt_ms is not None else (first_chunk_ms or 0.0)
        return ev.SummaryEvent(oracle=ORACLE, reason=reason,
                               text="".join(step.text for step in builder.steps),
                               totals=totals, prefill_ms=prefill, wall_ms=_ms_since(t_start))


def _ms_since(t: float) -> float:
    return (time.perf_counter() - t) * 1000.0
