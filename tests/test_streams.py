"""Several prompts decoded at once (engines/loop/streams.py): one batched pass per step, each
stream lossless against its own plain decoding, streams leaving the batch as they end."""

from __future__ import annotations

import pytest

from specviz.engines import events as ev
from specviz.engines.bench.compare import check_stream_against_plain
from specviz.engines.errors import ContextOverflow, SpecvizError
from specviz.engines.loop.session import RunSettings, Session
from specviz.engines.loop.streams import REASON_FAILED, BatchStep, StreamsSession
from specviz.engines.oracles import make_oracle
from specviz.engines.oracles.registry import ORACLE_INFO
from specviz.engines.sampling import SamplingParams

PROMPTS = ["def add(a, b): return a + b def add(", "the x the y the x the", "a + b = x",
           "(x) (y) (x) (y) ("]
# Every oracle llama.cpp runs without trained heads; cross-draft is given the target's own
# tokenizer, which it re-tokenizes through as any other.
LLAMA_ORACLES = [name for name, d in ORACLE_INFO.items() if "llama" in d.backends]


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    from tiny_gguf import tiny_llama_backend

    backend = tiny_llama_backend(tmp_path_factory.mktemp("streams"), 512)
    yield backend
    backend.close()


def settings(n: int, k: int = 4, max_tokens: int = 24, **kw) -> list[RunSettings]:
    return [RunSettings(p, chat=False, k=k, max_tokens=max_tokens, **kw) for p in PROMPTS[:n]]


def oracles_for(name: str, target, n: int, drafts: list) -> list:
    out = []
    for _ in range(n):
        inputs = {"suffix_memory": "off"}
        if ORACLE_INFO[name].needs_draft:
            drafts.append(target.share())  # each stream's draft keeps a cache of its own
            inputs["draft"] = drafts[-1]
        out.append(make_oracle(name, target=target, **inputs))
    return out


def stream_steps(events, index: int) -> list[ev.StepEvent]:
    return [e for b in events if isinstance(b, BatchStep) for i, e in b.steps if i == index]


def single(target, run_settings: RunSettings, oracle=None):
    session = Session(target, oracle or make_oracle("none"), run_settings)
    events = list(session)
    return session, [e for e in events if isinstance(e, ev.StepEvent)], events[-1]


@pytest.mark.parametrize("name", LLAMA_ORACLES)
def test_each_stream_writes_its_own_plain_decoding(tiny_llama, name):
    """Three streams of every oracle in one batch: each stream's greedy text is plain
    decoding's of its prompt alone, or parts from it at a near-tie below llama.cpp's measured
    batched-against-single rounding (said, never hidden)."""
    drafts: list = []
    runs = settings(3)
    session = StreamsSession(tiny_llama, oracles_for(name, tiny_llama, 3, drafts), runs)
    events = list(session)
    summary = events[-1]
    assert [s.reason for s in summary.summaries] == ["max-tokens"] * 3
    for i, run in enumerate(runs):
        plain_session, plain_steps, _ = single(tiny_llama, run)
        result = check_stream_against_plain(tiny_llama, plain_session.prompt_ids,
                                            stream_steps(events, i), plain_steps, 3)
        assert result.identical or result.near_tie, (name, i, result.note)
    for d in drafts:
        d.close()


def test_a_batch_step_is_one_pass_over_every_stream(tiny_llama):
    """Prompt lookup guesses in every stream: the step's width is every stream's pending token
    and guesses; the batch's speed is every stream's tokens over its time."""
    runs = settings(3, k=3)
    events = list(StreamsSession(tiny_llama, [make_oracle("prompt-lookup") for _ in runs],
                                 runs))
    batches, summary = events[:-1], events[-1]
    for b in batches:
        assert b.width == sum(len(e.proposed) + 1 for _, e in b.steps)
    assert any(b.width > len(b.steps) for b in batches)  # some stream guessed
    assert summary.tokens == sum(b.tokens for b in batches) == 3 * 24
    assert summary.tok_per_s == pytest.approx(summary.tokens / summary.compute_ms * 1000)
    assert all(p > 0 for p in summary.paces)


def test_a_stream_that_ends_leaves_the_batch_and_the_others_go_on(tiny_llama):
    runs = settings(3)
    runs[1] = RunSettings(PROMPTS[1], chat=False, k=4, max_tokens=5)
    session = StreamsSession(tiny_llama, [make_oracle("prompt-lookup") for _ in runs], runs)
    events = list(session)
    left_at = next(b.index for b in events[:-1] if (1, "max-tokens") in b.left)
    assert all(1 not in dict(b.steps) for b in events[left_at + 1:-1])
    assert [s.totals.tokens for s in events[-1].summaries] == [24, 5, 24]


def test_a_stop_string_inside_an_accepted_draft_ends_the_stream_as_plain_decoding(tiny_llama):
    """An oracle that knows each stream's plain answer: its guesses are kept, and one stream's
    stop string falls inside a draft; that stream writes plain decoding's tokens up to the
    stop and no guess past it, and the other goes on to its budget."""
    from test_ends_inside_drafts import Knowing, stop_inside

    runs = settings(2, k=9)
    plain = [single(tiny_llama, r) for r in runs]
    stop, n = stop_inside(plain[0][1])
    runs[0] = RunSettings(PROMPTS[0], chat=False, k=9, max_tokens=24, stop=(stop,))
    stopped = single(tiny_llama, runs[0])
    assert stopped[2].reason == "stop-string" and stopped[2].totals.tokens == n
    oracles = [Knowing(p[0].prompt_ids, [t for e in p[1] for t in e.emitted_ids], [])
               for p in plain]
    events = list(StreamsSession(tiny_llama, oracles, runs))
    ends = events[-1].summaries
    assert [e.reason for e in ends] == ["stop-string", "max-tokens"]
    assert [e.totals.tokens for e in ends] == [n, 24]
    assert ends[0].text == stopped[2].text and ends[0].totals.accepted > 0
    written = [t for e in stream_steps(events, 0) for t in e.emitted_ids]
    assert written == [t for e in stopped[1] for t in e.emitted_ids]


