"""`specviz advise`: candidates predicted on the target's answers and ranked; the replay
against a real speculative run; the answers kept; bad input one line each."""

from __future__ import annotations

import json

import pytest
from steady_timing import steady_forwards
from test_cross_draft import other_vocab_backend  # noqa: F401 (a fixture)

from specviz.app.cli.main import main
from specviz.engines import events as ev
from specviz.engines.advise import answers as kept
from specviz.engines.advise import heads as trained
from specviz.engines.advise import prompts as kinds
from specviz.engines.advise.candidates import DraftModel, size_reason
from specviz.engines.advise.copying import build
from specviz.engines.advise.drafts import AgreementDraft, cannot_pay_line, predict_draft
from specviz.engines.advise.predict import predict
from specviz.engines.advise.pricing import Costs
from specviz.engines.advise.replay import Drafter, Record, replay
from specviz.engines.advise.report import ALL, Advice, Candidate, Cell, rank, render
from specviz.engines.corpus import bundled_prompts, read_prompts
from specviz.engines.cost.profile import Profile
from specviz.engines.loop.session import RunSettings, Session
from specviz.engines.pair.acceptance import simulate, target_answers

PROMPTS = ["def add(a, b):\n    return a + b\n\ndef add(a, b):\n", "The quick brown fox"]


def costs(per_row: float = 1.0, base: float = 10.0, other: float = 0.0) -> Costs:
    """A step of n rows costs base + per_row * (n - 1) ms, at every context."""
    row = [base + per_row * (n - 1) for n in range(1, 18)]
    return Costs(Profile("m", "b", "cpu", 1, [128, 4096], list(range(1, 18)), [row, row]),
                 {1: 1.0}, other)


def agreeing(share: float, n: int = 120, seed: int = 0) -> list[bool]:
    """n answer positions, the draft's argmax right at about `share` of them."""
    import numpy as np

    return list(np.random.default_rng(seed).random(n) < share)


def draft_row(name: str, agree: list[bool], per_token: float,
              records: dict[str, list[Record]], price: Costs) -> Candidate:
    table = {tuple(r.prompt): (r.out, agree) for recs in records.values() for r in recs}
    cells = predict(records, lambda: Drafter(AgreementDraft("draft", table), per_token),
                    price, draft_ms=lambda k: k * per_token)
    return Candidate(name, "draft", model=name, cells=cells)


RECORDS = {"code": [Record("p", [1, 2, 3, 4], list(range(100, 220)))]}


# ---------------------------------------------------------------- ranking


def test_higher_acceptance_at_equal_cost_ranks_higher():
    price = costs(per_row=1.0)
    good = draft_row("good", agreeing(0.8), 1.0, RECORDS, price)
    poor = draft_row("poor", agreeing(0.3), 1.0, RECORDS, price)
    ranked = rank([poor, good])
    assert [c.name for c in ranked] == ["good", "poor"]
    assert good.cells[ALL].acceptance > poor.cells[ALL].acceptance
    assert good.overall > max(1.0, poor.overall)  # the good draft pays at these costs
    assert good.cells["code"].speedup == good.overall  # one kind: it is every kind


def test_the_same_acceptance_ranks_by_cost():
    agree = agreeing(0.7)
    cheap = draft_row("cheap", agree, 0.5, RECORDS, costs())
    dear = draft_row("dear", agree, 4.0, RECORDS, costs())
    assert [c.name for c in rank([dear, cheap])] == ["cheap", "dear"]
    assert cheap.overall > dear.overall


def test_a_tie_goes_to_what_costs_nothing_to_get_and_skipped_rows_come_last():
    cell = Cell(1.2, "auto", 2, 1.2, 1.1, 0.5, 1.5, 0.4, 100)
    trained_one = Candidate("a-heads", "medusa", obtain="train, about 9 min", cells={ALL: cell})
    free = Candidate("z-lookup", "prompt-lookup", cells={ALL: cell})
    skipped = Candidate("big", "draft", skipped="not smaller than the target")
    assert [c.name for c in rank([skipped, trained_one, free])] == ["z-lookup", "a-heads", "big"]


