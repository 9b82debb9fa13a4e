"""Imports run downhill: core ← runtime ← faces, and no module takes part in an import cycle.

The package's own imports are read with `ast`, not by importing it: module-level imports and
imports inside functions count alike (both run). An import under `if TYPE_CHECKING:` never runs,
so it cannot make a cycle, but it still may not point to a higher layer.
docs/discussions/architecture.md explains the layers.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "scylla_django"
ROOT = Path(__file__).resolve().parents[2] / PACKAGE

# The allowed layer order, lowest first: a module may import its own layer and the ones below.
LAYERS: dict[str, tuple[str, ...]] = {
    "core": (
        "text",
        "durations",
        "enums",
        "exceptions",
        "conf",
        "routers",
        "logs",
        "validation",
        "db",
        "models",
        "retries",
        "queue_keys",
        "spec_versions",
        "tracing",
        "signals",
        "followups",
        "batches",
        "rates",
        "notify",
        "deliveries",
        "constraints",
        "events",
        "triggers",
        "schedules",
        "calendars",
        "firings",
        "checks",
        "migrations",
    ),
    "runtime": (
        "handlers",
        "durable",
        "pending_checkpoint",
        "lease_in_hand",
        "listener",
        "worker",
        "supervisor",
        "monitor",
        "health",
        "resources",
        "child",
        "capture",
        "eager",
    ),
    "faces": (
        "management",
        "api",
        "admin",
        "backends",
        "metrics",
        "apps",
        "testing",
        "pytest_plugin",
        "__init__",
    ),
}
ORDER = list(LAYERS)

# Edges left out of the cycle check, each with the reason. Delete an entry once the import it
# names is gone: nothing else depends on this list.
ALLOWED_CYCLE_EDGES: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, dotted
    target: str  # the imported module of the package, dotted
    line: int
    type_checking: bool


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_package(dotted: str) -> bool:
    return (ROOT.parent / dotted.replace(".", "/") / "__init__.py").exists()


def is_module(dotted: str) -> bool:
    return is_package(dotted) or (ROOT.parent / f"{dotted.replace('.', '/')}.py").exists()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(path: Path) -> list[Import]:
    """Every import of a module of the package in `path`, wherever it stands in the file."""
    source = module_name(path)
    package = source if path.name == "__init__.py" else source.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, type_checking: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, type_checking)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE:
                    found.append(Import(source, alias.name, node.lineno, type_checking))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                origin = ".".join([*base, *([node.module] if node.module else [])])
            else:
                origin = node.module or ""
            if origin.split(".")[0] == PACKAGE:
                for alias in node.names:
                    candidate = f"{origin}.{alias.name}"
                    target = candidate if is_module(candidate) else origin
                    found.append(Import(source, target, node.lineno, type_checking))
        for child in ast.iter_child_nodes(node):
            visit(child, type_checking)

    visit(ast.parse(path.read_text(), str(path)), False)
    return found


def layer_of(dotted: str) -> str:
    parts = dotted.split(".")
    top = parts[1] if len(parts) > 1 else "__init__"
    for layer, names in LAYERS.items():
        if top in names:
            return layer
    raise AssertionError(f"{dotted} is in no layer: add it to LAYERS in {__name__}")


def all_imports() -> list[Import]:
    return [imp for path in sorted(ROOT.rglob("*.py")) for imp in imports_of(path)]


def test_the_walk_sees_the_package():
    """The reader finds known imports of every kind, so that the tests below can fail."""
    edges = {(i.source, i.target, i.type_checking) for i in all_imports()}
    assert ("scylla_django.worker", "scylla_django.handlers", False) in edges
    assert ("scylla_django.handlers.context", "scylla_django.models", True) in edges
    assert ("scylla_django.admin.console", "scylla_django.admin.dashboard", False) in edges
    assert ("scylla_django.management.commands.scylla_worker", "scylla_django.backends", False) in (
        edges
    )


def test_every_module_has_a_layer():
    for path in ROOT.rglob("*.py"):
        layer_of(module_name(path))


def test_no_import_points_to_a_higher_layer():
    upward = [
        f"{i.source} ({layer_of(i.source)}) imports {i.target} ({layer_of(i.target)}), "
        f"line {i.line}{' under TYPE_CHECKING' if i.type_checking else ''}"
        for i in all_imports()
        if ORDER.index(layer_of(i.target)) > ORDER.index(layer_of(i.source))
    ]
    assert not upward, "Imports must run downhill (core ← runtime ← faces):\n" + "\n".join(upward)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as a path that ends where it starts, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle():
    graph: dict[str, set[str]] = {}
    for i in all_imports():
        if i.type_checking or (i.source, i.target) in ALLOWED_CYCLE_EDGES or i.source == i.target:
            continue
        graph.setdefault(i.source, set()).add(i.target)
    cycle = find_cycle(graph)
    assert cycle is None, "Import cycle: " + " → ".join(cycle or [])


def test_no_test_module_imports_another():
    """Shared test code lives in tests/helpers.py, factories.py or processes.py, never in a
    test module, so each test module can be read, run and moved on its own."""
    offenders = []
    for path in sorted((ROOT.parent / "tests").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            offenders += [
                f"{path.name}:{node.lineno} imports {name}"
                for name in names
                if name.startswith("tests.") and name.rsplit(".", 1)[-1].startswith("test_")
            ]
    assert not offenders, "Move shared test code to tests/helpers.py:\n  " + "\n  ".join(offenders)


# -- the database room ---------------------------------------------------------------------------

DB_ROOM = f"{PACKAGE}.db"

# What only the database room may do: write SQL, tell vendors apart, open a cursor.
SQL_START = re.compile(
    r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH|LISTEN|NOTIFY|BEGIN|EXPLAIN|ANALYZE|TRUNCATE|SET)\s"
)
ROOM_ONLY_CALLS = {"cursor", "execute", "executemany", "raw", "extra"}

# Lines outside the room that still do it, each with the reason: delete an entry once its
# line is gone (the test then fails if the line comes back).
ALLOWED_OUTSIDE_THE_ROOM: dict[tuple[str, str], str] = {}


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of `tree` (a string statement is documentation)."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }


def room_only_uses(path: Path) -> list[tuple[int, str]]:
    """Where `path` writes SQL, tests a vendor or opens a cursor: (line, what) pairs."""
    tree = ast.parse(path.read_text(), str(path))
    documentation = _docstrings(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "vendor":
            found.append((node.lineno, "a vendor test"))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ROOM_ONLY_CALLS
        ):
            found.append((node.lineno, f"a .{node.func.attr}() call"))
        elif (isinstance(node, ast.Name) and node.id == "RawSQL") or (
            isinstance(node, ast.Attribute) and node.attr == "RawSQL"
        ):
            found.append((node.lineno, "RawSQL"))
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in documentation
            and SQL_START.match(node.value)
        ):
            found.append((node.lineno, "an SQL statement"))
    return sorted(found)


def test_the_room_check_sees_what_it_looks_for(tmp_path):
    """The reader finds each kind of use, so that the test below can fail."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""SELECT in a docstring is documentation."""\n'
        "if connection.vendor == 'sqlite':\n"
        "    with connection.cursor() as c:\n"
        "        c.execute('SELECT 1')\n"
        "q = RawSQL('x', [])\n"
        "s = f'SELECT {x} FROM t'\n"
    )
    assert room_only_uses(sample) == [
        (2, "a vendor test"),
        (3, "a .cursor() call"),
        (4, "a .execute() call"),
        (4, "an SQL statement"),
        (5, "RawSQL"),
        (6, "an SQL statement"),
    ]


