"""A sampled correction records the residual it was drawn from: norm(max(0, p_target -
p_draft)), its likeliest tokens and its mass before normalising. Checked against the residual
computed here, independently, from the very rows verification was given; greedy steps and
older traces carry none, and traces keep it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from specviz.engines import events as ev
from specviz.engines.loop import session as session_module
from specviz.engines.loop.session import RunSettings, Session
from specviz.engines.loop.verify import RESIDUAL_TOP, verify
from specviz.engines.oracles import make_oracle
from specviz.engines.sampling import SamplingParams
from specviz.engines.trace import TraceWriter, read_trace

DATA = Path(__file__).parent / "data"
# prompt lookup at temperature 0.8, written by specviz before corrections kept their residual
BEFORE = DATA / "trace_before_residual.jsonl"
PROMPT = "def add(a, b):\n    return a + b\n\nThe quick brown fox jumps over the lazy dog. def"
HOT = SamplingParams(0.8, seed=3)


def expected_residual(logits_row, q, guess: int, temperature: float):
    """norm(max(0, p - q)) written out again: p the softmax at the temperature, q a point
    mass at the guess where the oracle has none. Returns (ids likeliest first, probs, mass)."""
    z = np.asarray(logits_row, dtype=np.float64) / temperature
    p = np.exp(z - z.max())
    p /= p.sum()
    if q is None:
        q = np.zeros_like(p)
        q[guess] = 1.0
    r = np.clip(p - np.asarray(q, dtype=np.float64), 0.0, None)
    mass = r.sum()
    r /= mass
    order = [int(i) for i in np.argsort(-r, kind="stable") if r[i] > 0]
    return order, r, mass


def triples(recorded) -> list[tuple[int, float, int]]:
    """(token, probability, rank) of verification's record or of the event's."""
    return [t if isinstance(t, tuple) else (t.id, t.p, t.rank) for t in recorded.top]


def assert_matches(recorded, drawn: int, logits_row, q, guess: int, temperature: float):
    order, r, mass = expected_residual(logits_row, q, guess, temperature)
    assert recorded.mass == pytest.approx(mass, rel=1e-5)
    head = order[:RESIDUAL_TOP]
    top = triples(recorded)
    assert [(t, rank) for t, _p, rank in top[:len(head)]] == [(t, i) for i, t in enumerate(head)]
    assert [p for _t, p, _rank in top[:len(head)]] == pytest.approx([r[i] for i in head],
                                                                   rel=1e-5)
    extra = top[len(head):]
    if drawn in head:
        assert not extra
    else:  # drawn from further down: appended with its rank
        (tok, p, rank), = extra
        assert tok == drawn and p == pytest.approx(r[drawn], rel=1e-5)
        assert rank == order.index(drawn)


# ---------------------------------------------------------------- verification


def random_rows(seed: int, vocab: int = 64, k: int = 3):
    rng = np.random.default_rng(seed)
    logits = (rng.normal(size=(k + 1, vocab)) * 2).astype(np.float32)
    q_rows = []
    for _ in range(k):
        x = np.exp(rng.normal(size=vocab) * 2)
        q_rows.append(x / x.sum())
    guesses = [int(np.argmax(q)) for q in q_rows]
    return logits, q_rows, guesses


@pytest.mark.parametrize("with_q", [True, False])
def test_a_sampled_correction_records_the_head_of_the_residual(with_q):
    rng = np.random.default_rng(11)
    corrections = 0
    for seed in range(60):
        logits, q_rows, guesses = random_rows(seed)
        v = verify(guesses, q_rows if with_q else None, logits, HOT, rng)
        if v.kind != ev.TARGET_CORRECTION:
            assert v.residual is None
            continue
        corrections += 1
        n = v.n_accepted
        assert_matches(v.residual, v.token, logits[n], q_rows[n] if with_q else None,
                       guesses[n], HOT.temperature)
    assert corrections > 20


def test_a_correction_drawn_from_below_the_head_is_kept_with_its_rank():
    # A flat residual over 40 tokens: the draw lands outside the top 5 most of the time.
    vocab, found = 40, 0
    logits = np.zeros((2, vocab), dtype=np.float32)
    logits[:, 0] = 3.0  # the guess is the target's favourite: refused only now and then
    for seed in range(400):
        v = verify([0], None, logits, SamplingParams(1.0), np.random.default_rng(seed))
        if v.residual is not None and all(t != v.token for t, _, _ in v.residual.top[:5]):
            found += 1
            assert_matches(v.residual, v.token, logits[0], None, 0, 1.0)
    assert found


def test_greedy_and_accepted_steps_record_no_residual():
    logits, q_rows, guesses = random_rows(0)
    assert verify(guesses, q_rows, logits, SamplingParams(), np.random.default_rng(0)
                  ).residual is None
    same = np.log(np.stack([*q_rows, q_rows[-1]])).astype(np.float32)  # p == q: all kept
    v = verify(guesses, q_rows, same, SamplingParams(1.0), np.random.default_rng(0))
    assert v.kind == ev.TARGET_BONUS and v.residual is None


# ---------------------------------------------------------------- a session


@pytest.fixture(scope="module")
def recorded(tiny_backend, disagreeing_draft_backend):
    """A sampled draft run on the tiny model, with what each verification was given."""
    seen = []
    real = session_module.verify

    def spy(tokens, q_rows, logits, params, rng):
        seen.append((list(tokens), None if q_rows is None else [np.array(q) for q in q_rows],
                     np.array(logits)))
        return real(tokens, q_rows, logits, params, rng)

    oracle = make_oracle("draft", target=tiny_backend, draft=disagreeing_draft_backend)
    mp = pytest.MonkeyPatch()
    mp.setattr(session_module, "verify", spy)
    try:
        events = list(Session(tiny_backend, oracle,
                              RunSettings(PROMPT, k=4, max_tokens=48, params=HOT)))
    finally:
        mp.undo()
    steps = [e for e in events if isinstance(e, ev.StepEvent)]
    assert len(steps) == len(seen)
    return events, steps, seen


def test_a_sessions_corrections_carry_the_residual_they_were_drawn_from(recorded):
    _events, steps, seen = recorded
    corrections = 0
    for step, (tokens, q_rows, logits) in zip(steps, seen):
        refused = [t for t in step.proposed if t.reject_reason == ev.REJECT_SAMPLED]
        if not refused:
            assert step.target.residual is None
            continue
        corrections += 1
        n = step.n_accepted
        drawn_from = step.target.residual
        assert_matches(drawn_from, step.target.id, logits[n], q_rows[n], tokens[n],
                       HOT.temperature)
        drawn = next(t for t in drawn_from.top if t.id == step.target.id)
        assert drawn.text == step.target.text  # the same piece the text stream wrote
    assert corrections


def test_the_residual_survives_a_trace_and_greedy_lines_are_unchanged(recorded, tmp_path,
                                                                       tiny_backend):
    events, _steps, _seen = recorded
    path = tmp_path / "t.jsonl"
    with TraceWriter(path, {"prompt": PROMPT}) as writer:
        for e in events:
            writer.write(e)
    assert read_trace(path).events == events
    assert any(s.target.residual for s in read_trace(path).steps)
    greedy = list(Session(tiny_backend, make_oracle("prompt-lookup", target=tiny_backend),
                          RunSettings(PROMPT, k=4, max_tokens=16)))
    assert not any("residual" in ev.to_dict(e).get("target", {}) for e in greedy)


def test_a_trace_written_before_the_residual_reads_without_it():
    trace = read_trace(BEFORE)
    assert trace.problem is None and trace.header["settings"]["temperature"] == 0.8
    corrections = [s for s in trace.steps if any(t.reject_reason == ev.REJECT_SAMPLED
                                                 for t in s.proposed)]
    assert corrections and all(s.target.residual is None for s in trace.steps)
    line = next(line for line in BEFORE.read_text().splitlines()[1:]
                if '"correction"' in line and '"sampled"' in line)
    assert ev.to_json(ev.from_dict(json.loads(line))) == line
