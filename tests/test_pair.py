"""`specviz pair`: tokenizers compared, acceptance estimated without a speculative run, the
speedup by K predicted; the replay checked against a real speculative run."""

from __future__ import annotations

import json
import re

import pytest
from test_cross_draft import other_vocab_backend  # noqa: F401 (a fixture)

from specviz.app.cli.main import main
from specviz.engines import events as ev
from specviz.engines.cost.profile import Profile
from specviz.engines.loop.session import RunSettings, Session
from specviz.engines.oracles import make_oracle
from specviz.engines.pair.acceptance import (
    Agreement,
    acceptance_by_position,
    same_vocab_agreement,
    simulate,
    target_answers,
)
from specviz.engines.pair.report import StepCosts, break_even, estimate, predict
from specviz.engines.pair.vocab import (
    VERDICT_CROSS,
    VERDICT_DRAFT,
    VERDICT_UNUSABLE,
    compare_vocabularies,
)

PROMPTS = ["def add(a, b):\n    return a + b\n\ndef mul(a, b):\n", "The quick brown fox"]


@pytest.fixture(scope="module")
def sibling_backend(disagreeing_draft_backend):
    """A same-vocabulary draft that agrees with the target only sometimes."""
    return disagreeing_draft_backend


def flat_profile(costs: list[float]) -> Profile:
    """Forward ms of 1, 2, ... tokens, the same at every context."""
    batches = list(range(1, len(costs) + 1))
    return Profile("m", "b", "cpu", 1, [128, 1024], batches, [costs, costs])


# ---------------------------------------------------------------- replay and arithmetic


def test_simulate_replays_greedy_speculation_step_by_step():
    agree = [True, True, False, True, True, True, False]
    steps = [(s.position, s.drafted, s.accepted) for s in simulate(agree, 2)]
    # 0: T T accepted, bonus -> 3; 3: T T accepted, bonus -> 6; 6: last token, nothing drafted
    assert steps == [(0, 2, 2), (3, 2, 2), (6, 0, 0)]
    steps = [(s.position, s.drafted, s.accepted) for s in simulate(agree, 4)]
    assert steps == [(0, 4, 2), (3, 3, 3)]  # 3 tokens left after position 3: three drafted
    assert sum(s.accepted + 1 for s in simulate(agree, 3)) == len(agree)


def test_acceptance_by_position_is_conditional_on_the_positions_before():
    a = Agreement([True, False, True, True], None, 10)
    # position 1: 3 of 4 starts agree; position 2: of the 3 reached (starts 0, 2, 3 -> 3
    # has no next), start 0 fails, start 2 holds: 1 of 2
    assert acceptance_by_position([a], 2) == [0.75, 0.5]


def test_break_even_acceptance_follows_the_cost_of_a_batch():
    free = StepCosts(flat_profile([10.0] * 8), [1.0], [0.0] * 8, 0.0)
    assert break_even(free, 3, 128) == pytest.approx(0.0, abs=1e-6)
    dear = StepCosts(flat_profile([10.0 * n for n in range(1, 9)]), [1.0], [0.0] * 8, 0.0)
    assert break_even(dear, 3, 128) is None  # 4 tokens cost 4 plain steps: never pays
    half = StepCosts(flat_profile([10.0, 15.0, 20.0, 25.0]), [1.0], [0.0] * 4, 0.0)
    assert break_even(half, 1, 128) == pytest.approx(0.5, abs=1e-3)  # 1 + a = 1.5


def test_predicted_speedup_is_tokens_per_step_over_the_step_cost():
    everything = Agreement([True] * 40, None, 16)
    free = StepCosts(flat_profile([10.0] * 8), [1.0], [0.0] * 8, 0.0)
    by_k = {p.k: p for p in predict([everything], free, k_max=4)}
    assert by_k[4].tokens_per_step == pytest.approx(40 / 8)  # 5 tokens a step, 8 steps
    assert by_k[4].speedup == pytest.approx(by_k[4].tokens_per_step)
    drafty = StepCosts(flat_profile([10.0] * 8), [1.0], [0.0] * 8, 5.0)  # half a step per token
    assert predict([everything], drafty, k_max=4)[3].speedup == pytest.approx(5 / 3)


# ---------------------------------------------------------------- against a real run


def test_the_replay_predicts_a_real_greedy_draft_run_exactly(tiny_backend, sibling_backend):
    answers = target_answers(tiny_backend, PROMPTS[:1], 40, chat=False)
    agreement = same_vocab_agreement(tiny_backend, sibling_backend, answers[0])
    assert 0 < sum(agreement.agree) < len(agreement.agree)  # a draft that is sometimes right
    assert all(0.0 <= a <= 1.0 + 1e-9 for a in agreement.alpha)
    for k in (1, 3, 5):
        oracle = make_oracle("draft", target=tiny_backend, draft=sibling_backend)
        session = Session(tiny_backend, oracle, RunSettings(PROMPTS[0], chat=False, k=k,
                                                            max_tokens=40))
        steps = [e for e in session if isinstance(e, ev.StepEvent)]
        assert steps[0].emitted_ids[0] == answers[0].ids[0]
        replay = simulate(agreement.agree, k)
        assert [(s.n_accepted, len(s.proposed)) for s in steps] == \
            [(r.accepted, r.drafted) for r in replay], k


