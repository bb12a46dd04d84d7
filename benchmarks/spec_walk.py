"""Follow one run spec through the code as written: the functions it stays in, the modules they
live in, and the calls that climb back up the layers. The numbers of docs/architecture.md's
walk table, printed from the code so that the table cannot drift from it
(tests/test_architecture_numbers.py compares them).

The walk starts at `Engine.run(spec)` and reads source only, nothing is run. In a function, a
name holds the spec if it is a parameter given the spec (or a part of it) or is assigned from
a part of such a name (`for lane in spec.lanes.values()`, `lane.inputs.get("draft")`); what a
call makes of it is a new value. A call that passes the spec or a part of it on is followed
where reading can resolve it: a function or class of the same module, an imported one
(`build_lane(...)`, `registry.make_oracle(...)`), or a method of the same class
(`self._build(...)`); a call through an object whose type the code does not show
(`lane.steps()`) is not. A climb is a call into a module on a higher floor than its
caller's, floors read from the imports as benchmarks/run_trace.py reads them.

    python benchmarks/spec_walk.py              # the three numbers
    python benchmarks/spec_walk.py --tree DIR   # of another tree, e.g. `git archive 6b41a6a`
    python benchmarks/spec_walk.py --functions  # every function the spec stays in
"""

from __future__ import annotations

import argparse
import ast
from dataclasses import dataclass, field
from pathlib import Path

from run_trace import floors, imported_from, module_files  # a script beside this one

# Where the engine process's run lives (before the rooms of #41 it sat in engines/ itself).
STARTS = ("specviz.engines.host.engine_process", "specviz.engines.engine_process")


@dataclass
class Module:
    """One module as read: its functions by qualified name, its classes' names and what each
    name it imports stands for (a module, or a name in a module)."""

    name: str
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    classes: set[str] = field(default_factory=set)
    imported: dict[str, tuple[str, str | None]] = field(default_factory=dict)


@dataclass(frozen=True)
class Walk:
    stays: frozenset[tuple[str, str]]  # (module, function)
    calls: frozenset[tuple[str, str]]  # (caller module, callee module), modules apart

    @property
    def modules(self) -> set[str]:
        return {module for module, _ in self.stays}


def read_modules(files: dict[str, Path]) -> dict[str, Module]:
    return {name: read_module(name, path, set(files)) for name, path in files.items()}


def read_module(name: str, path: Path, known: set[str]) -> Module:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    module = Module(name)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            _read_import(module, node, package, known)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                module.imported[alias.asname or alias.name] = (alias.name, None)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            module.functions[node.name] = node
        elif isinstance(node, ast.ClassDef):
            module.classes.add(node.name)
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    module.functions[f"{node.name}.{item.name}"] = item
    return module


def _read_import(module: Module, node: ast.ImportFrom, package: str, known: set[str]) -> None:
    base = imported_from(node, package)
    for alias in node.names:
        full = f"{base}.{alias.name}"
        local = alias.asname or alias.name
        module.imported[local] = (full, None) if full in known else (base, alias.name)


def walk(modules: dict[str, Module]) -> Walk:
    start = next(name for name in STARTS if name in modules)
    stays: set[tuple[str, str]] = set()
    calls: set[tuple[str, str]] = set()
    todo = [(start, "Engine.run", frozenset({"spec"}))]
    seen: set[tuple[str, str, frozenset[str]]] = set()
    while todo:
        where, qualname, given = todo.pop()
        if (where, qualname, given) in seen:
            continue
        seen.add((where, qualname, given))
        stays.add((where, qualname))
        for callee, params in passed_on(modules, where, qualname, given):
            if callee[0] != where:
                calls.add((where, callee[0]))
            todo.append((*callee, params))
    return Walk(frozenset(stays), frozenset(calls))


def passed_on(modules: dict[str, Module], where: str, qualname: str, given: frozenset[str]):
    """(callee, its parameters that receive the spec) for each resolvable call of `qualname`
    that passes on a name holding the spec."""
    function = modules[where].functions[qualname]
    holding = holders(function, given)
    for call in (n for n in ast.walk(function) if isinstance(n, ast.Call)):
        callee = resolve(modules, where, qualname, call.func)
        if callee is None:
            continue
        params = receiving(modules[callee[0]].functions[callee[1]], call, holding)
        if params:
            yield callee, frozenset(params)


