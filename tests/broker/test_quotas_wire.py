"""Client quotas over the raw wire: AlterClientQuotas / DescribeClientQuotas with Kafka's
validation messages, persistence across a restart, and a produce over its quota answered
with a throttle time and its connection muted; the same calls through the Java AdminClient
3.9.1 (tests/java/SemelQuotas.java)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from semel.broker.testing import BrokerThread
from tests.javaclient import run_program
from tests.kafka_wire import (
    FETCH,
    PRODUCE,
    KafkaWire,
    create_topic,
    fetch_request,
    message,
    produce_request,
    records_batch,
)

DESCRIBE, ALTER = 48, 49
INVALID_REQUEST, UNSUPPORTED_VERSION = 42, 35
JAVA_QUOTAS = Path(__file__).resolve().parents[1] / "java" / "SemelQuotas.java"


def entity(**parts):
    return [message(ALTER, "request", "EntityData", entity_type=t.replace("_", "-"),
                    entity_name=n) for t, n in parts.items()]


def alter(wire, entries, *, validate_only=False, version=1):
    """entries: [(entity parts, [(key, value or None to remove)])]"""
    body = message(ALTER, "request", entries=[
        message(ALTER, "request", "EntryData", entity=entity(**parts), ops=[
            message(ALTER, "request", "OpData", key=k, value=0.0 if v is None else v,
                    remove=v is None) for k, v in ops])
        for parts, ops in entries], validate_only=validate_only)
    return wire.request(ALTER, version, body)


def describe(wire, components, *, strict=False, version=1):
    body = message(DESCRIBE, "request", components=[
        message(DESCRIBE, "request", "ComponentData", entity_type=t, match_type=m, match=n)
        for t, m, n in components], strict=strict)
    return wire.request(DESCRIBE, version, body)


def described(response) -> dict:
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity):
            {v.key: v.value for v in entry.values} for entry in response.entries}


@pytest.mark.parametrize("version", [0, 1])
def test_alter_and_describe_round_trip(bootstrap, version):
    with KafkaWire.connect(bootstrap) as wire:
        r = alter(wire, [({"user": "alice"}, [("producer_byte_rate", 1024.0)]),
                         ({"user": "alice", "client_id": None}, [("consumer_byte_rate", 2048.0)]),
                         ({"client_id": None}, [("request_percentage", 12.5)]),
                         ({"ip": "10.0.0.1"}, [("connection_creation_rate", 5.0)])],
                  version=version)
        assert [(e.error_code, e.error_message) for e in r.entries] == [(0, None)] * 4
        everything = described(describe(wire, [], version=version))
        assert everything == {
            (("user", "alice"),): {"producer_byte_rate": 1024.0},
            (("client-id", None), ("user", "alice")): {"consumer_byte_rate": 2048.0},
            (("client-id", None),): {"request_percentage": 12.5},
            (("ip", "10.0.0.1"),): {"connection_creation_rate": 5.0}}
        # exact user, not strict: alice alone and alice with a default client id
        assert set(described(describe(wire, [("user", 0, "alice")]))) == {
            (("user", "alice"),), (("client-id", None), ("user", "alice"))}
        assert set(described(describe(wire, [("user", 0, "alice")], strict=True))) == {
            (("user", "alice"),)}
        # default client id (match type 1), any user (2)
        assert set(described(describe(wire, [("client-id", 1, None)], strict=True))) == {
            (("client-id", None),)}
        assert set(described(describe(wire, [("user", 2, None), ("client-id", 1, None)]))) == {
            (("client-id", None), ("user", "alice"))}
        # removal; an entity left without values is gone
        r = alter(wire, [({"user": "alice"}, [("producer_byte_rate", None)])])
        assert r.entries[0].error_code == 0
        assert (("user", "alice"),) not in described(describe(wire, []))
        # validate_only changes nothing
        r = alter(wire, [({"user": "bob"}, [("producer_byte_rate", 1.0)])], validate_only=True)
        assert r.entries[0].error_code == 0
        assert (("user", "bob"),) not in described(describe(wire, []))


@pytest.mark.parametrize(("parts", "ops", "message_text"), [
    ({"user": "a", "ip": "1.2.3.4"}, [("producer_byte_rate", 1.0)],
     "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
    ({}, [("producer_byte_rate", 1.0)], "Invalid empty client quota entity"),
    ({"group": "g"}, [("producer_byte_rate", 1.0)], "Unhandled client quota entity type: group"),
    ({"user": ""}, [("producer_byte_rate", 1.0)], "Empty user not supported"),
    ({"user": "a"}, [("producer_byte_rate", -5.0)], "Quota producer_byte_rate must be greater than 0"),
    ({"user": "a"}, [("producer_byte_rate", 0.0)], "Quota producer_byte_rate must be greater than 0"),
    ({"user": "a"}, [("no_such_quota", 1.0)], "Invalid configuration key no_such_quota"),
    ({"user": "a"}, [("connection_creation_rate", 1.0)],
     "Invalid configuration key connection_creation_rate"),
    ({"ip": "1.2.3.4"}, [("producer_byte_rate", 1.0)], "Invalid configuration key producer_byte_rate"),
    ({"user": "a"}, [("producer_byte_rate", 1.5)], "producer_byte_rate cannot be a fractional value."),
    ({"ip": "1.2.3.4"}, [("connection_creation_rate", 2.0**31)],
     "Proposed value for connection_creation_rate is too large for an INT."),
    ({"ip": "not a host!"}, [("connection_creation_rate", 1.0)],
     "not a host! is not a valid IP or resolvable host."),
    ({"user": "a"}, [("producer_byte_rate", 1.0), ("producer_byte_rate", 2.0)],
     "Ignoring duplicate entity ClientQuotaEntity(entries={user=a})"),
])
def test_alter_validation_errors(bootstrap, parts, ops, message_text):
    with KafkaWire.connect(bootstrap) as wire:
        r = alter(wire, [(parts, ops)])
        assert [(e.error_code, e.error_message) for e in r.entries] == [
            (INVALID_REQUEST, message_text)]
        assert [(e.entity_type, e.entity_name) for e in r.entries[0].entity] == sorted(
            [(t.replace("_", "-"), n) for t, n in parts.items()],
            key=lambda tn: {"client-id": 0, "user": 1, "ip": 2}.get(tn[0], 3))
        assert describe(wire, []).entries == []


def test_alter_per_entity_results(bootstrap):
    """A bad entity fails alone; the others are applied."""
    with KafkaWire.connect(bootstrap) as wire:
        r = alter(wire, [({"user": "a"}, [("producer_byte_rate", 10.0)]),
                         ({"user": "b"}, [("producer_byte_rate", -1.0)])])
        assert [e.error_code for e in r.entries] == [0, INVALID_REQUEST]
        assert described(describe(wire, [])) == {(("user", "a"),): {"producer_byte_rate": 10.0}}


@pytest.mark.parametrize(("components", "code", "message_text"), [
    ([("", 0, "x")], INVALID_REQUEST, "Invalid empty entity type."),
    ([("user", 0, "a"), ("user", 2, None)], INVALID_REQUEST,
     "Entity type user cannot appear more than once in the filter."),
    ([("group", 0, "a")], UNSUPPORTED_VERSION, "Unsupported entity type group"),
    ([("user", 0, None)], INVALID_REQUEST,
     "Request specified MATCH_TYPE_EXACT, but set match string to null."),
    ([("user", 1, "a")], INVALID_REQUEST,
     "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
    ([("user", 2, "a")], INVALID_REQUEST,
     "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."),
    ([("user", 7, None)], INVALID_REQUEST, "Unknown match type 7"),
    ([("ip", 2, None), ("client-id", 2, None)], INVALID_REQUEST,
     ("Invalid entity filter component combination. IP filter component should not be used "
     "with user or clientId filter component.")),
])
def test_describe_filter_errors(bootstrap, components, code, message_text):
    with KafkaWire.connect(bootstrap) as wire:
        r = describe(wire, components)
        assert (r.error_code, r.error_message, r.entries) == (code, message_text, None)


def test_quotas_survive_restart(tmp_path):
    with BrokerThread(tmp_path / "data") as b:
        with KafkaWire.connect(b.bootstrap) as wire:
            alter(wire, [({"user": "alice", "client_id": "app"},
                          [("producer_byte_rate", 4096.0), ("request_percentage", 50.0)])])
        b.restart()
        with KafkaWire.connect(b.bootstrap) as wire:
            assert described(describe(wire, [])) == {
                (("client-id", "app"), ("user", "alice")):
                    {"producer_byte_rate": 4096.0, "request_percentage": 50.0}}
        assert b.call(_enabled(b))


async def _enabled(b):
    return b.broker.quotas.enabled and b.broker.quotas.produce.quota_limit(("ANONYMOUS", "app")) is None \
        and b.broker.quotas.produce.quota_limit(("alice", "app")) == 4096.0


def test_produce_over_quota_is_throttled_and_muted(broker):
    """A client over producer_byte_rate gets the throttle time Kafka computes in its
    response, at once, and its connection reads nothing more until it has passed."""
    with KafkaWire.connect(broker.bootstrap, client_id="slow") as admin:
        create_topic(admin, "q")
        alter(admin, [({"client_id": "slow"}, [("producer_byte_rate", 1000.0)])])
    with KafkaWire.connect(broker.bootstrap, client_id="slow") as wire:
        batch = records_batch([b"x" * 20_000])
        r = wire.request(PRODUCE, 9, produce_request("q", 0, batch))
        assert r.responses[0].partition_responses[0].error_code == 0
        # ~20 kB over the 10 s minimum window = ~2000 B/s against 1000: ~10 s of silence
        assert 9_000 <= r.throttle_time_ms <= 10_500
        state = broker.call(_connection_state(broker, "slow"))
        assert state["throttled_for_ms"] > 5_000
        # a request sent now is read by no one until the throttle ends
        wire.send(PRODUCE, 9, produce_request("q", 0, records_batch([b"y"])))
        time.sleep(0.2)
        state = broker.call(_connection_state(broker, "slow"))
        assert state["reading_paused"] and state["slots"] == 0
    with KafkaWire.connect(broker.bootstrap, client_id="other") as other:
        r = other.request(PRODUCE, 9, produce_request("q", 0, records_batch([b"z" * 20_000])))
        assert r.throttle_time_ms == 0  # another client id: no quota applies
    assert broker.partition("q", 0).high_watermark == 2


def test_request_quota_throttles_and_empties_a_fetch(broker):
    """Over its request_percentage quota a client's answers carry a throttle time (at most
    one window, as Kafka caps it) and mute its connection; a fetch is then answered empty,
    as Kafka's handleFetchRequest does for either quota, and its records come later."""
    with KafkaWire.connect(broker.bootstrap) as admin:
        create_topic(admin, "rq")
        admin.request(PRODUCE, 9, produce_request("rq", 0, records_batch([b"v" * 100])))
        # 0.0001 % of a second: any request's event-loop time is far over it
        alter(admin, [({"client_id": "busy"}, [("request_percentage", 0.0001)])])
    with KafkaWire.connect(broker.bootstrap, client_id="busy") as wire:
        # nothing recorded before it: answered in full, its own time throttles what follows
        first = wire.request(FETCH, 12, fetch_request([("rq", 0, 0)]))
        assert first.responses[0].partitions[0].records
        assert 0 < first.throttle_time_ms <= 1000
        # read once the mute has passed, and still over the quota
        second = wire.request(FETCH, 12, fetch_request([("rq", 0, 0)]))
        assert 0 < second.throttle_time_ms <= 1000  # capped at one window (1 s)
        assert second.responses == []
        assert broker.call(_connection_state(broker, "busy"))["throttled_for_ms"] > 0
    with KafkaWire.connect(broker.bootstrap, client_id="calm") as other:
        r = other.request(FETCH, 12, fetch_request([("rq", 0, 0)]))
        assert r.throttle_time_ms == 0 and r.responses[0].partitions[0].records


