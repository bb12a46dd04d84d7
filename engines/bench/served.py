"""Speculation under concurrency on a serving engine: a llama-server with N slots
(`--parallel N`) streaming to N clients at once, against a plain llama-server of the same model
with as many slots, at each N; and where its speculation stops paying.

The two servers of an N are started together and stay up for its rounds (an idle llama-server
waits on its queue and takes no CPU). A round sends every client's request at once to one
server, waits for all of them, then does the same on the other, the first alternating by round
so the machine's drifts hit both. Before the measured rounds each server answers the same
requests, a few tokens long, once: its slots then hold the prompts (llama-server's prompt
cache), so every measured round decodes and none reads a prompt cold.

A side's throughput is every client's tokens over the wall time from the first request sent to
the last stream's end; a client's pace, its own tokens over its own request's time. The interval
is over rounds (speedup.from_ratios on each round's ratio of throughputs): a single round has
none. What the streams said (tokens a verification step wrote, positions it checked) and what
the speculating server counted (/metrics, difference over the rounds: the clients are its only
ones, so the counts are theirs, acceptance by draft position among them) come with each N.
The result is concurrency.Point, so a serving engine's figures share the local streams' table,
JSON and crossover.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from .. import events as ev
from ..errors import SpecvizError
from ..loop.session import RunSettings
from ..servers import connect, llama_server, spec_metrics
from ..servers.llama_speculation import Speculation
from ..servers.server_session import ServerSession
from ..servers.spawn import SpawnedServer
from ..servers.sse import ServerError
from ..speedup import NOISE, Speedup, from_ratios
from .concurrency import Point

Say = Callable[[str], None]
WARM_TOKENS = 4  # the warm-up's answer: enough for every slot to have read its prompt
SLOT_MARGIN = 256  # a slot's room beyond its prompt's bytes and answer (a chat template's)


@dataclass(frozen=True)
class ServedPoint(Point):
    """A Point with the speculating server's own counts over the measured rounds."""

    counts: spec_metrics.SpecCounts | None = None

    def to_dict(self) -> dict:
        out = super().to_dict()
        if self.counts is not None:
            out["server_counts"] = self.counts.to_dict()
        return out


