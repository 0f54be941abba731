"""The engine's packages only import downwards (docs/architecture.md), and only storage/ sends SQL to DuckDB."""
from __future__ import annotations

import ast
from pathlib import Path

ENGINE = Path(__file__).parent.parent / "engine"
# Each package may import the packages after it in its row, and every package of the base row;
# the base packages import only those after them. The parser imports nothing from the engine.
UPPER = ["api", "session", "statements", "ingest", "pipeline", "execution", "optimizer", "autodiff", "planner", "plan"]
BASE = ["catalog", "storage", "kernels", "config", "errors"]
TOP_LEVEL = {"__init__": UPPER + BASE, "__main__": UPPER + BASE}
# Upward imports not yet removed (module, package it imports): the list may only shrink.
KNOWN_UPWARD: set = set()


def _package(path: Path) -> str:
    parts = path.relative_to(ENGINE).with_suffix("").parts
    return parts[0]


def _imported_packages(path: Path) -> set[tuple[str, int]]:
    """(engine package, line) of every `trdb.X` import in the module, at any depth (function-level too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "trdb" and len(parts) > 1 and parts[1] != "parser":
                found.add((parts[1], node.lineno))
    return found


def _allowed(package: str) -> set[str]:
    if package in TOP_LEVEL:
        return set(TOP_LEVEL[package])
    if package in UPPER:
        return set(UPPER[UPPER.index(package) + 1:]) | set(BASE)
    return set(BASE[BASE.index(package) + 1:])


def test_every_package_is_in_a_layer():
    packages = {_package(p) for p in ENGINE.rglob("*.py")}
    assert packages <= set(UPPER) | set(BASE) | set(TOP_LEVEL), packages - set(UPPER) - set(BASE)


def test_no_package_imports_upwards():
    upward = []
    for path in sorted(ENGINE.rglob("*.py")):
        package = _package(path)
        for target, line in sorted(_imported_packages(path)):
            known = (str(path.relative_to(ENGINE)), target) in KNOWN_UPWARD
            if target != package and target not in _allowed(package) and not known:
                upward.append(f"{path.relative_to(ENGINE)}:{line} ({package}) imports trdb.{target}")
    assert not upward, "imports that point up a layer:\n" + "\n".join(upward)


def test_the_parser_imports_nothing_from_the_engine():
    parser = ENGINE.parent / "parser"
    for path in parser.rglob("*.py"):
        assert not [t for t, _ in _imported_packages(path)], path


_DATABASE_CALLS = {"execute", "execute_with_description", "arrow", "register_and_run", "run_over_arrow"}


def _database_calls(path: Path) -> list[tuple[int, str]]:
    """Calls of the storage Database's methods (`<...>.db.execute(...)` and the like) in a module."""
    calls = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _DATABASE_CALLS:
            receiver = ast.unparse(node.func.value)
            if receiver == "db" or receiver.endswith(".db"):
                calls.append((node.lineno, ast.unparse(node)[:90]))
    return calls


def test_only_storage_sends_sql_to_duckdb():
    """The Database is reached through storage/'s functions, named for what they do; no other
    package hands it SQL text."""
    found = [f"{path.relative_to(ENGINE)}:{line}: {call}" for path in sorted(ENGINE.rglob("*.py"))
             if _package(path) != "storage" for line, call in _database_calls(path)]
    assert not found, "SQL sent to DuckDB from outside storage/:\n" + "\n".join(found)


def test_the_known_exceptions_still_exist():
    """Each entry of KNOWN_UPWARD is removed as soon as its module is fixed."""
    upward = {(str(p.relative_to(ENGINE)), t) for p in ENGINE.rglob("*.py") for t, _ in _imported_packages(p)}
    assert KNOWN_UPWARD <= upward, KNOWN_UPWARD - upward


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ENGINE).with_suffix("").parts)
    return ".".join(["trdb", *(parts[:-1] if parts[-1] == "__init__" else parts)])


MODULES = {_module_name(p): p for p in ENGINE.rglob("*.py")}


def _runtime_imports(path: Path) -> set[str]:
    """The engine modules a module imports when it runs (function-level too; `if TYPE_CHECKING:` left out: it
    never runs). `from trdb.x import y` names module trdb.x.y where there is one, else trdb.x."""
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and ast.unparse(block.test) == "TYPE_CHECKING" for node in ast.walk(block)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module
                      for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return {name for name in found if name.split(".")[0] == "trdb" and not name.startswith("trdb.parser")}


def _import_graph() -> dict[str, set[str]]:
    graph = {}
    for name, path in MODULES.items():
        targets = set()
        for imported in _runtime_imports(path):
            while imported not in MODULES and "." in imported:  # trdb.x.y.Name: the module trdb.x.y
                imported = imported.rsplit(".", 1)[0]
            if imported in MODULES and imported != name:
                targets.add(imported)
        graph[name] = targets
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]; counter[0] += 1; stack.append(start); on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]; counter[0] += 1; stack.append(child); on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop(); on_stack.discard(member); component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circle_between_modules():
    """Inside a package too: a module never needs, through any chain of imports, a module that needs it."""
    cycles = _cycles(_import_graph())
    assert not cycles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_nothing_imports_the_package_root():
    """trdb/__init__.py is the users' entry point; engine code imports the module it needs, never the root."""
    importers = sorted(name for name, targets in _import_graph().items() if "trdb" in targets)
    assert not importers, importers


def test_execution_imports_nothing_from_the_optimizer():
    """The plan it runs is data in plan/; execution never reaches into the stage that made it."""
    found = [f"{path.relative_to(ENGINE)}:{line}" for path in sorted((ENGINE / "execution").rglob("*.py"))
             for target, line in _imported_packages(path) if target == "optimizer"]
    assert not found, found
