"""``--command-config FILE``: how the tools connect (Kafka's client property names).

The file is Java properties (``key=value`` or ``key: value``, ``#``/``!`` comments). Read:

- ``security.protocol``: PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL.
- TLS (Python's ``ssl``): ``ssl.truststore.location`` with ``ssl.truststore.type`` PEM (the
  default here) or PKCS12 (``ssl.truststore.password``), or ``ssl.truststore.certificates``
  (PEM text), or librdkafka's ``ssl.ca.location``; none: the system's CAs. A client
  certificate: ``ssl.keystore.location`` of type PEM (certificate chain and private key in one
  file; ``ssl.key.password`` if the key is encrypted), or librdkafka's
  ``ssl.certificate.location`` + ``ssl.key.location``. ``ssl.endpoint.identification.algorithm``
  empty turns the host name check off (Kafka's default ``https`` checks it). JKS stores are
  refused (convert them to PEM or PKCS12).
- SASL: ``sasl.mechanism`` PLAIN (the default here), SCRAM-SHA-256 or SCRAM-SHA-512, with
  the user and password from ``sasl.jaas.config`` (``... required username="u"
  password="p";``) or librdkafka's ``sasl.username`` / ``sasl.password``. SaslHandshake v1
  then SaslAuthenticate, as Kafka's clients do (no GSSAPI, no OAUTHBEARER).

Other keys are ignored, as Kafka's tools ignore client properties they do not use.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import socket
import ssl
from pathlib import Path

from semel.broker.tools.client import KafkaCommandError, ToolError, check, message
from semel.protocol.errors import Error

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = {"PLAIN": None, "SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}


def read_properties(path: str) -> dict[str, str]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ToolError(f"--command-config: cannot read {path}: {e.strerror}") from None
    props: dict[str, str] = {}
    lines = iter(text.splitlines())
    for line in lines:
        line = line.strip()
        while line.endswith("\\"):  # a continued line
            line = line[:-1] + next(lines, "").strip()
        if not line or line[0] in "#!":
            continue
        match = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
        if match is None:
            props[line] = ""
        else:
            props[match.group(1)] = match.group(2)
    return props


class Security:
    """A connection's TLS and SASL settings (see the module docstring)."""

    def __init__(self, props: dict[str, str]) -> None:
        self.protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
        if self.protocol not in PROTOCOLS:
            raise ToolError(f"--command-config: security.protocol {self.protocol!r} is not one "
                            f"of {', '.join(PROTOCOLS)}")
        self.context = _ssl_context(props) if self.protocol.endswith("SSL") else None
        self.mechanism = self.username = self.password = None
        if self.protocol.startswith("SASL"):
            self.mechanism = props.get("sasl.mechanism", "PLAIN").strip().upper()
            if self.mechanism not in MECHANISMS:
                raise ToolError(f"--command-config: sasl.mechanism {self.mechanism!r} is not "
                                f"supported (one of {', '.join(MECHANISMS)})")
            self.username, self.password = _credentials(props)

    @classmethod
    def from_file(cls, path: str | None) -> Security | None:
        if path is None:
            return None
        security = cls(read_properties(path))
        return None if security.protocol == "PLAINTEXT" else security

    def wrap(self, sock: socket.socket, host: str, address: str) -> socket.socket:
        if self.context is None:
            return sock
        try:
            return self.context.wrap_socket(sock, server_hostname=host)
        except ssl.SSLError as e:
            raise ToolError(f"TLS handshake with {address} failed: "
                            f"{e.reason or e.strerror or e}") from None
        except OSError as e:
            raise ToolError(f"TLS handshake with {address} failed: {e.strerror or e}") from None

    def authenticate(self, conn) -> None:
        if self.mechanism is None:
            return
        version = conn.pick(SASL_HANDSHAKE, 1)
        resp = conn.request(SASL_HANDSHAKE, message(SASL_HANDSHAKE, mechanism=self.mechanism),
                            version)
        check(resp.error_code, f"SASL mechanism {self.mechanism} on {conn.address}",
              "the broker enables " + (", ".join(resp.mechanisms) or "none"))
        if self.mechanism == "PLAIN":
            _authenticate(conn, b"\0" + self.username.encode() + b"\0" + self.password.encode())
        else:
            _scram(conn, MECHANISMS[self.mechanism], self.username, self.password)


def _authenticate(conn, token: bytes) -> bytes:
    version = conn.pick(SASL_AUTHENTICATE)
    resp = conn.request(SASL_AUTHENTICATE, message(SASL_AUTHENTICATE, auth_bytes=token), version)
    check(resp.error_code, f"SASL authentication with {conn.address} failed",
          resp.error_message)
    return resp.auth_bytes


