"""Follow one run spec through the code: which modules it enters and which calls climb back up.

A three-lane run (plain decoding, prompt lookup, a draft model) of smollm2-135m on llama.cpp is
built and stepped a few tokens by the engine process's own `Engine.run`, in this process, with
a profiler hook that records every call from one specviz module into another. Each module
gets a floor from the import graph (a module stands above everything it imports, lazily or
not); a call into a module on a higher floor than its caller's is a climb back up (a
callback, or a layer reaching above itself). Counted once per (caller, callee) module pair,
so the numbers describe the structure, not the length of the run.

    python benchmarks/run_trace.py            # prints the figures, --edges lists the climbs

Before the rooms of #41: check out 6b41a6a and run this file with that tree first on
PYTHONPATH (a folder holding it as `specviz`).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import io
import sys
from pathlib import Path


def package_root() -> Path:
    """The tree of the specviz that is imported (the one traced)."""
    return Path(importlib.import_module("specviz").__file__).resolve().parent


def module_files(root: Path | None = None) -> dict[str, Path]:
    root, files = root or package_root(), {}
    for folder in ("app", "engines", "widgets"):
        for path in (root / folder).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            files[".".join(("specviz", *parts))] = path
    return files


def imported_from(node: ast.ImportFrom, package: str) -> str:
    """The absolute module a `from ... import` reads, for a module in `package`."""
    base = node.module or ""
    if node.level:
        parts = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*parts, *([base] if base else [])])
    return base


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = imported_from(node, package)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in known else base)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in known and m != name}


def floors(root: Path | None = None) -> dict[str, int]:
    """1 + the highest floor among what a module imports; a cycle shares one floor."""
    files = module_files(root)
    graph = {name: imports_of(name, path, set(files)) for name, path in files.items()}
    floor: dict[str, int] = {}

    def visit(name: str, trail: tuple[str, ...]) -> int:
        if name in floor:
            return floor[name]
        if name in trail:
            return 0
        floor[name] = 1 + max((visit(m, (*trail, name)) for m in graph[name]), default=0)
        return floor[name]

    for name in graph:
        visit(name, ())
    return floor


def _first_of(*names: str) -> str:
    """The first of these modules that exists (the layout before #41 had other places)."""
    for name in names:
        try:
            importlib.import_module(name)
            return name
        except ModuleNotFoundError:
            continue
    raise SystemExit(f"none of {', '.join(names)} found")


def engine_class():
    return importlib.import_module(_first_of("specviz.engines.host.engine_process",
                                             "specviz.engines.engine_process")).Engine


def run_spec_module():
    return importlib.import_module(_first_of("specviz.engines.host.run_spec",
                                             "specviz.engines.run_spec"))


def traced_run(target: str, tokens: int) -> set[tuple[str, str]]:
    rs = run_spec_module()
    spec = rs.RunSpec(
        rs.RunRequest("Repeat after me: the cat sat on the mat. The cat sat on the mat.",
                      rs.ModelChoice(target, "llama", "cpu", 2), max_tokens=tokens),
        {"plain": rs.LaneSpec("none"), "lookup": rs.LaneSpec("prompt-lookup", 4),
         "draft": rs.LaneSpec("draft", 3, inputs={"draft": target})})
    engine = engine_class()(io.BytesIO())
    edges: set[tuple[str, str]] = set()

    def hook(frame, event, _arg):
        if event != "call":
            return
        callee = frame.f_globals.get("__name__", "")
        caller_frame = frame.f_back
        caller = caller_frame.f_globals.get("__name__", "") if caller_frame else ""
        if callee.startswith("specviz.") and caller.startswith("specviz.") and callee != caller:
            edges.add((caller, callee))

    sys.setprofile(hook)
    try:
        engine.run(spec)
    finally:
        sys.setprofile(None)
        engine.pool.close()
    return edges


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default="smollm2-135m")
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--edges", action="store_true", help="list the calls that climb up")
    args = parser.parse_args()
    target = str(importlib.import_module("specviz.engines.models").resolve(args.target))
    edges = traced_run(target, args.tokens)
    floor = floors()
    modules = {m for edge in edges for m in edge}
    up = sorted((a, b) for a, b in edges if floor.get(b, 0) > floor.get(a, 0))
    print(f"modules entered: {len(modules)}")
    print(f"module-to-module call paths: {len(edges)}")
    print(f"climbs back up (callee on a higher floor than its caller): {len(up)}")
    if args.edges:
        for a, b in up:
            print(f"  {a} ({floor.get(a)}) -> {b} ({floor.get(b)})")


if __name__ == "__main__":
    main()
