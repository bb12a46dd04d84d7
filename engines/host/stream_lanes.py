"""A window's lane as a batch of N streams (the race's streams control, N > 1): every lane
of the race, plain decoding's too, decodes N prompts in one batched pass per step, and the
engine process steps the lanes by turns as it steps single ones. Its events are BatchSteps
and a StreamsSummary (engines/loop/streams.py), sent as `batch` messages."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import SimpleNamespace

from ..errors import SpecvizError
from ..loop.session import K_MAX, _token_chars, check_k
from ..loop.streams import BatchEvent, StreamsSession
from .lanes import Delegated
from .model_pool import ModelPool
from .run_builder import trace_header
from .run_spec import LaneSpec, RunRequest
from .stream_builder import StreamsBuilder, prompt_set

Say = Callable[[str], None]
PREDICT_CONTEXT = 512  # the context a pass is priced at: a prompt and some answer


def window_prompts(given: str) -> list[str]:
    """Stream 1 decodes the window's prompt; the others the quick start's prompts in turn,
    so the streams are different users' requests rather than one request N times."""
    return [given, *(p for p in prompt_set("quickstart", None) if p.strip() != given.strip())]


@dataclass
class StreamsLane(Delegated):
    """A lane's batch of streams, stepped and controlled as a single lane is."""

    lane_id: str
    session: StreamsSession
    header: dict
    builder: StreamsBuilder

    def steps(self) -> Iterator[BatchEvent]:
        yield from self.session

    @property
    def build(self) -> str:
        from ..backends.probe import backend_build

        return backend_build(self.session.target.name)

    def control(self, kind: str, fields: dict, say: Say = lambda _: None) -> str | None:
        """K for every stream from its next step; auto K and settings stay as they began."""
        if kind != "set_k":
            return "a batch of streams keeps its oracle's settings and its K policy as it began"
        if not self.session.streams or self.session.streams[0].k == 0:
            return "plain decoding proposes nothing: it has no K to change"
        if self.session.batch_k is not None:
            return ("auto K chooses every stream's K for the batch each step: race again "
                    "with a number to set one")
        try:
            k = check_k(int(fields["k"]))
        except (SpecvizError, ValueError, KeyError) as exc:
            return str(exc)
        for stream in self.session.streams:
            stream.k = k
        return None

    def notice(self) -> str | None:
        return None

    def close(self, reusable: bool = True) -> None:
        """Its oracles (every one: a batch stopped before its first step has no streams
        yet) and its models, back to the pool unless a fault left their caches unknown."""
        for oracle in self.session.oracles:
            oracle.close()
        self.builder.close(reusable)


def build_streams_lane(lane_id: str, lane: LaneSpec, request: RunRequest, pool: ModelPool,
                       n: int, say: Say = lambda _: None) -> StreamsLane:
    if lane.on_server:
        raise SpecvizError("a server lane decodes one stream: set the race's streams to 1")
    builder = StreamsBuilder(lane, request, pool, say)
    try:
        prompts = window_prompts(request.prompt)
        session = builder.session(prompts, n)
        header = streams_header(lane, request, session, prompts, say)
    except BaseException:
        builder.close()
        raise
    return StreamsLane(lane_id, session, header, builder)


def streams_header(lane: LaneSpec, request: RunRequest, session: StreamsSession,
                   prompts: list[str], say: Say) -> dict:
    """Stream 1's trace header (the lane's text view starts on it), with every stream's
    prompt and the cost profile's price of a pass at each width the graph may need."""
    target, n = session.target, len(session.settings)
    first = SimpleNamespace(target=target, oracle=session.oracles[0], k=session.settings[0].k,
                            settings=session.settings[0], prompt_text=session.prompt_texts[0],
                            prompt_ids=session.prompt_ids[0],
                            token_chars=_token_chars(target, session.prompt_ids[0]))
    header = trace_header(lane, request, first)  # type: ignore[arg-type]
    header["streams"] = {
        "n": n, "prompts": [prompts[i % len(prompts)] for i in range(n)],
        "prompt_texts": list(session.prompt_texts),
        "token_chars": [list(_token_chars(target, ids)) for ids in session.prompt_ids],
        **pass_costs(request, target, say)}
    return header


def pass_costs(request: RunRequest, target, say: Say) -> dict:
    """The stored cost profile's ms of a pass of every width a batch may verify (16 streams
    at the largest K), for the predicted speedup at each N; a profile not stored here is
    measured by `specviz profile`, not in a race."""
    from ..backends.stream_cache import MAX_STREAMS
    from ..cost import profile as prof

    model = request.model
    stored = prof.load(model.target, target.name, target.device, model.threads, target.dtype,
                       say=say, variant=target.profile_variant)
    if stored is None:
        return {"pass_ms": None, "widest": None}
    return {"pass_ms": [round(stored.cost_ms(w, PREDICT_CONTEXT), 4)
                        for w in range(1, MAX_STREAMS * (K_MAX + 1) + 1)],
            "widest": max(stored.batches)}
