"""The per-connection SASL state machine: handshake, tokens, failures, KIP-368 re-auth."""

from __future__ import annotations

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from kafka.net.sasl.scram import ScramClient

from semel.broker.security import Principal
from semel.broker.security.sasl import SaslServer, SaslState
from semel.broker.security.scram import MECHANISMS, make_credential
from semel.protocol.errors import Error

ALL = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
PLAIN_USERS = {"alice": "alice-secret", "bob": "bob-secret"}


class Store:
    """The credential store's lookup interface over a dict."""

    def __init__(self, passwords: dict[str, str]) -> None:
        self.creds = {
            (u, m): make_credential(MECHANISMS[m], p)
            for u, p in passwords.items()
            for m in MECHANISMS
        }

    def get(self, user, mechanism):
        return self.creds.get((user, mechanism))


STORE = Store({"alice": "alice-scram", "bob": "bob-scram"})


def sasl(mechanisms=ALL, **kw) -> SaslServer:
    return SaslServer(mechanisms, PLAIN_USERS, STORE, **kw)


def plain(server: SaslServer, user: str, password: str):
    return server.step(f"\0{user}\0{password}".encode())


def scram(server: SaslServer, mechanism: str, user: str, password: str):
    client = ScramClient(user, password, mechanism)
    first = server.step(client.first_message())
    if first.error:
        return first
    client.process_server_first_message(first.challenge)
    final = server.step(client.final_message())
    if final.done:
        client.process_server_final_message(final.challenge)
    return final


def test_plain_success():
    s = sasl()
    assert s.handshake("PLAIN") == (Error.NONE, ALL)
    step = plain(s, "alice", "alice-secret")
    assert step.done and step.principal == Principal("User", "alice") and step.error == 0
    assert step.challenge == b"" and s.complete and s.principal == step.principal


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_success_with_a_real_client(mechanism):
    s = sasl(connections_max_reauth_ms=60_000)
    assert s.handshake(mechanism)[0] == Error.NONE
    step = scram(s, mechanism, "bob", "bob-scram")
    assert step.done and step.principal == Principal("User", "bob")
    assert step.session_lifetime_ms == 60_000


def test_session_lifetime_is_zero_without_reauth():
    s = sasl()
    s.handshake("PLAIN")
    assert plain(s, "alice", "alice-secret").session_lifetime_ms == 0


def test_unknown_and_disabled_mechanisms():
    s = sasl(["SCRAM-SHA-512"])
    assert s.handshake("GSSAPI") == (Error.UNSUPPORTED_SASL_MECHANISM, ["SCRAM-SHA-512"])
    assert s.failed
    s = sasl(["SCRAM-SHA-512"])
    assert s.handshake("PLAIN")[0] == Error.UNSUPPORTED_SASL_MECHANISM


def test_configuration_errors():
    with pytest.raises(ValueError, match="GSSAPI"):
        SaslServer(["PLAIN", "GSSAPI"], {}, None)
    with pytest.raises(ValueError, match="no SASL mechanism"):
        SaslServer([], {}, None)


def test_repeated_handshake_is_illegal_and_fatal():
    s = sasl()
    s.handshake("PLAIN")
    assert s.handshake("PLAIN") == (Error.ILLEGAL_SASL_STATE, ALL)
    assert s.failed
    assert plain(s, "alice", "alice-secret").error == Error.ILLEGAL_SASL_STATE


def test_token_before_handshake_is_illegal_and_fatal():
    s = sasl()
    step = plain(s, "alice", "alice-secret")
    assert step.error == Error.ILLEGAL_SASL_STATE and step.fatal and s.failed
    assert s.handshake("PLAIN")[0] == Error.ILLEGAL_SASL_STATE


def test_after_success_handshake_and_tokens_are_illegal_but_not_fatal():
    s = sasl()
    s.handshake("PLAIN")
    plain(s, "alice", "alice-secret")
    step = plain(s, "bob", "bob-secret")
    assert step.error == Error.ILLEGAL_SASL_STATE and not step.fatal
    assert s.handshake("PLAIN")[0] == Error.ILLEGAL_SASL_STATE
    assert s.complete and s.principal == Principal("User", "alice")


@pytest.mark.parametrize("mechanism", ALL)
def test_wrong_password_and_unknown_user_fail_alike_without_secrets(mechanism):
    messages = []
    for user, password in (("alice", "wrong-pw-123"), ("mallory", "mallory-pw-456")):
        s = sasl()
        s.handshake(mechanism)
        step = (
            plain(s, user, password)
            if mechanism == "PLAIN"
            else scram(s, mechanism, user, password)
        )
        assert step.error == Error.SASL_AUTHENTICATION_FAILED and step.fatal and s.failed
        assert not step.done and step.principal is None and s.principal is None
        assert password not in step.error_message
        messages.append(step.error_message)
    assert messages[0] == messages[1]
    if mechanism != "PLAIN":
        assert messages[0] == (
            "Authentication failed during authentication due to invalid "
            f"credentials with SASL mechanism {mechanism}"
        )


def test_scram_without_a_store_fails_like_an_unknown_user():
    s = SaslServer(["SCRAM-SHA-256"], None, None)
    s.handshake("SCRAM-SHA-256")
    assert scram(s, "SCRAM-SHA-256", "alice", "x").error == Error.SASL_AUTHENTICATION_FAILED


