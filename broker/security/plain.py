"""SASL/PLAIN (RFC 4616) as Kafka's PlainSaslServer checks it, and its JAAS user list.

The client's single token is ``authzid NUL authcid NUL passwd`` (UTF-8); the authzid must be
empty or equal to the authcid; the password is compared in constant time. The users come from
Kafka's JAAS form, e.g. ``listener.name.sasl_plaintext.plain.sasl.jaas.config``::

    org.apache.kafka.common.security.plain.PlainLoginModule required
        user_admin="admin-secret" user_alice="alice-secret";

Only that login module is accepted, with its ``user_NAME="password"`` options (``username`` and
``password``, the broker's own client identity in Kafka, are accepted and ignored). Errors are
one line and never contain a password: they name a position, an option key or the module.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Iterator, Mapping

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")
USER_PREFIX = "user_"


class PlainAuthenticationError(Exception):
    """The exchange failed; ``client_message`` is Kafka's message for the client (no secret),
    ``str(e)`` the reason for the broker's log."""

    def __init__(self, client_message: str, reason: str | None = None) -> None:
        super().__init__(reason or client_message)
        self.client_message = client_message


class PlainServer:
    """One SASL/PLAIN exchange: ``evaluate(token)`` returns b"" (nothing to send but the
    success) and sets ``complete``/``username``, or raises PlainAuthenticationError."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self.username: str | None = None
        self.complete = False

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise PlainAuthenticationError("Authentication failed: exchange already complete")
        try:
            text = bytes(token).decode("utf-8")
        except UnicodeDecodeError:
            raise PlainAuthenticationError("Invalid SASL/PLAIN response: not UTF-8") from None
        parts = text.split("\0", 3)
        if len(parts) != 3:
            raise PlainAuthenticationError(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, username, password = parts
        if not username:
            raise PlainAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise PlainAuthenticationError("Authentication failed: password not specified")
        expected = self._users.get(username)
        # compare against something even for an unknown user: no timing hint of who exists
        ok = hmac.compare_digest(password.encode("utf-8"),
                                 (expected if expected is not None else "\0").encode("utf-8"))
        if expected is None or not ok:
            raise PlainAuthenticationError(
                "Authentication failed: Invalid username or password",
                f"unknown user {username!r}" if expected is None
                else f"wrong password for user {username!r}")
        if authzid and authzid != username:
            raise PlainAuthenticationError(
                "Authentication failed: Client requested an authorization id that is "
                "different from username")
        self.username = username
        self.complete = True
        return b""


# -- JAAS configuration ----------------------------------------------------------------------

_WORD = re.compile(r"[A-Za-z0-9_$.\-\u00a0-\U0010ffff]+")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}


def _tokens(text: str) -> Iterator[tuple[str, str, int]]:
    """(kind, value, position): kinds ``word``, ``quoted``, ``=``, ``;``, as Java's
    StreamTokenizer splits a JAAS config (``//`` and ``/* */`` comments, quotes " and ')."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise ValueError(f"JAAS config: unterminated comment at character {i + 1}")
            i = end + 2
        elif c in "=;":
            yield c, c, i
            i += 1
        elif c in "\"'":
            start, i, value = i, i + 1, []
            while True:
                if i >= n or text[i] in "\r\n":
                    raise ValueError(
                        f"JAAS config: unterminated quoted value at character {start + 1}")
                ch = text[i]
                if ch == c:
                    i += 1
                    break
                if ch == "\\" and i + 1 < n:
                    i += 1
                    ch = _ESCAPES.get(text[i], text[i])
                value.append(ch)
                i += 1
            yield "quoted", "".join(value), start
        else:
            m = _WORD.match(text, i)
            if m is None:
                raise ValueError(f"JAAS config: unexpected character at position {i + 1}")
            yield "word", m.group(), i
            i = m.end()


def parse_plain_jaas(text: str) -> dict[str, str]:
    """The users of a PlainLoginModule JAAS config: ``{name: password}``.

    Raises ValueError (one line, no password in it) for another login module, more than one
    module, a bad control flag, an unknown option, a user defined twice, or a syntax error.
    """
    tokens = list(_tokens(text))
    if not tokens:
        raise ValueError("JAAS config: login module not specified")
    kind, module, _ = tokens[0]
    if kind != "word":
        raise ValueError("JAAS config: expected a login module class name at the start")
    if module != PLAIN_LOGIN_MODULE:
        raise ValueError(f"JAAS config: login module {module!r} is not supported here, "
                         f"expected {PLAIN_LOGIN_MODULE}")
    if len(tokens) < 2 or tokens[1][0] != "word" or tokens[1][1].lower() not in CONTROL_FLAGS:
        raise ValueError("JAAS config: the login module must be followed by a control flag "
                         f"({', '.join(CONTROL_FLAGS)})")
    users: dict[str, str] = {}
    i = 2
    while i < len(tokens) and tokens[i][0] != ";":
        kind, key, pos = tokens[i]
        if kind != "word":
            raise ValueError(f"JAAS config: expected an option name at character {pos + 1}")
        if i + 1 >= len(tokens) or tokens[i + 1][0] != "=":
            raise ValueError(f"JAAS config: option at character {pos + 1} has no '=value'")
        if i + 2 >= len(tokens) or tokens[i + 2][0] not in ("word", "quoted"):
            raise ValueError(f"JAAS config: value not specified for option {key!r}")
        value = tokens[i + 2][1]
        if key.startswith(USER_PREFIX):
            name = key[len(USER_PREFIX):]
            if not name:
                raise ValueError(f"JAAS config: option {key!r} names no user")
            if name in users:
                raise ValueError(f"JAAS config: user {name!r} is defined twice")
            users[name] = value
        elif key not in ("username", "password"):
            raise ValueError(f"JAAS config: unsupported option {key!r} for {PLAIN_LOGIN_MODULE} "
                             "(only user_<name>, username and password)")
        i += 3
    if i >= len(tokens):
        raise ValueError("JAAS config: entry not terminated by a semicolon")
    if i + 1 < len(tokens):
        raise ValueError("JAAS config: more than one login module, should be 1 module")
    return users
