"""The benchmark: every group of Spec-Bench in the table, figures that add up."""

from __future__ import annotations

import json

import pytest
from steady_timing import steady_auto_k, steady_forwards
from test_session import CODE_EDIT

from specviz.app.cli import bench_tables
from specviz.app.cli.bench_tables import detail_table
from specviz.app.cli.main import main
from specviz.engines.bench import spec_bench as bench

QUESTIONS = [
    {"question_id": 1, "category": "writing", "turns": ["Write a line.", "Now shorter."]},
    {"question_id": 2, "category": "translation", "turns": ["Translate: hola amigo"]},
    {"question_id": 3, "category": "summarization", "turns": ["Summarise: a b c a b c"]},
    {"question_id": 4, "category": "qa", "turns": ["Who? def add(a, b)"]},
    {"question_id": 5, "category": "math_reasoning", "turns": ["2 + 2 = ?"]},
    {"question_id": 6, "category": "rag", "turns": ["Context: fox. Question: fox?"]},
    {"question_id": 7, "category": "code_edit", "turns": ["def f(x):\n    return x\n"]},
]


@pytest.fixture()
def questions_file(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text("\n".join(json.dumps(q) for q in QUESTIONS) + "\n", encoding="utf-8")
    return path


def test_bench_prints_every_group_and_writes_json(capsys, tiny_model_dir, questions_file,
                                                  tmp_path):
    out_json, out_md = tmp_path / "b.json", tmp_path / "b.md"
    code = main(["bench", "--target", str(tiny_model_dir), "--backend", "transformers",
                 "--oracles", "none,prompt-lookup,ngram", "--k", "2,3", "--questions",
                 str(questions_file), "--max-tokens", "8", "--json", str(out_json),
                 "--markdown", str(out_md)])
    table = capsys.readouterr().out
    assert code == 0
    for group in {bench.GROUPS[q["category"]] for q in QUESTIONS}:
        assert group in table
    data = json.loads(out_json.read_text())
    assert [r["method"] for r in data["rows"]] == [
        "none", "prompt-lookup k=2", "prompt-lookup k=3", "ngram k=2", "ngram k=3"]
    # 8 turns (one question has two) x 5 configurations, all greedy-identical to plain.
    assert len(data["records"]) == 40
    assert all(r["identical"] for r in data["records"] if r["oracle"] != "none")
    assert data["rows"][0]["speedup"]["Overall"] == pytest.approx(1.0)
    assert out_md.read_text().strip() == table.strip()


def test_summary_figures_add_up():
    records = [
        bench.Record(1, "qa", 0, "none", 0, 10, 10, 0, 0, 1000.0),
        bench.Record(1, "qa", 0, "ngram", 4, 10, 4, 12, 6, 500.0, identical=True),
        bench.Record(2, "rag", 0, "none", 0, 20, 20, 0, 0, 1000.0),
        bench.Record(2, "rag", 0, "ngram", 4, 20, 10, 20, 10, 2000.0, identical=False),
    ]
    none, ngram = bench.summarise(records)
    assert ngram.speedup["Question Answering"] == pytest.approx(2.0)
    assert ngram.speedup["Retrieval-aug. Generation"] == pytest.approx(0.5)
    assert ngram.speedup["Overall"] == pytest.approx((30 / 2.5) / (30 / 2.0))
    assert ngram.mean_accepted_tokens == pytest.approx(30 / 14)
    assert ngram.acceptance_rate == pytest.approx(16 / 32)
    assert (ngram.identical, ngram.compared) == (1, 2)
    assert none.acceptance_rate is None


def test_declined_steps_add_up_per_reason_and_show_in_the_table():
    records = [
        bench.Record(1, "qa", 0, "none", 0, 10, 10, 0, 0, 1000.0),
        bench.Record(1, "qa", 0, "ngram", 4, 10, 4, 12, 6, 500.0, declined={"no-match": 1}),
        bench.Record(2, "qa", 0, "ngram", 4, 20, 6, 20, 10, 500.0,
                     declined={"no-match": 2, "end": 1}),
    ]
    none, ngram = bench.summarise(records)
    assert ngram.declined == {"no-match": 3, "end": 1}
    assert ngram.decline_rate == pytest.approx(4 / 10)
    assert none.decline_rate is None
    table = bench_tables.markdown_table([none, ngram])
    assert "| Declined |" in table and "40% (no match)" in table


def test_limit_applies_per_group(questions_file):
    qs = bench.load_questions(questions_file, categories=["Multi-turn Conversation", "qa"])
    assert [q.question_id for q in qs] == [1, 4]


def test_bad_question_file_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question_id": 1}\n', encoding="utf-8")
    with pytest.raises(Exception, match="line 1: not a Spec-Bench question"):
        bench.load_questions(path)


def test_acceptance_per_detail_adds_up_and_is_tabled():
    records = [
        bench.Record(1, "qa", 0, "rules", 4, 10, 6, 8, 5, 500.0, identical=True,
                     by_detail={"indent": [4, 4], "close-brackets": [4, 1]}),
        bench.Record(2, "qa", 0, "rules", 4, 10, 8, 3, 1, 500.0, identical=True,
                     by_detail={"indent": [2, 0], "repeat-line": [1, 1]}),
    ]
    (row,) = bench.summarise(records)
    assert row.by_detail == {"indent": [6, 4], "close-brackets": [4, 1], "repeat-line": [1, 1]}
    table = detail_table([row])
    assert "| rules k=4 | indent | 6 | 4 | 67% |" in table
    assert "| rules k=4 | close-brackets | 4 | 1 | 25% |" in table
    rows = bench.to_json(records, [row], {})["rows"]
    assert rows[0]["by_detail"]["repeat-line"] == {"proposed": 1, "accepted": 1,
                                                   "acceptance_rate": 1.0}


def test_bench_reports_acceptance_per_detail(capsys, tiny_model_dir, questions_file, tmp_path):
    out_json = tmp_path / "b.json"
    code = main(["bench", "--target", str(tiny_model_dir), "--backend", "transformers",
                 "--oracles", "none,rules,prompt-lookup", "--k", "4", "--questions",
                 str(questions_file), "--max-tokens", "12", "--json", str(out_json)])
    assert code == 0
    data = json.loads(out_json.read_text())
    for row in data["rows"][1:]:
        proposed = sum(r["proposed"] for r in data["records"] if r["oracle"] == row["oracle"])
        assert sum(d["proposed"] for d in row["by_detail"].values()) == proposed
    assert data["rows"][2]["by_detail"]  # prompt lookup names its n-gram sizes
    assert "Acceptance per proposal detail" in capsys.readouterr().out


def test_bench_with_auto_k_labels_its_rows(capsys, tiny_model_dir, questions_file, tmp_path,
                                           monkeypatch):
    monkeypatch.setenv("SPECVIZ_HOME", str(tmp_path))  # the profile is measured into here
    steady_forwards(monkeypatch)  # and stored at once, however busy the machine is
    out_json = tmp_path / "b.json"
    code = main(["bench", "--target", str(tiny_model_dir), "--backend", "transformers",
                 "--oracles", "none,prompt-lookup", "--k", "2,auto", "--questions",
                 str(questions_file), "--categories", "code_edit,qa", "--max-tokens", "8",
                 "--json", str(out_json)])
    table = capsys.readouterr().out
    assert code == 0
    assert "prompt-lookup k=auto (mean K" in table
    rows = json.loads(out_json.read_text())["rows"]
    assert [r["k"] for r in rows] == [0, 2, "auto"]
    assert rows[2]["mean_k"] is not None and rows[1]["mean_k"] is None
    assert rows[2]["identical"] == rows[2]["compared"] == 2
    assert list((tmp_path / "profiles").glob("*.json"))


def test_details_group_by_what_proposed_them():
    assert bench.detail_kind("context 4-gram, seen 3x (75%)") == "context 4-gram"
    assert bench.detail_kind("3-gram match") == "3-gram match"
    assert bench.detail_kind("idiom:for-range") == "idiom:for-range"


def test_a_turn_after_a_parted_turn_is_not_compared():
    from specviz.engines import events as ev

    q = bench.Question(1, "writing", ("first", "second"))
    summary = ev.SummaryEvent("ngram", "eos", "x", ev.Totals(4, 2, 4, 2, 10.0, 0.0, 0.0), 0.0,
                              10.0)
    record = bench._record(q, 1, bench.Config("ngram", 2), summary, [], [], None, [],
                           comparable=False)
    assert record.identical is None and "earlier turn" in record.divergence["note"]
    plain = bench.Record(1, "writing", 1, "none", 0, 4, 4, 0, 0, 20.0)
    rows = bench.summarise([plain, record])
    assert rows[1].compared == 0 and rows[1].unexplained == 0


def lanes(backend, configs, make_policy=None):
    """Bench lanes of `configs` around `backend`, plain decoding's first, as
    run_builder.lane_parts makes them (an auto lane's K policy by `make_policy(oracle)`)."""
    from specviz.engines.host.run_builder import LaneParts
    from specviz.engines.host.run_spec import LaneSpec
    from specviz.engines.oracles import make_oracle

    made = []
    for config in bench.plain_first(configs):
        spec = LaneSpec(config.oracle, max(config.k, 0), auto_k=config.k == bench.AUTO_K)
        oracle = make_oracle(config.oracle)
        made.append(LaneParts(spec, backend, {}, oracle,
                              make_policy(oracle) if spec.auto_k else None))
    return made


def _auto_bench(backend, questions_file, repeat):
    """Prompt lookup with auto K over the questions plus one code edit that it can copy."""
    from specviz.engines.cost import profile as prof
    from specviz.engines.cost.auto_k import AutoK

    cheap = prof.Profile("tiny", "transformers", "cpu", None, [64], [1, 2, 4, 8],
                         [[10, 10.5, 11, 12]])
    made: list[AutoK] = []

    def make_policy(oracle):
        # Steps learnt at their profiled prices: which K each turn picks must not depend on
        # how busy the machine is (beside two busy loops a turn drafted once and not again).
        made.append(steady_auto_k(AutoK(oracle, cheap)))
        return made[-1]

    questions = [*bench.load_questions(questions_file)[:2],
                 bench.Question(8, "code_edit", (CODE_EDIT,))]
    records = bench.run_bench(lanes(backend, [bench.Config("prompt-lookup", bench.AUTO_K)],
                                    make_policy), questions, max_tokens=40, repeat=repeat)
    return records, made[0]


def test_repeat_takes_the_median_time_and_learns_each_turn_once(tiny_backend, questions_file):
    once, policy_once = _auto_bench(tiny_backend, questions_file, 1)
    thrice, policy_thrice = _auto_bench(tiny_backend, questions_file, 3)
    assert len(thrice) == len(once) == 8  # 4 turns x (plain, auto): repeats add no rows
    for r in thrice:
        assert len(r.compute_ms_runs) == 3
        assert r.compute_ms == sorted(r.compute_ms_runs)[1]
        # The first run's time, split: where a backend's run is slower than its profile.
        # A repeat's time leaves its stalled steps out (stalls.py): never more than the split.
        assert sum(r.split_ms.values()) >= r.compute_ms_runs[0] - 0.01
        if not r.stalls:
            assert sum(r.split_ms.values()) == pytest.approx(r.compute_ms_runs[0], abs=0.01)
        assert r.split_ms["verify"] > 0
    assert [(r.tokens, r.steps, r.accepted) for r in thrice] == \
        [(r.tokens, r.steps, r.accepted) for r in once]
    # Every repeat starts from what the policy knew before the turn: three runs learn what
    # one run does, not three times as much.
    assert policy_thrice.acceptance.counts == policy_once.acceptance.counts
    assert policy_thrice.acceptance.judged == policy_once.acceptance.judged > 0


def test_repeat_must_be_positive(tiny_backend, questions_file):
    with pytest.raises(bench.SpecvizError, match="at least 1"):
        bench.run_bench(lanes(tiny_backend, []), [], repeat=0)


@pytest.mark.parametrize(("mean_k", "shown"), [(0.0, "0.0"), (0.013, "< 0.05"), (2.04, "2.0")])
def test_a_mean_k_that_drafted_a_little_never_reads_zero(mean_k, shown):
    assert bench_tables._k(mean_k) == shown


@pytest.mark.parametrize("oracles, prepared", [(["none", "prompt-lookup"], 1), (["none"], 0)])
def test_what_drafts_need_is_set_up_before_any_lane_is_timed(tiny_backend, questions_file,
                                                              monkeypatch, oracles, prepared):
    """A compiled backend compiles a width's graph on its first use: the bench has it done
    before the first timed step (once, where a lane drafts), so no lane pays a one-time cost
    the lanes after it do not."""
    calls: list[int] = []
    # In the instance's own dict, taken out again afterwards (monkeypatch.setattr would leave
    # the bound method there, and backends shared from it would prepare its widths).
    monkeypatch.setitem(vars(tiny_backend), "prepare_widths",
                        lambda: calls.append(tiny_backend.n_past))
    bench.run_bench(lanes(tiny_backend, [bench.Config(o, 2) for o in oracles]),
                    bench.load_questions(questions_file)[:2], max_tokens=4)
    assert calls == [0] * prepared  # once, on an empty cache, before the first run
