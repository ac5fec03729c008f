"""Development certificates: a private CA, a server certificate for given hosts, client certificates.

For test and development clusters only (production should use the organisation's CA). Keys are
ECDSA P-256, written with 0600 permissions; certificates are PEM. An existing CA in the directory
is reused, so running ``certs init`` again adds clients or hosts without invalidating the others.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import pathlib
import re
from collections.abc import Sequence
import dataclasses
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_NAME = "mqbroker development CA"
CA_VALID_DAYS = 3650
LEAF_VALID_DAYS = 825
PrivateKey = ec.EllipticCurvePrivateKey
_CLIENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
_RESERVED_NAMES = {"ca", "ca-key", "server", "server-key"}
_BROKER_FILE = re.compile(r"broker-[0-9]+")


@dataclass(frozen=True, slots=True, kw_only=True)
class Issued:
    """A certificate and its key."""

    certificate: x509.Certificate
    key: PrivateKey


@dataclass(frozen=True, slots=True, kw_only=True)
class CertificateFiles:
    """Where ``init_directory`` wrote everything."""

    ca: pathlib.Path
    ca_key: pathlib.Path
    server: pathlib.Path
    server_key: pathlib.Path
    clients: dict[str, tuple[pathlib.Path, pathlib.Path]]
    #: ``broker-N.pem``, ``broker-N-key.pem`` by node id.
    brokers: dict[int, tuple[pathlib.Path, pathlib.Path]] = dataclasses.field(default_factory=dict)


def _new_key() -> PrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(subject: x509.Name, issuer: x509.Name, key: PrivateKey, now: datetime.datetime, days: int) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # tolerate small clock skew
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )


def create_ca(now: datetime.datetime, common_name: str = CA_NAME) -> Issued:
    """A self-signed CA allowed to sign leaf certificates only."""
    key = _new_key()
    certificate = (
        _builder(_name(common_name), _name(common_name), key, now, CA_VALID_DAYS)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return Issued(certificate=certificate, key=key)


def _leaf(
    ca: Issued, common_name: str, now: datetime.datetime, usages: Sequence[x509.ObjectIdentifier]
) -> tuple[x509.CertificateBuilder, PrivateKey]:
    key = _new_key()
    return (
        _builder(_name(common_name), ca.certificate.subject, key, now, LEAF_VALID_DAYS)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False
        )
    ), key


def alternative_names(hosts: Sequence[str]) -> list[x509.GeneralName]:
    """DNS names and IP addresses for ``hosts`` (each one is tried as an IP address first)."""
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def issue_server(ca: Issued, hosts: Sequence[str], now: datetime.datetime) -> Issued:
    """A broker certificate whose SANs are ``hosts``; CN is the first host. It is a client certificate too,
    which a broker presents to other brokers (inter-broker and controller TLS)."""
    assert hosts, "a server certificate needs at least one host"
    builder, key = _leaf(ca, hosts[0], now, (ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH))
    builder = builder.add_extension(x509.SubjectAlternativeName(alternative_names(hosts)), critical=False)
    return Issued(certificate=builder.sign(ca.key, hashes.SHA256()), key=key)


def issue_broker(ca: Issued, node_id: int, hosts: Sequence[str], now: datetime.datetime) -> Issued:
    """Broker ``node_id``'s certificate: a server certificate for ``hosts`` that also carries the SAN
    ``URI:urn:mqbroker:broker:<node_id>``, which the broker certificate rules map to ``Broker:<node_id>``."""
    from mqbroker.security.inter_broker import broker_uri

    assert hosts and node_id > 0
    builder, key = _leaf(ca, f"broker-{node_id}", now,
                         (ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH))
    names = [*alternative_names(hosts), x509.UniformResourceIdentifier(broker_uri(node_id))]
    builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return Issued(certificate=builder.sign(ca.key, hashes.SHA256()), key=key)


def issue_client(ca: Issued, name: str, now: datetime.datetime) -> Issued:
    """A client certificate with CN=``name`` (the principal under the default mapping rule)."""
    builder, key = _leaf(ca, name, now, (ExtendedKeyUsageOID.CLIENT_AUTH,))
    return Issued(certificate=builder.sign(ca.key, hashes.SHA256()), key=key)


def write_certificate(path: pathlib.Path, certificate: x509.Certificate) -> None:
    """Write ``certificate`` as PEM."""
    path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))


def write_key(path: pathlib.Path, key: PrivateKey) -> None:
    """Write ``key`` as unencrypted PKCS#8 PEM, readable by the owner only (created 0600, never wider)."""
    data = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    temporary = path.with_name(path.name + ".tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)
    os.chmod(temporary, 0o600)  # O_CREAT's mode does not apply to a file that already existed
    os.replace(temporary, path)


def load_or_create_ca(directory: pathlib.Path, now: datetime.datetime) -> Issued:
    """The CA in ``directory`` (``ca.pem``, ``ca-key.pem``), created if absent."""
    certificate_path, key_path = directory / "ca.pem", directory / "ca-key.pem"
    if certificate_path.exists() and key_path.exists():
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey), f"{key_path} is not an EC key"
        return Issued(certificate=x509.load_pem_x509_certificate(certificate_path.read_bytes()), key=key)
    ca = create_ca(now)
    write_certificate(certificate_path, ca.certificate)
    write_key(key_path, ca.key)
    return ca


def init_directory(
    directory: pathlib.Path, hosts: Sequence[str], clients: Sequence[str], now: datetime.datetime | None = None,
    brokers: Sequence[int] = (),
) -> CertificateFiles:
    """Create (or reuse) the CA, then a server certificate for ``hosts``, one per client name and one per
    broker node id (``broker-N.pem``: a server certificate for ``hosts`` naming broker N)."""
    for name in clients:
        if not _CLIENT_NAME.fullmatch(name) or name in _RESERVED_NAMES or _BROKER_FILE.fullmatch(name):
            raise ValueError(f"client name {name!r} must be letters, digits, '.', '_', '@', '-' (and not ca or server)")
    now = now or datetime.datetime.now(datetime.timezone.utc)
    directory.mkdir(parents=True, exist_ok=True)
    ca = load_or_create_ca(directory, now)
    server = issue_server(ca, hosts, now)
    write_certificate(directory / "server.pem", server.certificate)
    write_key(directory / "server-key.pem", server.key)
    client_files: dict[str, tuple[pathlib.Path, pathlib.Path]] = {}
    for name in clients:
        client = issue_client(ca, name, now)
        client_files[name] = (directory / f"{name}.pem", directory / f"{name}-key.pem")
        write_certificate(client_files[name][0], client.certificate)
        write_key(client_files[name][1], client.key)
    broker_files: dict[int, tuple[pathlib.Path, pathlib.Path]] = {}
    for node_id in brokers:
        if node_id < 1:
            raise ValueError(f"broker node id {node_id} must be at least 1")
        issued = issue_broker(ca, node_id, hosts, now)
        broker_files[node_id] = (directory / f"broker-{node_id}.pem", directory / f"broker-{node_id}-key.pem")
        write_certificate(broker_files[node_id][0], issued.certificate)
        write_key(broker_files[node_id][1], issued.key)
    return CertificateFiles(
        brokers=broker_files,
        ca=directory / "ca.pem",
        ca_key=directory / "ca-key.pem",
        server=directory / "server.pem",
        server_key=directory / "server-key.pem",
        clients=client_files,
    )
