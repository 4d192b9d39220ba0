"""The package's folders are its architecture: imports point one way through the layers, and
the top level holds packages, not modules."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "fsdpsim"

#: Lower layers first; a module may import its own layer and the layers before it. The three
#: specifications (model, hardware, plan) read one another; the scalar reference model reads
#: them and nothing above them (tests/test_reference.py keeps it off costs as well).
LAYERS = ["util", "costs", "model", "hardware", "plan", "reference", "engine", "drivers",
          "measured", "report", "cli"]
SPECS = {"model", "hardware", "plan"}
#: A module is a topic a reader takes in at once: at most this many lines.
MAX_MODULE_LINES = 500
#: Modules still over :data:`MAX_MODULE_LINES` while they are being split, each with its size
#: as a ceiling: it may shrink, not grow. An entry goes once its module is within the limit.
OVER_LIMIT: dict[str, int] = {}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "fsdpsim" else None


def _imports(path: Path) -> list[tuple[str, int]]:
    """Every fsdpsim module ``path`` imports, at module level or inside a function."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fsdpsim"):
            names = ([node.module] if node.module != "fsdpsim"
                     else [f"fsdpsim.{a.name}" for a in node.names])
            out += [(n, node.lineno) for n in names]
        elif isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name.startswith("fsdpsim")]
    return out


def upward_imports(root: Path = PACKAGE) -> list[str]:
    rank = {name: i for i, name in enumerate(LAYERS)}
    bad = []
    for path in sorted(root.rglob("*.py")):
        me = path.relative_to(root).parts[0]
        if me not in rank:
            continue
        for module, line in _imports(path):
            other = _layer(module)
            if other in rank and rank[other] > rank[me] and not {me, other} <= SPECS:
                bad.append(f"{path.relative_to(root.parent)}:{line} ({me}) imports {module}")
    return bad


def test_every_layer_is_a_folder_and_nothing_else_sits_beside_them():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert set(LAYERS) <= folders
    modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(modules) <= 12, modules


def test_imports_point_down_the_layers():
    assert upward_imports() == []


def test_the_check_finds_an_upward_import(tmp_path):
    """The checker itself: a costs module that imports the CLI is reported."""
    (tmp_path / "costs").mkdir()
    (tmp_path / "costs" / "bad.py").write_text("def f():\n    from fsdpsim.cli import main\n")
    assert upward_imports(tmp_path) == [f"{tmp_path.name}/costs/bad.py:2 (costs) imports fsdpsim.cli"]


