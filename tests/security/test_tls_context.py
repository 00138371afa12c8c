"""broker.security.tls: server SSLContexts from Kafka's ssl.* settings, tried with real handshakes.

Each handshake runs an asyncio TLS server built from load_config(...) and a Python ssl client;
the server answers with the principal it derives from the client's certificate.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import ssl
import subprocess
import tempfile
from pathlib import Path

import pytest

from semel.broker.config import BrokerConfig, ConfigError, load_config
from semel.broker.security.tls import (
    CIPHER_SUITES,
    build_server_context,
    principal_from_certificate,
)
from tests.security.certs import CertificateAuthority, TlsFiles, client_name, make_tls_files

SECRET = "test-secret"


@pytest.fixture(scope="session")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(
        tmp_path_factory.mktemp("tls"), password=SECRET, clients=("alice", "bob"), java=True
    )


def ssl_config(*settings: str, listener: str = "SSL://127.0.0.1:0") -> BrokerConfig:
    return load_config(None, [f"listeners={listener}", *settings], {})


def pem_keystore(tls: TlsFiles) -> list[str]:
    return [
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={tls.server_pem.bundle}",
        f"ssl.key.password={SECRET}",
    ]


def client_context(
    tls: TlsFiles,
    cert: str | None = None,
    *,
    ca: Path | None = None,
    minimum: ssl.TLSVersion | None = None,
) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca or tls.ca_pem))
    if cert is not None:
        files = tls.client_pem[cert]
        ctx.load_cert_chain(files.cert, files.key)
    if minimum is not None:
        ctx.minimum_version = minimum
    return ctx


async def exchange(config: BrokerConfig, client: ssl.SSLContext, name: str = "SSL") -> dict:
    """One connection: what the server saw (principal, version, cipher), or the client's error."""
    sec = config.listener_security(name)
    server_ctx = build_server_context(sec)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        obj = writer.get_extra_info("ssl_object")
        principal = principal_from_certificate(
            obj.getpeercert(binary_form=True), sec.principal_mapper or "DEFAULT"
        )
        writer.write(f"{principal}|{obj.version()}|{obj.cipher()[0]}\n".encode())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="localhost"), 10
        )
        try:
            line = await asyncio.wait_for(reader.readline(), 10)
        finally:
            writer.close()
        if not line:
            return {"error": "closed"}
        principal, version, cipher = line.decode().rstrip("\n").split("|")
        return {"principal": principal, "version": version, "cipher": cipher}
    except (ssl.SSLError, ConnectionError, OSError) as e:
        return {"error": type(e).__name__}
    finally:
        server.close()
        await server.wait_closed()


# ------------------------------------------------------------------------------- key stores


async def test_pem_file_keystore_without_client_auth(tls: TlsFiles) -> None:
    result = await exchange(ssl_config(*pem_keystore(tls)), client_context(tls))
    assert result["principal"] == "User:ANONYMOUS"
    assert result["version"] in ("TLSv1.2", "TLSv1.3")


async def test_inline_pem_keystore_and_truststore_mutual_tls(tls: TlsFiles) -> None:
    config = ssl_config(
        "ssl.keystore.type=PEM",
        f"ssl.keystore.certificate.chain={tls.server.chain_pem()}",
        f"ssl.keystore.key={tls.server.key_pem(SECRET)}",
        f"ssl.key.password={SECRET}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.certificates={tls.ca.cert_pem()}",
        "ssl.client.auth=required",
    )
    result = await exchange(config, client_context(tls, "alice"))
    assert result == {**result, "principal": "User:CN=alice,OU=eng,O=Acme,C=US"}
    assert "error" in await exchange(config, client_context(tls))  # no certificate


async def test_pkcs12_keystore_and_truststore(tls: TlsFiles) -> None:
    config = ssl_config(
        "ssl.keystore.type=PKCS12",
        f"ssl.keystore.location={tls.server_p12}",
        f"ssl.keystore.password={SECRET}",
        "ssl.truststore.type=PKCS12",
        f"ssl.truststore.location={tls.truststore_p12}",
        f"ssl.truststore.password={SECRET}",
        "ssl.client.auth=required",
    )
    assert (await exchange(config, client_context(tls, "bob")))["principal"] == (
        "User:CN=bob,OU=eng,O=Acme,C=US"
    )


