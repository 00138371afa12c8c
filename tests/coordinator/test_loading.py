"""coordinator.loading.decoded_records: what the group coordinator's and the share-group
state's loaders make of each record - a record type the coordinator does not keep is passed over
in silence, an unreadable record is logged and skipped, the rest are decoded in order."""

from __future__ import annotations

import logging

from semel.coordinator.loading import decoded_records
from semel.protocol.errors import ProtocolError
from semel.protocol.records import Record

log = logging.getLogger("test-loading")


class Unknown(ProtocolError):
    pass


def _decode(key: bytes | None, value: bytes | None) -> str:
    if key == b"other-type":
        raise Unknown("a record type not kept here")
    if key == b"garbage":
        raise ProtocolError("truncated")
    return f"{key.decode()}={value.decode()}"


def test_records_decoded_in_order_unknown_types_silent_unreadable_logged(caplog):
    records = [Record(10, 0, b"a", b"1", []), Record(11, 0, b"other-type", b"", []),
               Record(12, 0, b"garbage", b"", []), Record(13, 0, b"b", b"2", [])]
    with caplog.at_level(logging.ERROR, logger=log.name):
        out = [(record.offset, parsed)
               for record, parsed in decoded_records(records, _decode, Unknown, "p-0", log)]
    assert out == [(10, "a=1"), (13, "b=2")]
    assert [r.getMessage() for r in caplog.records] == [
        "p-0: unreadable record at 12 skipped: truncated"]


def test_an_error_that_is_not_a_protocol_error_is_not_swallowed():
    def decode(key, value):
        raise ValueError("a bug, not bad input")

    records = [Record(0, 0, b"a", b"1", [])]
    try:
        list(decoded_records(records, decode, Unknown, "p-0", log))
    except ValueError:
        return
    raise AssertionError("a ValueError from decode was swallowed")