def test_a_draft_that_is_the_target_is_accepted_everywhere(tiny_backend, tiny_draft_backend,
                                                          monkeypatch):
    """Every guess kept; timed as the flat profile says for the target and a tenth of its
    single-token step for the draft (the tiny draft costs what the tiny target does, which
    left the verdict to the machine's noise), drafting pays: the verdict is the draft's."""
    from specviz.engines.pair import report as pair_report

    def timed(backend, prefix, largest, repeats=5):
        if backend is tiny_draft_backend:
            return [0.5] * largest
        return [5.0 + 0.5 * i for i in range(largest)]

    monkeypatch.setattr(pair_report, "time_forwards", timed)
    answers = target_answers(tiny_backend, PROMPTS, 24, chat=False)
    vocab = compare_vocabularies(tiny_backend, tiny_draft_backend)
    report = estimate(tiny_backend, tiny_draft_backend, answers, vocab,
                      flat_profile([5.0, 5.5, 6.0, 6.5, 7.0, 7.5, 8.0, 8.5, 9.0]), k_max=6)
    assert report.greedy_agreement == 1.0 and report.alpha == pytest.approx(1.0, abs=1e-4)
    assert all(a == 1.0 for a in report.by_position[:4])
    assert report.predictions[-1].tokens_per_step > 3
    assert report.verdict.startswith("--oracle draft --k "), report.verdict
    assert report.best_k >= 4 and report.best_speedup > 2


# ---------------------------------------------------------------- tokenizers


def test_vocabularies_compared_item_by_item(tiny_backend, tiny_draft_backend,
                                            other_vocab_backend):
    same = compare_vocabularies(tiny_backend, tiny_draft_backend, "any text")
    assert same.verdict == VERDICT_DRAFT and all(i.ok for i in same.items)
    other = compare_vocabularies(tiny_backend, other_vocab_backend, "def add(a, b): 東京")
    assert other.verdict == VERDICT_CROSS
    spellings = next(i for i in other.items if i.name == "spellings")
    assert not spellings.ok and "259" in spellings.target  # merges part at the first learnt id
    assert next(i for i in other.items if i.name == "vocabulary size").target == "400"


def test_a_draft_that_cannot_spell_the_targets_text_is_not_usable(tiny_backend,
                                                                 other_vocab_backend,
                                                                 monkeypatch):
    monkeypatch.setattr(other_vocab_backend, "tokenize", lambda text, add_special=True: [])
    report = compare_vocabularies(tiny_backend, other_vocab_backend, "hello\n")
    assert report.verdict == VERDICT_UNUSABLE and "cannot spell" in report.reason


def test_cross_draft_agreement_is_estimated_through_text(tiny_backend, other_vocab_backend):
    from specviz.engines.pair.acceptance import cross_agreement

    answer = target_answers(tiny_backend, PROMPTS[:1], 24, chat=False)[0]
    agreement = cross_agreement(tiny_backend, other_vocab_backend, answer)
    assert len(agreement.agree) == len(answer.ids) and agreement.alpha is None


# ---------------------------------------------------------------- the command


def test_pair_command_reports_json_and_measures_a_missing_profile(capsys, tiny_model_dir,
                                                                   tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_HOME", str(tmp_path / "home"))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"prompt": p}) for p in PROMPTS), encoding="utf-8")
    base = ["pair", "--target", str(tiny_model_dir), "--draft", str(tiny_model_dir),
            "--backend", "transformers", "--prompts", str(prompts), "--max-tokens", "12",
            "--k-max", "4"]
    code = main([*base, "--no-measure"])
    err = capsys.readouterr().err
    assert code != 0 and "no cost profile" in err and "specviz profile" in err
    assert re.search(r"about \d+ s here", err)  # how long measuring it would take
    assert main([*base, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["vocab"]["verdict"] == "draft" and report["greedy_agreement"] == 1.0
    assert [p["k"] for p in report["predictions"]] == [1, 2, 3, 4]
    assert report["verdict"]
    assert main(base) == 0  # the profile is stored now; the text report
    text = capsys.readouterr().out
    assert "tokenizers:" in text and "break-even" in text and "verdict:" in text


def test_pair_command_refuses_bad_input_in_one_line(capsys, tiny_model_dir, tmp_path):
    code = main(["pair", "--target", str(tiny_model_dir), "--draft", "no-such-model",
                 "--backend", "transformers"])
    err = capsys.readouterr().err.strip()
    assert code != 0 and "no-such-model" in err and len(err.splitlines()) == 1
    code = main(["pair", "--target", str(tiny_model_dir), "--draft", str(tiny_model_dir),
                 "--backend", "transformers", "--prompts", str(tmp_path / "none.txt")])
    assert code != 0 and "prompts not found" in capsys.readouterr().err