async def test_default_jks_type_reads_pkcs12_files_and_keytool_truststores(tls: TlsFiles) -> None:
    if tls.java_truststore_p12 is None:
        pytest.skip("keytool is not installed")
    config = ssl_config(  # ssl.keystore.type / ssl.truststore.type left at Kafka's JKS
        f"ssl.keystore.location={tls.server_p12}",
        f"ssl.keystore.password={SECRET}",
        f"ssl.truststore.location={tls.java_truststore_p12}",
        f"ssl.truststore.password={SECRET}",
        "ssl.client.auth=required",
    )
    assert config.listener_security("SSL").ssl.keystore_type == "JKS"
    result = await exchange(config, client_context(tls, "alice"))
    assert result["principal"] == "User:CN=alice,OU=eng,O=Acme,C=US"


async def test_requested_client_auth_takes_a_certificate_or_none(tls: TlsFiles) -> None:
    config = ssl_config(
        *pem_keystore(tls),
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={tls.ca_pem}",
        "ssl.client.auth=requested",
    )
    assert (await exchange(config, client_context(tls)))["principal"] == "User:ANONYMOUS"
    assert (await exchange(config, client_context(tls, "alice")))["principal"] == (
        "User:CN=alice,OU=eng,O=Acme,C=US"
    )


async def test_certificates_from_another_ca_are_refused(tls: TlsFiles, tmp_path: Path) -> None:
    other = CertificateAuthority.create("someone else's CA")
    mallory = other.issue(client_name("alice", ou="eng", o="Acme", c="US")).write_pem(
        tmp_path / "mallory"
    )
    config = ssl_config(
        *pem_keystore(tls),
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={tls.ca_pem}",
        "ssl.client.auth=required",
    )
    client = client_context(tls)
    client.load_cert_chain(mallory.cert, mallory.key)
    assert "error" in await exchange(config, client)
    # and a client that trusts another CA refuses the server
    other_ca = tmp_path / "other-ca.crt"
    other_ca.write_text(other.cert_pem())
    assert await exchange(config, client_context(tls, "alice", ca=other_ca)) == {
        "error": "SSLCertVerificationError"
    }


async def test_mapping_rules_apply_to_the_certificate_dn(tls: TlsFiles) -> None:
    config = ssl_config(
        *pem_keystore(tls),
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={tls.ca_pem}",
        "ssl.client.auth=required",
        "ssl.principal.mapping.rules=RULE:^CN=(.*?),OU=eng,.*$/$1@eng/U,DEFAULT",
    )
    assert (await exchange(config, client_context(tls, "alice")))["principal"] == "User:ALICE@ENG"


async def test_per_listener_keystores(tls: TlsFiles, tmp_path: Path) -> None:
    other = CertificateAuthority.create("external CA")
    external = other.issue("localhost", server=True)
    ext_p12 = external.write_pkcs12(tmp_path / "external.p12", "ext-secret")
    (tmp_path / "external-ca.crt").write_text(other.cert_pem())
    config = load_config(
        None,
        [
            "listeners=INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
            "listener.security.protocol.map=INTERNAL:SSL,EXTERNAL:SSL",
            *pem_keystore(tls),
            "listener.name.external.ssl.keystore.type=PKCS12",
            f"listener.name.external.ssl.keystore.location={ext_p12}",
            "listener.name.external.ssl.keystore.password=ext-secret",
            "listener.name.external.ssl.key.password=",
        ],
        {},
    )
    assert (await exchange(config, client_context(tls), "INTERNAL"))["principal"] == (
        "User:ANONYMOUS"
    )
    ext_client = client_context(tls, ca=tmp_path / "external-ca.crt")
    assert (await exchange(config, ext_client, "EXTERNAL"))["principal"] == "User:ANONYMOUS"
    assert "error" in await exchange(config, client_context(tls), "EXTERNAL")


