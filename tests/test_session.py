"""The speculative loop: lossless greedy output for every oracle, control between steps."""

from __future__ import annotations

import dataclasses
import math
import threading

import pytest
from engine_waits import HUNG_S
from model_fixtures import assert_lossless, batches_round_alike, prompt_ids_of, rejections
from steady_timing import steady_auto_k

from specviz.engines import events as ev
from specviz.engines.bench.compare import batch_noise, check_against_plain, compare
from specviz.engines.loop.session import RunSettings, Session
from specviz.engines.oracles import make_oracle
from specviz.engines.sampling import SamplingParams

PROMPT = "def add(a, b):\n    return a + b\n\nThe quick brown fox jumps over the lazy dog. def"
CODE_EDIT = (
    "Add type hints to this function. Return the full code.\n\n"
    "def scale(values, factor):\n    result = []\n    for v in values:\n"
    "        result.append(v * factor)\n    return result\n"
)


def run(backend, oracle, prompt=PROMPT, k=4, n=48, chat=False, **kw):
    session = Session(backend, oracle, RunSettings(prompt, chat=chat, k=k, max_tokens=n, **kw))
    events = list(session)
    return [e for e in events if isinstance(e, ev.StepEvent)], events[-1]


def tokens_of(backend, prompt):
    return backend.encode_prompt(backend.format_prompt(prompt, True), True)


def oracles(target, draft):
    return [make_oracle(n, target=target, draft=draft) for n in ("prompt-lookup", "ngram",
                                                                 "draft")]


def test_every_oracle_is_lossless_on_the_tiny_model(tiny_pair):
    """The text is plain decoding's; the draft is a sibling that misses some tokens, so the
    rollback after a refusal is tested. On the Llama and on the Qwen2 tiny model."""
    tiny_backend, disagreeing_draft_backend = tiny_pair
    plain_steps, plain = run(tiny_backend, make_oracle("none"), k=0)
    assert plain.totals.mean_accepted_tokens == 1.0
    prompt_ids = prompt_ids_of(tiny_backend, PROMPT)
    for oracle in oracles(tiny_backend, disagreeing_draft_backend):
        steps, summary = run(tiny_backend, oracle)
        if oracle.name == "draft":  # some of its guesses taken, some refused and rolled back
            assert rejections(steps) > 0 and summary.totals.accepted > 0
        assert_lossless(tiny_backend, prompt_ids, (steps, summary), (plain_steps, plain),
                        oracle.name)


def noise_of_run(backend, steps) -> float:
    """The batched-against-single logit noise on the context a run of PROMPT made."""
    return batch_noise(backend, [*prompt_ids_of(backend, PROMPT),
                                 *(t for s in steps for t in s.emitted_ids)])


def test_draft_equal_to_target_is_always_accepted(tiny_backend, tiny_draft_backend):
    """Bit for bit where batches round as single rows do; in half precision on a CPU (rows
    rounded apart) a guess may be refused only where the target's top two lie within twice
    the measured noise, as far as a single row's choice can stray from the batch's."""
    oracle = make_oracle("draft", target=tiny_backend, draft=tiny_draft_backend)
    steps, summary = run(tiny_backend, oracle, k=5)
    assert summary.totals.proposed > 0
    refused = [s for s in steps if any(not t.accepted for t in s.proposed)]
    if batches_round_alike(tiny_backend):
        assert summary.totals.acceptance_rate == 1.0
        assert all(s.target.kind == ev.TARGET_BONUS for s in steps[:-1])
    elif refused:
        noise = noise_of_run(tiny_backend, steps)
        assert all(s.target.margin < 2 * noise for s in refused), noise


