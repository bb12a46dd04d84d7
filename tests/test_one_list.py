"""The registry is the one list of oracles: an oracle that is nothing but a module and a
registry entry (docs/architecture.md, "Adding an oracle") is ranked by `specviz advise` and
runs in `specviz bench`; what advise, auto K, the model fetch and `specviz shot` need of an
oracle is read from its entry, never from its name."""

from __future__ import annotations

import json
import sys
import types
from collections.abc import Sequence
from dataclasses import replace

import pytest

from specviz.app.cli.main import main
from specviz.engines.oracles import INPUTS, ORACLE_INFO, Oracle, Proposal
from specviz.engines.oracles.registry import MODEL, Input, OracleInfo, Replayed, info

CODE = "def add(a, b):\n    return a + b\n\ndef add(a, b):\n"


class RepeatOracle(Oracle):
    """Proposes what followed the last token where it was seen before in the context."""

    name = "repeat"
    source = "prompt"

    def __init__(self, model=None) -> None:
        super().__init__()
        self.model = model

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        at = next((i for i in range(len(context) - 2, -1, -1) if context[i] == context[-1]),
                  None)
        return Proposal([] if at is None else list(context[at + 1:at + 1 + k]), self.source)


def build(parts):
    return RepeatOracle(parts.inputs.get("repeat_model"))


REPEAT = OracleInfo("repeat", "what followed the last token before", ("prompt",), inputs=(
    Input("repeat_model", MODEL, "a model the repeat oracle keeps", label="repeat model"),),
    advise=Replayed(note="a test's own oracle"))


@pytest.fixture
def repeat(monkeypatch):
    """The repeat oracle: a module under the oracles' package and a registry entry, nothing
    else."""
    module = types.ModuleType("specviz.engines.oracles.repeat")
    module.build = build
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(ORACLE_INFO, "repeat", REPEAT)
    for each in REPEAT.inputs:
        monkeypatch.setitem(INPUTS, each.name, each)
    return REPEAT


def test_advise_ranks_an_oracle_added_by_its_module_and_entry(repeat, capsys, tiny_model_dir,
                                                              tmp_path, monkeypatch):
    """Priced with costs of the test's own: what is shown is that the oracle is predicted,
    not what this machine's forwards cost."""
    from specviz.engines.advise import advise
    from specviz.engines.advise.pricing import Costs
    from specviz.engines.cost.profile import Profile

    rows = list(range(1, 18))
    profile = Profile("tiny", "transformers", "cpu", None, [128, 4096], rows,
                      [[10.0 + n for n in rows]] * 2)
    monkeypatch.setattr(advise, "target_profile", lambda *a: (profile, "a test's profile"))
    monkeypatch.setattr(advise, "live_costs", lambda *a: Costs(profile))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": CODE}), encoding="utf-8")
    code = main(["advise", "--target", str(tiny_model_dir), "--backend", "transformers",
                 "--prompts", str(prompts), "--max-tokens", "12",
                 "--only", "repeat,prompt-lookup", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    rows = {c["name"]: c for c in json.loads(out)["candidates"]}
    assert set(rows) == {"repeat", "prompt-lookup"}
    assert rows["repeat"]["oracle"] == "repeat" and rows["repeat"]["cells"]["all"]["tokens"] > 0
    assert rows["repeat"]["note"] == "a test's own oracle"
    assert "replaying repeat" in err


def test_bench_runs_an_oracle_added_by_its_module_and_entry(repeat, capsys, tiny_model_dir,
                                                            tmp_path):
    questions, out = tmp_path / "q.jsonl", tmp_path / "b.json"
    questions.write_text(json.dumps({"question_id": 1, "category": "code_edit",
                                     "turns": [CODE]}) + "\n", encoding="utf-8")
    code = main(["bench", "--target", str(tiny_model_dir), "--backend", "transformers",
                 "--oracles", "none,repeat", "--k", "3", "--questions", str(questions),
                 "--max-tokens", "8", "--json", str(out)])
    assert code == 0, capsys.readouterr().err
    data = json.loads(out.read_text())
    assert [r["method"] for r in data["rows"]] == ["none", "repeat k=3"]
    (record,) = [r for r in data["records"] if r["oracle"] == "repeat"]
    assert record["identical"] and record["proposed"] > 0


def test_a_bench_lane_lacking_an_input_is_one_line_before_anything_loads(capsys, tmp_path):
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question_id": 1, "category": "qa", "turns": ["x"]}))
    code = main(["bench", "--target", "/nowhere/m.gguf", "--oracles", "none,tree",
                 "--questions", str(questions)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == ["specviz: the tree oracle needs --draft MODEL (its draft "
                                 "model; in the window: pick one in the lane)"]


def test_a_lane_is_spelled_on_the_command_line_by_its_entry(repeat):
    assert info("draft").command_line("auto", "d.gguf") == "--oracle draft --draft d.gguf --k auto"
    # cross-draft's own flag falls back to --draft, which every draft lane shares
    assert info("cross-draft").command_line("3", "d.gguf") == (
        "--oracle cross-draft --draft d.gguf --k 3")
    assert info("medusa").command_line("auto", "/m/medusa") == (
        "--backend transformers --oracle medusa --k auto")  # its heads are found beside
    assert info("repeat").command_line("2", "m.gguf") == (
        "--oracle repeat --repeat-model m.gguf --k 2")


def test_the_models_fetched_are_the_inputs_the_registry_says_are_fetched(repeat):
    from specviz.app.cli.cmd_models import model_args

    assert set(model_args()) == {"target", "draft", "cross_draft", "eagle_head",
                                 "medusa_heads", "repeat_model"}


def test_auto_k_starts_from_pairs_measurement_where_the_entry_says_it_drafts_so(monkeypatch):
    from specviz.engines.host import k_policy
    from specviz.engines.host.run_spec import LaneSpec, ModelChoice
    from specviz.engines.pair import known

    assert known.remember("t-model", "d-model", [0.7, 0.5], 100) is None
    model = ModelChoice("t-model")
    measured = {name: k_policy._pair_measured(LaneSpec(name, inputs={"draft": "d-model"}),
                                              model)
                for name in ("draft", "tree", "cross-draft")}
    assert measured == {"draft": [0.7, 0.5], "tree": [0.7, 0.5], "cross-draft": None}
    monkeypatch.setitem(ORACLE_INFO, "tree", replace(info("tree"), pair_acceptance=False))
    assert k_policy._pair_measured(LaneSpec("tree", inputs={"draft": "d-model"}), model) is None


def test_shot_lanes_hold_every_input_given():
    from specviz.app.cli.main import build_parser
    from specviz.app.cli.shot import lane_configs

    args = build_parser().parse_args(["shot", "o.png", "--oracles", "none,draft",
                                      "--draft", "d.gguf", "--eagle-head", "/h/e"])
    assert [lane.inputs for lane in lane_configs(args)] == [
        {"draft": "d.gguf", "eagle_head": "/h/e"}] * 2
