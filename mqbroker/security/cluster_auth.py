"""How this broker proves its identity to the others and what it demands of them, from the configuration.

``ClusterAuthentication.from_config`` decides once, at start-up, and refuses to start a cluster
that would run open or half-configured (``ConfigError`` with what to set):

* ``controller_tls = true`` needs ``tls_cert``, ``tls_key`` and ``tls_ca``, and our certificate
  must be a broker certificate naming this node (``mqbroker certs init --broker N``);
* a cluster (more than one voter) with security on (``allow_anonymous = false`` or the ACL
  authorizer) needs inter-broker credentials: ``controller_tls`` or the inter-broker SCRAM user
  for the controller, and ``inter_broker_tls`` or the SCRAM user for replica fetches and
  forwarded requests.

Then it builds the controller endpoints (handshake, connection budget, TLS) and says which
login the replica fetcher and the peer connections run after ApiVersions (``login``; the login
itself is the native client's, ``client/twisted/broker_login.py``).
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping
from dataclasses import dataclass

from cryptography import x509

from mqbroker.config import BrokerConfig, ConfigError
from mqbroker.security.inter_broker import (
    BrokerCertificateRules,
    HandshakeMethod,
    InterBrokerLogin,
    PeerPolicy,
    inter_broker_credentials,
)
from mqbroker.security.scram import ScramCredential, ScramMechanism
from mqbroker.security.tls import ClientAuth, ServerTlsFiles, certificate_identity


def security_on(config: BrokerConfig) -> bool:
    """True when clients must authenticate or be authorized: then brokers must too."""
    return not config.security_allow_anonymous or config.security_authorizer == "acl"


def read_password_file(path: str) -> str:
    """The first line of ``path`` (the inter-broker password); ConfigError naming the key if unusable."""
    try:
        text = pathlib.Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"configuration key 'security.inter_broker_password_file': cannot read {path!r}: "
                          f"{error.strerror}") from None
    password = text.splitlines()[0].strip() if text.strip() else ""
    if len(password) < 16:
        raise ConfigError("configuration key 'security.inter_broker_password_file': the password must be at least "
                          "16 characters (every broker of the cluster reads the same file)")
    return password


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterAuthentication:
    """This broker's inter-broker identity and the controller's policy."""

    node_id: int
    voters: frozenset[int]
    #: How we prove ourselves to other controllers.
    controller_method: HandshakeMethod
    #: The inter-broker SCRAM user (None: not configured).
    login: InterBrokerLogin | None
    credentials: Mapping[ScramMechanism, ScramCredential]
    certificate_rules: BrokerCertificateRules
    #: Whether the controller refuses peers that do not authenticate.
    require_authentication: bool

    @classmethod
    def from_config(cls, config: BrokerConfig, voters: frozenset[int]) -> ClusterAuthentication:
        """Decide, or raise ConfigError saying what is missing."""
        rules = BrokerCertificateRules(config.security_broker_certificate_rules)
        login = None
        credentials: Mapping[ScramMechanism, ScramCredential] = {}
        if config.security_inter_broker_password_file:
            password = read_password_file(config.security_inter_broker_password_file)
            login = InterBrokerLogin(username=config.security_inter_broker_user, password=password)
            credentials = inter_broker_credentials(config.cluster_id, login.username, password)
        if config.controller_tls:
            _check_controller_certificate(config, rules)
            method = HandshakeMethod.CERTIFICATE
        else:
            method = HandshakeMethod.SCRAM if login is not None else HandshakeMethod.NONE
        cluster = len(voters) > 1
        if cluster and security_on(config):
            if method is HandshakeMethod.NONE:
                raise ConfigError(
                    "security is on (allow_anonymous = false or authorizer = \"acl\") but the controller has no "
                    "inter-broker credentials: set controller_tls = true with broker certificates "
                    "(`mqbroker certs init --broker N`), or security.inter_broker_password_file")
            if not config.security_inter_broker_tls and login is None:
                raise ConfigError(
                    "security is on but replica fetches and forwarded requests have no inter-broker credentials: "
                    "set security.inter_broker_tls = true (broker certificates) or security.inter_broker_password_file")
        return cls(node_id=config.node_id, voters=voters, controller_method=method, login=login,
                   credentials=credentials, certificate_rules=rules,
                   require_authentication=security_on(config) or method is not HandshakeMethod.NONE)

    def policy(self) -> PeerPolicy:
        """What our controller listener accepts."""
        return PeerPolicy(voters=self.voters - {self.node_id}, require_authentication=self.require_authentication,
                          certificate_rules=self.certificate_rules,
                          scram_username=self.login.username if self.login else "", scram_credentials=self.credentials)

    @property
    def native_login_needed(self) -> bool:
        """True when replica fetches and forwarded requests log in with SCRAM (no inter-broker TLS)."""
        return self.login is not None


def _check_controller_certificate(config: BrokerConfig, rules: BrokerCertificateRules) -> None:
    if not (config.tls_cert and config.tls_ca):
        raise ConfigError("controller_tls = true needs tls_cert, tls_key and tls_ca (the CA of the brokers' "
                          "certificates); without them the controller would run in plaintext")
    try:
        certificate = x509.load_pem_x509_certificate(pathlib.Path(config.tls_cert).read_bytes())
    except (OSError, ValueError) as error:
        raise ConfigError(f"configuration key 'tls_cert': cannot load {config.tls_cert!r}: {error}") from None
    identity = certificate_identity(certificate)
    named = rules.node_id(identity.subject, identity.alternative_names)
    if named != config.node_id:
        raise ConfigError(
            f"controller_tls = true but {config.tls_cert!r} is not broker {config.node_id}'s certificate "
            f"({'it names broker ' + str(named) if named is not None else 'it is not a broker certificate'}); "
            f"issue one with `mqbroker certs init --broker {config.node_id}`")


def controller_tls_files(config: BrokerConfig) -> ServerTlsFiles:
    """The controller listener's TLS files: mutual TLS always (a peer without a certificate is refused)."""
    return ServerTlsFiles(certificate=pathlib.Path(config.tls_cert), key=pathlib.Path(config.tls_key or config.tls_cert),
                          ca=pathlib.Path(config.tls_ca), client_auth=ClientAuth.REQUIRED)

