"""broker.config, security part: listeners and protocols, per-listener keys, SASL, authorizer,
TLS settings, and secrets kept out of every message."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from semel.broker.config import (
    BrokerConfig,
    ConfigError,
    Listener,
    Password,
    env_var_name,
    load_config,
)
from semel.broker.security import Principal
from tests.security.certs import TlsFiles, make_tls_files

SECRET = "hunter2-secret"
PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    f'user_admin="{SECRET}" user_alice="alice-pw";'
)
SASL = [
    "listeners=SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms=PLAIN",
    f"listener.name.sasl_plaintext.plain.sasl.jaas.config={PLAIN_JAAS}",
]


def load(*overrides: str, env: dict[str, str] | None = None, **kw) -> BrokerConfig:
    return load_config(None, list(overrides), env or {}, **kw)


def error_of(*overrides: str, env: dict[str, str] | None = None, **kw) -> str:
    with pytest.raises(ConfigError) as info:
        load(*overrides, env=env, **kw)
    message = str(info.value)
    assert "\n" not in message
    assert SECRET not in message, message
    return message


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"), password=SECRET)


# ------------------------------------------------------------------------------- listeners


def test_several_named_listeners() -> None:
    c = load(
        "listeners=INTERNAL://127.0.0.1:0, external://:0,SASL_PLAINTEXT://[::1]:0",
        "listener.security.protocol.map=INTERNAL:PLAINTEXT,EXTERNAL:plaintext,"
        "SASL_PLAINTEXT:SASL_PLAINTEXT",
        *SASL[1:],
    )
    assert c.listeners == (
        Listener("INTERNAL", "127.0.0.1", 0),
        Listener("EXTERNAL", "", 0),
        Listener("SASL_PLAINTEXT", "::1", 0),
    )
    assert c.listener.name == "INTERNAL"
    assert [c.security_protocol(n) for n in ("internal", "EXTERNAL", "SASL_PLAINTEXT")] == [
        "PLAINTEXT",
        "PLAINTEXT",
        "SASL_PLAINTEXT",
    ]
    assert c.find_listener("external") == Listener("EXTERNAL", "", 0)
    with pytest.raises(KeyError):
        c.find_listener("nope")


def test_default_protocol_map_names_the_four_protocols() -> None:
    assert dict(BrokerConfig().listener_security_protocol_map) == {
        p: p for p in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
    }
    assert load(*SASL).listener_security("SASL_PLAINTEXT").security_protocol == "SASL_PLAINTEXT"


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (
            ["listeners=INTERNAL://:9092"],
            ("listeners: no security protocol defined for listener INTERNAL in "
            "listener.security.protocol.map (PLAINTEXT:PLAINTEXT,SSL:SSL,"),
        ),
        (
            ["listeners=PLAINTEXT://:9092", "listener.security.protocol.map=EXTERNAL:SSL"],
            "listeners: no security protocol defined for listener PLAINTEXT",
        ),
        (
            ["listener.security.protocol.map=A:TLS"],
            "listener.security.protocol.map: invalid security protocol 'TLS' for A (expected one of",
        ),
        (["listener.security.protocol.map=A"], "listener.security.protocol.map: cannot parse 'A'"),
        (
            ["listener.security.protocol.map=a:SSL,A:SSL"],
            "listener.security.protocol.map: listener A appears twice",
        ),
        (
            ["listeners=A://:1,B://h:1", "listener.security.protocol.map=A:PLAINTEXT,B:PLAINTEXT"],
            ("listeners: each listener must have a different port unless one is IPv4 and the other "
            "IPv6, A, B share port 1"),
        ),
        (
            ["advertised.listeners=EXTERNAL://h:1"],
            "advertised.listeners: EXTERNAL is not in listeners (PLAINTEXT)",
        ),
        (
            ["advertised.listeners=PLAINTEXT://a:1,PLAINTEXT://b:2"],
            "advertised.listeners: each listener must have a different name, PLAINTEXT is repeated",
        ),
    ],
)
def test_listener_errors(settings: list[str], expected: str) -> None:
    message = error_of(*settings)
    assert message.startswith(expected), message


def test_ports_may_repeat_for_ephemeral_and_for_ipv4_with_ipv6() -> None:
    m = "listener.security.protocol.map=A:PLAINTEXT,B:PLAINTEXT,C:PLAINTEXT"
    assert len(load("listeners=A://:0,B://:0,C://h:0", m).listeners) == 3
    assert len(load("listeners=A://127.0.0.1:9,B://[::1]:9", m).listeners) == 2


def test_cli_shortcuts_rewrite_the_first_listener_only() -> None:
    c = load(
        "listeners=A://10.0.0.1:1,B://10.0.0.2:2",
        "listener.security.protocol.map=A:PLAINTEXT,B:PLAINTEXT",
        host="::1",
        port=0,
    )
    assert c.listeners == (Listener("A", "::1", 0), Listener("B", "10.0.0.2", 2))
    message = error_of(
        "listeners=A://:1,B://:2", "listener.security.protocol.map=A:PLAINTEXT,B:PLAINTEXT", port=2
    )
    assert message.startswith("listeners: each listener must have a different port")


def test_advertised_listeners_per_listener() -> None:
    c = load(
        "listeners=INTERNAL://0.0.0.0:0,EXTERNAL://127.0.0.1:0",
        "listener.security.protocol.map=INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
        "advertised.listeners=EXTERNAL://broker.example.com:0",
    )
    assert c.advertised_listener(4000, "external") == Listener(
        "EXTERNAL", "broker.example.com", 4000
    )
    # a listener not named in advertised.listeners advertises its bound address
    assert c.advertised_listener(4001, "INTERNAL") == Listener(
        "INTERNAL", socket.gethostname(), 4001
    )
    assert c.advertised_listener(4001) == c.advertised_listener(4001, "INTERNAL")
    with pytest.raises(KeyError):
        c.advertised_listener(1, "OTHER")


# ------------------------------------------------------------------------------- per-listener keys


def test_per_listener_overrides_from_every_source(tmp_path: Path) -> None:
    f = tmp_path / "s.properties"
    f.write_text(
        "listeners=SASL_PLAINTEXT://127.0.0.1:0\nsasl.enabled.mechanisms=PLAIN\n"
        "listener.name.sasl_plaintext.connections.max.reauth.ms=1000\n"
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={PLAIN_JAAS}\n"
    )
    env = {
        "SEMEL_LISTENER_NAME_SASL_PLAINTEXT_SASL_ENABLED_MECHANISMS": "PLAIN,SCRAM-SHA-256",
        "SEMEL_LISTENER_NAME_SASL_PLAINTEXT_CONNECTIONS_MAX_REAUTH_MS": "2000",
        "SEMEL_LISTENER_NAME_SASL_PLAINTEXT_SCRAM_SHA_256_SASL_JAAS_CONFIG": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
    }
    c = load_config(f, ["listener.name.sasl_plaintext.connections.max.reauth.ms=3000"], env)
    sec = c.listener_security("SASL_PLAINTEXT")
    assert sec.sasl_enabled_mechanisms == ("PLAIN", "SCRAM-SHA-256")  # env over the global
    assert sec.connections_max_reauth_ms == 3000  # --set over env over file
    assert sorted(sec.sasl_jaas_config) == ["PLAIN", "SCRAM-SHA-256"]
    assert sec.sasl_jaas_config["PLAIN"] == Password(PLAIN_JAAS)
    assert sec.ssl is None and sec.principal_mapper is None
    assert c.connections_max_reauth_ms == 0  # the broker-wide value is untouched
    assert env_var_name("listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config") == (
        "SEMEL_LISTENER_NAME_SASL_PLAINTEXT_SCRAM_SHA_256_SASL_JAAS_CONFIG"
    )


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        (
            "listener.name.nope.ssl.client.auth=required",
            ("unknown property 'listener.name.nope.ssl.client.auth' (--set "
            "'listener.name.nope.ssl.client.auth=required'): no listener NOPE in listeners "
            "(have SASL_PLAINTEXT)"),
        ),
        (
            "listener.name.SASL_PLAINTEXT.ssl.client.auth=required",
            ("unknown property 'listener.name.SASL_PLAINTEXT.ssl.client.auth' (--set "
            "'listener.name.SASL_PLAINTEXT.ssl.client.auth=required'): the listener name is "
            "lower-cased in this prefix: listener.name.sasl_plaintext.ssl.client.auth"),
        ),
        (
            "listener.name.sasl_plaintext.log.dirs=/x",
            ("unknown property "
            "'listener.name.sasl_plaintext.log.dirs' (--set 'listener.name.sasl_plaintext.log.dirs=/x'):"
            " log.dirs cannot be set per listener"),
        ),
        (
            "listener.name.sasl_plaintext.ssl.keystore.locaton=/x",
            ("unknown property 'listener.name.sasl_plaintext.ssl.keystore.locaton' (--set "
            "'listener.name.sasl_plaintext.ssl.keystore.locaton=/x'): 'ssl.keystore.locaton' is not a "
            "per-listener property; did you mean 'listener.name.sasl_plaintext.ssl.keystore.location'?"),
        ),
        (
            f"listener.name.sasl_plaintext.sasl.jaas.config={SECRET}",
            ("unknown property 'listener.name.sasl_plaintext.sasl.jaas.config' (--set "
            "'listener.name.sasl_plaintext.sasl.jaas.config=[hidden]'): a JAAS config is set per "
            "listener and mechanism: listener.name.sasl_plaintext.<mechanism>.sasl.jaas.config"),
        ),
        (
            f"listener.name.sasl_plaintext.gssapi.sasl.jaas.config={SECRET}",
            ("unknown property 'listener.name.sasl_plaintext.gssapi.sasl.jaas.config' (--set "
            "'listener.name.sasl_plaintext.gssapi.sasl.jaas.config=[hidden]'): a JAAS config"),
        ),
        (
            f"listener.name.nope.ssl.keystore.password={SECRET}",
            ("unknown property 'listener.name.nope.ssl.keystore.password' (--set "
            "'listener.name.nope.ssl.keystore.password=[hidden]')"),
        ),
        (
            "listener.name.sasl_plaintext.ssl.client.auth=maybe",
            ("listener.name.sasl_plaintext.ssl.client.auth: expected one of none, requested, required, "
            "got 'maybe' (--set"),
        ),
        (
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms=GSSAPI",
            ("sasl.enabled.mechanisms: SASL_PLAINTEXT listener SASL_PLAINTEXT enables GSSAPI (semel "
            "implements PLAIN, SCRAM-SHA-256, SCRAM-SHA-512; Kafka's default GSSAPI is not): set "
            "sasl.enabled.mechanisms or listener.name.sasl_plaintext.sasl.enabled.mechanisms"),
        ),
    ],
)
def test_per_listener_key_errors(setting: str, expected: str) -> None:
    message = error_of(*SASL, setting)
    assert message.startswith(expected), message


def test_per_listener_env_errors_suggest_the_variable() -> None:
    message = error_of(
        *SASL, env={"SEMEL_LISTENER_NAME_SASL_PLAINTEXT_SASL_ENABLED_MECHANISM": "PLAIN"}
    )
    assert message.endswith(
        "did you mean SEMEL_LISTENER_NAME_SASL_PLAINTEXT_SASL_ENABLED_MECHANISMS?"
    ), message
    assert "(environment variable SEMEL_LISTENER_NAME_SASL_PLAINTEXT_SASL_ENABLED_MECHANISM)" in (
        message
    )


# ------------------------------------------------------------------------------- SASL


def test_sasl_mechanisms() -> None:
    assert BrokerConfig().sasl_enabled_mechanisms == ("GSSAPI",)  # Kafka's default, unused
    assert load("sasl.enabled.mechanisms= SCRAM-SHA-512 , PLAIN").sasl_enabled_mechanisms == (
        "SCRAM-SHA-512",
        "PLAIN",
    )
    scram = load("listeners=SASL_PLAINTEXT://:0", "sasl.enabled.mechanisms=SCRAM-SHA-256")
    sec = scram.listener_security("SASL_PLAINTEXT")  # SCRAM needs no JAAS config in semel
    assert (sec.sasl_enabled_mechanisms, dict(sec.sasl_jaas_config)) == (("SCRAM-SHA-256",), {})
    assert load(*SASL).listener_security("SASL_PLAINTEXT").uses_sasl


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (
            ["sasl.enabled.mechanisms=PLAIN,FOO"],
            ("sasl.enabled.mechanisms: unknown SASL mechanism 'FOO' (semel supports PLAIN, "
            "SCRAM-SHA-256, SCRAM-SHA-512)"),
        ),
        (
            ["listeners=SASL_PLAINTEXT://:0"],
            "sasl.enabled.mechanisms: SASL_PLAINTEXT listener SASL_PLAINTEXT enables GSSAPI",
        ),
        (
            ["listeners=SASL_PLAINTEXT://:0", "sasl.enabled.mechanisms="],
            "sasl.enabled.mechanisms: SASL_PLAINTEXT listener SASL_PLAINTEXT enables no mechanism",
        ),
        (
            ["listeners=SASL_PLAINTEXT://:0", "sasl.enabled.mechanisms=PLAIN"],
            ("listener.name.sasl_plaintext.plain.sasl.jaas.config is required: listener SASL_PLAINTEXT "
            "enables PLAIN"),
        ),
        (
            [
                "listeners=SASL_PLAINTEXT://:0",
                "sasl.enabled.mechanisms=PLAIN",
                ("listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security."
                f'plain.PlainLoginModule required user_a="{SECRET}" debug="{SECRET}";'),
            ],
            "listener.name.sasl_plaintext.plain.sasl.jaas.config: JAAS config: unsupported option",
        ),
        (
            [
                "listeners=SASL_PLAINTEXT://:0",
                "sasl.enabled.mechanisms=SCRAM-SHA-512",
                f'listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=Other required p="{SECRET}";',
            ],
            ("listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config: expected "
            "org.apache.kafka.common.security.scram.ScramLoginModule required"),
        ),
        (
            [f"sasl.jaas.config={SECRET}"],
            ("unsupported property 'sasl.jaas.config' (--set 'sasl.jaas.config=[hidden]'): a broker's "
            "JAAS config is set per listener and mechanism"),
        ),
        (["connections.max.reauth.ms=-1"], "connections.max.reauth.ms: -1 is out of range"),
    ],
)
def test_sasl_errors(settings: list[str], expected: str) -> None:
    message = error_of(*settings)
    assert message.startswith(expected), message


# ------------------------------------------------------------------------------- authorization


def test_authorizer_settings() -> None:
    c = BrokerConfig()
    assert (c.authorizer_enabled, c.super_users, c.allow_everyone_if_no_acl_found) == (
        False,
        (),
        False,
    )
    c = load(
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users= User:admin ; User:CN=ops,O=Acme;",
        "allow.everyone.if.no.acl.found=true",
    )
    assert c.authorizer_enabled and c.allow_everyone_if_no_acl_found
    assert c.super_users == (Principal("User", "admin"), Principal("User", "CN=ops,O=Acme"))
    assert c.as_properties()["super.users"] == "User:admin;User:CN=ops,O=Acme"


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        (
            "authorizer.class.name=kafka.security.authorizer.AclAuthorizer",
            ("authorizer.class.name: kafka.security.authorizer.AclAuthorizer was removed in Kafka 4 (it "
            "needs ZooKeeper); use org.apache.kafka.metadata.authorizer.StandardAuthorizer"),
        ),
        (
            "authorizer.class.name=com.example.Mine",
            ("authorizer.class.name: semel provides only org.apache.kafka.metadata.authorizer."
            "StandardAuthorizer, got 'com.example.Mine'"),
        ),
        ("super.users=admin", "super.users: 'admin' is not a principal of the form Type:name"),
        (
            "inter.broker.listener.name=INTERNAL",
            ("unsupported property 'inter.broker.listener.name' (--set 'inter.broker.listener.name="
            "INTERNAL'): semel is a single node: there is no inter-broker listener"),
        ),
        ("security.inter.broker.protocol=SSL", "unsupported property 'security.inter.broker."),
    ],
)
def test_authorizer_and_unsupported_key_errors(setting: str, expected: str) -> None:
    message = error_of(setting)
    assert message.startswith(expected), message


# ------------------------------------------------------------------------------- TLS settings


def test_tls_settings_resolve_per_listener(tls: TlsFiles) -> None:
    c = load(
        "listeners=SSL://127.0.0.1:0,OTHER://127.0.0.1:0",
        "listener.security.protocol.map=SSL:SSL,OTHER:SSL",
        f"ssl.keystore.location={tls.server_p12}",
        f"ssl.keystore.password={SECRET}",
        "ssl.client.auth=requested",
        "ssl.enabled.protocols=TLSv1.3",
        "listener.name.other.ssl.client.auth=required",
        "listener.name.other.ssl.principal.mapping.rules=RULE:^CN=([^,]*).*$/$1/",
    )
    ssl, other = c.listener_security("SSL"), c.listener_security("OTHER")
    assert (ssl.ssl.client_auth, other.ssl.client_auth) == ("requested", "required")
    assert ssl.ssl.enabled_protocols == other.ssl.enabled_protocols == ("TLSv1.3",)
    assert ssl.ssl.keystore_password == Password(SECRET)
    assert ssl.uses_tls and not ssl.uses_sasl
    assert other.principal_mapper.name("CN=a,O=b") == "a"
    assert ssl.principal_mapper.name("CN=a,O=b") == "CN=a,O=b"


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("ssl.keystore.type=BKS", "ssl.keystore.type: expected one of JKS, PKCS12, PEM, got 'BKS'"),
        ("ssl.client.auth=true", "ssl.client.auth: expected one of none, requested, required"),
        (
            "ssl.enabled.protocols=TLSv1.1,TLSv1.3",
            "ssl.enabled.protocols: TLSv1.1,TLSv1.3 leaves a gap; list a contiguous range",
        ),
        ("ssl.enabled.protocols=SSLv3", "ssl.enabled.protocols: unsupported protocol 'SSLv3'"),
        ("ssl.enabled.protocols=", "ssl.enabled.protocols: expected at least one of TLSv1"),
        ("ssl.principal.mapping.rules=RULE:x/y/Z", "ssl.principal.mapping.rules: invalid rule"),
    ],
)
def test_tls_value_errors(setting: str, expected: str) -> None:
    message = error_of(setting)
    assert message.startswith(expected), message


def test_store_types_are_case_insensitive() -> None:
    assert load("ssl.keystore.type=pkcs12", "ssl.truststore.type=pem").ssl_truststore_type == "PEM"


# ------------------------------------------------------------------------------- secrets


def test_secrets_are_hidden_everywhere(tls: TlsFiles) -> None:
    c = load(
        *SASL,
        f"ssl.keystore.password={SECRET}",
        f"ssl.key.password={SECRET}",
        f"ssl.truststore.password={SECRET}",
        f"ssl.keystore.key={SECRET}",
        f"listener.name.sasl_plaintext.ssl.keystore.password={SECRET}",
    )
    props = c.as_properties()
    for key in (
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.truststore.password",
        "ssl.keystore.key",
    ):
        assert props[key] == "[hidden]"
    assert props["ssl.keystore.certificate.chain"] == ""  # not set
    assert c.listener_properties() == {
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": "[hidden]",
        "listener.name.sasl_plaintext.ssl.keystore.password": "[hidden]",
    }
    assert SECRET not in repr(c) and SECRET not in str(props)
    assert SECRET not in repr(c.listener_security("SASL_PLAINTEXT"))
    assert str(Password(SECRET)) == "[hidden]"


@pytest.mark.parametrize(
    "setting",
    [
        f"ssl.keystore.pasword={SECRET}",  # misspelt secret key
        f"ssl.keystore.passwd={SECRET}",
        f"my.secret.thing={SECRET}",
        f"ssl.keystore.password:{SECRET}",  # no '='
    ],
)
def test_unknown_keys_do_not_echo_secret_values(setting: str) -> None:
    assert "[hidden]" in error_of(setting)


def test_non_secret_values_are_still_shown() -> None:
    assert error_of("log.segment.byte=1") == (
        "unknown property 'log.segment.byte' (--set 'log.segment.byte=1'); "
        "did you mean 'log.segment.bytes'?"
    )


def test_round_trip_without_secrets() -> None:
    c = load(
        *SASL,
        "listener.name.sasl_plaintext.connections.max.reauth.ms=5000",
        "super.users=User:a;User:b",
        "ssl.cipher.suites=TLS_AES_128_GCM_SHA256",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    )
    text = {**c.as_properties(), **c.listener_properties()}
    text["listener.name.sasl_plaintext.plain.sasl.jaas.config"] = PLAIN_JAAS  # the one secret
    assert load(*(f"{k}={v}" for k, v in text.items())) == c
