"""A lane spec and N prompts become a batch of streams (engines/loop/streams.py).

Every stream gets an oracle of its own, built as a lane's is (run_builder.build_oracle), and
its own sampling seed (the run's plus its number, so copies of one prompt sample apart); an
oracle with a draft model gets a draft backend of its own on the shared weights (a draft's
cache follows one context). The prompt set: the prompts given, or the quick start's prompt
files, or Spec-Bench's first turns, handed to the streams in turn.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..backends.base import Backend
from ..cost.auto_k import Acceptance, AutoK
from ..cost.batch_k import BatchK
from ..cost.profile_data import BATCHES
from ..cost.profile_widths import widen
from ..errors import SpecvizError
from ..loop.streams import StreamsSession, check_streams
from ..oracles import Oracle, is_plain
from .k_policy import chain_measured, k_policy
from .model_pool import ModelPool
from .run_builder import acquire, build_oracle, settings
from .run_spec import LaneSpec, RunRequest

Say = Callable[[str], None]
ROOT = Path(__file__).resolve().parents[2]
PROMPT_SETS = ("given", "quickstart", "spec-bench")


def prompt_set(name: str, given: str | None) -> list[str]:
    """The prompts the streams take in turn."""
    if name == "quickstart":
        return [p.read_text(encoding="utf-8") for p in sorted((ROOT / "assets" / "prompts")
                                                              .glob("*.txt"))]
    if name == "spec-bench":
        from ..questions import load_questions

        path = ROOT / "benchmarks" / "prompts" / "spec_bench_dev.jsonl"
        return [q.turns[0] for q in load_questions(path)]
    if given is None:
        raise SpecvizError("give a prompt with --prompt TEXT or --prompt-file FILE, or a "
                           f"prompt set with --stream-prompts {'|'.join(PROMPT_SETS[1:])}")
    return [given]


@dataclass
class StreamsBuilder:
    """What a batch of streams of one lane needs, loaded once: the target and the lane's
    models (the first stream's; the others' drafts share their weights)."""

    lane: LaneSpec
    request: RunRequest
    pool: ModelPool
    say: Say = lambda _: None
    target: Backend | None = None
    models: list[dict[str, Backend]] = field(default_factory=list)
    first_policy: AutoK | None = None  # the first stream's, holding the cost profiles

    def __post_init__(self) -> None:
        self.target = acquire(self.pool, self.request.model, self.request.model.target)
        first: dict[str, Backend] = {}
        try:
            for name, model in self.lane.models.items():
                first[name] = acquire(self.pool, self.request.model, model)
        except SpecvizError:  # a draft that will not load: the target goes back to the pool
            for backend in [*first.values(), self.target]:
                self.pool.release(backend)
            raise
        self.models = [first]

    def session(self, prompts: Sequence[str], n: int) -> StreamsSession:
        """A fresh batched run of `n` streams, stream i on prompts[i % len(prompts)]."""
        n = check_streams(n)
        base = settings(self.lane, self.request)
        runs = [replace(base, prompt=prompts[i % len(prompts)],
                        params=replace(base.params, seed=base.params.seed + i))
                for i in range(n)]
        while len(self.models) < n:
            self.models.append({k: m.share() for k, m in self.models[0].items()})
        # Each oracle sees the target as its stream does (an early exit drafts on its cells).
        batch_target, views = self.target.stream_targets(n)
        oracles = [build_oracle(self.lane, views[i], self.models[i], self.say)
                   for i in range(n)]
        policies, batch = self._batch_k(oracles)
        return StreamsSession(batch_target, oracles, runs, policies, batch)

    def _batch_k(self, oracles: Sequence[Oracle]) -> tuple[list[AutoK] | None, BatchK | None]:
        """With `--k auto`, a policy per stream (learning its odds) and the batch's chooser,
        priced with the target's cost profile, which times the widths the batch needs once."""
        if not self.lane.auto_k or is_plain(self.lane.oracle):
            return None, None
        if self.first_policy is None:
            draft = next(iter(self.models[0].values()), None)
            self.first_policy = k_policy(self.lane, self.request.model, oracles[0],
                                         self.target, draft, self.say)
        first = self.first_policy
        first.profile = widen(self.target, first.profile, len(oracles), self.say)
        pool = Acceptance(first.acceptance.decay)  # the streams learn one oracle's odds
        known = first.known_accept or chain_measured(oracles[0], chains=True)
        policies = [AutoK(o, first.profile, first.draft_profile, k_max=BATCHES[-1] - 1,
                          known_accept=known, pool=pool) for o in oracles]
        return policies, BatchK(policies, first.profile, padded=self.target.pads_streams)

    def close(self, reusable: bool = True) -> None:
        """The models back to the pool (`reusable`: their caches hold what they say)."""
        for extra in self.models[1:]:
            for backend in extra.values():
                backend.close()
        for backend in [*self.models[0].values(), self.target]:
            if backend is not None:
                self.pool.release(backend, reusable=reusable)