def test_sasl_ssl_asks_for_client_certificates_only_with_the_listener_prefix(tls: TlsFiles) -> None:
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'user_admin="admin-secret";'
    )
    base = [
        "listeners=SASL_SSL://127.0.0.1:0",
        *pem_keystore(tls),
        "sasl.enabled.mechanisms=PLAIN",
        f"listener.name.sasl_ssl.plain.sasl.jaas.config={jaas}",
        f"ssl.truststore.location={tls.ca_pem}",
        "ssl.truststore.type=PEM",
    ]
    assert (
        load_config(None, [*base, "ssl.client.auth=required"], {})
        .listener_security("SASL_SSL")
        .ssl.client_auth
        == "none"
    )
    config = load_config(None, [*base, "listener.name.sasl_ssl.ssl.client.auth=required"], {})
    sec = config.listener_security("SASL_SSL")
    assert sec.ssl.client_auth == "required"
    assert build_server_context(sec).verify_mode == ssl.CERT_REQUIRED
    assert sec.principal_mapper is None  # the principal comes from SASL


# ------------------------------------------------------------------------------- versions, ciphers


async def test_enabled_protocols_bound_the_version(tls: TlsFiles) -> None:
    config = ssl_config(*pem_keystore(tls), "ssl.enabled.protocols=TLSv1.2")
    assert (await exchange(config, client_context(tls)))["version"] == "TLSv1.2"
    assert "error" in await exchange(config, client_context(tls, minimum=ssl.TLSVersion.TLSv1_3))
    config = ssl_config(*pem_keystore(tls), "ssl.enabled.protocols=TLSv1.3")
    assert (await exchange(config, client_context(tls)))["version"] == "TLSv1.3"


async def test_cipher_suites_take_kafkas_names(tls: TlsFiles) -> None:
    config = ssl_config(
        *pem_keystore(tls), "ssl.cipher.suites=TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"
    )
    result = await exchange(config, client_context(tls))
    assert (result["version"], result["cipher"]) == ("TLSv1.2", "ECDHE-ECDSA-AES256-GCM-SHA384")
    config = ssl_config(*pem_keystore(tls), "ssl.cipher.suites=ECDHE-ECDSA-AES128-GCM-SHA256")
    assert (await exchange(config, client_context(tls)))["cipher"] == (
        "ECDHE-ECDSA-AES128-GCM-SHA256"
    )
    config = ssl_config(*pem_keystore(tls), "ssl.cipher.suites=TLS_AES_256_GCM_SHA384")
    assert (await exchange(config, client_context(tls)))["version"] == "TLSv1.3"


def test_cipher_suite_names_match_openssl() -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command is not installed")
    out = subprocess.run(
        [openssl, "ciphers", "-stdname", "ALL"], capture_output=True, text=True, check=True
    ).stdout
    pairs = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] == "-":
            pairs[parts[0]] = parts[2]
    checked = [name for name in CIPHER_SUITES if name in pairs]
    assert len(checked) >= 20
    assert {name: pairs[name] for name in checked} == {n: CIPHER_SUITES[n] for n in checked}


# ------------------------------------------------------------------------------- errors at start


def error_of(*settings: str, listener: str = "SSL://127.0.0.1:0") -> str:
    with pytest.raises(ConfigError) as info:
        ssl_config(*settings, listener=listener)
    message = str(info.value)
    assert "\n" not in message
    for secret in (SECRET, "wrong-secret", "PRIVATE KEY", "BEGIN CERT"):
        assert secret not in message, message
    return message


