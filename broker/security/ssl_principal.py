"""The principal of a TLS client certificate, as Kafka's DefaultKafkaPrincipalBuilder makes it.

Kafka takes the peer certificate's subject as Java's ``X500Principal.getName()`` prints it (RFC
2253) and passes it through ``ssl.principal.mapping.rules``; the principal is ``User:`` + the
result. Without a client certificate the principal is ``User:ANONYMOUS``.

Java's RFC 2253 form, reproduced from the certificate's DER bytes (not from a decoded name, so
that the odd cases come out as Java prints them):
- RDNs last to first, joined by ``,``; the attributes of a multi-valued RDN in encoded order,
  joined by ``+``;
- keywords CN, C, L, ST, O, OU, STREET, DC and UID; any other attribute (emailAddress,
  serialNumber, title, ...) as its dotted OID with the value as ``#`` + the lower-case hex of
  its DER encoding, as is any value that is not a PrintableString, TeletexString, IA5String,
  GeneralString, BMPString or UTF8String;
- a string value's bytes decoded as UTF-8 (Java does this even for BMPString); ``, = + < > # ;
  " \\`` escaped with a backslash anywhere, NUL as ``\\00``, leading and trailing spaces and
  carriage returns with a backslash; every other character as it is.

Mapping rules (Kafka's SslPrincipalMapper): a comma-separated list of ``DEFAULT`` (the DN
unchanged) and ``RULE:pattern/replacement/`` with an optional ``L`` or ``U`` after the last
slash (lower/upper-case the result). The first rule whose pattern matches the whole DN wins;
its result is the DN with every match of the pattern replaced as Java's ``String.replaceAll``
does (``$1``, ``${name}``, ``\\`` escapes). A ``$n`` naming a group the pattern lacks is literal
text, as in Kafka. Patterns are Java regular expressions run by Python's ``re`` (``(?<name>``
is accepted; Java-only syntax such as ``\\p{Lu}`` is a configuration error). No matching rule:
NoMatchingRule, and the connection fails authentication as in Kafka.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from semel.broker.security import ANONYMOUS, Principal

__all__ = [
    "DEFAULT_RULES",
    "CertificateError",
    "NoMatchingRule",
    "SslPrincipalMapper",
    "distinguished_name",
    "principal_from_certificate",
    "subject_name",
]

DEFAULT_RULES = "DEFAULT"


class CertificateError(ValueError):
    """The certificate's DER encoding cannot be read."""


class NoMatchingRule(ValueError):  # Kafka's name
    """No rule of ``ssl.principal.mapping.rules`` applies to a distinguished name."""


# ---------------------------------------------------------------------------------------------
# DER: just enough to find the subject Name of an X.509 certificate and walk it.