def test_the_replay_of_a_draft_at_fixed_k_is_pairs_simulation():
    agree = agreeing(0.6)
    table = {(1, 2, 3, 4): (RECORDS["code"][0].out, agree)}
    for k in (1, 3, 5):
        tally = replay(RECORDS["code"], lambda: Drafter(AgreementDraft("draft", table), 1.0),
                       costs(), k)
        steps = simulate(agree, k)
        assert tally.steps == len(steps)
        assert tally.accepted == sum(s.accepted for s in steps)
        assert tally.drafted == sum(s.drafted for s in steps)


CODE_EDIT = (
    "Add type hints to this function. Return the full code.\n\n"
    "def scale(values, factor):\n    result = []\n    for v in values:\n"
    "        result.append(v * factor)\n    return result\n"
)


@pytest.mark.parametrize("oracle", ["prompt-lookup", "ngram"])
def test_the_replay_matches_a_real_speculative_run(smol_llama, oracle):
    """The replay's steps are a speculative run's at a fixed K: as many steps, as many tokens
    drafted and kept, on a code edit whose copies hold."""
    answer = target_answers(smol_llama, [CODE_EDIT], 48, chat=True)[0]
    record = [Record(answer.prompt_text, answer.prompt_ids, answer.ids, 48)]
    for k in (2, 5):
        session = Session(smol_llama, build(oracle, smol_llama),
                          RunSettings(CODE_EDIT, chat=True, k=k, max_tokens=48))
        steps = [e for e in session if isinstance(e, ev.StepEvent)]
        assert [t for s in steps for t in s.emitted_ids] == answer.ids  # lossless, as ever
        tally = replay(record, lambda: Drafter(build(oracle, smol_llama)), costs(), k,
                       eos_ids=smol_llama.eos_ids)
        assert tally.steps == len(steps), k
        assert tally.drafted == sum(len(s.proposed) for s in steps), k
        assert tally.accepted == sum(s.n_accepted for s in steps) > 0, k


def test_a_profile_far_from_forwards_timed_now_is_said():
    from specviz.engines.advise.pricing import drift_line

    price = costs()
    assert drift_line(price, "m") == ""
    assert drift_line(Costs(price.profile, {1: 2.0, 2: 3.0}, 0.0), "m") == ""  # busier alike
    off = Costs(price.profile, {1: 1.0, 2: 0.3}, 0.0)
    line = drift_line(off, "m")
    assert "a batch costs 0.30x what it says" in line and "--refresh" in line
    assert off.scale(1) == 1.0 and off.scale(5) == 0.3  # a batch's regime beyond two rows


def test_auto_k_declines_what_cannot_pay():
    """At batch costs where a second row costs a whole step, auto K keeps to plain steps on
    a draft that is seldom right: close to 1x, never the fixed K's loss."""
    price = costs(per_row=10.0)
    poor = draft_row("poor", agreeing(0.2), 2.0, RECORDS, price)
    cell = poor.cells[ALL]
    assert cell.fixed_speedup < 0.8
    assert cell.auto_speedup > cell.fixed_speedup and cell.policy == "auto"


# ---------------------------------------------------------------- skipped drafts, bad input