def test_error_message_never_echoes_the_token():
    s = sasl()
    s.handshake("SCRAM-SHA-256")
    step = s.step(b"n,,n=alice,r=abc,p=totally-not-a-secret-token\xff")
    assert step.error == Error.SASL_AUTHENTICATION_FAILED
    assert "totally-not" not in step.error_message


# --------------------------------------------------------------------------- re-authentication


def authenticated(mechanism="PLAIN", user="alice") -> SaslServer:
    s = sasl(connections_max_reauth_ms=1000)
    s.handshake(mechanism)
    step = (
        plain(s, user, PLAIN_USERS[user])
        if mechanism == "PLAIN"
        else scram(s, mechanism, user, f"{user}-scram")
    )
    assert step.done
    return s


def test_reauth_as_the_same_principal_succeeds_repeatedly():
    s = authenticated("SCRAM-SHA-256", "alice")
    for _ in range(3):
        s.reset_for_reauth()
        assert s.state is SaslState.REAUTH_HANDSHAKE and not s.complete
        assert s.handshake("SCRAM-SHA-256")[0] == Error.NONE
        step = scram(s, "SCRAM-SHA-256", "alice", "alice-scram")
        assert step.done and step.principal == Principal("User", "alice")
        assert step.session_lifetime_ms == 1000 and s.complete


def test_reauth_as_another_principal_is_rejected():
    s = authenticated("PLAIN", "alice")
    s.reset_for_reauth()
    s.handshake("PLAIN")
    step = plain(s, "bob", "bob-secret")  # valid credentials, but another principal
    assert step.error == Error.SASL_AUTHENTICATION_FAILED and step.fatal and s.failed
    assert step.error_message == (
        "Cannot change principals during re-authentication from User.alice: User.bob"
    )
    assert step.principal is None


def test_reauth_with_another_mechanism_is_answered_then_refused():
    s = authenticated("PLAIN", "alice")
    s.reset_for_reauth()
    assert s.handshake("SCRAM-SHA-512") == (Error.NONE, ALL)  # Kafka answers the handshake
    step = scram(s, "SCRAM-SHA-512", "alice", "alice-scram")
    assert step.error == Error.SASL_AUTHENTICATION_FAILED and s.failed
    assert step.error_message == (
        "SASL mechanism 'SCRAM-SHA-512' requested by client is not "
        "supported for re-authentication of mechanism 'PLAIN'"
    )


def test_failed_reauth_password_uses_the_reauthentication_wording():
    s = authenticated("SCRAM-SHA-256", "alice")
    s.reset_for_reauth()
    s.handshake("SCRAM-SHA-256")
    step = scram(s, "SCRAM-SHA-256", "alice", "nope")
    assert step.error_message.startswith("Authentication failed during re-authentication")


def test_reauth_needs_a_complete_session():
    s = sasl()
    with pytest.raises(RuntimeError):
        s.reset_for_reauth()
    s.handshake("PLAIN")
    with pytest.raises(RuntimeError):
        s.reset_for_reauth()


# ------------------------------------------------------------------- the machine, exhaustively


class SaslMachine(RuleBasedStateMachine):
    """Random sequences of handshakes, tokens and re-auth starts against a small model."""

    def __init__(self) -> None:
        super().__init__()
        self.s = SaslServer(["PLAIN"], PLAIN_USERS, None)
        self.model = "HANDSHAKE"  # HANDSHAKE AUTH COMPLETE REAUTH_HS FAILED
        self.principal: Principal | None = None

    @rule(mechanism=st.sampled_from(["PLAIN", "SCRAM-SHA-256", "OTHER"]))
    def handshake(self, mechanism):
        error, mechanisms = self.s.handshake(mechanism)
        assert mechanisms == ["PLAIN"]
        if self.model in ("HANDSHAKE", "REAUTH_HS"):
            if mechanism == "PLAIN":
                assert error == Error.NONE
                self.model = "AUTH"
            else:
                assert error == Error.UNSUPPORTED_SASL_MECHANISM
                self.model = "FAILED"
        else:
            assert error == Error.ILLEGAL_SASL_STATE
            if self.model != "COMPLETE":
                self.model = "FAILED"

    @rule(user=st.sampled_from(["alice", "bob"]), good=st.booleans())
    def token(self, user, good):
        password = PLAIN_USERS[user] if good else "bad"
        step = self.s.step(f"\0{user}\0{password}".encode())
        if self.model == "AUTH":
            new = Principal("User", user)
            if good and (self.principal is None or self.principal == new):
                assert step.done and step.principal == new
                self.principal = new
                self.model = "COMPLETE"
            else:
                assert step.error == Error.SASL_AUTHENTICATION_FAILED and step.fatal
                self.model = "FAILED"
        else:
            assert step.error == Error.ILLEGAL_SASL_STATE
            assert step.fatal == (self.model != "COMPLETE")
            if self.model != "COMPLETE":
                self.model = "FAILED"

    @rule()
    def reauth(self):
        if self.model == "COMPLETE":
            self.s.reset_for_reauth()
            self.model = "REAUTH_HS"
        else:
            with pytest.raises(RuntimeError):
                self.s.reset_for_reauth()

    @invariant()
    def agrees(self):
        assert self.s.complete == (self.model == "COMPLETE")
        assert self.s.failed == (self.model == "FAILED")
        if self.s.complete:
            assert self.s.principal == self.principal
        if self.s.failed:
            assert self.s.principal is None


TestSaslMachine = SaslMachine.TestCase
