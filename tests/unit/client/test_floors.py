"""The client's floors, checked on the source with `ast` (no broker): every module of the client is
short enough to read (at most 600 lines, DESIGN.md: "a file that grows past a few hundred lines
is asking to be split"), each set of Kafka error codes the client acts on is written once (in
errors.py, imported where it is used), and each plain value is defined once, in types.py.

tests/unit/test_imports.py checks the other half of the floor: types.py and errors.py import nothing
above them, and the client's modules import each other in no circle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.paths import SRC

CLIENT = SRC / "exactly" / "client"
MAX_LINES = 600
MODULES = sorted(CLIENT.rglob("*.py"))
# A set literal, or a call that makes one of a literal: frozenset({...}), set((...)), ...
_SET_CALLS = {"frozenset", "set", "tuple"}


def _name(path: Path) -> str:
    return str(path.relative_to(CLIENT.parent.parent))


def test_the_modules_are_found() -> None:
    assert len(MODULES) > 20
    assert CLIENT / "types.py" in MODULES and CLIENT / "admin" / "__init__.py" in MODULES


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_every_module_is_at_most_600_lines(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, (f"{_name(path)} has {lines} lines, more than {MAX_LINES}: split it "
                                "by concern (a collaborator, a module of its own)")


# -- error-code sets --------------------------------------------------------------------------

def _error_code_members(node: ast.expr, known: dict[str, frozenset[str]] | None = None
                        ) -> frozenset[str] | None:
    """The ErrorCode members of a set/frozenset/tuple literal made only of `ErrorCode.x`, or of
    a union (`|`) of such literals and of sets already `known` by name; None for anything
    else."""
    known = known or {}
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in _SET_CALLS and len(node.args) == 1 and not node.keywords):
        node = node.args[0]
    if isinstance(node, ast.Name):
        return known.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        left, right = _error_code_members(node.left, known), _error_code_members(node.right, known)
        return None if left is None or right is None else left | right
    if not isinstance(node, ast.Set | ast.Tuple | ast.List) or not node.elts:
        return None
    members = set()
    for element in node.elts:
        if not (isinstance(element, ast.Attribute) and isinstance(element.value, ast.Name)
                and element.value.id == "ErrorCode"):
            return None
        members.add(element.attr)
    return frozenset(members)


def _error_code_sets(path: Path, imported: dict[str, frozenset[str]] | None = None
                     ) -> Iterator[tuple[str, frozenset[str]]]:
    """(name, members) of each module-level set of ErrorCode members `path` assigns, a union
    of sets defined before it (there, or in `imported`) included."""
    known = dict(imported or {})
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        members = _error_code_members(value, known)
        if members is None:
            continue
        for target in targets:
            if isinstance(target, ast.Name):
                known[target.id] = members
                yield target.id, members


def _repeated(found: dict[str, list[tuple[str, frozenset[str]]]]) -> list[str]:
    """Each set written twice: the same members, or the same name, in two places."""
    by_members: dict[frozenset[str], list[str]] = {}
    by_name: dict[str, list[str]] = {}
    for module, sets in found.items():
        for name, members in sets:
            by_members.setdefault(members, []).append(f"{module}:{name}")
            by_name.setdefault(name, []).append(module)
    out = [f"{{{', '.join(sorted(members))}}} in " + ", ".join(places)
           for members, places in by_members.items() if len(places) > 1]
    out += [f"{name} in " + ", ".join(modules)
            for name, modules in by_name.items() if len(modules) > 1]
    return out


# The sets errors.py defines, by name: another module's unions of them are read as sets too.
ERRORS = dict(_error_code_sets(CLIENT / "errors.py"))
FOUND = {_name(p): list(_error_code_sets(p, None if p.name == "errors.py" else ERRORS))
         for p in MODULES}


def test_the_error_code_sets_are_read() -> None:
    # The check below cannot pass by reading nothing: the sets of errors.py are found.
    assert ERRORS["COORDINATOR_MOVED"] == {"not_coordinator", "coordinator_not_available"}
    assert ERRORS["COORDINATOR_UNSETTLED"] == ERRORS["COORDINATOR_MOVED"] | {
        "coordinator_load_in_progress"}  # a union of sets is read too
    assert ERRORS["FENCED"] == {"producer_fenced", "invalid_producer_epoch"}
    assert sum(map(len, FOUND.values())) >= 10


def test_no_error_code_set_is_written_twice() -> None:
    repeated = _repeated(FOUND)
    assert not repeated, ("error-code sets written twice in the client (define each once in "
                          "exactly/client/errors.py and import it):\n" + "\n".join(repeated))


def test_the_repeat_finder_finds_repeats() -> None:
    # Made up for the check, so that a broken finder cannot pass the test above.
    tree = ast.parse("_A = (ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch)\n"
                     "B = frozenset({ErrorCode.invalid_producer_epoch, ErrorCode.producer_fenced})\n"
                     "C = {ErrorCode.not_coordinator}\nD = {ErrorCode.not_coordinator, 3}\n"
                     "E = C | {ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch}\n")
    sets: dict[str, frozenset[str] | None] = {}
    for node in tree.body:
        assert isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
        known = {name: members for name, members in sets.items() if members is not None}
        sets[node.targets[0].id] = _error_code_members(node.value, known)
    assert sets["D"] is None
    assert sets["E"] == {"not_coordinator", "producer_fenced", "invalid_producer_epoch"}
    assert _repeated({"a.py": [("_A", sets["_A"])], "b.py": [("B", sets["B"])]})  # same members
    assert _repeated({"a.py": [("C", sets["C"])], "b.py": [("C", frozenset({"x"}))]})  # same name
    assert not _repeated({"a.py": [("_A", sets["_A"])], "b.py": [("C", sets["C"])]})


# -- plain values -----------------------------------------------------------------------------

def _classes(path: Path) -> set[str]:
    return {node.name for node in ast.parse(path.read_text(), str(path)).body
            if isinstance(node, ast.ClassDef)}


def test_each_plain_value_is_defined_in_types_only() -> None:
    values = _classes(CLIENT / "types.py")
    assert {"ConsumerRecord", "ShareAcknowledgements", "TransactionState", "OffsetSpec"} <= values
    twice = {_name(p): sorted(_classes(p) & values) for p in MODULES
             if p.name != "types.py" and _classes(p) & values}
    assert not twice, f"plain values defined again outside types.py: {twice}"
