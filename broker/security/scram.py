"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's ScramSaslServer speaks them.

Three messages from the client, two answers (no sockets here; ``ScramServer.evaluate`` takes a
token and returns the next one):

    client-first   n,[a=<authzid>],n=<saslname>,r=<client nonce>[,<ext>=<value>]*
    server-first   r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final   c=<base64 gs2 header>,r=<nonce>[,<ext>=<value>]*,p=<base64 proof>
    server-final   v=<base64 ServerSignature>

A credential is what the server keeps instead of the password (RFC 5802 section 3):
SaltedPassword = Hi(password as UTF-8, salt, i) (Kafka applies no SASLprep), StoredKey =
H(HMAC(SaltedPassword, "Client Key")), ServerKey = HMAC(SaltedPassword, "Server Key").
Kafka's rules: iterations 4096..16384, authzid empty or the user name, the ``tokenauth``
extension means a delegation token (not supported here: the exchange fails), other extensions
are ignored. Divergences: an unknown user is answered with a salt derived from a per-process
secret and fails at the proof (Kafka fails at the first message), so the exchange does not
reveal which users exist; channel binding ``c=`` must be the base64 of the gs2 header received
(Kafka does not check it); the reserved ``m=`` attribute fails the exchange (RFC 5802).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

MIN_ITERATIONS = 4096  # Kafka's ScramMechanism limits, for both mechanisms
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096  # kafka-storage format --add-scram's default


class ScramMechanism(NamedTuple):
    name: str  # SASL mechanism name
    type: int  # the code DescribeUserScramCredentials / AlterUserScramCredentials carry
    hash_name: str  # hashlib name

    @property
    def digest_size(self) -> int:
        return hashlib.new(self.hash_name).digest_size

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", 1, "sha256")
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", 2, "sha512")
MECHANISMS: dict[str, ScramMechanism] = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
BY_TYPE: dict[int, ScramMechanism] = {m.type: m for m in MECHANISMS.values()}


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the server stores for one user and mechanism (never the password)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:
        return f"ScramCredential(iterations={self.iterations}, salt=<hidden>, keys=<hidden>)"


