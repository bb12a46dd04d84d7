"""Several prompts decoded at once on the transformers backend (engines/backends/hf_streams.py):
one padded forward per step over every stream, each stream lossless against its own plain
decoding, streams leaving the batch as they end, the cache's holes kept bounded."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import TEST_DEVICE
from test_streams import PROMPTS, settings, single, stream_steps

from specviz.app.cli.main import main
from specviz.engines.bench.compare import check_stream_against_plain
from specviz.engines.loop.session import RunSettings
from specviz.engines.loop.streams import BatchStep, StreamsSession
from specviz.engines.oracles import make_oracle
from specviz.engines.oracles.registry import NEEDS_HEADS, ORACLE_INFO
from specviz.engines.sampling import SamplingParams

# Every oracle the transformers backend runs without trained heads (medusa and eagle read
# heads from files); cross-draft is given the target's own tokenizer, as on llama.cpp.
HF_ORACLES = [name for name, d in ORACLE_INFO.items()
              if "transformers" in d.backends and NEEDS_HEADS not in d.needs]


@pytest.fixture(scope="module")
def target(tiny_model_dir):
    from specviz.engines.backends.hf import TransformersBackend

    backend = TransformersBackend(tiny_model_dir, device=TEST_DEVICE, threads=1)
    yield backend
    backend.close()


@pytest.fixture
def passes(target):
    """The model's forward calls, each with its batch's (rows, width)."""
    shapes: list[tuple[int, int]] = []
    hook = target.model.register_forward_pre_hook(
        lambda _, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)),
        with_kwargs=True)
    yield shapes
    hook.remove()


def oracles_for(name: str, target, n: int, drafts: list, draft_model=None):
    """The batch's target and its streams' oracles, each seeing the target as its stream
    does; a draft (`draft_model`, else the target's weights) shared per stream."""
    batch, views = target.stream_targets(n)
    out = []
    for i in range(n):
        inputs = {"suffix_memory": "off"}
        if ORACLE_INFO[name].needs_draft:
            drafts.append((draft_model or target).share())  # a cache of each stream's own
            inputs["draft"] = drafts[-1]
        out.append(make_oracle(name, target=views[i], **inputs))
    return batch, out


@pytest.mark.parametrize("name", HF_ORACLES)
def test_each_stream_writes_its_own_plain_decoding(target, disagreeing_draft_backend, name):
    """Three streams of every oracle in one batch: each stream's greedy text is plain
    decoding's of its prompt alone, or parts from it at a near-tie below the measured
    rounding of a batched pass against a single one (said, never hidden). The draft oracles
    draft with a sibling of the target that guesses some tokens and misses others, so the
    streams accept and roll back different amounts in the same steps."""
    drafts: list = []
    runs = settings(3)
    batch, oracles = oracles_for(name, target, 3, drafts, disagreeing_draft_backend)
    session = StreamsSession(batch, oracles, runs)
    events = list(session)
    summaries = events[-1].summaries
    assert [s.reason for s in summaries] == ["max-tokens"] * 3
    if name == "early-exit":  # all the tiny model's 2 layers: each stream drafts as it verifies
        assert all(s.totals.accepted == s.totals.proposed > 0 for s in summaries)
    for i, run in enumerate(runs):
        plain_session, plain_steps, _ = single(target, run)
        result = check_stream_against_plain(target, plain_session.prompt_ids,
                                            stream_steps(events, i), plain_steps, 3)
        assert result.identical or result.near_tie, (name, i, result.note)
    for d in drafts:
        d.close()


def test_a_batch_step_is_one_forward_over_every_live_stream(target, passes):
    """Each prompt is fed in a pass of its own, then every step is one forward whose rows are
    the streams in the batch and whose width is the widest stream's pending token and
    guesses; a stream that ends leaves, and the others' passes go on without its row."""
    runs = settings(3, k=3)
    runs[1] = RunSettings(PROMPTS[1], chat=False, k=3, max_tokens=5)
    session = StreamsSession(target, [make_oracle("prompt-lookup") for _ in runs], runs)
    events = list(session)
    batches, summary = events[:-1], events[-1]
    prefill = sum(len(ids) > 1 for ids in session.prompt_ids)
    assert len(passes) == prefill + len(batches)
    assert all(rows == 1 for rows, _ in passes[:prefill])
    for b, (rows, width) in zip(batches, passes[prefill:]):
        assert rows == len(b.steps)
        assert width == max(len(e.proposed) + 1 for _, e in b.steps)
    assert any(width > 1 for _, width in passes[prefill:])  # some stream guessed
    left_at = next(b.index for b in batches if (1, "max-tokens") in b.left)
    assert all(1 not in dict(b.steps) for b in batches[left_at + 1:])
    assert {rows for rows, _ in passes[prefill + left_at + 1:]} == {2}
    assert [s.totals.tokens for s in summary.summaries] == [24, 5, 24]


def test_sampled_streams_draw_as_each_would_alone(target):
    """Each stream verifies with its own generator on its own rows: a sampled stream writes
    what the same run alone writes from the same seed, whatever the other streams drew."""
    params = [SamplingParams(temperature=0.8, seed=s) for s in (1, 2, 3)]
    runs = [RunSettings(p, chat=False, k=4, max_tokens=20, params=q)
            for p, q in zip(PROMPTS, params)]
    drafts: list = []
    summary = StreamsSession(*oracles_for("draft", target, 3, drafts), runs).run_to_end()
    for run, got in zip(runs, summary.summaries):
        draft = target.share()
        alone = single(target, run, make_oracle("draft", target=target, draft=draft))
        draft.close()
        assert got.text == alone[2].text
    assert sum(s.totals.accepted for s in summary.summaries) > 0
    for d in drafts:
        d.close()


def test_two_batches_on_one_backend_stepped_by_turns_keep_their_streams_apart(target):
    """A run and its baseline stepped by turns on the same weights: each stream's early exit
    drafts on its own batch's cells (all the tiny model's layers: every guess accepted)."""
    runs = settings(2, max_tokens=12)
    lane = iter(StreamsSession(*oracles_for("early-exit", target, 2, []), runs))
    plain = iter(StreamsSession(*oracles_for("none", target, 2, []), runs))
    ends: dict[str, object] = {}
    while len(ends) < 2:
        for name, run in (("lane", lane), ("plain", plain)):
            if name not in ends and not isinstance(event := next(run), BatchStep):
                ends[name] = event
    assert all(s.totals.accepted == s.totals.proposed > 0 for s in ends["lane"].summaries)
    assert [s.text for s in ends["lane"].summaries] == [s.text for s in
                                                        ends["plain"].summaries]


def test_rows_match_single_passes_through_padding_rollback_leaving_and_compaction(target):
    """The cache itself: after streams of other widths padded beside each other, rolled back
    by different amounts, one leaving and the holes compacted, every stream's logits are
    those of its tokens fed alone; its columns stay within twice the fullest stream's
    cells and the slack."""
    from specviz.engines.backends.hf_streams import SLACK

    rng = np.random.default_rng(0)
    seqs = [[int(t) for t in rng.integers(3, 300, size=n)] for n in (7, 12, 3)]
    cache = target.stream_cache(3)
    held = [list(s[:-1]) for s in seqs]
    for s, tokens in enumerate(held):
        cache.forward({s: tokens}, "last")
    worst = 0.0
    for step in range(40):
        live = [s for s in range(3) if not (s == 1 and step >= 20)]
        if step == 20:
            cache.drop(1)
        parts = {s: [int(t) for t in rng.integers(3, 300, size=1 + (s + step) % 5)]
                 for s in live}
        got = cache.forward(parts)
        for s in live:
            target.reset()
            target.forward(held[s])
            alone = target.forward(parts[s], "all")
            worst = max(worst, float(np.abs(alone - got[s]).max()))
            keep = 1 + (step * (s + 1)) % len(parts[s])  # some guesses rolled back
            held[s] += parts[s][:keep]
            cache.truncate(s, len(held[s]))
            assert cache.length(s) == len(held[s])
        fullest = max(cache.length(s) for s in range(3))
        assert cache.columns <= 2 * fullest + SLACK + 5
    assert worst < 1e-3
    assert cache.length(1) == 0 and cache._rows == [0, 2]
    cache.close()
    target.reset()


@pytest.mark.parametrize("oracle", ["prompt-lookup", "early-exit"])
def test_run_streams_on_the_transformers_backend(tiny_model_dir, capsys, oracle):
    """Through the command line's builder: each stream's early exit drafts on its own
    context (all the tiny model's layers: every guess accepted), also while the baseline's
    batch is stepped by turns with it on the same weights."""
    baseline = ["--baseline", "--rounds", "1"] if oracle == "early-exit" else []
    args = ["run", "--target", str(tiny_model_dir), "--backend", "transformers", "--threads",
            "1", "--no-chat", "--prompt", PROMPTS[0], "--oracle", oracle, "--k", "3",
            "--max-tokens", "12", "--streams", "2", "--json", *baseline]
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["streams"] == 2 and result["tokens"] == 24 and result["failures"] == []
    assert all(s["tokens"] == 12 and s["pace"] > 0 for s in result["streams_detail"])
    if oracle == "early-exit":
        assert all(s["accepted"] == s["proposed"] > 0 for s in result["streams_detail"])