def test_sql_vendor_tests_and_cursors_live_in_the_database_room():
    """Only `scylla_django/db/` (and the migrations) write SQL, ask `connection.vendor` or open
    a cursor; everything else calls `db`."""
    offenders: list[str] = []
    allowed_seen: set[tuple[str, str]] = set()
    for path in sorted(ROOT.rglob("*.py")):
        module = module_name(path)
        if module == DB_ROOM or module.startswith(f"{DB_ROOM}.") or ".migrations" in module:
            continue
        for line, what in room_only_uses(path):
            if (module, what) in ALLOWED_OUTSIDE_THE_ROOM:
                allowed_seen.add((module, what))
                continue
            offenders.append(f"{module}, line {line}: {what}")
    assert not offenders, "Move it into scylla_django/db/ and call that:\n  " + "\n  ".join(
        offenders
    )
    stale = set(ALLOWED_OUTSIDE_THE_ROOM) - allowed_seen
    assert not stale, f"Gone: delete these entries from ALLOWED_OUTSIDE_THE_ROOM: {stale}"


# The questions a caller would ask to learn which database it is on; outside the room, a caller
# asks `db.driver(using)` for an operation or names a capability (`driver.listens`).
VENDOR_QUESTIONS = {
    "is_postgresql",
    "is_sqlite",
    "is_mysql",
    "uses_single_statement_transitions",
    "returns_written_rows",
    "can_listen",
    "has_planner_estimates",
    "vendors",
}
VENDOR_PREFIXES = ("configures_", "postgresql_", "sqlite_", "mysql_")


