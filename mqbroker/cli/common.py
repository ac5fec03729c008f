"""What every client command shares: --bootstrap, error reporting, key=value parsing."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from mqbroker.errors import BrokerError

DEFAULT_BOOTSTRAP = "localhost:9393"


def add_client_options(parser: argparse.ArgumentParser) -> None:
    """Options every command that talks to a broker takes."""
    parser.add_argument(
        "--bootstrap", "-b", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT",
        help=f"any broker of the cluster [default: {DEFAULT_BOOTSTRAP}]",
    )


def parse_key_values(pairs: list[str] | None, option: str) -> dict[str, str]:
    """``["a=1", "b=2"]`` → ``{"a": "1", "b": "2"}``; a pair without '=' is a usage error."""
    result: dict[str, str] = {}
    for pair in pairs or []:
        key, separator, value = pair.partition("=")
        if not separator or not key:
            raise SystemExit(f"mqbroker: {option} expects KEY=VALUE, got {pair!r}")
        result[key] = value
    return result


def reporting_errors(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Turn broker and connection errors into one clear line on stderr and exit status 1."""

    def wrapper(arguments: argparse.Namespace) -> int:
        try:
            return run(arguments)
        except BrokerError as error:
            print(f"mqbroker: error: {error.message} ({error.code.name})", file=sys.stderr)
        except ConnectionError as error:
            print(f"mqbroker: cannot reach a broker at {arguments.bootstrap}: {error}. "
                  "Is one running? Start it with `twistd -n mqbroker`.", file=sys.stderr)
        except OSError as error:
            print(f"mqbroker: error: {error}", file=sys.stderr)
        return 1

    return wrapper


def first_positional(subparsers: Any, name: str, help_text: str, description: str) -> argparse.ArgumentParser:
    """A subcommand parser with the client options already added."""
    parser = subparsers.add_parser(name, help=help_text, description=description)
    add_client_options(parser)
    return parser