def test_sampled_draft_run_reports_probabilities(tiny_backend, tiny_draft_backend):
    oracle = make_oracle("draft", target=tiny_backend, draft=tiny_draft_backend)
    temperature = 0.8
    steps, summary = run(tiny_backend, oracle, params=SamplingParams(temperature, seed=3))
    judged = [t for s in steps for t in s.proposed if t.reject_reason != ev.REJECT_AFTER]
    assert judged and all(t.p_draft is not None and t.accept_prob is not None for t in judged)
    # Same model and same processing for p and q: every acceptance probability is ~1; where
    # rows round apart, p/q is within what logits off by the measured noise allow.
    floor = 0.99
    if not batches_round_alike(tiny_backend):
        floor = min(floor, math.exp(-2 * noise_of_run(tiny_backend, steps) / temperature))
    assert min(t.accept_prob for t in judged) >= floor
    first = run(tiny_backend, make_oracle("draft", target=tiny_backend, draft=tiny_draft_backend),
                params=SamplingParams(0.8, seed=3))[1]
    assert first.text == summary.text  # a fixed seed replays the same sampled run


def test_accounting_follows_spec_bench(tiny_backend, tiny_draft_backend):
    oracle = make_oracle("draft", target=tiny_backend, draft=tiny_draft_backend)
    steps, summary = run(tiny_backend, oracle, k=3)
    t = summary.totals
    assert t.steps == len(steps)
    assert t.tokens == sum(len(s.emitted_ids) for s in steps)
    assert t.mean_accepted_tokens == pytest.approx(t.tokens / t.steps)
    assert t.acceptance_rate == pytest.approx(t.accepted / t.proposed)


def test_max_tokens_is_exact(tiny_backend, tiny_draft_backend):
    oracle = make_oracle("draft", target=tiny_backend, draft=tiny_draft_backend)
    _, summary = run(tiny_backend, oracle, k=8, n=13)
    assert summary.totals.tokens == 13 and summary.reason == "max-tokens"


def test_k_changed_mid_run_takes_effect_at_the_next_step(tiny_backend, tiny_draft_backend):
    oracle = make_oracle("draft", target=tiny_backend, draft=tiny_draft_backend)
    session = Session(tiny_backend, oracle, RunSettings(PROMPT, chat=False, k=2, max_tokens=40))
    ks = []
    for event in session:
        if isinstance(event, ev.StepEvent):
            ks.append((event.k, len(event.proposed)))
            if event.step == 1:
                session.set_k(6)
    assert ks[0] == (2, 2) and ks[1] == (2, 2) and ks[2] == (6, 6)
    with pytest.raises(ValueError, match="between 0 and 32"):
        session.set_k(33)


def test_stop_ends_within_one_step(tiny_backend):
    session = Session(tiny_backend, make_oracle("none"),
                      RunSettings(PROMPT, chat=False, k=0, max_tokens=200))
    seen = []
    for event in session:
        seen.append(event)
        if isinstance(event, ev.StepEvent) and event.step == 3:
            session.stop()
    assert isinstance(seen[-1], ev.SummaryEvent) and seen[-1].reason == "stopped"
    assert len(seen) == 5  # four steps, then the summary