def _scram(conn, digest, username: str, password: str) -> None:
    """RFC 5802's client side (no channel binding, as Kafka's clients)."""
    name = username.replace("=", "=3D").replace(",", "=2C")
    nonce = base64.b64encode(secrets.token_bytes(18)).decode()
    client_first_bare = f"n={name},r={nonce}"
    server_first = _authenticate(conn, b"n,," + client_first_bare.encode()).decode()
    fields = dict(item.split("=", 1) for item in server_first.split(",") if "=" in item)
    try:
        server_nonce, iterations = fields["r"], int(fields["i"])
        salt = base64.b64decode(fields["s"])
    except (KeyError, ValueError) as e:
        raise KafkaCommandError(Error.SASL_AUTHENTICATION_FAILED,
                                f"bad SCRAM server-first message from {conn.address}") from e
    if not server_nonce.startswith(nonce):
        raise KafkaCommandError(Error.SASL_AUTHENTICATION_FAILED,
                                f"SCRAM nonce mismatch from {conn.address}")
    salted = hashlib.pbkdf2_hmac(digest().name, password.encode(), salt, iterations)
    client_key = hmac.digest(salted, b"Client Key", digest)
    stored_key = digest(client_key).digest()
    without_proof = f"c=biws,r={server_nonce}"
    auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac.digest(stored_key, auth_message, digest)
    proof = bytes(a ^ b for a, b in zip(client_key, signature))
    server_final = _authenticate(conn, f"{without_proof},p={base64.b64encode(proof).decode()}"
                                 .encode()).decode()
    server_key = hmac.digest(salted, b"Server Key", digest)
    expected = base64.b64encode(hmac.digest(server_key, auth_message, digest)).decode()
    if not hmac.compare_digest(server_final, f"v={expected}"):
        raise KafkaCommandError(Error.SASL_AUTHENTICATION_FAILED,
                                f"the SCRAM server signature from {conn.address} is wrong")


def _credentials(props: dict[str, str]) -> tuple[str, str]:
    jaas = props.get("sasl.jaas.config")
    if jaas:
        found = dict(re.findall(r'(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"', jaas))
        if "username" not in found or "password" not in found:
            raise ToolError('--command-config: sasl.jaas.config needs username="..." and '
                            'password="..."')
        return found["username"], found["password"]
    if "sasl.username" in props and "sasl.password" in props:
        return props["sasl.username"], props["sasl.password"]
    raise ToolError("--command-config: SASL needs sasl.jaas.config (or sasl.username and "
                    "sasl.password)")


def _ssl_context(props: dict[str, str]) -> ssl.SSLContext:
    context = ssl.create_default_context()
    if props.get("ssl.endpoint.identification.algorithm", "https").strip() == "":
        context.check_hostname = False
    try:
        location = props.get("ssl.truststore.location")
        kind = props.get("ssl.truststore.type", "PEM").strip().upper()
        if props.get("ssl.truststore.certificates"):
            context.load_verify_locations(cadata=props["ssl.truststore.certificates"])
        elif props.get("ssl.ca.location") and not location:
            context.load_verify_locations(cafile=props["ssl.ca.location"])
        elif location:
            if kind == "PEM":
                context.load_verify_locations(cafile=location)
            elif kind == "PKCS12":
                context.load_verify_locations(cadata=_pkcs12_certificates(
                    location, props.get("ssl.truststore.password")))
            else:
                raise ToolError(f"--command-config: ssl.truststore.type {kind} is not "
                                "supported (PEM or PKCS12)")
        keystore = props.get("ssl.keystore.location")
        key_password = props.get("ssl.key.password") or None
        if keystore:
            kind = props.get("ssl.keystore.type", "PEM").strip().upper()
            if kind != "PEM":
                raise ToolError(f"--command-config: ssl.keystore.type {kind} is not supported "
                                "(a PEM file with the certificate chain and the key)")
            context.load_cert_chain(keystore, password=key_password)
        elif props.get("ssl.certificate.location"):
            context.load_cert_chain(props["ssl.certificate.location"],
                                    props.get("ssl.key.location"), password=key_password)
    except (OSError, ssl.SSLError) as e:
        raise ToolError(f"--command-config: {e.strerror or e}") from None
    return context


def _pkcs12_certificates(path: str, password: str | None) -> str:
    from cryptography.hazmat.primitives.serialization import Encoding, pkcs12

    data = Path(path).read_bytes()
    try:
        store = pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError as e:
        raise ToolError(f"--command-config: cannot read PKCS12 trust store {path}: {e}") from None
    certs = [c.certificate for c in store.additional_certs]
    if store.cert is not None:
        certs.append(store.cert.certificate)
    return "".join(c.public_bytes(Encoding.PEM).decode() for c in certs)
