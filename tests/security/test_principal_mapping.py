"""broker.security.ssl_principal: Java's RFC 2253 DN of a certificate, and Kafka's mapping rules.

The rule cases are those of Kafka's SslPrincipalMapperTest and its documentation; the DN cases
were checked against Java's X500Principal.getName(), and are re-checked against it here when
Java is installed.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.name import _ASN1Type
from cryptography.x509.oid import NameOID

from semel.broker.config import ConfigError, load_config
from semel.broker.security import ANONYMOUS, Principal
from semel.broker.security.ssl_principal import (
    CertificateError,
    NoMatchingRule,
    SslPrincipalMapper,
    distinguished_name,
    principal_from_certificate,
    subject_name,
)
from tests.security.certs import CertificateAuthority, client_name

# ------------------------------------------------------------------------------- rules


@pytest.mark.parametrize(
    "rules",
    [
        "DEFAULT",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
        "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
        "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
        "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
    ],
)
def test_valid_rules(rules: str) -> None:
    SslPrincipalMapper(rules)


@pytest.mark.parametrize(
    "rules",
    [
        "default",
        "DEFAUL",
        "DEFAULT/L",
        "DEFAULT/U",
        "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
        "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
        "RULE:(unclosed/$1/",  # semel: the pattern is compiled at start
        "RULE:^(.*)$/${nope}/",  # semel: replacement checked at start
        "RULE:^(.*)$/$x/",
        "RULE:^(.*)$/a\\/",
    ],
)
def test_invalid_rules(rules: str) -> None:
    with pytest.raises(ValueError) as info:
        SslPrincipalMapper(rules)
    assert "\n" not in str(info.value)


def test_kafka_mapping_examples() -> None:
    mapper = SslPrincipalMapper(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L, RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U, RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U, DEFAULT"
    )
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert (
        mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"
    )


@pytest.mark.parametrize(
    ("rules", "shown"),
    [
        ("", "[]"),
        ("DEFAULT", "[DEFAULT]"),
        ("RULE://", "[RULE:/]"),
        ("RULE:/.*/", "[RULE:/.*]"),
        ("RULE:/.*/L", "[RULE:/.*/L]"),
        ("RULE://,DEFAULT", "[RULE:/, DEFAULT]"),
        ("  RULE:// ,  DEFAULT  ", "[RULE:/, DEFAULT]"),
        ("  RULE:   /     / ,  DEFAULT  ", "[RULE:   /     , DEFAULT]"),
        ("  RULE:  /     /U   ,DEFAULT  ", "[RULE:  /     /U, DEFAULT]"),
        (
            "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ",
            "[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]",
        ),
        (",   , , ,      , , ,   ", "[]"),
        (",,RULE://,,,DEFAULT,,", "[RULE:/, DEFAULT]"),
        (",  , RULE: /   /    ,,,   DEFAULT, ,   ", "[RULE: /   , DEFAULT]"),
        ("     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,", "[RULE:   /  /U, DEFAULT]"),
        ("RULE:\\/\\\\\\(\\)\\n\\t/\\/\\//", "[RULE:\\/\\\\\\(\\)\\n\\t/\\/\\/]"),
        ("RULE:\\**\\/+/*/L,RULE:\\/*\\**/**/", "[RULE:\\**\\/+/*/L, RULE:\\/*\\**/**]"),
        (
            ("RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, "
            "/DEFAULT/,DEFAULT"),
            ("[RULE:,RULE:,/,RULE:,\\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT, "
            "/DEFAULT, DEFAULT]"),
        ),
    ],
)
def test_rule_splitting_as_kafka(rules: str, shown: str) -> None:
    assert str(SslPrincipalMapper(rules)) == f"SslPrincipalMapper(rules = {shown})"


def test_comma_with_whitespace() -> None:
    mapper = SslPrincipalMapper("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"


@pytest.mark.parametrize(
    ("rule", "dn", "expected"),
    [
        ("RULE:^CN=(.*?),OU=(.*?),O=(.*)$/$1@$4/", "CN=a,OU=b,O=c", "a@$4"),  # missing group: text
        ("RULE:^CN=(.*?),OU=(.*?)$/$12/", "CN=a,OU=b", "a2"),  # $12 with 2 groups is $1 then "2"
        ("RULE:^CN=(?<user>[^,]*),.*$/${user}!/", "CN=carol,O=x", "carol!"),  # Java named group
        ("RULE:^CN=([^,]*),.*$/\\$1=$1/", "CN=dave,O=x", "$1=dave"),  # escaped dollar
        ("RULE:^CN=([^,]*),.*$/$0/U", "CN=erin,O=x", "CN=ERIN,O=X"),  # $0: the whole match
        ("RULE:(a)|(b)/[$2]/", "a", "[]"),  # a group that took no part is empty
        ("RULE:x*/-/", "", "-"),  # replaceAll of an empty match
    ],
)
def test_java_replacement_semantics(rule: str, dn: str, expected: str) -> None:
    assert SslPrincipalMapper(rule).name(dn) == expected


def test_no_matching_rule() -> None:
    mapper = SslPrincipalMapper("RULE:^CN=(.*),OU=ServiceUsers$/$1/")
    with pytest.raises(NoMatchingRule, match="no ssl.principal.mapping.rules rule applies"):
        mapper.name("CN=x,OU=Other")
    with pytest.raises(NoMatchingRule):
        SslPrincipalMapper("").name("CN=x")


def test_rules_are_validated_at_start() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, ["ssl.principal.mapping.rules=RULE:^CN=(.*?$/$1/"], {})
    assert str(info.value).startswith("ssl.principal.mapping.rules: ")
    assert "\n" not in str(info.value)
    assert (
        load_config(None, ["ssl.principal.mapping.rules= DEFAULT "], {}).ssl_principal_mapping_rules
        == "DEFAULT"
    )


# ------------------------------------------------------------------------------- DN and principal

A = x509.NameAttribute


def rdn(*attrs: x509.NameAttribute) -> x509.RelativeDistinguishedName:
    return x509.RelativeDistinguishedName(list(attrs))


# subject (as encoded, first RDN first) -> Java's X500Principal.getName()
NAMES: list[tuple[x509.Name, str]] = [
    (
        client_name("alice", ou="eng", o="Acme", l="SF", st="CA", c="US"),
        "CN=alice,OU=eng,O=Acme,L=SF,ST=CA,C=US",
    ),
    (
        x509.Name(
            [
                A(NameOID.COMMON_NAME, 'a,b+c"d\\e<f>g;h=i#j'),
                A(NameOID.EMAIL_ADDRESS, "alice@x.org"),
            ]
        ),
        '1.2.840.113549.1.9.1=#160b616c69636540782e6f7267,CN=a\\,b\\+c\\"d\\\\e\\<f\\>g\\;h\\=i\\#j',
    ),
    (
        x509.Name(
            [A(NameOID.COMMON_NAME, " lead and trail  "), A(NameOID.ORGANIZATION_NAME, "#x")]
        ),
        "O=\\#x,CN=\\ lead and trail\\ \\ ",
    ),
    (x509.Name([A(NameOID.COMMON_NAME, "Zoë ünïcode 日本")]), "CN=Zoë ünïcode 日本"),
    (
        x509.Name([A(NameOID.COMMON_NAME, "bmp", _type=_ASN1Type.BMPString)]),
        "CN=\\00b\\00m\\00p",
    ),  # Java decodes the UTF-16 bytes as UTF-8
    (
        x509.Name(
            [
                A(NameOID.COMMON_NAME, "p", _type=_ASN1Type.PrintableString),
                A(NameOID.ORGANIZATION_NAME, "i", _type=_ASN1Type.IA5String),
                A(NameOID.ORGANIZATIONAL_UNIT_NAME, "t", _type=_ASN1Type.T61String),
            ]
        ),
        "OU=t,O=i,CN=p",
    ),
    (x509.Name([A(NameOID.COMMON_NAME, "u", _type=_ASN1Type.UniversalString)]), "CN=#1c0400000075"),
    (
        x509.Name(
            [
                rdn(A(NameOID.COMMON_NAME, "multi"), A(NameOID.USER_ID, "u1")),
                rdn(A(NameOID.DOMAIN_COMPONENT, "example")),
                rdn(A(NameOID.SERIAL_NUMBER, "123")),
                rdn(A(NameOID.TITLE, "boss")),
                rdn(A(NameOID.STREET_ADDRESS, "Main St")),
            ]
        ),
        "STREET=Main St,2.5.4.12=#0c04626f7373,2.5.4.5=#1303313233,DC=example,CN=multi+UID=u1",
    ),
    (
        x509.Name(
            [A(NameOID.COMMON_NAME, "nul\x00tab\tcr\rdel\x7f"), A(NameOID.ORGANIZATION_NAME, "")]
        ),
        "O=,CN=nul\\00tab\tcr\rdel\x7f",
    ),
    (x509.Name([A(NameOID.COMMON_NAME, "  ")]), "CN=\\ \\ "),
    (x509.Name([A(NameOID.COMMON_NAME, "\r x")]), "CN=\\\r\\ x"),
    (
        x509.Name([A(NameOID.COMMON_NAME, "a'b(c)d-e.f/g:h?i!j@k%l&m*n~o`p^q{r}s|t[u]v_w$x")]),
        "CN=a'b(c)d-e.f/g:h?i!j@k%l&m*n~o`p^q{r}s|t[u]v_w$x",
    ),
    (
        x509.Name(
            [
                A(x509.ObjectIdentifier("1.2.3.4"), "custom"),
                A(NameOID.GIVEN_NAME, "G"),
                A(NameOID.JURISDICTION_COUNTRY_NAME, "US"),
            ]
        ),
        "1.3.6.1.4.1.311.60.2.1.3=#13025553,2.5.4.42=#0c0147,1.2.3.4=#0c06637573746f6d",
    ),
    (x509.Name([]), ""),
]


@pytest.mark.parametrize(("name", "expected"), NAMES)
def test_distinguished_name_as_java_prints_it(name: x509.Name, expected: str) -> None:
    assert distinguished_name(name.public_bytes()) == expected


def test_names_agree_with_java(tmp_path: Path) -> None:
    java = shutil.which("java")
    if java is None:
        pytest.skip("Java is not installed")
    source = tmp_path / "Dn.java"
    source.write_text(
        "import javax.security.auth.x500.X500Principal;\n"
        "import java.nio.charset.StandardCharsets;\nimport java.util.HexFormat;\n"
        "public class Dn { public static void main(String[] a) throws Exception {\n"
        '  for (String h : new String(System.in.readAllBytes()).split("\\n")) {\n'
        "    String n = new X500Principal(HexFormat.of().parseHex(h)).getName();\n"
        "    System.out.println(HexFormat.of().formatHex(n.getBytes(StandardCharsets.UTF_8)));\n"
        "  } } }\n"
    )
    ca = CertificateAuthority.create()
    ders = [name.public_bytes() for name, _ in NAMES if len(name)]
    ders.append(subject_name(ca.issue(client_name("zed", ou="ops", email="z@x")).der()))
    out = subprocess.run(
        [java, str(source)],
        input="\n".join(d.hex() for d in ders),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    from_java = [bytes.fromhex(line).decode() for line in out.split()]
    assert [distinguished_name(d) for d in ders] == from_java


def test_principal_from_a_certificate() -> None:
    ca = CertificateAuthority.create()
    alice = ca.issue(client_name("alice", ou="eng", o="Acme", c="US"))
    assert principal_from_certificate(alice.der()) == Principal(
        "User", "CN=alice,OU=eng,O=Acme,C=US"
    )
    assert principal_from_certificate(alice.der(), "RULE:^CN=([^,]*),.*$/$1/") == Principal(
        "User", "alice"
    )
    mapper = SslPrincipalMapper("RULE:^CN=([^,]*),OU=ServiceUsers,.*$/$1/")
    with pytest.raises(NoMatchingRule):
        principal_from_certificate(alice.der(), mapper)
    assert principal_from_certificate(None) == ANONYMOUS
    assert (
        distinguished_name(subject_name(ca.cert.public_bytes(serialization.Encoding.DER)))
        == "CN=semel test CA"
    )


@pytest.mark.parametrize(
    "der",
    [
        b"",
        b"\x30",
        b"\x30\x05\x02\x01",
        b"\x04\x00",
        b"\x30\x84\xff\xff\xff\xff",
        b"\x30\x03\x30\x01\x00",
    ],
)
def test_malformed_certificates_raise_certificate_error(der: bytes) -> None:
    with pytest.raises(CertificateError):
        principal_from_certificate(der)


def test_every_truncation_of_a_certificate_is_refused_cleanly() -> None:
    der = CertificateAuthority.create().issue("x").der()
    for cut in range(len(der)):
        try:
            principal_from_certificate(der[:cut])
        except CertificateError:
            pass