class WatchedEvent(threading.Event):
    """A threading.Event that says when a thread has begun to wait on it."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = threading.Event()

    def wait(self, timeout=None):
        self.waiting.set()
        return super().wait(timeout)


def paused_on_a_worker(backend, max_tokens: int):
    """A plain run past its first event, paused, its rest iterated on a worker thread: (the
    session, its watched resume gate, the worker, the events the worker collects)."""
    session = Session(backend, make_oracle("none"),
                      RunSettings(PROMPT, chat=False, k=0, max_tokens=max_tokens))
    session._resume = gate = WatchedEvent()
    gate.set()
    it = iter(session)
    next(it)
    session.pause()
    gate.waiting.clear()
    result: list = []
    worker = threading.Thread(target=lambda: result.extend(it), daemon=True)
    worker.start()
    return session, gate, worker, result


def test_pause_blocks_until_resumed_and_stop_wakes_it(tiny_backend):
    """Paused, the loop waits before its next step (seen waiting, not timed); resumed, it
    steps on; paused again and stopped, it wakes and ends without another step."""
    session, gate, worker, result = paused_on_a_worker(tiny_backend, 200)
    assert gate.waiting.wait(HUNG_S)  # the bound only turns a hang into a failure
    assert result == [] and worker.is_alive()  # waiting on the gate: no step ran
    session.stop()
    worker.join(HUNG_S)  # woken at once; the bound only keeps a broken stop from hanging
    assert not worker.is_alive()
    assert [e.kind for e in result] == ["summary"] and result[-1].reason == "stopped"


def test_a_paused_run_steps_on_when_resumed(tiny_backend):
    session, gate, worker, result = paused_on_a_worker(tiny_backend, 6)
    assert gate.waiting.wait(HUNG_S) and result == []
    session.resume()
    worker.join(HUNG_S)
    assert not worker.is_alive()
    assert [e.kind for e in result] == ["step"] * 5 + ["summary"]
    assert result[-1].reason == "max-tokens"


def test_stop_string_ends_the_text(tiny_backend):
    _, plain = run(tiny_backend, make_oracle("none"), k=0, n=40)
    stop = plain.text[10:13]
    _, summary = run(tiny_backend, make_oracle("none"), k=0, n=40, stop=(stop,))
    assert summary.reason == "stop-string" and stop not in summary.text
    assert plain.text.startswith(summary.text)


def test_prompt_lookup_copies_with_provenance(tiny_backend):
    steps, _ = run(tiny_backend, make_oracle("prompt-lookup"), k=4)
    session_prompt = tiny_backend.encode_prompt(PROMPT, False)
    for step in steps:
        for tok in step.proposed:
            assert tok.source == "prompt" and tok.span is not None
            context = session_prompt + [t for s in steps[: step.step] for t in s.emitted_ids]
            assert context[tok.span.tok_start] == tok.id


# ------------------------------------------------------------------ smollm2-135m, llama.cpp


@pytest.mark.model
@pytest.mark.parametrize("oracle_name", ["prompt-lookup", "ngram", "draft"])
def test_smollm2_llama_greedy_is_lossless_or_reports_why(smol_llama, smollm2_path, oracle_name):
    """llama.cpp's batched kernels may round a near-tie differently: that must be reported."""
    from specviz.engines.backends import load_backend

    plain_steps, plain = run(smol_llama, make_oracle("none"), CODE_EDIT, k=0, n=96, chat=True)
    draft = load_backend("llama", smollm2_path, n_ctx=2048) if oracle_name == "draft" else None
    oracle = make_oracle(oracle_name, target=smol_llama, draft=draft)
    steps, summary = run(smol_llama, oracle, CODE_EDIT, k=4, n=96, chat=True)
    oracle.close()
    if draft is not None:
        draft.close()  # the test's to close: an oracle never closes the models it is given
    result = check_against_plain(smol_llama, tokens_of(smol_llama, CODE_EDIT), steps,
                                 plain_steps)
    if result.identical:
        assert summary.text == plain.text
    else:  # reported, and explained by the measured batch noise, or the test fails
        assert result.margin < result.tie_threshold, result.note
        assert "near-tie" in result.note
    assert summary.totals.accepted > 0


def test_a_full_context_ends_the_run_cleanly(tiny_backend):
    prompt = "fox " * 200
    n_prompt = len(tiny_backend.encode_prompt(prompt, False))
    room = tiny_backend.n_ctx - n_prompt
    _, summary = run(tiny_backend, make_oracle("prompt-lookup"), prompt, k=8, n=room + 50)
    assert summary.reason == "context-full"
    assert n_prompt + summary.totals.tokens == tiny_backend.n_ctx


