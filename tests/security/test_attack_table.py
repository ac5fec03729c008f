"""docs/security.md's table of tested attacks names exactly the attack tests that exist."""

from __future__ import annotations

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
ATTACK_MODULES = ("test_broker_attacks.py", "test_cluster_attacks.py", "test_mtls_controller_attacks.py",
                  "test_data_attacks.py", "test_mqtt_acl_attacks.py")


def _attack_tests() -> set[str]:
    names = set()
    for module in ATTACK_MODULES:
        tree = ast.parse((ROOT / "tests" / "security" / module).read_text())
        names |= {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}
    return names


def _tabled_tests() -> set[str]:
    text = (ROOT / "docs" / "security.md").read_text()
    table = text[text.index("## Tested attacks"):text.index("## Measured")]
    return {name for row in table.splitlines() if row.startswith("| ") for name in re.findall(r"`(test_\w+)`", row)}


def test_every_attack_test_is_in_the_table_and_every_row_names_a_test() -> None:
    tests, tabled = _attack_tests(), _tabled_tests()
    assert tabled - tests == set(), "rows naming no test"
    assert tests - tabled == set(), "attack tests missing from docs/security.md's table"
