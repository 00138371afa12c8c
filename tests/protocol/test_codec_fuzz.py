"""Hostile input: every generated decoder either returns a message or raises ProtocolError,
for random bytes and for mutated (bit-flipped, truncated, extended) valid encodings, fed
whole. Lengths and counts are checked before allocation, so absurd values fail fast."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from semel.protocol.api import APIS, codec
from semel.protocol.errors import ProtocolError
from tests.protocol.test_codec_roundtrip import random_struct

CASES = [(api.key, kind, v) for api in APIS for kind in ("request", "response")
         for v in (api.min_version, api.max_version)]


def decode_or_protocol_error(mod, version: int, data: bytes) -> None:
    try:
        mod.decode(version, data)
    except ProtocolError:
        pass


@pytest.mark.parametrize(("api_key", "kind", "version"), CASES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=300))
def test_random_bytes(api_key: int, kind: str, version: int, data: bytes) -> None:
    decode_or_protocol_error(codec(api_key, kind), version, data)


@pytest.mark.parametrize(("api_key", "kind", "version"), CASES)
def test_mutated_valid_messages(api_key: int, kind: str, version: int) -> None:
    mod = codec(api_key, kind)
    rng = random.Random(f"fuzz-{api_key}-{kind}-{version}")
    for _ in range(4):
        valid = bytes(mod.encode(version, random_struct(mod, mod.MESSAGE.__name__, rng)))
        for _ in range(60):
            data = bytearray(valid)
            op = rng.randrange(4)
            if op == 0 and data:
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            elif op == 1:
                del data[rng.randrange(len(data) + 1):]
            elif op == 2 and data:
                i = rng.randrange(len(data))
                data[i:i + 4] = rng.choice([b"\x7f\xff\xff\xff", b"\xff\xff\xff\xfe",
                                            b"\x80\x80\x80\x80\x80\x01"])
            else:
                data += rng.randbytes(rng.randrange(1, 9))
            decode_or_protocol_error(mod, version, bytes(data))


def test_absurd_array_count_is_rejected_before_allocation() -> None:
    mod = codec(3, "request")  # Metadata v1: int32 topic count
    with pytest.raises(ProtocolError, match="array of 2147483647 elements"):
        mod.decode(1, b"\x7f\xff\xff\xff")


def test_overlong_varint_is_rejected() -> None:
    mod = codec(18, "request")  # ApiVersions v3: compact strings
    with pytest.raises(ProtocolError, match="varint"):
        mod.decode(3, b"\x80\x80\x80\x80\x80\x01")


def test_null_in_non_nullable_string_is_rejected() -> None:
    mod = codec(10, "request")  # FindCoordinator v0: key is a non-nullable string
    with pytest.raises(ProtocolError, match="null"):
        mod.decode(0, b"\xff\xff")


def test_unknown_tagged_fields_are_skipped() -> None:
    mod = codec(18, "request")
    body = bytearray()
    body += b"\x04abc" + b"\x041.0"  # compact strings "abc", "1.0"
    body += b"\x02" + b"\x05\x02hi" + b"\x07\x00"  # two unknown tags: 5 (2 bytes), 7 (empty)
    msg, pos = mod.decode(3, bytes(body))
    assert (msg.client_software_name, msg.client_software_version) == ("abc", "1.0")
    assert pos == len(body)