def test_a_divergence_is_reported_with_its_margin(tiny_backend):
    """A flip where plain decoding had a clear margin must not be excused as rounding."""
    plain_steps, _ = run(tiny_backend, make_oracle("none"), k=0, n=12)
    tampered = list(plain_steps)
    t = tampered[5].target
    tampered[5] = dataclasses.replace(tampered[5], target=dataclasses.replace(t, id=t.id + 1))
    result = compare(tampered, plain_steps, noise=0.0)
    assert not result.identical and result.first_difference == 5
    if result.margin >= result.tie_threshold:
        assert "not explained by rounding" in result.note
    noisy = compare(tampered, plain_steps, noise=result.margin + 1)
    assert "near-tie" in noisy.note


def test_declined_steps_are_counted_with_their_reason(tiny_backend):
    """A prompt with nothing to copy: prompt lookup declines; K=0 and the last step say why."""
    prompt = "abcdefghij klmnopqrst"
    steps, summary = run(tiny_backend, make_oracle("prompt-lookup"), prompt=prompt, n=24)
    declined = [s for s in steps if s.declined]
    assert summary.totals.declined == len(declined)
    assert all(not s.proposed for s in declined)
    assert all(s.declined in ev.DECLINE_WORDS for s in declined)
    assert summary.totals.decline_rate == len(declined) / len(steps)
    assert steps[-1].declined in (None, ev.DECLINE_END, ev.DECLINE_NO_MATCH)
    if len(steps) == 24:  # the last step has no room to draft
        assert steps[-1].declined == ev.DECLINE_END

    steps, summary = run(tiny_backend, make_oracle("prompt-lookup"), k=0, n=6)
    assert [s.declined for s in steps] == [ev.DECLINE_K_ZERO] * len(steps)
    assert summary.totals.decline_rate == 1.0

    steps, summary = run(tiny_backend, make_oracle("none"), k=0, n=6)
    assert summary.totals.declined == 0 and not any(s.declined for s in steps)


def test_a_declined_step_survives_a_trace_round_trip(tiny_backend):
    steps, _ = run(tiny_backend, make_oracle("prompt-lookup"), k=0, n=3)
    back = ev.from_dict(ev.to_dict(steps[-1]))
    assert back == steps[-1] and back.declined == ev.DECLINE_K_ZERO
    old = ev.to_dict(steps[-1])
    del old["declined"], old["totals"]["declined"]  # a trace written before the field
    assert ev.from_dict(old).totals.declined == 0


def test_auto_k_says_whether_it_had_nothing_to_copy_or_found_no_k_worth_it(tiny_backend):
    from specviz.engines.cost.auto_k import AutoK
    from specviz.engines.cost.profile import Profile

    oracle = make_oracle("prompt-lookup")
    dear = Profile("m", "b", "cpu", 1, [512], [1, 2, 4, 8, 16, 32],
                   [[1.0, 10.0, 20.0, 40.0, 80.0, 160.0]])
    # Steps and lookups take what they would on a quiet machine: a lookup that looked dear
    # beside busy processes would have auto K skip it ("idle") instead of finding no match.
    policy = steady_auto_k(AutoK(oracle, dear))
    session = Session(tiny_backend, oracle, RunSettings("abcdefghij klmnopqrst", chat=False,
                                                        k=32, max_tokens=12), k_policy=policy)
    steps = [e for e in session if isinstance(e, ev.StepEvent)]
    assert {s.declined for s in steps} <= {ev.DECLINE_NO_MATCH, ev.DECLINE_END}
    assert all(s.auto_k for s in steps)  # each K was auto K's, which the window marks apart
    assert ev.from_dict(ev.to_dict(steps[0])).auto_k
    ids = tiny_backend.tokenize(CODE_EDIT, add_special=False)
    context = ids + ids[10:16]  # its end repeats the prompt: something to copy
    assert oracle.match_length(context) > 0
    assert policy.choose(context) == 0  # a batch of 2 costs ten tokens: never worth it
    assert policy.zero_reason == ev.DECLINE_AUTO_K


