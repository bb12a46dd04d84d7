"""Training heads with the defaults: a corpus that runs out is said, a head that cannot pay is
reported and kept apart from the model's own, and the default corpus is large enough."""

from __future__ import annotations

import json
import shutil

import pytest

from specviz.app.cli.main import main
from specviz.engines.medusa.head_floor import FLOOR, depth1, will_not_pay
from specviz.engines.medusa.heads import CONFIG_FILE
from specviz.engines.training.stdlib_prompts import stdlib_prompts


@pytest.mark.parametrize(("accuracy", "pays"), [
    ({"acceptance": [0.0, 0.0]}, False),  # an EAGLE head that learned nothing
    ({"acceptance": [FLOOR + 0.01, 0.02]}, True),
    ({"top1": [0.05, 0.01], "top5": [0.3, 0.1]}, False),  # Medusa heads' first head
    ({"top1": [0.17, 0.08]}, True),
    ({}, True),  # a published head records no figures: nothing to judge it by
])
def test_a_head_below_the_floor_will_not_pay(accuracy, pays):
    assert (will_not_pay(accuracy) == "") is pays
    if not pays:
        assert f"{depth1(accuracy):.1%}" in will_not_pay(accuracy)


def test_a_weak_head_is_saved_apart_and_never_taken_as_the_models_own(
        capsys, tiny_model_dir, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps({"turns": [p]}) for p in
                                ["def add(a, b):", "The quick brown fox", "for i in range(3):"]))
    train = ["train-heads", "--target", str(model), "--corpus", str(corpus), "--tokens", "60",
             "--max-new", "20", "--heads", "2", "--steps", "3", "--held-out", "0.34"]
    assert main(train) == 0  # random weights and 3 steps: a head that cannot pay
    out, err = capsys.readouterr()
    weak = model / "medusa-below-floor"
    assert "this head will not pay" in err and f"--medusa-heads {weak}" in err
    assert f"saved to {weak}" in out and (weak / CONFIG_FILE).exists()
    assert not (model / "medusa" / CONFIG_FILE).exists()  # that folder holds answers only
    run = ["run", "--backend", "transformers", "--target", str(model), "--oracle", "medusa",
           "--prompt", "def add(", "--max-tokens", "6", "--k", "2", "--no-chat"]
    assert main(run) == 2
    assert "no Medusa heads" in capsys.readouterr().err
    assert main([*run, "--medusa-heads", str(weak)]) == 0  # named: used as asked
    capsys.readouterr()
    # where an older specviz saved every head:
    shutil.copytree(weak, model / "medusa", dirs_exist_ok=True)
    assert main(run) == 2
    err = capsys.readouterr().err
    assert "will not pay" in err and f"--medusa-heads {model / 'medusa'}" in err


def test_a_corpus_that_runs_out_is_said_with_what_gives_more(capsys, tiny_model_dir, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps({"turns": [p]}) for p in ["def add(", "The fox"]))
    assert main(["train-heads", "--target", str(tiny_model_dir), "--corpus", str(corpus),
                 "--tokens", "500", "--max-new", "10", "--heads", "1", "--steps", "1",
                 "--held-out", "0.5", "--out", str(tmp_path / "heads")]) == 0
    err = capsys.readouterr().err
    assert "the corpus ran out: its 2 prompts gave" in err and "--samples 3" in err


def test_the_standard_library_makes_code_and_prose_prompts(tmp_path):
    lib = tmp_path / "lib"
    (lib / "test").mkdir(parents=True)
    body = "\n".join(f"    x{i} = {i}" for i in range(5))
    for n in range(12):
        (lib / f"mod{n}.py").write_text(
            f'"""{"Module documentation that reads as prose. " * 8}"""\n\n'
            f"def public{n}(a):\n{body}\n    return a\n\n"
            f"def _private{n}(a):\n{body}\n    return a\n")
    (lib / "test" / "test_x.py").write_text("def test_skipped(a):\n" + body + "\n")
    prompts = stdlib_prompts(8, seed=1, root=lib)
    assert len(prompts) == 8 and prompts == stdlib_prompts(8, seed=1, root=lib)
    assert sum("```python" in p for p in prompts) == 6  # a quarter prose
    assert not any("_private" in p or "test_skipped" in p for p in prompts)
    assert stdlib_prompts(8, seed=1, root=tmp_path / "nowhere") == []
    assert len(stdlib_prompts(300)) == 300  # this Python's own library: plenty


def test_a_functions_source_is_what_ast_reads_from_the_whole_text():
    import ast

    from specviz.engines.training.stdlib_prompts import _LINE, source_segment

    text = ("def é(a):\r\n    return 'ü' + a\r\n\f\ndef one(): return 1\r"
            "class K:\n    def m(self, x='λ'):  # ✓\n        return [x,\n                x]\n"
            "async def last(b):\n    return await b")
    tree = ast.parse(text)
    lines = _LINE.findall(text)
    nodes = [n for n in ast.walk(tree) if getattr(n, "end_lineno", None) is not None]
    assert len(nodes) > 20
    for node in nodes:
        assert source_segment(lines, node) == ast.get_source_segment(text, node)