def test_a_draft_that_costs_more_than_the_target_is_skipped_with_its_reason(
        tiny_backend, tiny_draft_backend, monkeypatch):
    big = DraftModel("big", "big", None, 2_000_000_000, "registry")
    assert "not smaller than the target (2.0 GB; the target 98 MB)" == size_reason(
        big, 98_000_000)
    assert size_reason(big, 3_000_000_000) == ""
    price = costs(per_row=1.0)
    assert "cannot pay here" in cannot_pay_line(price, 12.0, False, 128)  # dearer than a step
    assert cannot_pay_line(price, 0.5, False, 128) == ""
    # Through the draft's own prediction: timed dearer than a plain step, it is not read.
    from specviz.engines.advise import drafts

    monkeypatch.setattr(drafts, "token_ms", lambda draft, prefix: 50.0)
    monkeypatch.setattr(drafts, "greedy_agreement", lambda *a: pytest.fail("read anyway"))
    answers = {"code": target_answers(tiny_backend, PROMPTS[:1], 12, chat=True)}
    row = predict_draft(tiny_backend, tiny_draft_backend, Candidate("draft tiny", "draft"),
                        answers, price, "tiny")
    assert not row.predicted and "a draft token costs 50.0 ms" in row.skipped


def test_a_draft_whose_tokenizer_is_unusable_is_one_line(tiny_backend, other_vocab_backend,
                                                         monkeypatch):
    monkeypatch.setattr(other_vocab_backend, "tokenize", lambda text, add_special=True: [])
    answers = {"code": target_answers(tiny_backend, PROMPTS[:1], 12, chat=True)}
    row = predict_draft(tiny_backend, other_vocab_backend, Candidate("draft other", "draft"),
                        answers, costs(), "tiny")
    assert not row.predicted and row.skipped.startswith("tokenizer unusable: ")
    assert "\n" not in row.skipped


def test_a_same_vocabulary_draft_is_predicted_and_kept_for_auto_k(tiny_backend,
                                                                 tiny_draft_backend,
                                                                 monkeypatch):
    """Its token priced as given: timed, a busy machine made it dearer than a plain step the
    second time, and the prediction was skipped."""
    from specviz.engines.advise import drafts
    from specviz.engines.pair import known

    monkeypatch.setattr(drafts, "token_ms", lambda draft, prefix: 1.0)
    answers = {"code": target_answers(tiny_backend, PROMPTS, 16, chat=True)}
    row = predict_draft(tiny_backend, tiny_draft_backend,
                        Candidate("draft twin", "draft", model="twin"), answers,
                        costs(per_row=0.1), "tiny-target")
    assert row.predicted and row.oracle == "draft"
    assert row.cells[ALL].acceptance == 1.0  # the same model: every guess holds
    assert known.acceptance("tiny-target", "twin")[0] == 1.0
    monkeypatch.setattr(drafts, "greedy_agreement", lambda *a: pytest.fail("read again"))
    again = predict_draft(tiny_backend, tiny_draft_backend,
                          Candidate("draft twin", "draft", model="twin"), answers,
                          costs(per_row=0.1), "tiny-target")
    assert again.cells[ALL].acceptance == 1.0  # its agreement kept from the first advice


def test_an_empty_prompt_file_is_one_line_and_the_others_still_count(tmp_path):
    empty, good = tmp_path / "empty.jsonl", tmp_path / "mine.txt"
    empty.write_text("", encoding="utf-8")
    good.write_text("rename x to y in: x = 1", encoding="utf-8")
    sets, problems = kinds.file_sets([empty, good])
    assert [s.kind for s in sets] == ["mine"] and len(problems) == 1
    assert "holds no prompt" in problems[0]


def test_default_prompt_kinds_are_small_and_real():
    sets, problems = kinds.bundled_sets(list(kinds.KINDS), 2)
    assert not problems and [s.kind for s in sets] == list(kinds.KINDS)
    assert all(len(s.prompts) == 2 for s in sets)
    assert sets[0].prompts[0] == read_prompts([bundled_prompts() / "code-edit-fix-bug.txt"])[0]
    assert sets[1].prompts[0].startswith("Compose an engaging travel blog post")  # writing
    with pytest.raises(ValueError, match="code, prose, chat"):
        kinds.parse_kinds("code,poetry")


