"""``mqbroker certs init``: a development CA, a server certificate and client certificates."""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Any


def add_parser(commands: Any) -> None:
    """Register ``certs`` and its ``init`` subcommand."""
    parser = commands.add_parser("certs", help="create development TLS certificates",
                                 description="Create TLS certificates for development and test clusters.")
    actions = parser.add_subparsers(dest="certs_command", metavar="ACTION", required=True)
    init = actions.add_parser(
        "init",
        help="create a CA, a server certificate and client certificates",
        description="Create (or reuse) a development CA in DIR (ca.pem, ca-key.pem), a server certificate "
        "for the hosts given (server.pem, server-key.pem) and a certificate per client (NAME.pem, NAME-key.pem, "
        "CN=NAME). Keys are written with 0600 permissions.",
    )
    init.add_argument("--dir", required=True, type=pathlib.Path, help="directory for the files (created if needed)")
    init.add_argument("--host", action="append", default=[], metavar="NAME_OR_IP",
                      help="a DNS name or IP address the server is reached by (repeatable; default localhost, 127.0.0.1, ::1)")
    init.add_argument("--client", action="append", default=[], metavar="NAME",
                      help="create a client certificate with CN=NAME (repeatable)")
    init.add_argument("--broker", action="append", default=[], type=int, metavar="NODE_ID",
                      help="create broker NODE_ID's certificate, broker-NODE_ID.pem: a server certificate for the hosts "
                      "that also names the broker (SAN URI:urn:mqbroker:broker:NODE_ID), for controller_tls and "
                      "inter-broker TLS (repeatable)")
    init.set_defaults(run=run_init)


def run_init(arguments: argparse.Namespace) -> int:
    """Write the files and print the options that use them."""
    from mqbroker.security.certs import init_directory

    hosts = arguments.host or ["localhost", "127.0.0.1", "::1"]
    try:
        files = init_directory(arguments.dir, hosts, arguments.client, brokers=arguments.broker)
    except (ValueError, OSError) as error:
        print(f"mqbroker certs init: {error}", file=sys.stderr)
        return 2
    print(f"CA:     {files.ca} (key {files.ca_key}; keep it private)")
    print(f"server: {files.server} for {', '.join(hosts)}")
    for name, (certificate, _) in files.clients.items():
        print(f"client: {certificate} (CN={name})")
    for node_id, (certificate, key) in files.brokers.items():
        print(f"broker: {certificate} (Broker:{node_id}; start broker {node_id} with --tls-cert {certificate}"
              f" --tls-key {key})")
    print("\nbroker options:")
    print(f"  --tls-cert {files.server} --tls-key {files.server_key} --tls-ca {files.ca} --tls-client-auth required")
    print("client options:")
    if files.clients:
        name, (certificate, key) = next(iter(files.clients.items()))
        print(f"  --tls-ca {files.ca} --tls-cert {certificate} --tls-key {key}    (as {name})")
    else:
        print(f"  --tls-ca {files.ca}    (add --client NAME for certificates to use with --tls-client-auth required)")
    return 0
