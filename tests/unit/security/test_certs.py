"""``mqbroker certs init``: files openssl accepts, the SANs asked for, private keys kept private."""

import argparse
import ipaddress
import stat
import subprocess

import pytest
from cryptography import x509

from mqbroker.security.certs import init_directory
from mqbroker.cli import certs as certs_command


def run_certs_init(*arguments):
    parser = argparse.ArgumentParser()
    certs_command.add_parser(parser.add_subparsers(dest="command"))
    parsed = parser.parse_args(["certs", "init", *arguments])
    return parsed.run(parsed)


def test_certs_init_writes_a_chain_openssl_verifies_with_the_requested_sans(tmp_path, capsys):
    assert run_certs_init("--dir", str(tmp_path), "--host", "broker.example", "--host", "10.1.2.3", "--client", "alice") == 0
    verified = subprocess.run(
        ["openssl", "verify", "-CAfile", "ca.pem", "server.pem", "alice.pem"],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    server = x509.load_pem_x509_certificate((tmp_path / "server.pem").read_bytes())
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["broker.example"]
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.1.2.3")]
    client = x509.load_pem_x509_certificate((tmp_path / "alice.pem").read_bytes())
    assert client.subject.rfc4514_string() == "CN=alice"
    printed = capsys.readouterr().out
    assert "--tls-cert" in printed and "--tls-client-auth required" in printed


def test_private_keys_are_readable_by_the_owner_only(tmp_path):
    init_directory(tmp_path, ["localhost"], ["bob"])
    for name in ("ca-key.pem", "server-key.pem", "bob-key.pem"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600, name


def test_running_again_reuses_the_ca(tmp_path):
    init_directory(tmp_path, ["localhost"], [])
    first_ca = (tmp_path / "ca.pem").read_bytes()
    init_directory(tmp_path, ["localhost"], ["carol"])
    assert (tmp_path / "ca.pem").read_bytes() == first_ca
    verified = subprocess.run(["openssl", "verify", "-CAfile", "ca.pem", "carol.pem"], cwd=tmp_path, check=False,
                              capture_output=True)
    assert verified.returncode == 0


@pytest.mark.parametrize("name", ["../evil", "ca", "", "a/b"])
def test_client_names_that_are_not_safe_file_names_are_refused(tmp_path, name, capsys):
    assert run_certs_init("--dir", str(tmp_path), "--client", name) == 2
    assert "client name" in capsys.readouterr().err


def test_broker_certificates_name_their_node_and_client_certificates_name_none(tmp_path, capsys):
    from mqbroker.security.inter_broker import BrokerCertificateRules
    from mqbroker.security.tls import certificate_identity

    assert run_certs_init("--dir", str(tmp_path), "--host", "localhost", "--client", "alice", "--broker", "2") == 0
    verified = subprocess.run(["openssl", "verify", "-CAfile", "ca.pem", "broker-2.pem"], cwd=tmp_path,
                              capture_output=True, text=True, check=False)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    rules = BrokerCertificateRules()
    broker = certificate_identity(x509.load_pem_x509_certificate((tmp_path / "broker-2.pem").read_bytes()))
    client = certificate_identity(x509.load_pem_x509_certificate((tmp_path / "alice.pem").read_bytes()))
    assert rules.node_id(broker.subject, broker.alternative_names) == 2
    assert "DNS:localhost" in broker.alternative_names  # also a server certificate for the hosts
    assert rules.node_id(client.subject, client.alternative_names) is None
    assert stat.S_IMODE((tmp_path / "broker-2-key.pem").stat().st_mode) == 0o600
    assert "Broker:2" in capsys.readouterr().out


def test_a_client_named_like_a_broker_file_is_refused(tmp_path, capsys):
    assert run_certs_init("--dir", str(tmp_path), "--client", "broker-1") == 2