def test_a_draft_lane_that_never_drafts_never_runs_its_draft(tiny_backend, tiny_draft_backend):
    """The draft reads the prompt when it first drafts: a lane whose K is 0 throughout costs
    what plain decoding costs (the 0.5B's prompt took 0.3 s of a 4.8 s code edit)."""
    tiny_draft_backend.reset()
    oracle = make_oracle("draft", draft=tiny_draft_backend, target=tiny_backend)
    run(tiny_backend, oracle, k=0, n=4)
    assert tiny_draft_backend.n_past == 0
    steps, _ = run(tiny_backend, oracle, k=3, n=4)
    assert steps[0].proposed and tiny_draft_backend.n_past > 0  # read when it drafted


def test_auto_ks_exploring_steps_are_marked_in_the_trace(tiny_backend, tiny_draft_backend):
    from specviz.engines.cost.auto_k import EXPLORE_JUDGED, AutoK
    from specviz.engines.cost.profile import Profile

    free = Profile("m", "b", "cpu", 1, [512], [1, 2, 4, 8, 16, 32], [[10.0] * 6])
    tiny = Profile("d", "b", "cpu", 1, [512], [1, 2, 4, 8, 16, 32], [[0.1] * 6])
    oracle = make_oracle("draft", draft=tiny_draft_backend, target=tiny_backend)
    session = Session(tiny_backend, oracle, RunSettings("abcdefghij klmnopqrst", chat=False,
                                                        max_tokens=24),
                      k_policy=AutoK(oracle, free, tiny))
    steps = [e for e in session if isinstance(e, ev.StepEvent)]
    explored = [s for s in steps if s.explored]
    assert explored and steps[0].explored and all(s.proposed for s in explored)
    assert sum(len(s.proposed) for s in explored) <= EXPLORE_JUDGED + 2  # then it settles
    assert ev.from_dict(ev.to_dict(steps[0])).explored
    old = ev.to_dict(steps[0])
    del old["explored"]  # a trace written before the field
    assert not ev.from_dict(old).explored


def test_a_runs_noise_covers_wide_verifications_and_batch_written_context(tiny_backend,
                                                                           monkeypatch):
    """What a parting is held to: the larger of a 9-row and a 33-row verification's noise and
    of a token read after batch-written context, measured on the run's own context; the
    backend is left empty."""
    from specviz.engines.bench import compare as cmp

    ids = [*prompt_ids_of(tiny_backend, PROMPT), *range(5, 45)]
    noise = cmp.run_noise(tiny_backend, ids)
    assert tiny_backend.n_past == 0 and 0.0 <= noise < 1e-3  # float32: last bits only
    read: list[int] = []
    # Patched on the class for this test: a method patched on the session's backend itself
    # stayed in its __dict__ (monkeypatch puts the bound method back there), and its shares
    # (Backend.share copies the instance) then ran their forwards on its cache.
    kind = type(tiny_backend)
    forward = kind.forward
    monkeypatch.setattr(kind, "forward",
                        lambda self, tokens, *a: read.append(len(tokens)) or forward(self, tokens,
                                                                                     *a))
    cmp.run_noise(tiny_backend, ids)
    assert read[0] == len(ids) - 33 and max(read[1:]) <= 33  # the context read once
    monkeypatch.setattr(kind, "forward", forward)
    asked: list[int] = []
    monkeypatch.setattr(cmp, "_batch_noise_at", lambda b, i, width: asked.append(width) or width)
    monkeypatch.setattr(cmp, "_history_noise_at", lambda b, i, head, width: 50.0)
    assert cmp.run_noise(tiny_backend, ids) == 50.0 and asked == [9, 33]
    monkeypatch.setattr(cmp, "_history_noise_at", lambda b, i, head, width: 0.0)
    assert cmp.run_noise(tiny_backend, ids) == 33 and tiny_backend.n_past == 0
