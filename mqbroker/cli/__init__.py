"""The ``mqbroker`` command: run a broker, administer topics, produce, consume and benchmark."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from mqbroker import __version__
from mqbroker.cli.common import EXIT_INTERRUPTED, EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    """The full command-line grammar (each subcommand module adds its own parser)."""
    from mqbroker.cli import (
        bench, certs, cluster, connectors, groups, messages, mqtt, security, serve, shares, topics, transactions,
    )

    parser = argparse.ArgumentParser(
        prog="mqbroker",
        description="mqbroker: a partitioned, replicated commit-log message broker.",
        epilog="Run `mqbroker COMMAND --help` for a command's options. Docs: docs/.",
    )
    parser.add_argument("--version", action="version", version=f"mqbroker {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    serve.add_parser(commands)
    topics.add_parsers(commands)
    messages.add_parsers(commands)
    bench.add_parser(commands)
    certs.add_parser(commands)
    groups.add_parser(commands)
    shares.add_parsers(commands)
    transactions.add_parser(commands)
    cluster.add_parser(commands)
    security.add_parsers(commands)
    connectors.add_parser(commands)
    mqtt.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point; returns the exit code (``mqbroker.cli.common`` lists them)."""
    arguments = build_parser().parse_args(argv)
    try:
        return int(arguments.run(arguments) or EXIT_OK)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader left (`| head`): not an error, and nothing more to say to it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