def _vendor_word(name: str) -> bool:
    return name in VENDOR_QUESTIONS or name.startswith(VENDOR_PREFIXES)


def vendor_questions(path: Path) -> list[tuple[int, str]]:
    """Where `path` asks which database it is on: a vendor question of `db`, or a statement of
    one vendor called by name, read, imported or named (line, name) pairs."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _vendor_word(node.attr):
            found.append((node.lineno, node.attr))
        elif isinstance(node, ast.Name) and _vendor_word(node.id):
            found.append((node.lineno, node.id))
        elif isinstance(node, ast.ImportFrom):
            found += [(node.lineno, alias.name) for alias in node.names if _vendor_word(alias.name)]
            if (node.module or "").rsplit(".", 1)[-1] == "vendors":
                found.append((node.lineno, node.module or ""))
    return sorted(set(found))


def test_the_vendor_check_sees_what_it_looks_for(tmp_path):
    """The reader finds each kind of vendor question, so that the test below can fail."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from scylla_django.db.vendors import is_sqlite\n"
        "if db.uses_single_statement_transitions(connection):\n"
        "    db.postgresql_notify(using, 'c', [])\n"
        "ok = db.configures_sqlite(config) or is_postgresql(connection)\n"
        "fine = db.driver(using).listens\n"
    )
    assert vendor_questions(sample) == [
        (1, "is_sqlite"),
        (1, "scylla_django.db.vendors"),
        (2, "uses_single_statement_transitions"),
        (3, "postgresql_notify"),
        (4, "configures_sqlite"),
        (4, "is_postgresql"),
    ]


def test_no_vendor_question_is_asked_outside_the_database_room():
    """Outside `scylla_django/db/` (and the migrations) no module asks which database it is on
    (`is_postgresql`, `uses_single_statement_transitions`, `configures_sqlite`, …) nor calls
    one vendor's statement by name (`db.postgresql_lease`): it calls the operations of
    `db.driver(using)`, or names the capability it needs (`driver.listens`)."""
    offenders: list[str] = []
    for path in sorted(ROOT.rglob("*.py")):
        module = module_name(path)
        if module == DB_ROOM or module.startswith(f"{DB_ROOM}.") or ".migrations" in module:
            continue
        offenders += [f"{module}, line {line}: {name}" for line, name in vendor_questions(path)]
    assert not offenders, "Ask db.driver(using) instead:\n  " + "\n  ".join(offenders)


def test_every_module_the_architecture_page_names_exists():
    """docs/discussions/architecture.md names modules by path (`worker/slots.py`) or by name
    within the package it describes (`slots.py`): each must be a file of the checkout."""
    checkout = ROOT.parent
    page = (checkout / "docs" / "discussions" / "architecture.md").read_text()
    files = {
        path.relative_to(checkout).as_posix()
        for path in checkout.rglob("*.py")
        if not {".venvs", ".venv", "build", ".git"} & set(path.parts)
    }
    named = set(re.findall(r"`([A-Za-z0-9_./]+\.py)`", page))
    assert named, "the page names no module"
    missing = sorted(
        name for name in named if not any(f == name or f.endswith("/" + name) for f in files)
    )
    assert missing == [], f"docs/discussions/architecture.md names modules not found: {missing}"
