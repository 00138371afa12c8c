"""Server-side TLS contexts built from a listener's Kafka settings, and client principals.

``build_server_context(sec)`` turns a listener's resolved SslSettings into an ``ssl.SSLContext``
for asyncio's ``create_server(ssl=...)``, with Kafka's rules and one-line ConfigErrors at start
(missing file, wrong password, a key that does not match its certificate, stores given in
inconsistent ways). Key stores and trust stores:
- PEM: ``ssl.keystore.location`` names one file holding the private key (PKCS#8 or OpenSSL's
  forms; encrypted with ``ssl.key.password`` or not) and the certificate chain, or the two are
  given inline in ``ssl.keystore.key`` / ``ssl.keystore.certificate.chain``; a trust store file
  or ``ssl.truststore.certificates`` holds CA certificates. No store password with PEM.
- PKCS12 (and JKS, Kafka's default type: Java reads a PKCS12 file under that type too): read
  with the ``cryptography`` library, since Python's ssl cannot; the key is protected by the
  store password, as keytool writes PKCS12 stores. A real JKS or JCEKS file is refused with
  the keytool command that converts it.
Python's ssl loads a key and chain only from files: they are written, the key re-encrypted
under a random one-time password, to a private (0700) temporary directory, loaded and
deleted at once. CA certificates are loaded from memory.

``ssl.client.auth`` none/requested/required is CERT_NONE/CERT_OPTIONAL/CERT_REQUIRED; without a
trust store, client certificates are checked against the system's CAs (as Java's default trust
store would). ``ssl.enabled.protocols`` becomes the minimum and maximum TLS version.
``ssl.cipher.suites`` takes Kafka's IANA/Java names of the common TLS 1.2 suites (translated,
see CIPHER_SUITES) or OpenSSL names. TLS 1.3 suites cannot be chosen one by one with Python's
ssl: a list naming only TLS 1.3 suites allows TLS 1.3 only, a list naming none allows TLS 1.2
only (Java would have no suite for the other version either), and otherwise every TLS 1.3
suite OpenSSL enables stays enabled.

The principal of a client certificate is ``principal_from_certificate`` (see ssl_principal).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import ssl
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from semel.broker.config import ConfigError
from semel.broker.security.listeners import ListenerSecurity, SslSettings
from semel.broker.security.ssl_principal import (
    NoMatchingRule,
    SslPrincipalMapper,
    distinguished_name,
    principal_from_certificate,
)

__all__ = [
    "CIPHER_SUITES",
    "TLS13_SUITES",
    "NoMatchingRule",
    "SslPrincipalMapper",
    "build_server_context",
    "distinguished_name",
    "principal_from_certificate",
]

_VERIFY_MODES = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}
_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
TLS13_SUITES = frozenset(
    {
        "TLS_AES_128_GCM_SHA256",
        "TLS_AES_256_GCM_SHA384",
        "TLS_CHACHA20_POLY1305_SHA256",
        "TLS_AES_128_CCM_SHA256",
        "TLS_AES_128_CCM_8_SHA256",
    }
)
# IANA/Java name -> OpenSSL name, TLS 1.2 suites (the `openssl ciphers -stdname` pairs)
CIPHER_SUITES = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256": "DHE-RSA-AES128-GCM-SHA256",
    "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384": "DHE-RSA-AES256-GCM-SHA384",
    "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "DHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384": "ECDHE-ECDSA-AES256-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384": "ECDHE-RSA-AES256-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_DHE_RSA_WITH_AES_128_CBC_SHA256": "DHE-RSA-AES128-SHA256",
    "TLS_DHE_RSA_WITH_AES_256_CBC_SHA256": "DHE-RSA-AES256-SHA256",
    "TLS_DHE_RSA_WITH_AES_128_CBC_SHA": "DHE-RSA-AES128-SHA",
    "TLS_DHE_RSA_WITH_AES_256_CBC_SHA": "DHE-RSA-AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_AES_256_CBC_SHA256": "AES256-SHA256",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
}
_KEY_BLOCK = re.compile(
    rb"-----BEGIN ((?:ENCRYPTED |RSA |EC |DSA )?PRIVATE KEY)-----.*?-----END \1-----", re.DOTALL
)
_JAVA_MAGIC = {b"\xfe\xed\xfe\xed": "JKS", b"\xce\xce\xce\xce": "JCEKS"}


class _Problem(Exception):
    """A problem with the TLS material; build_server_context adds the listener."""


def build_server_context(sec: ListenerSecurity) -> ssl.SSLContext:
    """The server SSLContext of a TLS listener (SSL or SASL_SSL); ConfigError on any problem,
    one line, naming the listener and the key, never a secret."""
    if sec.ssl is None:
        raise ConfigError(f"listener {sec.name} ({sec.security_protocol}) does not use TLS")
    try:
        return _context(sec.ssl)
    except _Problem as e:
        message = " ".join(str(e).split())
        raise ConfigError(f"listener {sec.name}: {message}") from None


def _context(s: SslSettings) -> ssl.SSLContext:
    key, chain = _keystore(s)
    trusted = _truststore(s)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.options |= ssl.OP_NO_RENEGOTIATION
    _load_key_and_chain(ctx, key, chain)
    if trusted:
        ctx.load_verify_locations(
            cadata="".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in trusted)
        )
    elif s.client_auth != "none":
        ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    ctx.verify_mode = _VERIFY_MODES[s.client_auth]
    low, high = _versions(s)
    ctx.minimum_version, ctx.maximum_version = low, high
    _set_ciphers(ctx, s)
    return ctx


# ---------------------------------------------------------------------------------------------
# key store


def _keystore(s: SslSettings) -> tuple[object, list[x509.Certificate]]:
    inline = s.keystore_key is not None or s.keystore_certificate_chain is not None
    if inline:
        if s.keystore_type != "PEM":
            raise _Problem(
                "ssl.keystore.key and ssl.keystore.certificate.chain need ssl.keystore.type=PEM, "
                f"not {s.keystore_type}"
            )
        if s.keystore_key is None or s.keystore_certificate_chain is None:
            missing = (
                "ssl.keystore.key" if s.keystore_key is None else "ssl.keystore.certificate.chain"
            )
            raise _Problem(f"{missing} must be set too (inline PEM needs the key and the chain)")
        if s.keystore_location:
            raise _Problem("both ssl.keystore.location and ssl.keystore.key are set; use one")
        if s.keystore_password is not None:
            raise _Problem("ssl.keystore.password cannot be used with PEM, only ssl.key.password")
        chain = _pem_certificates(
            s.keystore_certificate_chain.value.encode(), "ssl.keystore.certificate.chain"
        )
        key = _pem_key(s.keystore_key.value.encode(), s, "ssl.keystore.key")
        return key, _order_chain(key, chain, "ssl.keystore.certificate.chain")
    if not s.keystore_location:
        raise _Problem("no key store: set ssl.keystore.location")
    where = f"key store {s.keystore_location!r}"
    data = _read(s.keystore_location, "ssl.keystore.location")
    if s.keystore_type == "PEM":
        if s.keystore_password is not None:
            raise _Problem("ssl.keystore.password cannot be used with PEM, only ssl.key.password")
        chain = _pem_certificates(data, where)
        key = _pem_key(data, s, where)
        return key, _order_chain(key, chain, where)
    if s.keystore_password is None:
        raise _Problem(f"ssl.keystore.password is required to read {where}")
    store = _pkcs12(data, s.keystore_password.value, "ssl.keystore.password", where)
    if store.key is None or store.cert is None:
        raise _Problem(f"{where} holds no private key with its certificate")
    chain = [store.cert.certificate] + [c.certificate for c in store.additional_certs]
    return store.key, _order_chain(store.key, chain, where)


def _read(path: str, key: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise _Problem(f"{key}: file {path!r} not found") from None
    except OSError as e:
        raise _Problem(f"{key}: cannot read {path!r}: {e.strerror}") from None


def _pkcs12(data: bytes, password: str | None, password_key: str, where: str):
    kind = _JAVA_MAGIC.get(data[:4])
    if kind is not None:
        raise _Problem(
            f"{where} is a {kind} file, which semel cannot read: convert it to PKCS12 with "
            "keytool -importkeystore -srckeystore FILE -destkeystore FILE.p12 "
            "-deststoretype PKCS12"
        )
    if data.lstrip().startswith(b"-----BEGIN"):
        type_key = password_key.replace(".password", ".type")
        raise _Problem(f"{where} is a PEM file: set {type_key}=PEM")
    try:
        return pkcs12.load_pkcs12(data, None if password is None else password.encode())
    except ValueError:
        if password is None:
            raise _Problem(
                f"cannot read {where}: set {password_key}, or it is not PKCS12"
            ) from None
        raise _Problem(f"cannot read {where}: wrong {password_key}, or not a PKCS12 file") from None


def _pem_certificates(data: bytes, where: str) -> list[x509.Certificate]:
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise _Problem(f"no PEM certificate in {where}")
    try:
        return x509.load_pem_x509_certificates(data)
    except ValueError:
        raise _Problem(f"a certificate in {where} cannot be parsed") from None


def _pem_key(data: bytes, s: SslSettings, where: str) -> object:
    blocks = [m.group(0) for m in _KEY_BLOCK.finditer(data)]
    if len(blocks) != 1:
        raise _Problem(f"expected one private key in {where}, found {len(blocks)}")
    password = None if s.key_password is None else s.key_password.value.encode()
    try:
        return serialization.load_pem_private_key(blocks[0], password)
    except TypeError:
        if password is None:
            raise _Problem(
                f"the private key in {where} is encrypted: set ssl.key.password"
            ) from None
        # a password for a key that is not encrypted: the key is usable as it is
        try:
            return serialization.load_pem_private_key(blocks[0], None)
        except (TypeError, ValueError):
            raise _Problem(f"the private key in {where} cannot be read") from None
    except ValueError:
        if password is not None:
            raise _Problem(f"wrong ssl.key.password for the private key in {where}") from None
        raise _Problem(f"the private key in {where} cannot be read") from None
    except UnsupportedAlgorithm:
        raise _Problem(f"the private key in {where} cannot be read") from None


def _public(obj: object) -> bytes:
    return obj.public_key().public_bytes(  # type: ignore[attr-defined]
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _order_chain(key: object, certs: list[x509.Certificate], where: str) -> list[x509.Certificate]:
    """The certificate of `key` first, then each issuer in turn; others after them."""
    public = _public(key)
    leaf = next((c for c in certs if _public(c) == public), None)
    if leaf is None:
        raise _Problem(f"the private key does not match any certificate in {where}")
    chain, rest = [leaf], [c for c in certs if c is not leaf]
    while rest:
        issuer = next((c for c in rest if c.subject == chain[-1].issuer), None)
        if issuer is None or chain[-1].subject == chain[-1].issuer:
            break
        chain.append(issuer)
        rest.remove(issuer)
    return chain + rest


@contextmanager
def _private_dir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="semel-tls-")  # created 0700
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _write(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _load_key_and_chain(ctx: ssl.SSLContext, key: object, chain: list[x509.Certificate]) -> None:
    one_time = secrets.token_urlsafe(24).encode()
    key_pem = key.private_bytes(  # type: ignore[attr-defined]
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(one_time),
    )
    chain_pem = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in chain)
    with _private_dir() as d:
        key_file, chain_file = os.path.join(d, "key.pem"), os.path.join(d, "chain.pem")
        _write(key_file, key_pem)
        _write(chain_file, chain_pem)
        try:
            ctx.load_cert_chain(chain_file, key_file, password=one_time)
        except ssl.SSLError as e:
            raise _Problem(f"OpenSSL refuses the key or certificate: {e.reason or e}") from None


# ---------------------------------------------------------------------------------------------
# trust store, versions, cipher suites


def _truststore(s: SslSettings) -> list[x509.Certificate]:
    if s.truststore_certificates is not None:
        if s.truststore_type != "PEM":
            raise _Problem(
                f"ssl.truststore.certificates needs ssl.truststore.type=PEM, not {s.truststore_type}"
            )
        if s.truststore_location:
            raise _Problem("both ssl.truststore.location and ssl.truststore.certificates are set")
        if s.truststore_password is not None:
            raise _Problem("ssl.truststore.password cannot be used with PEM")
        return _pem_certificates(
            s.truststore_certificates.value.encode(), "ssl.truststore.certificates"
        )
    if not s.truststore_location:
        if s.truststore_password is not None:
            raise _Problem("ssl.truststore.password is set but ssl.truststore.location is not")
        return []
    where = f"trust store {s.truststore_location!r}"
    data = _read(s.truststore_location, "ssl.truststore.location")
    if s.truststore_type == "PEM":
        if s.truststore_password is not None:
            raise _Problem("ssl.truststore.password cannot be used with PEM")
        return _pem_certificates(data, where)
    password = None if s.truststore_password is None else s.truststore_password.value
    store = _pkcs12(data, password, "ssl.truststore.password", where)
    certs = ([store.cert.certificate] if store.cert is not None else []) + [
        c.certificate for c in store.additional_certs
    ]
    if not certs:
        raise _Problem(f"{where} holds no certificate")
    return certs


def _versions(s: SslSettings) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    versions = sorted(_VERSIONS[name] for name in s.enabled_protocols)
    low, high = versions[0], versions[-1]
    if not s.cipher_suites:
        return low, high
    tls13 = [name for name in s.cipher_suites if name in TLS13_SUITES]
    tls12 = [_openssl_name(name) for name in s.cipher_suites if name not in TLS13_SUITES]
    if not tls12:
        low = ssl.TLSVersion.TLSv1_3
    if not tls13:
        high = min(high, ssl.TLSVersion.TLSv1_2)
    if low > high:
        raise _Problem(
            f"ssl.cipher.suites ({', '.join(s.cipher_suites)}) has no suite for "
            f"ssl.enabled.protocols ({', '.join(s.enabled_protocols)})"
        )
    return low, high


def _openssl_name(name: str) -> str:
    if name in CIPHER_SUITES:
        return CIPHER_SUITES[name]
    if name.startswith(("TLS_", "SSL_")):
        raise _Problem(
            f"ssl.cipher.suites: {name} is not a suite semel can translate; give its OpenSSL "
            "name (see openssl ciphers -stdname)"
        )
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        probe.set_ciphers(name)
    except ssl.SSLError:
        raise _Problem(f"ssl.cipher.suites: OpenSSL knows no cipher suite {name!r}") from None
    return name


def _set_ciphers(ctx: ssl.SSLContext, s: SslSettings) -> None:
    names = [_openssl_name(n) for n in s.cipher_suites if n not in TLS13_SUITES]
    if names:
        try:
            ctx.set_ciphers(":".join(names))
        except ssl.SSLError:
            raise _Problem(f"ssl.cipher.suites: no usable suite in {', '.join(names)}") from None