@dataclass
class Client:
    """One client's request in one round: its summary or the line that ended it."""

    tokens: int = 0
    started: float = 0.0  # perf_counter() as its request was sent
    seconds: float = 0.0
    steps: int = 0
    proposed: int = 0
    error: str | None = None
    text: str = ""

    @property
    def pace(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Round:
    clients: list[Client] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def tokens(self) -> int:
        return sum(c.tokens for c in self.clients)

    @property
    def tok_per_s(self) -> float:
        return self.tokens / self.wall_s if self.wall_s > 0 else 0.0


@dataclass
class Side:
    """One server at one N: its rounds."""

    rounds: list[Round] = field(default_factory=list)

    @property
    def tok_per_s(self) -> float:
        wall = sum(r.wall_s for r in self.rounds)
        return sum(r.tokens for r in self.rounds) / wall if wall > 0 else 0.0

    @property
    def pace(self) -> float:
        paces = [c.pace for r in self.rounds for c in r.clients if c.error is None]
        return sum(paces) / len(paces) if paces else 0.0

    def per_client_step(self) -> tuple[float, float]:
        """(tokens a client's verification step wrote, positions it checked: its drafts and
        one), over every client and round."""
        steps = sum(c.steps for r in self.rounds for c in r.clients)
        if not steps:
            return 1.0, 1.0
        tokens = sum(c.tokens for r in self.rounds for c in r.clients)
        proposed = sum(c.proposed for r in self.rounds for c in r.clients)
        return tokens / steps, (steps + proposed) / steps

    def failures(self) -> list[str]:
        return [c.error for r in self.rounds for c in r.clients if c.error]


class Served:
    """A spawned llama-server and how its clients ask it."""

    def __init__(self, process: SpawnedServer, settings: RunSettings) -> None:
        self.process = process
        _, server = connect(process.endpoint, "llama.cpp")
        spec = process.speculation
        k = spec.longest_draft or server.k or 0
        self.server = replace(server, speculation=None if spec.plain else spec.label,
                              source=llama_server._source(list(spec.types)),
                              k=None if spec.plain else k)
        self.settings = replace(settings, k=0 if spec.plain else k)

    def session(self, prompt: str, max_tokens: int, seed: int | None) -> ServerSession:
        settings = replace(self.settings, prompt=prompt, max_tokens=max_tokens,
                           params=replace(self.settings.params, seed=seed))
        return ServerSession(self.process.endpoint, llama_server, self.server, settings,
                             metrics=False)

    def round(self, prompts: Sequence[str], n: int, max_tokens: int) -> Round:
        """`n` clients at once, client i streaming prompts[i % len(prompts)] to its end."""
        seed = self.settings.params.seed
        sessions = [self.session(prompts[i % len(prompts)], max_tokens,
                                 None if seed is None else seed + i) for i in range(n)]
        clients = [Client() for _ in range(n)]
        ready = threading.Barrier(n + 1)
        threads = [threading.Thread(target=_client, args=(s, c, ready), daemon=True,
                                    name=f"specviz-client-{i}")
                   for i, (s, c) in enumerate(zip(sessions, clients))]
        for t in threads:
            t.start()
        ready.wait()  # every client is about to send
        for t in threads:
            t.join()
        # From the first request sent to the last stream's end.
        out = Round(clients, max(c.started + c.seconds for c in clients)
                    - min(c.started for c in clients))
        if not self.process.alive():
            out.clients[0].error = out.clients[0].error or self.process.death_line()
        return out

    def close(self) -> None:
        self.process.stop()


def _client(session: ServerSession, client: Client, ready: threading.Barrier) -> None:
    ready.wait()
    start = client.started = time.perf_counter()
    steps: list[ev.StepEvent] = []
    try:
        for event in session:
            if isinstance(event, ev.StepEvent):
                steps.append(event)
    except (ServerError, SpecvizError) as exc:
        client.error = str(exc)
    except Exception as exc:  # any fault is this client's error, said, not a silent 0 tokens
        client.error = f"{type(exc).__name__}: {exc}"
    client.seconds = time.perf_counter() - start
    summary = session.summary
    if summary is not None:
        client.tokens = summary.totals.tokens
        client.text = summary.text
    else:  # cut short: the steps that came
        client.tokens = sum(len(s.emitted_ids) for s in steps)
    client.steps = len(steps)
    client.proposed = sum(len(s.proposed) for s in steps)


def slot_context(prompts: Sequence[str], max_tokens: int) -> int:
    """A slot's context: the longest prompt's bytes (no token is shorter than a byte) and the
    answer, with room for a chat template, rounded up to 256."""
    need = max(len(p.encode("utf-8")) for p in prompts) + max_tokens + SLOT_MARGIN
    return -(-need // 256) * 256


def measure(n: int, model: Path, speculation: Speculation, settings: RunSettings,
            prompts: Sequence[str], rounds: int = 1, threads: int = 2,
            binary: Path | None = None, say: Say = lambda _: None) -> ServedPoint:
    """Speculation against a plain llama-server at `n` clients, `rounds` rounds, the first
    to be asked alternating by round."""
    ctx = n * slot_context(prompts, settings.max_tokens)
    started: list[Served] = []
    try:
        for spec in (Speculation(), speculation):
            process = SpawnedServer(model, spec, threads=threads, ctx=ctx, binary=binary,
                                    parallel=n)
            try:
                started.append(Served(process, settings))
            except BaseException:  # it would not answer: stopped here, not left running
                process.stop()
                raise
        plain, lane = started
        for server in (plain, lane):
            server.round(prompts, n, min(WARM_TOKENS, settings.max_tokens))
        before = spec_metrics.read(lane.process.endpoint)
        sides = (Side(), Side())
        for r in range(rounds):
            order = (0, 1) if r % 2 == 0 else (1, 0)
            for who in order:
                server = (lane, plain)[who]
                sides[who].rounds.append(server.round(prompts, n, settings.max_tokens))
        counts = spec_metrics.read_after(lane.process.endpoint, before,
                                         sum(r.tokens for r in sides[0].rounds))
    finally:
        for server in started:
            server.close()
    return point(n, *sides, counts)


def point(n: int, lane: Side, plain: Side,
          counts: spec_metrics.SpecCounts | None = None) -> ServedPoint:
    ratios = [a.tok_per_s / b.tok_per_s for a, b in zip(lane.rounds, plain.rounds)
              if a.tok_per_s > 0 and b.tok_per_s > 0]
    if not ratios:
        raise SpecvizError(f"no round at {n} clients streamed a token on both servers: "
                           + "; ".join((lane.failures() + plain.failures())[:1] or ["?"]))
    speedup = (from_ratios(ratios) if len(ratios) > 1
               else Speedup(ratios[0], None, None, 1, NOISE, tuple(ratios)))
    tokens, width = lane.per_client_step()
    failures = tuple(dict.fromkeys(lane.failures() + plain.failures()))
    return ServedPoint(n, lane.tok_per_s, plain.tok_per_s, lane.pace, plain.pace, speedup,
                       tokens, width, failures, counts)
