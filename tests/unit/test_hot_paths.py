"""The per-record, per-message and per-frame modules call no method on an imported constant.

CPython 3.11 compiles ``NAME.method(...)`` without its method-call fast path (``LOAD_METHOD``) when
``NAME`` was bound by an import, taking it for a module: every call then builds a bound method. On the
producer's per-record encoder that cost ~0.1 µs of ~0.4 µs per record. Hot modules bind such names
in the module instead (docs/architecture.md, "Hot paths").
"""

from __future__ import annotations

import ast
import pathlib

import pytest

import mqbroker

SOURCE = pathlib.Path(mqbroker.__file__).parent
HOT_MODULES = sorted(
    {
        *SOURCE.glob("records/*.py"),
        *SOURCE.glob("protocols/*/codec.py"),
        *SOURCE.glob("protocols/mqtt/session.py"),
        *SOURCE.glob("protocols/mqtt/flows.py"),
        *SOURCE.glob("protocols/mqtt/hub.py"),
        *SOURCE.glob("protocols/amqp/channel*.py"),
        *SOURCE.glob("core/produce.py"),
        *SOURCE.glob("core/fetch*.py"),
        *SOURCE.glob("storage/*.py"),
        *SOURCE.glob("client/**/*.py"),
    }
)


def _methods_called_on_imported_objects(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text())
    imported = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        target = node.func.value
        if not (isinstance(target, ast.Name) and target.id in imported):
            continue
        if target.id.isupper():  # a constant (modules and classes are not spelt so)
            found.append(f"line {node.lineno}: {target.id}.{node.func.attr}(...)")
    return found


def test_the_hot_module_list_finds_the_modules() -> None:
    names = {path.relative_to(SOURCE).as_posix() for path in HOT_MODULES}
    assert {"records/builder.py", "protocols/mqtt/codec.py", "core/produce.py"} <= names


@pytest.mark.parametrize("path", HOT_MODULES, ids=lambda path: path.relative_to(SOURCE).as_posix())
def test_no_method_call_on_an_imported_object(path: pathlib.Path) -> None:
    assert _methods_called_on_imported_objects(path) == []


def test_the_check_finds_a_method_call_on_an_imported_object(tmp_path: pathlib.Path) -> None:
    module = tmp_path / "hot.py"
    module.write_text("from mqbroker.records.varint import SMALL_VARINTS\n\ndef f(n):\n    return SMALL_VARINTS.get(n)\n")
    assert _methods_called_on_imported_objects(module) == ["line 4: SMALL_VARINTS.get(...)"]
