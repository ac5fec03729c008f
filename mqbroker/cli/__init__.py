"""The ``mqbroker`` command: run a broker, administer topics, produce, consume and benchmark."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from mqbroker import __version__


def build_parser() -> argparse.ArgumentParser:
    """The full command-line grammar (each subcommand module adds its own parser)."""
    from mqbroker.cli import bench, certs, clients, cluster, groups, security, serve, shares

    parser = argparse.ArgumentParser(
        prog="mqbroker",
        description="mqbroker: a partitioned, replicated commit-log message broker.",
        epilog="Run `mqbroker COMMAND --help` for a command's options. Docs: docs/.",
    )
    parser.add_argument("--version", action="version", version=f"mqbroker {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    serve.add_parser(commands)
    clients.add_parsers(commands)
    bench.add_parser(commands)
    certs.add_parser(commands)
    groups.add_parser(commands)
    shares.add_parsers(commands)
    cluster.add_parser(commands)
    security.add_parsers(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point."""
    arguments = build_parser().parse_args(argv)
    try:
        return int(arguments.run(arguments) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
