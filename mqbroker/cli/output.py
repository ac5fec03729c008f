"""How read commands print (``-o/--output``): a table on a terminal, tab-separated rows when piped, or JSON.

A command builds its records once, as JSON-ready dicts; ``emit`` prints them as rich tables,
as plain rows (a header line of column names, then one line per record, columns separated by
tabs, as ``kafka-consumer-groups.sh`` prints) or as the command's JSON document. Neither a table
nor a plain row is ever cut to the terminal's width: a long topic or group name stays whole.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table as RichTable

TABLE = "table"
PLAIN = "plain"
JSON = "json"
OUTPUT_FORMATS = (TABLE, JSON, PLAIN)
#: Console width for a table written to a pipe or file: wide enough that no cell is ever cut.
_UNBOUNDED_WIDTH = 100_000


@dataclass(frozen=True, slots=True)
class Column:
    """One column: the record key it shows and its heading; ``numeric`` columns align right."""

    key: str
    heading: str
    numeric: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Table:
    """Records to show under ``columns`` (keys not shown as columns are for the JSON document only);
    ``title`` and ``empty`` (shown instead of no rows) are for table output only."""

    columns: tuple[Column, ...]
    records: Sequence[dict[str, Any]]
    title: str | None = None
    empty: str | None = None


def add_output_options(
    parser: argparse.ArgumentParser, formats: Sequence[str] = OUTPUT_FORMATS, help_text: str | None = None
) -> None:
    """``-o/--output``, its ``--json`` alias and (for tables) ``--no-headers``, for a command that prints records."""
    parser.add_argument(
        "-o", "--output", choices=formats, default=None,
        help=help_text or "table (the default on a terminal), plain (tab-separated columns, the default when "
        "piped) or json; nothing is ever truncated",
    )
    parser.add_argument("--json", dest="output", action="store_const", const=JSON, help="the same as -o json")
    if TABLE in formats:
        parser.add_argument("--no-headers", action="store_true", help="plain output without the header line")


def output_format(arguments: argparse.Namespace, stream: TextIO | None = None) -> str:
    """The format asked for, else a table on a terminal and plain rows anywhere else."""
    if arguments.output is not None:
        return str(arguments.output)
    return TABLE if (stream or sys.stdout).isatty() else PLAIN


def emit(arguments: argparse.Namespace, document: Any, tables: Sequence[Table], stream: TextIO | None = None) -> None:
    """Print ``document`` (for -o json) or ``tables`` in the format the command line asked for."""
    stream = stream or sys.stdout
    chosen = output_format(arguments, stream)
    if chosen == JSON:
        stream.write(json.dumps(document, indent=2, sort_keys=False) + "\n")
    elif chosen == PLAIN:
        write_plain(tables, stream, headers=not getattr(arguments, "no_headers", False))
    else:
        write_tables(tables, stream)


def write_plain(tables: Sequence[Table], stream: TextIO, headers: bool = True) -> None:
    """A header line (unless ``headers`` is false) and a line per record, columns separated by tabs;
    tables one after another, a blank line between them."""
    for number, table in enumerate(tables):
        if number:
            stream.write("\n")
        if headers:
            stream.write("\t".join(column.heading.upper().replace(" ", "-") for column in table.columns) + "\n")
        for record in table.records:
            stream.write("\t".join(_plain_cell(record.get(column.key)) for column in table.columns) + "\n")


def write_tables(tables: Sequence[Table], stream: TextIO) -> None:
    """Rich tables: cells too wide for a terminal wrap, and off a terminal the width is unbounded."""
    console = Console(file=stream, width=None if stream.isatty() else _UNBOUNDED_WIDTH, highlight=False)
    for table in tables:
        if not table.records and table.empty is not None:
            console.print(table.empty, soft_wrap=True)
            continue
        rendered = RichTable(title=table.title)
        for column in table.columns:
            rendered.add_column(column.heading, justify="right" if column.numeric else "left", overflow="fold")
        for record in table.records:
            rendered.add_row(*(cell_text(record.get(column.key)) for column in table.columns))
        console.print(rendered)


def cell_text(value: Any) -> str:
    """A value as a cell shows it: ``-`` for none, lists joined by commas."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(cell_text(item) for item in value)
    return str(value)


def _plain_cell(value: Any) -> str:
    """``cell_text`` with tabs and line breaks escaped, so that one record stays one line of columns."""
    return cell_text(value).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
