"""Machine checks of the layering rules (DESIGN §6): import-linter contracts and banned APIs."""

import pathlib
import re
import subprocess
import sys

REPOSITORY = pathlib.Path(__file__).resolve().parent.parent

#: Pure layers may not read the wall clock, use global randomness or touch the reactor.
PURE_PACKAGES = ["mqbroker/storage", "mqbroker/raft"]
BANNED_IN_PURE = re.compile(r"^\s*(import random\b|from random import|from twisted|import twisted)|time\.time\(\)", re.M)


def test_import_contracts_hold() -> None:
    """lint-imports exits 0: every contract in pyproject.toml is kept."""
    result = subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()"],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_pure_layers_use_no_clock_randomness_or_reactor() -> None:
    """Storage and the Raft core take time and randomness as arguments."""
    offenders = []
    for package in PURE_PACKAGES:
        for path in (REPOSITORY / package).rglob("*.py"):
            if path.name in {"node.py", "transport.py"}:
                continue  # the Raft node and transport are the Twisted adapters
            if BANNED_IN_PURE.search(path.read_text()):
                offenders.append(str(path.relative_to(REPOSITORY)))
    assert offenders == []


def test_no_unused_imports_variables_or_undefined_names() -> None:
    """pyflakes rules (through ruff) over the code, the tests and the benchmarks.

    F811 (redefinition) is left out: pytest fixtures imported into a test module are
    "redefined" by the test functions that take them as arguments.
    """
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--select", "F", "--ignore", "F811", "--output-format", "concise",
         "mqbroker", "spark", "twisted", "benchmarks", "tests"],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_readme_and_architecture_list_every_package() -> None:
    """The README's Layout and docs/architecture.md's Packages table name each package of mqbroker/ and no other."""
    packages = {f"mqbroker/{path.parent.name}/" for path in (REPOSITORY / "mqbroker").glob("*/__init__.py")}
    for document, section in (("README.md", "## Layout"), ("docs/architecture.md", "## Packages")):
        text = (REPOSITORY / document).read_text()
        table = text[text.index(section):].split("\n## ", 1)[0]
        listed = set(re.findall(r"^\| `(mqbroker/[a-z_]+/)`", table, re.M))
        assert listed == packages, f"{document} {section}: missing {packages - listed}, stale {listed - packages}"
