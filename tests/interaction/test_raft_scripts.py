"""Runs the data-driven Raft scripts in testdata/raft_*.txt; MQBROKER_REWRITE=1 rewrites their output.

Each script exercises one rule of the Raft paper. A block is a command, a ``----`` line and
the expected output, ended by a blank line; lines starting with ``#`` between blocks are
comments. After a rewrite, review the diff: the expected output is the specification.
"""

from __future__ import annotations

import os
import pathlib

import pytest

from tests.interaction.raft_env import InteractionEnv

TESTDATA = pathlib.Path(__file__).parent / "testdata"
SCRIPTS = sorted(TESTDATA.glob("raft_*.txt"))


def run_script(text: str) -> str:
    """Run every command of a script and return the script with the actual output filled in."""
    environment = InteractionEnv()
    result: list[str] = []
    lines = text.splitlines()
    position = 0
    while position < len(lines):
        line = lines[position]
        if not line.strip() or line.startswith("#"):
            result.append(line)
            position += 1
            continue
        command = line
        assert lines[position + 1] == "----", f"line {position + 2}: expected ---- after {command!r}"
        position += 2
        while position < len(lines) and lines[position].strip():
            position += 1  # the old expected output, replaced below
        result.extend([command, "----", *environment.handle(command)])
    return "\n".join(result) + "\n"


@pytest.mark.parametrize("script", SCRIPTS, ids=[path.stem for path in SCRIPTS])
def test_raft_script_output_matches(script: pathlib.Path) -> None:
    """The cluster's behaviour is exactly what the script records."""
    expected = script.read_text()
    actual = run_script(expected)
    if os.environ.get("MQBROKER_REWRITE") == "1":
        script.write_text(actual)
        return
    assert actual == expected, f"{script.name} differs; rerun with MQBROKER_REWRITE=1 and review the diff"


def test_every_rule_has_a_script() -> None:
    """One script per rule of the paper (and per extension) exists."""
    rules = {
        "election", "vote_restriction", "log_conflict", "commit_own_term", "pre_vote",
        "check_quorum", "snapshot", "membership", "read_index",
    }
    assert {path.stem.removeprefix("raft_") for path in SCRIPTS} >= rules
