"""The rooms of docs/architecture.md, held to the code: no folder imports one that imports it
back, nor one that leads back to it through others (read from every import, those inside
functions too), and no module outside engines/oracles/ compares an oracle's name (the
registry is the one list of oracles)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).parents[1]
ROOTS = ("app", "engines", "widgets")


def modules() -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its folder's)."""
    found = {}
    for root in ROOTS:
        for path in (PACKAGE / root).rglob("*.py"):
            parts = path.relative_to(PACKAGE).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that module `name` imports, wherever in it."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            elif (node.module or "").startswith("specviz."):
                module = node.module.removeprefix("specviz.")
            else:
                continue
            for alias in node.names:  # `from . import x` imports the module x
                out.add(f"{module}.{alias.name}" if f"{module}.{alias.name}" in known
                        else module)
        elif isinstance(node, ast.Import):
            out |= {a.name.removeprefix("specviz.") for a in node.names
                    if a.name.startswith("specviz.")}
    return {m for m in out if m in known and m != name}


def room(name: str) -> str:
    """A module's room: its folder (engines.host, app.cli); a module directly in engines/,
    app/ or widgets/ is one of its own (the spine's modules are shared by every room)."""
    parts = name.split(".")
    return ".".join(parts[:2])


def room_imports() -> dict[str, dict[str, set[str]]]:
    """Room -> the rooms it imports -> the modules that import them (for the message)."""
    known = modules()
    edges: dict[str, dict[str, set[str]]] = {}
    for name, path in known.items():
        for other in imported(name, path, known):
            if room(other) != room(name):
                edges.setdefault(room(name), {}).setdefault(room(other), set()).add(name)
    return edges


def circles(edges: dict[str, dict[str, set[str]]]) -> list[list[str]]:
    """Every strongly connected group of more than one room (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in edges.get(node, {}):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_no_room_imports_one_that_imports_it_back():
    edges = room_imports()
    back = [f"{a} -> {b} ({', '.join(sorted(edges[a][b]))}) and back "
            f"({', '.join(sorted(edges[b][a]))})"
            for a in sorted(edges) for b in sorted(edges[a]) if a < b and a in edges.get(b, {})]
    assert not back, "rooms that import each other: " + "; ".join(back)


def test_no_circle_of_rooms():
    edges = room_imports()
    said = ["; ".join(f"{a} -> {b} ({', '.join(sorted(edges[a][b]))})"
                      for a in group for b in group if b in edges.get(a, {}))
            for group in circles(edges)]
    assert not said, "rooms in a circle: " + " | ".join(said)


def test_the_walk_finds_a_circle_where_there_is_one():
    edges = {"engines.a": {"engines.b": {"engines.a.x"}},
             "engines.b": {"engines.c": {"engines.b.y"}},
             "engines.c": {"engines.a": {"engines.c.z"}, "engines.d": {"engines.c.z"}}}
    assert circles(edges) == [["engines.a", "engines.b", "engines.c"]]
    del edges["engines.c"]["engines.a"]
    assert circles(edges) == []


def test_imports_inside_functions_and_from_a_package_are_read(tmp_path):
    known = {"engines.host.x": tmp_path / "x.py", "engines.oracles": tmp_path / "o.py",
             "engines.oracles.registry": tmp_path / "r.py", "engines.cost.auto_k": tmp_path}
    source = known["engines.host.x"]
    source.write_text("from ..oracles import registry, info\n"
                      "def f():\n    from ..cost.auto_k import AutoK\n")
    assert imported("engines.host.x", source, known) == {
        "engines.oracles.registry", "engines.oracles", "engines.cost.auto_k"}


# Where an oracle's name may be compared besides the registry's own package: training and
# llama.cpp's speculation name heads kinds and llama.cpp's draft types, which share words
# with oracles but are not oracles.
NAMES_MAY_BE_COMPARED = ("engines/oracles/", "engines/training/", "app/cli/cmd_train_heads.py",
                         "engines/servers/llama_speculation.py")


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
