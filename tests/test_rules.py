"""Heuristic rules on code snippets, text-to-token alignment, and the rules oracle."""

from __future__ import annotations

import pytest

from specviz.engines import events as ev
from specviz.engines.loop.session import RunSettings, Session
from specviz.engines.oracles import make_oracle
from specviz.engines.oracles.text_rules import (
    close_brackets,
    guess,
    guess_language,
    idiom,
    indent,
    indent_unit,
    repeat_line,
)

CODE = "def area(width, height):\n    total = width * height\n    return total\n"


def test_language_is_guessed_from_markers():
    assert guess_language(CODE) == "python"
    assert guess_language("int main() {\n  return 0;\n}\n") == "c-like"
    assert guess_language("Dear Sam, thanks for the tea.") == "text"


def test_repeat_line_finishes_a_line_like_the_latest_earlier_one():
    text = CODE + "def volume(width, height, depth):\n    total = wid"
    assert repeat_line(text, "python") == "th * height\n"
    assert repeat_line(text + "th * depth", "python") is None  # no earlier line goes on so
    assert repeat_line(CODE + "    to", "python") is None  # too short to trust


def test_indent_repeats_deepens_and_dedents():
    assert indent("if x:\n    y = 1\n", "python") == "    "
    assert indent("    for i in a:\n", "python") == "        "
    assert indent("def f():\n    return 1\n", "python") is None  # back to column 0
    assert indent("int f() {\n", "c-like") == "    "
    assert indent("x = 1", "python") is None  # not after a newline
    assert indent_unit("a:\n  b\n  c:\n    d\n") == "  "
    assert indent_unit("a:\n\tb\n") == "\t"


def test_close_brackets_after_a_closed_inner_expression():
    assert close_brackets("    print(len(items)", "python") == ")\n"
    assert close_brackets("    if ok(check(x)", "python") == "):\n"
    assert close_brackets("x = f(a, [1, 2]", "c-like") == ")"
    assert close_brackets("    print(len(items", "python") is None  # inside an argument
    assert close_brackets("    print(len(items))", "python") is None  # nothing left open
    assert close_brackets('    s = f("a)b"', "python") == ")\n"  # brackets in strings ignored
    assert close_brackets('    s = f("ab', "python") is None


def test_idioms_of_the_prompt_language():
    assert idiom("if __name__", "python") == ' == "__main__":\n'
    assert idiom("class A:\n    def run(", "python") == "self"
    assert idiom("def run(", "python") is None  # a function, not a method
    assert idiom("import numpy", "python") == " as np\n"
    assert idiom("Here it is:\n```", "python") == "python\n"
    assert idiom("} else", "c-like") == " {\n"
    assert idiom("if __name__", "c-like") is None


def test_rules_chain_and_name_their_pieces():
    g = guess(CODE + "def area(wid", "python")
    assert g.pieces == (("repeat-line", "th, height):\n"), ("indent", "    "))
    g = guess("    if ok(check(x)", "python")
    assert [name for name, _ in g.pieces] == ["close-brackets", "indent"]
    assert g.text == "):\n        "


# ---------------------------------------------------------------- the oracle


def run(backend, oracle, prompt, k=6, n=40):
    session = Session(backend, oracle, RunSettings(prompt, chat=False, k=k, max_tokens=n))
    steps = [e for e in session if isinstance(e, ev.StepEvent)]
    return steps, session.summary


def test_rules_oracle_is_lossless_and_labels_tokens(tiny_backend):
    prompt = "for i in range(10):\n    print(i * i)\nfor i in range(10):\n    pri"
    _, plain = run(tiny_backend, make_oracle("none"), prompt, k=0)
    oracle = make_oracle("rules", target=tiny_backend)
    steps, summary = run(tiny_backend, oracle, prompt)
    assert summary.text == plain.text
    first = steps[0].proposed
    assert first and {t.detail for t in first} == {"repeat-line"}
    assert all(t.source == "rule" for t in first)
    assert tiny_backend.detokenize([t.id for t in first]) in "nt(i * i)\n"


def test_rules_oracle_needs_the_target():
    from specviz.engines.errors import SpecvizError

    with pytest.raises(SpecvizError, match="tokenizer"):
        make_oracle("rules")


@pytest.mark.model
def test_rules_on_smollm2_are_lossless_and_hit(smol_llama):
    prompt = ("Add type hints to this Python function. Keep the body exactly as it is.\n\n"
              "def merge_counts(left, right):\n    merged = dict(left)\n"
              "    for key, value in right.items():\n"
              "        merged[key] = merged.get(key, 0) + value\n    return merged\n")
    settings = {"chat": True, "max_tokens": 32}
    plain = Session(smol_llama, make_oracle("none"), RunSettings(prompt, k=0, **settings))
    plain_text = plain.run_to_end().text
    session = Session(smol_llama, make_oracle("rules", target=smol_llama),
                      RunSettings(prompt, k=8, **settings))
    steps = [e for e in session if isinstance(e, ev.StepEvent)]
    assert session.summary.text == plain_text
    accepted = [t.detail for s in steps for t in s.accepted]
    assert "repeat-line" in accepted  # the signature line is copied from the prompt