def test_material_errors_are_one_line_without_secrets(tls: TlsFiles, tmp_path: Path) -> None:
    jks = tmp_path / "old.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed" + os.urandom(64))
    mismatched = tmp_path / "mismatched.pem"
    mismatched.write_text(tls.clients["alice"].key_pem() + tls.server.chain_pem())
    p12 = f"ssl.keystore.location={tls.server_p12}"
    cases = [
        (
            [p12, "ssl.keystore.password=wrong-secret"],
            "listener SSL: cannot read key store '" + str(tls.server_p12) + "': wrong "
            "ssl.keystore.password",
        ),
        ([p12], "listener SSL: ssl.keystore.password is required"),
        (
            [
                "ssl.keystore.type=PEM",
                f"ssl.keystore.location={tls.server_pem.bundle}",
                "ssl.key.password=wrong-secret",
            ],
            "listener SSL: wrong ssl.key.password",
        ),
        (
            ["ssl.keystore.type=PEM", f"ssl.keystore.location={tls.server_pem.bundle}"],
            "listener SSL: the private key in key store",
        ),
        (
            [f"ssl.keystore.location={tmp_path / 'missing.p12'}", "ssl.keystore.password=x"],
            "listener SSL: ssl.keystore.location: file",
        ),
        (
            ["ssl.keystore.type=PEM", f"ssl.keystore.location={mismatched}"],
            "listener SSL: the private key does not match any certificate",
        ),
        (
            [f"ssl.keystore.location={jks}", f"ssl.keystore.password={SECRET}"],
            "listener SSL: key store '" + str(jks) + "' is a JKS file, which semel cannot read: "
            "convert it to PKCS12 with keytool -importkeystore",
        ),
        (
            [*pem_keystore(tls), f"ssl.keystore.password={SECRET}"],
            "listener SSL: ssl.keystore.password cannot be used with PEM",
        ),
        (
            ["ssl.keystore.type=PEM", f"ssl.keystore.key={tls.server.key_pem()}"],
            "listener SSL: ssl.keystore.certificate.chain must be set too",
        ),
        (
            [
                f"ssl.keystore.key={tls.server.key_pem()}",
                f"ssl.keystore.certificate.chain={tls.server.chain_pem()}",
            ],
            (
                "listener SSL: ssl.keystore.key and ssl.keystore.certificate.chain need "
                "ssl.keystore.type=PEM"
            ),
        ),
        (
            [
                *pem_keystore(tls),
                "ssl.truststore.type=PEM",
                f"ssl.truststore.location={tls.ca_pem}",
                f"ssl.truststore.password={SECRET}",
            ],
            "listener SSL: ssl.truststore.password cannot be used with PEM",
        ),
        (
            [
                *pem_keystore(tls),
                f"ssl.truststore.location={tls.truststore_p12}",
                "ssl.truststore.password=wrong-secret",
            ],
            "listener SSL: cannot read trust store",
        ),
        (
            [
                *pem_keystore(tls),
                "ssl.truststore.type=PEM",
                f"ssl.truststore.location={tls.server_pem.key}",
            ],
            "listener SSL: no PEM certificate in trust store",
        ),
        (
            [*pem_keystore(tls), "ssl.cipher.suites=TLS_FAKE_WITH_NOTHING"],
            (
                "listener SSL: ssl.cipher.suites: TLS_FAKE_WITH_NOTHING is not a suite semel can "
                "translate"
            ),
        ),
        (
            [*pem_keystore(tls), "ssl.cipher.suites=NOT-A-CIPHER"],
            "listener SSL: ssl.cipher.suites: OpenSSL knows no cipher suite 'NOT-A-CIPHER'",
        ),
        (
            [
                *pem_keystore(tls),
                "ssl.cipher.suites=TLS_AES_128_GCM_SHA256",
                "ssl.enabled.protocols=TLSv1.2",
            ],
            "listener SSL: ssl.cipher.suites (TLS_AES_128_GCM",
        ),
        ([], "SSL listener SSL needs a key store: set ssl.keystore.location"),
    ]
    for settings, expected in cases:
        message = error_of(*settings)
        assert message.startswith(expected), (settings, message)


def test_temporary_key_files_are_removed(tls: TlsFiles) -> None:
    config = ssl_config(*pem_keystore(tls))
    before = {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("semel-tls-")}
    for _ in range(3):
        build_server_context(config.listener_security("SSL"))
    after = {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("semel-tls-")}
    assert after <= before


def test_build_server_context_refuses_a_plaintext_listener() -> None:
    with pytest.raises(ConfigError, match="does not use TLS"):
        build_server_context(load_config(None, [], {}).listener_security("PLAINTEXT"))


def test_a_pem_file_under_a_store_type_says_so(tls: TlsFiles) -> None:
    message = error_of(f"ssl.keystore.location={tls.server_pem.bundle}", "ssl.keystore.password=x")
    assert message.endswith("is a PEM file: set ssl.keystore.type=PEM"), message
    message = error_of(*pem_keystore(tls), f"ssl.truststore.location={tls.ca_pem}")
    assert message.endswith("is a PEM file: set ssl.truststore.type=PEM"), message
