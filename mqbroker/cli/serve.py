"""``mqbroker serve``: run a broker in the foreground with the options of ``twistd mqbroker``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from twisted.python import usage


def add_parser(commands: Any) -> None:
    """Register ``serve``; its options are parsed by ``mqbroker.tap.Options`` (one grammar)."""
    parser = commands.add_parser(
        "serve",
        help="run a broker in the foreground (like `twistd -n mqbroker`)",
        description="Run a broker in the foreground. Options are those of `twistd -n mqbroker`; "
        "`mqbroker serve --help` lists them.",
        add_help=False,
    )
    parser.add_argument("options", nargs=argparse.REMAINDER)
    parser.set_defaults(run=run)


def run(arguments: argparse.Namespace) -> int:
    """Parse the broker options, start the service tree, run the reactor until SIGTERM/SIGINT."""
    from mqbroker.tap import Options

    options = Options()
    try:
        options.parseOptions(arguments.options)
    except usage.UsageError as error:
        print(f"mqbroker serve: {error}", file=sys.stderr)
        print("Run `mqbroker serve --help` for the options.", file=sys.stderr)
        return 2
    from twisted.internet import reactor
    from twisted.logger import globalLogBeginner, textFileLogObserver

    from mqbroker.service import build_broker_service

    globalLogBeginner.beginLoggingTo([textFileLogObserver(sys.stdout)])
    service = build_broker_service(options["broker_config"], reactor)
    failures: list[Any] = []

    def start() -> None:
        try:
            service.startService()
        except Exception as error:  # e.g. a port in use: report it and exit non-zero
            failures.append(error)
            print(f"mqbroker serve: cannot start: {error}", file=sys.stderr)
            reactor.stop()

    reactor.callWhenRunning(start)
    reactor.addSystemEventTrigger("before", "shutdown", lambda: service.stopService() if service.running else None)
    reactor.run()
    return 1 if failures else 0