@pytest.mark.parametrize("argv, message", [
    (["--target", "no-such-model"], "no-such-model"),
    (["--prompts", "missing.txt"], "prompts not found"),
])
def test_bad_input_is_one_line(capsys, tiny_model_dir, tmp_path, argv, message):
    base = ["advise", "--no-fetch", "--target", str(tiny_model_dir), "--backend",
            "transformers"]
    code = main([*base, *argv])
    err = [line for line in capsys.readouterr().err.splitlines()
           if not line.startswith("specviz advise:")]  # progress lines
    assert code == 2 and len(err) == 1 and message in err[0], err


def test_a_target_that_cannot_load_is_one_line(capsys, tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a model at all")
    code = main(["advise", "--target", str(bad), "--kind", "code", "--per-kind", "1"])
    err = [line for line in capsys.readouterr().err.splitlines()
           if not line.startswith("specviz advise:")]
    assert code == 2 and len(err) == 1 and "is not a GGUF model file" in err[0], err


def test_an_empty_prompt_set_is_one_line(capsys, tiny_model_dir, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n", encoding="utf-8")
    code = main(["advise", "--target", str(tiny_model_dir), "--backend", "transformers",
                 "--prompts", str(empty)])
    err = capsys.readouterr().err
    assert code == 2 and "no prompts to answer" in err.splitlines()[-1]


def test_no_candidate_at_all_still_gives_the_table(capsys, tiny_model_dir, tmp_path):
    """Every draft model here is larger than the tiny target: each is listed with its reason,
    then one line says nothing could be predicted."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": PROMPTS[0]}), encoding="utf-8")
    code = main(["advise", "--target", str(tiny_model_dir), "--backend", "transformers",
                 "--prompts", str(prompts), "--max-tokens", "8", "--only", "draft"])
    out, err = capsys.readouterr()
    assert code == 2 and "no candidate could be predicted" in err.splitlines()[-1]
    assert "verdict: no candidate could be predicted" in out
    if "not predicted:" in out:  # models found here: each with its reason
        assert "not smaller than the target" in out


# ---------------------------------------------------------------- the answers, kept


def test_the_answers_are_kept_and_not_written_twice(tiny_backend, monkeypatch):
    calls = []

    def counting(*args, **kw):
        calls.append(args)
        return target_answers(*args, **kw)

    monkeypatch.setattr(kept, "target_answers", counting)
    first, cached = kept.answers(tiny_backend, PROMPTS, 12)
    assert not cached and len(calls) == 1
    again, cached = kept.answers(tiny_backend, PROMPTS, 12)
    assert cached and len(calls) == 1  # read back: the target did not decode again
    assert [(a.prompt_ids, a.ids, a.text) for a in again] == \
        [(a.prompt_ids, a.ids, a.text) for a in first]
    path = kept.cache_path(tiny_backend, PROMPTS, 12, True)
    path.write_text("{ torn", encoding="utf-8")
    said = []
    _, cached = kept.answers(tiny_backend, PROMPTS, 12, say=said.append)
    assert not cached and len(calls) == 2 and "cannot be read" in said[0]
    _, cached = kept.answers(tiny_backend, PROMPTS, 13)  # another budget: other answers
    assert not cached and len(calls) == 3


# ---------------------------------------------------------------- heads


def test_heads_configs_are_read_as_training_wrote_them():
    import torch  # noqa: F401 (the modules below load it)

    from specviz.engines.eagle import checkpoint
    from specviz.engines.medusa import heads
    from specviz.engines.models import side_folder

    medusa, eagle = trained.held_out()["medusa"], trained.held_out()["eagle"]
    assert (medusa.config, medusa.format) == (heads.CONFIG_FILE, heads.FORMAT)
    assert eagle.config == checkpoint.CONFIG_FILE
    assert heads.heads_dir("m.gguf") == side_folder("m.gguf", medusa.folder)
    assert checkpoint.head_dir("m.gguf") == side_folder("m.gguf", eagle.folder)


def test_heads_are_found_and_priced_by_their_held_out_acceptance(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    assert trained.find(model) == {"medusa": None, "eagle": None}
    (model / "medusa").mkdir()
    (model / "medusa" / "medusa.json").write_text(json.dumps(
        {"format": "specviz-medusa-1", "accuracy": {"top1": [0.6, 0.4, 0.3]}}))
    (model / "eagle").mkdir()
    (model / "eagle" / "config.json").write_text(json.dumps({"specviz": {}}))
    found = trained.find(model)
    assert found["medusa"].accept == [0.6, 0.4, 0.3]
    assert found["eagle"].problem.startswith("no held-out acceptance")
    free = costs(per_row=0.0)
    better = trained.cells(found["medusa"], 0.01, free, {ALL: 200})[ALL]
    worse = trained.cells(trained.Heads("medusa", model, [0.3, 0.2]), 0.01, free,
                          {ALL: 200})[ALL]
    assert better.speedup > worse.speedup > 1.0  # free batches: any guess pays
    dear = trained.cells(trained.Heads("medusa", model, [0.05]), 0.01, costs(per_row=10.0),
                         {ALL: 200})[ALL]
    assert dear.best_k == 0 and dear.speedup == pytest.approx(1.0)


def test_untrained_heads_say_what_getting_them_costs(tiny_backend):
    row = trained.candidate(tiny_backend, None, "eagle", costs(), {ALL: 100})
    assert not row.predicted and "train-heads --kind eagle" in row.skipped
    assert row.obtain.startswith("train, about ")


# ---------------------------------------------------------------- the result


def test_the_verdict_says_plain_when_nothing_pays():
    loses = Cell(0.9, "auto", 1, 0.9, 0.8, 0.2, 1.1, 0.5, 10)
    wins = Cell(1.3, "auto", 3, 1.3, 1.2, 0.7, 2.0, 0.4, 10)
    a = Candidate("prompt-lookup", "prompt-lookup", cells={"code": wins, "prose": loses,
                                                           ALL: wins})
    advice = Advice("t", "llama", ["code", "prose", ALL], [a])
    assert advice.verdict.startswith("--target t --oracle prompt-lookup --k auto: 1.30x")
    assert "prose: plain" in advice.verdict
    assert advice.speedups() == {"prompt-lookup": {"code": 1.3, "prose": 0.9, ALL: 1.3}}
    a.cells = {ALL: loses}
    assert advice.verdict.startswith("plain decoding")
    table = render(advice)
    assert "prompt-lookup" in table and "verdict: plain decoding" in table
    assert json.loads(json.dumps(advice.to_dict()))["verdict"] == advice.verdict


def test_advise_end_to_end_on_smollm2(capsys, smol_llama, tmp_path, monkeypatch):
    """The command on a real target: answers written, the profile reused, the copying oracles
    replayed, a ranked table and a verdict, quickly. (A profile of a few sizes is measured
    first, into a home of the test's own, its forwards' times given: the full one takes
    longer than the test should, and one timed on a busy machine is not stored at once.)"""
    from specviz.engines.cost import profile as prof
    from specviz.engines.models import cache_dir

    (tmp_path / "models").symlink_to(cache_dir().resolve(), target_is_directory=True)
    monkeypatch.setenv("SPECVIZ_HOME", str(tmp_path))
    steady_forwards(monkeypatch)
    prof.save(prof.measure(smol_llama, "smollm2-135m", None, batches=(1, 2, 4, 8, 16),
                           contexts=(128, 512), repeats=1))
    code = main(["advise", "--target", "smollm2-135m", "--kind", "code", "--per-kind", "1",
                 "--max-tokens", "32", "--only", "prompt-lookup,ngram,eagle", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    names = [c["name"] for c in data["candidates"]]
    assert {"prompt-lookup", "ngram"} <= set(names) and "eagle head" in names
    predicted = [c for c in data["candidates"] if c["cells"]]
    assert len(predicted) == 2 and predicted[0]["cells"]["all"]["speedup"] >= \
        predicted[1]["cells"]["all"]["speedup"]
    assert data["verdict"] and data["kinds"] == ["code"]
    assert "the target answers the code prompts: 1/1" in err