_SEQUENCE, _SET, _OID, _INTEGER = 0x30, 0x31, 0x06, 0x02
_VERSION = 0xA0  # [0] EXPLICIT version in TBSCertificate
# Value tags Java prints as text (AVA.isDerString, non-canonical): PrintableString,
# TeletexString, IA5String, GeneralString, BMPString, UTF8String
_STRING_TAGS = frozenset({0x13, 0x14, 0x16, 0x1B, 0x1E, 0x0C})
_KEYWORDS = {  # the keywords Java's RFC 2253 output uses; every other OID is printed dotted
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
_ESCAPED = frozenset(',=+<>#;"\\')


class _Tlv(NamedTuple):
    tag: int
    start: int  # first byte of the TLV (its tag)
    body: int  # first byte of the contents
    end: int  # one past the last content byte


def _read(data: bytes, pos: int, end: int) -> _Tlv:
    if pos + 2 > end:
        raise CertificateError("truncated DER")
    tag = data[pos]
    i = pos + 1
    if tag & 0x1F == 0x1F:  # high tag number: skip its base-128 digits; no tag we need is one
        while i < end and data[i] & 0x80:
            i += 1
        i += 1
        tag = -1
    if i >= end:
        raise CertificateError("truncated DER")
    length = data[i]
    i += 1
    if length & 0x80:
        count = length & 0x7F
        if count == 0 or count > 4 or i + count > end:
            raise CertificateError("bad DER length")
        length = int.from_bytes(data[i : i + count], "big")
        i += count
    if i + length > end:
        raise CertificateError("DER length past the end")
    return _Tlv(tag, pos, i, i + length)


def _expect(data: bytes, pos: int, end: int, tag: int, what: str) -> _Tlv:
    tlv = _read(data, pos, end)
    if tlv.tag != tag:
        raise CertificateError(f"expected {what}")
    return tlv


def _oid(body: bytes) -> str:
    arcs: list[int] = []
    value = 0
    for byte in body:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            if not arcs:
                first = min(value // 40, 2)
                arcs += [first, value - 40 * first]
            else:
                arcs.append(value)
            value = 0
    if not arcs or body[-1] & 0x80:
        raise CertificateError("bad object identifier")
    return ".".join(map(str, arcs))


def subject_name(cert_der: bytes) -> bytes:
    """The DER encoding of the certificate's subject Name."""
    data = bytes(cert_der)
    cert = _expect(data, 0, len(data), _SEQUENCE, "a certificate")
    tbs = _expect(data, cert.body, cert.end, _SEQUENCE, "a TBSCertificate")
    pos = tbs.body
    field = _read(data, pos, tbs.end)
    if field.tag == _VERSION:
        pos = field.end
    pos = _expect(data, pos, tbs.end, _INTEGER, "a serial number").end
    pos = _expect(data, pos, tbs.end, _SEQUENCE, "a signature algorithm").end
    pos = _expect(data, pos, tbs.end, _SEQUENCE, "an issuer name").end
    pos = _expect(data, pos, tbs.end, _SEQUENCE, "a validity period").end
    subject = _expect(data, pos, tbs.end, _SEQUENCE, "a subject name")
    return data[subject.start : subject.end]


def _escape(text: str) -> str:
    chars: list[str] = []
    for c in text:
        if c in _ESCAPED:
            chars.append("\\" + c)
        elif c == "\0":
            chars.append("\\00")
        else:
            chars.append(c)
    out = "".join(chars)
    lead = len(out) - len(out.lstrip(" \r"))
    trail = len(out.rstrip(" \r"))
    if lead == len(out):  # all blanks: each escaped once
        return "".join("\\" + c for c in out)
    return (
        "".join("\\" + c for c in out[:lead])
        + out[lead:trail]
        + "".join("\\" + c for c in out[trail:])
    )


def _attribute(data: bytes, tlv: _Tlv) -> str:
    oid_tlv = _expect(data, tlv.body, tlv.end, _OID, "an attribute type")
    oid = _oid(data[oid_tlv.body : oid_tlv.end])
    value = _read(data, oid_tlv.end, tlv.end)
    keyword = _KEYWORDS.get(oid)
    if keyword is None or value.tag not in _STRING_TAGS:
        return f"{keyword or oid}=#{data[value.start : value.end].hex()}"
    text = data[value.body : value.end].decode("utf-8", errors="replace")
    return f"{keyword}={_escape(text)}"


def distinguished_name(name_der: bytes) -> str:
    """A DER-encoded X.500 Name in Java's ``X500Principal.getName()`` (RFC 2253) form."""
    data = bytes(name_der)
    name = _expect(data, 0, len(data), _SEQUENCE, "a name")
    rdns: list[str] = []
    pos = name.body
    while pos < name.end:
        rdn = _expect(data, pos, name.end, _SET, "a relative distinguished name")
        avas: list[str] = []
        inner = rdn.body
        while inner < rdn.end:
            ava = _expect(data, inner, rdn.end, _SEQUENCE, "an attribute")
            avas.append(_attribute(data, ava))
            inner = ava.end
        rdns.append("+".join(avas))
        pos = rdn.end
    return ",".join(reversed(rdns))


# ---------------------------------------------------------------------------------------------
# ssl.principal.mapping.rules

# Kafka's rule grammar (SslPrincipalMapper.RULE_PATTERN / RULE_SPLITTER), as Python regexes.
_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE)
_JAVA_NAMED_GROUP = re.compile(r"(?<!\\)\(\?<(?=[A-Za-z])")

# A parsed Java replacement: literal text, a group number or a group name.
_Part = str | int | tuple[str]


def _java_replacement(text: str, groups: int, names: set[str]) -> list[_Part]:
    """Java's Matcher.appendReplacement syntax, with Kafka's rule that a ``$n`` naming a group
    the pattern does not have stays literal text."""
    parts: list[_Part] = []
    literal: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            if i + 1 >= n:
                raise ValueError("replacement ends with a lone backslash")
            literal.append(text[i + 1])
            i += 2
        elif c == "$":
            if i + 1 >= n:
                raise ValueError("replacement ends with '$' (group index is missing)")
            if text[i + 1] == "{":
                close = text.find("}", i + 2)
                name = text[i + 2 : close] if close > 0 else ""
                if not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", name):
                    raise ValueError(f"bad named group reference in replacement {text!r}")
                if name not in names:
                    raise ValueError(f"replacement names group {name!r} the pattern lacks")
                parts += ["".join(literal), (name,)]
                literal = []
                i = close + 1
            elif text[i + 1].isdigit():
                ref = int(text[i + 1])
                if ref > groups:  # Kafka: a back reference to a missing group is literal
                    literal.append("$")
                    i += 1
                    continue
                i += 2
                while i < n and text[i].isdigit() and ref * 10 + int(text[i]) <= groups:
                    ref = ref * 10 + int(text[i])
                    i += 1
                parts += ["".join(literal), ref]
                literal = []
            else:
                raise ValueError(f"illegal group reference in replacement {text!r}")
        else:
            literal.append(c)
            i += 1
    parts.append("".join(literal))
    return [p for p in parts if p != ""]


class _Rule:
    __slots__ = ("case", "parts", "pattern", "source", "text")

    def __init__(self, source: str, pattern: str | None, replacement: str, case: str) -> None:
        self.source = source  # as Kafka's Rule.toString() shows it
        self.text = replacement
        self.case = case
        self.pattern: re.Pattern[str] | None = None
        self.parts: list[_Part] = []
        if pattern is None:
            return
        try:
            self.pattern = re.compile(_JAVA_NAMED_GROUP.sub("(?P<", pattern))
        except re.error as e:
            raise ValueError(f"invalid pattern {pattern!r}: {e}") from None
        names = set(self.pattern.groupindex)
        self.parts = _java_replacement(replacement, self.pattern.groups, names)

    def _expand(self, m: re.Match[str]) -> str:
        out = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
            else:
                out.append(m.group(part if isinstance(part, int) else part[0]) or "")
        return "".join(out)

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:  # DEFAULT
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self.pattern.sub(self._expand, dn)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result


class SslPrincipalMapper:
    """Parsed ``ssl.principal.mapping.rules``; ``SslPrincipalMapper(text)`` raises ValueError
    (one line) for a rule Kafka would refuse, an invalid pattern or replacement."""

    __slots__ = ("_rules",)

    def __init__(self, rules: str = DEFAULT_RULES) -> None:
        self._rules: list[_Rule] = []
        for m in _RULE_SPLITTER.finditer(rules.strip()):
            text = m.group(1)
            p = _RULE_PARSER.match(text)
            if p is None or p.end() != len(text):
                unmatched = "" if p is None else f", unmatched {text[p.end() :]!r}"
                raise ValueError(f"invalid rule {text!r}{unmatched}")
            if p.group(1) is not None:
                self._rules.append(_Rule("DEFAULT", None, "", ""))
            elif p.group(2) is not None:
                pattern, replacement, case = p.group(2), p.group(4), p.group(6)
                source = f"RULE:{pattern}/{replacement}" + (f"/{case}" if case else "")
                try:
                    self._rules.append(_Rule(source, pattern, replacement, case))
                except ValueError as e:
                    raise ValueError(f"rule {text!r}: {e}") from None
            # anything else is an empty rule, ignored as in Kafka

    def name(self, dn: str) -> str:
        """The principal name of ``dn``: the first applicable rule's result."""
        for rule in self._rules:
            result = rule.apply(dn)
            if result is not None:
                return result
        raise NoMatchingRule(f"no ssl.principal.mapping.rules rule applies to {dn!r}")

    def __str__(self) -> str:
        return f"SslPrincipalMapper(rules = [{', '.join(r.source for r in self._rules)}])"

    __repr__ = __str__


_DEFAULT_MAPPER = SslPrincipalMapper()


def principal_from_certificate(
    cert_der: bytes | None, mapper: SslPrincipalMapper | str = _DEFAULT_MAPPER
) -> Principal:
    """``User:`` + the mapped subject DN of the peer's leaf certificate (DER, as
    ``SSLObject.getpeercert(binary_form=True)`` returns it); None (no client certificate) is
    ``User:ANONYMOUS``. Raises NoMatchingRule or CertificateError; either fails authentication.
    """
    if cert_der is None:
        return ANONYMOUS
    if isinstance(mapper, str):
        mapper = SslPrincipalMapper(mapper)
    return Principal("User", mapper.name(distinguished_name(subject_name(cert_der))))
