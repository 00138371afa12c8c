"""SASL/PLAIN server (RFC 4616, Kafka's messages) and the PlainLoginModule JAAS parser."""

from __future__ import annotations

import pytest

from semel.broker.security.plain import PlainAuthenticationError, PlainServer, parse_plain_jaas

MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
USERS = {"admin": "admin-secret", "alice": "alice-secret"}
SCRAM_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="admin" password="s3cr3t-pw";'
)
JAAS = f'{MODULE} required user_admin="admin-secret" user_alice="alice-secret";'


def authenticate(token: bytes) -> PlainServer:
    server = PlainServer(USERS)
    assert server.evaluate(token) == b""
    return server


def fail(token: bytes) -> str:
    server = PlainServer(USERS)
    with pytest.raises(PlainAuthenticationError) as e:
        server.evaluate(token)
    assert not server.complete and server.username is None
    return e.value.client_message


def test_good_credentials_with_empty_or_matching_authzid():
    assert authenticate(b"\0alice\0alice-secret").username == "alice"
    server = authenticate(b"alice\0alice\0alice-secret")
    assert server.complete and server.username == "alice"


def test_unicode_user_and_password():
    server = PlainServer({"jürgen": "pä$$wört"})
    server.evaluate("\0jürgen\0pä$$wört".encode())
    assert server.username == "jürgen"


def test_wrong_password_and_unknown_user_look_the_same_to_the_client():
    wrong = fail(b"\0alice\0not-her-password")
    unknown = fail(b"\0mallory\0whatever-pw")
    assert wrong == unknown == "Authentication failed: Invalid username or password"
    with pytest.raises(PlainAuthenticationError) as e:
        PlainServer(USERS).evaluate(b"\0alice\0not-her-password")
    assert "not-her-password" not in str(e.value)  # nor in the log reason


def test_prefix_of_the_password_is_not_enough():
    fail(b"\0alice\0alice-secre")
    fail(b"\0alice\0alice-secret ")


def test_authzid_other_than_the_user_is_refused():
    assert "authorization id" in fail(b"admin\0alice\0alice-secret")


@pytest.mark.parametrize(
    "token, message",
    [
        (b"\0\0pw", "Authentication failed: username not specified"),
        (b"\0alice\0", "Authentication failed: password not specified"),
        (b"alice-secret", "Invalid SASL/PLAIN response: expected 3 tokens, got 1"),
        (b"\0alice-secret", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
        (b"\0alice\0alice-secret\0", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
        (b"\0alice\0\xffalice-secret", "Invalid SASL/PLAIN response: not UTF-8"),
    ],
)
def test_malformed_tokens_get_kafkas_messages(token, message):
    assert fail(token) == message
    assert "alice-secret" not in message


def test_a_second_token_is_refused():
    server = authenticate(b"\0alice\0alice-secret")
    with pytest.raises(PlainAuthenticationError):
        server.evaluate(b"\0admin\0admin-secret")
    assert server.username == "alice"


# ------------------------------------------------------------------------------------- JAAS


def test_parse_the_kafka_example():
    assert parse_plain_jaas(JAAS) == USERS


def test_parse_ignores_the_brokers_own_identity_and_accepts_kafka_syntax():
    text = """
        // the broker's client identity is ignored
        org.apache.kafka.common.security.plain.PlainLoginModule REQUIRED
            username="admin" password="admin-secret"   /* inline comment */
            user_admin='admin-secret'
            user_bob=bob-pw.2
            user_carol="quote\\"inside"
            user_dave="";
    """
    assert parse_plain_jaas(text) == {
        "admin": "admin-secret",
        "bob": "bob-pw.2",
        "carol": 'quote"inside',
        "dave": "",
    }


@pytest.mark.parametrize("flag", ["required", "requisite", "sufficient", "optional"])
def test_every_control_flag(flag):
    text = f'{MODULE} {flag} user_a="b";'
    assert parse_plain_jaas(text) == {"a": "b"}


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", "login module not specified"),
        ("// only a comment", "login module not specified"),
        (SCRAM_JAAS, "ScramLoginModule"),
        (f'"{MODULE}" required user_a="s3cr3t-pw";', "expected a login module class name"),
        (f'{MODULE} user_a="s3cr3t-pw";', "control flag"),
        (f'{MODULE} mandatory user_a="s3cr3t-pw";', "control flag"),
        (f'{MODULE} required user_a="s3cr3t-pw"', "not terminated by a semicolon"),
        (
            f'{MODULE} required user_a="s3cr3t-pw"; {MODULE} required user_b="x";',
            "more than one login module",
        ),
        (
            f'{MODULE} required user_a="s3cr3t-pw" serviceName="kafka";',
            "unsupported option 'serviceName'",
        ),
        (f'{MODULE} required user_a="s3cr3t-pw" user_a="s3cr3t-pw2";', "user 'a' is defined twice"),
        (f'{MODULE} required user_="s3cr3t-pw";', "names no user"),
        (f'{MODULE} required user_a="s3cr3t-pw;', "unterminated quoted value"),
        (f'{MODULE} required user_a="s3cr3t-pw\n";', "unterminated quoted value"),
        (f"{MODULE} required user_a=;", "value not specified for option 'user_a'"),
        (f"{MODULE} required user_a s3cr3t-pw;", "has no '=value'"),
        (f'{MODULE} required user_a="x" s3cr3t-pw;', "has no '=value'"),
        (f'{MODULE} required user_a="x" "s3cr3t-pw";', "expected an option name"),
        (f"{MODULE} required user_a=s3cr3t!pw;", "unexpected character"),
        (f"{MODULE} required /* user_a=s3cr3t-pw;", "unterminated comment"),
    ],
)
def test_errors_are_one_line_and_never_show_a_password(text, expected):
    with pytest.raises(ValueError) as e:
        parse_plain_jaas(text)
    message = str(e.value)
    assert expected in message
    assert "\n" not in message
    assert "s3cr3t" not in message
