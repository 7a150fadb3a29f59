"""The layering of ../shared/DESIGN.md, checked on the source with `ast`: imports point down only,
the client needs the protocol only, the client stands on its floor (its plain values and its
errors, which import nothing above them), nothing but the CLI and the test harness imports the
broker, and no two modules of a package import each other in a circle.

Every import counts: at the top of a module, inside a function, and under `if TYPE_CHECKING:`
(a circle of type-only imports is still two modules that cannot be understood one without the
other).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.paths import SRC

# What each layer may import (besides itself and the foundation modules). DESIGN.md's diagram,
# read bottom-up, plus the applications on top: the CLI, the demo, the test harness.
ALLOWED: dict[str, set[str]] = {
    "protocol": set(),
    "log": {"protocol"},
    "txn": {"protocol", "log"},
    "groups": {"protocol", "log"},
    "share": {"protocol", "log"},  # KIP-932 share groups: beside txn and groups
    "server": {"protocol", "log", "txn", "groups", "share"},
    "client": {"protocol"},
    "dualwrite": {"protocol", "client"},
    "spark": {"protocol", "client"},
    "testing": {"protocol", "client", "server"},  # the harness runs brokers
    "demo": {"protocol", "client", "spark", "testing"},
    # The web console is a client application: Kafka's transaction state names are the client's
    # (exactly.client.types.TransactionState), not the coordinator's.
    "webconsole": {"protocol", "client"},
    "cli": {"protocol", "log", "txn", "groups", "server", "client", "dualwrite", "spark", "demo",
            "testing", "webconsole"},
    "__main__": {"cli"},
}
# Modules below every layer: anything may import them, they import nothing of exactly.
FOUNDATION = {"exactly", "exactly.failpoints", "exactly.configdef"}
# Who may import the broker itself: everything else gets its services.
BROKER = "exactly.server.broker"
BROKER_USERS = ("exactly.cli", "exactly.testing")
# Packages whose modules must not import each other in a circle.
ACYCLIC = ("exactly.server", "exactly.client")
# The client's floor (DESIGN.md: "each wing stands on a floor of plain types"): its plain values
# and its errors, below every other module of the client. Each may import of the client only
# what is listed (the rest of the package imports them, never the other way round).
CLIENT_FLOORS: dict[str, set[str]] = {
    "exactly.client.types": {"exactly.client.errors"},
    "exactly.client.errors": set(),
    "exactly.client.prepared": set(),
}


def _module_name(path: Path) -> str:
    parts = path.with_suffix("").relative_to(SRC).parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted((SRC / "exactly").rglob("*.py"))}


MODULES = _modules()
# Compiled modules (their stubs): `from package import _decode` names a module, not the package.
EXTENSIONS = {_module_name(p.with_suffix(".py")) for p in (SRC / "exactly").rglob("*.pyi")}


def _imports(module: str, path: Path) -> Iterator[str]:
    """The exactly modules `module` imports, resolved to modules that exist."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            # `from package import module` names a module; `from module import name` does not.
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES.keys() | EXTENSIONS
                     else base for a in node.names]
        else:
            continue
        for name in names:
            if name == "exactly" or name.startswith("exactly."):
                yield name


GRAPH = {m: {i for i in _imports(m, p) if i != m} for m, p in MODULES.items()}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_the_graph_is_read() -> None:
    # The check below cannot pass by reading nothing: known edges are found.
    assert "exactly.server.network" in GRAPH["exactly.server.broker"]
    assert "exactly.protocol.apis" in GRAPH["exactly.client.connection"]
    assert "exactly.server.services" in GRAPH["exactly.server.context"]  # under TYPE_CHECKING


def test_imports_point_down_only() -> None:
    wrong = []
    for module, imported in sorted(GRAPH.items()):
        if module in FOUNDATION:
            continue
        layer = _layer(module)
        for target in sorted(imported):
            if target in FOUNDATION or _layer(target) == layer:
                continue
            if _layer(target) not in ALLOWED[layer]:
                wrong.append(f"{module} imports {target}")
    assert not wrong, "imports against the layering of DESIGN.md:\n" + "\n".join(wrong)


def test_foundation_modules_import_nothing_of_exactly() -> None:
    for module in FOUNDATION & set(GRAPH):
        assert not GRAPH[module], f"{module} imports {sorted(GRAPH[module])}"


@pytest.mark.parametrize("floor", sorted(CLIENT_FLOORS))
def test_the_client_floor_imports_nothing_above_it(floor: str) -> None:
    assert floor in GRAPH, f"{floor} is gone: update CLIENT_FLOORS"
    above = {m for m in GRAPH[floor] if _layer(m) == "client"} - CLIENT_FLOORS[floor]
    assert not above, (f"{floor} is the client's floor and imports {sorted(above)}: move what "
                       "it needs down into it, or what needs the rest up out of it")


def test_the_client_stands_on_its_floor() -> None:
    # The check above cannot pass by reading nothing: the client's modules do import the floor.
    users = {m for m, imported in GRAPH.items() if "exactly.client.types" in imported}
    assert {"exactly.client.fetcher", "exactly.client.admin", "exactly.client.session"} <= users


def test_only_the_cli_and_the_test_harness_import_the_broker() -> None:
    users = sorted(m for m, imported in GRAPH.items() if BROKER in imported)
    assert users and all(m.startswith(BROKER_USERS) for m in users), users


def _cycle(nodes: set[str]) -> list[str] | None:
    """One import circle among `nodes`, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(GRAPH[node] & nodes):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(nodes):
        if node not in state and (found := visit(node)):
            return found
    return None


@pytest.mark.parametrize("package", ACYCLIC)
def test_no_import_circle_inside(package: str) -> None:
    nodes = {m for m in GRAPH if m.startswith(package + ".") or m == package}
    assert len(nodes) > 5
    circle = _cycle(nodes)
    assert circle is None, "import circle: " + " -> ".join(circle or ())


def test_the_circle_finder_finds_a_circle() -> None:
    # A circle made up for the check, so a broken finder cannot pass the test above.
    GRAPH["exactly.client.fake_a"] = {"exactly.client.fake_b"}
    GRAPH["exactly.client.fake_b"] = {"exactly.client.fake_a"}
    try:
        assert _cycle({"exactly.client.fake_a", "exactly.client.fake_b"}) is not None
    finally:
        del GRAPH["exactly.client.fake_a"], GRAPH["exactly.client.fake_b"]


def _third_party(path: Path) -> Iterator[str]:
    """The top-level names of what `path` imports absolutely (exactly's own included)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module.split(".")[0]


def test_nothing_installed_imports_confluent_kafka() -> None:
    # Issue 18: confluent-kafka is a test and benchmark dependency; the package, its CLI
    # included, runs on Exactly's own client.
    assert "click" in set(_third_party(MODULES["exactly.cli.main"]))  # the walk sees imports
    users = sorted(m for m, p in MODULES.items() if "confluent_kafka" in set(_third_party(p)))
    assert users == []
