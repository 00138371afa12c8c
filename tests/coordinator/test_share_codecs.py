"""The generated ShareFetch/ShareAcknowledge v1 codecs (not in ``protocol.api.APIS`` yet, so
the generic codec tests skip them): random round trips, and hostile bytes that either decode
or raise ProtocolError."""

from __future__ import annotations

import importlib
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semel.protocol.api import SHARE_GROUP_APIS, module_name
from semel.protocol.errors import ProtocolError
from tests.protocol.test_codec_roundtrip import random_struct

CASES = [(api.name, kind, v) for api in SHARE_GROUP_APIS for kind in ("request", "response")
         for v in range(api.min_version, api.max_version + 1)]


def module(name: str, kind: str):
    return importlib.import_module(module_name(name, kind))


@pytest.mark.parametrize(("name", "kind", "version"), CASES)
def test_round_trip(name: str, kind: str, version: int) -> None:
    mod = module(name, kind)
    rng = random.Random(f"{name}-{kind}-{version}")
    for _ in range(20):
        msg = random_struct(mod, mod.MESSAGE.__name__, rng)
        data = bytes(mod.encode(version, msg))
        decoded, pos = mod.decode(version, data)
        assert pos == len(data)  # fields outside v1 (v0's, v2's) are not on the wire
        assert bytes(mod.encode(version, decoded)) == data
        assert mod.decode(version, data)[0] == decoded


@pytest.mark.parametrize(("name", "kind", "version"), CASES)
@settings(max_examples=80, deadline=None)
@given(data=st.binary(max_size=300))
def test_random_bytes(name: str, kind: str, version: int, data: bytes) -> None:
    try:
        module(name, kind).decode(version, data)
    except ProtocolError:
        pass
