"""The rooms of docs/architecture.md, held to the code beside pyproject.toml's import-linter
contracts (the layers, no Qt below widgets/, no circle of rooms; `lint-imports`, run by CI):
those contracts name every code package, and no module outside engines/oracles/ compares an
oracle's name, nor does a benchmark (the registry is the one list of oracles)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

PACKAGE = Path(__file__).parents[1]
ROOTS = ("app", "board", "engines", "widgets", "benchmarks")


def contracts() -> list[dict]:
    with open(PACKAGE / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["importlinter"]["contracts"]


def code_packages() -> set[str]:
    """The repository's folders that are packages of specviz (pyproject's packages list)."""
    with open(PACKAGE / "pyproject.toml", "rb") as f:
        listed = tomllib.load(f)["tool"]["setuptools"]["packages"]
    return {name for name in listed if name.count(".") == 1}


def test_the_layers_name_every_code_package():
    layers = next(c for c in contracts() if c["type"] == "layers")["layers"]
    assert set(layers) == code_packages()
    circles = next(c for c in contracts() if c["type"] == "acyclic_siblings")["ancestors"]
    assert set(circles) == code_packages()
    below_widgets = layers[layers.index("specviz.widgets") + 1:]
    no_qt = next(c for c in contracts() if c["type"] == "forbidden")
    assert set(no_qt["source_modules"]) == set(below_widgets)
    assert {"PySide6", "pyqtgraph", "qasync", "superqt"} <= set(no_qt["forbidden_modules"])


def modules() -> dict[str, Path]:
    """Every module of the code packages and the benchmarks by its path's dotted name."""
    found = {}
    for root in ROOTS:
        for path in (PACKAGE / root).rglob("*.py"):
            found[".".join(path.relative_to(PACKAGE).with_suffix("").parts)] = path
    return found


# Where an oracle's name may be compared besides the registry's own package: training (and
# the benchmark comparing what it trains) and llama.cpp's speculation name heads kinds and
# llama.cpp's draft types, which share words with oracles but are not oracles.
NAMES_MAY_BE_COMPARED = ("engines/oracles/", "engines/training/", "app/cli/cmd_train_heads.py",
                         "benchmarks/heads_compare.py", "engines/servers/llama_speculation.py")


def compared_names(text: str, where: str, names: set[str]) -> list[str]:
    """The oracle names a module's text compares something with (==, !=, in, not in)."""
    hits = []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.Compare):
            continue
        for side in (node.left, *node.comparators):
            items = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
            hits += [f"{where}:{node.lineno} {c.value!r}" for c in items
                     if isinstance(c, ast.Constant) and c.value in names]
    return hits


def test_no_module_outside_the_registry_compares_an_oracles_name():
    from specviz.engines.oracles import ORACLE_INFO
    from specviz.engines.oracles.registry import PLAIN

    names = set(ORACLE_INFO) - {PLAIN}  # plain decoding is asked with is_plain
    hits = []
    for path in modules().values():
        where = path.relative_to(PACKAGE).as_posix()
        if not where.startswith(NAMES_MAY_BE_COMPARED):
            hits += compared_names(path.read_text(encoding="utf-8"), where, names)
    assert not hits, "declare it in the oracle's registry entry instead: " + "; ".join(hits)


def test_a_compared_name_is_found():
    text = "if lane.oracle in ('draft', 'tree') or name == 'ngram' or k == 4:\n    pass\n"
    assert compared_names(text, "x.py", {"draft", "tree", "ngram"}) == [
        "x.py:1 'draft'", "x.py:1 'tree'", "x.py:1 'ngram'"]
