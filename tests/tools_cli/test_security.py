"""``--command-config``: the tools over TLS and SASL, against a broker with SASL_PLAINTEXT,
SASL_SSL and SSL (client certificates required) listeners and the authorizer on. Each
mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) and trust store kind (PEM, PKCS12) gets a
topic created and listed, and a command that connects to the broker Metadata advertises
(``groups list``); a wrong password and an untrusted certificate fail in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from semel.broker.security.ssl_principal import principal_from_certificate
from semel.broker.testing import BrokerProcess
from tests.security.certs import make_tls_files
from tests.tools_cli.semel_cli import semel

ROOT = Path(__file__).resolve().parents[2]
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_admin="admin-secret";')


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    return make_tls_files(tmp_path_factory.mktemp("tls"), clients=("alice",))


@pytest.fixture(scope="module")
def secured(tmp_path_factory, tls):
    data = tmp_path_factory.mktemp("data")
    for spec in ("SCRAM-SHA-256=[name=bob,password=bob-secret]",
                 "SCRAM-SHA-512=[name=carol,password=carol-secret]"):
        subprocess.run([sys.executable, "-m", "semel.broker", "scram", "--data-dir", str(data),
                        "--add", spec], check=True, cwd=ROOT, capture_output=True)
    alice = principal_from_certificate(tls.clients["alice"].der())
    props = {
        "listeners": ("PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,"
                      "SASL_SSL://127.0.0.1:0,SSL://127.0.0.1:0"),
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(tls.server_p12),
        "ssl.keystore.password": tls.password,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls.ca_pem),
        "ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:admin;User:bob;User:carol;{alice}",
        "log.flush.mode": "none",
    }
    with BrokerProcess(data, props) as b:
        yield b


def config_file(tmp_path: Path, name: str, lines: list[str]) -> Path:
    path = tmp_path / f"{name}.properties"
    path.write_text("# client properties\n" + "\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("listener, lines", [
    ("SASL_PLAINTEXT", ["security.protocol=SASL_PLAINTEXT", "sasl.mechanism=PLAIN",
                        ('sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule'
                         ' required username="admin" password="admin-secret";')]),
    ("SASL_SSL", ["security.protocol=SASL_SSL", "sasl.mechanism=SCRAM-SHA-512",
                  "sasl.username=carol", "sasl.password=carol-secret",
                  "ssl.truststore.type=PEM", "ssl.truststore.location={ca_pem}"]),
    ("SASL_SSL", ["security.protocol: SASL_SSL", "sasl.mechanism = SCRAM-SHA-256",
                  # a line continued with a backslash, as Java properties allow
                  ("sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
                   "required \\"), '  username="bob" password="bob-secret";',
                  "ssl.truststore.type=PKCS12", "ssl.truststore.location={truststore_p12}",
                  "ssl.truststore.password={password}"]),
    ("SSL", ["security.protocol=SSL", "ssl.ca.location={ca_pem}",
             "ssl.certificate.location={alice_cert}", "ssl.key.location={alice_key}"]),
], ids=["plain", "scram-512-pem", "scram-256-pkcs12", "mutual-tls"])
def test_secured_listeners(secured, tls, tmp_path, listener, lines):
    values = {"ca_pem": tls.ca_pem, "truststore_p12": tls.truststore_p12,
              "password": tls.password, "alice_cert": tls.client_pem["alice"].cert,
              "alice_key": tls.client_pem["alice"].key}
    path = config_file(tmp_path, listener, [line.format(**values) for line in lines])
    bootstrap = f"127.0.0.1:{secured.ports[listener]}"
    topic = f"sec-{tmp_path.name[-12:].strip('_')}"
    result = semel("topics", "create", "--topic", topic, "--command-config", path,
                   bootstrap=bootstrap)
    assert result.returncode == 0, result.stderr
    assert topic in semel("topics", "list", "--command-config", path, bootstrap=bootstrap,
                          json_output=True).json["topics"]
    # groups list connects to every broker Metadata names, over the same listener
    assert semel("groups", "list", "--command-config", path, bootstrap=bootstrap,
                 json_output=True).json == {"groups": []}


def test_security_failures(secured, tmp_path):
    sasl = f"127.0.0.1:{secured.ports['SASL_PLAINTEXT']}"
    wrong = config_file(tmp_path, "wrong", [
        "security.protocol=SASL_PLAINTEXT", "sasl.mechanism=SCRAM-SHA-256",
        "sasl.username=bob", "sasl.password=not-it"])
    result = semel("topics", "list", "--command-config", wrong, bootstrap=sasl)
    assert result.returncode == 1
    assert result.error_line.startswith("semel topics list: SASL_AUTHENTICATION_FAILED:")

    untrusted = config_file(tmp_path, "untrusted", ["security.protocol=SASL_SSL",
                                                    "sasl.username=bob",
                                                    "sasl.password=bob-secret"])
    result = semel("topics", "list", "--command-config", untrusted,
                   bootstrap=f"127.0.0.1:{secured.ports['SASL_SSL']}")
    assert result.returncode == 2
    assert "TLS handshake" in result.error_line and "CERTIFICATE_VERIFY_FAILED" in \
        result.error_line

    missing = semel("topics", "list", "--command-config", tmp_path / "nope.properties",
                    bootstrap=sasl)
    assert missing.returncode == 2 and "cannot read" in missing.error_line
    jks = config_file(tmp_path, "jks", ["security.protocol=SSL", "ssl.truststore.type=JKS",
                                        "ssl.truststore.location=/x.jks"])
    result = semel("topics", "list", "--command-config", jks, bootstrap=sasl)
    assert result.returncode == 2 and "JKS" in result.error_line
