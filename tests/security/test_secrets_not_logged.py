"""Passwords never appear in logs, errors or metrics (issue 13).

A broker subprocess (``python -m semel.broker serve``, DEBUG logging) with PLAIN users from a JAAS
config, SCRAM users made with ``semel scram`` and with AlterUserScramCredentials, a PKCS12
keystore and truststore with a password, and the Prometheus endpoint on. Clients then
authenticate with right and wrong passwords over every mechanism, an admin describes the
broker's configuration, and the metrics are scraped. Separately the broker is started with
bad values for secret keys, so that it stops with a config error. Every password used - each
one distinctive - is then looked for in everything the broker printed, every answer it gave,
the metrics, the config errors, and every file of its data directory (SCRAM credentials are
stored salted and hashed): none may appear.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from semel.broker.testing import BrokerProcess
from semel.protocol.errors import Error
from tests.kafka_wire import KafkaWire, message
from tests.security.certs import make_tls_files

ROOT = Path(__file__).resolve().parents[2]
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36

PLAIN_PASSWORD = "Pl41n-Zq8Wv-secret"
ADMIN_PASSWORD = "Adm1n-Kx5Rt-secret"
SCRAM_PASSWORD = "Scr4m-Hy6Lp-secret"
ALTERED_PASSWORD = "Alt3r-Mn2Bc-secret"
KEYSTORE_PASSWORD = "Ks-Pw9Dj-secret"
WRONG_PASSWORD = "Wr0ng-Gu3ss-Fy7"
CONFIG_PASSWORD = "Cfg-Pw4Tn-secret"
JAAS_PASSWORD = "Jaas-Pw5Ss-secret"
SECRETS = (PLAIN_PASSWORD, ADMIN_PASSWORD, SCRAM_PASSWORD, ALTERED_PASSWORD, KEYSTORE_PASSWORD,
           WRONG_PASSWORD, CONFIG_PASSWORD, JAAS_PASSWORD)

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              f'user_plainuser="{PLAIN_PASSWORD}" user_admin="{ADMIN_PASSWORD}";')


def assert_no_secret(text: str | bytes, where: str) -> None:
    data = text if isinstance(text, bytes) else text.encode()
    for secret in SECRETS:
        assert secret.encode() not in data, f"{secret!r} appears in {where}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    return make_tls_files(tmp_path_factory.mktemp("tls"), password=KEYSTORE_PASSWORD)


@pytest.fixture(scope="module")
def broker(tmp_path_factory, tls):
    data = tmp_path_factory.mktemp("data")
    done = subprocess.run([sys.executable, "-m", "semel.broker", "scram", "--data-dir", str(data),
                           "--add", f"SCRAM-SHA-256=[name=scrammy,password={SCRAM_PASSWORD}]"],
                          check=True, cwd=ROOT, capture_output=True, text=True)
    assert "scrammy" in done.stdout + done.stderr  # it reports what it stored...
    assert_no_secret(done.stdout + done.stderr, "semel scram's output")  # ...but not the password
    metrics_port = free_port()
    props = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(tls.server_p12),
        "ssl.keystore.password": KEYSTORE_PASSWORD,
        "ssl.truststore.type": "PKCS12",
        "ssl.truststore.location": str(tls.truststore_p12),
        "ssl.truststore.password": KEYSTORE_PASSWORD,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        "allow.everyone.if.no.acl.found": "true",
        "auto.create.topics.enable": "true",
        "metrics.listener": f"127.0.0.1:{metrics_port}",
        "log.flush.mode": "none",
    }
    old_level = os.environ.get("SEMEL_LOG_LEVEL")
    os.environ["SEMEL_LOG_LEVEL"] = "DEBUG"  # the most the broker ever logs
    try:
        bp = BrokerProcess(data, props).start()
    finally:
        if old_level is None:
            del os.environ["SEMEL_LOG_LEVEL"]
        else:
            os.environ["SEMEL_LOG_LEVEL"] = old_level
    bp.data = data
    bp.metrics_port = metrics_port
    try:
        yield bp
    finally:
        bp.stop()


def sasl(bp: BrokerProcess, mechanism: str, user: str, password: str) -> dict:
    return {"bootstrap.servers": bp.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


_CLIENTS: list = []  # kept until the module ends: no client is torn down mid-test


def produce_one(config: dict) -> tuple[list, list[str]]:
    """Produce one record; (delivery errors, the messages of every error the client saw)."""
    seen: list[str] = []
    delivered: list = []
    producer = Producer({**config, "message.timeout.ms": 8000,
                         "error_cb": lambda e: seen.append(str(e))})
    producer.produce(f"s-{uuid.uuid4().hex[:6]}", b"x",
                     on_delivery=lambda e, _m: delivered.append(e))
    producer.flush(15)
    _CLIENTS.append(producer)
    seen += [str(e) for e in delivered if e is not None]
    return delivered, seen


def test_no_secret_in_logs_answers_metrics_or_files(broker, tls):
    answers: list[str] = []

    # successful authentications: PLAIN, SCRAM (made with `semel scram`), TLS
    for config in (sasl(broker, "PLAIN", "plainuser", PLAIN_PASSWORD),
                   sasl(broker, "SCRAM-SHA-256", "scrammy", SCRAM_PASSWORD),
                   {"bootstrap.servers": f"127.0.0.1:{broker.ports['SSL']}",
                    "security.protocol": "SSL", "ssl.ca.location": str(tls.ca_pem)}):
        delivered, seen = produce_one(config)
        assert [e is None for e in delivered] == [True], seen
        answers += seen

    # a SCRAM credential made by AlterUserScramCredentials, then used
    admin = AdminClient(sasl(broker, "PLAIN", "admin", ADMIN_PASSWORD))
    upsert = UserScramCredentialUpsertion(
        "altered", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
        ALTERED_PASSWORD.encode())
    for future in admin.alter_user_scram_credentials([upsert], request_timeout=20).values():
        assert future.result() is None
    described = {user: f.result() for user, f in
                 admin.describe_user_scram_credentials(["altered"]).items()}
    assert described["altered"].scram_credential_infos[0].iterations == 4096
    answers.append(repr(described))
    delivered, seen = produce_one(sasl(broker, "SCRAM-SHA-512", "altered", ALTERED_PASSWORD))
    assert [e is None for e in delivered] == [True], seen
    answers += seen

    # failed authentications: a wrong password for every mechanism and user kind
    for mechanism, user in (("PLAIN", "plainuser"), ("PLAIN", "nobody"),
                            ("SCRAM-SHA-256", "scrammy"), ("SCRAM-SHA-512", "altered")):
        delivered, seen = produce_one(sasl(broker, mechanism, user, WRONG_PASSWORD))
        assert [e is None for e in delivered] == [False]  # (KafkaError == None raises)
        assert any("uthentication" in s for s in seen), seen
        answers += seen
    # the broker's own error message, raw
    for user in ("plainuser", "admin"):
        with KafkaWire.connect(broker.bootstrap) as wire:
            wire.request(SASL_HANDSHAKE, 1, message(SASL_HANDSHAKE, "request", mechanism="PLAIN"))
            response = wire.request(SASL_AUTHENTICATE, 2, message(
                SASL_AUTHENTICATE, "request", auth_bytes=f"\0{user}\0{WRONG_PASSWORD}".encode()))
            assert response.error_code == Error.SASL_AUTHENTICATION_FAILED
            answers.append(response.error_message or "")
    # a password sent where the user name goes (a classic slip) is not echoed either
    with KafkaWire.connect(broker.bootstrap) as wire:
        wire.request(SASL_HANDSHAKE, 1, message(SASL_HANDSHAKE, "request", mechanism="PLAIN"))
        response = wire.request(SASL_AUTHENTICATE, 2, message(
            SASL_AUTHENTICATE, "request", auth_bytes=f"\0{WRONG_PASSWORD}\0x".encode()))
        assert response.error_code == Error.SASL_AUTHENTICATION_FAILED
        answers.append(response.error_message or "")

    # the broker's configuration, as an admin describes it: secrets are null and sensitive
    resource = ConfigResource(ConfigResource.Type.BROKER, "0")
    (entries,) = [f.result() for f in admin.describe_configs([resource],
                                                              request_timeout=20).values()]
    for name in ("ssl.keystore.password", "ssl.truststore.password"):
        entry = entries[name]
        assert (entry.value, entry.is_sensitive) == (None, True), name
        assert all(s.value is None for s in entry.synonyms.values()), name
    answers += [f"{e.name}={e.value} {[(s.name, s.value) for s in e.synonyms.values()]}"
                for e in entries.values()]

    # the metrics endpoint
    with urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics",
                                timeout=10) as r:
        metrics = r.read().decode()
    assert "semel_requests" in metrics
    assert 'semel_bad_input_total{reason="authentication_failed"}' in metrics

    log = "".join(broker.lines)
    assert "failed authentication" in log  # the failures were logged, without the password
    assert_no_secret(log, "the broker's output")
    for i, answer in enumerate(answers):
        assert_no_secret(answer, f"answer {i}: {answer[:200]}")
    assert_no_secret(metrics, "the metrics")
    for path in Path(broker.data).rglob("*"):
        if path.is_file():
            assert_no_secret(path.read_bytes(), str(path))


# -- config errors ---------------------------------------------------------------------------


def serve_fails(tmp_path: Path, settings: dict[str, str], env: dict[str, str] | None = None
                ) -> str:
    """Start `semel serve` with these settings; it must refuse to start. Its output."""
    args = [sys.executable, "-m", "semel.broker", "serve", "--host", "127.0.0.1", "--port", "0",
            "--data-dir", str(tmp_path / "data"), "--log-level", "DEBUG"]
    for key, value in settings.items():
        args += ["--set", f"{key}={value}"]
    done = subprocess.run(args, check=False, cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    assert done.returncode != 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def _tls_settings(tls, **over: str) -> dict[str, str]:
    return {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(tls.server_p12),
            "ssl.keystore.password": KEYSTORE_PASSWORD, **over}


def _jks_file(tls) -> Path:
    """A file that starts as a Java KeyStore does (semel reads PKCS12 under type JKS only)."""
    path = tls.server_p12.with_name("server.jks")
    path.write_bytes(b"\xfe\xed\xfe\xed" + bytes(60))
    return path


CONFIG_ERRORS = {
    "missing keystore": lambda tls: (_tls_settings(
        tls, **{"ssl.keystore.location": "/nonexistent/ks.p12",
                "ssl.keystore.password": CONFIG_PASSWORD}), {}, "ssl.keystore"),
    "wrong keystore password": lambda tls: (_tls_settings(
        tls, **{"ssl.keystore.password": CONFIG_PASSWORD}), {}, "ssl.keystore"),
    "wrong key password": lambda tls: ({
        "listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(tls.server_pem.bundle),
        "ssl.key.password": CONFIG_PASSWORD}, {}, "ssl."),
    "password for a typo key": lambda tls: ({"ssl.keystore.pasword": CONFIG_PASSWORD}, {},
                                            "ssl.keystore.pasword"),
    "a real JKS keystore": lambda tls: (_tls_settings(
        tls, **{"ssl.keystore.type": "JKS", "ssl.keystore.location": str(_jks_file(tls)),
                "ssl.keystore.password": CONFIG_PASSWORD}), {}, "jks"),
    "bad jaas config": lambda tls: ({
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
            'org.apache.kafka.common.security.plain.PlainLoginModule required '
            f'user_x="{JAAS_PASSWORD}" debug=true')}, {}, "jaas"),
    "jaas config of another module": lambda tls: ({
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
            'org.apache.kafka.common.security.scram.ScramLoginModule required '
            f'username="x" password="{JAAS_PASSWORD}";')}, {}, "jaas"),
    "missing keystore from the environment": lambda tls: (
        {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PKCS12"},
        {"SEMEL_SSL_KEYSTORE_LOCATION": "/nonexistent/ks.p12",
         "SEMEL_SSL_KEYSTORE_PASSWORD": CONFIG_PASSWORD}, "ssl.keystore"),
}


@pytest.mark.parametrize("name", list(CONFIG_ERRORS))
def test_config_errors_do_not_show_secrets(tmp_path, tls, name):
    settings, env, mentions = CONFIG_ERRORS[name](tls)
    output = serve_fails(tmp_path, settings, env)
    assert mentions in output.lower(), output  # the error names what is wrong...
    assert_no_secret(output, f"the config error ({name})")  # ...without the secret
