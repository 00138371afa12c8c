"""Error codes: complete, Kafka's names and retriable flags; the exception types."""

from __future__ import annotations

import inspect
import re

import kafka.errors as kafka_python_errors
import pytest

from semel.protocol.errors import Error, KafkaError, ProtocolError


def test_codes_are_contiguous_from_minus_one():
    assert [int(e) for e in Error] == list(range(-1, 137))


def test_names_are_upper_snake():
    assert all(re.fullmatch(r"[A-Z][A-Z0-9_]*", e.name) for e in Error)


@pytest.mark.parametrize(
    ("error", "code", "retriable"),
    [
        (Error.UNKNOWN_SERVER_ERROR, -1, False),
        (Error.NONE, 0, False),
        (Error.OFFSET_OUT_OF_RANGE, 1, False),
        (Error.CORRUPT_MESSAGE, 2, True),
        (Error.NOT_LEADER_OR_FOLLOWER, 6, True),
        (Error.REQUEST_TIMED_OUT, 7, True),
        (Error.NOT_COORDINATOR, 16, True),
        (Error.UNSUPPORTED_VERSION, 35, False),
        (Error.OUT_OF_ORDER_SEQUENCE_NUMBER, 45, False),
        (Error.DUPLICATE_SEQUENCE_NUMBER, 46, False),
        (Error.INVALID_PRODUCER_EPOCH, 47, False),
        (Error.INVALID_TXN_STATE, 48, False),
        (Error.CONCURRENT_TRANSACTIONS, 51, True),
        (Error.KAFKA_STORAGE_ERROR, 56, True),
        (Error.UNKNOWN_PRODUCER_ID, 59, False),
        (Error.INVALID_RECORD, 87, False),
        (Error.PRODUCER_FENCED, 90, False),
        (Error.TRANSACTION_ABORTABLE, 120, False),
        (Error.INVALID_REGULAR_EXPRESSION, 128, False),
        (Error.SHARE_SESSION_LIMIT_REACHED, 133, True),
        (Error.CONTROLLER_ID_NOT_REGISTERED, 136, False),
    ],
)
def test_known_codes(error, code, retriable):
    assert error == code and Error(code) is error
    assert error.retriable is retriable


# kafka-python names a few codes differently; and it calls CORRUPT_MESSAGE non-retriable
# where Java's CorruptRecordException is a RetriableException (Java is the reference).
KAFKA_PYTHON_NAMES = {
    -1: "UNKNOWN",
    0: "NO_ERROR",
    6: "NOT_LEADER_FOR_PARTITION",
    10: "MESSAGE_SIZE_TOO_LARGE",
    17: "INVALID_TOPIC",
    39: "INVALID_REPLICATION_ASSIGNMENT",
}
KAFKA_PYTHON_RETRIABLE_DIFFERS = {2}


def test_agrees_with_kafka_python():
    theirs = {
        cls.errno: cls
        for _, cls in inspect.getmembers(kafka_python_errors, inspect.isclass)
        if issubclass(cls, kafka_python_errors.BrokerResponseError) and cls.errno is not None
    }
    assert len(theirs) > 120
    for code, cls in theirs.items():
        ours = Error(code)
        assert KAFKA_PYTHON_NAMES.get(code, ours.name) == cls.message, code
        if code not in KAFKA_PYTHON_RETRIABLE_DIFFERS:
            assert ours.retriable == bool(cls.retriable), ours.name


def test_unknown_code_is_a_value_error():
    with pytest.raises(ValueError):
        Error(137)


def test_kafka_error():
    e = KafkaError(Error.NOT_COORDINATOR, "group g moved")
    assert e.code is Error.NOT_COORDINATOR and e.message == "group g moved"
    assert str(e) == "NOT_COORDINATOR: group g moved"
    bare = KafkaError(29)
    assert bare.code is Error.TOPIC_AUTHORIZATION_FAILED and bare.message is None
    assert str(bare) == "TOPIC_AUTHORIZATION_FAILED"
    with pytest.raises(KafkaError) as raised:
        raise KafkaError(Error.INVALID_TXN_STATE)
    assert raised.value.code.retriable is False


def test_protocol_error_is_a_plain_exception():
    e = ProtocolError("bad varint")
    assert str(e) == "bad varint"
    assert not isinstance(e, KafkaError)
