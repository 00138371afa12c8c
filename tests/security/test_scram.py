"""SCRAM-SHA-256/512 server: RFC test vectors, real-client exchanges, and every way to fail."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.net.sasl.scram import ScramClient

from semel.broker.security.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramAuthenticationError,
    ScramCredential,
    ScramMechanism,
    ScramServer,
    credential_from_salted_password,
    make_credential,
    salted_password,
    sasl_name,
    username_from_sasl_name,
)

MECHS = [SCRAM_SHA_256, SCRAM_SHA_512]


def server_for(mechanism, users: dict[str, ScramCredential], nonce: str | None = None):
    return ScramServer(
        mechanism, users.get, server_nonce=(lambda: nonce) if nonce is not None else None
    )


# An independent client (RFC 5802 section 3, written from the RFC): lets the tests vary the
# gs2 header, extensions, nonce and proof the way real clients never do.
def client_final(
    mechanism: ScramMechanism,
    password: str,
    client_first_bare: str,
    server_first: bytes,
    *,
    gs2: str = "n,,",
    nonce: str | None = None,
    extensions: str = "",
) -> tuple[bytes, bytes]:
    """(client-final message, expected server signature)."""
    fields = dict(p.split("=", 1) for p in server_first.decode().split(","))
    h = mechanism.hash_name
    salted = hashlib.pbkdf2_hmac(
        h, password.encode(), base64.b64decode(fields["s"]), int(fields["i"])
    )
    client_key = hmac.new(salted, b"Client Key", h).digest()
    stored_key = hashlib.new(h, client_key).digest()
    without_proof = (
        f"c={base64.b64encode(gs2.encode()).decode()},"
        f"r={nonce if nonce is not None else fields['r']}{extensions}"
    )
    auth = f"{client_first_bare},{server_first.decode()},{without_proof}".encode()
    signature = hmac.new(stored_key, auth, h).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    server_key = hmac.new(salted, b"Server Key", h).digest()
    final = f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
    return final, hmac.new(server_key, auth, h).digest()


def exchange(
    server: ScramServer,
    user: str,
    password: str,
    *,
    gs2: str = "n,,",
    first_ext: str = "",
    final_ext: str = "",
) -> bytes:
    bare = f"n={sasl_name(user)},r=clientnonce123{first_ext}"
    server_first = server.evaluate(f"{gs2}{bare}".encode())
    final, expected = client_final(
        server.mechanism, password, bare, server_first, gs2=gs2, extensions=final_ext
    )
    answer = server.evaluate(final)
    assert answer == b"v=" + base64.b64encode(expected)
    return answer


# ------------------------------------------------------------------------------ RFC vectors


def test_rfc7677_scram_sha_256_vector():
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cred = make_credential(SCRAM_SHA_256, "pencil", 4096, salt)
    server = server_for(SCRAM_SHA_256, {"user": cred}, nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    final = server.evaluate(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.username == "user"


def test_rfc5802_scram_sha_1_vector_through_the_same_code():
    sha1 = ScramMechanism("SCRAM-SHA-1", 0, "sha1")  # not offered by the broker; same algorithm
    cred = make_credential(sha1, "pencil", 4096, base64.b64decode("QSXCR+Q6sek8bf92"))
    server = server_for(sha1, {"user": cred}, nonce="3rfcNHYJY1ZVvWVs7j")
    first = server.evaluate(b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL")
    assert first == b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096"
    final = server.evaluate(
        b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="
    )
    assert final == b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ="


def test_credential_keys_follow_rfc5802():
    salt = b"0123456789abcdef"
    cred = make_credential(SCRAM_SHA_512, "s3cret", 4096, salt)
    salted = hashlib.pbkdf2_hmac("sha512", b"s3cret", salt, 4096)
    assert salted_password(SCRAM_SHA_512, "s3cret", salt, 4096) == salted
    client_key = hmac.new(salted, b"Client Key", "sha512").digest()
    assert cred.stored_key == hashlib.sha512(client_key).digest()
    assert cred.server_key == hmac.new(salted, b"Server Key", "sha512").digest()
    assert credential_from_salted_password(SCRAM_SHA_512, salt, salted, 4096) == cred
    assert "s3cret" not in repr(cred) and repr(salt) not in repr(cred)


def test_make_credential_enforces_kafkas_iteration_limits():
    with pytest.raises(ValueError, match="between 4096 and 16384"):
        make_credential(SCRAM_SHA_256, "pw", MIN_ITERATIONS - 1)
    with pytest.raises(ValueError):
        make_credential(SCRAM_SHA_256, "pw", MAX_ITERATIONS + 1)
    a, b = make_credential(SCRAM_SHA_256, "pw"), make_credential(SCRAM_SHA_256, "pw")
    assert a.salt != b.salt and a.iterations == 4096


def test_password_is_utf8_without_saslprep():
    # Kafka's ScramFormatter.normalize is the plain UTF-8 of the password
    cred = make_credential(SCRAM_SHA_256, "pässwörd\u2168", 4096, b"salt")
    server = server_for(SCRAM_SHA_256, {"u": cred})
    exchange(server, "u", "pässwörd\u2168")
    with pytest.raises(ScramAuthenticationError):
        exchange(server_for(SCRAM_SHA_256, {"u": cred}), "u", "pässwördIX")


# ---------------------------------------------------------------------- real client exchanges


@pytest.mark.parametrize("mechanism", MECHS, ids=lambda m: m.name)
def test_kafka_python_scram_client_authenticates(mechanism):
    cred = make_credential(mechanism, "alice-secret", 8192)
    server = server_for(mechanism, {"alice": cred})
    client = ScramClient("alice", "alice-secret", mechanism.name)
    client.process_server_first_message(server.evaluate(client.first_message()))
    answer = server.evaluate(client.final_message())
    client.process_server_final_message(answer)  # raises if the server signature is wrong
    assert server.complete and server.username == "alice"


@pytest.mark.parametrize("mechanism", MECHS, ids=lambda m: m.name)
def test_wrong_password_fails_at_the_proof(mechanism):
    server = server_for(mechanism, {"alice": make_credential(mechanism, "right")})
    client = ScramClient("alice", "wrong-password-xyz", mechanism.name)
    client.process_server_first_message(server.evaluate(client.first_message()))
    with pytest.raises(ScramAuthenticationError) as e:
        server.evaluate(client.final_message())
    assert "wrong-password-xyz" not in str(e.value) and e.value.client_message is None
    assert not server.complete


def test_unknown_user_gets_a_stable_fake_salt_and_fails_at_the_proof():
    users = {"alice": make_credential(SCRAM_SHA_256, "pw")}

    def first(user: str) -> dict[str, str]:
        s = server_for(SCRAM_SHA_256, users)
        return dict(
            p.split("=", 1) for p in s.evaluate(f"n,,n={user},r=abc".encode()).decode().split(",")
        )

    ghost1, ghost2, other = first("ghost"), first("ghost"), first("other-ghost")
    assert ghost1["s"] == ghost2["s"] != other["s"]  # no random salt per attempt to compare
    assert ghost1["i"] == "4096" and ghost1["r"].startswith("abc")
    server = server_for(SCRAM_SHA_256, users)
    with pytest.raises(ScramAuthenticationError, match="unknown user") as e:
        exchange(server, "ghost", "pw")
    assert e.value.client_message is None  # the client gets the same text as a bad password


def test_bad_nonce_in_client_final_fails():
    cred = make_credential(SCRAM_SHA_256, "pw")
    server = server_for(SCRAM_SHA_256, {"u": cred})
    bare = "n=u,r=cnonce"
    server_first = server.evaluate(f"n,,{bare}".encode())
    r = dict(p.split("=", 1) for p in server_first.decode().split(","))["r"]
    final, _ = client_final(SCRAM_SHA_256, "pw", bare, server_first, nonce=r + "x")
    with pytest.raises(ScramAuthenticationError, match="nonce"):
        server.evaluate(final)


def test_client_nonce_repeated_before_the_combined_one_is_accepted_as_kafka_does():
    """librdkafka before 2.6 (kcat 1.7.1 ships 2.0.2) sends r=<client nonce><combined nonce>;
    Kafka >= 3.8.1 checks only that the nonce ends with the server's."""
    cred = make_credential(SCRAM_SHA_256, "pw")
    server = server_for(SCRAM_SHA_256, {"u": cred})
    bare = "n=u,r=cnonce"
    server_first = server.evaluate(f"n,,{bare}".encode())
    r = dict(p.split("=", 1) for p in server_first.decode().split(","))["r"]
    final, expected = client_final(SCRAM_SHA_256, "pw", bare, server_first, nonce="cnonce" + r)
    assert server.evaluate(final) == b"v=" + base64.b64encode(expected)
    assert server.complete
    other = server_for(SCRAM_SHA_256, {"u": cred})
    server_first = other.evaluate(f"n,,{bare}".encode())
    r = dict(p.split("=", 1) for p in server_first.decode().split(","))["r"]
    final, _ = client_final(SCRAM_SHA_256, "pw", bare, server_first, nonce=r[:-1] + "cnonce")
    with pytest.raises(ScramAuthenticationError, match="nonce"):
        other.evaluate(final)


