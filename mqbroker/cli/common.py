"""What every client command shares: --bootstrap, error reporting and exit codes, key=value parsing.

Exit codes: 0 done; 1 the broker refused or the operation failed (one line on stderr says why);
2 the command line is wrong; 3 no broker could be reached; 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from mqbroker.client.connection import BrokerUnavailableError, parse_bootstrap
from mqbroker.client.security import ClientSecurity
from mqbroker.errors import BrokerError

DEFAULT_BOOTSTRAP = "localhost:9393"
#: The environment variable that replaces ``DEFAULT_BOOTSTRAP`` as --bootstrap's default.
BOOTSTRAP_VARIABLE = "MQBROKER_BOOTSTRAP"

EXIT_OK = 0
#: The broker refused, or the operation failed.
EXIT_FAILED = 1
#: A wrong command line (argparse exits with 2 too).
EXIT_USAGE = 2
#: No broker of --bootstrap could be reached.
EXIT_UNREACHABLE = 3
#: Interrupted by Ctrl-C (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """Options that contradict each other or are malformed (exit code 2)."""


def bootstrap_default() -> str:
    """``$MQBROKER_BOOTSTRAP`` when set, else ``localhost:9393``."""
    return os.environ.get(BOOTSTRAP_VARIABLE) or DEFAULT_BOOTSTRAP


def bootstrap_list(text: str) -> str:
    """argparse type of --bootstrap: ``HOST:PORT[,HOST:PORT...]``, checked, kept as written."""
    try:
        parse_bootstrap(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def add_client_options(
    parser: argparse.ArgumentParser, password_options: tuple[str, ...] = ("--password", "--sasl-password")
) -> None:
    """Options every command that talks to a broker takes (``password_options``: the SASL password's
    spellings; `mqbroker users add` keeps ``--password`` for the new user's)."""
    parser.add_argument(
        "--bootstrap", "-b", default=bootstrap_default(), type=bootstrap_list, metavar="HOST:PORT[,HOST:PORT...]",
        help=f"brokers of the cluster, tried in turn [default: ${BOOTSTRAP_VARIABLE} or {DEFAULT_BOOTSTRAP}]",
    )
    security = parser.add_argument_group("security (see docs/security.md)")
    security.add_argument("--tls", action="store_true", help="connect with TLS, trusting the system CA store")
    security.add_argument("--tls-ca", metavar="FILE", help="connect with TLS, trusting this CA (PEM)")
    security.add_argument("--tls-cert", metavar="FILE", help="our client certificate (PEM), for mutual TLS")
    security.add_argument("--tls-key", metavar="FILE", help="the client certificate's private key (PEM)")
    security.add_argument("--sasl-mechanism", metavar="NAME",
                          help="SCRAM-SHA-512 (default with --username), SCRAM-SHA-256 or PLAIN")
    security.add_argument("--username", metavar="NAME", help="authenticate as this user (SASL)")
    security.add_argument(*password_options, dest="password", metavar="PASSWORD", help="the SASL user's password")


def client_security(arguments: argparse.Namespace) -> ClientSecurity | None:
    """The TLS and SASL settings of the common client options (None: plaintext, anonymous)."""
    if not (arguments.tls or arguments.tls_ca or arguments.tls_cert or arguments.username):
        return None
    try:
        return ClientSecurity.from_options(
            tls=arguments.tls, tls_ca=arguments.tls_ca, tls_cert=arguments.tls_cert, tls_key=arguments.tls_key,
            sasl_mechanism=arguments.sasl_mechanism, username=arguments.username, password=arguments.password,
        )
    except ValueError as error:
        raise UsageError(str(error)) from None


def parse_key_values(pairs: list[str] | None, option: str) -> dict[str, str]:
    """``["a=1", "b=2"]`` → ``{"a": "1", "b": "2"}``; a pair without '=' is a usage error."""
    result: dict[str, str] = {}
    for pair in pairs or []:
        key, separator, value = pair.partition("=")
        if not separator or not key:
            raise UsageError(f"{option} expects KEY=VALUE, got {pair!r}")
        result[key] = value
    return result


def reporting_errors(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Turn usage, broker and connection errors into one clear line on stderr and their exit code."""

    def wrapper(arguments: argparse.Namespace) -> int:
        try:
            return run(arguments)
        except UsageError as error:
            print(f"mqbroker: {error}", file=sys.stderr)
            return EXIT_USAGE
        except BrokerUnavailableError as error:
            print(f"mqbroker: cannot reach a broker at {arguments.bootstrap}: {error.message}. "
                  "Is one running? Start it with `twistd -n mqbroker`.", file=sys.stderr)
            return EXIT_UNREACHABLE
        except BrokerError as error:
            print(f"mqbroker: error: {error.message} ({error.code.name})", file=sys.stderr)
        except OSError as error:
            print(f"mqbroker: error: {error}", file=sys.stderr)
        return EXIT_FAILED

    return wrapper


def client_command(
    subparsers: Any, name: str, help_text: str, description: str,
    password_options: tuple[str, ...] = ("--password", "--sasl-password"),
) -> argparse.ArgumentParser:
    """A subcommand parser with the client options already added."""
    parser = subparsers.add_parser(name, help=help_text, description=description)
    add_client_options(parser, password_options)
    return parser
