"""A secured broker for the security tests: TLS on every front end, SCRAM users, ACLs, no anonymous access."""

from __future__ import annotations

import pathlib
import ssl
from collections.abc import Iterator
from dataclasses import dataclass

from mqbroker.security.certs import CertificateFiles, init_directory
from mqbroker.client import Admin
from mqbroker.client.security import ClientSecurity
from mqbroker.client.tls import client_ssl_context
from mqbroker.protocols.native.messages import AclBinding
from tests.integration.brokerprocess import BrokerProcess, free_port

SECURITY_TOML = """
[security]
allow_anonymous = false
authorizer = "acl"
super_users = ["User:admin"]
principal_mapping_rules = "RULE:^CN=(.*?)(,.*)?$/$1/,DEFAULT"
"""
PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"}
MQTT_LOG_TOPIC = "mqtt.messages"


@dataclass
class SecuredBroker:
    """The broker process, its TLS ports and the certificate files."""

    process: BrokerProcess
    files: CertificateFiles
    tls_ports: dict[str, int]

    @property
    def plain_bootstrap(self) -> str:
        """The plaintext native listener."""
        return self.process.bootstrap

    @property
    def tls_bootstrap(self) -> str:
        """The TLS native listener, by the name in the server certificate."""
        return f"localhost:{self.tls_ports['native']}"

    def client_context(self, name: str | None = None) -> ssl.SSLContext:
        """A client TLS context trusting the test CA, with ``name``'s certificate if given."""
        if name is None:
            return client_ssl_context(self.files.ca)
        certificate, key = self.files.clients[name]
        return client_ssl_context(self.files.ca, certificate, key)

    def security(self, user: str | None = None, mechanism: str = "SCRAM-SHA-512", certificate: str | None = None,
                 password: str | None = None) -> ClientSecurity:
        """TLS plus SCRAM credentials of ``user`` (or a client certificate)."""
        return ClientSecurity(ssl_context=self.client_context(certificate), sasl_mechanism=mechanism if user else None,
                              username=user, password=password or (PASSWORDS[user] if user else None))

    def admin(self) -> Admin:
        """An Admin authenticated as the super user by its client certificate."""
        return Admin(self.tls_bootstrap, security=self.security(certificate="admin"))


def acl(principal: str, operation: str, resource_type: str, name: str, permission: str = "allow",
        pattern_type: str = "literal") -> AclBinding:
    """An ACL binding (host *)."""
    return AclBinding(resource_type=resource_type, resource_name=name, pattern_type=pattern_type,
                      principal=principal, host="*", operation=operation, permission=permission)


def start_secured_broker(directory: pathlib.Path, extra_args: tuple[str, ...] = ()) -> Iterator[SecuredBroker]:
    """Certificates, a broker that requires authentication and ACLs, the users of ``PASSWORDS``."""
    files = init_directory(directory / "tls", ["localhost", "127.0.0.1"], ["admin", "alice", "bob"])
    config = directory / "security.toml"
    config.write_text(SECURITY_TOML)
    tls_ports = {name: free_port() for name in ("native", "mqtt", "amqp", "kafka")}
    process = BrokerProcess(data_dir=directory / "data", extra_args=[
        "--config", str(config), "--tls-cert", str(files.server), "--tls-key", str(files.server_key),
        "--tls-ca", str(files.ca), "--tls-client-auth", "optional",
        "--native-tls-port", str(tls_ports["native"]), "--mqtt-tls-port", str(tls_ports["mqtt"]),
        "--amqp-tls-port", str(tls_ports["amqp"]), "--kafka-tls-port", str(tls_ports["kafka"]), *extra_args,
    ])
    process.start()
    broker = SecuredBroker(process=process, files=files, tls_ports=tls_ports)
    try:
        with broker.admin() as admin:
            for user, password in PASSWORDS.items():
                admin.upsert_user(user, password, create=True)
        yield broker
    finally:
        process.kill()
