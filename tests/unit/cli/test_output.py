"""How read commands print: plain rows when piped, tables that never cut a cell, JSON documents."""

from __future__ import annotations

import argparse
import io
import json

import pytest

from mqbroker.cli.output import JSON, PLAIN, TABLE, Column, Table, add_output_options, emit, output_format

LONG_NAME = "telemetry-from-the-north-sea-wind-farm-turbine-controllers-" * 4
COLUMNS = (Column("topic", "topic"), Column("partition", "partition", numeric=True), Column("replicas", "replicas"),
           Column("lag", "log lag", numeric=True))
RECORDS = [{"topic": LONG_NAME, "partition": 0, "replicas": [1, 2, 3], "lag": None},
           {"topic": "short", "partition": 11, "replicas": [], "lag": 5}]


class Stream(io.StringIO):
    """Standard output as a terminal or as a pipe."""

    def __init__(self, terminal: bool) -> None:
        super().__init__()
        self.terminal = terminal

    def isatty(self) -> bool:
        return self.terminal


def _arguments(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_output_options(parser)
    return parser.parse_args(argv)


def _emit(*argv: str, terminal: bool = False) -> str:
    stream = Stream(terminal)
    emit(_arguments(*argv), {"topics": RECORDS}, [Table(columns=COLUMNS, records=RECORDS, title="topics")], stream)
    return stream.getvalue()


def test_piped_output_is_tab_separated_rows_under_a_header_with_every_name_whole() -> None:
    assert _emit().splitlines() == [
        "TOPIC\tPARTITION\tREPLICAS\tLOG-LAG",
        f"{LONG_NAME}\t0\t1,2,3\t-",
        "short\t11\t\t5",
    ]
    assert _emit("--no-headers").splitlines()[0].startswith(LONG_NAME)


def test_a_terminal_gets_a_table_and_a_pipe_gets_plain_unless_asked() -> None:
    assert output_format(_arguments(), Stream(terminal=True)) == TABLE
    assert output_format(_arguments(), Stream(terminal=False)) == PLAIN
    assert output_format(_arguments("-o", "table"), Stream(terminal=False)) == TABLE
    assert output_format(_arguments("--output", "plain"), Stream(terminal=True)) == PLAIN
    assert output_format(_arguments("--json"), Stream(terminal=True)) == JSON


def test_a_table_written_to_a_pipe_keeps_every_cell_whole() -> None:
    text = _emit("-o", "table")
    assert LONG_NAME in text and "…" not in text
    assert "topics" in text.splitlines()[0] and "1,2,3" in text


def test_json_prints_the_commands_document_with_nulls_and_lists() -> None:
    assert json.loads(_emit("-o", "json")) == {"topics": RECORDS}
    assert json.loads(_emit("--json", terminal=True)) == {"topics": RECORDS}


def test_a_tab_or_line_break_inside_a_value_cannot_split_a_plain_row() -> None:
    stream = Stream(terminal=False)
    records = [{"key": "a\tb", "value": "line one\nline two\\"}]
    emit(_arguments(), {}, [Table(columns=(Column("key", "key"), Column("value", "value")), records=records)], stream)
    assert stream.getvalue().splitlines()[1] == "a\\tb\tline one\\nline two\\\\"


def test_tables_follow_one_another_and_an_empty_one_can_say_so() -> None:
    stream = Stream(terminal=False)
    tables = [Table(columns=COLUMNS, records=RECORDS[1:]),
              Table(columns=(Column("key", "key"),), records=[], empty="no configuration")]
    emit(_arguments(), {}, tables, stream)
    assert stream.getvalue().split("\n\n") == ["TOPIC\tPARTITION\tREPLICAS\tLOG-LAG\nshort\t11\t\t5", "KEY\n"]
    stream = Stream(terminal=False)
    emit(_arguments("-o", "table"), {}, tables, stream)
    assert "no configuration" in stream.getvalue()


@pytest.mark.parametrize("argv", [["-o", "yaml"], ["-o"]])
def test_an_unknown_format_is_a_usage_error(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        _arguments(*argv)
    assert exited.value.code == 2