def holders(function: ast.AST, given: frozenset[str]) -> set[str]:
    """The names that hold the spec or a part of it, grown until nothing more is assigned."""
    holding = set(given)
    grew = True
    while grew:
        grew = False
        for targets, value in _assignments(function):
            if _reads(value, holding):
                new = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
                grew |= not new <= holding
                holding |= new
    return holding


def _assignments(function: ast.AST):
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            yield node.targets, node.value
        elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            yield [node.target], node.value
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            yield [node.target], node.iter


# Calls that hand back a part of what they are called on, not a new value made from it.
PARTS = ("items", "values", "keys", "get")


def _reads(expr: ast.AST, names: set[str]) -> bool:
    """Whether `expr` is the spec or a part of it: a name holding it, an attribute, item or
    entry of one, or one of those given a default (`lane.inputs.get(n) or ""`). What a call
    makes of the spec is a new value, no longer the spec."""
    if isinstance(expr, ast.Name):
        return expr.id in names
    if isinstance(expr, (ast.Attribute, ast.Subscript, ast.Starred)):
        return _reads(expr.value, names)
    if isinstance(expr, ast.BoolOp):
        return any(_reads(value, names) for value in expr.values)
    if isinstance(expr, ast.IfExp):
        return _reads(expr.body, names) or _reads(expr.orelse, names)
    func = expr.func if isinstance(expr, ast.Call) else None
    return isinstance(func, ast.Attribute) and func.attr in PARTS and _reads(func.value, names)


def resolve(modules: dict[str, Module], where: str, qualname: str,
            func: ast.expr) -> tuple[str, str] | None:
    """The (module, qualified name) a call's target is, where reading can tell."""
    module = modules[where]
    if isinstance(func, ast.Name):
        return _named(modules, where, func.id)
    if not isinstance(func, ast.Attribute) or not isinstance(func.value, ast.Name):
        return None
    owner = func.value.id
    if owner == "self" and "." in qualname:
        method = f"{qualname.split('.')[0]}.{func.attr}"
        return (where, method) if method in module.functions else None
    target = module.imported.get(owner)
    if target is not None and target[1] is None and target[0] in modules:
        return _named(modules, target[0], func.attr)
    return None


def _named(modules: dict[str, Module], where: str, name: str,
           hops: int = 0) -> tuple[str, str] | None:
    """A name as module `where` sees it: its function, its class's constructor, or what it
    imports under that name (followed through a package's re-exports)."""
    module = modules[where]
    if name in module.functions:
        return where, name
    if name in module.classes:
        init = f"{name}.__init__"
        return (where, init) if init in module.functions else None
    origin = module.imported.get(name)
    if origin is None or origin[1] is None or origin[0] not in modules or hops > 8:
        return None
    return _named(modules, origin[0], origin[1], hops + 1)


def receiving(function: ast.FunctionDef | ast.AsyncFunctionDef, call: ast.Call,
              holding: set[str]) -> set[str]:
    """The callee's parameters that a call gives a name holding the spec."""
    args = function.args
    positional = [a.arg for a in (*args.posonlyargs, *args.args)]
    if positional and positional[0] in ("self", "cls"):
        positional = positional[1:]
    named = set(positional) | {a.arg for a in args.kwonlyargs}
    params = {positional[i] for i, arg in enumerate(call.args)
              if i < len(positional) and _reads(arg, holding)}
    params |= {kw.arg for kw in call.keywords
               if kw.arg in named and _reads(kw.value, holding)}
    return params


def numbers(root: Path | None = None) -> dict[str, int]:
    """The walk table's three numbers for the tree at `root` (default: the imported one)."""
    files = module_files(root)
    found = walk(read_modules(files))
    floor = floors(root)
    climbs = {(a, b) for a, b in found.calls if floor.get(b, 0) > floor.get(a, 0)}
    return {"stays": len(found.stays), "modules": len(found.modules), "climbs": len(climbs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", type=Path, help="the specviz tree to read (default: imported)")
    parser.add_argument("--functions", action="store_true", help="list the functions too")
    args = parser.parse_args()
    for name, value in numbers(args.tree).items():
        print(f"{name}: {value}")
    if args.functions:
        for module, function in sorted(walk(read_modules(module_files(args.tree))).stays):
            print(f"  {module}.{function}")


if __name__ == "__main__":
    main()