async def _connection_state(broker, client_id):
    now = broker.broker.monotonic_ms()
    for conn in broker.broker.connections:
        if conn.throttled_until is not None:
            return {"throttled_for_ms": conn.throttled_until - now,
                    "reading_paused": conn.reading_paused, "slots": len(conn.slots)}
    return {"throttled_for_ms": 0, "reading_paused": False, "slots": 0}


def test_java_admin_alter_and_describe_client_quotas(bootstrap):
    """The Java AdminClient's alterClientQuotas / describeClientQuotas (kafka-clients 3.9.1):
    entity and default-entity quotas, validate-only, Kafka's error for an unknown key,
    contains vs containsOnly filters, and a removal."""
    def java(*args: str) -> dict:
        (result,) = run_program(JAVA_QUOTAS, "SemelQuotas", bootstrap, *args)
        return result

    assert java("alter", "user=alice", "producer_byte_rate", "1024") == {"ok": True}
    assert java("alter", "user=alice,client-id=<default>", "consumer_byte_rate", "2048") \
        == {"ok": True}
    assert java("alter", "client-id=<default>", "request_percentage", "12.5") == {"ok": True}
    assert java("alter", "user=bob", "producer_byte_rate", "1", "validate") == {"ok": True}
    refused = java("alter", "user=alice", "no_such_quota", "1")
    assert refused["ok"] is False and refused["error"] == "InvalidRequestException"
    alice = {"entity": {"user": "alice"}, "values": {"producer_byte_rate": 1024.0}}
    alice_default = {"entity": {"client-id": None, "user": "alice"},
                     "values": {"consumer_byte_rate": 2048.0}}
    assert java("describe", "user=alice")["entries"] == sorted(
        [alice, alice_default], key=lambda e: "client-id" not in e["entity"])
    assert java("describe", "strict", "user=alice")["entries"] == [alice]
    assert java("describe", "strict", "client-id")["entries"] == [
        {"entity": {"client-id": None}, "values": {"request_percentage": 12.5}}]
    assert java("describe", "user=bob")["entries"] == []  # validate only: nothing stored
    assert java("alter", "user=alice", "producer_byte_rate", "remove") == {"ok": True}
    assert java("describe", "strict", "user=alice")["entries"] == []