def test_replayed_client_final_is_refused():
    cred = make_credential(SCRAM_SHA_256, "pw")
    bare = "n=u,r=samenonce"
    first = server_for(SCRAM_SHA_256, {"u": cred})
    final, _ = client_final(SCRAM_SHA_256, "pw", bare, first.evaluate(f"n,,{bare}".encode()))
    first.evaluate(final)
    assert first.complete
    with pytest.raises(ScramAuthenticationError):  # the same server: exchange is over
        first.evaluate(final)
    second = server_for(SCRAM_SHA_256, {"u": cred})  # a new exchange: a fresh server nonce
    second.evaluate(f"n,,{bare}".encode())
    with pytest.raises(ScramAuthenticationError, match="nonce"):
        second.evaluate(final)


def test_authzid_equal_to_the_user_is_accepted_and_another_refused():
    cred = make_credential(SCRAM_SHA_256, "pw")
    server = server_for(SCRAM_SHA_256, {"u": cred})
    exchange(server, "u", "pw", gs2="n,a=u,")
    assert server.complete
    server = server_for(SCRAM_SHA_256, {"u": cred, "admin": cred})
    with pytest.raises(ScramAuthenticationError) as e:
        server.evaluate(b"n,a=admin,n=u,r=abc")
    assert "authorization id" in e.value.client_message