def _module_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the fsdpsim modules it imports, at module level or inside a function (not
    under ``if TYPE_CHECKING:``, which never runs)."""
    names = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        tree = ast.parse(path.read_text())
        skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                and getattr(node.test, "id", None) == "TYPE_CHECKING"
                for stmt in node.body for n in ast.walk(stmt)}
        out = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.ImportFrom) and node.module and node.module in names:
                out.update(f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in names
                           else node.module for a in node.names)
            elif isinstance(node, ast.Import):
                out.update(a.name for a in node.names if a.name in names)
        graph[name] = out - {name}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import one another, directly or through others (strongly
    connected components of more than one module, Tarjan's algorithm)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_module_imports_itself_through_others():
    """No import cycle, counting imports inside functions (an order hidden in a function is
    still an order)."""
    assert import_cycles(_module_graph()) == []


def test_the_cycle_check_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_cycles(graph) == [["a", "b", "c"]]
def module_lines(root: Path = PACKAGE) -> dict[str, int]:
    """Lines of every module of the package, by path relative to it."""
    return {path.relative_to(root).as_posix(): len(path.read_text().splitlines())
            for path in sorted(root.rglob("*.py"))}


def over_limit(lines: dict[str, int], allowed: dict[str, int], limit: int,
               list_name: str) -> list[str]:
    """The entries of ``lines`` over ``limit`` (or their ceiling in ``allowed``), and the
    entries of ``allowed`` within ``limit`` now (or gone), to be removed from ``list_name``."""
    over = [f"{name}: {n} lines > {allowed.get(name, limit)}"
            for name, n in lines.items() if n > allowed.get(name, limit)]
    stale = [f"{name}: {lines.get(name, 0)} lines, within {limit}: remove it from {list_name}"
             for name in allowed if lines.get(name, 0) <= limit]
    return over + stale


def too_long(lines: dict[str, int], allowed: dict[str, int]) -> list[str]:
    """The modules over :data:`MAX_MODULE_LINES` (or their ceiling in ``allowed``), and the
    stale entries of ``allowed`` (:func:`over_limit`)."""
    return over_limit(lines, allowed, MAX_MODULE_LINES, "OVER_LIMIT")


def test_no_module_is_longer_than_500_lines():
    assert too_long(module_lines(), OVER_LIMIT) == []


def test_the_size_check_finds_a_long_module_and_a_stale_entry(tmp_path):
    (tmp_path / "long.py").write_text("x = 1\n" * 501)
    (tmp_path / "short.py").write_text("x = 1\n" * 500)
    lines = module_lines(tmp_path)
    assert lines == {"long.py": 501, "short.py": 500}
    assert too_long(lines, {}) == ["long.py: 501 lines > 500"]
    assert too_long(lines, {"long.py": 501}) == []
    assert too_long(lines, {"long.py": 501, "short.py": 510}) == [
        "short.py: 500 lines, within 500: remove it from OVER_LIMIT"]


#: A function is one step a reader takes in at once: at most this many lines, from its
#: ``def`` to its last line (its docstring included).
MAX_FUNCTION_LINES = 100
#: Functions still over :data:`MAX_FUNCTION_LINES` while they are being split, each with its
#: length as a ceiling: it may shrink, not grow. An entry goes once its function is within.
LONG_FUNCTIONS: dict[str, int] = {}


def function_lines(root: Path = PACKAGE) -> dict[str, int]:
    """Lines of every function and method of the package, nested ones included, by
    ``path:qualified name`` (``sweep/tables.py:_Tables.__init__``); the longest of a name
    defined twice."""
    out: dict[str, int] = {}

    def visit(node, path: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    key = f"{path}:{name}"
                    out[key] = max(out.get(key, 0), child.end_lineno - child.lineno + 1)
                visit(child, path, f"{name}.")
            else:
                visit(child, path, prefix)

    for path in sorted(root.rglob("*.py")):
        visit(ast.parse(path.read_text()), path.relative_to(root).as_posix(), "")
    return out


def too_long_functions(lines: dict[str, int], allowed: dict[str, int]) -> list[str]:
    """The functions over :data:`MAX_FUNCTION_LINES` (or their ceiling in ``allowed``), and
    the stale entries of ``allowed`` (:func:`over_limit`)."""
    return over_limit(lines, allowed, MAX_FUNCTION_LINES, "LONG_FUNCTIONS")


def test_no_function_is_longer_than_100_lines():
    assert too_long_functions(function_lines(), LONG_FUNCTIONS) == []


def test_the_function_check_finds_a_long_function_and_a_stale_entry(tmp_path):
    def body(indent: int, n: int) -> str:
        return f"{' ' * indent}x = 1\n" * n
    (tmp_path / "m.py").write_text(
        "def long():\n" + body(4, 100)
        + "class C:\n    def short(self):\n" + body(8, 99)
        + "    def method(self):\n        def inner():\n" + body(12, 100))
    lines = function_lines(tmp_path)
    assert lines == {"m.py:long": 101, "m.py:C.short": 100, "m.py:C.method": 102,
                     "m.py:C.method.inner": 101}
    assert too_long_functions(lines, {}) == ["m.py:long: 101 lines > 100",
                                             "m.py:C.method: 102 lines > 100",
                                             "m.py:C.method.inner: 101 lines > 100"]
    allowed = {"m.py:long": 101, "m.py:C.method": 102, "m.py:C.method.inner": 101}
    assert too_long_functions(lines, allowed) == []
    assert too_long_functions(lines, {**allowed, "m.py:long": 100}) == [
        "m.py:long: 101 lines > 100"]
    assert too_long_functions(lines, {**allowed, "m.py:C.short": 110, "m.py:gone": 120}) == [
        "m.py:C.short: 100 lines, within 100: remove it from LONG_FUNCTIONS",
        "m.py:gone: 0 lines, within 100: remove it from LONG_FUNCTIONS"]


#: A line of the package fits a side-by-side diff and a terminal: at most this many characters.
MAX_LINE_CHARACTERS = 100


def long_lines(root: Path = PACKAGE) -> list[str]:
    """``path:line (n characters)`` of every line of the package over
    :data:`MAX_LINE_CHARACTERS` characters (not bytes: ``·`` is one)."""
    return [f"{path.relative_to(root)}:{i} ({len(line)} characters)"
            for path in sorted(root.rglob("*.py"))
            for i, line in enumerate(path.read_text(encoding="utf-8").split("\n"), 1)
            if len(line) > MAX_LINE_CHARACTERS]


def test_no_line_is_longer_than_100_characters():
    assert long_lines() == []


def test_the_line_check_counts_characters_not_bytes(tmp_path):
    (tmp_path / "m.py").write_text("x = '" + "·" * 94 + "'\ny = '" + "a" * 95 + "'\n",
                                   encoding="utf-8")
    assert long_lines(tmp_path) == ["m.py:2 (101 characters)"]