def test_sampled_streams_draw_as_each_would_alone(tiny_llama):
    """Each stream verifies with its own generator on its own rows: a sampled stream writes
    what the same run alone writes from the same seed (whose sampling keeps the target's
    distribution: tests/test_verify.py), whatever the other streams drew."""
    params = [SamplingParams(temperature=0.8, seed=s) for s in (1, 2, 3)]
    runs = [RunSettings(p, chat=False, k=4, max_tokens=20, params=q)
            for p, q in zip(PROMPTS, params)]
    drafts: list = []
    session = StreamsSession(tiny_llama, oracles_for("draft", tiny_llama, 3, drafts), runs)
    summary = session.run_to_end()
    for run, got in zip(runs, summary.summaries):
        draft = tiny_llama.share()
        alone = single(tiny_llama, run, make_oracle("draft", target=tiny_llama, draft=draft))
        draft.close()
        assert got.text == alone[2].text
    assert sum(s.totals.accepted for s in summary.summaries) > 0
    for d in drafts:
        d.close()


class FailingOracle:
    """Prompt lookup that raises on its third guess (a stream's fault mid-run)."""

    def __init__(self) -> None:
        self.inner = make_oracle("prompt-lookup")
        self.name = self.inner.name
        self.calls = 0

    def __getattr__(self, attr):
        return getattr(self.inner, attr)

    def propose(self, context, k):
        self.calls += 1
        if self.calls == 3:
            raise RuntimeError("index out of range in the n-gram table")
        return self.inner.propose(context, k)


def test_a_stream_that_fails_leaves_the_batch_with_one_line(tiny_llama):
    runs = settings(3)
    oracles = [make_oracle("prompt-lookup"), FailingOracle(), make_oracle("prompt-lookup")]
    summary = StreamsSession(tiny_llama, oracles, runs).run_to_end()
    (index, line), = summary.failures
    assert index == 1 and "\n" not in line
    assert line.startswith("stream 1 (prompt-lookup) failed and left the batch: RuntimeError")
    failed = summary.summaries[1]
    assert failed.reason == REASON_FAILED and failed.totals.tokens == 2  # what it wrote kept
    assert len(failed.text) > 0
    assert [s.totals.tokens for s in summary.summaries[::2]] == [24, 24]


@pytest.mark.parametrize("n", [0, 17])
def test_streams_out_of_range_are_one_line(tiny_llama, n):
    runs = [RunSettings("x", chat=False, max_tokens=4)] * n
    with pytest.raises(SpecvizError, match="between 1 and 16"):
        StreamsSession(tiny_llama, [make_oracle("none")] * n, runs)


def test_more_streams_than_the_context_holds_say_how_many_fit(tiny_llama):
    runs = [RunSettings(PROMPTS[0], chat=False, k=4, max_tokens=200)] * 4
    with pytest.raises(ContextOverflow, match=r"context holds 512: at most 2 of these fit"):
        StreamsSession(tiny_llama, [make_oracle("none")] * 4, runs)


# ------------------------------------------------------------------ smollm2-135m, llama.cpp


@pytest.mark.model
def test_smollm2_streams_are_lossless_or_report_why(smol_llama):
    prompts = ["Write a Python function that reverses a list.", "Name three colours.",
               "Add type hints: def scale(values, factor): return [v * factor for v in values]",
               "What is 2 + 2?"]
    runs = [RunSettings(p, chat=True, k=4, max_tokens=40) for p in prompts]
    events = list(StreamsSession(smol_llama, [make_oracle("prompt-lookup") for _ in runs],
                                 runs))
    assert sum(s.totals.accepted for s in events[-1].summaries) > 0
    for i, run in enumerate(runs):
        plain_session, plain_steps, _ = single(smol_llama, run)
        result = check_stream_against_plain(smol_llama, plain_session.prompt_ids,
                                            stream_steps(events, i), plain_steps, len(runs))
        assert result.identical or result.near_tie, (i, result.note)


# ------------------------------------------------------------------ the crossover


def point(n: int, ratio: float, verdict: str):
    from specviz.engines.bench.concurrency import Point
    from specviz.engines.speedup import Speedup

    return Point(n, 1.0, 1.0, 1.0, 1.0, Speedup(ratio, None, None, 1, verdict), 2.0, 5.0)


def test_the_measured_crossover_is_the_first_count_no_longer_faster():
    from specviz.engines.bench.concurrency import measured_crossover

    points = [point(4, 0.9, "slower"), point(1, 1.5, "faster"), point(2, 1.1, "within noise")]
    assert measured_crossover(points) == 2
    assert measured_crossover([point(1, 1.5, "faster")]) is None


def test_the_predicted_crossover_prices_n_times_k_plus_one_against_n():
    """A pass costs 10 ms plus 1 ms a token: 2 tokens a step for 5 positions pays while
    2 x (10 + N) / (10 + 5N) > 1, that is up to N = 3; 8 streams need passes of 40 tokens,
    past a profile measured to 32."""
    from specviz.engines.bench.concurrency import predict

    found = predict(lambda w: 10.0 + w, 32, 2.0, 5.0, [1, 2, 3, 4, 8])
    assert found.speedups[1] == pytest.approx(2 * 11 / 15)
    assert found.speedups[3] > 1.0 >= found.speedups[4]
    assert found.crossover == 4
    assert found.extrapolated == (8,)
