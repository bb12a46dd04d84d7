"""The oracle registry says what the oracles are; these tests hold it to the code and docs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specviz.engines.errors import SpecvizError
from specviz.engines.oracles import ORACLE_INFO, ORACLES, make_oracle
from specviz.engines.oracles.registry import BOTH

# medusa and eagle need trained heads (test_eagle checks eagle's description with one)
BUILDABLE = [name for name in ORACLES if name not in ("medusa", "eagle")]


@pytest.mark.parametrize("name", BUILDABLE)
def test_each_registry_entry_builds_its_oracle_with_its_settings(name, tiny_backend,
                                                                  tiny_draft_backend):
    described = ORACLE_INFO[name]
    oracle = make_oracle(name, target=tiny_backend,
                         draft=tiny_draft_backend if described.needs_draft else None)
    assert oracle.name == name and type(oracle.settings) is described.settings_type
    assert oracle.knobs() == {s.name: s.default for s in described.settings if s.live}
    for setting in described.settings:
        assert setting.low <= setting.default <= setting.high
        assert getattr(oracle.settings, setting.name) == setting.default, setting.name
    if not described.plain:  # its first source is its own (suffix: also "memory")
        assert oracle.source == described.sources[0]


def test_settings_are_checked_against_the_registry_when_built_and_when_turned(tiny_backend,
                                                                              tiny_draft_backend):
    tree = make_oracle("tree", target=tiny_backend, draft=tiny_draft_backend,
                       settings={"split": 0.3, "budget": 9})
    assert (tree.settings.split, tree.settings.budget) == (0.3, 9)
    tree.set_knob("budget", 12)
    assert tree.knobs() == {"split": 0.3, "budget": 12}
    with pytest.raises(ValueError, match=r"budget 999 is outside 1\.\.256"):
        tree.set_knob("budget", 999)
    assert tree.settings.budget == 12  # a refused value leaves the setting as it was
    with pytest.raises(ValueError, match="has no setting 'W'"):
        make_oracle("tree", target=tiny_backend, draft=tiny_draft_backend, settings={"W": 3})
    ngram = make_oracle("ngram", settings={"max_ngram": 3})
    with pytest.raises(KeyError):  # fixed when built: not a knob
        ngram.set_knob("max_ngram", 2)


def test_the_command_line_offers_each_flagged_setting_with_what_it_means_per_oracle():
    from specviz.app.cli.main import build_parser

    parser = build_parser()
    run = next(a for a in parser._subparsers._actions if a.choices).choices["run"]
    helps = {flag: action.help for action in run._actions for flag in action.option_strings}
    for described in ORACLE_INFO.values():
        for setting in described.settings:
            if setting.flag:
                assert f"{described.name}: {setting.help}" in helps[f"--{setting.flag}"]


def test_an_oracle_needing_what_no_backend_gave_is_one_clear_line():
    with pytest.raises(SpecvizError, match="the medusa oracle needs the target model"):
        make_oracle("medusa")
    with pytest.raises(SpecvizError, match=r"the tree oracle needs --draft MODEL \(its draft "
                                           r"model; in the window: pick one in the lane\)"):
        make_oracle("tree")


def test_medusa_is_described_as_its_class_sets_itself_up():
    from specviz.engines.oracles.medusa import MedusaOracle

    assert MedusaOracle.source == ORACLE_INFO["medusa"].sources[0]


def test_an_oracle_on_a_backend_it_cannot_run_on_is_one_clear_line(tmp_path):
    from tiny_gguf import write_tiny_gguf

    from specviz.engines.backends.llama import LlamaBackend

    llama = LlamaBackend(write_tiny_gguf(tmp_path / "t.gguf"), n_ctx=128, threads=1)
    with pytest.raises(SpecvizError, match=r"runs on the transformers backend.*--backend "
                                           r"transformers"):
        make_oracle("early-exit", target=llama)
    llama.close()


def test_the_readme_table_lists_every_oracle_with_its_backends():
    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([a-z-]+)` \|[^|]*\|[^|]*\| ([a-z ]+) \|", readme, re.MULTILINE)
    table = {name: backends.strip() for name, backends in rows}
    assert set(table) == set(ORACLES)
    for name, backends in table.items():
        expected = "both" if ORACLE_INFO[name].backends == BOTH else "transformers"
        assert backends == expected, name


def test_an_input_name_is_one_kind_of_thing_wherever_it_is_declared():
    """A lane holds its inputs by name (LaneSpec.inputs), and a lane keeps them when its
    oracle changes in the window: one name, one kind; one flag, one input; and no input may
    be named as a field of the lane, beside which it travels (run_spec.lane_to_dict)."""
    from dataclasses import fields

    from specviz.engines.host.run_spec import LaneSpec
    from specviz.engines.oracles import INPUTS

    by_flag = {}
    for described in ORACLE_INFO.values():
        for each in described.inputs:
            assert each.kind is INPUTS[each.name].kind, (described.name, each.name)
            assert by_flag.setdefault(each.option, each.name) == each.name, each.option
            assert each.help and each.name not in {f.name for f in fields(LaneSpec)}
            if each.fallback:
                assert each.fallback in by_flag or any(
                    i.option == each.fallback for d in ORACLE_INFO.values() for i in d.inputs)


def test_the_command_line_offers_each_input_with_its_help():
    from specviz.app.cli.main import build_parser

    parser = build_parser()
    run = next(a for a in parser._subparsers._actions if a.choices).choices["run"]
    helps = {flag: action.help for action in run._actions for flag in action.option_strings}
    for described in ORACLE_INFO.values():
        for each in described.inputs:
            shown = helps[f"--{each.option}"]
            assert "{default}" not in shown and (each.default or "") in shown
    assert helps["--cross-draft"] == "draft model for the cross-draft oracle (default: --draft)"
    assert helps["--suffix-memory"].endswith("; default: the model's file in the cache")
    bench = next(a for a in parser._subparsers._actions if a.choices).choices["bench"]
    memory = next(a for a in bench._actions if "--suffix-memory" in a.option_strings)
    assert memory.default == "off" and memory.help.endswith("; default: off")


@pytest.mark.parametrize("name", [n for n in BUILDABLE if ORACLE_INFO[n].needs_draft])
def test_closing_an_oracle_leaves_the_draft_it_was_lent_open(name, tiny_backend,
                                                             tiny_draft_backend):
    """A lane's pool lends its draft to the next run after the lane closes its oracle (the
    tree oracle closed its draft: the next tree lane from the pool had no model)."""
    oracle = make_oracle(name, target=tiny_backend, draft=tiny_draft_backend)
    oracle.close()
    tiny_draft_backend.reset()
    assert tiny_draft_backend.forward([1, 2]).shape[-1] == tiny_draft_backend.n_vocab


def test_held_out_acceptance_reads_probabilities_only_and_never_fails_on_a_hostile_config():
    """The heads' configs are files anyone may hand over: what auto K and `advise` read of
    them is the recorded acceptance up to the first value that is not a probability."""
    from specviz.engines.oracles.registry import ORACLE_INFO

    medusa, eagle = ORACLE_INFO["medusa"].advise, ORACLE_INFO["eagle"].advise
    assert medusa.acceptance({"accuracy": {"top1": [0.3, 0.2, 1.5, 0.1]}}) == [0.3, 0.2]
    assert eagle.acceptance({"specviz": {"accuracy": {"conditional": [0.31, True]}}}) == [0.31]
    for hostile in ({}, {"accuracy": "x"}, {"accuracy": {"top1": {"a": 1}}},
                    {"accuracy": {"top1": ["0.3", None]}}, {"specviz": [1, 2]},
                    {"accuracy": {"top1": [float("nan")]}}):
        assert medusa.acceptance(hostile) == [] and eagle.acceptance(hostile) == []
