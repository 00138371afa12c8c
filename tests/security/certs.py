"""Test certificates made on the fly (never committed): a CA, server and client identities.

    ca = CertificateAuthority.create()
    server = ca.issue("localhost", server=True)    # SAN localhost, 127.0.0.1, ::1
    alice = ca.issue(client_name("alice", ou="eng", o="Acme", c="US"))
    files = server.write_pem(tmp / "server", password="key-secret")   # cert, key, bundle
    server.write_pkcs12(tmp / "server.p12", "store-secret")
    ca.write_truststore_pkcs12(tmp / "trust.p12", "trust-secret")     # cryptography
    java_truststore(tmp / "trust-java.p12", "trust-secret", [ca.cert])  # keytool, if present

`make_tls_files(directory)` writes the usual set at once. PKCS12 trust stores written by the
cryptography library lack Java's "trusted certificate" attribute, so Java clients need the
keytool-made one; Python and librdkafka read either. Keys are EC P-256 unless key_type="rsa".
"""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_DAY = datetime.timedelta(days=1)


def _new_key(key_type: str):
    if key_type == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ec.generate_private_key(ec.SECP256R1())


def client_name(
    cn: str, *, ou: str = "", o: str = "", l: str = "", st: str = "", c: str = "", email: str = ""
) -> x509.Name:
    """A subject encoded C, ST, L, O, OU, CN (Java prints it CN=..,OU=..,O=..,L=..,ST=..,C=..)."""
    attrs = [
        (NameOID.COUNTRY_NAME, c),
        (NameOID.STATE_OR_PROVINCE_NAME, st),
        (NameOID.LOCALITY_NAME, l),
        (NameOID.ORGANIZATION_NAME, o),
        (NameOID.ORGANIZATIONAL_UNIT_NAME, ou),
        (NameOID.COMMON_NAME, cn),
        (NameOID.EMAIL_ADDRESS, email),
    ]
    return x509.Name([x509.NameAttribute(oid, value) for oid, value in attrs if value])


@dataclass
class PemFiles:
    cert: Path  # the certificate chain, leaf first
    key: Path  # the private key (PKCS#8, encrypted if a password was given)
    bundle: Path  # key and chain in one file: Kafka's PEM key store file


@dataclass
class Identity:
    key: object
    cert: x509.Certificate
    chain: list[x509.Certificate] = field(default_factory=list)  # issuers above cert

    def cert_pem(self) -> str:
        return self.cert.public_bytes(serialization.Encoding.PEM).decode()

    def chain_pem(self) -> str:
        return "".join(
            c.public_bytes(serialization.Encoding.PEM).decode() for c in [self.cert, *self.chain]
        )

    def key_pem(self, password: str | None = None) -> str:
        encryption = (
            serialization.NoEncryption()
            if password is None
            else serialization.BestAvailableEncryption(password.encode())
        )
        return self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
        ).decode()

    def der(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.DER)

    def write_pem(self, base: Path, password: str | None = None) -> PemFiles:
        """base.crt, base.key and base.pem (key + chain)."""
        base.parent.mkdir(parents=True, exist_ok=True)
        files = PemFiles(
            base.with_suffix(".crt"), base.with_suffix(".key"), base.with_suffix(".pem")
        )
        files.cert.write_text(self.chain_pem())
        files.key.write_text(self.key_pem(password))
        files.bundle.write_text(self.key_pem(password) + self.chain_pem())
        return files

    def write_pkcs12(self, path: Path, password: str, name: str = "semel") -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(
            pkcs12.serialize_key_and_certificates(
                name.encode(),
                self.key,
                self.cert,
                self.chain or None,
                serialization.BestAvailableEncryption(password.encode()),
            )
        )
        return path


@dataclass
class CertificateAuthority(Identity):
    @classmethod
    def create(cls, cn: str = "semel test CA", key_type: str = "ec") -> CertificateAuthority:
        key = _new_key(key_type)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY)
            .not_valid_after(now + 30 * _DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(key, hashes.SHA256())
        )
        return cls(key, cert)

    def issue(
        self,
        subject: str | x509.Name,
        *,
        server: bool = False,
        key_type: str = "ec",
        hosts: tuple[str, ...] = ("localhost", "127.0.0.1", "::1"),
    ) -> Identity:
        """A leaf certificate; `subject` a CN or a whole name. Server certificates carry
        `hosts` as subject alternative names; client ones the clientAuth usage."""
        key = _new_key(key_type)
        name = (
            subject
            if isinstance(subject, x509.Name)
            else x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
        )
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY)
            .not_valid_after(now + 30 * _DAY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                    if server
                    else [ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
        )
        if server:
            sans: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    sans.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    sans.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return Identity(key, builder.sign(self.key, hashes.SHA256()), [self.cert, *self.chain])

    def write_truststore_pkcs12(self, path: Path, password: str | None) -> Path:
        """A PKCS12 trust store with only this CA, written by cryptography (not for Java)."""
        encryption = (
            serialization.NoEncryption()
            if password is None
            else serialization.BestAvailableEncryption(password.encode())
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(
            pkcs12.serialize_key_and_certificates(None, None, None, [self.cert], encryption)
        )
        return path


def java_truststore(path: Path, password: str, certs: list[x509.Certificate]) -> Path | None:
    """A PKCS12 trust store Java accepts (keytool -importcert); None without keytool."""
    keytool = shutil.which("keytool")
    if keytool is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    for i, cert in enumerate(certs):
        pem = path.with_name(f"{path.name}.{i}.crt")
        pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        subprocess.run(
            [
                keytool,
                "-importcert",
                "-noprompt",
                "-storetype",
                "PKCS12",
                "-alias",
                f"ca{i}",
                "-file",
                str(pem),
                "-keystore",
                str(path),
                "-storepass",
                password,
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        pem.unlink()
    return path


@dataclass
class TlsFiles:
    """What make_tls_files wrote; passwords are the `password` argument."""

    password: str
    ca: CertificateAuthority
    server: Identity
    ca_pem: Path
    server_pem: PemFiles  # key encrypted with `password`
    server_p12: Path
    truststore_p12: Path  # by cryptography
    clients: dict[str, Identity]
    client_pem: dict[str, PemFiles]  # keys not encrypted
    java_truststore_p12: Path | None = None  # by keytool, when Java is installed


def make_tls_files(
    directory: Path,
    *,
    password: str = "test-secret",
    clients: tuple[str, ...] = ("alice",),
    java: bool = False,
) -> TlsFiles:
    directory.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority.create()
    server = ca.issue("localhost", server=True)
    ca_pem = directory / "ca.crt"
    ca_pem.write_text(ca.cert_pem())
    identities = {cn: ca.issue(client_name(cn, ou="eng", o="Acme", c="US")) for cn in clients}
    return TlsFiles(
        password=password,
        ca=ca,
        server=server,
        ca_pem=ca_pem,
        server_pem=server.write_pem(directory / "server", password),
        server_p12=server.write_pkcs12(directory / "server.p12", password),
        truststore_p12=ca.write_truststore_pkcs12(directory / "truststore.p12", password),
        clients=identities,
        client_pem={
            cn: ident.write_pem(directory / f"client-{cn}") for cn, ident in identities.items()
        },
        java_truststore_p12=(
            java_truststore(directory / "truststore-java.p12", password, [ca.cert])
            if java
            else None
        ),
    )