def test_channel_binding_must_echo_the_gs2_header():
    cred = make_credential(SCRAM_SHA_256, "pw")
    server = server_for(SCRAM_SHA_256, {"u": cred})
    bare = "n=u,r=abc"
    server_first = server.evaluate(f"n,a=u,{bare}".encode())
    final, _ = client_final(SCRAM_SHA_256, "pw", bare, server_first, gs2="n,,")
    with pytest.raises(ScramAuthenticationError, match="channel binding"):
        server.evaluate(final)


def test_tokenauth_extension_is_refused_and_others_ignored():
    cred = make_credential(SCRAM_SHA_256, "pw")
    with pytest.raises(ScramAuthenticationError, match="delegation token"):
        server_for(SCRAM_SHA_256, {"u": cred}).evaluate(b"n,,n=u,r=abc,tokenauth=true")
    server = server_for(SCRAM_SHA_256, {"u": cred})
    exchange(server, "u", "pw", first_ext=",tokenauth=false,foo=bar", final_ext=",x=y")
    assert server.complete


def test_escaped_user_names_are_looked_up_unescaped():
    cred = make_credential(SCRAM_SHA_512, "pw")
    asked = []

    def lookup(user):
        asked.append(user)
        return cred

    server = ScramServer(SCRAM_SHA_512, lookup)
    exchange(server, "a,b=c", "pw")
    assert asked == ["a,b=c"] and server.username == "a,b=c"
    with pytest.raises(ScramAuthenticationError):  # '=' only in the two escapes
        ScramServer(SCRAM_SHA_512, lookup).evaluate(b"n,,n=a=41b,r=abc")
    with pytest.raises(ValueError):
        username_from_sasl_name("a=41b")
    assert asked == ["a,b=c"]


@given(st.text(min_size=1).filter(lambda s: "\0" not in s))
def test_sasl_name_round_trips(name):
    escaped = sasl_name(name)
    assert "," not in escaped
    assert username_from_sasl_name(escaped) == name


def test_credential_below_the_minimum_iterations_is_refused():
    weak = ScramCredential(b"salt", b"\0" * 32, b"\0" * 32, 1000)
    with pytest.raises(ScramAuthenticationError, match="less than the minimum"):
        server_for(SCRAM_SHA_256, {"u": weak}).evaluate(b"n,,n=u,r=abc")


@pytest.mark.parametrize(
    "message",
    [
        b"",
        b"garbage",
        b"\xff\xfe",
        b"y,,n=u,r=abc",
        b"p=tls-unique,,n=u,r=abc",
        b"n,,m=ext,n=u,r=abc",
        b"n,,n=u",
        b"n,,n=,r=abc",
        b"n,,n=u,r=a,b",
        b"n,,r=abc,n=u",
        b"n,,n=u,r=abc\x00",
    ],
)
def test_malformed_client_first_fails_cleanly(message):
    server = server_for(SCRAM_SHA_256, {"u": make_credential(SCRAM_SHA_256, "pw")})
    with pytest.raises(ScramAuthenticationError):
        server.evaluate(message)
    with pytest.raises(ScramAuthenticationError):  # failed for good
        server.evaluate(b"n,,n=u,r=abc")


def test_malformed_client_final_fails_cleanly():
    cred = make_credential(SCRAM_SHA_256, "pw")
    bare = "n=u,r=abc"
    for mutate in (
        lambda f: f.replace(b"c=biws", b"c=b!ws"),
        lambda f: f[: f.index(b",p=")] + b",p=AAAA",
        lambda f: f[: f.index(b",p=")] + b",p=not base64",
        lambda f: f[: f.index(b",p=")],
        lambda f: f + b",extra=1",
        lambda f: b"\xff" + f,
    ):
        server = server_for(SCRAM_SHA_256, {"u": cred})
        final, _ = client_final(SCRAM_SHA_256, "pw", bare, server.evaluate(f"n,,{bare}".encode()))
        with pytest.raises(ScramAuthenticationError):
            server.evaluate(mutate(final))
        assert not server.complete


@given(st.binary(max_size=200), st.binary(max_size=200))
def test_any_bytes_either_answer_or_fail_with_the_one_error(first, second):
    server = server_for(SCRAM_SHA_256, {"u": make_credential(SCRAM_SHA_256, "pw", salt=b"s")})
    try:
        server.evaluate(first)
        server.evaluate(second)
    except ScramAuthenticationError:
        pass
    assert not server.complete  # no proof without the password