def salted_password(mechanism: ScramMechanism, password: str, salt: bytes,
                    iterations: int) -> bytes:
    """Hi(password, salt, i): PBKDF2-HMAC with one block of output (RFC 5802 section 2.2)."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode("utf-8"), salt, iterations)


def credential_from_salted_password(mechanism: ScramMechanism, salt: bytes,
                                    salted: bytes, iterations: int) -> ScramCredential:
    """The stored form of a SaltedPassword (what AlterUserScramCredentials sends)."""
    client_key = mechanism.hmac(salted, b"Client Key")
    return ScramCredential(salt=bytes(salt), stored_key=mechanism.hash(client_key),
                           server_key=mechanism.hmac(salted, b"Server Key"),
                           iterations=iterations)


def make_credential(mechanism: ScramMechanism, password: str,
                    iterations: int = DEFAULT_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:
    """A credential for ``password`` with a fresh random salt (or the given one)."""
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS} "
                         f"for {mechanism.name}, not {iterations}")
    if salt is None:
        salt = secrets.token_bytes(24)
    return credential_from_salted_password(
        mechanism, salt, salted_password(mechanism, password, salt, iterations), iterations)


def sasl_name(username: str) -> str:
    """RFC 5802 saslname escaping: ``=`` -> ``=3D``, ``,`` -> ``=2C``."""
    return username.replace("=", "=3D").replace(",", "=2C")


def username_from_sasl_name(name: str) -> str:
    """Undo ``sasl_name``; a ``=`` not starting ``=2C``/``=3D`` raises ValueError."""
    if "=" in re.sub("=2C|=3D", "", name):
        raise ValueError("invalid saslname escape")
    return re.sub("=2C|=3D", lambda m: "," if m.group() == "=2C" else "=", name)


class ScramAuthenticationError(Exception):
    """The exchange failed. ``str(e)`` is for the broker's log (never a password, proof or
    token); ``client_message`` is what the client may be told (None: a generic message)."""

    def __init__(self, reason: str, client_message: str | None = None) -> None:
        super().__init__(reason)
        self.client_message = client_message


# Grammar pieces (RFC 5802 section 7; Kafka's ScramMessages). Names may be any UTF-8 but
# NUL, ',' and '=' (other than the escapes); a nonce is printable ASCII but ','.
_SASLNAME = r"(?:[^\x00,=]|=2C|=3D)+"
_VALUE = r"[^\x00,]+"
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"
_BASE64 = r"[A-Za-z0-9+/]*={0,2}"
_EXTENSIONS = rf"(?:,[A-Za-z]+={_VALUE})*"
_CLIENT_FIRST = re.compile(
    rf"(?P<gs2>n,(?:a=(?P<authzid>{_SASLNAME}))?,)"
    rf"(?P<bare>n=(?P<name>{_SASLNAME}),r=(?P<nonce>{_PRINTABLE})(?P<ext>{_EXTENSIONS}))")
_CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<cb>{_BASE64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS}),"
    rf"p=(?P<proof>{_BASE64})")
TOKEN_AUTH = "tokenauth"

_FAKE_SALT_KEY = secrets.token_bytes(32)  # per process: unknown users get a stable fake salt


def _b64decode(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ScramAuthenticationError("invalid base64 in client message") from None


class ScramServer:
    """The server side of one SCRAM exchange.

    ``lookup(username)`` returns the user's credential for this mechanism or None.
    ``evaluate(token)`` returns the server-first, then the server-final message; after that
    ``complete`` is True and ``username`` is the authenticated user. Any failure raises
    ``ScramAuthenticationError`` and leaves the server failed.
    """

    def __init__(self, mechanism: ScramMechanism,
                 lookup: Callable[[str], ScramCredential | None], *,
                 server_nonce: Callable[[], str] | None = None) -> None:
        self.mechanism = mechanism
        self._lookup = lookup
        self._server_nonce = server_nonce or (lambda: secrets.token_urlsafe(24))
        self._state = "client-first"
        self._credential: ScramCredential | None = None
        self._gs2_header = b""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._known = False  # whether the user has a credential (else a stand-in is used)
        self.username: str | None = None
        self.complete = False

    def evaluate(self, token: bytes) -> bytes:
        try:
            if self._state == "client-first":
                return self._client_first(token)
            if self._state == "client-final":
                return self._client_final(token)
            raise ScramAuthenticationError(f"unexpected SCRAM message in state {self._state}")
        except ScramAuthenticationError:
            self._state = "failed"
            self._credential = None
            raise

    def _client_first(self, token: bytes) -> bytes:
        text = _decode(token)
        m = _CLIENT_FIRST.fullmatch(text)
        if m is None:
            raise ScramAuthenticationError("invalid SCRAM client-first message")
        try:
            username = username_from_sasl_name(m.group("name"))
        except ValueError:
            raise ScramAuthenticationError("invalid SCRAM user name") from None
        extensions = dict(item.split("=", 1) for item in m.group("ext").split(",")[1:])
        if extensions.get(TOKEN_AUTH, "").lower() == "true":
            raise ScramAuthenticationError("delegation token authentication is not supported")
        authzid = m.group("authzid")
        if authzid is not None and authzid != m.group("name"):
            raise ScramAuthenticationError(
                f"user {username!r} requested another authorization id",
                "Authentication failed: Client requested an authorization id that is "
                "different from username")
        credential = self._lookup(username)
        self._known = credential is not None
        if credential is None:
            credential = _unknown_user_credential(self.mechanism, username)
        if credential.iterations < MIN_ITERATIONS:
            raise ScramAuthenticationError(
                f"credential of {username!r} has {credential.iterations} iterations, less than "
                f"the minimum {MIN_ITERATIONS} for {self.mechanism.name}")
        self.username = username
        self._credential = credential
        self._gs2_header = m.group("gs2").encode("utf-8")
        self._client_first_bare = m.group("bare")
        self._nonce = m.group("nonce") + self._server_nonce()
        self._server_first = (f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},"
                              f"i={credential.iterations}")
        self._state = "client-final"
        return self._server_first.encode("utf-8")

    def _client_final(self, token: bytes) -> bytes:
        text = _decode(token)
        m = _CLIENT_FINAL.fullmatch(text)
        if m is None:
            raise ScramAuthenticationError("invalid SCRAM client-final message")
        if _b64decode(m.group("cb")) != self._gs2_header:
            raise ScramAuthenticationError("channel binding does not match the gs2 header")
        # Kafka (>= 3.8.1) accepts a nonce that ends with the server's: librdkafka before 2.6
        # sends its own nonce twice over (client nonce + the combined nonce)
        if not m.group("nonce").endswith(self._nonce):
            raise ScramAuthenticationError("invalid nonce in the SCRAM client-final message")
        proof = _b64decode(m.group("proof"))
        credential = self._credential
        assert credential is not None
        auth_message = ",".join((self._client_first_bare, self._server_first,
                                 m.group("without_proof"))).encode("utf-8")
        mech = self.mechanism
        client_signature = mech.hmac(credential.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise ScramAuthenticationError("SCRAM client proof has the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        matches = hmac.compare_digest(mech.hash(client_key), credential.stored_key)
        if not (matches and self._known):
            raise ScramAuthenticationError(
                f"invalid credentials for user {self.username!r}"
                if self._known else f"unknown user {self.username!r}")
        server_signature = mech.hmac(credential.server_key, auth_message)
        self._credential = None
        self._state = "complete"
        self.complete = True
        return b"v=" + base64.b64encode(server_signature)


def _decode(token: bytes) -> str:
    try:
        return bytes(token).decode("utf-8")
    except UnicodeDecodeError:
        raise ScramAuthenticationError("SCRAM message is not UTF-8") from None


def _unknown_user_credential(mechanism: ScramMechanism, username: str) -> ScramCredential:
    """A stand-in for a user without a credential: a salt stable per user and process, and
    keys no proof can match (the exchange then fails at the client-final message)."""
    seed = hmac.new(_FAKE_SALT_KEY, f"{mechanism.name}\0{username}".encode(),
                    "sha256").digest()
    return ScramCredential(salt=seed[:24], stored_key=secrets.token_bytes(mechanism.digest_size),
                           server_key=secrets.token_bytes(mechanism.digest_size),
                           iterations=DEFAULT_ITERATIONS)
