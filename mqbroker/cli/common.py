"""What every client command shares: --bootstrap, error reporting, key=value parsing."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from mqbroker.client.security import ClientSecurity
from mqbroker.errors import BrokerError

DEFAULT_BOOTSTRAP = "localhost:9393"


def add_client_options(
    parser: argparse.ArgumentParser, password_options: tuple[str, ...] = ("--password", "--sasl-password")
) -> None:
    """Options every command that talks to a broker takes (``password_options``: the SASL password's
    spellings; `mqbroker users add` keeps ``--password`` for the new user's)."""
    parser.add_argument(
        "--bootstrap", "-b", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT",
        help=f"any broker of the cluster [default: {DEFAULT_BOOTSTRAP}]",
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
        raise SystemExit(f"mqbroker: {error}") from None


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


def client_command(
    subparsers: Any, name: str, help_text: str, description: str,
    password_options: tuple[str, ...] = ("--password", "--sasl-password"),
) -> argparse.ArgumentParser:
    """A subcommand parser with the client options already added."""
    parser = subparsers.add_parser(name, help=help_text, description=description)
    add_client_options(parser, password_options)
    return parser
